/**
 * `replica agent`: a replica agent in front of an external OpenAI-compatible engine
 * (vLLM, SGLang). It registers the engine's URL with the deployment, reports the
 * engine's load from its /metrics, and drains on SIGTERM/SIGINT before it lets the
 * engine go. docs/agent.md has the operator's guide.
 *
 *   npm run replica -- agent --deployment llm --edge https://edge.example.com \
 *     --engine-url http://10.0.0.7:8000 [--max-ongoing 256] [-- vllm serve MODEL …]
 *
 * One agent per node (node batching): several --engine-url with --node send one
 * node report for all of them; each engine is its own replica.
 *
 *   npm run replica -- agent --deployment llm --edge https://edge.example.com --node gpu-7 \
 *     --engine-url http://127.0.0.1:8000 --engine-url http://127.0.0.1:8001 [--id gpu-7]
 *
 * With each engine's KV events endpoint (vLLM --kv-events-config), the agent also
 * reports a summary of the engine's prefix cache:
 *
 *   npm run replica -- agent ... --engine-url http://127.0.0.1:8000 \
 *     --kv-events-endpoint tcp://127.0.0.1:5557 --kv-events-replay-endpoint tcp://127.0.0.1:5558
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { ContinuationForm, DEPLOYMENT_NAME, REPLICA_ROLE_FLAGS, rolesOf, type ReplicaRole, type ReplicaRoleFlag, ENGINE_KEY, MAX_NODE_REPLICAS, MODEL_ID, REPLICA_ID, REPLICA_KEY_PATTERN } from "../protocol/index.ts";
import { NodeReporter } from "../replica/node-reporter.ts";
import { AGENT_DEFAULTS, MAX_SCRAPE_INTERVAL_MS, ReplicaAgent, type AgentOptions, type EngineKind } from "./agent.ts";
import { ZMQ_ENDPOINT } from "./kv-events-subscriber.ts";
import { spawnEngine } from "./engine-process.ts";
import { proxyModeMain } from "./proxy-mode.ts";
import { coordinatesFlag, httpUrlFlag as httpUrl, integerFlag as int, regionFlag, UsageError } from "../replica/cli.ts";

export { UsageError };

export const AGENT_USAGE = `usage: switchyard agent --deployment NAME --edge URL --engine-url URL [--engine-url URL ...]
               [--node NODE] [--engine vllm|sglang|auto] [--id ID ...] [--advertise-url URL ...]
               [--max-ongoing N ...] [--models ID,ID,... ...] [--scrape-interval-ms N]
               [--report-delay-ms N] [--drain-timeout-ms N] [--drain-grace-ms N]
               [--engine-start-timeout-ms N] [--engine-stop-timeout-ms N]
               [--engine-api-key-file PATH ...] [--kv-events-endpoint ZMQ ...]
               [--kv-events-replay-endpoint ZMQ ...] [--kv-events-topic TOPIC ...]
               [--engine-continues chat,completion|none ...] [--engine-role prefill|decode|both ...]
               [--engine-bootstrap-port PORT ...] [--region NAME] [--coordinates LAT,LON]
               [-- ENGINE COMMAND...]
Fronts an external OpenAI-compatible engine: registers it with the deployment (proxies
dispatch straight to --advertise-url, default --engine-url), scrapes its /metrics into
load reports, and on SIGTERM/SIGINT drains, deregisters, then stops the engine.
--engine-url URL        where the agent reaches the engine (GET /health, /v1/models, /metrics);
                        repeated (with --node): several engines on one node, each its own replica,
                        all in one node report per interval (up to ${MAX_NODE_REPLICAS})
--node NODE             the node (machine) the engines run on; required with several --engine-url
--engine KIND           metric names to read: vllm, sglang, or auto (whichever are present; default)
--id ID                 replica id, default <deployment>-agent-<pid>; with several engines, once
                        (a prefix: ID-0, ID-1, ...; default NODE-0, ...) or once per --engine-url
--advertise-url URL     what proxies dispatch to; with several engines, once per --engine-url
--max-ongoing N         the engine's concurrency budget (vLLM --max-num-seqs), reported as capacity;
                        default ${AGENT_DEFAULTS.maxOngoing}
--models IDS            base model ids served; default the engine's GET /v1/models (LoRA adapters
                        in use are added from vllm:lora_requests_info)
--scrape-interval-ms N  1-${MAX_SCRAPE_INTERVAL_MS}, default ${AGENT_DEFAULTS.scrapeIntervalMs}
--report-delay-ms N     coalescing of load-change reports while idle, 0-250, default ${AGENT_DEFAULTS.changeReportDelayMs}
                        (while an engine is busy, about one report a second)
--drain-timeout-ms N    longest wait for the engine to go idle when draining, default ${AGENT_DEFAULTS.drainTimeoutMs}
--drain-grace-ms N      shortest: proxies may still send until they see the drain, default ${AGENT_DEFAULTS.drainGraceMs}
--engine-start-timeout-ms N  for the engine to answer GET /health, default ${AGENT_DEFAULTS.engineStartTimeoutMs}
--engine-stop-timeout-ms N   after SIGTERM to the engine, before SIGKILL, default ${AGENT_DEFAULTS.engineStopTimeoutMs}
--engine-api-key-file PATH  the engine's API key (vLLM --api-key), first line of PATH: registered
                        with the edge, which sends it as Authorization: Bearer on every dispatch;
                        SIGHUP re-reads the file and registers the new key (rotation, docs/agent.md)
--kv-events-endpoint ZMQ  the engine's KV events publisher (vLLM --kv-events-config endpoint, e.g.
                        tcp://127.0.0.1:5557; tcp:// or ipc://): the agent indexes the engine's prefix
                        cache from its events and reports a summary (blocks of 16 tokens only);
                        once per --engine-url
--kv-events-replay-endpoint ZMQ  its replay socket (vLLM replay_endpoint, e.g. tcp://127.0.0.1:5558):
                        batches missed (and those before the agent started) are asked from it;
                        once per --kv-events-endpoint
--kv-events-topic TOPIC the events' topic (vLLM's topic, default ""); once, or once per engine
--engine-continues FORMS the stream continuations the engine takes (docs/migration.md): chat (vLLM's
                        continue_final_message), completion (prompt + text), both comma-separated, or
                        none; default both, as vLLM and SGLang take (not sent then): the edge continues
                        a broken stream only on replicas that take its form
--engine-role ROLE      the engine's part in prefill/decode disaggregation (docs/protocol.md §2d): prefill,
                        decode or both, declared at register; default: read from the engine command's
                        --kv-transfer-config kv_role (kv_producer: prefill, kv_consumer: decode,
                        kv_both: both) or SGLang's --disaggregation-mode (prefill, decode), else
                        both (a unified engine)
--engine-bootstrap-port PORT  a prefill engine's KV bootstrap port, for SGLang's protocol (docs/pd.md);
                        default: the command's --disaggregation-bootstrap-port (8998 unless given)
                        when it has --disaggregation-mode prefill, else none
--region NAME           the engines' region ("us-east-1", "fra"; 1-64 of [A-Za-z0-9._-], starting with
                        a letter or digit), declared at register for every engine (one node, one place);
                        default none (not sent: edges older than it refuse it)
--coordinates LAT,LON   where the engines are, in degrees (latitude -90..90, longitude -180..180, e.g.
                        50.11,8.68), declared at register for every engine: an edge that has not
                        measured its distance estimates it from these; a negative first number needs
                        the = form (--coordinates=-33.92,18.42)
-- COMMAND...           start the engine as the agent's child (stdout/stderr shared); the agent
                        stops it after deregistering and exits 1 if it exits on its own
                        (one engine only: start several engines yourself)
With several engines, --engine, --max-ongoing, --models, --engine-api-key-file,
--kv-events-topic, --engine-continues, --engine-role and --engine-bootstrap-port are given once (for all) or once per --engine-url, in order.
env: SWITCHYARD_REPLICA_KEY (required): the deployment's replica key (replica --print-key)
Any other HTTP model server (FastAPI, Triton, TorchServe, BentoML): agent --proxy --help`;

/** One engine's agent, from the flags. */
export interface EngineArgs {
  options: Omit<AgentOptions, "key" | "log" | "engineProcess" | "onRegistered" | "fetch" | "now" | "engineKey" | "nodeReporter">;
  /** Where the engine's API key is (its first line), when the engine has one. */
  engineKeyFile?: string;
}

