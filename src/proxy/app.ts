/**
 * The edge Worker's Hono app: system routes under /-/, the replica control
 * plane under /-/replicas/, and every other path proxied by longest route
 * prefix to its deployment.
 */
import { Hono } from "hono";
import type { Context } from "hono";
import { basePath, baseRoutePath } from "hono/route";
import { runsAtEdge } from "../backends/index.ts";
import { checkDeployments, type Deployment } from "../config/deployment.ts";
import type { Env } from "../env.ts";
import { errorResponse, isReplicaOperationalPath } from "../protocol/index.ts";
import { adminRoutes } from "./admin-routes.ts";
import { bearerMatches } from "./auth.ts";
import { controlRoutes } from "./control-routes.ts";
import { dashboardRoutes } from "./dashboard-routes.ts";
import { observabilityRoutes } from "./observability-routes.ts";
import { openaiRoutes } from "./openai-routes.ts";
import type { DispatchTrace } from "./dispatch.ts";
import { requestIdFor } from "./headers.ts";
import { drainUnreadBody } from "./request-body.ts";
import { IsolateState } from "./isolate-state.ts";
import { observeRequest } from "./request-observer.ts";
import { requestTarget, unmountedPath, type PathVariables } from "./request-path.ts";
import { serveRequest } from "./serve-request.ts";
import { RouteTable, stripRoutePrefix } from "./route-table.ts";

type EdgeEnv = { Bindings: Env; Variables: PathVariables };

export interface EdgeApp {
  app: Hono<EdgeEnv>;
  /**
   * The Worker's fetch handler (src/worker.ts): a request for a deployment's route
   * is served without Hono's routing, context and middleware, which cost every
   * proxied request CPU for nothing (the catch-all route is all it would reach);
   * every other request goes to `app`. Answers exactly as `app.fetch` does.
   */
  fetch(request: Request, env: Env, ctx: ExecutionContext): Promise<Response>;
  /** The isolate's state (routing views, session bindings, key sets, limits). */
  stateFor(env: Env): IsolateState;
}

/**
 * Where a user's app mounted this one (hono/route's basePath). basePath gives a
 * static mount (no parameter, the usual case) as it is registered, but caches it in
 * a WeakMap entry per request first; that entry, set for every request, is skipped.
 */
function mountOf(c: Context): string {
  const registered = baseRoutePath(c);
  return /[:*]/.test(registered) ? basePath(c) : registered;
}

