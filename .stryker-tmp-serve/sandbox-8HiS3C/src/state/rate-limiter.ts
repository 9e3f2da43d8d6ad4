/**
 * The RateLimiter Durable Object: global token buckets for one shard of a
 * deployment's API keys (keys spread over RATE_LIMIT_SHARDS objects by hash).
 * Isolates enforce limits locally and, about once a second while a key is in
 * use, report what they let through and adopt the global remainder, so a key's
 * limit holds across isolates with at most one sync interval of overshoot per
 * isolate. Buckets are soft state, in memory only: after a restart they start
 * full (one burst of extra allowance), which is why nothing here is written.
 */
// @ts-nocheck

import { DurableObject } from "cloudflare:workers";
import { chargeUse, type RateRemaining, type RateUse } from "../policy/rate-limit-sync.ts";
import { fullBucket, type BucketLimits, type TokenBucket } from "../policy/token-bucket.ts";

/** The binding of the RateLimiter objects (wrangler.toml: RATE_LIMITS). */
export interface RateLimitsBinding {
  RATE_LIMITS: DurableObjectNamespace<RateLimiter>;
}

/** A RateLimiter shard of a deployment. */
export function rateLimiterFor(env: RateLimitsBinding, deployment: string, shard: number): DurableObjectStub<RateLimiter> {
  return env.RATE_LIMITS.get(env.RATE_LIMITS.idFromName(`${deployment}/ratelimit/${shard}`));
}

export class RateLimiter extends DurableObject<RateLimitsBinding> {
  readonly #buckets = new Map<string, TokenBucket>();

  sync(limits: BucketLimits, uses: RateUse[]): RateRemaining[] {
    const now = Date.now();
    return uses.map((use) => {
      let b = this.#buckets.get(use.key);
      if (!b) {
        b = fullBucket(limits, Math.min(now, use.since));
        this.#buckets.set(use.key, b);
      }
      return { key: use.key, tokens: chargeUse(b, limits, use, now) };
    });
  }
}