export interface AgentArgs {
  /** One per --engine-url, in order. */
  engines: EngineArgs[];
  /** --node: with several engines, one node report carries them all. */
  node?: string;
  /** The engine command after `--` (empty: the engine runs elsewhere). */
  command: string[];
}


function modelList(raw: string): string[] {
  const models = raw.split(",").map((m) => m.trim());
  for (const m of models) if (!MODEL_ID.test(m)) throw new UsageError(`--models: "${m}" is not a model id (1-128 of [A-Za-z0-9._:@/+-])`);
  if (new Set(models).size !== models.length) throw new UsageError("--models: a model is listed twice");
  return models;
}

/** `--engine-role`: prefill, decode or both. */
function engineRole(raw: string): ReplicaRole[] {
  if (!(REPLICA_ROLE_FLAGS as readonly string[]).includes(raw)) throw new UsageError(`--engine-role: "${raw}" is not a role (prefill, decode or both)`);
  return rolesOf(raw as ReplicaRoleFlag);
}

/** A flag's value in a command (`--name value` or `--name=value`); undefined when absent. */
function commandFlag(command: readonly string[], name: string): string | undefined {
  const at = command.findIndex((a) => a === name || a.startsWith(`${name}=`));
  if (at < 0) return undefined;
  return command[at]!.startsWith(`${name}=`) ? command[at]!.slice(name.length + 1) : command[at + 1];
}

