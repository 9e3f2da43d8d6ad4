/**
 * Reference replica CLI: serves one deployment's backend on a port, registers
 * with the edge, reports load, and drains on SIGTERM/SIGINT.
 *
 *   node dist/replica.mjs --deployment hello --backend text --text hi \
 *     --edge http://127.0.0.1:8787 [--port 0] [--host 127.0.0.1] [--id hello-1] \
 *     [--max-ongoing 5] [--max-queued 0] [--advertise-url http://host:port] [--service-ms 0]
 *
 * ONNX models: `--backend onnx --model ID` serves one model (loaded before registering);
 * `--backend onnx --models a,b,c --max-models-per-replica N [--default-model ID]`
 * multiplexes: models load on demand into an LRU of N (nothing preloaded), and a
 * request names its model with x-switchyard-model or serve_multiplexed_model_id.
 * Control messages are signed with the deployment's replica key, from
 * SWITCHYARD_REPLICA_KEY (64 hex digits). Operators derive it from the edge's master
 * secret with `--print-key --deployment NAME` (master read from SWITCHYARD_REPLICA_SECRET).
 *
 * Language model: `--backend llm --model tiny-lm [--kv-blocks N] [--prefill-ms N] [--prefill-token-us N]
 * [--decode-ms N] [--kv-events-endpoint tcp://H:P [--kv-events-replay-endpoint tcp://H:P] [--kv-events-topic T]]`
 * serves OpenAI's /v1 routes and vLLM's /metrics, with vLLM-style prefix caching and,
 * optionally, vLLM's KV events over ZMQ (src/replica/llm/, docs/tiny-lm.md). `--model qwen3`
 * (or another registered model family) serves the engine stand-in instead, a benchmark
 * instrument (docs/prefix-routing.md).
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { DEPLOYMENT_NAME, REPLICA_KEY_PATTERN, deriveReplicaKey } from "../protocol/index.ts";
import { AdmissionControl } from "./admission.ts";
import { DispatchGuard } from "./dispatch-guard.ts";
import { EdgeClient, keyRefusedMessage } from "./edge-client.ts";
import { replicaBackend } from "./backends/index.ts";
import { ReplicaServer } from "./server.ts";

const USAGE = `usage: replica --deployment NAME --backend text|echo|onnx|llm|proxy [--text T] [--service-ms N]
               [--model ID | --models ID,ID,... --max-models-per-replica N [--default-model ID]]
               --edge URL [--port N] [--host H] [--id ID] [--max-ongoing N] [--max-queued N]
               [--advertise-url URL] [--drain-timeout-ms N] [--standalone [--api-key-file PATH]]
               [--fault hang|lie]
--service-ms N: benchmark knob for --backend text: each admitted request waits N ms
                 (a timer, no CPU) before the answer, simulating a model's service time;
                 default 0
--backend onnx --model ID: serve one model, loaded at start
--backend onnx --models ...: multiplex these models, loaded on demand, at most N at once (LRU);
                 requests name one with x-switchyard-model or serve_multiplexed_model_id,
                 else --default-model
--max-queued N: requests that may wait (FIFO) for one of the --max-ongoing slots, like an
                 engine's waiting queue; beyond them the replica rejects. Default 0: reject
                 at --max-ongoing
--backend llm --model tiny-lm: a generative language model (docs/tiny-lm.md) behind OpenAI's
                 POST /v1/completions, /v1/chat/completions (streaming or not), /v1/embeddings,
                 GET /v1/models, and vLLM's GET /metrics and /health
--backend llm --model qwen3|llama3|deepseek-v3|mistral-nemo: the engine stand-in, a benchmark
                 instrument (docs/prefix-routing.md): the family's real tokenizer and chat
                 template, the same cache, pacing, KV events and /metrics, scripted text
--backend proxy --upstream URL [--upstream-metrics URL]: any HTTP app behind the replica (the
                 agent's proxy mode, "replica agent --proxy", starts the app too): each admitted
                 request goes on to the app, its answer streams back; with --upstream-metrics,
                 the app's own queue (Triton's nv_inference_pending_request_count) counts in the
                 load reports where it holds more than this replica sent
--kv-blocks N: (llm) KV-cache blocks of 16 tokens (vLLM's num_gpu_blocks); requests that do not
                 fit wait; full blocks stay cached for later prompts with the same prefix
                 (vLLM's prefix caching) until evicted, least recently used first; default 512
--prefill-token-us N: (llm) benchmark knob: prefill takes N microseconds per prompt token not
                 found in the prefix cache, one prefill at a time per replica (FIFO, as a GPU's
                 compute; a timer, no CPU), while running requests keep decoding; default 0
--prefill-ms N, --decode-ms N: (llm) benchmark knobs emulating a GPU engine's speed: wait N ms
                 (a timer, no CPU) before each request's first token, a fixed part of each
                 request's own (not queued behind other prefills) / between tokens; the
                 model still runs for every token; default 0
--kv-events-endpoint tcp://H:P: (llm) publish vLLM's KV events (BlockStored, BlockRemoved,
                 AllBlocksCleared) on a ZMQ PUB socket bound there, as vLLM's
                 --kv-events-config publisher "zmq" does (port 0: any; the bound address is
                 printed as {"event":"kv_events",...} on stdout)
--kv-events-replay-endpoint tcp://H:P: (llm) with it, a ZMQ ROUTER socket there replays the last
                 10,000 batches from a sequence number, as vLLM's replay_endpoint
--kv-events-topic T: (llm) the topic frame of each message; default "" (vLLM's default)
--no-cache-summary: (llm) send no prefix-cache summary in load reports, as an engine behind an
                 agent without KV events (benchmarks: the edge then knows only its dispatches)
--enable-prompt-tokens-details: (llm) each answer's usage says how many prompt tokens the
                 prefix cache held (prompt_tokens_details.cached_tokens), as vLLM's flag of that name
--standalone: serve without registering (a direct baseline for benchmarks, or an engine behind
                 "replica agent"). A registered replica serves only dispatches signed by its
                 deployment's edge (docs/protocol.md §2); a standalone one checks no signature
--accept-unsigned: benchmarks only: also serve requests that carry no edge signature (the
                 direct and bare-Worker arms); signed ones are still checked
--api-key-file PATH: (standalone) serve only requests with Authorization: Bearer <a key in
                 PATH, one per line>, as vLLM's --api-key does; SIGHUP reloads the file
--fault hang|lie: fault injection for testing a fleet: "hang" admits requests and never
                 answers; "lie" claims to be idle while refusing every request
env: SWITCHYARD_REPLICA_KEY (required unless --standalone): the deployment's replica key
       replica --print-key --deployment NAME
prints the deployment's replica key, derived from the edge's master secret in
SWITCHYARD_REPLICA_SECRET (run it where that secret is, hand replicas only the key)`;

function fail(msg: string): never {
  process.stderr.write(`${msg}\n${USAGE}\n`);
  process.exit(2);
}

/** What a caller that wraps the replica (the agent's proxy mode) does around it. */
export interface ReplicaHooks {
  /** Runs once the replica has drained and deregistered (or a standalone one closed), before the process exits. */
  beforeExit?: () => Promise<void>;
  /** Whether a drain has begun (the wrapper then expects its app to stop). */
  draining?: { value: boolean };
  /** Set once the replica has registered: stops taking requests and deregisters at once (the wrapper's app died). */
  leave?: () => Promise<void>;
}

