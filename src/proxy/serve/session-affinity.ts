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
  readonly #unbound = new Map<string, { requests: number; replica: string }>();
  /** New bindings each client may still create in this isolate. */
  readonly #budgets = new Map<string, TokenBucket>();
  /** Calls made to the session objects (observability and tests). */
  storeCalls = 0;

  /** Without `tokens`, no token is minted or honoured. */
  constructor(store: SessionStore, now: () => number = Date.now, tokens?: BindingTokens) {
    this.#store = store;
    this.#now = now;
    this.#tokens = tokens;
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
  async choose(
    deployment: Deployment,
    session: string,
    candidates: readonly ReplicaEntry[],
    propose: (among: readonly ReplicaEntry[]) => ReplicaEntry | undefined,
    client = "",
    late: () => readonly ReplicaEntry[] = () => [],
    token?: string,
    placeNew?: (among: readonly ReplicaEntry[]) => ReplicaEntry | undefined,
  ): Promise<ReplicaEntry | undefined> {
    const key = cacheKey(deployment.name, session);
    const tokenReplica = token !== undefined && this.#tokens ? await this.#tokens.verify(deployment.name, session, token) : undefined;
    const now = this.#now();
    // The bound replica may be merely late (its liveness lapsed in this view, nothing showed it dead): it is still tried
    // first. Asked for only when the replica is not a candidate, so a usual request does not walk the view twice.
    let lapsed: readonly ReplicaEntry[] | undefined;
    const find = (id: string) => candidates.find((c) => c.id === id) ?? (lapsed ??= late()).find((c) => c.id === id);
    const usable = (id: string) => {
      const e = find(id);
      return e && fullness(e) < deployment.sessionAffinity.rebindAtLoad ? e : undefined;
    };
    let cached = this.#cache.get(key);
    let trusted = cached !== undefined && now - cached.fetchedAt < SESSION_CACHE_TTL_MS;
    if (tokenReplica !== undefined) {
      // The token is the binding, trusted however old this isolate's copy is. Only when its replica is
      // unusable and this isolate has a fresh binding elsewhere (it moved the session, and the client sent
      // a token from before the move), that binding wins: moving again would cost an object call.
      if (cached?.replica === tokenReplica) trusted = true;
      else if (!trusted || usable(tokenReplica)) {
        this.#unbound.delete(key);
        this.#remember(key, tokenReplica);
        cached = this.#cache.get(key);
        trusted = true;
      }
    }
    if (cached && trusted) {
      const e = usable(cached.replica);
      if (e) {
        cached.fullSince = undefined;
        return e;
      }
      const alive = find(cached.replica);
      if (alive) {
        // Full but alive: spill this request, keep the binding, for a grace period.
        cached.fullSince ??= now;
        if (now - cached.fullSince < SATURATION_GRACE_MS) {
          const other = propose(candidates.filter((c) => c.id !== cached.replica));
          return other && usable(other.id) ? other : alive;
        }
      }
      return this.#move(deployment, session, key, cached.replica, candidates, propose, usable);
    }
    let proposal: ReplicaEntry | undefined;
    if (!cached && deployment.sessionAffinity.bindOnRequest > 1) {
      // Not bound yet: the first requests are placed by hash, without an object call.
      const seen = this.#unbound.get(key);
      const placed = (seen && usable(seen.replica)) || (placeNew ? placeNew(candidates.filter((c) => usable(c.id))) : hashedChoice(session, candidates, usable)) || propose(candidates);
      if (!placed) return undefined;
      const requests = (seen?.requests ?? 0) + 1;
      if (requests < deployment.sessionAffinity.bindOnRequest || !this.#mayBind(deployment, client, now)) {
        remember(this.#unbound, key, { requests, replica: placed.id });
        return placed;
      }
      this.#unbound.delete(key);
      proposal = placed;
    } else {
      proposal = propose(candidates);
    }
    if (!proposal) return undefined;
    let bound: string;
    try {
      this.storeCalls++;
      bound = await this.#store.resolve(deployment, session, proposal.id);
    } catch (err) {
      logStoreFailure(deployment.name, err);
      this.#remember(key, proposal.id, SESSION_STORE_RETRY_MS);
      return proposal;
    }
    this.#remember(key, bound);
    return usable(bound) ?? this.#move(deployment, session, key, bound, candidates, propose, usable);
  }

  /**
   * The request was served by `replicaId`. When that is not the bound replica (the
   * bound one refused or failed and a retry went elsewhere), the session follows.
   */
  served(deployment: Deployment, session: string, replicaId: string, background: (p: Promise<unknown>) => void): void {
    const key = cacheKey(deployment.name, session);
    const unbound = this.#unbound.get(key);
    if (unbound) {
      // Not bound yet: its next request starts from where this one was served, still without an object call.
      unbound.replica = replicaId;
      return;
    }
    const cached = this.#cache.get(key);
    if (!cached || cached.replica === replicaId) return;
    this.#remember(key, replicaId);
    this.storeCalls++;
    background(
      this.#store
        .rebind(deployment, session, cached.replica, replicaId)
        .then((bound) => this.#remember(key, bound))
        .catch((err: unknown) => logStoreFailure(deployment.name, err)),
    );
  }

  /**
   * The binding token for the response to this session's request, which
   * `servedBy` served: it names the session's binding in this isolate, which is
   * `servedBy` except while the bound replica is full and the request spilled
   * (then the binding stays, and so does the token's replica). Undefined when
   * tokens are off or cannot be minted (the response goes without one).
   */
  async tokenFor(deployment: Deployment, session: string, servedBy: string): Promise<string | undefined> {
    if (!this.#tokens) return undefined;
    const replica = this.#tokenReplica(deployment, session, servedBy);
    try {
      return await this.#tokens.issue(deployment.name, session, replica, deployment.sessionAffinity.ttlSeconds);
    } catch (err) {
      console.error(JSON.stringify({ msg: "session token not minted", deployment: deployment.name, error: String(err) }));
      return undefined;
    }
  }

  /**
   * tokenFor's answer when it needs no minting (the session's token is reused), with no
   * promise; undefined otherwise (then tokenFor mints, or there is no token to give).
   */
  reusableToken(deployment: Deployment, session: string, servedBy: string): string | undefined {
    if (!this.#tokens?.reusable) return undefined;
    return this.#tokens.reusable(deployment.name, session, this.#tokenReplica(deployment, session, servedBy), deployment.sessionAffinity.ttlSeconds);
  }

  /** The replica a token for this response names: the session's binding here, else who served it. */
  #tokenReplica(deployment: Deployment, session: string, servedBy: string): string {
    const key = cacheKey(deployment.name, session);
    return this.#cache.get(key)?.replica ?? this.#unbound.get(key)?.replica ?? servedBy;
  }

  /** Bindings cached in this isolate. */
  get cached(): number {
    return this.#cache.size;
  }

  /** Sessions seen in this isolate that are not bound yet. */
  get unbound(): number {
    return this.#unbound.size;
  }

  /** Takes one new binding from the client's budget in this isolate; false when it is spent. */
  #mayBind(deployment: Deployment, client: string, now: number): boolean {
    const { maxNewBindingsPerSecond: requestsPerSecond, maxNewBindingsBurst: burst } = deployment.sessionAffinity;
    const limits = { requestsPerSecond, burst };
    const id = `${deployment.name}\u0000${client}`;
    const bucket = this.#budgets.get(id) ?? fullBucket(limits, now);
    const ok = takeToken(bucket, limits, now).ok;
    remember(this.#budgets, id, bucket);
    return ok;
  }

  async #move(
    deployment: Deployment,
    session: string,
    key: string,
    from: string,
    candidates: readonly ReplicaEntry[],
    propose: (among: readonly ReplicaEntry[]) => ReplicaEntry | undefined,
    usable: (id: string) => ReplicaEntry | undefined,
  ): Promise<ReplicaEntry | undefined> {
    const proposal = propose(candidates.filter((c) => c.id !== from)) ?? propose(candidates);
    if (!proposal) return undefined;
    // Nowhere better to go: the bound replica is still a candidate (only loaded) and the
    // best other one is at the threshold too (or there is none). Moving would gain nothing
    // and cost an object call and write per request, flapping between full replicas;
    // stay, and let the replica's admission (and `served` after a retry) decide.
    const current = candidates.find((c) => c.id === from);
    if (current && !usable(proposal.id)) return current;
    try {
      this.storeCalls++;
      const bound = await this.#store.rebind(deployment, session, from, proposal.id);
      this.#remember(key, bound);
      return usable(bound) ?? proposal;
    } catch (err) {
      logStoreFailure(deployment.name, err);
      this.#remember(key, proposal.id, SESSION_STORE_RETRY_MS);
      return proposal;
    }
  }

  /** Caches a binding for `forMs` (at most the cache TTL). */
  #remember(key: string, replica: string, forMs = SESSION_CACHE_TTL_MS): void {
    this.#cache.delete(key);
    this.#cache.set(key, { replica, fetchedAt: this.#now() - (SESSION_CACHE_TTL_MS - forMs) });
    if (this.#cache.size > SESSION_CACHE_MAX) {
      const oldest = this.#cache.keys().next().value;
      if (oldest !== undefined) this.#cache.delete(oldest);
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
  let best: ReplicaEntry | undefined;
  let bestScore = -1;
  for (const c of candidates) {
    if (!usable(c.id)) continue;
    const score = rendezvousWeight(session, c.id);
    if (score > bestScore || (score === bestScore && best && c.id < best.id)) {
      best = c;
      bestScore = score;
    }
  }
  return best;
}

/** Sets `key` as the newest entry of an insertion-ordered map, dropping the oldest beyond SESSION_CACHE_MAX. */
function remember<V>(map: Map<string, V>, key: string, value: V): void {
  map.delete(key);
  map.set(key, value);
  if (map.size > SESSION_CACHE_MAX) {
    const oldest = map.keys().next().value;
    if (oldest !== undefined) map.delete(oldest);
  }
}

function cacheKey(deployment: string, session: string): string {
  return `${deployment}\u0000${session}`;
}

function logStoreFailure(deployment: string, err: unknown): void {
  console.error(JSON.stringify({ msg: "session store call failed", deployment, error: String(err) }));
}
