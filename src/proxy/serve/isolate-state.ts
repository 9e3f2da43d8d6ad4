/**
 * What one proxy isolate keeps between requests (IsolateState), below the request path
 * (serve.ts): routing views, balancers, session bindings, key sets, rate-limit buckets,
 * admission gates, pending counts and metrics, each created from the Worker's bindings.
 */
import { type Deployment, DEFAULT_PREFIX_POLICY } from "../../config/deployment.ts";
import type { Env } from "../../env.ts";
import { dispatchSignature, type RoutingSnapshot } from "../../protocol/index.ts";
import { ApiKeyCache, KEY_SET_TTL_MS, RELAYED_KEY_SET_TTL_MS, RateLimits, TOKEN_RATE, type KeySetSource, type RateSync } from "./access.ts";
import type { BucketLimits } from "../../policy/token-bucket.ts";
import type { Coordinates } from "../../policy/latency-model.ts";
import type { RateUse } from "../../policy/rate-limit-sync.ts";
import { AdmissionGate, pendingShareOf } from "./admit.ts";
import type { DispatchSigner } from "./dispatch.ts";
import { servedDeployment } from "../../config/served.ts";
import { keysFor } from "../../state/access-keys.ts";
import { rateLimiterFor } from "../../state/rate-limiter.ts";
import { relayFor } from "../../state/snapshot-relay.ts";
import { sessionRouterFor } from "../../state/session-router.ts";
import { createBalancer, type ActiveBalancer } from "../../policy/balancers/index.ts";
import { mergedSnapshot, tellHeldDemand } from "../../state/routing-plane.ts";
import { VIEW_SUMMARY_BYTES } from "../../state/summary-delta.ts";
import { HELD_DEMAND_INTERVAL_MS } from "../../state/routing-shards.ts";
import { ProxyMetrics } from "../../telemetry/proxy-metrics.ts";
import { sendFlush } from "../../state/telemetry.ts";
import { SessionAffinity, type SessionStore } from "./session-affinity.ts";
import { SessionTokens, sessionTokenKeyFor } from "./session-token.ts";
import { RELAYED_SNAPSHOT_TTL_MS, SNAPSHOT_TTL_MS, SnapshotCache, type RoutingView, type SnapshotSource } from "./view.ts";
import type { TelemetryFlush } from "../../telemetry/types.ts";

/**
 * Where an isolate's state comes from when not from the Worker's bindings: the answers
 * the Durable Objects give (a snapshot, a key set, a rate sync, a session's binding, a
 * telemetry flush). The Worker passes none; the unit tests of the request path do, with
 * the state plane's own logic behind them (Membership's snapshots, the RateLimiter's
 * bucket functions), so the whole path runs in Node against real replicas.
 */
export interface IsolateSources {
  snapshots?: SnapshotSource;
  keys?: KeySetSource;
  rates?: RateSync;
  sessions?: SessionStore;
  flush?: (flush: TelemetryFlush) => Promise<void>;
  /** Tells a deployment's autoscaler how many requests this isolate holds (its leader routing object). */
  demand?: (deployment: string, isolate: string, held: number) => Promise<void>;
}

/**
 * What one proxy isolate keeps between requests: routing views, balancers,
 * session bindings, API key sets, rate-limit buckets and pending-request counts. Module
 * scope on purpose (an isolate serves many requests); created on first use
 * because the bindings it needs arrive with the first request's env.
 */
