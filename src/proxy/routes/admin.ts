/**
 * Admin API, behind the admin secret (SWITCHYARD_ADMIN_SECRET, `wrangler secret
 * put`): a deployment's routing state, its client API keys (create, list,
 * revoke), and restarting its routing object. Off entirely when the secret is
 * unset.
 */
import { Hono, type MiddlewareHandler } from "hono";
import { z } from "zod";
import type { Deployment } from "../../config/deployment.ts";
import type { Env } from "../../env.ts";
import { keysFor } from "../../state/access-keys.ts";
import { relayFor } from "../../state/snapshot-relay.ts";
import { sessionStatsFor } from "../../state/session-router.ts";
import { autoscaleStatus, mergedSnapshot, planeStats, requestDrain, restartShards } from "../../state/routing-plane.ts";
import { errorResponse, type RoutingSnapshot } from "../../protocol/index.ts";
import { adminRefusal } from "../serve/access.ts";
import { controlRejections } from "./control.ts";
import type { IsolateState } from "../serve/isolate-state.ts";

/** A key's priority class (docs/admission.md): the default and highest priority of its requests. */
const KeyPriorityInput = z
  .object({ default: z.number().int().min(-1000).max(1000), max: z.number().int().min(-1000).max(1000) })
  .strict()
  .refine((p) => p.default <= p.max, { message: "default is above max", path: ["default"] });
const NewKey = z.object({ name: z.string().min(1).max(128), priority: KeyPriorityInput.optional() }).strict();
const MAX_ADMIN_BODY = 4096;

type AdminEnv = { Bindings: Env; Variables: { deployment: Deployment } };

