/**
 * The edge Worker's bindings, secrets and vars: the bindings type only. Each
 * Durable Object module declares its own binding and the stub factory that
 * reaches it (src/state/), so no object imports this file back.
 */
import type { KeysBinding } from "./state/access-keys.ts";
import type { RouterBinding } from "./state/deployment-router.ts";
import type { RateLimitsBinding } from "./state/rate-limiter.ts";
import type { SessionsBinding } from "./state/session-router.ts";
import type { RelaysBinding } from "./state/snapshot-relay.ts";
import type { TelemetryBinding } from "./state/telemetry.ts";

/**
 * Bindings, secrets and vars the edge Worker reads, as wrangler.toml declares them
 * (each explained there). Written out here rather than taken from `Cloudflare.Env`
 * (what `wrangler types` generates for a project): a Worker that mounts Switchyard
 * as a library has its own generated Env, and the package's types must not depend
 * on it (with `Cloudflare.Env`, a user's `tsc` failed inside the package). Its
 * Env must include these; src/worker.ts checks that this repository's generated one
 * (worker-configuration.d.ts, `npm run types`) does.
 */
export interface Env extends RouterBinding, RelaysBinding, SessionsBinding, KeysBinding, RateLimitsBinding, TelemetryBinding {
  /** The master secret replica keys derive from (wrangler secret put SWITCHYARD_REPLICA_SECRET). */
  SWITCHYARD_REPLICA_SECRET: string;
  /** The admin API's secret; without it the admin routes and /-/metrics are off. */
  SWITCHYARD_ADMIN_SECRET?: string;
  /** "local" lets replicas register loopback and private addresses (the local stack); unset in production. */
  SWITCHYARD_MODE?: string;
  /** Request log lines: unset or "on", "off", or a sampling fraction ("0.1"). */
  SWITCHYARD_REQUEST_LOGS?: string;
  /** Local mode only: the location an isolate serves from where the runtime gives no `cf.colo` (the local stack's StackOptions.edgeLocations). */
  SWITCHYARD_LOCATION?: string;
  /** Local mode only: where an isolate is, "lat,lon" in degrees, where the runtime gives no `cf.latitude`/`cf.longitude`. */
  SWITCHYARD_COORDINATES?: string;
}
