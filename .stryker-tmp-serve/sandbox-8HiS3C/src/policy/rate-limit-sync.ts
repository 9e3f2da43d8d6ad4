/**
 * Reconciling per-isolate rate limits with a key's global bucket (pure; the
 * RateLimiter Durable Object applies it, src/proxy/serve/access.ts sends it).
 *
 * An isolate reports the requests it let through since its last sync and when
 * the first of them happened. Uses are charged to the global bucket at that
 * time, before the bucket refills up to now: charging them at sync time instead
 * would punish a client that paused between bursts (the bucket would have
 * refilled to full, then lost a whole burst at once).
 */
// @ts-nocheck

import { refill, type BucketLimits, type TokenBucket } from "./token-bucket.ts";

export const RATE_LIMIT_SHARDS = 16;

export interface RateUse {
  key: string;
  /** Requests the isolate let through since its last sync for this key. */
  used: number;
  /** Epoch ms of the first of them. */
  since: number;
}

export interface RateRemaining {
  key: string;
  /** Tokens left in the global bucket after this sync (may be negative). */
  tokens: number;
}

/** Charges `use` to the global bucket and returns what is left now. */
export function chargeUse(b: TokenBucket, limits: BucketLimits, use: RateUse, now: number): number {
  refill(b, limits, Math.min(now, use.since));
  b.tokens -= use.used;
  refill(b, limits, now);
  return b.tokens;
}

/** Shard of a key (by its hex hash). */
export function rateLimitShard(keyHash: string): number {
  const n = Number.parseInt(keyHash.slice(0, 8), 16);
  return Number.isFinite(n) ? n % RATE_LIMIT_SHARDS : 0;
}
