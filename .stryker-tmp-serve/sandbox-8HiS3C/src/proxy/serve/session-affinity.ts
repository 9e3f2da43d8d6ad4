/**
 * Session affinity at the first hop. The binding session → replica lives in the
 * deployment's SessionRouter Durable Objects; each isolate caches bindings for
 * SESSION_CACHE_TTL_MS, so a session costs one object call per isolate every few
 * seconds while it is in use, not one per request, and a binding changed by
 * another isolate wins here within that TTL.
 *
 * A session stays on its replica while the replica is ready, fresh, not cooling
 * down after a connection failure, and its load is below `rebindAtLoad` × its
 * capacity. Otherwise it is rebound to the best other replica (compare-and-set
 * in the object, so concurrent isolates converge) and the new binding is stored.
 * An unreachable object never fails a request: the request goes to the best
 * replica and the binding is tried again on the next request.
 *
 * Sessions are bound only from their `bindOnRequest`-th request in an isolate
 * (default 2): until then a session is placed by rendezvous hashing over the
 * candidates, skipping replicas at the rebind threshold, so every isolate with
 * the same membership places it on the same replica with no object call. Under
 * a prefix balancer a request with a prompt is placed by its prompt instead,
 * which every isolate also computes alike, and which puts the session where
 * its prefix (a shared system prompt, its own history) is cached. A
 * caller that invents a new session id per request therefore costs nothing in
 * the objects, and one that repeats ids may create at most
 * `maxNewBindingsPerSecond` (burst `maxNewBindingsBurst`) bindings per isolate.
 *
 * Every replica response to a session request carries a signed binding token
 * naming the session's replica (session-token.ts). A client that sends it back
 * is bound by it: while the named replica is usable the request goes there with
 * no object call, whatever this isolate has cached, so the objects see only new
 * sessions and moves; when it is not, the rules above move the session, and the response
 * carries a token naming the new replica. Clients that ignore tokens are served
 * from the objects and the cache as before.
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
import { fullness } from "../../policy/pick-replica.ts";
import { rendezvousWeight } from "../../protocol/hashing.ts";
import { fullBucket, takeToken, type TokenBucket } from "../../policy/token-bucket.ts";
import type { Deployment } from "../../config/deployment.ts";
import type { ReplicaEntry } from "./view.ts";

/** How long an isolate trusts a cached binding before asking the object again. */
export const SESSION_CACHE_TTL_MS = 5_000;
/** After a failed object call, the isolate routes the session on its own for this long before asking again. */
export const SESSION_STORE_RETRY_MS = 1_000;
/**
 * A bound replica that is full (but alive) keeps the session for this long:
 * meanwhile each request spills to the best other replica and the binding stays,
 * so a burst does not move sessions (and lose their KV caches) back and forth.
 * Full for longer than this, the session moves.
 */
export const SATURATION_GRACE_MS = 2_000;
/** Bindings an isolate caches at most (oldest dropped first); also the most unbound sessions and clients it tracks. */
export const SESSION_CACHE_MAX = 10_000;

/** Binding tokens, as affinity uses them (session-token.ts's SessionTokens). */
export interface BindingTokens {
  /** The replica a valid token binds the session to; undefined for an invalid, expired or foreign one. Never rejects. */
  verify(deployment: string, session: string, token: string): Promise<string | undefined>;
  /** A token binding the session to `replica` for `ttlSeconds`. */
  issue(deployment: string, session: string, replica: string, ttlSeconds: number): Promise<string>;
  /** The token issue() would hand out again without minting, synchronously; undefined when it would mint. */
  reusable?(deployment: string, session: string, replica: string, ttlSeconds: number): string | undefined;
}

