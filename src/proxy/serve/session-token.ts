/**
 * Session binding tokens (docs/protocol.md §2b, "Binding tokens"): the edge
 * hands a session's binding to the client, signed, so a client that sends it
 * back is routed with no SessionRouter call at all.
 *
 *   st1.<payload>.<mac>
 *
 * `payload` is base64url(JSON `[replica id, expiry in epoch seconds]`); `mac`
 * is base64url(HMAC-SHA256(key, "st1\n" + deployment + "\n" + session id + "\n" +
 * payload)). The deployment and the session id are covered by the MAC but not
 * carried: a token is valid only with the request's own deployment and session,
 * and it reveals nothing about them. The key is derived from the master secret
 * with its own label, so no replica key can mint a token and no token is a
 * replica key's signature. Clients treat tokens as opaque.
 *
 * Verifying never throws: a token that is malformed, tampered with, expired or
 * for another deployment or session is simply not a binding.
 */
import { REPLICA_ID } from "../../protocol/index.ts";

/** The version label: the token's first segment, and the first line of what its MAC covers. */
export const SESSION_TOKEN_VERSION = "st1";
/** Key derivation label: token key = HMAC-SHA256(master, label). Distinct from the replica keys' "switchyard/v1/replica-key/". */
export const SESSION_TOKEN_KEY_LABEL = "switchyard/v1/session-token-key";
/**
 * Longest token the edge reads; a longer one is ignored unread. A token the
 * edge mints is at most about 240 bytes (a 128-character replica id).
 */
export const SESSION_TOKEN_MAX_BYTES = 512;
/** Sessions whose latest token an isolate remembers (oldest dropped first). */
export const SESSION_TOKENS_CACHED_MAX = 10_000;

/** What a valid token says. */
export interface SessionClaim {
  replica: string;
  /** Epoch seconds after which the token is no longer valid. */
  expiresAt: number;
}

const HMAC = { name: "HMAC", hash: "SHA-256" } as const;
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false });
const B64URL = /^[A-Za-z0-9_-]+$/;

/** The token key: HMAC-SHA256(master, SESSION_TOKEN_KEY_LABEL) as an HMAC key. */
export async function deriveSessionTokenKey(master: string): Promise<CryptoKey> {
  if (!master) throw new Error("the master secret (SWITCHYARD_REPLICA_SECRET) is empty");
  const k = await crypto.subtle.importKey("raw", encoder.encode(master), HMAC, false, ["sign"]);
  const raw = await crypto.subtle.sign("HMAC", k, encoder.encode(SESSION_TOKEN_KEY_LABEL));
  return crypto.subtle.importKey("raw", raw, HMAC, false, ["sign", "verify"]);
}

/** This isolate's token key (derived once; again if the master secret changes). */
let keyCache: { master: string; key: Promise<CryptoKey> } | undefined;

export function sessionTokenKeyFor(master: string): Promise<CryptoKey> {
  if (keyCache?.master !== master) {
    const entry = { master, key: deriveSessionTokenKey(master) };
    entry.key.catch(() => {
      if (keyCache === entry) keyCache = undefined;
    });
    keyCache = entry;
  }
  return keyCache.key;
}

function toBase64url(bytes: Uint8Array): string {
  let bin = "";
  for (const b of bytes) bin += String.fromCharCode(b);
  return btoa(bin).replace(/\+/g, "-").replace(/\//g, "_").replace(/=+$/, "");
}

/** base64url (unpadded, canonical) → bytes; null when it is not that. */
function fromBase64url(text: string): Uint8Array<ArrayBuffer> | null {
  if (!B64URL.test(text) || text.length % 4 === 1) return null;
  let bin: string;
  try {
    bin = atob(text.replace(/-/g, "+").replace(/_/g, "/"));
  } catch {
    return null;
  }
  const out = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) out[i] = bin.charCodeAt(i);
  // Canonical only (no stray bits in the last character): one spelling per token.
  return toBase64url(out) === text ? out : null;
}

function signedBytes(deployment: string, session: string, payload: string): Uint8Array<ArrayBuffer> {
  // Deployment names and session ids hold no newline, so the lines cannot run into each other.
  return encoder.encode(`${SESSION_TOKEN_VERSION}\n${deployment}\n${session}\n${payload}`) as Uint8Array<ArrayBuffer>;
}

/** Mints a token binding `session` of `deployment` to `claim.replica` until `claim.expiresAt`. */
export async function signSessionToken(key: CryptoKey, deployment: string, session: string, claim: SessionClaim): Promise<string> {
  const payload = toBase64url(encoder.encode(JSON.stringify([claim.replica, claim.expiresAt])));
  const mac = new Uint8Array(await crypto.subtle.sign("HMAC", key, signedBytes(deployment, session, payload)));
  return `${SESSION_TOKEN_VERSION}.${payload}.${toBase64url(mac)}`;
}

