/**
 * Edge Worker entry. The deployments come from `functions/` (collected into
 * .switchyard/deployments.ts by src/local/build.ts).
 */
import { deployments } from "../.switchyard/deployments.ts";
import type { Env } from "./env.ts";
import { registerServedDeployments } from "./config/served.ts";
import { createEdgeApp } from "./proxy/app.ts";

export { DeploymentRouter } from "./state/deployment-router.ts";
export { SnapshotRelay } from "./state/snapshot-relay.ts";
export { SessionRouter } from "./state/session-router.ts";
export { AccessKeys } from "./state/access-keys.ts";
export { RateLimiter } from "./state/rate-limiter.ts";
export { Telemetry } from "./state/telemetry.ts";

// This Worker's bindings, as wrangler.toml declares them (worker-configuration.d.ts), are what
// the edge reads (src/env.ts): a binding renamed or dropped in one but not the other fails here.
type EnvMatches<T extends true> = T;
export type WranglerEnvProvidesEnv = EnvMatches<Cloudflare.Env extends Env ? true : false>;

registerServedDeployments(deployments);
const edge = createEdgeApp(deployments);

export default {
  fetch: (request, env, ctx) => edge.fetch(request, env, ctx),
} satisfies ExportedHandler<Env>;
