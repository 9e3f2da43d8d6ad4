/**
 * Who may use what: a private deployment's API keys (checked against this
 * isolate's copy of the key set), the per-key rate limits, and the admin secret.
 */
import { errorResponse, timingSafeEqualStrings } from "../../protocol/index.ts";
import { bearerToken, hashApiKey } from "../../state/api-key-format.ts";
import { BackgroundRefresh } from "./view.ts";
import type { Deployment } from "../../config/deployment.ts";
import type { ActiveKey, KeyPriority } from "../../state/access-keys.ts";
import { RATE_LIMIT_SHARDS, rateLimitShard, type RateRemaining, type RateUse } from "../../policy/rate-limit-sync.ts";
import { fullBucket, refill, takeToken, type BucketLimits, type TokenBucket } from "../../policy/token-bucket.ts";
import type { Env } from "../../env.ts";

/**
 * Client API key checks on the hot path, with no Durable Object call per
 * request: each isolate holds the set of active key hashes per deployment,
 * fetched from its AccessKeys object and refreshed in the background every
 * KEY_SET_TTL_MS. A new or revoked key takes effect everywhere within that TTL
 * (at once in the isolate that served the admin call). Fails closed: without a
 * key set (the object unreachable since the isolate started) nobody gets in.
 */
export const KEY_SET_TTL_MS = 10_000;
/**
 * The TTL of a key set that comes from a relay, which holds it for up to
 * RELAY_KEY_SET_TTL_MS (5 s) itself: a key change still takes effect
 * everywhere within 10 s.
 */
export const RELAYED_KEY_SET_TTL_MS = 5_000;
const REFRESH_FAILURE_BACKOFF_MS = 1_000;

export type KeySetSource = (deployment: string) => Promise<ActiveKey[]>;

/** A deployment's keys in force, by hash: each one's priority class, or null for none. */
type KeySet = Map<string, KeyPriority | null>;

export type KeyCheck =
  | { ok: true; keyHash: string; priority?: KeyPriority }
  | { ok: false; code: "unauthorized" | "auth_unavailable"; message: string };

export class ApiKeyCache {
  readonly #sets: BackgroundRefresh<KeySet | null, ActiveKey[]>;

