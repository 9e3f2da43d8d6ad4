/**
 * Reference replica CLI: serves one deployment's backend on a port, registers
 * with the edge, reports load, and drains on SIGTERM/SIGINT.
 *
 *   node dist/replica.mjs --deployment hello --backend text --text hi \
 *     --edge http://127.0.0.1:8787 [--port 0] [--host 127.0.0.1] [--id hello-1] \
 *     [--max-ongoing 5] [--advertise-url http://host:port]
 * The replica secret comes from SWITCHYARD_REPLICA_SECRET.
 */
import { parseArgs } from "node:util";
import { AdmissionControl } from "./admission.ts";
import { EdgeClient } from "./edge-client.ts";
import { echoHandler, modelHandler, textHandler, type RequestHandler } from "./handlers.ts";
import { ReplicaServer } from "./server.ts";

const USAGE = `usage: replica --deployment NAME --backend text|echo|onnx [--text T] [--model ID]
               --edge URL [--port N] [--host H] [--id ID] [--max-ongoing N]
               [--advertise-url URL] [--drain-timeout-ms N] [--standalone]
--standalone: serve without registering (a direct baseline for benchmarks)
env: SWITCHYARD_REPLICA_SECRET (required)`;

function fail(msg: string): never {
  process.stderr.write(`${msg}\n${USAGE}\n`);
  process.exit(2);
}

async function main(): Promise<void> {
  let args;
  try {
    args = parseArgs({
      options: {
        deployment: { type: "string" },
        backend: { type: "string" },
        text: { type: "string", default: "hi" },
        model: { type: "string" },
        edge: { type: "string" },
        port: { type: "string", default: "0" },
        host: { type: "string", default: "127.0.0.1" },
        id: { type: "string" },
        "max-ongoing": { type: "string", default: "5" },
        "advertise-url": { type: "string" },
        "drain-timeout-ms": { type: "string", default: "30000" },
        standalone: { type: "boolean", default: false },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
    }).values;
  } catch (err) {
    fail(String((err as Error).message));
  }
  if (args.help) {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  const secret = process.env.SWITCHYARD_REPLICA_SECRET;
  if (!args.deployment || !args.backend) fail("--deployment and --backend are required");
  if (!args.standalone && !args.edge) fail("--edge is required (or --standalone)");
  if (!args.standalone && !secret) fail("SWITCHYARD_REPLICA_SECRET is not set");
  const maxOngoing = Number(args["max-ongoing"]);
  if (!Number.isInteger(maxOngoing) || maxOngoing < 1) fail("--max-ongoing must be a positive integer");
  const drainTimeoutMs = Number(args["drain-timeout-ms"]);

  let handler: RequestHandler;
  let models: string[] = [];
  switch (args.backend) {
    case "text":
      handler = textHandler(args.text ?? "hi");
      break;
    case "echo":
      handler = echoHandler();
      break;
    case "onnx": {
      if (!args.model) fail("--backend onnx needs --model");
      const { loadModelById } = await import("./models/index.ts");
      handler = modelHandler(await loadModelById(args.model));
      models = [args.model];
      break;
    }
    default:
      fail(`unknown backend "${args.backend}"`);
  }

  const replicaId = args.id ?? `${args.deployment}-${process.pid}`;
  const log = (msg: string) => process.stderr.write(`[${replicaId}] ${msg}\n`);
  const admission = new AdmissionControl(maxOngoing);
  admission.setModels(models);
  const server = new ReplicaServer({ replicaId, admission, handler, log });
  const address = await server.listen(Number(args.port), args.host ?? "127.0.0.1");
  const advertiseUrl = args["advertise-url"] ?? `http://${address.address}:${address.port}`;
  if (args.standalone) {
    process.stdout.write(`${JSON.stringify({ event: "listening", replica_id: replicaId, url: advertiseUrl, deployment: args.deployment })}\n`);
    const stop = () => void server.close().then(() => process.exit(0));
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
    return;
  }
  const edge = new EdgeClient({ edgeUrl: args.edge!, secret: secret!, deployment: args.deployment, replicaId, advertiseUrl, admission, log });

  let draining = false;
  const drain = async (signal: string) => {
    if (draining) return;
    draining = true;
    log(`${signal}: draining (${admission.ongoing} in flight)`);
    // 1. Announce draining so proxies stop choosing us; new requests are rejected (and retried elsewhere).
    admission.drain();
    await edge.report().catch(() => undefined);
    // 2. Finish in-flight requests, bounded by the drain timeout.
    await Promise.race([admission.idle(), new Promise((r) => setTimeout(r, drainTimeoutMs))]);
    // 3. Leave the routing table, then stop listening.
    await edge.deregister().catch((err: unknown) => log(`deregister failed: ${String(err)}`));
    await server.close();
    log("drained, exiting");
    process.exit(0);
  };
  process.on("SIGTERM", () => void drain("SIGTERM"));
  process.on("SIGINT", () => void drain("SIGINT"));

  // Printed for launchers (one JSON line on stdout).
  process.stdout.write(`${JSON.stringify({ event: "listening", replica_id: replicaId, url: advertiseUrl, deployment: args.deployment })}\n`);
  await edge.start();
  process.stdout.write(`${JSON.stringify({ event: "registered", replica_id: replicaId })}\n`);
}

main().catch((err: unknown) => {
  process.stderr.write(`replica failed: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  process.exit(1);
});
