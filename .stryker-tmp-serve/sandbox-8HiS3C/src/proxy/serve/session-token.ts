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
// @ts-nocheck
function stryNS_9fa48() {
  var g = typeof globalThis === 'object' && globalThis && globalThis.Math === Math && globalThis || new Function("return this")();
  var ns = g.__stryker__ || (g.__stryker__ = {});
  if (ns.activeMutant === undefined && g.process && g.process.env && g.process.env.__STRYKER_ACTIVE_MUTANT__) {
    ns.activeMutant = g.process.env.__STRYKER_ACTIVE_MUTANT__;
  }
  function retrieveNS() {
    return ns;
  }
  stryNS_9fa48 = retrieveNS;
  return retrieveNS();
}
stryNS_9fa48();
function stryCov_9fa48() {
  var ns = stryNS_9fa48();
  var cov = ns.mutantCoverage || (ns.mutantCoverage = {
    static: {},
    perTest: {}
  });
  function cover() {
    var c = cov.static;
    if (ns.currentTestId) {
      c = cov.perTest[ns.currentTestId] = cov.perTest[ns.currentTestId] || {};
    }
    var a = arguments;
    for (var i = 0; i < a.length; i++) {
      c[a[i]] = (c[a[i]] || 0) + 1;
    }
  }
  stryCov_9fa48 = cover;
  cover.apply(null, arguments);
}
function stryMutAct_9fa48(id) {
  var ns = stryNS_9fa48();
  function isActive(id) {
    if (ns.activeMutant === id) {
      if (ns.hitCount !== void 0 && ++ns.hitCount > ns.hitLimit) {
        throw new Error('Stryker: Hit count limit reached (' + ns.hitCount + ')');
      }
      return true;
    }
    return false;
  }
  stryMutAct_9fa48 = isActive;
  return isActive(id);
}
import { REPLICA_ID } from "../../protocol/index.ts";

/** The version label: the token's first segment, and the first line of what its MAC covers. */
export const SESSION_TOKEN_VERSION = stryMutAct_9fa48("3747") ? "" : (stryCov_9fa48("3747"), "st1");
/** Key derivation label: token key = HMAC-SHA256(master, label). Distinct from the replica keys' "switchyard/v1/replica-key/". */
export const SESSION_TOKEN_KEY_LABEL = stryMutAct_9fa48("3748") ? "" : (stryCov_9fa48("3748"), "switchyard/v1/session-token-key");
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
const HMAC = {
  name: "HMAC",
  hash: "SHA-256"
} as const;
const encoder = new TextEncoder();
const decoder = new TextDecoder(stryMutAct_9fa48("3749") ? "" : (stryCov_9fa48("3749"), "utf-8"), stryMutAct_9fa48("3750") ? {} : (stryCov_9fa48("3750"), {
  fatal: stryMutAct_9fa48("3751") ? false : (stryCov_9fa48("3751"), true),
  ignoreBOM: stryMutAct_9fa48("3752") ? true : (stryCov_9fa48("3752"), false)
}));
const B64URL = stryMutAct_9fa48("3756") ? /^[^A-Za-z0-9_-]+$/ : stryMutAct_9fa48("3755") ? /^[A-Za-z0-9_-]$/ : stryMutAct_9fa48("3754") ? /^[A-Za-z0-9_-]+/ : stryMutAct_9fa48("3753") ? /[A-Za-z0-9_-]+$/ : (stryCov_9fa48("3753", "3754", "3755", "3756"), /^[A-Za-z0-9_-]+$/);