/**
 * The roles vLLM's `--kv-transfer-config` in the engine's command gives it (its kv_role:
 * kv_producer, kv_consumer, kv_both); undefined without one (a unified engine) or when
 * it does not say.
 */
export function kvRoleOfCommand(command: readonly string[]): ReplicaRole[] | undefined {
  const raw = commandFlag(command, "--kv-transfer-config");
  if (raw === undefined) return undefined;
  let config: unknown;
  try {
    config = JSON.parse(raw);
  } catch {
    return undefined;
  }
  const role = typeof config === "object" && config !== null ? (config as { kv_role?: unknown }).kv_role : undefined;
  const flag = role === "kv_producer" ? "prefill" : role === "kv_consumer" ? "decode" : role === "kv_both" ? "both" : undefined;
  return flag === undefined ? undefined : rolesOf(flag);
}

/** SGLang's default `--disaggregation-bootstrap-port` (its server_args). */
export const SGLANG_BOOTSTRAP_PORT = 8998;

/**
 * What SGLang's `--disaggregation-mode` in the engine's command makes it: `prefill`
 * (with its bootstrap port, `--disaggregation-bootstrap-port`, default 8998) or
 * `decode`; undefined for "null" (unified), without the flag, or another mode.
 */
export function sglangModeOfCommand(command: readonly string[]): { roles: ReplicaRole[]; bootstrapPort?: number } | undefined {
  const mode = commandFlag(command, "--disaggregation-mode");
  if (mode === "decode") return { roles: ["decode"] };
  if (mode !== "prefill") return undefined;
  const port = Number(commandFlag(command, "--disaggregation-bootstrap-port") ?? SGLANG_BOOTSTRAP_PORT);
  return { roles: ["prefill"], ...(Number.isInteger(port) && port >= 1 && port <= 65_535 && { bootstrapPort: port }) };
}

/** `--engine-continues`: "none", or forms joined by commas ("chat,completion"). */
function continuationForms(raw: string): ContinuationForm[] {
  if (raw === "none") return [];
  const forms = raw.split(",").map((f) => f.trim());
  for (const f of forms) if (!ContinuationForm.safeParse(f).success) throw new UsageError(`--engine-continues: "${f}" is not a continuation form (chat, completion, or none)`);
  if (new Set(forms).size !== forms.length) throw new UsageError("--engine-continues: a form is listed twice");
  return forms as ContinuationForm[];
}