/** The reference replica process (src/replica-entry.ts runs it): serves until SIGTERM drains it. */
export async function replicaMain(argv: string[] = process.argv.slice(2), hooks: ReplicaHooks = {}): Promise<void> {
  let args;
  try {
    args = parseArgs({
      args: argv,
      options: {
        deployment: { type: "string" },
        backend: { type: "string" },
        text: { type: "string", default: "hi" },
        "service-ms": { type: "string", default: "0" },
        model: { type: "string" },
        models: { type: "string" },
        "max-models-per-replica": { type: "string" },
        "default-model": { type: "string" },
        "kv-blocks": { type: "string" },
        "prefill-ms": { type: "string" },
        "prefill-token-us": { type: "string" },
        "kv-events-endpoint": { type: "string" },
        "kv-events-replay-endpoint": { type: "string" },
        "kv-events-topic": { type: "string" },
        "no-cache-summary": { type: "boolean", default: false },
        "enable-prompt-tokens-details": { type: "boolean", default: false },
        "decode-ms": { type: "string" },
        upstream: { type: "string" },
        "upstream-metrics": { type: "string" },
        edge: { type: "string" },
        port: { type: "string", default: "0" },
        host: { type: "string", default: "127.0.0.1" },
        id: { type: "string" },
        "max-ongoing": { type: "string", default: "5" },
        "max-queued": { type: "string", default: "0" },
        "advertise-url": { type: "string" },
        "drain-timeout-ms": { type: "string", default: "30000" },
        standalone: { type: "boolean", default: false },
        "api-key-file": { type: "string" },
        "accept-unsigned": { type: "boolean", default: false },
        "print-key": { type: "boolean", default: false },
        fault: { type: "string" },
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
  if (args["print-key"]) {
    if (!args.deployment) fail("--print-key needs --deployment NAME");
    if (!DEPLOYMENT_NAME.test(args.deployment)) fail(`--deployment "${args.deployment}" is not a deployment name (lowercase letters, digits and '-')`);
    const master = process.env.SWITCHYARD_REPLICA_SECRET;
    if (!master) fail("--print-key reads the master secret from SWITCHYARD_REPLICA_SECRET, which is not set");
    process.stdout.write(`${await deriveReplicaKey(master, args.deployment)}\n`);
    return;
  }
  const key = process.env.SWITCHYARD_REPLICA_KEY;
  if (!args.deployment || !args.backend) fail("--deployment and --backend are required");
  if (!args.standalone && !args.edge) fail("--edge is required (or --standalone)");
  if (!args.standalone && !key) fail("SWITCHYARD_REPLICA_KEY is not set (the deployment's replica key; see --print-key)");
  if (!args.standalone && !REPLICA_KEY_PATTERN.test(key!)) fail("SWITCHYARD_REPLICA_KEY must be 64 lowercase hex digits (see --print-key)");
  const maxOngoing = Number(args["max-ongoing"]);
  if (!Number.isInteger(maxOngoing) || maxOngoing < 1) fail("--max-ongoing must be a positive integer");
  const rawMaxQueued = args["max-queued"] ?? "0";
  const maxQueued = Number(rawMaxQueued);
  if (!/^\d+$/.test(rawMaxQueued) || !Number.isSafeInteger(maxQueued) || maxQueued > 1_000_000) fail("--max-queued must be an integer from 0 to 1000000");
  const drainTimeoutMs = Number(args["drain-timeout-ms"]);
  const fault = args.fault;
  if (fault !== undefined && fault !== "hang" && fault !== "lie") fail(`--fault must be "hang" or "lie", not "${fault}"`);

  const rawServiceMs = args["service-ms"] ?? "0";
  const serviceMs = Number(rawServiceMs);
  if (!/^\d+$/.test(rawServiceMs) || !Number.isSafeInteger(serviceMs) || serviceMs > 600_000) fail("--service-ms must be an integer from 0 to 600000");
  if (serviceMs > 0 && args.backend !== "text") fail("--service-ms is a knob of --backend text");

  if ((args.upstream ?? args["upstream-metrics"]) !== undefined && args.backend !== "proxy") fail("--upstream and --upstream-metrics are flags of --backend proxy");
  if (args.backend !== "onnx" && (args.models || args["max-models-per-replica"] || args["default-model"] || (args.model && args.backend !== "llm"))) {
    fail("--model, --models, --max-models-per-replica and --default-model need --backend onnx (--model also goes with --backend llm)");
  }
  const llmKnob = (flag: "kv-blocks" | "prefill-ms" | "prefill-token-us" | "decode-ms", fallback: number, min: number, max: number): number => {
    const raw = args[flag];
    if (raw === undefined) return fallback;
    if (args.backend !== "llm") fail(`--${flag} is a knob of --backend llm`);
    const n = Number(raw);
    if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min || n > max) fail(`--${flag} must be an integer from ${min} to ${max}`);
    return n;
  };
  const kvBlocks = llmKnob("kv-blocks", 512, 1, 1_000_000);
  const prefillMs = llmKnob("prefill-ms", 0, 0, 600_000);
  const decodeMs = llmKnob("decode-ms", 0, 0, 600_000);
  const prefillTokenUs = llmKnob("prefill-token-us", 0, 0, 1_000_000);
  const kvEventsEndpoint = args["kv-events-endpoint"];
  const kvEventsReplay = args["kv-events-replay-endpoint"];
  const kvEventsTopic = args["kv-events-topic"];
  if ((kvEventsEndpoint ?? kvEventsReplay ?? kvEventsTopic) !== undefined && args.backend !== "llm") fail("--kv-events-* are flags of --backend llm");
  if (kvEventsEndpoint === undefined && (kvEventsReplay ?? kvEventsTopic) !== undefined) fail("--kv-events-replay-endpoint and --kv-events-topic need --kv-events-endpoint");
  for (const [flag, value] of [["--kv-events-endpoint", kvEventsEndpoint], ["--kv-events-replay-endpoint", kvEventsReplay]] as const) {
    if (value !== undefined && !/^(tcp|ipc|inproc):\/\/\S+$/.test(value)) fail(`${flag} must be a ZMQ address such as tcp://127.0.0.1:5557, not "${value}"`);
  }
  const kvEvents =
    kvEventsEndpoint === undefined
      ? undefined
      : { endpoint: kvEventsEndpoint, ...(kvEventsReplay !== undefined && { replayEndpoint: kvEventsReplay }), topic: kvEventsTopic ?? "" };

  const replicaId = args.id ?? `${args.deployment}-${process.pid}`;
  const log = (msg: string) => process.stderr.write(`[${replicaId}] ${msg}\n`);
  const apiKeyFile = args["api-key-file"];
  if (args["accept-unsigned"]) log("--accept-unsigned: serving requests without an edge signature too (benchmarks only)");
  if (apiKeyFile !== undefined && !args.standalone) fail("--api-key-file is for --standalone replicas (a registered replica checks the edge's signatures)");
  let apiKeys: string[] | undefined;
  if (apiKeyFile !== undefined) {
    const load = () => {
      const keys = readFileSync(apiKeyFile, "utf8").split("\n").map((k) => k.trim()).filter((k) => k !== "");
      if (keys.length === 0) throw new Error(`${apiKeyFile} holds no key`);
      return keys;
    };
    try {
      apiKeys = load();
    } catch (err) {
      fail(`--api-key-file: ${(err as Error).message}`);
    }
    process.on("SIGHUP", () => {
      try {
        apiKeys = load();
        log(`reloaded ${apiKeys.length} API key(s) from ${apiKeyFile}`);
      } catch (err) {
        log(`SIGHUP: keeping the old API keys: ${(err as Error).message}`);
      }
    });
  }
  const admission = new AdmissionControl(maxOngoing, maxQueued);

  /** Sends a load report now (set once the edge client exists; standalone replicas have none). */
  let reportNow: () => Promise<void> = () => Promise.resolve();
  const build = replicaBackend(args.backend);
  if (!build) fail(`unknown backend "${args.backend}"`);
  const { handler, cache, llm, cacheSummary, continues } = await build({
    flags: args,
    knobs: { serviceMs, kvBlocks, prefillMs, prefillTokenUs, decodeMs, ...(kvEvents && { kvEvents }) },
    admission,
    log,
    fail,
    reportNow: () => reportNow(),
  });

  const modelCache = cache;
  const describe = modelCache
    ? () => ({ models: modelCache.loaded(), loading: modelCache.loading(), max_models: modelCache.maxModels, cache: modelCache.stats() })
    : llm?.describe;
  const guard = args.standalone ? undefined : new DispatchGuard(key!, args.deployment, replicaId);
  const server = new ReplicaServer({
    replicaId,
    admission,
    handler,
    log,
    ...(describe && { describe }),
    ...(fault && { fault }),
    ...(llm && { unadmitted: llm.unadmitted }),
    ...(guard && { guard }),
    ...(args["accept-unsigned"] && { acceptUnsigned: true }),
    ...(apiKeys && { apiKeys: () => apiKeys! }),
  });
  if (fault) log(`fault injection on: ${fault}`);
  const address = await server.listen(Number(args.port), args.host ?? "127.0.0.1");
  const advertiseUrl = args["advertise-url"] ?? `http://${address.address}:${address.port}`;
  if (args.standalone) {
    process.stdout.write(`${JSON.stringify({ event: "listening", replica_id: replicaId, url: advertiseUrl, deployment: args.deployment })}\n`);
    const stop = () => void server.close().then(async () => {
      await hooks.beforeExit?.();
      process.exit(0);
    });
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
    return;
  }
  const edge = new EdgeClient({
    edgeUrl: args.edge!,
    key: key!,
    deployment: args.deployment,
    replicaId,
    advertiseUrl,
    admission,
    log,
    ...(cache && { maxModels: cache.maxModels }),
    ...(cacheSummary && !args["no-cache-summary"] && { cacheSummary }),
    ...(continues !== undefined && { continues }),
    onDrainRequested: () => void drain("drain requested by the edge (admin API)"),
    onKeyRefused: (why) => void drain(keyRefusedMessage(args.deployment!, why), 1),
  });
  reportNow = () => edge.report();

  let draining = false;
  const drain = async (signal: string, exitCode = 0) => {
    if (draining) return;
    draining = true;
    if (hooks.draining) hooks.draining.value = true;
    log(`${signal}: draining (${admission.ongoing} in flight)`);
    // 1. Announce draining, and when it ends, so proxies stop choosing us (new requests are
    // rejected and retried elsewhere) and move the streams they can continue before then.
    const deadlineAt = Date.now() + drainTimeoutMs;
    admission.drain(deadlineAt);
    // Streams the edge would continue elsewhere and that cannot finish by the deadline go now (docs/migration.md).
    llm?.handOver?.(deadlineAt);
    await edge.report().catch(() => undefined);
    // 2. Finish in-flight requests, bounded by the drain timeout.
    await Promise.race([admission.idle(), new Promise((r) => setTimeout(r, drainTimeoutMs))]);
    // 3. Leave the routing table, then stop listening.
    await edge.deregister().catch((err: unknown) => log(`deregister failed: ${String(err)}`));
    await server.close();
    await hooks.beforeExit?.();
    log("drained, exiting");
    process.exit(exitCode);
  };
  process.on("SIGTERM", () => void drain("SIGTERM"));
  process.on("SIGINT", () => void drain("SIGINT"));
  hooks.leave = async () => {
    admission.drain();
    await edge.deregister().catch((err: unknown) => log(`deregister failed: ${String(err)}`));
  };

  // Printed for launchers (one JSON line on stdout).
  process.stdout.write(`${JSON.stringify({ event: "listening", replica_id: replicaId, url: advertiseUrl, deployment: args.deployment })}\n`);
  await edge.start();
  process.stdout.write(`${JSON.stringify({ event: "registered", replica_id: replicaId })}\n`);
}