export class IsolateState {
  readonly snapshots: SnapshotCache;
  readonly affinity: SessionAffinity;
  readonly apiKeys: ApiKeyCache;
  readonly rateLimits: RateLimits;
  /** Per-key token limits of the /v1 routes (access.tokenLimit), kept across isolates as rateLimits are. */
  readonly tokenLimits: RateLimits;
  readonly metrics = new ProxyMetrics();
  readonly #env: Env;
  /** Requests per deployment dispatched and not yet answered by a replica. */
  readonly pending = new Map<string, number>();
  /** The same per deployment and client (`${deployment}\n${client}`), while it has any. */
  readonly #pendingByClient = new Map<string, number>();
  /** Signs each dispatch with its deployment's replica key (derived from the master secret once per isolate). */
  readonly sign: DispatchSigner;
  /**
   * Where this isolate runs (Cloudflare's colo, from the first request's
   * `cf.colo`; "local" on workerd): it names the relay the isolate asks.
   */
  location = "local";
  /**
   * Where this isolate is, when the first request said (Cloudflare's cf.latitude and
   * cf.longitude, the client's estimated place, near the colo that took it; locally
   * SWITCHYARD_COORDINATES): trips to replicas not measured yet are estimated from it.
   */
  coordinates: Coordinates | undefined;
  /** Random per isolate: picks this isolate's sample of a deployment too large for one view. */
  readonly seed = crypto.getRandomValues(new Uint32Array(1))[0]!;
  /** Names this isolate to the autoscaler, which sums the isolates' held requests. */
  readonly #isolateId = crypto.randomUUID();
  /** Per deployment, when this isolate last told the autoscaler how many requests it holds. */
  readonly #demandToldAt = new Map<string, number>();
  /** Each deployment's admission gate (admit.ts), created on first use. */
  readonly #gates = new Map<string, AdmissionGate>();
  /** Each deployment's balancer, created on first use: its state (a turn, a memory of recent prefixes) lives as long as the routing view. */
  readonly #balancers = new Map<string, ActiveBalancer>();
  /** Per deployment, the cursor of the peers' dispatches last learned from the relay. */
  readonly #peerCursors = new Map<string, number>();
  /** Per deployment: the relay's trip-board cursor, sent back with the next ask. */
  readonly #tripCursors = new Map<string, number>();
  /** Other isolates' dispatch notes learned through relays (observability and tests). */
  peerDispatchesLearned = 0;

  readonly #flush: (flush: TelemetryFlush) => Promise<void>;
  readonly #demand: (deployment: string, isolate: string, held: number) => Promise<void>;