  constructor(source: KeySetSource, now: () => number = Date.now, ttlFor: (deployment: string) => number = () => KEY_SET_TTL_MS) {
    this.#sets = new BackgroundRefresh<KeySet | null, ActiveKey[]>({
      source,
      // No set until the first fetch succeeds: fail closed meanwhile.
      initial: () => null,
      apply: (_old, keys) => new Map(keys.map((k) => [k.hash, k.priority ?? null])),
      ttlMs: ttlFor,
      failureBackoffMs: REFRESH_FAILURE_BACKOFF_MS,
      what: "api key",
      now,
    });
  }

  /** Object calls made (observability and tests). */
  get refreshes(): number {
    return this.#sets.refreshes;
  }

  /** checkAny for one deployment, without its arrays (it runs on every request to a private deployment). */
  async check(deployment: string, authorization: string | null | undefined, background: (p: Promise<unknown>) => void): Promise<KeyCheck> {
    const token = bearerToken(authorization);
    if (token === null) return NO_KEY;
    const [keyHash, hashes] = await Promise.all([hashApiKey(token), this.#sets.get(deployment, background, hasNoSet)]);
    const priority = hashes?.get(keyHash);
    if (priority !== undefined) return priority === null ? { ok: true, keyHash } : { ok: true, keyHash, priority };
    return hashes ? NOT_VALID : UNAVAILABLE;
  }

  /**
   * Whether the key is valid for at least one of `deployments`: what the OpenAI
   * routes ask before they read a body, when every deployment there is private
   * (the body names the deployment, so the exact check comes after it).
   */
  async checkAny(deployments: readonly string[], authorization: string | null | undefined, background: (p: Promise<unknown>) => void): Promise<KeyCheck> {
    const token = bearerToken(authorization);
    if (token === null) return NO_KEY;
    const [keyHash, ...sets] = await Promise.all([hashApiKey(token), ...deployments.map((d) => this.#sets.get(d, background, hasNoSet))]);
    if (sets.some((hashes) => hashes?.has(keyHash))) return { ok: true, keyHash };
    if (sets.some((hashes) => !hashes)) return UNAVAILABLE;
    return NOT_VALID;
  }

  /** The deployments among `deployments` this key may use (none without a key, or while sets are unknown). */
  async usableBy(deployments: readonly string[], authorization: string | null | undefined, background: (p: Promise<unknown>) => void): Promise<Set<string>> {
    const token = bearerToken(authorization);
    if (token === null || deployments.length === 0) return new Set();
    const [keyHash, ...sets] = await Promise.all([hashApiKey(token), ...deployments.map((d) => this.#sets.get(d, background, hasNoSet))]);
    return new Set(deployments.filter((_, i) => sets[i]?.has(keyHash)));
  }

  /** Forgets the isolate's key set (after this isolate created or revoked a key). */
  invalidate(deployment: string): void {
    this.#sets.forget(deployment);
  }
}

/** No key set yet (fail closed): the key set must be fetched before anyone gets in. */
const hasNoSet = (s: { value: KeySet | null }) => s.value === null;

// The refusals, made once and frozen: every request refused for the same reason gets the same one.
const NO_KEY: KeyCheck = Object.freeze({ ok: false, code: "unauthorized", message: "this deployment needs an API key: send Authorization: Bearer <key>" });
const UNAVAILABLE: KeyCheck = Object.freeze({ ok: false, code: "auth_unavailable", message: "API keys cannot be checked right now; retry shortly" });
const NOT_VALID: KeyCheck = Object.freeze({ ok: false, code: "unauthorized", message: "API key not valid for this deployment (unknown or revoked)" });

/** The JSON refusal of a failed key check (401 with WWW-Authenticate, or 503 with Retry-After). */
export function keyRefusal(key: Extract<KeyCheck, { ok: false }>, requestId: string): Response {
  if (key.code === "unauthorized") return errorResponse(key.code, key.message, { requestId, headers: { "www-authenticate": 'Bearer realm="switchyard"' } });
  return errorResponse(key.code, key.message, { requestId, retryAfterSeconds: 1 });
}

/**
 * Per-API-key rate limits on the hot path: a token bucket per key in the
 * isolate, answering at once, reconciled in the background with the key's
 * global bucket in a RateLimiter Durable Object at most every
 * RATE_SYNC_INTERVAL_MS per deployment (never once per request).
 */
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

/**
 * What a RateLimits counts: requests (`access.rateLimit`, one per request, taken
 * before it goes) or tokens (`access.tokenLimit`, charged after the answer, when its
 * usage is known; a request goes while the key's bucket is above zero). Each kind
 * keeps its buckets in RateLimiter shards of its own (`shardOffset`), so a sync
 * (and a relay's batch of them) never mixes two kinds' limits.
 */
export interface RateKind {
  limitsOf(deployment: Deployment): BucketLimits | undefined;
  shardOffset: number;
}

export const REQUEST_RATE: RateKind = { limitsOf: (d) => d.access.rateLimit, shardOffset: 0 };
export const TOKEN_RATE: RateKind = {
  limitsOf: (d) => {
    const t = d.access.tokenLimit;
    return t && { requestsPerSecond: t.tokensPerMinute / 60, burst: t.burst ?? t.tokensPerMinute };
  },
  shardOffset: RATE_LIMIT_SHARDS,
};

export class RateLimits {
  readonly #sync: RateSync;
  readonly #now: () => number;
  readonly #kind: RateKind;
  readonly #keys = new Map<string, Map<string, KeyState>>();
  readonly #nextSyncAt = new Map<string, number>();
  /** Object calls made (observability and tests). */
  syncs = 0;

  constructor(sync: RateSync, now: () => number = Date.now, kind: RateKind = REQUEST_RATE) {
    this.#sync = sync;
    this.#now = now;
    this.#kind = kind;
  }

  /** Takes one from the key's bucket (a request), or says when to come back. */
  take(deployment: Deployment, keyHash: string, background: (p: Promise<unknown>) => void): RateDecision {
    const limits = this.#kind.limitsOf(deployment);
    if (!limits) return { ok: true };
    const now = this.#now();
    const k = this.#key(deployment.name, keyHash, limits, now);
    const taken = takeToken(k.bucket, limits, now);
    if (taken.ok) this.#used(k, 1, now);
    this.#maybeSync(deployment.name, limits, now, background);
    return taken.ok ? taken : { ok: false, retryAfterSeconds: Math.max(1, Math.ceil(taken.retryAfterMs / 1000)) };
  }

  /** Whether the key has any allowance left (its bucket above zero): a token-limited request's cost is known only after it. */
  check(deployment: Deployment, keyHash: string, background: (p: Promise<unknown>) => void): RateDecision {
    const limits = this.#kind.limitsOf(deployment);
    if (!limits) return { ok: true };
    const now = this.#now();
    const k = this.#key(deployment.name, keyHash, limits, now);
    refill(k.bucket, limits, now);
    this.#maybeSync(deployment.name, limits, now, background);
    if (k.bucket.tokens > 0) return { ok: true };
    return { ok: false, retryAfterSeconds: Math.max(1, Math.ceil((1 - k.bucket.tokens) / limits.requestsPerSecond)) };
  }

  /** Charges `amount` (an answer's tokens) to the key's bucket, which may go below zero. */
  charge(deployment: Deployment, keyHash: string, amount: number, background: (p: Promise<unknown>) => void): void {
    const limits = this.#kind.limitsOf(deployment);
    if (!limits || !(amount > 0)) return;
    const now = this.#now();
    const k = this.#key(deployment.name, keyHash, limits, now);
    refill(k.bucket, limits, now);
    k.bucket.tokens -= amount;
    this.#used(k, amount, now);
    this.#maybeSync(deployment.name, limits, now, background);
  }

  #key(deployment: string, keyHash: string, limits: BucketLimits, now: number): KeyState {
    let keys = this.#keys.get(deployment);
    if (!keys) {
      keys = new Map();
      this.#keys.set(deployment, keys);
    }
    let k = keys.get(keyHash);
    if (!k) {
      k = { bucket: fullBucket(limits, now), used: 0, since: now };
      keys.set(keyHash, k);
    }
    return k;
  }

  #used(k: KeyState, amount: number, now: number): void {
    if (k.used === 0) k.since = now;
    k.used += amount;
  }

  #maybeSync(deployment: string, limits: BucketLimits, now: number, background: (p: Promise<unknown>) => void): void {
    if (now < (this.#nextSyncAt.get(deployment) ?? 0)) return;
    this.#nextSyncAt.set(deployment, now + RATE_SYNC_INTERVAL_MS);
    background(this.#syncDeployment(deployment, limits, this.#keys.get(deployment)!));
  }

  async #syncDeployment(deployment: string, limits: BucketLimits, keys: Map<string, KeyState>): Promise<void> {
    const byShard = new Map<number, RateUse[]>();
    for (const [key, k] of keys) {
      const shard = this.#kind.shardOffset + rateLimitShard(key);
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

/**
 * Constant-time comparison of a `Bearer <secret>` header against the expected secret.
 * The supplied token goes first: the comparison's time follows its length, not the secret's.
 */
export function bearerMatches(header: string | undefined | null, secret: string | undefined): boolean {
  if (!secret || !header?.startsWith("Bearer ")) return false;
  return timingSafeEqualStrings(header.slice(7), secret);
}

/** The 401 an admin route answers when `authorization` does not carry the admin secret; null when it does. Admin routes are off without a secret. */
export function adminRefusal(env: Pick<Env, "SWITCHYARD_ADMIN_SECRET">, authorization: string | undefined | null): Response | null {
  if (bearerMatches(authorization, env.SWITCHYARD_ADMIN_SECRET)) return null;
  return errorResponse("unauthorized", "admin secret missing or wrong", { headers: { "www-authenticate": "Bearer" } });
}
