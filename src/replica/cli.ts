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
import { DEPLOYMENT_NAME, REPLICA_ID, REPLICA_KEY_PATTERN, REPLICA_REGION, REPLICA_ROLE_FLAGS, deriveReplicaKey, type ReplicaCoordinates, type ReplicaRoleFlag } from "../protocol/index.ts";
import { AdmissionControl } from "./admission.ts";
import { DispatchGuard } from "./dispatch-guard.ts";
import { EdgeClient, keyRefusedMessage } from "./edge-client.ts";
import { REPLICA_BACKENDS, replicaBackend } from "./backends/index.ts";
import type { ReplicaBackendContext, ReplicaBackendParts } from "./backends/context.ts";
import { ReplicaServer } from "./server.ts";

const USAGE = `usage: replica --deployment NAME --backend text|echo|onnx|llm|proxy [--text T] [--service-ms N]
               [--model ID | --models ID,ID,... --max-models-per-replica N [--default-model ID]]
               --edge URL [--port N] [--host H] [--id ID] [--max-ongoing N] [--max-queued N]
               [--advertise-url URL] [--drain-timeout-ms N] [--standalone [--api-key-file PATH]]
               [--fault hang|lie] [--region NAME] [--coordinates LAT,LON]
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
--prefill-stalls-decode: (llm) benchmark knob: a decode step waits for the prefill on the lane to
                 end, as a GPU running a prefill batch does not decode meanwhile (what
                 prefill/decode disaggregation removes); default off: decoding keeps its pace
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
--role prefill|decode|both: (llm) a part in prefill/decode disaggregation, in vLLM's protocol
                 with NixlConnector (kv_transfer_params; docs/protocol.md §2d): a prefill request
                 (do_remote_decode) keeps its prompt's KV blocks for a decode replica and answers
                 where they are; a decode request (do_remote_prefill) reads them first (signed
                 POST /-/kv-transfer), then computes only the rest. Either role serves both
                 legs, as vLLM's kv_both; without it, kv_transfer_params are ignored
--standalone: serve without registering (a direct baseline for benchmarks, or an engine behind
                 "replica agent"). A registered replica serves only dispatches signed by its
                 deployment's edge (docs/protocol.md §2); a standalone one checks no signature
--accept-unsigned: benchmarks only: also serve requests that carry no edge signature (the
                 direct and bare-Worker arms); signed ones are still checked
--api-key-file PATH: (standalone) serve only requests with Authorization: Bearer <a key in
                 PATH, one per line>, as vLLM's --api-key does; SIGHUP reloads the file
--region NAME: the replica's region ("us-east-1", "fra"; 1-64 of [A-Za-z0-9._-], starting with a
                 letter or digit), declared at register (docs/protocol.md §1): edges show it and
                 weigh where a replica is. Not sent without it (edges older than it refuse it)
--coordinates LAT,LON: where the replica is, in degrees (latitude -90..90, longitude -180..180,
                 e.g. 50.11,8.68), declared at register: an edge that has not measured its
                 distance to the replica estimates it from these. A negative first number needs
                 the = form: --coordinates=-33.92,18.42
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

/** A command line the replica (or the agent) refuses: the message is printed above the usage, and the process exits 2. */
export class UsageError extends Error {}

/** `raw` as an integer from `min` to `max`, digits only (no sign, exponent or fraction). */
export function integerFlag(raw: string, flag: string, min: number, max: number): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${flag} must be an integer from ${min} to ${max}`);
  return n;
}