/** A flag given once applies to every engine; several times, once per engine. Undefined when absent. */
function perEngine(values: string[] | undefined, flag: string, engines: number): string[] | undefined {
  if (values === undefined || values.length === 0) return undefined;
  if (values.length === 1) return Array<string>(engines).fill(values[0]!);
  if (values.length === engines) return values;
  throw new UsageError(`${flag} is given ${values.length} times for ${engines} engines: give it once (for all) or once per --engine-url`);
}

/** Replica ids: the one given, a prefix with an index (several engines), or one per engine. */
function replicaIds(ids: string[] | undefined, deployment: string, node: string | undefined, engines: number): string[] {
  let out: string[];
  if (engines === 1) {
    if (ids !== undefined && ids.length > 1) throw new UsageError(`--id is given ${ids.length} times for one engine`);
    out = [ids?.[0] ?? `${deployment}-agent-${process.pid}`];
  } else if (ids === undefined || ids.length <= 1) {
    const prefix = ids?.[0] ?? node!;
    out = Array.from({ length: engines }, (_, i) => `${prefix}-${i}`);
  } else if (ids.length === engines) {
    out = ids;
  } else {
    throw new UsageError(`--id is given ${ids.length} times for ${engines} engines: give it once (a prefix) or once per --engine-url`);
  }
  for (const id of out) if (!REPLICA_ID.test(id)) throw new UsageError(`--id "${id}" is not a replica id (1-128 of [A-Za-z0-9._:-])`);
  if (new Set(out).size !== out.length) throw new UsageError("--id: a replica id is given twice");
  return out;
}

/** Each engine's KV events source, from the three flags; undefined when none is given. */
function kvEventSources(endpoints: string[] | undefined, replays: string[] | undefined, topics: string[] | undefined, engines: number): NonNullable<AgentOptions["kvEvents"]>[] | undefined {
  if (endpoints === undefined || endpoints.length === 0) {
    if (replays?.length || topics?.length) throw new UsageError("--kv-events-replay-endpoint and --kv-events-topic need --kv-events-endpoint");
    return undefined;
  }
  // Endpoints are per engine: each engine publishes on its own port.
  if (endpoints.length !== engines) throw new UsageError(`--kv-events-endpoint is given ${endpoints.length} times for ${engines} engines: give it once per --engine-url`);
  if (replays !== undefined && replays.length !== endpoints.length) {
    throw new UsageError(`--kv-events-replay-endpoint is given ${replays.length} times for ${endpoints.length} --kv-events-endpoint: give it once per endpoint`);
  }
  const zmq = (raw: string, flag: string) => {
    if (!ZMQ_ENDPOINT.test(raw)) throw new UsageError(`${flag} "${raw}" is not a ZMQ endpoint (tcp://HOST:PORT or ipc://PATH)`);
    return raw;
  };
  const topicOf = perEngine(topics, "--kv-events-topic", engines);
  return endpoints.map((e, i) => ({
    endpoint: zmq(e, "--kv-events-endpoint"),
    ...(replays !== undefined && { replayEndpoint: zmq(replays[i]!, "--kv-events-replay-endpoint") }),
    ...(topicOf !== undefined && { topic: topicOf[i]! }),
  }));
}


