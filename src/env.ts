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

/**
 * Bindings, secrets and vars the edge Worker reads, as wrangler.toml declares them
 * (each explained there). Written out here rather than taken from `Cloudflare.Env`
 * (what `wrangler types` generates for a project): a Worker that mounts Switchyard
 * as a library has its own generated Env, and the package's types must not depend
 * on it (with `Cloudflare.Env`, a user's `tsc` failed inside the package). Its
 * Env must include these; src/worker.ts checks that this repository's generated one
 * (worker-configuration.d.ts, `npm run types`) does.
 */
export interface Env {
  ROUTER: DurableObjectNamespace<DeploymentRouter>;
  RELAYS: DurableObjectNamespace<SnapshotRelay>;
  SESSIONS: DurableObjectNamespace<SessionRouter>;
  KEYS: DurableObjectNamespace<AccessKeys>;
  RATE_LIMITS: DurableObjectNamespace<RateLimiter>;
  TELEMETRY: DurableObjectNamespace<Telemetry>;
  /** The master secret replica keys derive from (wrangler secret put SWITCHYARD_REPLICA_SECRET). */
  SWITCHYARD_REPLICA_SECRET: string;
  /** The admin API's secret; without it the admin routes and /-/metrics are off. */
  SWITCHYARD_ADMIN_SECRET?: string;
  /** "local" lets replicas register loopback and private addresses (the local stack); unset in production. */
  SWITCHYARD_MODE?: string;
  /** Request log lines: unset or "on", "off", or a sampling fraction ("0.1"). */
  SWITCHYARD_REQUEST_LOGS?: string;
}