/** `raw` if it is an http(s) URL. */
export function httpUrlFlag(raw: string, flag: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new UsageError(`${flag} "${raw}" is not a URL`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new UsageError(`${flag} must be an http(s) URL`);
  return raw;
}

/** `raw` if it is a region name (register's `region`: "us-east-1", "eu-central", "fra"). */
export function regionFlag(raw: string, flag: string): string {
  if (!REPLICA_REGION.test(raw)) throw new UsageError(`${flag} "${raw}" is not a region name (1-64 of [A-Za-z0-9._-], starting with a letter or digit)`);
  return raw;
}

/** A decimal number of degrees: digits with an optional sign and fraction (no exponent, Infinity or NaN). */
const DEGREES = /^[+-]?(?:\d+(?:\.\d*)?|\.\d+)$/;

/** `raw` ("LAT,LON" in degrees, as "50.11,8.68") as register's `coordinates`. */
export function coordinatesFlag(raw: string, flag: string): ReplicaCoordinates {
  const parts = raw.split(",").map((p) => p.trim());
  if (parts.length !== 2 || !parts.every((p) => DEGREES.test(p))) throw new UsageError(`${flag} must be LAT,LON in decimal degrees (e.g. 50.11,8.68), not "${raw}"`);
  const [lat, lon] = parts.map(Number) as [number, number];
  if (lat < -90 || lat > 90) throw new UsageError(`${flag}: latitude ${parts[0]} is outside -90..90`);
  if (lon < -180 || lon > 180) throw new UsageError(`${flag}: longitude ${parts[1]} is outside -180..180`);
  return { lat, lon };
}

/** What the replica serves and how, from its command line and environment (parseReplicaArgs). */
export interface ReplicaOptions {
  deployment: string;
  backend: string;
  /** The backend's own flags, validated by the backend when it is built. */
  flags: ReplicaBackendContext["flags"];
  knobs: ReplicaBackendContext["knobs"];
  replicaId: string;
  port: number;
  host: string;
  maxOngoing: number;
  maxQueued: number;
  drainTimeoutMs: number;
  standalone: boolean;
  acceptUnsigned: boolean;
  noCacheSummary: boolean;
  /** Registered replicas: the edge's URL and the deployment's replica key. */
  edge?: string;
  key?: string;
  advertiseUrl?: string;
  apiKeyFile?: string;
  fault?: "hang" | "lie";
  /** Its region's name (`--region`), declared at register. */
  region?: string;
  /** Where it is (`--coordinates`, degrees), declared at register. */
  coordinates?: ReplicaCoordinates;
}

export type ReplicaCommand = { kind: "help" } | { kind: "print-key"; deployment: string; master: string } | { kind: "serve"; options: ReplicaOptions };

const ZMQ_ADDRESS = /^(tcp|ipc|inproc):\/\/\S+$/;

/** Parses the replica's command line; throws UsageError for anything it would not serve with. */
export function parseReplicaArgs(argv: readonly string[], env: Readonly<Record<string, string | undefined>> = process.env): ReplicaCommand {
  let args;
  try {
    args = parseArgs({
      args: [...argv],
      options: {
        deployment: { type: "string" },
        backend: { type: "string" },
        text: { type: "string" },
        "service-ms": { type: "string" },
        model: { type: "string" },
        models: { type: "string" },
        "max-models-per-replica": { type: "string" },
        "default-model": { type: "string" },
        "kv-blocks": { type: "string" },
        "prefill-ms": { type: "string" },
        "prefill-token-us": { type: "string" },
        "prefill-stalls-decode": { type: "boolean", default: false },
        "kv-events-endpoint": { type: "string" },
        "kv-events-replay-endpoint": { type: "string" },
        "kv-events-topic": { type: "string" },
        "no-cache-summary": { type: "boolean", default: false },
        "enable-prompt-tokens-details": { type: "boolean", default: false },
        role: { type: "string" },
        "decode-ms": { type: "string" },
        upstream: { type: "string" },
        "upstream-metrics": { type: "string" },
        edge: { type: "string" },
        port: { type: "string" },
        host: { type: "string" },
        id: { type: "string" },
        "max-ongoing": { type: "string" },
        "max-queued": { type: "string" },
        "advertise-url": { type: "string" },
        "drain-timeout-ms": { type: "string" },
        standalone: { type: "boolean", default: false },
        "api-key-file": { type: "string" },
        "accept-unsigned": { type: "boolean", default: false },
        "print-key": { type: "boolean", default: false },
        fault: { type: "string" },
        region: { type: "string" },
        coordinates: { type: "string" },
        help: { type: "boolean", short: "h", default: false },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (args.help) return { kind: "help" };
  const deployment = args.deployment;
  if (deployment !== undefined && !DEPLOYMENT_NAME.test(deployment)) throw new UsageError(`--deployment "${deployment}" is not a deployment name (lowercase letters, digits and '-')`);
  if (args["print-key"]) {
    if (deployment === undefined) throw new UsageError("--print-key needs --deployment NAME");
    const master = env.SWITCHYARD_REPLICA_SECRET;
    if (!master) throw new UsageError("--print-key reads the master secret from SWITCHYARD_REPLICA_SECRET, which is not set");
    return { kind: "print-key", deployment, master };
  }
  const backend = args.backend;
  if (deployment === undefined || backend === undefined) throw new UsageError("--deployment and --backend are required");
  if (!replicaBackend(backend)) throw new UsageError(`unknown backend "${backend}"; known: ${Object.keys(REPLICA_BACKENDS).join(", ")}`);
  const standalone = args.standalone;
  const key = env.SWITCHYARD_REPLICA_KEY;
  if (!standalone) {
    if (args.edge === undefined) throw new UsageError("--edge is required (or --standalone)");
    if (!key) throw new UsageError("SWITCHYARD_REPLICA_KEY is not set (the deployment's replica key; see --print-key)");
    if (!REPLICA_KEY_PATTERN.test(key)) throw new UsageError("SWITCHYARD_REPLICA_KEY must be 64 lowercase hex digits (see --print-key)");
  }
  const edge = args.edge === undefined ? undefined : httpUrlFlag(args.edge, "--edge");
  const advertiseUrl = args["advertise-url"] === undefined ? undefined : httpUrlFlag(args["advertise-url"], "--advertise-url");
  const replicaId = args.id ?? `${deployment}-${process.pid}`;
  if (!REPLICA_ID.test(replicaId)) throw new UsageError(`--id "${replicaId}" is not a replica id (1-128 of [A-Za-z0-9._:-])`);
  const maxOngoing = integerFlag(args["max-ongoing"] ?? "5", "--max-ongoing", 1, 1_000_000);
  const maxQueued = integerFlag(args["max-queued"] ?? "0", "--max-queued", 0, 1_000_000);
  const drainTimeoutMs = integerFlag(args["drain-timeout-ms"] ?? "30000", "--drain-timeout-ms", 0, 3_600_000);
  const port = integerFlag(args.port ?? "0", "--port", 0, 65_535);
  const fault = args.fault;
  if (fault !== undefined && fault !== "hang" && fault !== "lie") throw new UsageError(`--fault must be "hang" or "lie", not "${fault}"`);
  const apiKeyFile = args["api-key-file"];
  if (apiKeyFile !== undefined && !standalone) throw new UsageError("--api-key-file is for --standalone replicas (a registered replica checks the edge's signatures)");
  // Declared at register: a standalone replica registers nowhere (behind an agent, the agent declares them).
  if (standalone && (args.region ?? args.coordinates) !== undefined) throw new UsageError("--region and --coordinates are declared at register: a --standalone replica does not register (give them to its agent)");
  const region = args.region === undefined ? undefined : regionFlag(args.region, "--region");
  const coordinates = args.coordinates === undefined ? undefined : coordinatesFlag(args.coordinates, "--coordinates");

  // Each knob and flag belongs to one backend kind.
  const only = (kinds: readonly string[], given: boolean, message: string) => {
    if (given && !kinds.includes(backend)) throw new UsageError(message);
  };
  only(["text"], args.text !== undefined, "--text is a flag of --backend text");
  only(["text"], args["service-ms"] !== undefined, "--service-ms is a knob of --backend text");
  only(["proxy"], (args.upstream ?? args["upstream-metrics"]) !== undefined, "--upstream and --upstream-metrics are flags of --backend proxy");
  only(["onnx"], (args.models ?? args["max-models-per-replica"] ?? args["default-model"]) !== undefined, "--models, --max-models-per-replica and --default-model need --backend onnx");
  only(["onnx", "llm"], args.model !== undefined, "--model needs --backend onnx or llm");
  only(["llm"], (args["kv-events-endpoint"] ?? args["kv-events-replay-endpoint"] ?? args["kv-events-topic"]) !== undefined, "--kv-events-* are flags of --backend llm");
  only(["llm"], args["no-cache-summary"] || args["enable-prompt-tokens-details"], "--no-cache-summary and --enable-prompt-tokens-details are flags of --backend llm");
  only(["llm"], args.role !== undefined, "--role is a flag of --backend llm");
  only(["llm"], args["prefill-stalls-decode"], "--prefill-stalls-decode is a knob of --backend llm");
  if (args.role !== undefined && !(REPLICA_ROLE_FLAGS as readonly string[]).includes(args.role)) throw new UsageError(`--role must be one of ${REPLICA_ROLE_FLAGS.join(", ")}, not "${args.role}"`);
  const llmKnob = (flag: "kv-blocks" | "prefill-ms" | "prefill-token-us" | "decode-ms", fallback: number, min: number, max: number): number => {
    const raw = args[flag];
    if (raw === undefined) return fallback;
    only(["llm"], true, `--${flag} is a knob of --backend llm`);
    return integerFlag(raw, `--${flag}`, min, max);
  };
  const kvEventsEndpoint = args["kv-events-endpoint"];
  const kvEventsReplay = args["kv-events-replay-endpoint"];
  if (kvEventsEndpoint === undefined && (kvEventsReplay ?? args["kv-events-topic"]) !== undefined) throw new UsageError("--kv-events-replay-endpoint and --kv-events-topic need --kv-events-endpoint");
  for (const [flag, value] of [["--kv-events-endpoint", kvEventsEndpoint], ["--kv-events-replay-endpoint", kvEventsReplay]] as const) {
    if (value !== undefined && !ZMQ_ADDRESS.test(value)) throw new UsageError(`${flag} must be a ZMQ address such as tcp://127.0.0.1:5557, not "${value}"`);
  }
  const knobs: ReplicaBackendContext["knobs"] = {
    serviceMs: args["service-ms"] === undefined ? 0 : integerFlag(args["service-ms"], "--service-ms", 0, 600_000),
    kvBlocks: llmKnob("kv-blocks", 512, 1, 1_000_000),
    prefillMs: llmKnob("prefill-ms", 0, 0, 600_000),
    decodeMs: llmKnob("decode-ms", 0, 0, 600_000),
    prefillTokenUs: llmKnob("prefill-token-us", 0, 0, 1_000_000),
    ...(args["prefill-stalls-decode"] && { prefillStallsDecode: true }),
    ...(kvEventsEndpoint !== undefined && {
      kvEvents: { endpoint: kvEventsEndpoint, ...(kvEventsReplay !== undefined && { replayEndpoint: kvEventsReplay }), topic: args["kv-events-topic"] ?? "" },
    }),
  };
  const flags: ReplicaBackendContext["flags"] = {
    text: args.text ?? "hi",
    model: args.model,
    models: args.models,
    "max-models-per-replica": args["max-models-per-replica"],
    "default-model": args["default-model"],
    upstream: args.upstream,
    "upstream-metrics": args["upstream-metrics"],
    "enable-prompt-tokens-details": args["enable-prompt-tokens-details"],
    ...(args.role !== undefined && { role: args.role as ReplicaRoleFlag }),
  };
  return {
    kind: "serve",
    options: {
      deployment,
      backend,
      flags,
      knobs,
      replicaId,
      port,
      host: args.host ?? "127.0.0.1",
      maxOngoing,
      maxQueued,
      drainTimeoutMs,
      standalone,
      acceptUnsigned: args["accept-unsigned"],
      noCacheSummary: args["no-cache-summary"],
      ...(edge !== undefined && { edge }),
      ...(!standalone && { key: key! }),
      ...(advertiseUrl !== undefined && { advertiseUrl }),
      ...(apiKeyFile !== undefined && { apiKeyFile }),
      ...(fault !== undefined && { fault }),
      ...(region !== undefined && { region }),
      ...(coordinates !== undefined && { coordinates }),
    },
  };
}

/** A replica that serves on its port; replicaMain then registers it with the edge (unless standalone) and drains it on signals. */
export interface StartedReplica {
  server: ReplicaServer;
  admission: AdmissionControl;
  parts: ReplicaBackendParts;
  /** The URL it advertises: --advertise-url, or where it listens. */
  url: string;
}

/** Builds the backend (loading its model) and starts serving. */
export async function startReplica(
  options: ReplicaOptions,
  io: { log(msg: string): void; fail(msg: string): never; reportNow(): Promise<void>; apiKeys?: () => string[] },
): Promise<StartedReplica> {
  const { replicaId, fault } = options;
  const admission = new AdmissionControl(options.maxOngoing, options.maxQueued);
  // Known once the server listens (a port 0 is chosen then); the backend reads it only when it answers.
  let url: string | undefined;
  const identity = { replicaId, deployment: options.deployment, ...(options.key !== undefined && { key: options.key }), url: () => url! };
  const parts = await replicaBackend(options.backend)!({ flags: options.flags, knobs: options.knobs, admission, log: io.log, fail: io.fail, reportNow: io.reportNow, identity });
  const { handler, cache, llm } = parts;
  const describe = cache
    ? () => ({ models: cache.loaded(), loading: cache.loading(), max_models: cache.maxModels, cache: cache.stats() })
    : llm?.describe;
  const guard = options.key === undefined ? undefined : new DispatchGuard(options.key, options.deployment, replicaId);
  const server = new ReplicaServer({
    replicaId,
    admission,
    handler,
    log: io.log,
    ...(describe && { describe }),
    ...(fault && { fault }),
    ...(llm && { unadmitted: llm.unadmitted }),
    ...(guard && { guard }),
    ...(options.acceptUnsigned && { acceptUnsigned: true }),
    ...(io.apiKeys && { apiKeys: io.apiKeys }),
  });
  if (fault) io.log(`fault injection on: ${fault}`);
  const address = await server.listen(options.port, options.host);
  url = options.advertiseUrl ?? `http://${address.address}:${address.port}`;
  return { server, admission, parts, url };
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
  let command: ReplicaCommand;
  try {
    command = parseReplicaArgs(argv);
  } catch (err) {
    if (err instanceof UsageError) fail(err.message);
    throw err;
  }
  if (command.kind === "help") {
    process.stdout.write(`${USAGE}\n`);
    return;
  }
  if (command.kind === "print-key") {
    process.stdout.write(`${await deriveReplicaKey(command.master, command.deployment)}\n`);
    return;
  }
  const options = command.options;
  const { replicaId, apiKeyFile } = options;
  const log = (msg: string) => process.stderr.write(`[${replicaId}] ${msg}\n`);
  if (options.acceptUnsigned) log("--accept-unsigned: serving requests without an edge signature too (benchmarks only)");
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
  /** Sends a load report now (set once the edge client exists; standalone replicas have none). */
  let reportNow: () => Promise<void> = () => Promise.resolve();
  const { server, admission, parts, url: advertiseUrl } = await startReplica(options, {
    log,
    fail,
    reportNow: () => reportNow(),
    ...(apiKeys && { apiKeys: () => apiKeys! }),
  });
  const { cache, llm, cacheSummary, continues, roles } = parts;
  if (options.edge === undefined || options.key === undefined) {
    process.stdout.write(`${JSON.stringify({ event: "listening", replica_id: replicaId, url: advertiseUrl, deployment: options.deployment })}\n`);
    const stop = () => void server.close().then(async () => {
      await hooks.beforeExit?.();
      process.exit(0);
    });
    process.on("SIGTERM", stop);
    process.on("SIGINT", stop);
    return;
  }
  const edge = new EdgeClient({
    edgeUrl: options.edge,
    key: options.key,
    deployment: options.deployment,
    replicaId,
    advertiseUrl,
    admission,
    log,
    ...(cache && { maxModels: cache.maxModels }),
    ...(cacheSummary && !options.noCacheSummary && { cacheSummary }),
    ...(continues !== undefined && { continues }),
    ...(roles !== undefined && { roles }),
    // A prefill serves SGLang's KV bootstrap on its own port (src/replica/llm/kv-transfer.ts).
    ...(roles?.includes("prefill") && { bootstrapPort: Number(new URL(advertiseUrl).port || 80) }),
    ...(options.region !== undefined && { region: options.region }),
    ...(options.coordinates !== undefined && { coordinates: options.coordinates }),
    onDrainRequested: () => void drain("drain requested by the edge (admin API)"),
    onKeyRefused: (why) => void drain(keyRefusedMessage(options.deployment, why), 1),
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
    const deadlineAt = Date.now() + options.drainTimeoutMs;
    admission.drain(deadlineAt);
    // Streams the edge would continue elsewhere and that cannot finish by the deadline go now (docs/migration.md).
    llm?.handOver?.(deadlineAt);
    await edge.report().catch(() => undefined);
    // 2. Finish in-flight requests, bounded by the drain timeout.
    await Promise.race([admission.idle(), new Promise((r) => setTimeout(r, options.drainTimeoutMs))]);
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
  process.stdout.write(`${JSON.stringify({ event: "listening", replica_id: replicaId, url: advertiseUrl, deployment: options.deployment })}\n`);
  await edge.start();
  process.stdout.write(`${JSON.stringify({ event: "registered", replica_id: replicaId })}\n`);
}