export function adminRoutes(byName: ReadonlyMap<string, Deployment>, stateFor: (env: Env) => IsolateState): Hono<AdminEnv> {
  const app = new Hono<AdminEnv>();

  const guard: MiddlewareHandler<AdminEnv> = async (c, next) => {
    const refused = adminRefusal(c.env, c.req.header("authorization"));
    if (refused) return refused;
    const name = c.req.param("name") ?? "";
    const d = byName.get(name);
    if (!d) return errorResponse("route_not_found", `no deployment named "${name}"`);
    c.set("deployment", d);
    await next();
  };
  // "/:name/*" does not match "/:name" itself.
  app.use("/:name", guard);
  app.use("/:name/*", guard);

  app.get("/:name", async (c) => {
    const d = c.get("deployment");
    const [snapshot, stats, sessions] = await Promise.all([
      mergedSnapshot(c.env, d.name, d.routing.shards),
      planeStats(c.env, d),
      sessionStatsFor(c.env, d.name, d.sessionAffinity.enabled ? d.sessionAffinity.shards : 0),
    ]);
    const state = stateFor(c.env);
    const relay = d.routing.relay ? await relayFor(c.env, d.name, state.location).stats() : null;
    return c.json({
      deployment: d,
      snapshot: withoutSecrets(snapshot),
      router: stats,
      /** The relay of this isolate's location (null without relays). */
      relay,
      sessions,
      isolate: {
        /** The location (cf.colo) this isolate serves from: its relays are that location's. */
        location: state.location,
        snapshotRefreshes: state.snapshots.refreshes,
        sessionStoreCalls: state.affinity.storeCalls,
        sessionBindingsCached: state.affinity.cached,
        keySetRefreshes: state.apiKeys.refreshes,
        rateLimitSyncs: state.rateLimits.syncs,
        peerDispatchesLearned: state.peerDispatchesLearned,
        pending: state.pending.get(d.name) ?? 0,
        /** Requests held by admission here now (src/proxy/serve/admit.ts). */
        held: state.gateFor(d.name).held,
        controlRejections: controlRejections()[d.name] ?? {},
      },
    });
  });

  /**
   * This isolate's routing view of the deployment, as it routes now: no Durable
   * Object call (the bench and tests watch how fast changes reach each isolate).
   */
  app.get("/:name/view", async (c) => {
    const d = c.get("deployment");
    const state = stateFor(c.env);
    const view = await state.snapshots.view(d.name, (p) => c.executionCtx.waitUntil(p));
    const now = Date.now();
    return c.json({
      deployment: d.name,
      location: state.location,
      ...(state.coordinates && { coordinates: state.coordinates }),
      at: now,
      total: view.total,
      snapshotRefreshes: state.snapshots.refreshes,
      replicas: view.describe(now),
    });
  });

  app.get("/:name/keys", async (c) => c.json({ keys: await keysFor(c.env, c.get("deployment").name).list() }));

  app.post("/:name/keys", async (c) => {
    const length = Number(c.req.header("content-length") ?? "NaN");
    if (!(length <= MAX_ADMIN_BODY)) return errorResponse("payload_too_large", `send a JSON body with a Content-Length of at most ${MAX_ADMIN_BODY} bytes`);
    let raw: unknown;
    try {
      raw = await c.req.json();
    } catch {
      return errorResponse("bad_request", 'body is not valid JSON; send {"name": "…"}');
    }
    const parsed = NewKey.safeParse(raw);
    if (!parsed.success) {
      return errorResponse("bad_request", 'send {"name": "…"} (1-128 characters), optionally "priority": {"default": n, "max": m} (integers, default ≤ max)', { details: parsed.error.issues });
    }
    const d = c.get("deployment");
    const created = await keysFor(c.env, d.name).create(parsed.data.name, parsed.data.priority);
    await stateFor(c.env).keysChanged(d.name);
    return c.json(created, 201);
  });

  app.delete("/:name/keys/:id", async (c) => {
    const d = c.get("deployment");
    const revoked = await keysFor(c.env, d.name).revoke(c.req.param("id"));
    if (!revoked) return errorResponse("route_not_found", `no active key "${c.req.param("id")}" in "${d.name}"`);
    await stateFor(c.env).keysChanged(d.name);
    return c.json({ ok: true, revoked: c.req.param("id") });
  });

  /** The autoscaling signal (docs: README "Autoscaling signal"). */
  app.get("/:name/autoscale", async (c) => {
    const d = c.get("deployment");
    // A routing object that never saw a replica does not know its name yet.
    return c.json({ ...(await autoscaleStatus(c.env, d)), deployment: d.name });
  });

  /** Asks a replica to drain: it learns it from its next report's answer (≤ 1 s), drains and leaves. */
  app.post("/:name/replicas/:id/drain", async (c) => {
    const d = c.get("deployment");
    const id = c.req.param("id");
    if (!(await requestDrain(c.env, d, id))) return errorResponse("route_not_found", `no replica "${id}" in "${d.name}"`);
    return c.json({ ok: true, deployment: d.name, replica: id, draining: true });
  });

  /** Restarts the deployment's routing objects, every shard (operators, and the restart fault test). */
  app.post("/:name/router/restart", async (c) => {
    const d = c.get("deployment");
    await restartShards(c.env, d);
    return c.json({ ok: true, restarted: d.name });
  });

  const allow: Record<string, string> = {
    "/:name": "GET",
    "/:name/view": "GET",
    "/:name/keys": "GET, POST",
    "/:name/keys/:id": "DELETE",
    "/:name/router/restart": "POST",
    "/:name/autoscale": "GET",
    "/:name/replicas/:id/drain": "POST",
  };
  for (const [path, methods] of Object.entries(allow)) {
    app.all(path, (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}`, { headers: { allow: methods } }));
  }
  return app;
}

/** The snapshot as operators see it: an engine key is shown as set, never as itself. */
function withoutSecrets(snapshot: RoutingSnapshot): RoutingSnapshot & { replicas: { engine_key?: "set" }[] } {
  return { ...snapshot, replicas: snapshot.replicas.map(({ engineKey, ...r }) => (engineKey === undefined ? r : { ...r, engine_key: "set" as const })) };
}
