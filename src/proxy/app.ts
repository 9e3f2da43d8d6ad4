/**
 * The edge Worker's Hono app: system routes under /-/, the replica control
 * plane under /-/replicas/, and every other path proxied by longest route
 * prefix to its deployment.
 */
import { Hono } from "hono";
import { checkDeployments, type Deployment } from "../config/deployment.ts";
import { routerFor, sessionRouterFor, type Env } from "../env.ts";
import { errorResponse } from "../protocol/index.ts";
import { bearerMatches } from "./auth.ts";
import { controlRoutes } from "./control-routes.ts";
import { dispatch } from "./dispatch.ts";
import { requestIdFor } from "./headers.ts";
import { requestKeys } from "./request-keys.ts";
import { RouteTable } from "./route-table.ts";
import { SessionAffinity } from "./session-affinity.ts";
import { sessionShardName } from "../state/session-binding.ts";
import { SnapshotCache } from "./snapshot-cache.ts";

export interface EdgeApp {
  app: Hono<{ Bindings: Env }>;
  /** The isolate's snapshot cache (exposed for stats). */
  cacheFor(env: Env): SnapshotCache;
  /** The isolate's session affinity (exposed for stats). */
  affinityFor(env: Env): SessionAffinity;
}

export function createEdgeApp(deployments: readonly Deployment[]): EdgeApp {
  checkDeployments(deployments);
  const byName = new Map(deployments.map((d) => [d.name, d]));
  const routes = new RouteTable(deployments.map((d) => ({ prefix: d.routePrefix, target: d })));

  // One cache per isolate. The env (and its ROUTER binding) is only known per
  // request, so it is created on first use.
  let cache: SnapshotCache | undefined;
  const cacheFor = (env: Env) =>
    (cache ??= new SnapshotCache((name) => routerFor(env, name).snapshot()));
  let affinity: SessionAffinity | undefined;
  const affinityFor = (env: Env) =>
    (affinity ??= new SessionAffinity({
      resolve: async (d, session, proposal) => {
        const stub = sessionRouterFor(env, d.name, session, d.sessionAffinity.shards);
        return (await stub.resolve(session, proposal, d.sessionAffinity.ttlSeconds * 1000)).replica;
      },
      rebind: async (d, session, from, to) => {
        const stub = sessionRouterFor(env, d.name, session, d.sessionAffinity.shards);
        return (await stub.rebind(session, from, to, d.sessionAffinity.ttlSeconds * 1000)).replica;
      },
    }));

  const app = new Hono<{ Bindings: Env }>();

  app.get("/-/healthz", async (c) => {
    const cacheNow = cacheFor(c.env);
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

  app.get("/-/deployments/:name", async (c) => {
    if (!bearerMatches(c.req.header("authorization"), c.env.SWITCHYARD_ADMIN_SECRET)) {
      return errorResponse("unauthorized", "admin secret missing or wrong");
    }
    const name = c.req.param("name");
    if (!byName.has(name)) return errorResponse("route_not_found", `no deployment named "${name}"`);
    const stub = routerFor(c.env, name);
    const d = byName.get(name)!;
    const shards = Array.from({ length: d.sessionAffinity.enabled ? d.sessionAffinity.shards : 0 }, (_, i) =>
      c.env.SESSIONS.get(c.env.SESSIONS.idFromName(sessionShardName(name, i))).stats(),
    );
    const [snapshot, stats, sessionShards] = await Promise.all([stub.snapshot(), stub.stats(), Promise.all(shards)]);
    const sessions = { bindings: 0, resolves: 0, rebinds: 0, writes: 0 };
    for (const s of sessionShards) for (const k of Object.keys(sessions) as (keyof typeof sessions)[]) sessions[k] += s[k];
    const a = affinityFor(c.env);
    return c.json({
      deployment: byName.get(name),
      snapshot,
      router: stats,
      sessions,
      isolate: { snapshotRefreshes: cacheFor(c.env).refreshes, sessionStoreCalls: a.storeCalls, sessionBindingsCached: a.cached },
    });
  });

  for (const path of ["/-/healthz", "/-/routes", "/-/deployments/:name"]) {
    app.all(path, (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}`, { headers: { allow: "GET" } }));
  }
  app.all("/-/*", (c) => errorResponse("route_not_found", `no system route ${c.req.method} ${c.req.path}`));

  app.all("*", async (c) => {
    const requestId = requestIdFor(c.req.header("x-request-id") ?? null);
    const routed = routes.match(c.req.path);
    if (!routed) return errorResponse("route_not_found", `no deployment serves ${c.req.path}`, { requestId });
    const deployment = routed.target;
    const keys = requestKeys(c.req.raw.headers, deployment);
    if (!keys.ok) return errorResponse(keys.code, keys.message, { requestId });
    const background = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
    const view = await cacheFor(c.env).view(deployment.name, background);
    const { model, session } = keys.keys;
    return dispatch(c.req.raw, {
      deployment,
      routePrefix: routed.prefix,
      view,
      requestId,
      background,
      ...(model !== undefined ? { model } : {}),
      ...(session !== undefined ? { session: { id: session, affinity: affinityFor(c.env) } } : {}),
    });
  });

  app.onError((err, c) => {
    console.error(JSON.stringify({ msg: "unhandled error", path: c.req.path, error: String(err) }));
    return errorResponse("internal_error", "internal error", { requestId: c.req.header("x-request-id") });
  });

  return { app, cacheFor, affinityFor };
}
