/**
 * `replica agent`: a replica agent in front of an external OpenAI-compatible engine
 * (vLLM, SGLang). It registers the engine's URL with the deployment, reports the
 * engine's load from its /metrics, and drains on SIGTERM/SIGINT before it lets the
 * engine go. docs/agent.md has the operator's guide.
 *
 *   npm run replica -- agent --deployment llm --edge https://edge.example.com \
 *     --engine-url http://10.0.0.7:8000 [--max-ongoing 256] [-- vllm serve MODEL …]
 */
import { readFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { DEPLOYMENT_NAME, ENGINE_KEY, MODEL_ID, REPLICA_ID, REPLICA_KEY_PATTERN } from "../protocol/index.ts";
import { AGENT_DEFAULTS, MAX_SCRAPE_INTERVAL_MS, ReplicaAgent, type AgentOptions, type EngineKind } from "./agent.ts";
import { spawnEngine } from "./engine-process.ts";

export const AGENT_USAGE = `usage: replica agent --deployment NAME --edge URL --engine-url URL
               [--engine vllm|sglang|auto] [--id ID] [--advertise-url URL] [--max-ongoing N]
               [--models ID,ID,...] [--scrape-interval-ms N] [--report-delay-ms N]
               [--drain-timeout-ms N] [--drain-grace-ms N]
               [--engine-start-timeout-ms N] [--engine-stop-timeout-ms N]
               [--engine-api-key-file PATH] [-- ENGINE COMMAND...]
Fronts an external OpenAI-compatible engine: registers it with the deployment (proxies
dispatch straight to --advertise-url, default --engine-url), scrapes its /metrics into
load reports, and on SIGTERM/SIGINT drains, deregisters, then stops the engine.
--engine-url URL        where the agent reaches the engine (GET /health, /v1/models, /metrics)
--engine KIND           metric names to read: vllm, sglang, or auto (whichever are present; default)
--max-ongoing N         the engine's concurrency budget (vLLM --max-num-seqs), reported as capacity;
                        default ${AGENT_DEFAULTS.maxOngoing}
--models IDS            base model ids served; default the engine's GET /v1/models (LoRA adapters
                        in use are added from vllm:lora_requests_info)
--scrape-interval-ms N  1-${MAX_SCRAPE_INTERVAL_MS}, default ${AGENT_DEFAULTS.scrapeIntervalMs}
--report-delay-ms N     coalescing of load-change reports, 0-250, default ${AGENT_DEFAULTS.changeReportDelayMs}
--drain-timeout-ms N    longest wait for the engine to go idle when draining, default ${AGENT_DEFAULTS.drainTimeoutMs}
--drain-grace-ms N      shortest: proxies may still send until they see the drain, default ${AGENT_DEFAULTS.drainGraceMs}
--engine-start-timeout-ms N  for the engine to answer GET /health, default ${AGENT_DEFAULTS.engineStartTimeoutMs}
--engine-stop-timeout-ms N   after SIGTERM to the engine, before SIGKILL, default ${AGENT_DEFAULTS.engineStopTimeoutMs}
--engine-api-key-file PATH  the engine's API key (vLLM --api-key), first line of PATH: registered
                        with the edge, which sends it as Authorization: Bearer on every dispatch;
                        SIGHUP re-reads the file and registers the new key (rotation, docs/agent.md)
-- COMMAND...           start the engine as the agent's child (stdout/stderr shared); the agent
                        stops it after deregistering and exits 1 if it exits on its own
env: SWITCHYARD_REPLICA_KEY (required): the deployment's replica key (replica --print-key)`;

export interface AgentArgs {
  options: Omit<AgentOptions, "key" | "log" | "engineProcess" | "onRegistered" | "fetch" | "now" | "engineKey">;
  /** Where the engine's API key is (its first line), when the engine has one. */
  engineKeyFile?: string;
  /** The engine command after `--` (empty: the engine runs elsewhere). */
  command: string[];
}

function int(raw: string, flag: string, min: number, max: number): number {
  const n = Number(raw);
  if (!/^\d+$/.test(raw) || !Number.isSafeInteger(n) || n < min || n > max) throw new UsageError(`${flag} must be an integer from ${min} to ${max}`);
  return n;
}

function httpUrl(raw: string, flag: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new UsageError(`${flag} "${raw}" is not a URL`);
  }
  if (u.protocol !== "http:" && u.protocol !== "https:") throw new UsageError(`${flag} must be an http(s) URL`);
  return raw;
}

