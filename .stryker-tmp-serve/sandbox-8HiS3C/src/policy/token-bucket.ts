/**
 * A token bucket: `rate` tokens a second, holding at most `burst`. Pure; time is
 * passed in. Tokens may go negative when a reconciliation learns that other
 * isolates spent them: the key then waits until the bucket refills.
 */
// @ts-nocheck

export interface TokenBucket {
  tokens: number;
  /** Epoch ms of the last refill. */
  at: number;
}

export interface BucketLimits {
  requestsPerSecond: number;
  burst: number;
}

export function fullBucket(limits: BucketLimits, now: number): TokenBucket {
  return { tokens: limits.burst, at: now };
}

export function refill(b: TokenBucket, limits: BucketLimits, now: number): void {
  if (now > b.at) {
    b.tokens = Math.min(limits.burst, b.tokens + ((now - b.at) / 1000) * limits.requestsPerSecond);
    b.at = now;
  }
}

/** Takes one token; when there is none, says how long until there is. */
export function takeToken(b: TokenBucket, limits: BucketLimits, now: number): { ok: true } | { ok: false; retryAfterMs: number } {
  refill(b, limits, now);
  if (b.tokens >= 1) {
    b.tokens -= 1;
    return { ok: true };
  }
  return { ok: false, retryAfterMs: Math.ceil(((1 - b.tokens) / limits.requestsPerSecond) * 1000) };
}
