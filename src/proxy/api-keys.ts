/**
 * Client API key checks on the hot path, with no Durable Object call per
 * request: each isolate holds the set of active key hashes per deployment,
 * fetched from its AccessKeys object and refreshed in the background every
 * KEY_SET_TTL_MS. A new or revoked key takes effect everywhere within that TTL
 * (at once in the isolate that served the admin call). Fails closed: without a
 * key set (the object unreachable since the isolate started) nobody gets in.
 */
import { bearerToken, hashApiKey } from "../state/api-key-format.ts";
import { BackgroundRefresh } from "./background-refresh.ts";

export const KEY_SET_TTL_MS = 10_000;
const REFRESH_FAILURE_BACKOFF_MS = 1_000;

export type KeySetSource = (deployment: string) => Promise<string[]>;

export type KeyCheck =
  | { ok: true; keyHash: string }
  | { ok: false; code: "unauthorized" | "auth_unavailable"; message: string };

export class ApiKeyCache {
  readonly #sets: BackgroundRefresh<Set<string> | null, string[]>;

  constructor(source: KeySetSource, now: () => number = Date.now) {
    this.#sets = new BackgroundRefresh<Set<string> | null, string[]>({
      source,
      // No set until the first fetch succeeds: fail closed meanwhile.
      initial: () => null,
      apply: (_old, hashes) => new Set(hashes),
      ttlMs: KEY_SET_TTL_MS,
      failureBackoffMs: REFRESH_FAILURE_BACKOFF_MS,
      what: "api key",
      now,
    });
  }

  /** Object calls made (observability and tests). */
  get refreshes(): number {
    return this.#sets.refreshes;
  }

  async check(deployment: string, authorization: string | null | undefined, background: (p: Promise<unknown>) => void): Promise<KeyCheck> {
    const token = bearerToken(authorization);
    if (token === null) {
      return { ok: false, code: "unauthorized", message: "this deployment needs an API key: send Authorization: Bearer <key>" };
    }
    const [hashes, keyHash] = await Promise.all([this.#sets.get(deployment, background, (s) => s.value === null), hashApiKey(token)]);
    if (!hashes) return { ok: false, code: "auth_unavailable", message: "API keys cannot be checked right now; retry shortly" };
    if (!hashes.has(keyHash)) return { ok: false, code: "unauthorized", message: "API key not valid for this deployment (unknown or revoked)" };
    return { ok: true, keyHash };
  }

  /** Forgets the isolate's key set (after this isolate created or revoked a key). */
  invalidate(deployment: string): void {
    this.#sets.forget(deployment);
  }
}