/** The SessionRouter objects, as the proxy sees them (RPC in the Worker, a fake in unit tests). */
export interface SessionStore {
  resolve(deployment: Deployment, session: string, proposal: string): Promise<string>;
  rebind(deployment: Deployment, session: string, from: string, to: string): Promise<string>;
}
interface CachedBinding {
  replica: string;
  fetchedAt: number;
  /** Since when the bound replica has been found full (undefined: it had room last time). */
  fullSince?: number;
}
export class SessionAffinity {
  readonly #store: SessionStore;
  readonly #now: () => number;
  readonly #tokens: BindingTokens | undefined;
  readonly #cache = new Map<string, CachedBinding>();
  /** Sessions seen here but not bound yet: how many requests, and where the last one went. */
  readonly #unbound = new Map<string, {
    requests: number;
    replica: string;
  }>();
  /** New bindings each client may still create in this isolate. */
  readonly #budgets = new Map<string, TokenBucket>();
  /** Calls made to the session objects (observability and tests). */
  storeCalls = 0;

  /** Without `tokens`, no token is minted or honoured. */
  constructor(store: SessionStore, now: () => number = Date.now, tokens?: BindingTokens) {
    if (stryMutAct_9fa48("3502")) {
      {}
    } else {
      stryCov_9fa48("3502");
      this.#store = store;
      this.#now = now;
      this.#tokens = tokens;
    }
  }

  /**
   * The replica this session's request should try first, or undefined when no
   * candidate exists. `propose` picks the best replica among those given (the
   * deployment's balancer). `token` is the binding token the client sent
   * back, if any; one that does not verify is ignored. `placeNew` places a
   * session this isolate has not bound yet, among the usable candidates (a
   * prefix balancer's choice by the request's prompt); without it, rendezvous
   * hashing on the session id does.
   */
  async choose(deployment: Deployment, session: string, candidates: readonly ReplicaEntry[], propose: (among: readonly ReplicaEntry[]) => ReplicaEntry | undefined, client = stryMutAct_9fa48("3503") ? "Stryker was here!" : (stryCov_9fa48("3503"), ""), late: () => readonly ReplicaEntry[] = stryMutAct_9fa48("3504") ? () => undefined : (stryCov_9fa48("3504"), () => stryMutAct_9fa48("3505") ? ["Stryker was here"] : (stryCov_9fa48("3505"), [])), token?: string, placeNew?: (among: readonly ReplicaEntry[]) => ReplicaEntry | undefined): Promise<ReplicaEntry | undefined> {
    if (stryMutAct_9fa48("3506")) {
      {}
    } else {
      stryCov_9fa48("3506");
      const key = cacheKey(deployment.name, session);
      const tokenReplica = (stryMutAct_9fa48("3509") ? token !== undefined || this.#tokens : stryMutAct_9fa48("3508") ? false : stryMutAct_9fa48("3507") ? true : (stryCov_9fa48("3507", "3508", "3509"), (stryMutAct_9fa48("3511") ? token === undefined : stryMutAct_9fa48("3510") ? true : (stryCov_9fa48("3510", "3511"), token !== undefined)) && this.#tokens)) ? await this.#tokens.verify(deployment.name, session, token) : undefined;
      const now = this.#now();
      // The bound replica may be merely late (its liveness lapsed in this view, nothing showed it dead): it is still tried
      // first. Asked for only when the replica is not a candidate, so a usual request does not walk the view twice.
      let lapsed: readonly ReplicaEntry[] | undefined;
      const find = stryMutAct_9fa48("3512") ? () => undefined : (stryCov_9fa48("3512"), (() => {
        const find = (id: string) => stryMutAct_9fa48("3513") ? candidates.find(c => c.id === id) && (lapsed ??= late()).find(c => c.id === id) : (stryCov_9fa48("3513"), candidates.find(stryMutAct_9fa48("3514") ? () => undefined : (stryCov_9fa48("3514"), c => stryMutAct_9fa48("3517") ? c.id !== id : stryMutAct_9fa48("3516") ? false : stryMutAct_9fa48("3515") ? true : (stryCov_9fa48("3515", "3516", "3517"), c.id === id))) ?? (stryMutAct_9fa48("3518") ? lapsed &&= late() : (stryCov_9fa48("3518"), lapsed ??= late())).find(stryMutAct_9fa48("3519") ? () => undefined : (stryCov_9fa48("3519"), c => stryMutAct_9fa48("3522") ? c.id !== id : stryMutAct_9fa48("3521") ? false : stryMutAct_9fa48("3520") ? true : (stryCov_9fa48("3520", "3521", "3522"), c.id === id))));
        return find;
      })());
      const usable = (id: string) => {
        if (stryMutAct_9fa48("3523")) {
          {}
        } else {
          stryCov_9fa48("3523");
          const e = find(id);
          return (stryMutAct_9fa48("3526") ? e || fullness(e) < deployment.sessionAffinity.rebindAtLoad : stryMutAct_9fa48("3525") ? false : stryMutAct_9fa48("3524") ? true : (stryCov_9fa48("3524", "3525", "3526"), e && (stryMutAct_9fa48("3529") ? fullness(e) >= deployment.sessionAffinity.rebindAtLoad : stryMutAct_9fa48("3528") ? fullness(e) <= deployment.sessionAffinity.rebindAtLoad : stryMutAct_9fa48("3527") ? true : (stryCov_9fa48("3527", "3528", "3529"), fullness(e) < deployment.sessionAffinity.rebindAtLoad)))) ? e : undefined;
        }
      };
      let cached = this.#cache.get(key);
      let trusted = stryMutAct_9fa48("3532") ? cached !== undefined || now - cached.fetchedAt < SESSION_CACHE_TTL_MS : stryMutAct_9fa48("3531") ? false : stryMutAct_9fa48("3530") ? true : (stryCov_9fa48("3530", "3531", "3532"), (stryMutAct_9fa48("3534") ? cached === undefined : stryMutAct_9fa48("3533") ? true : (stryCov_9fa48("3533", "3534"), cached !== undefined)) && (stryMutAct_9fa48("3537") ? now - cached.fetchedAt >= SESSION_CACHE_TTL_MS : stryMutAct_9fa48("3536") ? now - cached.fetchedAt <= SESSION_CACHE_TTL_MS : stryMutAct_9fa48("3535") ? true : (stryCov_9fa48("3535", "3536", "3537"), (stryMutAct_9fa48("3538") ? now + cached.fetchedAt : (stryCov_9fa48("3538"), now - cached.fetchedAt)) < SESSION_CACHE_TTL_MS)));
      if (stryMutAct_9fa48("3541") ? tokenReplica === undefined : stryMutAct_9fa48("3540") ? false : stryMutAct_9fa48("3539") ? true : (stryCov_9fa48("3539", "3540", "3541"), tokenReplica !== undefined)) {
        if (stryMutAct_9fa48("3542")) {
          {}
        } else {
          stryCov_9fa48("3542");
          // The token is the binding, trusted however old this isolate's copy is. Only when its replica is
          // unusable and this isolate has a fresh binding elsewhere (it moved the session, and the client sent
          // a token from before the move), that binding wins: moving again would cost an object call.
          if (stryMutAct_9fa48("3545") ? cached?.replica !== tokenReplica : stryMutAct_9fa48("3544") ? false : stryMutAct_9fa48("3543") ? true : (stryCov_9fa48("3543", "3544", "3545"), (stryMutAct_9fa48("3546") ? cached.replica : (stryCov_9fa48("3546"), cached?.replica)) === tokenReplica)) trusted = stryMutAct_9fa48("3547") ? false : (stryCov_9fa48("3547"), true);else if (stryMutAct_9fa48("3550") ? !trusted && usable(tokenReplica) : stryMutAct_9fa48("3549") ? false : stryMutAct_9fa48("3548") ? true : (stryCov_9fa48("3548", "3549", "3550"), (stryMutAct_9fa48("3551") ? trusted : (stryCov_9fa48("3551"), !trusted)) || usable(tokenReplica))) {
            if (stryMutAct_9fa48("3552")) {
              {}
            } else {
              stryCov_9fa48("3552");
              if (stryMutAct_9fa48("3553")) {
                ;
              } else {
                stryCov_9fa48("3553");
                this.#unbound.delete(key);
              }
              if (stryMutAct_9fa48("3554")) {
                ;
              } else {
                stryCov_9fa48("3554");
                this.#remember(key, tokenReplica);
              }
              cached = this.#cache.get(key);
              trusted = stryMutAct_9fa48("3555") ? false : (stryCov_9fa48("3555"), true);
            }
          }
        }
      }
      if (stryMutAct_9fa48("3558") ? cached || trusted : stryMutAct_9fa48("3557") ? false : stryMutAct_9fa48("3556") ? true : (stryCov_9fa48("3556", "3557", "3558"), cached && trusted)) {
        if (stryMutAct_9fa48("3559")) {
          {}
        } else {
          stryCov_9fa48("3559");
          const e = usable(cached.replica);
          if (stryMutAct_9fa48("3561") ? false : stryMutAct_9fa48("3560") ? true : (stryCov_9fa48("3560", "3561"), e)) {
            if (stryMutAct_9fa48("3562")) {
              {}
            } else {
              stryCov_9fa48("3562");
              cached.fullSince = undefined;
              return e;
            }
          }
          const alive = find(cached.replica);
          if (stryMutAct_9fa48("3564") ? false : stryMutAct_9fa48("3563") ? true : (stryCov_9fa48("3563", "3564"), alive)) {
            if (stryMutAct_9fa48("3565")) {
              {}
            } else {
              stryCov_9fa48("3565");
              // Full but alive: spill this request, keep the binding, for a grace period.
              stryMutAct_9fa48("3566") ? cached.fullSince &&= now : (stryCov_9fa48("3566"), cached.fullSince ??= now);
              if (stryMutAct_9fa48("3570") ? now - cached.fullSince >= SATURATION_GRACE_MS : stryMutAct_9fa48("3569") ? now - cached.fullSince <= SATURATION_GRACE_MS : stryMutAct_9fa48("3568") ? false : stryMutAct_9fa48("3567") ? true : (stryCov_9fa48("3567", "3568", "3569", "3570"), (stryMutAct_9fa48("3571") ? now + cached.fullSince : (stryCov_9fa48("3571"), now - cached.fullSince)) < SATURATION_GRACE_MS)) {
                if (stryMutAct_9fa48("3572")) {
                  {}
                } else {
                  stryCov_9fa48("3572");
                  const other = propose(stryMutAct_9fa48("3573") ? candidates : (stryCov_9fa48("3573"), candidates.filter(stryMutAct_9fa48("3574") ? () => undefined : (stryCov_9fa48("3574"), c => stryMutAct_9fa48("3577") ? c.id === cached.replica : stryMutAct_9fa48("3576") ? false : stryMutAct_9fa48("3575") ? true : (stryCov_9fa48("3575", "3576", "3577"), c.id !== cached.replica)))));
                  return (stryMutAct_9fa48("3580") ? other || usable(other.id) : stryMutAct_9fa48("3579") ? false : stryMutAct_9fa48("3578") ? true : (stryCov_9fa48("3578", "3579", "3580"), other && usable(other.id))) ? other : alive;
                }
              }
            }
          }
          return this.#move(deployment, session, key, cached.replica, candidates, propose, usable);
        }
      }
      let proposal: ReplicaEntry | undefined;
      if (stryMutAct_9fa48("3583") ? !cached || deployment.sessionAffinity.bindOnRequest > 1 : stryMutAct_9fa48("3582") ? false : stryMutAct_9fa48("3581") ? true : (stryCov_9fa48("3581", "3582", "3583"), (stryMutAct_9fa48("3584") ? cached : (stryCov_9fa48("3584"), !cached)) && (stryMutAct_9fa48("3587") ? deployment.sessionAffinity.bindOnRequest <= 1 : stryMutAct_9fa48("3586") ? deployment.sessionAffinity.bindOnRequest >= 1 : stryMutAct_9fa48("3585") ? true : (stryCov_9fa48("3585", "3586", "3587"), deployment.sessionAffinity.bindOnRequest > 1)))) {
        if (stryMutAct_9fa48("3588")) {
          {}
        } else {
          stryCov_9fa48("3588");
          // Not bound yet: the first requests are placed by hash, without an object call.
          const seen = this.#unbound.get(key);
          const placed = stryMutAct_9fa48("3591") ? (seen && usable(seen.replica) || (placeNew ? placeNew(candidates.filter(c => usable(c.id))) : hashedChoice(session, candidates, usable))) && propose(candidates) : stryMutAct_9fa48("3590") ? false : stryMutAct_9fa48("3589") ? true : (stryCov_9fa48("3589", "3590", "3591"), (stryMutAct_9fa48("3593") ? seen && usable(seen.replica) && (placeNew ? placeNew(candidates.filter(c => usable(c.id))) : hashedChoice(session, candidates, usable)) : stryMutAct_9fa48("3592") ? false : (stryCov_9fa48("3592", "3593"), (stryMutAct_9fa48("3595") ? seen || usable(seen.replica) : stryMutAct_9fa48("3594") ? false : (stryCov_9fa48("3594", "3595"), seen && usable(seen.replica))) || (placeNew ? placeNew(stryMutAct_9fa48("3596") ? candidates : (stryCov_9fa48("3596"), candidates.filter(stryMutAct_9fa48("3597") ? () => undefined : (stryCov_9fa48("3597"), c => usable(c.id))))) : hashedChoice(session, candidates, usable)))) || propose(candidates));
          if (stryMutAct_9fa48("3600") ? false : stryMutAct_9fa48("3599") ? true : stryMutAct_9fa48("3598") ? placed : (stryCov_9fa48("3598", "3599", "3600"), !placed)) return undefined;
          const requests = stryMutAct_9fa48("3601") ? (seen?.requests ?? 0) - 1 : (stryCov_9fa48("3601"), (stryMutAct_9fa48("3602") ? seen?.requests && 0 : (stryCov_9fa48("3602"), (stryMutAct_9fa48("3603") ? seen.requests : (stryCov_9fa48("3603"), seen?.requests)) ?? 0)) + 1);
          if (stryMutAct_9fa48("3606") ? requests < deployment.sessionAffinity.bindOnRequest && !this.#mayBind(deployment, client, now) : stryMutAct_9fa48("3605") ? false : stryMutAct_9fa48("3604") ? true : (stryCov_9fa48("3604", "3605", "3606"), (stryMutAct_9fa48("3609") ? requests >= deployment.sessionAffinity.bindOnRequest : stryMutAct_9fa48("3608") ? requests <= deployment.sessionAffinity.bindOnRequest : stryMutAct_9fa48("3607") ? false : (stryCov_9fa48("3607", "3608", "3609"), requests < deployment.sessionAffinity.bindOnRequest)) || (stryMutAct_9fa48("3610") ? this.#mayBind(deployment, client, now) : (stryCov_9fa48("3610"), !this.#mayBind(deployment, client, now))))) {
            if (stryMutAct_9fa48("3611")) {
              {}
            } else {
              stryCov_9fa48("3611");
              remember(this.#unbound, key, stryMutAct_9fa48("3613") ? {} : (stryCov_9fa48("3613"), {
                requests,
                replica: placed.id
              }));
              return placed;
            }
          }
          if (stryMutAct_9fa48("3614")) {
            ;
          } else {
            stryCov_9fa48("3614");
            this.#unbound.delete(key);
          }
          proposal = placed;
        }
      } else {
        if (stryMutAct_9fa48("3615")) {
          {}
        } else {
          stryCov_9fa48("3615");
          proposal = propose(candidates);
        }
      }
      if (stryMutAct_9fa48("3618") ? false : stryMutAct_9fa48("3617") ? true : stryMutAct_9fa48("3616") ? proposal : (stryCov_9fa48("3616", "3617", "3618"), !proposal)) return undefined;
      let bound: string;
      try {
        if (stryMutAct_9fa48("3619")) {
          {}
        } else {
          stryCov_9fa48("3619");
          stryMutAct_9fa48("3620") ? this.storeCalls-- : (stryCov_9fa48("3620"), this.storeCalls++);
          bound = await this.#store.resolve(deployment, session, proposal.id);
        }
      } catch (err) {
        if (stryMutAct_9fa48("3621")) {
          {}
        } else {
          stryCov_9fa48("3621");
          if (stryMutAct_9fa48("3622")) {
            ;
          } else {
            stryCov_9fa48("3622");
            logStoreFailure(deployment.name, err);
          }
          if (stryMutAct_9fa48("3623")) {
            ;
          } else {
            stryCov_9fa48("3623");
            this.#remember(key, proposal.id, SESSION_STORE_RETRY_MS);
          }
          return proposal;
        }
      }
      if (stryMutAct_9fa48("3624")) {
        ;
      } else {
        stryCov_9fa48("3624");
        this.#remember(key, bound);
      }
      return stryMutAct_9fa48("3625") ? usable(bound) && this.#move(deployment, session, key, bound, candidates, propose, usable) : (stryCov_9fa48("3625"), usable(bound) ?? this.#move(deployment, session, key, bound, candidates, propose, usable));
    }
  }

  /**
   * The request was served by `replicaId`. When that is not the bound replica (the
   * bound one refused or failed and a retry went elsewhere), the session follows.
   */
  served(deployment: Deployment, session: string, replicaId: string, background: (p: Promise<unknown>) => void): void {
    if (stryMutAct_9fa48("3626")) {
      {}
    } else {
      stryCov_9fa48("3626");
      const key = cacheKey(deployment.name, session);
      const unbound = this.#unbound.get(key);
      if (stryMutAct_9fa48("3628") ? false : stryMutAct_9fa48("3627") ? true : (stryCov_9fa48("3627", "3628"), unbound)) {
        if (stryMutAct_9fa48("3629")) {
          {}
        } else {
          stryCov_9fa48("3629");
          // Not bound yet: its next request starts from where this one was served, still without an object call.
          unbound.replica = replicaId;
          return;
        }
      }
      const cached = this.#cache.get(key);
      if (stryMutAct_9fa48("3632") ? !cached && cached.replica === replicaId : stryMutAct_9fa48("3631") ? false : stryMutAct_9fa48("3630") ? true : (stryCov_9fa48("3630", "3631", "3632"), (stryMutAct_9fa48("3633") ? cached : (stryCov_9fa48("3633"), !cached)) || (stryMutAct_9fa48("3635") ? cached.replica !== replicaId : stryMutAct_9fa48("3634") ? false : (stryCov_9fa48("3634", "3635"), cached.replica === replicaId)))) return;
      if (stryMutAct_9fa48("3636")) {
        ;
      } else {
        stryCov_9fa48("3636");
        this.#remember(key, replicaId);
      }
      stryMutAct_9fa48("3637") ? this.storeCalls-- : (stryCov_9fa48("3637"), this.storeCalls++);
      if (stryMutAct_9fa48("3638")) {
        ;
      } else {
        stryCov_9fa48("3638");
        background(this.#store.rebind(deployment, session, cached.replica, replicaId).then(stryMutAct_9fa48("3639") ? () => undefined : (stryCov_9fa48("3639"), bound => this.#remember(key, bound))).catch(stryMutAct_9fa48("3640") ? () => undefined : (stryCov_9fa48("3640"), (err: unknown) => logStoreFailure(deployment.name, err))));
      }
    }
  }

  /**
   * The binding token for the response to this session's request, which
   * `servedBy` served: it names the session's binding in this isolate, which is
   * `servedBy` except while the bound replica is full and the request spilled
   * (then the binding stays, and so does the token's replica). Undefined when
   * tokens are off or cannot be minted (the response goes without one).
   */
  async tokenFor(deployment: Deployment, session: string, servedBy: string): Promise<string | undefined> {
    if (stryMutAct_9fa48("3641")) {
      {}
    } else {
      stryCov_9fa48("3641");
      if (stryMutAct_9fa48("3644") ? false : stryMutAct_9fa48("3643") ? true : stryMutAct_9fa48("3642") ? this.#tokens : (stryCov_9fa48("3642", "3643", "3644"), !this.#tokens)) return undefined;
      const replica = this.#tokenReplica(deployment, session, servedBy);
      try {
        if (stryMutAct_9fa48("3645")) {
          {}
        } else {
          stryCov_9fa48("3645");
          return await this.#tokens.issue(deployment.name, session, replica, deployment.sessionAffinity.ttlSeconds);
        }
      } catch (err) {
        if (stryMutAct_9fa48("3646")) {
          {}
        } else {
          stryCov_9fa48("3646");
          console.error(JSON.stringify(stryMutAct_9fa48("3648") ? {} : (stryCov_9fa48("3648"), {
            msg: stryMutAct_9fa48("3649") ? "" : (stryCov_9fa48("3649"), "session token not minted"),
            deployment: deployment.name,
            error: String(err)
          })));
          return undefined;
        }
      }
    }
  }

  /**
   * tokenFor's answer when it needs no minting (the session's token is reused), with no
   * promise; undefined otherwise (then tokenFor mints, or there is no token to give).
   */
  reusableToken(deployment: Deployment, session: string, servedBy: string): string | undefined {
    if (stryMutAct_9fa48("3650")) {
      {}
    } else {
      stryCov_9fa48("3650");
      if (stryMutAct_9fa48("3653") ? false : stryMutAct_9fa48("3652") ? true : stryMutAct_9fa48("3651") ? this.#tokens?.reusable : (stryCov_9fa48("3651", "3652", "3653"), !(stryMutAct_9fa48("3654") ? this.#tokens.reusable : (stryCov_9fa48("3654"), this.#tokens?.reusable)))) return undefined;
      return this.#tokens.reusable(deployment.name, session, this.#tokenReplica(deployment, session, servedBy), deployment.sessionAffinity.ttlSeconds);
    }
  }

  /** The replica a token for this response names: the session's binding here, else who served it. */
  #tokenReplica(deployment: Deployment, session: string, servedBy: string): string {
    if (stryMutAct_9fa48("3655")) {
      {}
    } else {
      stryCov_9fa48("3655");
      const key = cacheKey(deployment.name, session);
      return stryMutAct_9fa48("3656") ? (this.#cache.get(key)?.replica ?? this.#unbound.get(key)?.replica) && servedBy : (stryCov_9fa48("3656"), (stryMutAct_9fa48("3657") ? this.#cache.get(key)?.replica && this.#unbound.get(key)?.replica : (stryCov_9fa48("3657"), (stryMutAct_9fa48("3658") ? this.#cache.get(key).replica : (stryCov_9fa48("3658"), this.#cache.get(key)?.replica)) ?? (stryMutAct_9fa48("3659") ? this.#unbound.get(key).replica : (stryCov_9fa48("3659"), this.#unbound.get(key)?.replica)))) ?? servedBy);
    }
  }

  /** Bindings cached in this isolate. */
  get cached(): number {
    if (stryMutAct_9fa48("3660")) {
      {}
    } else {
      stryCov_9fa48("3660");
      return this.#cache.size;
    }
  }

  /** Sessions seen in this isolate that are not bound yet. */
  get unbound(): number {
    if (stryMutAct_9fa48("3661")) {
      {}
    } else {
      stryCov_9fa48("3661");
      return this.#unbound.size;
    }
  }

  /** Takes one new binding from the client's budget in this isolate; false when it is spent. */
  #mayBind(deployment: Deployment, client: string, now: number): boolean {
    if (stryMutAct_9fa48("3662")) {
      {}
    } else {
      stryCov_9fa48("3662");
      const {
        maxNewBindingsPerSecond: requestsPerSecond,
        maxNewBindingsBurst: burst
      } = deployment.sessionAffinity;
      const limits = stryMutAct_9fa48("3663") ? {} : (stryCov_9fa48("3663"), {
        requestsPerSecond,
        burst
      });
      const id = stryMutAct_9fa48("3664") ? `` : (stryCov_9fa48("3664"), `${deployment.name}\u0000${client}`);
      const bucket = stryMutAct_9fa48("3665") ? this.#budgets.get(id) && fullBucket(limits, now) : (stryCov_9fa48("3665"), this.#budgets.get(id) ?? fullBucket(limits, now));
      const ok = takeToken(bucket, limits, now).ok;
      if (stryMutAct_9fa48("3666")) {
        ;
      } else {
        stryCov_9fa48("3666");
        remember(this.#budgets, id, bucket);
      }
      return ok;
    }
  }
  async #move(deployment: Deployment, session: string, key: string, from: string, candidates: readonly ReplicaEntry[], propose: (among: readonly ReplicaEntry[]) => ReplicaEntry | undefined, usable: (id: string) => ReplicaEntry | undefined): Promise<ReplicaEntry | undefined> {
    if (stryMutAct_9fa48("3667")) {
      {}
    } else {
      stryCov_9fa48("3667");
      const proposal = stryMutAct_9fa48("3668") ? propose(candidates.filter(c => c.id !== from)) && propose(candidates) : (stryCov_9fa48("3668"), propose(stryMutAct_9fa48("3669") ? candidates : (stryCov_9fa48("3669"), candidates.filter(stryMutAct_9fa48("3670") ? () => undefined : (stryCov_9fa48("3670"), c => stryMutAct_9fa48("3673") ? c.id === from : stryMutAct_9fa48("3672") ? false : stryMutAct_9fa48("3671") ? true : (stryCov_9fa48("3671", "3672", "3673"), c.id !== from))))) ?? propose(candidates));
      if (stryMutAct_9fa48("3676") ? false : stryMutAct_9fa48("3675") ? true : stryMutAct_9fa48("3674") ? proposal : (stryCov_9fa48("3674", "3675", "3676"), !proposal)) return undefined;
      // Nowhere better to go: the bound replica is still a candidate (only loaded) and the
      // best other one is at the threshold too (or there is none). Moving would gain nothing
      // and cost an object call and write per request, flapping between full replicas;
      // stay, and let the replica's admission (and `served` after a retry) decide.
      const current = candidates.find(stryMutAct_9fa48("3677") ? () => undefined : (stryCov_9fa48("3677"), c => stryMutAct_9fa48("3680") ? c.id !== from : stryMutAct_9fa48("3679") ? false : stryMutAct_9fa48("3678") ? true : (stryCov_9fa48("3678", "3679", "3680"), c.id === from)));
      if (stryMutAct_9fa48("3683") ? current || !usable(proposal.id) : stryMutAct_9fa48("3682") ? false : stryMutAct_9fa48("3681") ? true : (stryCov_9fa48("3681", "3682", "3683"), current && (stryMutAct_9fa48("3684") ? usable(proposal.id) : (stryCov_9fa48("3684"), !usable(proposal.id))))) return current;
      try {
        if (stryMutAct_9fa48("3685")) {
          {}
        } else {
          stryCov_9fa48("3685");
          stryMutAct_9fa48("3686") ? this.storeCalls-- : (stryCov_9fa48("3686"), this.storeCalls++);
          const bound = await this.#store.rebind(deployment, session, from, proposal.id);
          if (stryMutAct_9fa48("3687")) {
            ;
          } else {
            stryCov_9fa48("3687");
            this.#remember(key, bound);
          }
          return stryMutAct_9fa48("3688") ? usable(bound) && proposal : (stryCov_9fa48("3688"), usable(bound) ?? proposal);
        }
      } catch (err) {
        if (stryMutAct_9fa48("3689")) {
          {}
        } else {
          stryCov_9fa48("3689");
          if (stryMutAct_9fa48("3690")) {
            ;
          } else {
            stryCov_9fa48("3690");
            logStoreFailure(deployment.name, err);
          }
          if (stryMutAct_9fa48("3691")) {
            ;
          } else {
            stryCov_9fa48("3691");
            this.#remember(key, proposal.id, SESSION_STORE_RETRY_MS);
          }
          return proposal;
        }
      }
    }
  }

  /** Caches a binding for `forMs` (at most the cache TTL). */
  #remember(key: string, replica: string, forMs = SESSION_CACHE_TTL_MS): void {
    if (stryMutAct_9fa48("3692")) {
      {}
    } else {
      stryCov_9fa48("3692");
      if (stryMutAct_9fa48("3693")) {
        ;
      } else {
        stryCov_9fa48("3693");
        this.#cache.delete(key);
      }
      this.#cache.set(key, stryMutAct_9fa48("3695") ? {} : (stryCov_9fa48("3695"), {
        replica,
        fetchedAt: stryMutAct_9fa48("3696") ? this.#now() + (SESSION_CACHE_TTL_MS - forMs) : (stryCov_9fa48("3696"), this.#now() - (stryMutAct_9fa48("3697") ? SESSION_CACHE_TTL_MS + forMs : (stryCov_9fa48("3697"), SESSION_CACHE_TTL_MS - forMs)))
      }));
      if (stryMutAct_9fa48("3701") ? this.#cache.size <= SESSION_CACHE_MAX : stryMutAct_9fa48("3700") ? this.#cache.size >= SESSION_CACHE_MAX : stryMutAct_9fa48("3699") ? false : stryMutAct_9fa48("3698") ? true : (stryCov_9fa48("3698", "3699", "3700", "3701"), this.#cache.size > SESSION_CACHE_MAX)) {
        if (stryMutAct_9fa48("3702")) {
          {}
        } else {
          stryCov_9fa48("3702");
          const oldest = this.#cache.keys().next().value;
          if (stryMutAct_9fa48("3705") ? oldest === undefined : stryMutAct_9fa48("3704") ? false : stryMutAct_9fa48("3703") ? true : (stryCov_9fa48("3703", "3704", "3705"), oldest !== undefined)) if (stryMutAct_9fa48("3706")) {
            ;
          } else {
            stryCov_9fa48("3706");
            this.#cache.delete(oldest);
          }
        }
      }
    }
  }
}

