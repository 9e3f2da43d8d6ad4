/**
 * The edge Worker's entry: one fetch path (below) and the Hono app it hands the
 * system routes to: /-/ (health, metrics, admin, dashboard), the replica control
 * plane under /-/replicas/, GET /v1/models. Every other path is a deployment's
 * route (longest prefix) or an OpenAI POST, served by the request path in
 * serve/ with no Hono on it.
 */
import { Hono } from "hono";
import type { Context } from "hono";
import { basePath, baseRoutePath } from "hono/route";
import { runsAtEdge } from "../backends/index.ts";
import { checkDeployments, type Deployment } from "../config/deployment.ts";
import type { Env } from "../env.ts";
import { coordinatesOf } from "../policy/latency-model.ts";
import { errorResponse, Header, OPENAI_ENDPOINTS, SystemPath } from "../protocol/index.ts";
import { adminRoutes } from "./routes/admin.ts";
import { controlRoutes } from "./routes/control.ts";
import { dashboardRoutes } from "./routes/dashboard.ts";
import { observabilityRoutes } from "./routes/observability.ts";
import { OPENAI_PREFIX, openaiRoutes } from "./routes/openai.ts";
import { bearerMatches } from "./serve/access.ts";
import { drainUnreadBody } from "./serve/body.ts";
import { IsolateState } from "./serve/isolate-state.ts";
import { requestIdFor, requestTarget, unmountedPath, type PathVariables } from "./serve/request.ts";
import { NO_ROUTE_DRAIN_BYTES, routeServer } from "./serve/serve.ts";
import { deploymentReadiness } from "./readiness.ts";

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

