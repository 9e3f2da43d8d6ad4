import type { DeploymentRouter } from "./state/deployment-router.ts";
import { routingShardName } from "./state/routing-shards.ts";
import type { SnapshotRelay } from "./state/snapshot-relay.ts";
import { sessionObjectName, sessionShardName } from "./state/session-binding.ts";
import type { SessionRouter, SessionRouterStats } from "./state/session-router.ts";
import type { AccessKeys } from "./state/access-keys.ts";
import type { RateLimiter } from "./state/rate-limiter.ts";
import type { Telemetry } from "./telemetry/telemetry.ts";
import { telemetryShardName } from "./telemetry/telemetry-shards.ts";

/** A routing Durable Object of a deployment: shard 0 (the deployment's own name) unless `shard` is given. */
export function routerFor(env: Env, deployment: string, shard = 0): DurableObjectStub<DeploymentRouter> {
  return env.ROUTER.get(env.ROUTER.idFromName(routingShardName(deployment, shard)));
}

/** The snapshot relay of a deployment in one location (`colo`). */
export function relayFor(env: Env, deployment: string, location: string): DurableObjectStub<SnapshotRelay> {
  return env.RELAYS.get(env.RELAYS.idFromName(`${deployment}@${location}`));
}

/** The SessionRouter shard holding a session's binding. */
export function sessionRouterFor(env: Env, deployment: string, session: string, shards: number): DurableObjectStub<SessionRouter> {
  return env.SESSIONS.get(env.SESSIONS.idFromName(sessionObjectName(deployment, session, shards)));
}

/** A deployment's session counters, summed over its SessionRouter shards (admin and metrics; calls every shard). */
export async function sessionStatsFor(env: Env, deployment: string, shards: number): Promise<SessionRouterStats> {
  const all = await Promise.all(Array.from({ length: shards }, (_, i) => env.SESSIONS.get(env.SESSIONS.idFromName(sessionShardName(deployment, i))).stats()));
  const sum: SessionRouterStats = { bindings: 0, resolves: 0, rebinds: 0, writes: 0 };
  for (const s of all) for (const k of Object.keys(sum) as (keyof SessionRouterStats)[]) sum[k] += s[k];
  return sum;
}

/** The AccessKeys object of a deployment. */
export function keysFor(env: Env, deployment: string): DurableObjectStub<AccessKeys> {
  return env.KEYS.get(env.KEYS.idFromName(deployment));
}

/** A RateLimiter shard of a deployment. */
export function rateLimiterFor(env: Env, deployment: string, shard: number): DurableObjectStub<RateLimiter> {
  return env.RATE_LIMITS.get(env.RATE_LIMITS.idFromName(`${deployment}/ratelimit/${shard}`));
}

/** The Telemetry object. */
export function telemetryFor(env: Env): DurableObjectStub<Telemetry> {
  return env.TELEMETRY.get(env.TELEMETRY.idFromName("global"));
}

/** Telemetry shard `k` (0 ≤ k < TELEMETRY_SHARDS): the counters of the isolates that hash to it. */
export function telemetryShardFor(env: Env, k: number): DurableObjectStub<Telemetry> {
  return env.TELEMETRY.get(env.TELEMETRY.idFromName(telemetryShardName(k)));
}

/** Bindings and secrets of the edge Worker (wrangler.toml; secrets via `wrangler secret put`). */
export interface Env {
  /** A deployment's routing Durable Objects: `routing.shards` of them, shard 0 named by the deployment, shard k `<name>#k`. */
  ROUTER: DurableObjectNamespace<DeploymentRouter>;
  /** Snapshot relays, one per deployment and location (`<name>@<colo>`): isolates ask these, not the shards. */
  RELAYS: DurableObjectNamespace<SnapshotRelay>;
  /** Session → replica bindings, `sessionAffinity.shards` objects per deployment. */
  SESSIONS: DurableObjectNamespace<SessionRouter>;
  /** Client API keys (hashed), one object per deployment. */
  KEYS: DurableObjectNamespace<AccessKeys>;
  /** Global per-key token buckets, RATE_LIMIT_SHARDS objects per deployment. */
  RATE_LIMITS: DurableObjectNamespace<RateLimiter>;
  /** Telemetry: counters flushed by isolates (TELEMETRY_SHARDS objects, "telemetry/<k>"), dashboard WebSockets (one object, "global"). */
  TELEMETRY: DurableObjectNamespace<Telemetry>;
  /**
   * Master secret of the control plane; never leaves the edge. Each deployment's
   * replica key is derived from it (src/protocol/signing.ts) and signs that
   * deployment's register/report/deregister messages.
   */
  SWITCHYARD_REPLICA_SECRET: string;
  /** Secret for admin routes (/-/deployments/..., /-/keys/...). Admin routes are off when unset. */
  SWITCHYARD_ADMIN_SECRET?: string;
  /**
   * "local" (set by `npm start` and the tests): replicas may register loopback and
   * private addresses. Anything else, or unset, is production: https hostnames only.
   */
  SWITCHYARD_MODE?: string;
  /** "off" turns off the per-request JSON log line (on by default). */
  SWITCHYARD_REQUEST_LOGS?: string;
}