  constructor(env: Env, sources: IsolateSources = {}) {
    this.#env = env;
    this.#flush = sources.flush ?? ((flush) => sendFlush(env, flush));
    this.#demand = sources.demand ?? ((deployment, isolate, held) => tellHeldDemand(env, deployment, isolate, held));
    this.sign = (p) => dispatchSignature(env.SWITCHYARD_REPLICA_SECRET, p);
    this.snapshots = new SnapshotCache(
      sources.snapshots ?? ((name, have, view) => this.#snapshotOf(name, have, view)),
      Date.now,
      (name) => {
        const routing = servedDeployment(name)?.routing;
        return { ttlMs: routing?.relay ? RELAYED_SNAPSHOT_TTL_MS : SNAPSHOT_TTL_MS, everyRequests: routing?.refreshEveryRequests ?? 1 };
      },
      (name) => this.#gates.get(name)?.busy ?? false,
    );
    const ttlMs = (d: Deployment) => d.sessionAffinity.ttlSeconds * 1000;
    this.affinity = new SessionAffinity(
      sources.sessions ?? {
        resolve: async (d, session, proposal) =>
          (await sessionRouterFor(env, d.name, session, d.sessionAffinity.shards).resolve(session, proposal, ttlMs(d))).replica,
        rebind: async (d, session, from, to) =>
          (await sessionRouterFor(env, d.name, session, d.sessionAffinity.shards).rebind(session, from, to, ttlMs(d))).replica,
      },
      Date.now,
      // Binding tokens, under a key derived from the master secret once per isolate.
      new SessionTokens(() => sessionTokenKeyFor(env.SWITCHYARD_REPLICA_SECRET)),
    );
    this.apiKeys = new ApiKeyCache(
      sources.keys ??
        ((name) => (servedDeployment(name)?.routing.relay ? relayFor(env, name, this.location).activeKeys(name) : keysFor(env, name).activeKeys())),
      Date.now,
      (name) => (servedDeployment(name)?.routing.relay ? RELAYED_KEY_SET_TTL_MS : KEY_SET_TTL_MS),
    );
    // With relays, rate-limit syncs go through the location's relay too (it syncs the location's sum with the shard).
    const syncRates =
      sources.rates ??
      ((name: string, shard: number, limits: BucketLimits, uses: RateUse[]) =>
        servedDeployment(name)?.routing.relay
          ? relayFor(env, name, this.location).syncRates(name, shard, limits, uses)
          : rateLimiterFor(env, name, shard).sync(limits, uses));
    this.rateLimits = new RateLimits(syncRates);
    this.tokenLimits = new RateLimits(syncRates, Date.now, TOKEN_RATE);
  }

  /**
   * A deployment's routing snapshot: from its relay in this location, or merged
   * from its shards without relays. Either way it carries only the prefix-cache
   * summaries the view lacks (`have`), at most VIEW_SUMMARY_BYTES of them.
   */
  #snapshotOf(name: string, have: string, view: RoutingView): Promise<RoutingSnapshot> {
    const routing = servedDeployment(name)?.routing ?? { shards: 1, relay: false };
    if (routing.relay) return this.#relayedSnapshotOf(name, routing.shards, have, view);
    return mergedSnapshot(this.#env, name, routing.shards, undefined, { have, maxBytes: VIEW_SUMMARY_BYTES });
  }

  /**
   * The relay's view, with this isolate's recent dispatches and measured trips posted and the
   * location's other isolates' learned (src/state/dispatch-board.ts, src/state/trip-board.ts).
   * Notes of an ask that fails are lost: the replicas' summaries say the same a little later.
   */
  async #relayedSnapshotOf(name: string, shards: number, have: string, view: RoutingView): Promise<RoutingSnapshot> {
    const balancer = this.#balancers.get(name);
    const relay = relayFor(this.#env, name, this.location);
    // Admission's demand rides on the same ask; the answer's budget bounds this isolate's requests in flight.
    const gate = this.#gates.get(name);
    const demand = gate?.demand();
    // The dispatches a prefix balancer shares, and the round trips this isolate measured (every
    // deployment's: the latency choice reads them, src/state/trip-board.ts). Posted from the first
    // ask, before a request made the balancer, so a new isolate starts with its peers' trips.
    const posted = {
      after: this.#peerCursors.get(name) ?? 0,
      notes: balancer?.shareDispatches?.() ?? [],
      trips: view.shareTrips(Date.now()),
      tripsAfter: this.#tripCursors.get(name) ?? 0,
    };
    const snapshot = await relay.view(name, shards, this.seed, have, posted, demand);
    gate?.setBudget(snapshot.admissionBudget, snapshot.admissionFlowCaps, snapshot.admissionOpenFrom);
    if (snapshot.peers) {
      this.#peerCursors.set(name, snapshot.peers.cursor);
      if (snapshot.peers.tripCursor !== undefined) this.#tripCursors.set(name, snapshot.peers.tripCursor);
      this.peerDispatchesLearned += snapshot.peers.notes.length;
      balancer?.learnDispatches?.(snapshot.peers.notes, Date.now());
    }
    return snapshot;
  }

  /** Forgets the deployment's key set here and in this location's relay (an admin call changed it). */
  async keysChanged(deployment: string): Promise<void> {
    if (servedDeployment(deployment)?.routing.relay) await relayFor(this.#env, deployment, this.location).forgetKeys();
    this.apiKeys.invalidate(deployment);
  }

  /**
   * The deployment's balancer in this isolate (`policy.balancer`, src/policy/balancers/),
   * or a split request's leg's (`openai.disaggregation.prefill` / `.decode`; the
   * deployment's where the leg names none).
   */
  balancerFor(deployment: Deployment, leg?: "prefill" | "decode"): ActiveBalancer {
    const own = leg === undefined ? undefined : deployment.openai?.disaggregation?.[leg];
    const key = own === undefined ? deployment.name : `${deployment.name}#${leg}`;
    let balancer = this.#balancers.get(key);
    if (!balancer) {
      const latency = deployment.policy.latency;
      const settings = { ...(deployment.policy.prefix ?? DEFAULT_PREFIX_POLICY), ...(latency && { latency }) };
      this.#balancers.set(key, (balancer = createBalancer(own ?? deployment.policy.balancer, settings)));
    }
    return balancer;
  }

  /**
   * Tells the deployment's autoscaler (its leader routing object) how many requests this
   * isolate holds: at most once per HELD_DEMAND_INTERVAL_MS per deployment, and only while
   * it holds any, so a deployment that is not saturated costs no call.
   */
  tellDemand(deployment: string, held: number, background: (p: Promise<unknown>) => void): void {
    const now = Date.now();
    if (now - (this.#demandToldAt.get(deployment) ?? 0) < HELD_DEMAND_INTERVAL_MS) return;
    this.#demandToldAt.set(deployment, now);
    background(this.#demand(deployment, this.#isolateId, held));
  }

  /** The deployment's admission gate in this isolate (admit.ts). */
  gateFor(deployment: string): AdmissionGate {
    let gate = this.#gates.get(deployment);
    if (!gate) this.#gates.set(deployment, (gate = new AdmissionGate()));
    return gate;
  }

  /** A timer is waiting to send counts a quiet isolate would otherwise keep (flushMetrics). */
  #flushTimer = false;

  /**
   * Sends the metrics deltas to this isolate's Telemetry shard when a flush is due
   * (in the background). Counts that are not due yet are sent when they are, by one
   * timer per isolate inside the request's waitUntil, so the last requests before a
   * quiet spell are counted then, not at the next request (which may never come:
   * `requests_total` read 27 for 51 requests, and stayed there).
   */
  flushMetrics(background: (p: Promise<unknown>) => void): void {
    const sent = this.#sendDueFlush();
    if (sent) {
      background(sent);
      return;
    }
    const wait = this.metrics.flushDueIn(Date.now());
    if (wait === null || this.#flushTimer) return;
    this.#flushTimer = true;
    background(
      new Promise((r) => setTimeout(r, wait + 1)).then(() => {
        this.#flushTimer = false;
        return this.#sendDueFlush();
      }),
    );
  }

  /** The send of the deltas, when a flush is due; undefined when none is. */
  #sendDueFlush(): Promise<void> | undefined {
    const flush = this.metrics.takeFlush(Date.now());
    if (!flush) return undefined;
    return this.#flush(flush).catch((err: unknown) => console.error(JSON.stringify({ msg: "telemetry flush failed", error: String(err) })));
  }

  /** Clients with a request pending here, across deployments (each forgotten when its last ends: a bound on this isolate's memory). */
  get pendingClients(): number {
    return this.#pendingByClient.size;
  }

  /**
   * Counts a request of `client` as pending until `done` is called; or which cap it
   * meets: the deployment's (`isolate`) or the client's share of it (`client`,
   * pendingShareOf).
   */
  admit(deployment: Deployment, client: string): "isolate" | "client" | (() => void) {
    const n = this.pending.get(deployment.name) ?? 0;
    if (n >= deployment.limits.maxPendingRequests) return "isolate";
    const key = `${deployment.name}\n${client}`;
    const mine = this.#pendingByClient.get(key) ?? 0;
    if (mine >= pendingShareOf(deployment)) return "client";
    this.pending.set(deployment.name, n + 1);
    this.#pendingByClient.set(key, mine + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.pending.set(deployment.name, (this.pending.get(deployment.name) ?? 1) - 1);
      const left = (this.#pendingByClient.get(key) ?? 1) - 1;
      if (left <= 0) this.#pendingByClient.delete(key);
      else this.#pendingByClient.set(key, left);
    };
  }
}
