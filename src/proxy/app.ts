/**
 * The edge Worker's Hono app: system routes under /-/, the replica control
 * plane under /-/replicas/, and every other path proxied by longest route
 * prefix to its deployment.
 */
import { Hono } from "hono";
import { checkDeployments, type Deployment } from "../config/deployment.ts";
import type { Env } from "../env.ts";
import { errorResponse } from "../protocol/index.ts";
import { adminRoutes } from "./admin-routes.ts";
import { controlRoutes } from "./control-routes.ts";
import { dispatch } from "./dispatch.ts";
import { requestIdFor } from "./headers.ts";
import { IsolateState } from "./isolate-state.ts";
import { requestKeys } from "./request-keys.ts";
import { RouteTable } from "./route-table.ts";

export interface EdgeApp {
  app: Hono<{ Bindings: Env }>;
  /** The isolate's state (routing views, session bindings, key sets, limits). */
  stateFor(env: Env): IsolateState;
}

export function createEdgeApp(deployments: readonly Deployment[]): EdgeApp {
  checkDeployments(deployments);
  const byName = new Map(deployments.map((d) => [d.name, d]));
  const routes = new RouteTable(deployments.map((d) => ({ prefix: d.routePrefix, target: d })));

  // One state per isolate. The env (and its bindings) is only known per
  // request, so it is created on first use.
  let state: IsolateState | undefined;
  const stateFor = (env: Env) => (state ??= new IsolateState(env));

  const app = new Hono<{ Bindings: Env }>();

  app.get("/-/healthz", async (c) => {
    const cacheNow = stateFor(c.env).snapshots;
    const now = Date.now();
    const ready: Record<string, number> = {};
    for (const d of deployments) {
      ready[d.name] = (await cacheNow.view(d.name, (p) => c.executionCtx.waitUntil(p))).readyCount(now);
    }
    const canRoute = Object.values(ready).some((n) => n > 0);
    return c.json({ status: canRoute ? "ok" : "no_ready_replica", ready_replicas: ready }, canRoute ? 200 : 503);
  });

  // Ray Serve's shape: { "<route_prefix>": "<app name>" }.
  app.get("/-/routes", (c) => c.json(Object.fromEntries(deployments.map((d) => [d.routePrefix, d.name]))));

  app.route("/-/replicas", controlRoutes(byName));

  app.route("/-/deployments", adminRoutes(byName, stateFor));

  for (const path of ["/-/healthz", "/-/routes"]) {
    app.all(path, (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}`, { headers: { allow: "GET" } }));
  }
  app.all("/-/*", (c) => errorResponse("route_not_found", `no system route ${c.req.method} ${c.req.path}`));

  app.all("*", async (c) => {
    const requestId = requestIdFor(c.req.header("x-request-id") ?? null);
    const routed = routes.match(c.req.path);
    if (!routed) return errorResponse("route_not_found", `no deployment serves ${c.req.path}`, { requestId });
    const deployment = routed.target;
    const headers = c.req.raw.headers;
    const state = stateFor(c.env);
    const background = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);

    let headerBytes = 0;
    for (const [name, value] of headers) headerBytes += name.length + value.length + 4;
    if (headerBytes > deployment.limits.maxHeaderBytes) {
      return errorResponse("header_too_large", `request headers take ${headerBytes} bytes; the limit is ${deployment.limits.maxHeaderBytes}`, { requestId });
    }
    if (!deployment.access.public) {
      const key = await state.apiKeys.check(deployment.name, headers.get("authorization"), background);
      if (!key.ok) {
        const extra: Record<string, string> = key.code === "unauthorized" ? { "www-authenticate": 'Bearer realm="switchyard"' } : {};
        return errorResponse(key.code, key.message, { requestId, headers: extra, ...(key.code === "auth_unavailable" ? { retryAfterSeconds: 1 } : {}) });
      }
      const rate = state.rateLimits.take(deployment, key.keyHash, background);
      if (!rate.ok) {
        return errorResponse("rate_limited", `rate limit of ${deployment.access.rateLimit?.requestsPerSecond} requests/s for this key exceeded`, {
          requestId,
          retryAfterSeconds: rate.retryAfterSeconds,
        });
      }
    }
    const keys = requestKeys(headers, deployment);
    if (!keys.ok) return errorResponse(keys.code, keys.message, { requestId });
    const done = state.admit(deployment);
    if (!done) {
      return errorResponse("queue_full", `deployment "${deployment.name}" has ${deployment.limits.maxPendingRequests} requests waiting here already`, {
        requestId,
        retryAfterSeconds: 1,
      });
    }
    try {
      const view = await state.snapshots.view(deployment.name, background);
      const { model, session } = keys.keys;
      return await dispatch(c.req.raw, {
        deployment,
        routePrefix: routed.prefix,
        view,
        requestId,
        background,
        ...(model !== undefined ? { model } : {}),
        ...(session !== undefined ? { session: { id: session, affinity: state.affinity } } : {}),
      });
    } finally {
      done();
    }
  });

  app.onError((err, c) => {
    console.error(JSON.stringify({ msg: "unhandled error", path: c.req.path, error: String(err) }));
    return errorResponse("internal_error", "internal error", { requestId: c.req.header("x-request-id") });
  });

  return { app, stateFor };
}