/**
 * Rendezvous (highest random weight) hashing: the candidate with the highest
 * hash of (session, replica id) that `usable` accepts. Every isolate with the
 * same candidates picks the same one; a replica joining or leaving moves only
 * the sessions it wins or held.
 */
export function hashedChoice(session: string, candidates: readonly ReplicaEntry[], usable: (id: string) => ReplicaEntry | undefined): ReplicaEntry | undefined {
  if (stryMutAct_9fa48("3707")) {
    {}
  } else {
    stryCov_9fa48("3707");
    let best: ReplicaEntry | undefined;
    let bestScore = stryMutAct_9fa48("3708") ? +1 : (stryCov_9fa48("3708"), -1);
    for (const c of candidates) {
      if (stryMutAct_9fa48("3709")) {
        {}
      } else {
        stryCov_9fa48("3709");
        if (stryMutAct_9fa48("3712") ? false : stryMutAct_9fa48("3711") ? true : stryMutAct_9fa48("3710") ? usable(c.id) : (stryCov_9fa48("3710", "3711", "3712"), !usable(c.id))) continue;
        const score = rendezvousWeight(session, c.id);
        if (stryMutAct_9fa48("3715") ? score > bestScore && score === bestScore && best && c.id < best.id : stryMutAct_9fa48("3714") ? false : stryMutAct_9fa48("3713") ? true : (stryCov_9fa48("3713", "3714", "3715"), (stryMutAct_9fa48("3718") ? score <= bestScore : stryMutAct_9fa48("3717") ? score >= bestScore : stryMutAct_9fa48("3716") ? false : (stryCov_9fa48("3716", "3717", "3718"), score > bestScore)) || (stryMutAct_9fa48("3720") ? score === bestScore && best || c.id < best.id : stryMutAct_9fa48("3719") ? false : (stryCov_9fa48("3719", "3720"), (stryMutAct_9fa48("3722") ? score === bestScore || best : stryMutAct_9fa48("3721") ? true : (stryCov_9fa48("3721", "3722"), (stryMutAct_9fa48("3724") ? score !== bestScore : stryMutAct_9fa48("3723") ? true : (stryCov_9fa48("3723", "3724"), score === bestScore)) && best)) && (stryMutAct_9fa48("3727") ? c.id >= best.id : stryMutAct_9fa48("3726") ? c.id <= best.id : stryMutAct_9fa48("3725") ? true : (stryCov_9fa48("3725", "3726", "3727"), c.id < best.id)))))) {
          if (stryMutAct_9fa48("3728")) {
            {}
          } else {
            stryCov_9fa48("3728");
            best = c;
            bestScore = score;
          }
        }
      }
    }
    return best;
  }
}