export function createEdgeApp(deployments: readonly Deployment[]): EdgeApp {
  checkDeployments(deployments);
  const byName = new Map(deployments.map((d) => [d.name, d]));

  // One state per isolate. The env (and its bindings) is only known per
  // request, so it is created on first use.
  let state: IsolateState | undefined;
  const stateFor = (env: Env) => (state ??= new IsolateState(env));
  let located = false;
  /**
   * An isolate runs in one location: the first request names it (cf.colo). Local
   * workerd gives no cf: there the stack may name it (SWITCHYARD_LOCATION), else "local".
   */
  const locate = (req: Request, env: Env) => {
    if (located) return;
    located = true;
    const cf = (req as { cf?: { colo?: unknown; latitude?: unknown; longitude?: unknown } }).cf;
    const local = env.SWITCHYARD_MODE === "local";
    const colo = cf?.colo ?? (local ? env.SWITCHYARD_LOCATION : undefined);
    if (typeof colo === "string" && /^[A-Za-z0-9-]{1,16}$/.test(colo)) stateFor(env).location = colo;
    const at = cf?.latitude !== undefined ? coordinatesOf(cf.latitude, cf.longitude) : local && env.SWITCHYARD_COORDINATES !== undefined ? coordinatesOf(...(env.SWITCHYARD_COORDINATES.split(",") as [string, string])) : undefined;
    if (at) stateFor(env).coordinates = at;
  };

  const serveRoute = routeServer(deployments, stateFor);
  const app = new Hono<EdgeEnv>();

  // First, for every route: the one normalised path, or 400 for a path that could
  // leave its prefix (serve/request.ts). Nothing below sees the raw path. Mounted
  // in a user's app under a prefix, the path is the one below it: route prefixes
  // and dispatch stay the app's own (the control routes check signatures over
  // the full path, the one the replica sent).
  app.use("*", async function normalisedPath(c, next) {
    const target = requestTarget(c.req.url);
    if (!target.ok) {
      await drainUnreadBody(c.req.raw, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("bad_request", target.message, { requestId: requestIdFor(c.req.header(Header.requestId) ?? null) });
    }
    c.set("target", { path: unmountedPath(target.path, mountOf(c)), search: target.search });
    locate(c.req.raw, c.env);
    await next();
  });

  // Deployments whose model runs in this Worker: always ready, no replicas.
  const edge = deployments.filter((d) => runsAtEdge(d.backend)).map((d) => d.name);
  const replicated = deployments.filter((d) => !runsAtEdge(d.backend));

  const privateNames = deployments.filter((d) => !d.access.public).map((d) => d.name);
  // Readiness: 200 when every deployment can serve or hold a request now (per this
  // isolate's routing view: readiness.ts): one served by replicas has a ready one, or
  // scales to zero (it holds requests until one starts), or waits for external
  // replicas (listed, not blocking, unless policy.requireReadyReplica); 503 with the
  // same JSON otherwise. Models run in the Worker are always ready. A caller sees counts
  // for public deployments and those its key (or the admin secret) may use; the status
  // covers them all.
  app.get(SystemPath.healthz, async (c) => {
    const state = stateFor(c.env);
    const background = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
    const now = Date.now();
    const authorization = c.req.header("authorization");
    const admin = bearerMatches(authorization, c.env.SWITCHYARD_ADMIN_SECRET);
    const usable = admin ? new Set(privateNames) : await state.apiKeys.usableBy(privateNames, authorization, background);
    const ready: Record<string, number> = {};
    const waiting: string[] = [];
    const atZero: string[] = [];
    const external: string[] = [];
    for (const d of replicated) {
      const n = (await state.snapshots.view(d.name, background)).readyCount(now);
      const shown = d.access.public || usable.has(d.name);
      const name = shown ? d.name : "(private)";
      if (shown) ready[d.name] = n;
      const readiness = deploymentReadiness(d, n);
      if (readiness === "no_ready_replica") waiting.push(name);
      else if (readiness === "scaled_to_zero") atZero.push(name);
      else if (readiness === "waiting_for_external") external.push(name);
    }
    const shownEdge = edge.filter((name) => byName.get(name)!.access.public || usable.has(name));
    const ok = waiting.length === 0;
    return c.json(
      {
        status: ok ? "ok" : "no_ready_replica",
        ready_replicas: ready,
        edge_deployments: shownEdge,
        // Ready, with no replica: each holds requests until one starts.
        ...(atZero.length > 0 ? { scaled_to_zero: [...new Set(atZero)] } : {}),
        // Not blocking: external replicas (agents) join when they will (policy.requireReadyReplica makes them block).
        ...(external.length > 0 ? { waiting_for_external: [...new Set(external)] } : {}),
        ...(ok ? {} : { waiting_for: [...new Set(waiting)] }),
      },
      ok ? 200 : 503,
    );
  });

  // Liveness: the Worker answers. (Readiness, above, also needs replicas.)
  app.get(SystemPath.livez, (c) => c.json({ status: "ok" }));

  // Ray Serve's shape: { "<route_prefix>": "<app name>" }.
  app.get(SystemPath.routes, (c) => c.json(Object.fromEntries(deployments.map((d) => [d.routePrefix, d.name]))));

  app.route(SystemPath.replicas, controlRoutes(byName));

  app.route(SystemPath.deployments, adminRoutes(byName, stateFor));
  app.route("/", observabilityRoutes(deployments));
  app.route(SystemPath.dashboard, dashboardRoutes());
  const openai = deployments.some((d) => d.openai) ? openaiRoutes(deployments, stateFor) : undefined;
  if (openai) app.route(OPENAI_PREFIX, openai.app);

  for (const path of [SystemPath.healthz, SystemPath.livez, SystemPath.routes, SystemPath.metrics]) {
    app.all(path, (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}`, { headers: { allow: "GET" } }));
  }
  app.all(`${SystemPath.prefix}/*`, (c) => errorResponse("route_not_found", `no system route ${c.req.method} ${c.req.path}`));

  app.all("*", (c) => serveRoute(c.req.raw, c.env, c.executionCtx, c.get("target")));

  const unhandled = (err: unknown, req: Request, path: string) => {
    const requestId = requestIdFor(req.headers.get(Header.requestId));
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

  // Paths only Hono routes: the system routes, and the rest of /v1 (its model list, its method errors).
  const openaiPosts = new Set<string>(Object.keys(OPENAI_ENDPOINTS));
  const honoRoutes = (path: string) => path.startsWith(SystemPath.prefix) || (openai !== undefined && (path === OPENAI_PREFIX || path.startsWith(`${OPENAI_PREFIX}/`)));

  /**
   * The one entry: every request starts here, and every error that escapes a
   * route ends in `unhandled` (Hono's onError calls it too). A deployment's route
   * and an OpenAI POST are served with no Hono on their path; the rest goes to
   * `app`, which answers as this does (a user's Hono app mounting `app` gets the
   * same routes through Hono alone).
   */
  async function fetch(request: Request, env: Env, executionCtx: ExecutionContext): Promise<Response> {
    const target = requestTarget(request.url);
    if (!target.ok) return app.fetch(request, env, executionCtx);
    const at = { path: target.path, search: target.search };
    const viaOpenAI = openai !== undefined && request.method === "POST" && openaiPosts.has(at.path);
    if (!viaOpenAI && honoRoutes(at.path)) return app.fetch(request, env, executionCtx);
    locate(request, env);
    let response: Response;
    try {
      response = viaOpenAI ? await openai.serve(request, env, executionCtx, at) : await serveRoute(request, env, executionCtx, at);
    } catch (err) {
      response = unhandled(err, request, at.path);
    }
    // As Hono answers HEAD: the GET answer's status and headers, no body.
    return request.method === "HEAD" ? new Response(null, response) : response;
  }

  return { app, fetch, stateFor };
}
