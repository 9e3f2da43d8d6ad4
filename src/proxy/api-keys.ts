/**
 * Client API key checks on the hot path, with no Durable Object call per
 * request: each isolate holds the set of active key hashes per deployment,
 * fetched from its AccessKeys object and refreshed in the background every
 * KEY_SET_TTL_MS. A new or revoked key takes effect everywhere within that TTL
 * (at once in the isolate that served the admin call). Fails closed: without a
 * key set (the object unreachable since the isolate started) nobody gets in.
 */
import { bearerToken, hashApiKey } from "../state/api-key-format.ts";

export const KEY_SET_TTL_MS = 10_000;
const REFRESH_FAILURE_BACKOFF_MS = 1_000;

export type KeySetSource = (deployment: string) => Promise<string[]>;

export type KeyCheck =
  | { ok: true; keyHash: string }
  | { ok: false; code: "unauthorized" | "auth_unavailable"; message: string };

interface Cached {
  hashes: Set<string> | null;
  fetchedAt: number;
  nextRefreshAt: number;
  refreshing: Promise<void> | null;
}

export class ApiKeyCache {
  readonly #source: KeySetSource;
  readonly #now: () => number;
  readonly #entries = new Map<string, Cached>();
  /** Object calls made (observability and tests). */
  refreshes = 0;

  constructor(source: KeySetSource, now: () => number = Date.now) {
    this.#source = source;
    this.#now = now;
  }

  async check(deployment: string, authorization: string | null | undefined, background: (p: Promise<unknown>) => void): Promise<KeyCheck> {
    const token = bearerToken(authorization);
    if (token === null) {
      return { ok: false, code: "unauthorized", message: "this deployment needs an API key: send Authorization: Bearer <key>" };
    }
    const [hashes, keyHash] = await Promise.all([this.#hashes(deployment, background), hashApiKey(token)]);
    if (!hashes) return { ok: false, code: "auth_unavailable", message: "API keys cannot be checked right now; retry shortly" };
    if (!hashes.has(keyHash)) return { ok: false, code: "unauthorized", message: "API key not valid for this deployment (unknown or revoked)" };
    return { ok: true, keyHash };
  }

  /** Forgets the isolate's key set (after this isolate created or revoked a key). */
  invalidate(deployment: string): void {
    this.#entries.delete(deployment);
  }

  async #hashes(deployment: string, background: (p: Promise<unknown>) => void): Promise<Set<string> | null> {
    let c = this.#entries.get(deployment);
    if (!c) {
      c = { hashes: null, fetchedAt: 0, nextRefreshAt: 0, refreshing: null };
      this.#entries.set(deployment, c);
    }
    const now = this.#now();
    if (c.hashes === null) {
      if (c.refreshing) await c.refreshing;
      else if (now >= c.nextRefreshAt) await this.#refresh(deployment, c);
      return c.hashes;
    }
    if (!c.refreshing && now >= c.nextRefreshAt) background(this.#refresh(deployment, c));
    return c.hashes;
  }

  #refresh(deployment: string, c: Cached): Promise<void> {
    this.refreshes++;
    const p = this.#source(deployment)
      .then((hashes) => {
        const now = this.#now();
        c.hashes = new Set(hashes);
        c.fetchedAt = now;
        c.nextRefreshAt = now + KEY_SET_TTL_MS;
      })
      .catch((err: unknown) => {
        // Keep the last set (a revoked key may live one failed refresh longer).
        c.nextRefreshAt = this.#now() + REFRESH_FAILURE_BACKOFF_MS;
        console.error(JSON.stringify({ msg: "api key refresh failed", deployment, error: String(err) }));
      })
      .finally(() => {
        c.refreshing = null;
      });
    c.refreshing = p;
    return p;
  }
}
