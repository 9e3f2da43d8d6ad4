import type { DeploymentRouter } from "./state/deployment-router.ts";

/** Bindings and secrets of the edge Worker (wrangler.toml; secrets via `wrangler secret put`). */
export interface Env {
  /** One routing Durable Object per deployment, named by the deployment. */
  ROUTER: DurableObjectNamespace<DeploymentRouter>;
  /** Shared secret replicas present (Bearer) on register/report/deregister. */
  SWITCHYARD_REPLICA_SECRET: string;
  /** Secret for admin routes (/-/deployments/...). Admin routes are off when unset. */
  SWITCHYARD_ADMIN_SECRET?: string;
}