/** The token key: HMAC-SHA256(master, SESSION_TOKEN_KEY_LABEL) as an HMAC key. */
export async function deriveSessionTokenKey(master: string): Promise<CryptoKey> {
  if (stryMutAct_9fa48("3757")) {
    {}
  } else {
    stryCov_9fa48("3757");
    if (stryMutAct_9fa48("3760") ? false : stryMutAct_9fa48("3759") ? true : stryMutAct_9fa48("3758") ? master : (stryCov_9fa48("3758", "3759", "3760"), !master)) throw new Error(stryMutAct_9fa48("3762") ? "" : (stryCov_9fa48("3762"), "the master secret (SWITCHYARD_REPLICA_SECRET) is empty"));
    const k = await crypto.subtle.importKey(stryMutAct_9fa48("3763") ? "" : (stryCov_9fa48("3763"), "raw"), encoder.encode(master), HMAC, stryMutAct_9fa48("3764") ? true : (stryCov_9fa48("3764"), false), stryMutAct_9fa48("3765") ? [] : (stryCov_9fa48("3765"), [stryMutAct_9fa48("3766") ? "" : (stryCov_9fa48("3766"), "sign")]));
    const raw = await crypto.subtle.sign(stryMutAct_9fa48("3767") ? "" : (stryCov_9fa48("3767"), "HMAC"), k, encoder.encode(SESSION_TOKEN_KEY_LABEL));
    return crypto.subtle.importKey(stryMutAct_9fa48("3768") ? "" : (stryCov_9fa48("3768"), "raw"), raw, HMAC, stryMutAct_9fa48("3769") ? true : (stryCov_9fa48("3769"), false), stryMutAct_9fa48("3770") ? [] : (stryCov_9fa48("3770"), [stryMutAct_9fa48("3771") ? "" : (stryCov_9fa48("3771"), "sign"), stryMutAct_9fa48("3772") ? "" : (stryCov_9fa48("3772"), "verify")]));
  }
}

