/**
 * Per-API-key rate limits on the hot path: a token bucket per key in the
 * isolate, answering at once, reconciled in the background with the key's
 * global bucket in a RateLimiter Durable Object at most every
 * RATE_SYNC_INTERVAL_MS per deployment (never once per request).
 */
import type { Deployment } from "../config/deployment.ts";
import { rateLimitShard, type RateRemaining, type RateUse } from "../policy/rate-limit-sync.ts";
import { fullBucket, refill, takeToken, type BucketLimits, type TokenBucket } from "../policy/token-bucket.ts";

export const RATE_SYNC_INTERVAL_MS = 1_000;

/** The RateLimiter objects as the proxy sees them (RPC in the Worker, a fake in tests). */
export type RateSync = (deployment: string, shard: number, limits: BucketLimits, uses: RateUse[]) => Promise<RateRemaining[]>;

interface KeyState {
  bucket: TokenBucket;
  /** Let through since the last sync was sent. */
  used: number;
  /** Epoch ms of the first of those. */
  since: number;
}

export type RateDecision = { ok: true } | { ok: false; retryAfterSeconds: number };

export class RateLimits {
  readonly #sync: RateSync;
  readonly #now: () => number;
  readonly #keys = new Map<string, Map<string, KeyState>>();
  readonly #nextSyncAt = new Map<string, number>();
  /** Object calls made (observability and tests). */
  syncs = 0;

  constructor(sync: RateSync, now: () => number = Date.now) {
    this.#sync = sync;
    this.#now = now;
  }

  take(deployment: Deployment, keyHash: string, background: (p: Promise<unknown>) => void): RateDecision {
    const limits = deployment.access.rateLimit;
    if (!limits) return { ok: true };
    const now = this.#now();
    let keys = this.#keys.get(deployment.name);
    if (!keys) {
      keys = new Map();
      this.#keys.set(deployment.name, keys);
    }
    let k = keys.get(keyHash);
    if (!k) {
      k = { bucket: fullBucket(limits, now), used: 0, since: now };
      keys.set(keyHash, k);
    }
    const taken = takeToken(k.bucket, limits, now);
    if (taken.ok) {
      if (k.used === 0) k.since = now;
      k.used++;
    }
    if (now >= (this.#nextSyncAt.get(deployment.name) ?? 0)) {
      this.#nextSyncAt.set(deployment.name, now + RATE_SYNC_INTERVAL_MS);
      background(this.#syncDeployment(deployment.name, limits, keys));
    }
    return taken.ok ? taken : { ok: false, retryAfterSeconds: Math.max(1, Math.ceil(taken.retryAfterMs / 1000)) };
  }

  async #syncDeployment(deployment: string, limits: BucketLimits, keys: Map<string, KeyState>): Promise<void> {
    const byShard = new Map<number, RateUse[]>();
    for (const [key, k] of keys) {
      const shard = rateLimitShard(key);
      if (!byShard.has(shard)) byShard.set(shard, []);
      byShard.get(shard)!.push({ key, used: k.used, since: k.since });
      k.used = 0;
    }
    await Promise.all(
      [...byShard].map(async ([shard, uses]) => {
        this.syncs++;
        try {
          for (const r of await this.#sync(deployment, shard, limits, uses)) {
            const k = keys.get(r.key);
            // The global bucket counts every isolate's use, ours included, up to
            // when the sync was sent; what we let through since still comes off.
            if (k) k.bucket.tokens = Math.min(k.bucket.tokens, r.tokens - k.used);
          }
        } catch (err) {
          // Local limits still hold; give the uses back so the next sync reports them.
          for (const u of uses) {
            const k = keys.get(u.key);
            if (!k) continue;
            if (k.used === 0 || u.since < k.since) k.since = u.since;
            k.used += u.used;
          }
          console.error(JSON.stringify({ msg: "rate limit sync failed", deployment, error: String(err) }));
        }
      }),
    );
    // Keys idle since the previous sync with a full bucket carry no state worth keeping.
    const now = this.#now();
    for (const [key, k] of keys) {
      refill(k.bucket, limits, now);
      if (k.used === 0 && k.bucket.tokens >= limits.burst) keys.delete(key);
    }
  }
}
