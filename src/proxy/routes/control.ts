/**
 * Control plane, replica → edge: register, report, deregister. Each message is
 * signed with its deployment's replica key (src/protocol/signing.ts); the edge
 * checks the signature and timestamp, validates the message, checks a
 * registered URL against the replica URL policy, and hands it with its nonce
 * to the deployment's routing Durable Object, which refuses replays.
 *
 * Order of the checks (docs/protocol.md §1):
 *   1. Content-Length at most 64 KiB                      413 payload_too_large
 *      and the body read at the upload pace               408 request_timeout
 *   2. the three signature headers present                401 unsigned
 *   3. body is JSON naming a deployment this Worker serves 400 invalid_message / 404 route_not_found
 *      (the key is per deployment, so the name is found before the signature can
 *      be checked, by one scan of the raw bytes that builds nothing and refuses
 *      nesting past 16; deployment names are public anyway, /-/routes lists them)
 *   4. headers well-formed and the signature right        401 bad_signature
 *   5. timestamp within ±30 s of the edge's clock         401 stale_timestamp
 *   6. schema (zod, strict)                               400 invalid_message
 *   7. register only: replica URL policy                  400 invalid_message
 *   8. nonce above the replica's last (routing object)    401 replayed
 * Only signed, fresh, authentic messages see schema details (6, 7). Every 401 is
 * counted per deployment and reason in isolate memory (`controlRejections()`).
 */
import { Hono, type Context } from "hono";
import type { z } from "zod";
import type { Deployment } from "../../config/deployment.ts";
import type { Env } from "../../env.ts";
import { routerFor } from "../../state/deployment-router.ts";
import { shardOfReplica } from "../../state/routing-plane.ts";
import { checkReplicaUrl } from "../../policy/replica-url.ts";
import { requestIdFor } from "../serve/request.ts";
import { scanTopLevel } from "../../protocol/json-top-level.ts";
import { DEFAULT_UPLOAD_PACE, bodyRefusal, clientOf, readBoundedBody } from "../serve/body.ts";
import { CONTROL_MESSAGES, CONTROL_REJECT_REASONS, MAX_CONTROL_BODY_BYTES, SIGNATURE_WINDOW_MS, SystemPath, errorResponse, readSignatureHeaders, replicaKeyFor, timestampFresh, verifyControl, type ControlRejectReason, type DeregisterAck, type NodeReportAck, type ReportAck } from "../../protocol/index.ts";


/** Rejections of messages naming no deployment this Worker serves are counted under this name (never a valid deployment name). */
export const UNKNOWN_DEPLOYMENT = "_unknown";

const rejections = new Map<string, Record<ControlRejectReason, number>>();

/**
 * Control messages refused with 401 by this isolate since it started, per
 * deployment and reason. Isolate memory: each isolate counts its own (replays
 * are also counted across isolates by the routing object, `stats().replays`).
 */
export function controlRejections(): Record<string, Record<ControlRejectReason, number>> {
  const out: Record<string, Record<ControlRejectReason, number>> = {};
  for (const [name, counts] of rejections) out[name] = { ...counts };
  return out;
}

function reject(deployment: string, reason: ControlRejectReason, message: string): Response {
  let counts = rejections.get(deployment);
  if (!counts) {
    counts = Object.fromEntries(CONTROL_REJECT_REASONS.map((r) => [r, 0])) as Record<ControlRejectReason, number>;
    rejections.set(deployment, counts);
  }
  counts[reason]++;
  return errorResponse("unauthorized", message, { details: { reason } });
}

type Read<T> = { error: Response } | { msg: T; nonce: number; deployment: Deployment };

/** Control messages are shallow (a node report nests four deep); deeper bodies are refused at the first byte past this. */
const CONTROL_MAX_DEPTH = 16;
const DEPLOYMENT_FIELD = new Set(["deployment"]);

async function readMessage<S extends z.ZodType>(
  c: Context<{ Bindings: Env }>,
  schema: S,
  known: ReadonlyMap<string, Deployment>,
  maxBytes = MAX_CONTROL_BODY_BYTES,
): Promise<Read<z.output<S>>> {
  const length = Number(c.req.header("content-length") ?? "NaN");
  if (!(length <= maxBytes)) {
    return { error: errorResponse("payload_too_large", `control messages need a Content-Length of at most ${maxBytes} bytes`) };
  }
  // Read at the upload pace and charged to the sender's hold: nothing has authenticated it yet.
  const read = await readBoundedBody(c.req.raw, maxBytes, DEFAULT_UPLOAD_PACE, clientOf(c.req.raw.headers));
  if (typeof read === "string") return { error: bodyRefusal(read, maxBytes, requestIdFor(null)) };
  const body = new Uint8Array(read);
  // The key is per deployment, so its name is needed before the signature can be checked: one
  // linear scan of the raw bytes finds it (and checks the JSON) without building anything.
  // Nothing is parsed into objects before the signature and timestamp hold.
  const scan = scanTopLevel(body, DEPLOYMENT_FIELD, { maxDepth: CONTROL_MAX_DEPTH, maxStringBytes: 256 });
  const field = scan.ok ? scan.fields.get("deployment") : undefined;
  const named = field?.type === "string" ? field.value : undefined;
  const deployment = named !== undefined ? known.get(named) : undefined;

  const sig = readSignatureHeaders(c.req.raw.headers);
  if (sig.kind === "unsigned") {
    return { error: reject(deployment?.name ?? UNKNOWN_DEPLOYMENT, "unsigned", "control messages must be signed (x-switchyard-timestamp, x-switchyard-nonce, x-switchyard-signature)") };
  }
  if (!scan.ok) return { error: errorResponse("invalid_message", scan.reason === "too_deep" ? `body nests deeper than ${CONTROL_MAX_DEPTH}` : "body is not valid JSON") };
  if (named === undefined) return { error: errorResponse("invalid_message", "control message names no deployment") };
  if (!deployment) return { error: errorResponse("route_not_found", `no deployment named "${named}"`) };
  const name = deployment.name;
  if (sig.kind === "malformed") return { error: reject(name, "bad_signature", sig.problem) };

  const master = c.env.SWITCHYARD_REPLICA_SECRET;
  if (!master) {
    console.error(JSON.stringify({ msg: "SWITCHYARD_REPLICA_SECRET is not set: every control message is refused" }));
    return { error: errorResponse("internal_error", "the edge has no replica secret configured") };
  }
  const key = await replicaKeyFor(master, name);
  const path = new URL(c.req.url).pathname;
  if (!(await verifyControl(key, { timestamp: sig.timestamp, nonce: sig.nonce, path, body }, sig.signature))) {
    return { error: reject(name, "bad_signature", `signature does not match (is the replica using "${name}"'s key?)`) };
  }
  const now = Date.now();
  if (!timestampFresh(sig.timestamp, now)) {
    return { error: reject(name, "stale_timestamp", `timestamp is ${now - sig.timestamp} ms off the edge's clock (at most ${SIGNATURE_WINDOW_MS} ms)`) };
  }
  // Signed, fresh and checked by the scan: now it is parsed.
  const parsed = schema.safeParse(JSON.parse(new TextDecoder().decode(body)));
  if (!parsed.success) {
    return { error: errorResponse("invalid_message", "control message failed validation", { details: parsed.error.issues }) };
  }
  return { msg: parsed.data, nonce: sig.nonce, deployment };
}