/** Parses the agent's command line (after `agent`); "help" for --help. Throws UsageError. */
export function parseAgentArgs(argv: readonly string[]): AgentArgs | "help" {
  const dashes = argv.indexOf("--");
  const flags = dashes === -1 ? [...argv] : argv.slice(0, dashes);
  const command = dashes === -1 ? [] : argv.slice(dashes + 1);
  let v;
  try {
    v = parseArgs({
      args: flags,
      options: {
        deployment: { type: "string" },
        edge: { type: "string" },
        "engine-url": { type: "string", multiple: true },
        node: { type: "string" },
        engine: { type: "string", multiple: true },
        id: { type: "string", multiple: true },
        "advertise-url": { type: "string", multiple: true },
        "max-ongoing": { type: "string", multiple: true },
        models: { type: "string", multiple: true },
        "scrape-interval-ms": { type: "string", default: String(AGENT_DEFAULTS.scrapeIntervalMs) },
        "report-delay-ms": { type: "string", default: String(AGENT_DEFAULTS.changeReportDelayMs) },
        "drain-timeout-ms": { type: "string", default: String(AGENT_DEFAULTS.drainTimeoutMs) },
        "drain-grace-ms": { type: "string", default: String(AGENT_DEFAULTS.drainGraceMs) },
        "engine-start-timeout-ms": { type: "string", default: String(AGENT_DEFAULTS.engineStartTimeoutMs) },
        "engine-stop-timeout-ms": { type: "string", default: String(AGENT_DEFAULTS.engineStopTimeoutMs) },
        "engine-api-key-file": { type: "string", multiple: true },
        "engine-continues": { type: "string", multiple: true },
        "engine-role": { type: "string", multiple: true },
        "engine-bootstrap-port": { type: "string", multiple: true },
        region: { type: "string" },
        coordinates: { type: "string" },
        "kv-events-endpoint": { type: "string", multiple: true },
        "kv-events-replay-endpoint": { type: "string", multiple: true },
        "kv-events-topic": { type: "string", multiple: true },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (v.help) return "help";
  const engineUrls = v["engine-url"] ?? [];
  if (!v.deployment || !v.edge || engineUrls.length === 0) throw new UsageError("--deployment, --edge and --engine-url are required");
  if (!DEPLOYMENT_NAME.test(v.deployment)) throw new UsageError(`--deployment "${v.deployment}" is not a deployment name (lowercase letters, digits and '-')`);
  const n = engineUrls.length;
  const node = v.node;
  if (node !== undefined && !REPLICA_ID.test(node)) throw new UsageError(`--node "${node}" is not a node id (1-128 of [A-Za-z0-9._:-])`);
  if (n > 1) {
    if (node === undefined) throw new UsageError("several --engine-url need --node (the node they run on: one node report carries them all)");
    if (n > MAX_NODE_REPLICAS) throw new UsageError(`at most ${MAX_NODE_REPLICAS} --engine-url per node`);
    if (command.length > 0) throw new UsageError("with several --engine-url the agent cannot start the engines: start them yourself and leave out -- ENGINE COMMAND");
    if (new Set(engineUrls).size !== n) throw new UsageError("--engine-url: an engine is given twice");
  }
  const engines = (perEngine(v.engine, "--engine", n) ?? Array<string>(n).fill("auto")).map((e) => {
    if (e !== "vllm" && e !== "sglang" && e !== "auto") throw new UsageError(`--engine must be vllm, sglang or auto, not "${e}"`);
    return e as EngineKind;
  });
  const ids = replicaIds(v.id, v.deployment, node, n);
  const advertise = v["advertise-url"];
  if (advertise !== undefined && advertise.length !== n) {
    throw new UsageError(`--advertise-url is given ${advertise.length} times for ${n} engines: give it once per --engine-url`);
  }
  const maxOngoing = (perEngine(v["max-ongoing"], "--max-ongoing", n) ?? Array<string>(n).fill(String(AGENT_DEFAULTS.maxOngoing))).map((m) =>
    int(m, "--max-ongoing", 1, 100_000),
  );
  const models = perEngine(v.models, "--models", n)?.map(modelList);
  const keyFiles = perEngine(v["engine-api-key-file"], "--engine-api-key-file", n);
  const continues = perEngine(v["engine-continues"], "--engine-continues", n)?.map(continuationForms);
  const sglangMode = command.length > 0 ? sglangModeOfCommand(command) : undefined;
  const roles = perEngine(v["engine-role"], "--engine-role", n)?.map(engineRole) ?? (command.length > 0 ? [kvRoleOfCommand(command) ?? sglangMode?.roles] : undefined);
  const bootstrapPorts =
    perEngine(v["engine-bootstrap-port"], "--engine-bootstrap-port", n)?.map((p) => int(p, "--engine-bootstrap-port", 1, 65_535)) ??
    (sglangMode?.bootstrapPort !== undefined ? [sglangMode.bootstrapPort] : undefined);
  const kvEvents = kvEventSources(v["kv-events-endpoint"], v["kv-events-replay-endpoint"], v["kv-events-topic"], n);
  // One agent runs on one node: its engines share its region and place.
  const region = v.region === undefined ? undefined : regionFlag(v.region, "--region");
  const coordinates = v.coordinates === undefined ? undefined : coordinatesFlag(v.coordinates, "--coordinates");
  const shared = {
    deployment: v.deployment,
    edgeUrl: httpUrl(v.edge, "--edge"),
    scrapeIntervalMs: int(v["scrape-interval-ms"]!, "--scrape-interval-ms", 1, MAX_SCRAPE_INTERVAL_MS),
    changeReportDelayMs: int(v["report-delay-ms"]!, "--report-delay-ms", 0, 250),
    drainTimeoutMs: int(v["drain-timeout-ms"]!, "--drain-timeout-ms", 0, 24 * 3600_000),
    drainGraceMs: int(v["drain-grace-ms"]!, "--drain-grace-ms", 0, 600_000),
    engineStartTimeoutMs: int(v["engine-start-timeout-ms"]!, "--engine-start-timeout-ms", 1, 24 * 3600_000),
    engineStopTimeoutMs: int(v["engine-stop-timeout-ms"]!, "--engine-stop-timeout-ms", 0, 3600_000),
  };
  const out: EngineArgs[] = engineUrls.map((url, i) => {
    const options: EngineArgs["options"] = {
      deployment: shared.deployment,
      edgeUrl: shared.edgeUrl,
      replicaId: ids[i]!,
      engineUrl: httpUrl(url, "--engine-url"),
      engine: engines[i]!,
      maxOngoing: maxOngoing[i]!,
      scrapeIntervalMs: shared.scrapeIntervalMs,
      changeReportDelayMs: shared.changeReportDelayMs,
      drainTimeoutMs: shared.drainTimeoutMs,
      drainGraceMs: shared.drainGraceMs,
      engineStartTimeoutMs: shared.engineStartTimeoutMs,
      engineStopTimeoutMs: shared.engineStopTimeoutMs,
    };
    if (advertise !== undefined) options.advertiseUrl = httpUrl(advertise[i]!, "--advertise-url");
    if (models !== undefined) options.models = models[i]!;
    if (node !== undefined) options.node = node;
    if (kvEvents !== undefined) options.kvEvents = kvEvents[i]!;
    if (continues !== undefined) options.continues = continues[i]!;
    if (roles?.[i] !== undefined) options.roles = roles[i]!;
    if (bootstrapPorts?.[i] !== undefined) options.bootstrapPort = bootstrapPorts[i]!;
    if (region !== undefined) options.region = region;
    if (coordinates !== undefined) options.coordinates = coordinates;
    const keyFile = keyFiles?.[i];
    return keyFile !== undefined ? { options, engineKeyFile: keyFile } : { options };
  });
  return node !== undefined ? { engines: out, node, command } : { engines: out, command };
}

/** The first non-empty line of the file: the engine's API key. */
function readEngineKey(path: string): string {
  const key = readFileSync(path, "utf8").split("\n").map((l) => l.trim()).find((l) => l !== "");
  if (key === undefined) throw new Error(`${path} holds no key`);
  if (!ENGINE_KEY.test(key)) throw new Error(`the key in ${path} is not 1-512 visible ASCII characters`);
  return key;
}

function fail(msg: string): never {
  process.stderr.write(`replica agent: ${msg}\n${AGENT_USAGE}\n`);
  process.exit(2);
}

const event = (e: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(e)}\n`);

/** `replica agent ...` (src/replica-entry.ts routes here). Exits the process when the agent is done. */
export async function agentMain(argv: string[]): Promise<void> {
  // Proxy mode (any HTTP app, on the token path) is its own command line.
  const cut = argv.indexOf("--");
  if ((cut < 0 ? argv : argv.slice(0, cut)).includes("--proxy")) return proxyModeMain(argv);
  let parsed: AgentArgs | "help";
  try {
    parsed = parseAgentArgs(argv);
  } catch (err) {
    if (err instanceof UsageError) fail(err.message);
    throw err;
  }
  if (parsed === "help") {
    process.stdout.write(`${AGENT_USAGE}\n`);
    return;
  }
  const { engines, node, command } = parsed;
  const engineKeys: (string | undefined)[] = [];
  for (const e of engines) {
    if (e.engineKeyFile === undefined) {
      engineKeys.push(undefined);
      continue;
    }
    try {
      engineKeys.push(readEngineKey(e.engineKeyFile));
    } catch (err) {
      fail(`--engine-api-key-file: ${(err as Error).message}`);
    }
  }
  const key = process.env.SWITCHYARD_REPLICA_KEY;
  if (!key) fail("SWITCHYARD_REPLICA_KEY is not set (the deployment's replica key; see replica --print-key)");
  if (!REPLICA_KEY_PATTERN.test(key)) fail("SWITCHYARD_REPLICA_KEY must be 64 lowercase hex digits (see replica --print-key)");

  const logFor = (who: string) => (msg: string) => process.stderr.write(`[agent ${who}] ${msg}\n`);
  const first = engines[0]!.options;
  // Several engines: one node report for all of them (one reporter, one nonce counter).
  const reporter =
    engines.length > 1
      ? new NodeReporter({ edgeUrl: first.edgeUrl, key, deployment: first.deployment, node: node!, changeReportDelayMs: first.changeReportDelayMs!, log: logFor(`node ${node!}`) })
      : undefined;
  if (reporter) logFor(`node ${node!}`)(`fronting ${engines.length} engines (${engines.map((e) => e.options.replicaId).join(", ")}); one node report for all`);
  const agents = engines.map(({ options }, i) => {
    const log = logFor(options.replicaId);
    let engineProcess;
    if (command.length > 0) {
      engineProcess = spawnEngine(command);
      log(`started the engine (pid ${engineProcess.pid}): ${command.join(" ")}`);
      event({ event: "engine_started", replica_id: options.replicaId, pid: engineProcess.pid });
    }
    const engineKey = engineKeys[i];
    return new ReplicaAgent({
      ...options,
      key,
      log,
      ...(engineProcess && { engineProcess }),
      ...(engineKey !== undefined && { engineKey }),
      ...(reporter && { nodeReporter: reporter }),
      onRegistered: () =>
        event({
          event: "registered",
          replica_id: options.replicaId,
          url: options.advertiseUrl ?? options.engineUrl,
          deployment: options.deployment,
          ...(node !== undefined && { node }),
        }),
    });
  });
  const shutdown = (reason: string) => {
    for (const a of agents) void a.shutdown(reason);
  };
  process.on("SIGTERM", () => shutdown("SIGTERM"));
  process.on("SIGINT", () => shutdown("SIGINT"));
  if (engines.some((e) => e.engineKeyFile !== undefined)) {
    process.on("SIGHUP", () => {
      engines.forEach((e, i) => {
        if (e.engineKeyFile === undefined) return;
        const replicaId = e.options.replicaId;
        let key: string;
        try {
          key = readEngineKey(e.engineKeyFile);
        } catch (err) {
          logFor(replicaId)(`SIGHUP: keeping the engine key: ${(err as Error).message}`);
          return;
        }
        void agents[i]!.setEngineKey(key).then(() => event({ event: "engine_key_registered", replica_id: replicaId }));
      });
    });
  }
  if (!reporter) {
    const code = await agents[0]!.run();
    event({ event: "exited", replica_id: first.replicaId, code });
    process.exit(code);
  }
  // Each engine leaves on its own (drained by the admin API, or never up); the process once all have.
  const codes = await Promise.all(
    agents.map(async (a, i) => {
      const code = await a.run();
      event({ event: "left", replica_id: engines[i]!.options.replicaId, code });
      return code;
    }),
  );
  reporter.stop();
  const code = Math.max(...codes);
  event({ event: "exited", node, code });
  process.exit(code);
}
