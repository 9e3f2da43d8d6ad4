import type { DeploymentRouter } from "./state/deployment-router.ts";

/** The routing Durable Object of a deployment (one per deployment, named by it). */
export function routerFor(env: Env, deployment: string): DurableObjectStub<DeploymentRouter> {
  return env.ROUTER.get(env.ROUTER.idFromName(deployment));
}

/** Bindings and secrets of the edge Worker (wrangler.toml; secrets via `wrangler secret put`). */
export interface Env {
  /** One routing Durable Object per deployment, named by the deployment. */
  ROUTER: DurableObjectNamespace<DeploymentRouter>;
  /** Shared secret replicas present (Bearer) on register/report/deregister. */
  SWITCHYARD_REPLICA_SECRET: string;
  /** Secret for admin routes (/-/deployments/...). Admin routes are off when unset. */
  SWITCHYARD_ADMIN_SECRET?: string;
}
