/**
 * What one proxy isolate keeps between requests: routing views, session
 * bindings, API key sets, rate-limit buckets and pending-request counts. Module
 * scope on purpose (an isolate serves many requests); created on first use
 * because the bindings it needs arrive with the first request's env.
 */
import type { Deployment } from "../config/deployment.ts";
import { keysFor, rateLimiterFor, routerFor, sessionRouterFor, telemetryFor, type Env } from "../env.ts";
import { ProxyMetrics } from "../telemetry/proxy-metrics.ts";
import { ApiKeyCache } from "./api-keys.ts";
import type { DispatchSigner } from "./dispatch.ts";
import { dispatchSignature } from "./replica-keys.ts";
import { RateLimits } from "./rate-limits.ts";
import { SessionAffinity } from "./session-affinity.ts";
import { SnapshotCache } from "./snapshot-cache.ts";

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

  constructor(env: Env) {
    this.#env = env;
    this.sign = (p) => dispatchSignature(env.SWITCHYARD_REPLICA_SECRET, p);
    this.snapshots = new SnapshotCache((name) => routerFor(env, name).snapshot());
    const ttlMs = (d: Deployment) => d.sessionAffinity.ttlSeconds * 1000;
    this.affinity = new SessionAffinity({
      resolve: async (d, session, proposal) =>
        (await sessionRouterFor(env, d.name, session, d.sessionAffinity.shards).resolve(session, proposal, ttlMs(d))).replica,
      rebind: async (d, session, from, to) =>
        (await sessionRouterFor(env, d.name, session, d.sessionAffinity.shards).rebind(session, from, to, ttlMs(d))).replica,
    });
    this.apiKeys = new ApiKeyCache((name) => keysFor(env, name).activeHashes());
    this.rateLimits = new RateLimits((name, shard, limits, uses) => rateLimiterFor(env, name, shard).sync(limits, uses));
  }

  /** Sends the metrics deltas to the Telemetry object when a flush is due (in the background). */
  flushMetrics(background: (p: Promise<unknown>) => void): void {
    const flush = this.metrics.takeFlush(Date.now());
    if (!flush) return;
    background(
      telemetryFor(this.#env)
        .ingest(flush)
        .catch((err: unknown) => console.error(JSON.stringify({ msg: "telemetry flush failed", error: String(err) }))),
    );
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
