/**
 * What one proxy isolate keeps between requests: routing views, balancers,
 * session bindings, API key sets, rate-limit buckets and pending-request counts. Module
 * scope on purpose (an isolate serves many requests); created on first use
 * because the bindings it needs arrive with the first request's env.
 */
import { DEFAULT_PREFIX_POLICY, type Deployment } from "../config/deployment.ts";
import { servedDeployment } from "../config/served.ts";
import type { Env } from "../env.ts";
import { keysFor } from "../state/access-keys.ts";
import { rateLimiterFor } from "../state/rate-limiter.ts";
import { relayFor } from "../state/snapshot-relay.ts";
import { sessionRouterFor } from "../state/session-router.ts";
import type { RoutingSnapshot } from "../protocol/index.ts";
import { createBalancer, type ActiveBalancer } from "../policy/balancers/index.ts";
import { mergedSnapshot } from "../state/routing-plane.ts";
import { VIEW_SUMMARY_BYTES } from "../state/summary-delta.ts";
import { ProxyMetrics } from "../telemetry/proxy-metrics.ts";
import { sendFlush } from "../state/telemetry.ts";
import { ApiKeyCache, KEY_SET_TTL_MS, RELAYED_KEY_SET_TTL_MS } from "./api-keys.ts";
import type { DispatchSigner } from "./dispatch.ts";
import { dispatchSignature } from "./replica-keys.ts";
import { RateLimits } from "./rate-limits.ts";
import { SessionAffinity } from "./session-affinity.ts";
import { SessionTokens, sessionTokenKeyFor } from "./session-token.ts";
import { RELAYED_SNAPSHOT_TTL_MS, SNAPSHOT_TTL_MS, SnapshotCache } from "./snapshot-cache.ts";

export class IsolateState {
  readonly snapshots: SnapshotCache;
  readonly affinity: SessionAffinity;
  readonly apiKeys: ApiKeyCache;
  readonly rateLimits: RateLimits;
  readonly metrics = new ProxyMetrics();
  readonly #env: Env;
  /** Requests per deployment dispatched and not yet answered by a replica. */
  readonly pending = new Map<string, number>();
  /** Signs each dispatch with its deployment's replica key (derived from the master secret once per isolate). */
  readonly sign: DispatchSigner;
  /**
   * Where this isolate runs (Cloudflare's colo, from the first request's
   * `cf.colo`; "local" on workerd): it names the relay the isolate asks.
   */
  location = "local";
  /** Random per isolate: picks this isolate's sample of a deployment too large for one view. */
  readonly seed = crypto.getRandomValues(new Uint32Array(1))[0]!;
  /** Each deployment's balancer, created on first use: its state (a turn, a memory of recent prefixes) lives as long as the routing view. */
  readonly #balancers = new Map<string, ActiveBalancer>();
  /** Per deployment, the cursor of the peers' dispatches last learned from the relay. */
  readonly #peerCursors = new Map<string, number>();
  /** Other isolates' dispatch notes learned through relays (observability and tests). */
  peerDispatchesLearned = 0;

  constructor(env: Env) {
    this.#env = env;
    this.sign = (p) => dispatchSignature(env.SWITCHYARD_REPLICA_SECRET, p);
    this.snapshots = new SnapshotCache(
      (name, have) => this.#snapshotOf(name, have),
      Date.now,
      (name) => (servedDeployment(name)?.routing.relay ? RELAYED_SNAPSHOT_TTL_MS : SNAPSHOT_TTL_MS),
    );
    const ttlMs = (d: Deployment) => d.sessionAffinity.ttlSeconds * 1000;
    this.affinity = new SessionAffinity(
      {
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
      (name) => (servedDeployment(name)?.routing.relay ? relayFor(env, name, this.location).activeKeyHashes(name) : keysFor(env, name).activeHashes()),
      Date.now,
      (name) => (servedDeployment(name)?.routing.relay ? RELAYED_KEY_SET_TTL_MS : KEY_SET_TTL_MS),
    );
    // With relays, rate-limit syncs go through the location's relay too (it syncs the location's sum with the shard).
    this.rateLimits = new RateLimits((name, shard, limits, uses) =>
      servedDeployment(name)?.routing.relay
        ? relayFor(env, name, this.location).syncRates(name, shard, limits, uses)
        : rateLimiterFor(env, name, shard).sync(limits, uses),
    );
  }

  /**
   * A deployment's routing snapshot: from its relay in this location, or merged
   * from its shards without relays. Either way it carries only the prefix-cache
   * summaries the view lacks (`have`), at most VIEW_SUMMARY_BYTES of them.
   */
  #snapshotOf(name: string, have: string): Promise<RoutingSnapshot> {
    const routing = servedDeployment(name)?.routing ?? { shards: 1, relay: false };
    if (routing.relay) return this.#relayedSnapshotOf(name, routing.shards, have);
    return mergedSnapshot(this.#env, name, routing.shards, undefined, { have, maxBytes: VIEW_SUMMARY_BYTES });
  }

  /**
   * The relay's view, with this isolate's recent dispatches posted and the location's
   * other isolates' learned, when the balancer shares them (src/state/dispatch-board.ts).
   * Notes of an ask that fails are lost: the replicas' summaries say the same a little later.
   */
  async #relayedSnapshotOf(name: string, shards: number, have: string): Promise<RoutingSnapshot> {
    const balancer = this.#balancers.get(name);
    const relay = relayFor(this.#env, name, this.location);
    if (!balancer?.shareDispatches) return relay.view(name, shards, this.seed, have);
    const snapshot = await relay.view(name, shards, this.seed, have, { after: this.#peerCursors.get(name) ?? 0, notes: balancer.shareDispatches() });
    if (snapshot.peers) {
      this.#peerCursors.set(name, snapshot.peers.cursor);
      this.peerDispatchesLearned += snapshot.peers.notes.length;
      balancer.learnDispatches?.(snapshot.peers.notes, Date.now());
    }
    return snapshot;
  }

  /** Forgets the deployment's key set here and in this location's relay (an admin call changed it). */
  async keysChanged(deployment: string): Promise<void> {
    if (servedDeployment(deployment)?.routing.relay) await relayFor(this.#env, deployment, this.location).forgetKeys();
    this.apiKeys.invalidate(deployment);
  }

  /** The deployment's balancer in this isolate (`policy.balancer`, src/policy/balancers/). */
  balancerFor(deployment: Deployment): ActiveBalancer {
    let balancer = this.#balancers.get(deployment.name);
    if (!balancer) this.#balancers.set(deployment.name, (balancer = createBalancer(deployment.policy.balancer, deployment.policy.prefix ?? DEFAULT_PREFIX_POLICY)));
    return balancer;
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
    return sendFlush(this.#env, flush).catch((err: unknown) => console.error(JSON.stringify({ msg: "telemetry flush failed", error: String(err) })));
  }

  /** Counts a request as pending until `done` is called; false when the deployment's cap is reached. */
  admit(deployment: Deployment): false | (() => void) {
    const n = this.pending.get(deployment.name) ?? 0;
    if (n >= deployment.limits.maxPendingRequests) return false;
    this.pending.set(deployment.name, n + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.pending.set(deployment.name, (this.pending.get(deployment.name) ?? 1) - 1);
    };
  }
}
