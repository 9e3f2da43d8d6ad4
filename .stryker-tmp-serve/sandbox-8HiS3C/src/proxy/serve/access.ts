/**
 * Who may use what: a private deployment's API keys (checked against this
 * isolate's copy of the key set), the per-key rate limits, and the admin secret.
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
export type KeyCheck = {
  ok: true;
  keyHash: string;
  priority?: KeyPriority;
} | {
  ok: false;
  code: "unauthorized" | "auth_unavailable";
  message: string;
};
export class ApiKeyCache {
  readonly #sets: BackgroundRefresh<KeySet | null, ActiveKey[]>;
  constructor(source: KeySetSource, now: () => number = Date.now, ttlFor: (deployment: string) => number = stryMutAct_9fa48("0") ? () => undefined : (stryCov_9fa48("0"), () => KEY_SET_TTL_MS)) {
    if (stryMutAct_9fa48("1")) {
      {}
    } else {
      stryCov_9fa48("1");
      this.#sets = new BackgroundRefresh<KeySet | null, ActiveKey[]>(stryMutAct_9fa48("2") ? {} : (stryCov_9fa48("2"), {
        source,
        // No set until the first fetch succeeds: fail closed meanwhile.
        initial: stryMutAct_9fa48("3") ? () => undefined : (stryCov_9fa48("3"), () => null),
        apply: stryMutAct_9fa48("4") ? () => undefined : (stryCov_9fa48("4"), (_old, keys) => new Map(keys.map(stryMutAct_9fa48("5") ? () => undefined : (stryCov_9fa48("5"), k => stryMutAct_9fa48("6") ? [] : (stryCov_9fa48("6"), [k.hash, stryMutAct_9fa48("7") ? k.priority && null : (stryCov_9fa48("7"), k.priority ?? null)]))))),
        ttlMs: ttlFor,
        failureBackoffMs: REFRESH_FAILURE_BACKOFF_MS,
        what: stryMutAct_9fa48("8") ? "" : (stryCov_9fa48("8"), "api key"),
        now
      }));
    }
  }

  /** Object calls made (observability and tests). */
  get refreshes(): number {
    if (stryMutAct_9fa48("9")) {
      {}
    } else {
      stryCov_9fa48("9");
      return this.#sets.refreshes;
    }
  }

  /** checkAny for one deployment, without its arrays (it runs on every request to a private deployment). */
  async check(deployment: string, authorization: string | null | undefined, background: (p: Promise<unknown>) => void): Promise<KeyCheck> {
    if (stryMutAct_9fa48("10")) {
      {}
    } else {
      stryCov_9fa48("10");
      const token = bearerToken(authorization);
      if (stryMutAct_9fa48("13") ? token !== null : stryMutAct_9fa48("12") ? false : stryMutAct_9fa48("11") ? true : (stryCov_9fa48("11", "12", "13"), token === null)) return NO_KEY;
      const [keyHash, hashes] = await Promise.all(stryMutAct_9fa48("14") ? [] : (stryCov_9fa48("14"), [hashApiKey(token), this.#sets.get(deployment, background, hasNoSet)]));
      const priority = stryMutAct_9fa48("15") ? hashes.get(keyHash) : (stryCov_9fa48("15"), hashes?.get(keyHash));
      if (stryMutAct_9fa48("18") ? priority === undefined : stryMutAct_9fa48("17") ? false : stryMutAct_9fa48("16") ? true : (stryCov_9fa48("16", "17", "18"), priority !== undefined)) return (stryMutAct_9fa48("21") ? priority !== null : stryMutAct_9fa48("20") ? false : stryMutAct_9fa48("19") ? true : (stryCov_9fa48("19", "20", "21"), priority === null)) ? stryMutAct_9fa48("22") ? {} : (stryCov_9fa48("22"), {
        ok: stryMutAct_9fa48("23") ? false : (stryCov_9fa48("23"), true),
        keyHash
      }) : stryMutAct_9fa48("24") ? {} : (stryCov_9fa48("24"), {
        ok: stryMutAct_9fa48("25") ? false : (stryCov_9fa48("25"), true),
        keyHash,
        priority
      });
      return hashes ? NOT_VALID : UNAVAILABLE;
    }
  }

  /**
   * Whether the key is valid for at least one of `deployments`: what the OpenAI
   * routes ask before they read a body, when every deployment there is private
   * (the body names the deployment, so the exact check comes after it).
   */
  async checkAny(deployments: readonly string[], authorization: string | null | undefined, background: (p: Promise<unknown>) => void): Promise<KeyCheck> {
    if (stryMutAct_9fa48("26")) {
      {}
    } else {
      stryCov_9fa48("26");
      const token = bearerToken(authorization);
      if (stryMutAct_9fa48("29") ? token !== null : stryMutAct_9fa48("28") ? false : stryMutAct_9fa48("27") ? true : (stryCov_9fa48("27", "28", "29"), token === null)) return NO_KEY;
      const [keyHash, ...sets] = await Promise.all(stryMutAct_9fa48("30") ? [] : (stryCov_9fa48("30"), [hashApiKey(token), ...deployments.map(stryMutAct_9fa48("31") ? () => undefined : (stryCov_9fa48("31"), d => this.#sets.get(d, background, hasNoSet)))]));
      if (stryMutAct_9fa48("34") ? sets.every(hashes => hashes?.has(keyHash)) : stryMutAct_9fa48("33") ? false : stryMutAct_9fa48("32") ? true : (stryCov_9fa48("32", "33", "34"), sets.some(stryMutAct_9fa48("35") ? () => undefined : (stryCov_9fa48("35"), hashes => stryMutAct_9fa48("36") ? hashes.has(keyHash) : (stryCov_9fa48("36"), hashes?.has(keyHash)))))) return stryMutAct_9fa48("37") ? {} : (stryCov_9fa48("37"), {
        ok: stryMutAct_9fa48("38") ? false : (stryCov_9fa48("38"), true),
        keyHash
      });
      if (stryMutAct_9fa48("41") ? sets.every(hashes => !hashes) : stryMutAct_9fa48("40") ? false : stryMutAct_9fa48("39") ? true : (stryCov_9fa48("39", "40", "41"), sets.some(stryMutAct_9fa48("42") ? () => undefined : (stryCov_9fa48("42"), hashes => stryMutAct_9fa48("43") ? hashes : (stryCov_9fa48("43"), !hashes))))) return UNAVAILABLE;
      return NOT_VALID;
    }
  }

  /** The deployments among `deployments` this key may use (none without a key, or while sets are unknown). */
  async usableBy(deployments: readonly string[], authorization: string | null | undefined, background: (p: Promise<unknown>) => void): Promise<Set<string>> {
    if (stryMutAct_9fa48("44")) {
      {}
    } else {
      stryCov_9fa48("44");
      const token = bearerToken(authorization);
      if (stryMutAct_9fa48("47") ? token === null && deployments.length === 0 : stryMutAct_9fa48("46") ? false : stryMutAct_9fa48("45") ? true : (stryCov_9fa48("45", "46", "47"), (stryMutAct_9fa48("49") ? token !== null : stryMutAct_9fa48("48") ? false : (stryCov_9fa48("48", "49"), token === null)) || (stryMutAct_9fa48("51") ? deployments.length !== 0 : stryMutAct_9fa48("50") ? false : (stryCov_9fa48("50", "51"), deployments.length === 0)))) return new Set();
      const [keyHash, ...sets] = await Promise.all(stryMutAct_9fa48("52") ? [] : (stryCov_9fa48("52"), [hashApiKey(token), ...deployments.map(stryMutAct_9fa48("53") ? () => undefined : (stryCov_9fa48("53"), d => this.#sets.get(d, background, hasNoSet)))]));
      return new Set(stryMutAct_9fa48("54") ? deployments : (stryCov_9fa48("54"), deployments.filter(stryMutAct_9fa48("55") ? () => undefined : (stryCov_9fa48("55"), (_, i) => stryMutAct_9fa48("56") ? sets[i].has(keyHash) : (stryCov_9fa48("56"), sets[i]?.has(keyHash))))));
    }
  }

  /** Forgets the isolate's key set (after this isolate created or revoked a key). */
  invalidate(deployment: string): void {
    if (stryMutAct_9fa48("57")) {
      {}
    } else {
      stryCov_9fa48("57");
      if (stryMutAct_9fa48("58")) {
        ;
      } else {
        stryCov_9fa48("58");
        this.#sets.forget(deployment);
      }
    }
  }
}

/** No key set yet (fail closed): the key set must be fetched before anyone gets in. */
const hasNoSet = stryMutAct_9fa48("59") ? () => undefined : (stryCov_9fa48("59"), (() => {
  const hasNoSet = (s: {
    value: KeySet | null;
  }) => stryMutAct_9fa48("62") ? s.value !== null : stryMutAct_9fa48("61") ? false : stryMutAct_9fa48("60") ? true : (stryCov_9fa48("60", "61", "62"), s.value === null);
  return hasNoSet;
})());

// The refusals, made once and frozen: every request refused for the same reason gets the same one.
const NO_KEY: KeyCheck = Object.freeze(stryMutAct_9fa48("63") ? {} : (stryCov_9fa48("63"), {
  ok: stryMutAct_9fa48("64") ? true : (stryCov_9fa48("64"), false),
  code: stryMutAct_9fa48("65") ? "" : (stryCov_9fa48("65"), "unauthorized"),
  message: stryMutAct_9fa48("66") ? "" : (stryCov_9fa48("66"), "this deployment needs an API key: send Authorization: Bearer <key>")
}));
const UNAVAILABLE: KeyCheck = Object.freeze(stryMutAct_9fa48("67") ? {} : (stryCov_9fa48("67"), {
  ok: stryMutAct_9fa48("68") ? true : (stryCov_9fa48("68"), false),
  code: stryMutAct_9fa48("69") ? "" : (stryCov_9fa48("69"), "auth_unavailable"),
  message: stryMutAct_9fa48("70") ? "" : (stryCov_9fa48("70"), "API keys cannot be checked right now; retry shortly")
}));
const NOT_VALID: KeyCheck = Object.freeze(stryMutAct_9fa48("71") ? {} : (stryCov_9fa48("71"), {
  ok: stryMutAct_9fa48("72") ? true : (stryCov_9fa48("72"), false),
  code: stryMutAct_9fa48("73") ? "" : (stryCov_9fa48("73"), "unauthorized"),
  message: stryMutAct_9fa48("74") ? "" : (stryCov_9fa48("74"), "API key not valid for this deployment (unknown or revoked)")
}));

/** The JSON refusal of a failed key check (401 with WWW-Authenticate, or 503 with Retry-After). */
export function keyRefusal(key: Extract<KeyCheck, {
  ok: false;
}>, requestId: string): Response {
  if (stryMutAct_9fa48("75")) {
    {}
  } else {
    stryCov_9fa48("75");
    if (stryMutAct_9fa48("78") ? key.code !== "unauthorized" : stryMutAct_9fa48("77") ? false : stryMutAct_9fa48("76") ? true : (stryCov_9fa48("76", "77", "78"), key.code === (stryMutAct_9fa48("79") ? "" : (stryCov_9fa48("79"), "unauthorized")))) return errorResponse(key.code, key.message, stryMutAct_9fa48("80") ? {} : (stryCov_9fa48("80"), {
      requestId,
      headers: stryMutAct_9fa48("81") ? {} : (stryCov_9fa48("81"), {
        "www-authenticate": stryMutAct_9fa48("82") ? "" : (stryCov_9fa48("82"), 'Bearer realm="switchyard"')
      })
    }));
    return errorResponse(key.code, key.message, stryMutAct_9fa48("83") ? {} : (stryCov_9fa48("83"), {
      requestId,
      retryAfterSeconds: 1
    }));
  }
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
export type RateDecision = {
  ok: true;
} | {
  ok: false;
  retryAfterSeconds: number;
};

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
export const REQUEST_RATE: RateKind = stryMutAct_9fa48("84") ? {} : (stryCov_9fa48("84"), {
  limitsOf: stryMutAct_9fa48("85") ? () => undefined : (stryCov_9fa48("85"), d => d.access.rateLimit),
  shardOffset: 0
});
export const TOKEN_RATE: RateKind = stryMutAct_9fa48("86") ? {} : (stryCov_9fa48("86"), {
  limitsOf: d => {
    if (stryMutAct_9fa48("87")) {
      {}
    } else {
      stryCov_9fa48("87");
      const t = d.access.tokenLimit;
      return stryMutAct_9fa48("90") ? t || {
        requestsPerSecond: t.tokensPerMinute / 60,
        burst: t.burst ?? t.tokensPerMinute
      } : stryMutAct_9fa48("89") ? false : stryMutAct_9fa48("88") ? true : (stryCov_9fa48("88", "89", "90"), t && (stryMutAct_9fa48("91") ? {} : (stryCov_9fa48("91"), {
        requestsPerSecond: stryMutAct_9fa48("92") ? t.tokensPerMinute * 60 : (stryCov_9fa48("92"), t.tokensPerMinute / 60),
        burst: stryMutAct_9fa48("93") ? t.burst && t.tokensPerMinute : (stryCov_9fa48("93"), t.burst ?? t.tokensPerMinute)
      })));
    }
  },
  shardOffset: RATE_LIMIT_SHARDS
});
export class RateLimits {
  readonly #sync: RateSync;
  readonly #now: () => number;
  readonly #kind: RateKind;
  readonly #keys = new Map<string, Map<string, KeyState>>();
  readonly #nextSyncAt = new Map<string, number>();
  /** Object calls made (observability and tests). */
  syncs = 0;
  constructor(sync: RateSync, now: () => number = Date.now, kind: RateKind = REQUEST_RATE) {
    if (stryMutAct_9fa48("94")) {
      {}
    } else {
      stryCov_9fa48("94");
      this.#sync = sync;
      this.#now = now;
      this.#kind = kind;
    }
  }

  /** Takes one from the key's bucket (a request), or says when to come back. */
  take(deployment: Deployment, keyHash: string, background: (p: Promise<unknown>) => void): RateDecision {
    if (stryMutAct_9fa48("95")) {
      {}
    } else {
      stryCov_9fa48("95");
      const limits = this.#kind.limitsOf(deployment);
      if (stryMutAct_9fa48("98") ? false : stryMutAct_9fa48("97") ? true : stryMutAct_9fa48("96") ? limits : (stryCov_9fa48("96", "97", "98"), !limits)) return stryMutAct_9fa48("99") ? {} : (stryCov_9fa48("99"), {
        ok: stryMutAct_9fa48("100") ? false : (stryCov_9fa48("100"), true)
      });
      const now = this.#now();
      const k = this.#key(deployment.name, keyHash, limits, now);
      const taken = takeToken(k.bucket, limits, now);
      if (stryMutAct_9fa48("102") ? false : stryMutAct_9fa48("101") ? true : (stryCov_9fa48("101", "102"), taken.ok)) if (stryMutAct_9fa48("103")) {
        ;
      } else {
        stryCov_9fa48("103");
        this.#used(k, 1, now);
      }
      if (stryMutAct_9fa48("104")) {
        ;
      } else {
        stryCov_9fa48("104");
        this.#maybeSync(deployment.name, limits, now, background);
      }
      return taken.ok ? taken : stryMutAct_9fa48("105") ? {} : (stryCov_9fa48("105"), {
        ok: stryMutAct_9fa48("106") ? true : (stryCov_9fa48("106"), false),
        retryAfterSeconds: stryMutAct_9fa48("107") ? Math.min(1, Math.ceil(taken.retryAfterMs / 1000)) : (stryCov_9fa48("107"), Math.max(1, Math.ceil(stryMutAct_9fa48("108") ? taken.retryAfterMs * 1000 : (stryCov_9fa48("108"), taken.retryAfterMs / 1000))))
      });
    }
  }

  /** Whether the key has any allowance left (its bucket above zero): a token-limited request's cost is known only after it. */
  check(deployment: Deployment, keyHash: string, background: (p: Promise<unknown>) => void): RateDecision {
    if (stryMutAct_9fa48("109")) {
      {}
    } else {
      stryCov_9fa48("109");
      const limits = this.#kind.limitsOf(deployment);
      if (stryMutAct_9fa48("112") ? false : stryMutAct_9fa48("111") ? true : stryMutAct_9fa48("110") ? limits : (stryCov_9fa48("110", "111", "112"), !limits)) return stryMutAct_9fa48("113") ? {} : (stryCov_9fa48("113"), {
        ok: stryMutAct_9fa48("114") ? false : (stryCov_9fa48("114"), true)
      });
      const now = this.#now();
      const k = this.#key(deployment.name, keyHash, limits, now);
      if (stryMutAct_9fa48("115")) {
        ;
      } else {
        stryCov_9fa48("115");
        refill(k.bucket, limits, now);
      }
      if (stryMutAct_9fa48("116")) {
        ;
      } else {
        stryCov_9fa48("116");
        this.#maybeSync(deployment.name, limits, now, background);
      }
      if (stryMutAct_9fa48("120") ? k.bucket.tokens <= 0 : stryMutAct_9fa48("119") ? k.bucket.tokens >= 0 : stryMutAct_9fa48("118") ? false : stryMutAct_9fa48("117") ? true : (stryCov_9fa48("117", "118", "119", "120"), k.bucket.tokens > 0)) return stryMutAct_9fa48("121") ? {} : (stryCov_9fa48("121"), {
        ok: stryMutAct_9fa48("122") ? false : (stryCov_9fa48("122"), true)
      });
      return stryMutAct_9fa48("123") ? {} : (stryCov_9fa48("123"), {
        ok: stryMutAct_9fa48("124") ? true : (stryCov_9fa48("124"), false),
        retryAfterSeconds: stryMutAct_9fa48("125") ? Math.min(1, Math.ceil((1 - k.bucket.tokens) / limits.requestsPerSecond)) : (stryCov_9fa48("125"), Math.max(1, Math.ceil(stryMutAct_9fa48("126") ? (1 - k.bucket.tokens) * limits.requestsPerSecond : (stryCov_9fa48("126"), (stryMutAct_9fa48("127") ? 1 + k.bucket.tokens : (stryCov_9fa48("127"), 1 - k.bucket.tokens)) / limits.requestsPerSecond))))
      });
    }
  }

  /** Charges `amount` (an answer's tokens) to the key's bucket, which may go below zero. */
  charge(deployment: Deployment, keyHash: string, amount: number, background: (p: Promise<unknown>) => void): void {
    if (stryMutAct_9fa48("128")) {
      {}
    } else {
      stryCov_9fa48("128");
      const limits = this.#kind.limitsOf(deployment);
      if (stryMutAct_9fa48("131") ? !limits && !(amount > 0) : stryMutAct_9fa48("130") ? false : stryMutAct_9fa48("129") ? true : (stryCov_9fa48("129", "130", "131"), (stryMutAct_9fa48("132") ? limits : (stryCov_9fa48("132"), !limits)) || (stryMutAct_9fa48("133") ? amount > 0 : (stryCov_9fa48("133"), !(stryMutAct_9fa48("137") ? amount <= 0 : stryMutAct_9fa48("136") ? amount >= 0 : stryMutAct_9fa48("135") ? false : stryMutAct_9fa48("134") ? true : (stryCov_9fa48("134", "135", "136", "137"), amount > 0)))))) return;
      const now = this.#now();
      const k = this.#key(deployment.name, keyHash, limits, now);
      if (stryMutAct_9fa48("138")) {
        ;
      } else {
        stryCov_9fa48("138");
        refill(k.bucket, limits, now);
      }
      stryMutAct_9fa48("139") ? k.bucket.tokens += amount : (stryCov_9fa48("139"), k.bucket.tokens -= amount);
      if (stryMutAct_9fa48("140")) {
        ;
      } else {
        stryCov_9fa48("140");
        this.#used(k, amount, now);
      }
      if (stryMutAct_9fa48("141")) {
        ;
      } else {
        stryCov_9fa48("141");
        this.#maybeSync(deployment.name, limits, now, background);
      }
    }
  }
  #key(deployment: string, keyHash: string, limits: BucketLimits, now: number): KeyState {
    if (stryMutAct_9fa48("142")) {
      {}
    } else {
      stryCov_9fa48("142");
      let keys = this.#keys.get(deployment);
      if (stryMutAct_9fa48("145") ? false : stryMutAct_9fa48("144") ? true : stryMutAct_9fa48("143") ? keys : (stryCov_9fa48("143", "144", "145"), !keys)) {
        if (stryMutAct_9fa48("146")) {
          {}
        } else {
          stryCov_9fa48("146");
          keys = new Map();
          if (stryMutAct_9fa48("147")) {
            ;
          } else {
            stryCov_9fa48("147");
            this.#keys.set(deployment, keys);
          }
        }
      }
      let k = keys.get(keyHash);
      if (stryMutAct_9fa48("150") ? false : stryMutAct_9fa48("149") ? true : stryMutAct_9fa48("148") ? k : (stryCov_9fa48("148", "149", "150"), !k)) {
        if (stryMutAct_9fa48("151")) {
          {}
        } else {
          stryCov_9fa48("151");
          k = stryMutAct_9fa48("152") ? {} : (stryCov_9fa48("152"), {
            bucket: fullBucket(limits, now),
            used: 0,
            since: now
          });
          if (stryMutAct_9fa48("153")) {
            ;
          } else {
            stryCov_9fa48("153");
            keys.set(keyHash, k);
          }
        }
      }
      return k;
    }
  }
  #used(k: KeyState, amount: number, now: number): void {
    if (stryMutAct_9fa48("154")) {
      {}
    } else {
      stryCov_9fa48("154");
      if (stryMutAct_9fa48("157") ? k.used !== 0 : stryMutAct_9fa48("156") ? false : stryMutAct_9fa48("155") ? true : (stryCov_9fa48("155", "156", "157"), k.used === 0)) k.since = now;
      stryMutAct_9fa48("158") ? k.used -= amount : (stryCov_9fa48("158"), k.used += amount);
    }
  }
  #maybeSync(deployment: string, limits: BucketLimits, now: number, background: (p: Promise<unknown>) => void): void {
    if (stryMutAct_9fa48("159")) {
      {}
    } else {
      stryCov_9fa48("159");
      if (stryMutAct_9fa48("163") ? now >= (this.#nextSyncAt.get(deployment) ?? 0) : stryMutAct_9fa48("162") ? now <= (this.#nextSyncAt.get(deployment) ?? 0) : stryMutAct_9fa48("161") ? false : stryMutAct_9fa48("160") ? true : (stryCov_9fa48("160", "161", "162", "163"), now < (stryMutAct_9fa48("164") ? this.#nextSyncAt.get(deployment) && 0 : (stryCov_9fa48("164"), this.#nextSyncAt.get(deployment) ?? 0)))) return;
      this.#nextSyncAt.set(deployment, stryMutAct_9fa48("166") ? now - RATE_SYNC_INTERVAL_MS : (stryCov_9fa48("166"), now + RATE_SYNC_INTERVAL_MS));
      if (stryMutAct_9fa48("167")) {
        ;
      } else {
        stryCov_9fa48("167");
        background(this.#syncDeployment(deployment, limits, this.#keys.get(deployment)!));
      }
    }
  }
  async #syncDeployment(deployment: string, limits: BucketLimits, keys: Map<string, KeyState>): Promise<void> {
    if (stryMutAct_9fa48("168")) {
      {}
    } else {
      stryCov_9fa48("168");
      const byShard = new Map<number, RateUse[]>();
      for (const [key, k] of keys) {
        if (stryMutAct_9fa48("169")) {
          {}
        } else {
          stryCov_9fa48("169");
          const shard = stryMutAct_9fa48("170") ? this.#kind.shardOffset - rateLimitShard(key) : (stryCov_9fa48("170"), this.#kind.shardOffset + rateLimitShard(key));
          if (stryMutAct_9fa48("173") ? false : stryMutAct_9fa48("172") ? true : stryMutAct_9fa48("171") ? byShard.has(shard) : (stryCov_9fa48("171", "172", "173"), !byShard.has(shard))) byShard.set(shard, stryMutAct_9fa48("175") ? ["Stryker was here"] : (stryCov_9fa48("175"), []));
          byShard.get(shard)!.push(stryMutAct_9fa48("177") ? {} : (stryCov_9fa48("177"), {
            key,
            used: k.used,
            since: k.since
          }));
          k.used = 0;
        }
      }
      await Promise.all((stryMutAct_9fa48("178") ? [] : (stryCov_9fa48("178"), [...byShard])).map(async ([shard, uses]) => {
        if (stryMutAct_9fa48("179")) {
          {}
        } else {
          stryCov_9fa48("179");
          stryMutAct_9fa48("180") ? this.syncs-- : (stryCov_9fa48("180"), this.syncs++);
          try {
            if (stryMutAct_9fa48("181")) {
              {}
            } else {
              stryCov_9fa48("181");
              for (const r of await this.#sync(deployment, shard, limits, uses)) {
                if (stryMutAct_9fa48("182")) {
                  {}
                } else {
                  stryCov_9fa48("182");
                  const k = keys.get(r.key);
                  // The global bucket counts every isolate's use, ours included, up to
                  // when the sync was sent; what we let through since still comes off.
                  if (stryMutAct_9fa48("184") ? false : stryMutAct_9fa48("183") ? true : (stryCov_9fa48("183", "184"), k)) k.bucket.tokens = stryMutAct_9fa48("185") ? Math.max(k.bucket.tokens, r.tokens - k.used) : (stryCov_9fa48("185"), Math.min(k.bucket.tokens, stryMutAct_9fa48("186") ? r.tokens + k.used : (stryCov_9fa48("186"), r.tokens - k.used)));
                }
              }
            }
          } catch (err) {
            if (stryMutAct_9fa48("187")) {
              {}
            } else {
              stryCov_9fa48("187");
              // Local limits still hold; give the uses back so the next sync reports them.
              for (const u of uses) {
                if (stryMutAct_9fa48("188")) {
                  {}
                } else {
                  stryCov_9fa48("188");
                  const k = keys.get(u.key);
                  if (stryMutAct_9fa48("191") ? false : stryMutAct_9fa48("190") ? true : stryMutAct_9fa48("189") ? k : (stryCov_9fa48("189", "190", "191"), !k)) continue;
                  if (stryMutAct_9fa48("194") ? k.used === 0 && u.since < k.since : stryMutAct_9fa48("193") ? false : stryMutAct_9fa48("192") ? true : (stryCov_9fa48("192", "193", "194"), (stryMutAct_9fa48("196") ? k.used !== 0 : stryMutAct_9fa48("195") ? false : (stryCov_9fa48("195", "196"), k.used === 0)) || (stryMutAct_9fa48("199") ? u.since >= k.since : stryMutAct_9fa48("198") ? u.since <= k.since : stryMutAct_9fa48("197") ? false : (stryCov_9fa48("197", "198", "199"), u.since < k.since)))) k.since = u.since;
                  stryMutAct_9fa48("200") ? k.used -= u.used : (stryCov_9fa48("200"), k.used += u.used);
                }
              }
              console.error(JSON.stringify(stryMutAct_9fa48("202") ? {} : (stryCov_9fa48("202"), {
                msg: stryMutAct_9fa48("203") ? "" : (stryCov_9fa48("203"), "rate limit sync failed"),
                deployment,
                error: String(err)
              })));
            }
          }
        }
      }));
      // Keys idle since the previous sync with a full bucket carry no state worth keeping.
      const now = this.#now();
      for (const [key, k] of keys) {
        if (stryMutAct_9fa48("204")) {
          {}
        } else {
          stryCov_9fa48("204");
          if (stryMutAct_9fa48("205")) {
            ;
          } else {
            stryCov_9fa48("205");
            refill(k.bucket, limits, now);
          }
          if (stryMutAct_9fa48("208") ? k.used === 0 || k.bucket.tokens >= limits.burst : stryMutAct_9fa48("207") ? false : stryMutAct_9fa48("206") ? true : (stryCov_9fa48("206", "207", "208"), (stryMutAct_9fa48("210") ? k.used !== 0 : stryMutAct_9fa48("209") ? true : (stryCov_9fa48("209", "210"), k.used === 0)) && (stryMutAct_9fa48("213") ? k.bucket.tokens < limits.burst : stryMutAct_9fa48("212") ? k.bucket.tokens > limits.burst : stryMutAct_9fa48("211") ? true : (stryCov_9fa48("211", "212", "213"), k.bucket.tokens >= limits.burst)))) if (stryMutAct_9fa48("214")) {
            ;
          } else {
            stryCov_9fa48("214");
            keys.delete(key);
          }
        }
      }
    }
  }
}

/**
 * Constant-time comparison of a `Bearer <secret>` header against the expected secret.
 * The supplied token goes first: the comparison's time follows its length, not the secret's.
 */
export function bearerMatches(header: string | undefined | null, secret: string | undefined): boolean {
  if (stryMutAct_9fa48("215")) {
    {}
  } else {
    stryCov_9fa48("215");
    if (stryMutAct_9fa48("218") ? !secret && !header?.startsWith("Bearer ") : stryMutAct_9fa48("217") ? false : stryMutAct_9fa48("216") ? true : (stryCov_9fa48("216", "217", "218"), (stryMutAct_9fa48("219") ? secret : (stryCov_9fa48("219"), !secret)) || (stryMutAct_9fa48("220") ? header?.startsWith("Bearer ") : (stryCov_9fa48("220"), !(stryMutAct_9fa48("222") ? header.startsWith("Bearer ") : stryMutAct_9fa48("221") ? header?.endsWith("Bearer ") : (stryCov_9fa48("221", "222"), header?.startsWith(stryMutAct_9fa48("223") ? "" : (stryCov_9fa48("223"), "Bearer ")))))))) return stryMutAct_9fa48("224") ? true : (stryCov_9fa48("224"), false);
    return timingSafeEqualStrings(stryMutAct_9fa48("225") ? header : (stryCov_9fa48("225"), header.slice(7)), secret);
  }
}

/** The 401 an admin route answers when `authorization` does not carry the admin secret; null when it does. Admin routes are off without a secret. */
export function adminRefusal(env: Pick<Env, "SWITCHYARD_ADMIN_SECRET">, authorization: string | undefined | null): Response | null {
  if (stryMutAct_9fa48("226")) {
    {}
  } else {
    stryCov_9fa48("226");
    if (stryMutAct_9fa48("228") ? false : stryMutAct_9fa48("227") ? true : (stryCov_9fa48("227", "228"), bearerMatches(authorization, env.SWITCHYARD_ADMIN_SECRET))) return null;
    return errorResponse(stryMutAct_9fa48("229") ? "" : (stryCov_9fa48("229"), "unauthorized"), stryMutAct_9fa48("230") ? "" : (stryCov_9fa48("230"), "admin secret missing or wrong"), stryMutAct_9fa48("231") ? {} : (stryCov_9fa48("231"), {
      headers: stryMutAct_9fa48("232") ? {} : (stryCov_9fa48("232"), {
        "www-authenticate": stryMutAct_9fa48("233") ? "" : (stryCov_9fa48("233"), "Bearer")
      })
    }));
  }
}