/** This isolate's token key (derived once; again if the master secret changes). */
let keyCache: {
  master: string;
  key: Promise<CryptoKey>;
} | undefined;
export function sessionTokenKeyFor(master: string): Promise<CryptoKey> {
  if (stryMutAct_9fa48("3773")) {
    {}
  } else {
    stryCov_9fa48("3773");
    if (stryMutAct_9fa48("3776") ? keyCache?.master === master : stryMutAct_9fa48("3775") ? false : stryMutAct_9fa48("3774") ? true : (stryCov_9fa48("3774", "3775", "3776"), (stryMutAct_9fa48("3777") ? keyCache.master : (stryCov_9fa48("3777"), keyCache?.master)) !== master)) {
      if (stryMutAct_9fa48("3778")) {
        {}
      } else {
        stryCov_9fa48("3778");
        const entry = stryMutAct_9fa48("3779") ? {} : (stryCov_9fa48("3779"), {
          master,
          key: deriveSessionTokenKey(master)
        });
        entry.key.catch(() => {
          if (stryMutAct_9fa48("3781")) {
            {}
          } else {
            stryCov_9fa48("3781");
            if (stryMutAct_9fa48("3784") ? keyCache !== entry : stryMutAct_9fa48("3783") ? false : stryMutAct_9fa48("3782") ? true : (stryCov_9fa48("3782", "3783", "3784"), keyCache === entry)) keyCache = undefined;
          }
        });
        keyCache = entry;
      }
    }
    return keyCache.key;
  }
}
function toBase64url(bytes: Uint8Array): string {
  if (stryMutAct_9fa48("3785")) {
    {}
  } else {
    stryCov_9fa48("3785");
    let bin = stryMutAct_9fa48("3786") ? "Stryker was here!" : (stryCov_9fa48("3786"), "");
    for (const b of bytes) stryMutAct_9fa48("3787") ? bin -= String.fromCharCode(b) : (stryCov_9fa48("3787"), bin += String.fromCharCode(b));
    return btoa(bin).replace(/\+/g, stryMutAct_9fa48("3788") ? "" : (stryCov_9fa48("3788"), "-")).replace(/\//g, stryMutAct_9fa48("3789") ? "" : (stryCov_9fa48("3789"), "_")).replace(stryMutAct_9fa48("3791") ? /=$/ : stryMutAct_9fa48("3790") ? /=+/ : (stryCov_9fa48("3790", "3791"), /=+$/), stryMutAct_9fa48("3792") ? "Stryker was here!" : (stryCov_9fa48("3792"), ""));
  }
}

/** base64url (unpadded, canonical) → bytes; null when it is not that. */
function fromBase64url(text: string): Uint8Array<ArrayBuffer> | null {
  if (stryMutAct_9fa48("3793")) {
    {}
  } else {
    stryCov_9fa48("3793");
    if (stryMutAct_9fa48("3796") ? !B64URL.test(text) && text.length % 4 === 1 : stryMutAct_9fa48("3795") ? false : stryMutAct_9fa48("3794") ? true : (stryCov_9fa48("3794", "3795", "3796"), (stryMutAct_9fa48("3797") ? B64URL.test(text) : (stryCov_9fa48("3797"), !B64URL.test(text))) || (stryMutAct_9fa48("3799") ? text.length % 4 !== 1 : stryMutAct_9fa48("3798") ? false : (stryCov_9fa48("3798", "3799"), (stryMutAct_9fa48("3800") ? text.length * 4 : (stryCov_9fa48("3800"), text.length % 4)) === 1)))) return null;
    let bin: string;
    try {
      if (stryMutAct_9fa48("3801")) {
        {}
      } else {
        stryCov_9fa48("3801");
        bin = atob(text.replace(/-/g, stryMutAct_9fa48("3802") ? "" : (stryCov_9fa48("3802"), "+")).replace(/_/g, stryMutAct_9fa48("3803") ? "" : (stryCov_9fa48("3803"), "/")));
      }
    } catch {
      if (stryMutAct_9fa48("3804")) {
        {}
      } else {
        stryCov_9fa48("3804");
        return null;
      }
    }
    const out = new Uint8Array(bin.length);
    for (let i = 0; stryMutAct_9fa48("3807") ? i >= bin.length : stryMutAct_9fa48("3806") ? i <= bin.length : stryMutAct_9fa48("3805") ? false : (stryCov_9fa48("3805", "3806", "3807"), i < bin.length); stryMutAct_9fa48("3808") ? i-- : (stryCov_9fa48("3808"), i++)) out[i] = bin.charCodeAt(i);
    // Canonical only (no stray bits in the last character): one spelling per token.
    return (stryMutAct_9fa48("3811") ? toBase64url(out) !== text : stryMutAct_9fa48("3810") ? false : stryMutAct_9fa48("3809") ? true : (stryCov_9fa48("3809", "3810", "3811"), toBase64url(out) === text)) ? out : null;
  }
}
function signedBytes(deployment: string, session: string, payload: string): Uint8Array<ArrayBuffer> {
  if (stryMutAct_9fa48("3812")) {
    {}
  } else {
    stryCov_9fa48("3812");
    // Deployment names and session ids hold no newline, so the lines cannot run into each other.
    return encoder.encode(`${SESSION_TOKEN_VERSION}\n${deployment}\n${session}\n${payload}`) as Uint8Array<ArrayBuffer>;
  }
}

/** Mints a token binding `session` of `deployment` to `claim.replica` until `claim.expiresAt`. */
export async function signSessionToken(key: CryptoKey, deployment: string, session: string, claim: SessionClaim): Promise<string> {
  if (stryMutAct_9fa48("3813")) {
    {}
  } else {
    stryCov_9fa48("3813");
    const payload = toBase64url(encoder.encode(JSON.stringify(stryMutAct_9fa48("3814") ? [] : (stryCov_9fa48("3814"), [claim.replica, claim.expiresAt]))));
    const mac = new Uint8Array(await crypto.subtle.sign(stryMutAct_9fa48("3815") ? "" : (stryCov_9fa48("3815"), "HMAC"), key, signedBytes(deployment, session, payload)));
    return stryMutAct_9fa48("3816") ? `` : (stryCov_9fa48("3816"), `${SESSION_TOKEN_VERSION}.${payload}.${toBase64url(mac)}`);
  }
}

/** The parts of a well-formed token, unverified; null for anything else. */
function parseToken(token: string): {
  payload: string;
  claim: SessionClaim;
  mac: Uint8Array<ArrayBuffer>;
} | null {
  if (stryMutAct_9fa48("3817")) {
    {}
  } else {
    stryCov_9fa48("3817");
    if (stryMutAct_9fa48("3821") ? token.length <= SESSION_TOKEN_MAX_BYTES : stryMutAct_9fa48("3820") ? token.length >= SESSION_TOKEN_MAX_BYTES : stryMutAct_9fa48("3819") ? false : stryMutAct_9fa48("3818") ? true : (stryCov_9fa48("3818", "3819", "3820", "3821"), token.length > SESSION_TOKEN_MAX_BYTES)) return null;
    const parts = token.split(stryMutAct_9fa48("3822") ? "" : (stryCov_9fa48("3822"), "."));
    if (stryMutAct_9fa48("3825") ? parts.length !== 3 && parts[0] !== SESSION_TOKEN_VERSION : stryMutAct_9fa48("3824") ? false : stryMutAct_9fa48("3823") ? true : (stryCov_9fa48("3823", "3824", "3825"), (stryMutAct_9fa48("3827") ? parts.length === 3 : stryMutAct_9fa48("3826") ? false : (stryCov_9fa48("3826", "3827"), parts.length !== 3)) || (stryMutAct_9fa48("3829") ? parts[0] === SESSION_TOKEN_VERSION : stryMutAct_9fa48("3828") ? false : (stryCov_9fa48("3828", "3829"), parts[0] !== SESSION_TOKEN_VERSION)))) return null;
    const [, payload, macText] = parts as [string, string, string];
    const mac = fromBase64url(macText);
    const bytes = fromBase64url(payload);
    if (stryMutAct_9fa48("3832") ? (!mac || mac.byteLength !== 32) && !bytes : stryMutAct_9fa48("3831") ? false : stryMutAct_9fa48("3830") ? true : (stryCov_9fa48("3830", "3831", "3832"), (stryMutAct_9fa48("3834") ? !mac && mac.byteLength !== 32 : stryMutAct_9fa48("3833") ? false : (stryCov_9fa48("3833", "3834"), (stryMutAct_9fa48("3835") ? mac : (stryCov_9fa48("3835"), !mac)) || (stryMutAct_9fa48("3837") ? mac.byteLength === 32 : stryMutAct_9fa48("3836") ? false : (stryCov_9fa48("3836", "3837"), mac.byteLength !== 32)))) || (stryMutAct_9fa48("3838") ? bytes : (stryCov_9fa48("3838"), !bytes)))) return null;
    let fields: unknown;
    try {
      if (stryMutAct_9fa48("3839")) {
        {}
      } else {
        stryCov_9fa48("3839");
        fields = JSON.parse(decoder.decode(bytes));
      }
    } catch {
      if (stryMutAct_9fa48("3840")) {
        {}
      } else {
        stryCov_9fa48("3840");
        return null;
      }
    }
    if (stryMutAct_9fa48("3843") ? !Array.isArray(fields) && fields.length !== 2 : stryMutAct_9fa48("3842") ? false : stryMutAct_9fa48("3841") ? true : (stryCov_9fa48("3841", "3842", "3843"), (stryMutAct_9fa48("3844") ? Array.isArray(fields) : (stryCov_9fa48("3844"), !Array.isArray(fields))) || (stryMutAct_9fa48("3846") ? fields.length === 2 : stryMutAct_9fa48("3845") ? false : (stryCov_9fa48("3845", "3846"), fields.length !== 2)))) return null;
    const [replica, expiresAt] = fields as unknown[];
    if (stryMutAct_9fa48("3849") ? (typeof replica !== "string" || !REPLICA_ID.test(replica) || typeof expiresAt !== "number") && !Number.isSafeInteger(expiresAt) : stryMutAct_9fa48("3848") ? false : stryMutAct_9fa48("3847") ? true : (stryCov_9fa48("3847", "3848", "3849"), (stryMutAct_9fa48("3851") ? (typeof replica !== "string" || !REPLICA_ID.test(replica)) && typeof expiresAt !== "number" : stryMutAct_9fa48("3850") ? false : (stryCov_9fa48("3850", "3851"), (stryMutAct_9fa48("3853") ? typeof replica !== "string" && !REPLICA_ID.test(replica) : stryMutAct_9fa48("3852") ? false : (stryCov_9fa48("3852", "3853"), (stryMutAct_9fa48("3855") ? typeof replica === "string" : stryMutAct_9fa48("3854") ? false : (stryCov_9fa48("3854", "3855"), typeof replica !== (stryMutAct_9fa48("3856") ? "" : (stryCov_9fa48("3856"), "string")))) || (stryMutAct_9fa48("3857") ? REPLICA_ID.test(replica) : (stryCov_9fa48("3857"), !REPLICA_ID.test(replica))))) || (stryMutAct_9fa48("3859") ? typeof expiresAt === "number" : stryMutAct_9fa48("3858") ? false : (stryCov_9fa48("3858", "3859"), typeof expiresAt !== (stryMutAct_9fa48("3860") ? "" : (stryCov_9fa48("3860"), "number")))))) || (stryMutAct_9fa48("3861") ? Number.isSafeInteger(expiresAt) : (stryCov_9fa48("3861"), !Number.isSafeInteger(expiresAt))))) return null;
    return stryMutAct_9fa48("3862") ? {} : (stryCov_9fa48("3862"), {
      payload,
      claim: stryMutAct_9fa48("3863") ? {} : (stryCov_9fa48("3863"), {
        replica,
        expiresAt
      }),
      mac
    });
  }
}

/**
 * What an untrusted token claims, without checking its MAC: for tests and
 * debugging only, never for routing.
 */
export function readSessionToken(token: string): SessionClaim | null {
  if (stryMutAct_9fa48("3864")) {
    {}
  } else {
    stryCov_9fa48("3864");
    return stryMutAct_9fa48("3865") ? parseToken(token)?.claim && null : (stryCov_9fa48("3865"), (stryMutAct_9fa48("3866") ? parseToken(token).claim : (stryCov_9fa48("3866"), parseToken(token)?.claim)) ?? null);
  }
}

/**
 * The claim of a token that is well formed, unexpired at `nowMs`, and signed
 * with `key` for this deployment and session; undefined otherwise. Never throws.
 */
export async function verifySessionToken(key: CryptoKey, token: string, deployment: string, session: string, nowMs: number): Promise<SessionClaim | undefined> {
  if (stryMutAct_9fa48("3867")) {
    {}
  } else {
    stryCov_9fa48("3867");
    if (stryMutAct_9fa48("3870") ? typeof token === "string" : stryMutAct_9fa48("3869") ? false : stryMutAct_9fa48("3868") ? true : (stryCov_9fa48("3868", "3869", "3870"), typeof token !== (stryMutAct_9fa48("3871") ? "" : (stryCov_9fa48("3871"), "string")))) return undefined;
    const parsed = parseToken(token);
    if (stryMutAct_9fa48("3874") ? !parsed && parsed.claim.expiresAt * 1000 <= nowMs : stryMutAct_9fa48("3873") ? false : stryMutAct_9fa48("3872") ? true : (stryCov_9fa48("3872", "3873", "3874"), (stryMutAct_9fa48("3875") ? parsed : (stryCov_9fa48("3875"), !parsed)) || (stryMutAct_9fa48("3878") ? parsed.claim.expiresAt * 1000 > nowMs : stryMutAct_9fa48("3877") ? parsed.claim.expiresAt * 1000 < nowMs : stryMutAct_9fa48("3876") ? false : (stryCov_9fa48("3876", "3877", "3878"), (stryMutAct_9fa48("3879") ? parsed.claim.expiresAt / 1000 : (stryCov_9fa48("3879"), parsed.claim.expiresAt * 1000)) <= nowMs)))) return undefined;
    try {
      if (stryMutAct_9fa48("3880")) {
        {}
      } else {
        stryCov_9fa48("3880");
        // crypto.subtle.verify compares in constant time.
        const ok = await crypto.subtle.verify(stryMutAct_9fa48("3881") ? "" : (stryCov_9fa48("3881"), "HMAC"), key, parsed.mac, signedBytes(deployment, session, parsed.payload));
        return ok ? parsed.claim : undefined;
      }
    } catch {
      if (stryMutAct_9fa48("3882")) {
        {}
      } else {
        stryCov_9fa48("3882");
        return undefined;
      }
    }
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
  readonly #latest = new Map<string, SessionClaim & {
    token: string;
  }>();
  constructor(key: () => Promise<CryptoKey>, now: () => number = Date.now) {
    if (stryMutAct_9fa48("3883")) {
      {}
    } else {
      stryCov_9fa48("3883");
      this.#key = key;
      this.#now = now;
    }
  }

  /** The replica a valid token binds the session to; undefined for any other token. Never throws. */
  async verify(deployment: string, session: string, token: string): Promise<string | undefined> {
    if (stryMutAct_9fa48("3884")) {
      {}
    } else {
      stryCov_9fa48("3884");
      const id = cacheKey(deployment, session);
      const now = this.#now();
      const known = this.#latest.get(id);
      if (stryMutAct_9fa48("3887") ? known || known.token === token : stryMutAct_9fa48("3886") ? false : stryMutAct_9fa48("3885") ? true : (stryCov_9fa48("3885", "3886", "3887"), known && (stryMutAct_9fa48("3889") ? known.token !== token : stryMutAct_9fa48("3888") ? true : (stryCov_9fa48("3888", "3889"), known.token === token)))) return (stryMutAct_9fa48("3893") ? known.expiresAt * 1000 <= now : stryMutAct_9fa48("3892") ? known.expiresAt * 1000 >= now : stryMutAct_9fa48("3891") ? false : stryMutAct_9fa48("3890") ? true : (stryCov_9fa48("3890", "3891", "3892", "3893"), (stryMutAct_9fa48("3894") ? known.expiresAt / 1000 : (stryCov_9fa48("3894"), known.expiresAt * 1000)) > now)) ? known.replica : undefined;
      let claim: SessionClaim | undefined;
      try {
        if (stryMutAct_9fa48("3895")) {
          {}
        } else {
          stryCov_9fa48("3895");
          claim = await verifySessionToken(await this.#key(), token, deployment, session, now);
        }
      } catch {
        if (stryMutAct_9fa48("3896")) {
          {}
        } else {
          stryCov_9fa48("3896");
          return undefined;
        }
      }
      if (stryMutAct_9fa48("3899") ? false : stryMutAct_9fa48("3898") ? true : stryMutAct_9fa48("3897") ? claim : (stryCov_9fa48("3897", "3898", "3899"), !claim)) return undefined;
      this.#remember(id, stryMutAct_9fa48("3901") ? {} : (stryCov_9fa48("3901"), {
        ...claim,
        token
      }));
      return claim.replica;
    }
  }

  /**
   * The session's latest token when issue() would hand it out again (same replica, more
   * than half its life left), with no promise: the usual case of a response to a session.
   */
  reusable(deployment: string, session: string, replica: string, ttlSeconds: number): string | undefined {
    if (stryMutAct_9fa48("3902")) {
      {}
    } else {
      stryCov_9fa48("3902");
      const known = this.#latest.get(cacheKey(deployment, session));
      return (stryMutAct_9fa48("3905") ? known && known.replica === replica || known.expiresAt - Math.floor(this.#now() / 1000) > ttlSeconds / 2 : stryMutAct_9fa48("3904") ? false : stryMutAct_9fa48("3903") ? true : (stryCov_9fa48("3903", "3904", "3905"), (stryMutAct_9fa48("3907") ? known || known.replica === replica : stryMutAct_9fa48("3906") ? true : (stryCov_9fa48("3906", "3907"), known && (stryMutAct_9fa48("3909") ? known.replica !== replica : stryMutAct_9fa48("3908") ? true : (stryCov_9fa48("3908", "3909"), known.replica === replica)))) && (stryMutAct_9fa48("3912") ? known.expiresAt - Math.floor(this.#now() / 1000) <= ttlSeconds / 2 : stryMutAct_9fa48("3911") ? known.expiresAt - Math.floor(this.#now() / 1000) >= ttlSeconds / 2 : stryMutAct_9fa48("3910") ? true : (stryCov_9fa48("3910", "3911", "3912"), (stryMutAct_9fa48("3913") ? known.expiresAt + Math.floor(this.#now() / 1000) : (stryCov_9fa48("3913"), known.expiresAt - Math.floor(stryMutAct_9fa48("3914") ? this.#now() * 1000 : (stryCov_9fa48("3914"), this.#now() / 1000)))) > (stryMutAct_9fa48("3915") ? ttlSeconds * 2 : (stryCov_9fa48("3915"), ttlSeconds / 2)))))) ? known.token : undefined;
    }
  }

  /** A token binding the session to `replica` for `ttlSeconds` (the deployment's sessionAffinity.ttlSeconds). */
  async issue(deployment: string, session: string, replica: string, ttlSeconds: number): Promise<string> {
    if (stryMutAct_9fa48("3916")) {
      {}
    } else {
      stryCov_9fa48("3916");
      const reused = this.reusable(deployment, session, replica, ttlSeconds);
      if (stryMutAct_9fa48("3919") ? reused === undefined : stryMutAct_9fa48("3918") ? false : stryMutAct_9fa48("3917") ? true : (stryCov_9fa48("3917", "3918", "3919"), reused !== undefined)) return reused;
      const id = cacheKey(deployment, session);
      const nowS = Math.floor(stryMutAct_9fa48("3920") ? this.#now() * 1000 : (stryCov_9fa48("3920"), this.#now() / 1000));
      const claim = stryMutAct_9fa48("3921") ? {} : (stryCov_9fa48("3921"), {
        replica,
        expiresAt: stryMutAct_9fa48("3922") ? nowS - ttlSeconds : (stryCov_9fa48("3922"), nowS + ttlSeconds)
      });
      const token = await signSessionToken(await this.#key(), deployment, session, claim);
      this.#remember(id, stryMutAct_9fa48("3924") ? {} : (stryCov_9fa48("3924"), {
        ...claim,
        token
      }));
      return token;
    }
  }

  /** Sessions whose latest token is remembered here. */
  get cached(): number {
    if (stryMutAct_9fa48("3925")) {
      {}
    } else {
      stryCov_9fa48("3925");
      return this.#latest.size;
    }
  }
  #remember(id: string, entry: SessionClaim & {
    token: string;
  }): void {
    if (stryMutAct_9fa48("3926")) {
      {}
    } else {
      stryCov_9fa48("3926");
      if (stryMutAct_9fa48("3927")) {
        ;
      } else {
        stryCov_9fa48("3927");
        this.#latest.delete(id);
      }
      if (stryMutAct_9fa48("3928")) {
        ;
      } else {
        stryCov_9fa48("3928");
        this.#latest.set(id, entry);
      }
      if (stryMutAct_9fa48("3932") ? this.#latest.size <= SESSION_TOKENS_CACHED_MAX : stryMutAct_9fa48("3931") ? this.#latest.size >= SESSION_TOKENS_CACHED_MAX : stryMutAct_9fa48("3930") ? false : stryMutAct_9fa48("3929") ? true : (stryCov_9fa48("3929", "3930", "3931", "3932"), this.#latest.size > SESSION_TOKENS_CACHED_MAX)) {
        if (stryMutAct_9fa48("3933")) {
          {}
        } else {
          stryCov_9fa48("3933");
          const oldest = this.#latest.keys().next().value;
          if (stryMutAct_9fa48("3936") ? oldest === undefined : stryMutAct_9fa48("3935") ? false : stryMutAct_9fa48("3934") ? true : (stryCov_9fa48("3934", "3935", "3936"), oldest !== undefined)) if (stryMutAct_9fa48("3937")) {
            ;
          } else {
            stryCov_9fa48("3937");
            this.#latest.delete(oldest);
          }
        }
      }
    }
  }
}
function cacheKey(deployment: string, session: string): string {
  if (stryMutAct_9fa48("3938")) {
    {}
  } else {
    stryCov_9fa48("3938");
    return stryMutAct_9fa48("3939") ? `` : (stryCov_9fa48("3939"), `${deployment}\u0000${session}`);
  }
}