const replayed = (deployment: string) => reject(deployment, "replayed", "nonce is not above the last one accepted from this replica");

/** Refusals of a replica URL that local mode allows (checkReplicaUrl's production rules). */
const PRODUCTION_ONLY = new Set(["not_https", "port", "loopback", "raw_ip", "single_label"]);

export function controlRoutes(deployments: ReadonlyMap<string, Deployment>): Hono<{ Bindings: Env }> {
  const app = new Hono<{ Bindings: Env }>();

  // Mounted under /-/replicas (app.ts): the paths, schemas and bounds of the protocol's CONTROL_MESSAGES.
  const { RegisterMessage, ReportMessage, DeregisterMessage, NodeReportMessage } = CONTROL_MESSAGES;
  const route = (m: { path: string }) => m.path.slice(SystemPath.replicas.length);
  const read = <S extends z.ZodType>(c: Context<{ Bindings: Env }>, m: { schema: S; maxBytes: number }) => readMessage(c, m.schema, deployments, m.maxBytes);
  app.post(route(RegisterMessage), async (c) => {
    const r = await read(c, RegisterMessage);
    if ("error" in r) return r.error;
    const mode = c.env.SWITCHYARD_MODE === "local" ? "local" : "production";
    const url = checkReplicaUrl(r.msg.url, r.deployment.replicaOrigins, mode);
    if (!url.ok) {
      // What a newcomer meets first with a loopback replica and an edge of their own (wrangler dev): say which switch it is.
      const hint = mode === "production" && PRODUCTION_ONLY.has(url.reason) ? "; for replicas on this machine or a private network, run the edge with SWITCHYARD_MODE=local (for wrangler dev: a line in .dev.vars)" : "";
      return errorResponse("invalid_message", `replica url refused: ${url.message}${hint}`, { details: { reason: url.reason } });
    }
    const d = r.deployment;
    const shard = shardOfReplica(d, r.msg.replica_id, r.msg.node);
    const ack = await routerFor(c.env, d.name, shard).register(r.msg, r.nonce, { index: shard, count: d.routing.shards });
    if (ack === "replayed") return replayed(r.deployment.name);
    return c.json(ack);
  });

  app.post(route(ReportMessage), async (c) => {
    const r = await read(c, ReportMessage);
    if ("error" in r) return r.error;
    const shard = shardOfReplica(r.deployment, r.msg.replica_id, r.msg.node);
    const outcome = await routerFor(c.env, r.deployment.name, shard).report(r.msg, r.nonce);
    if (outcome === "replayed") return replayed(r.deployment.name);
    if (outcome === "unknown_replica") return errorResponse("unknown_replica", "register before reporting");
    // "drain": an operator asked this replica to drain (admin API); the report itself was accepted.
    const ack: ReportAck = outcome === "drain" ? { ok: true, outcome: "ok", drain: true } : { ok: true, outcome };
    return c.json(ack);
  });

  app.post(route(DeregisterMessage), async (c) => {
    const r = await read(c, DeregisterMessage);
    if ("error" in r) return r.error;
    const shard = shardOfReplica(r.deployment, r.msg.replica_id, r.msg.node);
    const removed = await routerFor(c.env, r.deployment.name, shard).deregister(r.msg, r.nonce);
    if (removed === "replayed") return replayed(r.deployment.name);
    const ack: DeregisterAck = { ok: true, removed };
    return c.json(ack);
  });

  // Node batching: every entry is a replica of `node`, so all go to the node's shard in one call.
  app.post(route(NodeReportMessage), async (c) => {
    const r = await read(c, NodeReportMessage);
    if ("error" in r) return r.error;
    const shard = shardOfReplica(r.deployment, r.msg.node, r.msg.node);
    const outcomes = await routerFor(c.env, r.deployment.name, shard).reportNode(r.msg, r.nonce);
    if (outcomes === "replayed") return replayed(r.deployment.name);
    const ack: NodeReportAck = { ok: true, outcomes };
    return c.json(ack);
  });

  return app;
}
