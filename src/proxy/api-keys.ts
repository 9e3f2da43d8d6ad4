/**
 * Client API key checks on the hot path, with no Durable Object call per
 * request: each isolate holds the set of active key hashes per deployment,
 * fetched from its AccessKeys object and refreshed in the background every
 * KEY_SET_TTL_MS. A new or revoked key takes effect everywhere within that TTL
 * (at once in the isolate that served the admin call). Fails closed: without a
 * key set (the object unreachable since the isolate started) nobody gets in.
 */
import { errorResponse } from "../protocol/index.ts";
import { bearerToken, hashApiKey } from "../state/api-key-format.ts";
import { BackgroundRefresh } from "./background-refresh.ts";

export const KEY_SET_TTL_MS = 10_000;
/**
 * The TTL of a key set that comes from a relay, which holds it for up to
 * RELAY_KEY_SET_TTL_MS (5 s) itself: a key change still takes effect
 * everywhere within 10 s.
 */
export const RELAYED_KEY_SET_TTL_MS = 5_000;
const REFRESH_FAILURE_BACKOFF_MS = 1_000;

export type KeySetSource = (deployment: string) => Promise<string[]>;

export type KeyCheck =
  | { ok: true; keyHash: string }
  | { ok: false; code: "unauthorized" | "auth_unavailable"; message: string };

export class ApiKeyCache {
  readonly #sets: BackgroundRefresh<Set<string> | null, string[]>;

  constructor(source: KeySetSource, now: () => number = Date.now, ttlFor: (deployment: string) => number = () => KEY_SET_TTL_MS) {
    this.#sets = new BackgroundRefresh<Set<string> | null, string[]>({
      source,
      // No set until the first fetch succeeds: fail closed meanwhile.
      initial: () => null,
      apply: (_old, hashes) => new Set(hashes),
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
    if (hashes?.has(keyHash)) return { ok: true, keyHash };
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
const hasNoSet = (s: { value: Set<string> | null }) => s.value === null;

// The refusals, made once and frozen: every request refused for the same reason gets the same one.
const NO_KEY: KeyCheck = Object.freeze({ ok: false, code: "unauthorized", message: "this deployment needs an API key: send Authorization: Bearer <key>" });
const UNAVAILABLE: KeyCheck = Object.freeze({ ok: false, code: "auth_unavailable", message: "API keys cannot be checked right now; retry shortly" });
const NOT_VALID: KeyCheck = Object.freeze({ ok: false, code: "unauthorized", message: "API key not valid for this deployment (unknown or revoked)" });

/** The JSON refusal of a failed key check (401 with WWW-Authenticate, or 503 with Retry-After). */
export function keyRefusal(key: Extract<KeyCheck, { ok: false }>, requestId: string): Response {
  if (key.code === "unauthorized") return errorResponse(key.code, key.message, { requestId, headers: { "www-authenticate": 'Bearer realm="switchyard"' } });
  return errorResponse(key.code, key.message, { requestId, retryAfterSeconds: 1 });
}
