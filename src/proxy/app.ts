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
import { dashboardRoutes } from "./dashboard-routes.ts";
import { observabilityRoutes } from "./observability-routes.ts";
import { openaiRoutes } from "./openai-routes.ts";
import type { DispatchTrace } from "./dispatch.ts";
import { requestIdFor } from "./headers.ts";
import { drainUnreadBody } from "./request-body.ts";
import { IsolateState } from "./isolate-state.ts";
import { observeRequest } from "./request-observer.ts";
import { serveRequest } from "./serve-request.ts";
import { RouteTable } from "./route-table.ts";

export interface EdgeApp {
  app: Hono<{ Bindings: Env }>;
  /** The isolate's state (routing views, session bindings, key sets, limits). */
  stateFor(env: Env): IsolateState;
}

/** Bodies of requests to no route are read up to this size before the 404 (see drainUnreadBody). */
const NO_ROUTE_DRAIN_BYTES = 1024 * 1024;

export function createEdgeApp(deployments: readonly Deployment[]): EdgeApp {
  checkDeployments(deployments);
  const byName = new Map(deployments.map((d) => [d.name, d]));
  const routes = new RouteTable(deployments.map((d) => ({ prefix: d.routePrefix, target: d })));

  // One state per isolate. The env (and its bindings) is only known per
  // request, so it is created on first use.
  let state: IsolateState | undefined;
  const stateFor = (env: Env) => (state ??= new IsolateState(env));

  const app = new Hono<{ Bindings: Env }>();

  // Deployments whose model runs in this Worker: always ready, no replicas.
  const edge = deployments.filter((d) => d.backend.kind === "edge").map((d) => d.name);
  const replicated = deployments.filter((d) => d.backend.kind !== "edge");

  app.get("/-/healthz", async (c) => {
    const cacheNow = stateFor(c.env).snapshots;
    const now = Date.now();
    const ready: Record<string, number> = {};
    for (const d of replicated) {
      ready[d.name] = (await cacheNow.view(d.name, (p) => c.executionCtx.waitUntil(p))).readyCount(now);
    }
    const canRoute = edge.length > 0 || Object.values(ready).some((n) => n > 0);
    return c.json({ status: canRoute ? "ok" : "no_ready_replica", ready_replicas: ready, edge_deployments: edge }, canRoute ? 200 : 503);
  });

  // Ray Serve's shape: { "<route_prefix>": "<app name>" }.
  app.get("/-/routes", (c) => c.json(Object.fromEntries(deployments.map((d) => [d.routePrefix, d.name]))));

  app.route("/-/replicas", controlRoutes(byName));

  app.route("/-/deployments", adminRoutes(byName, stateFor));
  app.route("/", observabilityRoutes(deployments));
  app.route("/-/dashboard", dashboardRoutes());
  if (deployments.some((d) => d.openai)) app.route("/v1", openaiRoutes(deployments, stateFor));

  for (const path of ["/-/healthz", "/-/routes", "/-/metrics"]) {
    app.all(path, (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}`, { headers: { allow: "GET" } }));
  }
  app.all("/-/*", (c) => errorResponse("route_not_found", `no system route ${c.req.method} ${c.req.path}`));

  app.all("*", async (c) => {
    const requestId = requestIdFor(c.req.header("x-request-id") ?? null);
    const routed = routes.match(c.req.path);
    if (!routed) {
      await drainUnreadBody(c.req.raw, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("route_not_found", `no deployment serves ${c.req.path}`, { requestId });
    }
    const deployment = routed.target;
    const state = stateFor(c.env);
    const background = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
    const started = Date.now();
    const trace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
    const response = await serveRequest(c.req.raw, { deployment, routePrefix: routed.prefix, state, requestId, background, trace });
    // Refused at the edge (no replica saw it): read the body so the client's connection survives.
    if (trace.attempts === 0 && response.status >= 400) await drainUnreadBody(c.req.raw, deployment.limits.maxRequestBodyBytes);
    observeRequest(c.env, state, deployment.name, c.req.method, response.status, requestId, started, trace, background);
    return response;
  });

  app.onError((err, c) => {
    console.error(JSON.stringify({ msg: "unhandled error", path: c.req.path, error: String(err) }));
    return errorResponse("internal_error", "internal error", { requestId: c.req.header("x-request-id") });
  });

  return { app, stateFor };
}