/** Sets `key` as the newest entry of an insertion-ordered map, dropping the oldest beyond SESSION_CACHE_MAX. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  if (stryMutAct_9fa48("3729")) {
    {}
  } else {
    stryCov_9fa48("3729");
    if (stryMutAct_9fa48("3730")) {
      ;
    } else {
      stryCov_9fa48("3730");
      map.delete(key);
    }
    if (stryMutAct_9fa48("3731")) {
      ;
    } else {
      stryCov_9fa48("3731");
      map.set(key, value);
    }
    if (stryMutAct_9fa48("3735") ? map.size <= SESSION_CACHE_MAX : stryMutAct_9fa48("3734") ? map.size >= SESSION_CACHE_MAX : stryMutAct_9fa48("3733") ? false : stryMutAct_9fa48("3732") ? true : (stryCov_9fa48("3732", "3733", "3734", "3735"), map.size > SESSION_CACHE_MAX)) {
      if (stryMutAct_9fa48("3736")) {
        {}
      } else {
        stryCov_9fa48("3736");
        const oldest = map.keys().next().value;
        if (stryMutAct_9fa48("3739") ? oldest === undefined : stryMutAct_9fa48("3738") ? false : stryMutAct_9fa48("3737") ? true : (stryCov_9fa48("3737", "3738", "3739"), oldest !== undefined)) if (stryMutAct_9fa48("3740")) {
          ;
        } else {
          stryCov_9fa48("3740");
          map.delete(oldest);
        }
      }
    }
  }
}
function cacheKey(deployment: string, session: string): string {
  if (stryMutAct_9fa48("3741")) {
    {}
  } else {
    stryCov_9fa48("3741");
    return stryMutAct_9fa48("3742") ? `` : (stryCov_9fa48("3742"), `${deployment}\u0000${session}`);
  }
}
function logStoreFailure(deployment: string, err: unknown): void {
  if (stryMutAct_9fa48("3743")) {
    {}
  } else {
    stryCov_9fa48("3743");
    console.error(JSON.stringify(stryMutAct_9fa48("3745") ? {} : (stryCov_9fa48("3745"), {
      msg: stryMutAct_9fa48("3746") ? "" : (stryCov_9fa48("3746"), "session store call failed"),
      deployment,
      error: String(err)
    })));
  }
}