/** The parts of a well-formed token, unverified; null for anything else. */
function parseToken(token: string): { payload: string; claim: SessionClaim; mac: Uint8Array<ArrayBuffer> } | null {
  if (token.length > SESSION_TOKEN_MAX_BYTES) return null;
  const parts = token.split(".");
  if (parts.length !== 3 || parts[0] !== SESSION_TOKEN_VERSION) return null;
  const [, payload, macText] = parts as [string, string, string];
  const mac = fromBase64url(macText);
  const bytes = fromBase64url(payload);
  if (!mac || mac.byteLength !== 32 || !bytes) return null;
  let fields: unknown;
  try {
    fields = JSON.parse(decoder.decode(bytes));
  } catch {
    return null;
  }
  if (!Array.isArray(fields) || fields.length !== 2) return null;
  const [replica, expiresAt] = fields as unknown[];
  if (typeof replica !== "string" || !REPLICA_ID.test(replica) || typeof expiresAt !== "number" || !Number.isSafeInteger(expiresAt)) return null;
  return { payload, claim: { replica, expiresAt }, mac };
}

/**
 * What an untrusted token claims, without checking its MAC: for tests and
 * debugging only, never for routing.
 */
export function readSessionToken(token: string): SessionClaim | null {
  return parseToken(token)?.claim ?? null;
}

/**
 * The claim of a token that is well formed, unexpired at `nowMs`, and signed
 * with `key` for this deployment and session; undefined otherwise. Never throws.
 */
export async function verifySessionToken(key: CryptoKey, token: string, deployment: string, session: string, nowMs: number): Promise<SessionClaim | undefined> {
  if (typeof token !== "string") return undefined;
  const parsed = parseToken(token);
  if (!parsed || parsed.claim.expiresAt * 1000 <= nowMs) return undefined;
  try {
    // crypto.subtle.verify compares in constant time.
    const ok = await crypto.subtle.verify("HMAC", key, parsed.mac, signedBytes(deployment, session, parsed.payload));
    return ok ? parsed.claim : undefined;
  } catch {
    return undefined;
  }
}

/**
 * One isolate's tokens: verifies what clients send and mints what responses
 * carry, remembering each session's latest token so a client that repeats it
 * costs no HMAC, and a response that names the same replica reuses it while more
 * than half its life is left (no HMAC either; the client sees the same token).
 */
export class SessionTokens {
  readonly #key: () => Promise<CryptoKey>;
  readonly #now: () => number;
  /** Per deployment and session: the latest valid token seen or minted here. */
  readonly #latest = new Map<string, SessionClaim & { token: string }>();

  constructor(key: () => Promise<CryptoKey>, now: () => number = Date.now) {
    this.#key = key;
    this.#now = now;
  }

  /** The replica a valid token binds the session to; undefined for any other token. Never throws. */
  async verify(deployment: string, session: string, token: string): Promise<string | undefined> {
    const id = cacheKey(deployment, session);
    const now = this.#now();
    const known = this.#latest.get(id);
    if (known && known.token === token) return known.expiresAt * 1000 > now ? known.replica : undefined;
    let claim: SessionClaim | undefined;
    try {
      claim = await verifySessionToken(await this.#key(), token, deployment, session, now);
    } catch {
      return undefined;
    }
    if (!claim) return undefined;
    this.#remember(id, { ...claim, token });
    return claim.replica;
  }

  /**
   * The session's latest token when issue() would hand it out again (same replica, more
   * than half its life left), with no promise: the usual case of a response to a session.
   */
  reusable(deployment: string, session: string, replica: string, ttlSeconds: number): string | undefined {
    const known = this.#latest.get(cacheKey(deployment, session));
    return known && known.replica === replica && known.expiresAt - Math.floor(this.#now() / 1000) > ttlSeconds / 2 ? known.token : undefined;
  }

  /** A token binding the session to `replica` for `ttlSeconds` (the deployment's sessionAffinity.ttlSeconds). */
  async issue(deployment: string, session: string, replica: string, ttlSeconds: number): Promise<string> {
    const reused = this.reusable(deployment, session, replica, ttlSeconds);
    if (reused !== undefined) return reused;
    const id = cacheKey(deployment, session);
    const nowS = Math.floor(this.#now() / 1000);
    const claim = { replica, expiresAt: nowS + ttlSeconds };
    const token = await signSessionToken(await this.#key(), deployment, session, claim);
    this.#remember(id, { ...claim, token });
    return token;
  }

  /** Sessions whose latest token is remembered here. */
  get cached(): number {
    return this.#latest.size;
  }

  #remember(id: string, entry: SessionClaim & { token: string }): void {
    this.#latest.delete(id);
    this.#latest.set(id, entry);
    if (this.#latest.size > SESSION_TOKENS_CACHED_MAX) {
      const oldest = this.#latest.keys().next().value;
      if (oldest !== undefined) this.#latest.delete(oldest);
    }
  }
}

function cacheKey(deployment: string, session: string): string {
  return `${deployment}\u0000${session}`;
}