export class UsageError extends Error {}

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
        "engine-url": { type: "string" },
        engine: { type: "string", default: "auto" },
        id: { type: "string" },
        "advertise-url": { type: "string" },
        "max-ongoing": { type: "string", default: String(AGENT_DEFAULTS.maxOngoing) },
        models: { type: "string" },
        "scrape-interval-ms": { type: "string", default: String(AGENT_DEFAULTS.scrapeIntervalMs) },
        "report-delay-ms": { type: "string", default: String(AGENT_DEFAULTS.changeReportDelayMs) },
        "drain-timeout-ms": { type: "string", default: String(AGENT_DEFAULTS.drainTimeoutMs) },
        "drain-grace-ms": { type: "string", default: String(AGENT_DEFAULTS.drainGraceMs) },
        "engine-start-timeout-ms": { type: "string", default: String(AGENT_DEFAULTS.engineStartTimeoutMs) },
        "engine-stop-timeout-ms": { type: "string", default: String(AGENT_DEFAULTS.engineStopTimeoutMs) },
        "engine-api-key-file": { type: "string" },
        help: { type: "boolean", short: "h" },
      },
      strict: true,
      allowPositionals: false,
    }).values;
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
  if (v.help) return "help";
  if (!v.deployment || !v.edge || !v["engine-url"]) throw new UsageError("--deployment, --edge and --engine-url are required");
  if (!DEPLOYMENT_NAME.test(v.deployment)) throw new UsageError(`--deployment "${v.deployment}" is not a deployment name (lowercase letters, digits and '-')`);
  const engine = v.engine as EngineKind;
  if (engine !== "vllm" && engine !== "sglang" && engine !== "auto") throw new UsageError(`--engine must be vllm, sglang or auto, not "${v.engine}"`);
  const replicaId = v.id ?? `${v.deployment}-agent-${process.pid}`;
  if (!REPLICA_ID.test(replicaId)) throw new UsageError(`--id "${replicaId}" is not a replica id (1-128 of [A-Za-z0-9._:-])`);
  let models: string[] | undefined;
  if (v.models !== undefined) {
    models = v.models.split(",").map((m) => m.trim());
    for (const m of models) if (!MODEL_ID.test(m)) throw new UsageError(`--models: "${m}" is not a model id (1-128 of [A-Za-z0-9._:@/+-])`);
    if (new Set(models).size !== models.length) throw new UsageError("--models: a model is listed twice");
  }
  const options: AgentArgs["options"] = {
    deployment: v.deployment,
    edgeUrl: httpUrl(v.edge, "--edge"),
    replicaId,
    engineUrl: httpUrl(v["engine-url"], "--engine-url"),
    engine,
    maxOngoing: int(v["max-ongoing"]!, "--max-ongoing", 1, 100_000),
    scrapeIntervalMs: int(v["scrape-interval-ms"]!, "--scrape-interval-ms", 1, MAX_SCRAPE_INTERVAL_MS),
    changeReportDelayMs: int(v["report-delay-ms"]!, "--report-delay-ms", 0, 250),
    drainTimeoutMs: int(v["drain-timeout-ms"]!, "--drain-timeout-ms", 0, 24 * 3600_000),
    drainGraceMs: int(v["drain-grace-ms"]!, "--drain-grace-ms", 0, 600_000),
    engineStartTimeoutMs: int(v["engine-start-timeout-ms"]!, "--engine-start-timeout-ms", 1, 24 * 3600_000),
    engineStopTimeoutMs: int(v["engine-stop-timeout-ms"]!, "--engine-stop-timeout-ms", 0, 3600_000),
  };
  if (v["advertise-url"] !== undefined) options.advertiseUrl = httpUrl(v["advertise-url"], "--advertise-url");
  if (models !== undefined) options.models = models;
  const engineKeyFile = v["engine-api-key-file"];
  return engineKeyFile !== undefined ? { options, command, engineKeyFile } : { options, command };
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

/** `replica agent ...` (src/replica/cli.ts routes here). Exits the process when the agent is done. */
export async function agentMain(argv: string[]): Promise<void> {
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
  const { options, command, engineKeyFile } = parsed;
  let engineKey: string | undefined;
  if (engineKeyFile !== undefined) {
    try {
      engineKey = readEngineKey(engineKeyFile);
    } catch (err) {
      fail(`--engine-api-key-file: ${(err as Error).message}`);
    }
  }
  const key = process.env.SWITCHYARD_REPLICA_KEY;
  if (!key) fail("SWITCHYARD_REPLICA_KEY is not set (the deployment's replica key; see replica --print-key)");
  if (!REPLICA_KEY_PATTERN.test(key)) fail("SWITCHYARD_REPLICA_KEY must be 64 lowercase hex digits (see replica --print-key)");

  const log = (msg: string) => process.stderr.write(`[agent ${options.replicaId}] ${msg}\n`);
  let engineProcess;
  if (command.length > 0) {
    engineProcess = spawnEngine(command);
    log(`started the engine (pid ${engineProcess.pid}): ${command.join(" ")}`);
    event({ event: "engine_started", replica_id: options.replicaId, pid: engineProcess.pid });
  }
  const agent = new ReplicaAgent({
    ...options,
    key,
    log,
    ...(engineProcess && { engineProcess }),
    ...(engineKey !== undefined && { engineKey }),
    onRegistered: () => event({ event: "registered", replica_id: options.replicaId, url: options.advertiseUrl ?? options.engineUrl, deployment: options.deployment }),
  });
  process.on("SIGTERM", () => void agent.shutdown("SIGTERM"));
  process.on("SIGINT", () => void agent.shutdown("SIGINT"));
  if (engineKeyFile !== undefined) {
    process.on("SIGHUP", () => {
      let key: string;
      try {
        key = readEngineKey(engineKeyFile);
      } catch (err) {
        log(`SIGHUP: keeping the engine key: ${(err as Error).message}`);
        return;
      }
      void agent.setEngineKey(key).then(() => event({ event: "engine_key_registered", replica_id: options.replicaId }));
    });
  }
  const code = await agent.run();
  event({ event: "exited", replica_id: options.replicaId, code });
  process.exit(code);
}
