/**
 * Prefix-aware replica choice, pure: what the `prefix_hash` and `prefix_cache`
 * balancers decide from a prompt's block keys (src/prefix/block-keys.ts) and the
 * candidates' loads and cache summaries (src/prefix/cache-summary.ts).
 *
 * Both tiers start from the same rule, so that independent isolates agree: the
 * candidates are ranked by rendezvous weight on the prompt's anchor key (the key of
 * its first ANCHOR_BLOCKS blocks, or of all its blocks when shorter), and any replica
 * above the bounded-load line ((1 + ε) × the mean fullness, counting the request
 * itself; KV use counts once it passes KV_PRESSURE) is skipped. Every isolate with the same membership computes the same ranking,
 * so a prefix lands on one replica whichever isolate routes it — before any replica has
 * reported that it holds it.
 *
 * The precise tier then scores the replicas under the line like Dynamo's KV router:
 * cost = a weighted sum of registered terms (src/policy/scorers/; by default
 * 2 × the prompt's share the replica would still have to prefill + its request
 * slots in use with this one), and takes the cheapest; ties go to the
 * rendezvous ranking. "Held" is the longest prefix in the replica's reported summary,
 * or in this isolate's own recent dispatches to it (they cover the second or two before
 * the replica's next report reaches the view).
 */
import { rendezvousWeight } from "../protocol/hashing.ts";
import { fullness, type ReplicaChoice } from "./pick-replica.ts";
import { DEFAULT_SCORER_WEIGHTS, costOf, scorers, type WeightedScore } from "./scorers/index.ts";
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
 * under the same line (bench/prefix-cache.ts --load-factor, 2026-12-02).
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
 * emptier (bench/prefix-cache.ts, 2026-12-02); the oracle's line counts requests only.
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
  const mean = f.reduce((s, x) => s + x, 0) / f.length;
  const line = (1 + epsilon) * mean;
  return candidates.filter((c, i) => f[i]! <= line + 1 / c.capacity);
}

/** `candidates` by rendezvous weight on `anchor`, heaviest first (ties by id, so the order is total). */
export function rendezvousOrder<T extends { id: string }>(candidates: readonly T[], anchor: string): T[] {
  const w = new Map(candidates.map((c) => [c.id, rendezvousWeight(anchor, c.id)] as const));
  return [...candidates].sort((a, b) => w.get(b.id)! - w.get(a.id)! || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
}

/**
 * The hash tier: the first replica in rendezvous order on the prompt's anchor that is
 * under the load line and has room; undefined when the prompt has no full block (the
 * caller falls back to the load-aware choice).
 */
export function pickByPrefixHash<T extends ReplicaChoice>(candidates: readonly T[], keys: readonly BlockKey[], epsilon = DEFAULT_LOAD_FACTOR): T | undefined {
  const anchor = anchorKey(keys);
  if (anchor === undefined || candidates.length === 0) return undefined;
  return rankedUnderLine(candidates, anchor, epsilon)[0];
}

/** The candidates under the load line (those with room first), in rendezvous order on `anchor`: where both tiers start. */
function rankedUnderLine<T extends ReplicaChoice>(candidates: readonly T[], anchor: string, epsilon: number): T[] {
  return rendezvousOrder(withRoomFirst(underLoadBound(candidates, epsilon)), anchor);
}

/** Prefers replicas with room when some have it (their own admission still decides). */
function withRoomFirst<T extends ReplicaChoice>(pool: T[]): T[] {
  const room = pool.filter((c) => fullness(c) < 1);
  return room.length > 0 ? room : pool;
}

export interface PrefixScoreOptions {
  /** ε of the bounded-load rule. */
  epsilon?: number;
  /** Weight of the uncached-prefill fraction (the `prefill` term), when `terms` is not given. */
  prefillWeight?: number;
  /** The weighted cost terms (src/policy/scorers/); default: prefillWeight × prefill + slots. */
  terms?: readonly WeightedScore[];
}

/** The default terms at `prefillWeight`: today's cost, prefillWeight × prefill + 1 × slots. */
const defaultTerms = new Map<number, WeightedScore[]>();
function termsAt(prefillWeight: number): readonly WeightedScore[] {
  let terms = defaultTerms.get(prefillWeight);
  if (!terms) defaultTerms.set(prefillWeight, (terms = scorers.resolve({ ...DEFAULT_SCORER_WEIGHTS, prefill: prefillWeight })));
  return terms;
}

/**
 * The precise tier. `held(c)` is how many leading blocks of `keys` candidate `c` holds
 * (summary or recent dispatches). Returns undefined when the prompt has no full block.
 */
export function pickByPrefixCache<T extends ReplicaChoice>(
  candidates: readonly T[],
  keys: readonly BlockKey[],
  held: (c: T) => number,
  options: PrefixScoreOptions = {},
): T | undefined {
  const anchor = anchorKey(keys);
  if (anchor === undefined || candidates.length === 0) return undefined;
  const terms = options.terms ?? termsAt(options.prefillWeight ?? DEFAULT_PREFILL_WEIGHT);
  const ranked = rankedUnderLine(candidates, anchor, options.epsilon ?? DEFAULT_LOAD_FACTOR);
  let best: T | undefined;
  let bestCost = Infinity;
  for (const c of ranked) {
    const cost = costOf(terms, c, { keys, held: held(c) });
    // Strictly cheaper only: equal costs keep the earlier (rendezvous) replica.
    if (cost < bestCost) {
      best = c;
      bestCost = cost;
    }
  }
  return best;
}