/** workerd's words for a connection that broke off (a client's, where nothing else is read from). */
const CLIENT_CONNECTION_LOST = "Network connection lost.";

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
  let located = false;
  /** An isolate runs in one location: the first request names it (cf.colo; absent on local workerd). */
  const locate = (req: Request, env: Env) => {
    if (located) return;
    located = true;
    const colo = (req as { cf?: { colo?: unknown } }).cf?.colo;
    if (typeof colo === "string" && /^[A-Za-z0-9-]{1,16}$/.test(colo)) stateFor(env).location = colo;
  };

  const app = new Hono<EdgeEnv>();

  // First, for every route: the one normalised path, or 400 for a path that could
  // leave its prefix (request-path.ts). Nothing below sees the raw path. Mounted
  // in a user's app under a prefix, the path is the one below it: route prefixes
  // and dispatch stay the app's own (the control routes check signatures over
  // the full path, the one the replica sent).
  app.use("*", async function normalisedPath(c, next) {
    const target = requestTarget(c.req.url);
    if (!target.ok) {
      await drainUnreadBody(c.req.raw, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("bad_request", target.message, { requestId: requestIdFor(c.req.header("x-request-id") ?? null) });
    }
    c.set("target", { path: unmountedPath(target.path, mountOf(c)), search: target.search });
    locate(c.req.raw, c.env);
    await next();
  });

  // Deployments whose model runs in this Worker: always ready, no replicas.
  const edge = deployments.filter((d) => runsAtEdge(d.backend)).map((d) => d.name);
  const replicated = deployments.filter((d) => !runsAtEdge(d.backend));

  const privateNames = deployments.filter((d) => !d.access.public).map((d) => d.name);
  // Readiness: 200 only when every deployment served by replicas has one that can
  // take a request now (per this isolate's routing view); 503 with the same JSON
  // otherwise. Models run in the Worker are always ready. A caller sees counts for
  // public deployments and those its key (or the admin secret) may use; the status
  // covers them all.
  app.get("/-/healthz", async (c) => {
    const state = stateFor(c.env);
    const background = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
    const now = Date.now();
    const authorization = c.req.header("authorization");
    const admin = bearerMatches(authorization, c.env.SWITCHYARD_ADMIN_SECRET);
    const usable = admin ? new Set(privateNames) : await state.apiKeys.usableBy(privateNames, authorization, background);
    const ready: Record<string, number> = {};
    const waiting: string[] = [];
    for (const d of replicated) {
      const n = (await state.snapshots.view(d.name, background)).readyCount(now);
      const shown = d.access.public || usable.has(d.name);
      if (shown) ready[d.name] = n;
      if (n === 0 && shown) waiting.push(d.name);
      if (n === 0 && !shown) waiting.push("(private)");
    }
    const shownEdge = edge.filter((name) => byName.get(name)!.access.public || usable.has(name));
    const ok = waiting.length === 0;
    return c.json(
      { status: ok ? "ok" : "no_ready_replica", ready_replicas: ready, edge_deployments: shownEdge, ...(ok ? {} : { waiting_for: [...new Set(waiting)] }) },
      ok ? 200 : 503,
    );
  });

  // Liveness: the Worker answers. (Readiness, above, also needs replicas.)
  app.get("/-/livez", (c) => c.json({ status: "ok" }));

  // Ray Serve's shape: { "<route_prefix>": "<app name>" }.
  app.get("/-/routes", (c) => c.json(Object.fromEntries(deployments.map((d) => [d.routePrefix, d.name]))));

  app.route("/-/replicas", controlRoutes(byName));

  app.route("/-/deployments", adminRoutes(byName, stateFor));
  app.route("/", observabilityRoutes(deployments));
  app.route("/-/dashboard", dashboardRoutes());
  if (deployments.some((d) => d.openai)) app.route("/v1", openaiRoutes(deployments, stateFor));

  for (const path of ["/-/healthz", "/-/livez", "/-/routes", "/-/metrics"]) {
    app.all(path, (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}`, { headers: { allow: "GET" } }));
  }
  app.all("/-/*", (c) => errorResponse("route_not_found", `no system route ${c.req.method} ${c.req.path}`));

  /** A request for a deployment's route (or for none): the proxy's own path. */
  async function serveRoute(req: Request, env: Env, executionCtx: { waitUntil(p: Promise<unknown>): void }, target: { path: string; search: string }): Promise<Response> {
    const requestId = requestIdFor(req.headers.get("x-request-id"));
    const routed = routes.match(target.path);
    if (!routed) {
      await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("route_not_found", `no deployment serves ${target.path}`, { requestId });
    }
    const deployment = routed.target;
    if (!(deployment.methods as readonly string[]).includes(req.method)) {
      await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("method_not_allowed", `${req.method} is not served by "${deployment.name}"`, { requestId, headers: { allow: deployment.methods.join(", ") } });
    }
    // A replica's operational routes (/-/healthz, /metrics, an engine's admin routes) are not for clients.
    if (!deployment.access.replicaRoutes && isReplicaOperationalPath(deployment.policy.stripPrefix ? stripRoutePrefix(target.path, routed.prefix) : target.path)) {
      await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("route_not_found", `no deployment serves ${target.path}`, { requestId });
    }
    const state = stateFor(env);
    const background = (p: Promise<unknown>) => executionCtx.waitUntil(p);
    const started = Date.now();
    const trace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
    const response = await serveRequest(req, { deployment, routePrefix: routed.prefix, target, state, requestId, background, trace });
    // Refused at the edge (no replica saw it): read the body so the client's connection survives.
    if (trace.attempts === 0 && response.status >= 400) await drainUnreadBody(req, deployment.limits.maxRequestBodyBytes);
    observeRequest(env, state, deployment.name, req.method, response.status, requestId, started, trace, background);
    return response;
  }

  app.all("*", (c) => serveRoute(c.req.raw, c.env, c.executionCtx, c.get("target")));

  const unhandled = (err: unknown, req: Request, path: string) => {
    const requestId = requestIdFor(req.headers.get("x-request-id"));
    // "unhandled error" is the line for proxy bugs. A client whose connection broke off while the
    // edge read from it is not one (the body readers report it themselves; this catches the rest).
    if (String(err).includes(CLIENT_CONNECTION_LOST)) {
      console.log(JSON.stringify({ msg: "client connection lost", path, request_id: requestId }));
      return errorResponse("bad_request", "the client's connection was lost", { requestId });
    }
    console.error(JSON.stringify({ msg: "unhandled error", path, request_id: requestId, error: String(err) }));
    return errorResponse("internal_error", "internal error", { requestId });
  };
  app.onError((err, c) => unhandled(err, c.req.raw, c.req.path));

  // Paths Hono routes elsewhere: system routes, and the OpenAI routes when a deployment has them.
  const openai = deployments.some((d) => d.openai);
  const hasOwnRoute = (path: string) => path.startsWith("/-") || (openai && (path === "/v1" || path.startsWith("/v1/")));

  async function fetch(request: Request, env: Env, executionCtx: ExecutionContext): Promise<Response> {
    const target = requestTarget(request.url);
    if (!target.ok || hasOwnRoute(target.path)) return app.fetch(request, env, executionCtx);
    locate(request, env);
    let response: Response;
    try {
      response = await serveRoute(request, env, executionCtx, { path: target.path, search: target.search });
    } catch (err) {
      response = unhandled(err, request, target.path);
    }
    // As Hono answers HEAD: the GET answer's status and headers, no body.
    return request.method === "HEAD" ? new Response(null, response) : response;
  }

  return { app, fetch, stateFor };
}
