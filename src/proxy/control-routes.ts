/**
 * Control plane, replica → edge: register, report, deregister. Each message is
 * authenticated with the replica secret, validated, and handed to the
 * deployment's routing Durable Object over RPC.
 */
import { Hono, type Context } from "hono";
import type { z } from "zod";
import type { Deployment } from "../config/deployment.ts";
import { routerFor as router, type Env } from "../env.ts";
import { DeregisterMessage, RegisterMessage, ReportMessage, errorResponse } from "../protocol/index.ts";
import { bearerMatches } from "./auth.ts";

/** Control messages are small; anything larger is not one. */
const MAX_CONTROL_BODY = 64 * 1024;

async function readMessage<S extends z.ZodType>(c: Context<{ Bindings: Env }>, schema: S, known: ReadonlyMap<string, Deployment>) {
  if (!bearerMatches(c.req.header("authorization"), c.env.SWITCHYARD_REPLICA_SECRET)) {
    return { error: errorResponse("unauthorized", "replica secret missing or wrong") };
  }
  const length = Number(c.req.header("content-length") ?? "NaN");
  if (!(length <= MAX_CONTROL_BODY)) {
    return { error: errorResponse("payload_too_large", `control messages need a Content-Length of at most ${MAX_CONTROL_BODY} bytes`) };
  }
  let raw: unknown;
  try {
    raw = await c.req.json();
  } catch {
    return { error: errorResponse("invalid_message", "body is not valid JSON") };
  }
  const parsed = schema.safeParse(raw);
  if (!parsed.success) {
    return { error: errorResponse("invalid_message", "control message failed validation", { details: parsed.error.issues }) };
  }
  const msg = parsed.data as z.output<S> & { deployment: string };
  if (!known.has(msg.deployment)) return { error: errorResponse("route_not_found", `no deployment named "${msg.deployment}"`) };
  return { msg };
}

export function controlRoutes(deployments: ReadonlyMap<string, Deployment>): Hono<{ Bindings: Env }> {
  const app = new Hono<{ Bindings: Env }>();

  app.post("/register", async (c) => {
    const r = await readMessage(c, RegisterMessage, deployments);
    if (r.error) return r.error;
    return c.json(await router(c.env, r.msg.deployment).register(r.msg));
  });

  app.post("/report", async (c) => {
    const r = await readMessage(c, ReportMessage, deployments);
    if (r.error) return r.error;
    const outcome = await router(c.env, r.msg.deployment).report(r.msg);
    if (outcome === "unknown_replica") return errorResponse("unknown_replica", "register before reporting");
    return c.json({ ok: true, outcome });
  });

  app.post("/deregister", async (c) => {
    const r = await readMessage(c, DeregisterMessage, deployments);
    if (r.error) return r.error;
    return c.json({ ok: true, removed: await router(c.env, r.msg.deployment).deregister(r.msg) });
  });

  return app;
}
