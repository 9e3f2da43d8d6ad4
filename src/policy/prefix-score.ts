/**
 * The rules both prefix profiles stand on, pure: the prompt's anchor key, the
 * bounded-load line (the `load_line` filter, ./balancers/filters.ts) and the
 * rendezvous order on the anchor (the `rendezvous` and `cheapest` pickers,
 * ./balancers/pickers.ts).
 *
 * Independent isolates must agree: every isolate with the same membership ranks the
 * candidates by rendezvous weight on the prompt's anchor key (the key of its first
 * ANCHOR_BLOCKS blocks, or of all its blocks when shorter) and skips any replica above
 * the bounded-load line ((1 + ε) × the mean fullness, counting the request itself; KV
 * use counts once it passes KV_PRESSURE). So a prefix lands on one replica whichever
 * isolate routes it, before any replica has reported that it holds it.
 */
import { rendezvousWeight } from "../protocol/hashing.ts";
import type { ReplicaChoice } from "./pick-replica.ts";
import type { BlockKey } from "../prefix/block-keys.ts";

/** Blocks the rendezvous anchor covers: 16 × 16 = 256 tokens, past a shared greeting, within most system prompts. */
export const ANCHOR_BLOCKS = 16;
/**
 * Default ε of the bounded-load rule. KubeAI and HAProxy's consistent hashing use
 * 0.25–0.5, but they see every request they balance; an edge isolate sees its own and
 * the others' only as reports up to ~2 s old, which for short requests are mostly
 * finished ones. At 0.25 that stale load pushed conversations off the replica holding
 * their history (4 isolates: 0.89 of the oracle's hit ratio, p99 TTFT 400 ms); at 1
 * (line at twice the mean) 0.996–1.007 of the oracle's and p99 82 ms, with the oracle
 * under the same line (bench/prefix-cache/prefix-cache.ts --load-factor, 2026-12-02).
 */
export const DEFAULT_LOAD_FACTOR = 1;
/** Default weight of the uncached-prefill fraction against fullness. */
export const DEFAULT_PREFILL_WEIGHT = 2;

/** The key the rendezvous ranking hashes, or undefined when the prompt has no full block. */
export function anchorKey(keys: readonly BlockKey[]): BlockKey | undefined {
  return keys.length === 0 ? undefined : keys[Math.min(keys.length, ANCHOR_BLOCKS) - 1];
}

/** KV use from which a replica counts as full by its KV cache (vLLM starts preempting near 1). */
export const KV_PRESSURE = 0.9;

/**
 * Fullness once this request is added (so an idle fleet is not all "at the mean"), as the
 * load line reads it: request slots, and KV use only once it is near full. Below that,
 * KV use swings by ~1/8 with each long prompt a replica runs, and counting it moved
 * prefixes (and conversations) off the replicas that cache them for replicas one request
 * emptier (bench/prefix-cache/prefix-cache.ts, 2026-12-02); the oracle's line counts requests only.
 */
function lineFullness(c: ReplicaChoice): number {
  const slots = (c.load + 1) / c.capacity;
  return c.kv !== undefined && c.kv >= KV_PRESSURE && c.kv > slots ? c.kv : slots;
}

/**
 * The candidates under the bounded-load line: fullness with this request ≤ (1 + ε) ×
 * the mean of the same over all candidates, plus one request of slack. The slack is
 * what consistent hashing with bounded loads gets from rounding its line up to whole
 * requests: without it, on a quiet fleet a prefix's second concurrent request would
 * already leave its replica (and prefill the whole prefix elsewhere). Never empty when
 * `candidates` is not (the least full is always under the line).
 */
export function underLoadBound<T extends ReplicaChoice>(candidates: readonly T[], epsilon = DEFAULT_LOAD_FACTOR): T[] {
  if (candidates.length <= 1) return [...candidates];
  const f = candidates.map(lineFullness);
  const line = loadLine(f, epsilon);
  return candidates.filter((c, i) =>
    // By slots (the usual case), the whole-request limit the replica checks (loadLineLimit), so that
    // rounding cannot put a replica on both sides: 18/12 ≤ 1.41666… + 1/12 came out false in floating point.
    f[i] === (c.load + 1) / c.capacity ? c.load <= slotLimit(line, c.capacity) : f[i]! <= line + 1 / c.capacity,
  );
}

/** The most requests (before this one) a replica of `capacity` may hold under the line: its slots' share of it, to the whole request below. */
function slotLimit(line: number, capacity: number): number {
  return Math.floor(line * capacity + 1e-9);
}

function loadLine(fullness: readonly number[], epsilon: number): number {
  return (1 + epsilon) * (fullness.reduce((s, x) => s + x, 0) / fullness.length);
}

/**
 * The bounded-load line for `chosen` as a count of requests: the most load (ongoing +
 * queued, before this request) at which it is under the line that `candidates` set, as
 * underLoadBound draws it. A replica checks it against its exact load (the dispatch's
 * x-switchyard-load-limit) where the edge's view of that load lags. Undefined with
 * fewer than two candidates (there is nowhere else to go).
 */
export function loadLineLimit(candidates: readonly ReplicaChoice[], chosen: ReplicaChoice, epsilon = DEFAULT_LOAD_FACTOR): number | undefined {
  if (candidates.length <= 1) return undefined;
  // (load + 1) / capacity ≤ line + 1 / capacity ⇔ load ≤ line × capacity (slots only: a replica counts requests).
  return slotLimit(loadLine(candidates.map(lineFullness), epsilon), chosen.capacity);
}

/** `candidates` by rendezvous weight on `anchor`, heaviest first (ties by id, so the order is total). */
export function rendezvousOrder<T extends { id: string }>(candidates: readonly T[], anchor: string): T[] {
  const w = new Map(candidates.map((c) => [c.id, rendezvousWeight(anchor, c.id)] as const));
  return [...candidates].sort((a, b) => w.get(b.id)! - w.get(a.id)! || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}
