import type { DeploymentRouter } from "./state/deployment-router.ts";
import { sessionObjectName } from "./state/session-binding.ts";
import type { SessionRouter } from "./state/session-router.ts";

/** The routing Durable Object of a deployment (one per deployment, named by it). */
export function routerFor(env: Env, deployment: string): DurableObjectStub<DeploymentRouter> {
  return env.ROUTER.get(env.ROUTER.idFromName(deployment));
}

/** The SessionRouter shard holding a session's binding. */
export function sessionRouterFor(env: Env, deployment: string, session: string, shards: number): DurableObjectStub<SessionRouter> {
  return env.SESSIONS.get(env.SESSIONS.idFromName(sessionObjectName(deployment, session, shards)));
}

/** Bindings and secrets of the edge Worker (wrangler.toml; secrets via `wrangler secret put`). */
export interface Env {
  /** One routing Durable Object per deployment, named by the deployment. */
  ROUTER: DurableObjectNamespace<DeploymentRouter>;
  /** Session → replica bindings, `sessionAffinity.shards` objects per deployment. */
  SESSIONS: DurableObjectNamespace<SessionRouter>;
  /** Shared secret replicas present (Bearer) on register/report/deregister. */
  SWITCHYARD_REPLICA_SECRET: string;
  /** Secret for admin routes (/-/deployments/...). Admin routes are off when unset. */
  SWITCHYARD_ADMIN_SECRET?: string;
}
