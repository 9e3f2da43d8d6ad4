/**
 * One balancer instance's memory of the prefixes it sent lately: after replica R
 * accepted a prompt with block keys K, R very likely holds K's blocks for a while
 * (its engine caches what it prefilled). A replica's own report says so too, but only
 * a second or two later; this memory covers that gap, and a replica that reports no
 * cache summary at all. Learned alone per isolate (as GIE's approximate scorer learns
 * per gateway), bounded, forgotten after RECENT_PREFIX_TTL_MS.
 *
 * What is kept per prompt: the keys at every RECENT_PREFIX_STRIDE-th block and the
 * last one. A chained key names its whole prefix, so the deepest key of a later prompt
 * found here tells how far it matches, to within a stride: a prompt that shares a
 * system prompt with an earlier one but asks another question matches at the last
 * stride key inside the shared part (keeping only the deepest key would find nothing).
 *
 * Peers: the same keys travel to the location's other isolates through its relay
 * (src/state/dispatch-board.ts), which learn them with recordKept, so a conversation's
 * next turn routed by another isolate finds its history too.
 *
 * Pure state: time is passed in.
 */
// @ts-nocheck

import type { BlockKey } from "../prefix/block-keys.ts";
import { MAX_DISPATCH_NOTE_KEYS } from "../protocol/limits.ts";

/**
 * How long a dispatch is taken as proof that its replica holds the prefix (vLLM evicts on
 * pressure, not on time), unless the replica's own summary is newer (SUMMARY_VIEW_LAG_MS).
 */
export const RECENT_PREFIX_TTL_MS = 30_000;
/**
 * A summary an isolate first held at T was built after every dispatch recorded before
 * T − this, with its prefill done: the report's coalescing window (≤ 1 s busy), the
 * relay's and the view's refresh (~1 s together), and a prefill's wait (~1 s). From
 * then the summary says what the replica holds, evictions included, and older records
 * of dispatches to it no longer count (under cache pressure they named blocks it had
 * evicted, and held conversations on a replica that had to prefill them again).
 */
export const SUMMARY_VIEW_LAG_MS = 3_000;
/** Keys kept at most (about 4,096 prompts of ~1,000 tokens: 3 stride keys and the last); the least recently sent go first. */
export const RECENT_PREFIX_MAX_KEYS = 16_384;
/** Every this many blocks (16 × 16 = 256 tokens) a prompt's key is kept, and its last. */
export const RECENT_PREFIX_STRIDE = 16;

export class RecentPrefixes {
  /** Key → replica → until when; in order of last record (oldest first). */
  readonly #keys = new Map<BlockKey, Map<string, number>>();
  readonly #maxKeys: number;
  readonly #ttlMs: number;

  constructor(maxKeys = RECENT_PREFIX_MAX_KEYS, ttlMs = RECENT_PREFIX_TTL_MS) {
    this.#maxKeys = maxKeys;
    this.#ttlMs = ttlMs;
  }

  /** `replica` accepted a prompt with these keys at `now`. */
  record(replica: string, keys: readonly BlockKey[], now: number): void {
    this.recordKept(replica, keptKeys(keys), now);
  }

  /** `replica` accepted a prompt whose kept keys (keptKeys) are `kept`: this isolate's dispatch, or a peer's. */
  recordKept(replica: string, kept: readonly BlockKey[], now: number): void {
    if (kept.length === 0) return;
    this.#forgetExpired(now);
    const until = now + this.#ttlMs;
    for (const key of kept) this.#note(key, replica, until);
  }

  /**
   * For each replica this memory has sent a prefix of `keys` to: how many leading blocks
   * it holds. `notBefore`: per replica, records made before this epoch ms do not count
   * (a newer word from the replica itself supersedes them).
   */
  held(keys: readonly BlockKey[], now: number, notBefore?: ReadonlyMap<string, number>): Map<string, number> {
    const out = new Map<string, number>();
    if (this.#keys.size === 0) return out;
    for (let i = keys.length - 1; i >= 0; i--) {
      const replicas = this.#keys.get(keys[i]!);
      if (!replicas) continue;
      for (const [replica, until] of replicas) {
        if (until <= now || out.has(replica)) continue;
        const cutoff = notBefore?.get(replica);
        if (cutoff !== undefined && until - this.#ttlMs < cutoff) continue;
        out.set(replica, i + 1);
      }
    }
    return out;
  }

  /** Keys held now (observability and tests). */
  get size(): number {
    return this.#keys.size;
  }

  #note(key: BlockKey, replica: string, until: number): void {
    let replicas = this.#keys.get(key);
    if (replicas) this.#keys.delete(key);
    else replicas = new Map();
    replicas.set(replica, until);
    this.#keys.set(key, replicas);
    if (this.#keys.size > this.#maxKeys) {
      const oldest = this.#keys.keys().next().value;
      if (oldest !== undefined) this.#keys.delete(oldest);
    }
  }

  /** Drops keys whose every record expired: they sit at the front (ordered by last record, one TTL for all). */
  #forgetExpired(now: number): void {
    for (const [key, replicas] of this.#keys) {
      let live = false;
      for (const until of replicas.values()) if (until > now) live = true;
      if (live) return;
      this.#keys.delete(key);
    }
  }
}

/**
 * The keys of a prompt this memory keeps, and a dispatch note carries: every
 * RECENT_PREFIX_STRIDE-th block's and the last's, at most MAX_DISPATCH_NOTE_KEYS
 * (the first ones and the last: a prompt of more than ~16,000 tokens matches its
 * tail only by its last key).
 */
export function keptKeys(keys: readonly BlockKey[]): BlockKey[] {
  const last = keys.length - 1;
  if (last < 0) return [];
  const kept: BlockKey[] = [];
  for (let i = RECENT_PREFIX_STRIDE - 1; i < last && kept.length < MAX_DISPATCH_NOTE_KEYS - 1; i += RECENT_PREFIX_STRIDE) kept.push(keys[i]!);
  kept.push(keys[last]!);
  return kept;
}
