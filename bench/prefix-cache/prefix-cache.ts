/**
 * Prefix-cache-aware routing (issue 15 part 4): the same multi-turn, shared-prefix
 * chat workload, open loop, against the same kind of fleet behind each balancer,
 * with 1 edge isolate and with several independent ones, and against an oracle.
 *
 *   npx tsx bench/prefix-cache/prefix-cache.ts            # full (~9 min): every arm at 1 and 4 isolates, oracle in both rounds
 *   npx tsx bench/prefix-cache/prefix-cache.ts --quick    # npm run bench (~2.5 min): shorter windows, fewer 1-isolate arms
 *   npx tsx bench/prefix-cache/prefix-cache.ts --family qwen3   # under cache pressure, on a real family: precise vs approximate (below)
 *   npx tsx bench/prefix-cache/prefix-cache.ts [--isolates 4] [--replicas 4] [--seconds 30] [--warmup 10] [--utilization 0.8]
 *        [--rate R] [--arms round_robin,load_aware,prefix_hash,prefix_cache,oracle] [--seed 1] [--seeds N]
 *        [--prefill-token-us 60] [--prefill-ms 5] [--decode-ms 4] [--max-tokens 16] [--kv-fraction 0.5] [--load-factor 1] [--scorers prefill=2,slots=1] [--filters load_line,room] [--no-summaries] [--belief-ms N] [--beliefs]
 *
 * Workload (bench/prefix-cache/prefix-cache-workload.ts): G groups, each with a long shared
 * system prompt; U users per group in multi-turn conversations whose prompt grows
 * each turn with the user's questions and the assistant's actual answers; streamed
 * /v1/chat/completions (TTFT at the first content chunk). Open loop: Poisson
 * arrivals, the same seeded sequence in every arm; an arrival goes to a random
 * idle user (none idle: it is dropped and counted).
 *
 * Fleet, per arm: `--replicas` fresh reference LLM replicas (tiny-lm) whose prefill
 * is the bottleneck, as on a GPU: `--prefill-token-us` per uncached prompt token,
 * one prefill at a time per replica (FIFO), plus `--prefill-ms`; decoding paced by
 * `--decode-ms`, in parallel. Each has a real prefix cache (16-token blocks, LRU
 * eviction) of `--kv-blocks`, sized at `--kv-fraction` of all groups' system
 * prompts: no replica can hold every group's prefix. `--no-summaries`: the replicas'
 * reports carry no cache summary (an engine behind the agent without KV events), so the
 * precise tier knows only dispatches: its own isolate's and, through the relay, its peers'.
 *
 * Capacity: prefill bounds it, ≈ 1e6 / (uncached tokens per request × prefill-token-us
 * + prefill-ms × 1e3) requests/s per replica. The basis is measured: a calibration
 * run of the load_aware arm (closed loop, enough clients to keep every replica's
 * prefill queue busy) gives its saturation throughput, and the open loop offers
 * `--utilization` of that to every arm. The analytic figure at load_aware's and
 * the oracle's hit ratios is printed beside it.
 *
 * Arms, each on its own stack and fresh replicas (empty caches), one deployment
 * serving "tiny-lm" on /v1 (model names are unique across deployments, so one
 * stack per arm): round_robin, load_aware, prefix_hash, prefix_cache, and the
 * oracle (bench/prefix-cache/prefix-cache-oracle.ts: an exact global index from every replica's
 * KV events, longest cached prefix under the bounded-load rule, dispatched straight
 * to the replica, signed as the edge signs: it skips the edge hop, ~1–2 ms). Edge
 * arms run with 1 isolate and with `--isolates` (LocalStack edgeIsolates: each
 * isolate its own port and routing view; every request goes to a random one).
 *
 * `--family NAME` (a registered model family, src/prompt/tokenizers/): the replicas
 * are the engine stand-in for that family (`--model NAME`: its real tokenizer and chat
 * template, the same cache, pacing and KV events; docs/prefix-routing.md), every
 * prompt is counted in its tokens, and the arms are the ones issue 34 compares, all
 * at `--isolates` only: load_aware, prefix_hash, `alone` (llm-d's approximate tier:
 * prefix_cache keyed by `bytes`, the replicas sending no cache summary, and no relay:
 * each isolate knows only its own dispatches), `approximate` (the same with the
 * location's relay: each isolate's dispatches and its peers' notes), `prefix_cache`
 * (precise: the family's keys and the engines' reports) and the oracle. Defaults then put the fleet under cache pressure (--kv-fraction
 * 0.3: each replica holds 30 % of the groups' prefixes, the fleet 120 %, so only a
 * fleet that keeps each group on one replica holds them all).
 *
 * Reports per arm and isolate count: TTFT mean/p50/p90/p99, TPOT, completed req/s,
 * the replicas' own prefix-cache hit ratio (vllm:prefix_cache_hits / _queries, in
 * tokens, deltas over the measured window), load imbalance (max/mean of requests
 * and of prefilled tokens per replica), Durable Object calls per 1,000 requests
 * (routing objects' and relay's own counters over the window, the admin reads' own
 * calls subtracted; telemetry flushes estimated), CPU and load average. Targets are
 * ratios from this run, printed MET/MISS. Writes bench/results/prefix-cache.json.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { writeResult } from "../shared/result-file.ts";
import { judgeTargets, type Target } from "./prefix-cache-targets.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { BALANCER_NAMES } from "../../src/policy/balancers/index.ts";
import { DEFAULT_LOAD_FACTOR } from "../../src/policy/prefix-score.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { chatPrompt } from "../../src/prompt/tiny-lm-chat-template.ts";
import { encode } from "../../src/prompt/tiny-lm-tokenizer.ts";
import { FAMILY_PACKAGES, promptTokenizer, type PromptTokenizerName } from "../../src/prompt/tokenizers/index.ts";
import { provideFamilyFilesFromNodeModules } from "../../src/prompt/tokenizers/node-files.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { cpuSeconds, freePort, workerdPid } from "../shared/load-tools.ts";
import { markdownTable, verdict } from "../shared/table.ts";
import { streamChat, type StreamResult } from "./prefix-cache-client.ts";
import { DispatchSigner, ExactPrefixIndex, KvEventFollower, oracleChoice } from "./prefix-cache-oracle.ts";
import { PrefixWorkload, percentile, poissonArrivals, type Turn, type WorkloadShape } from "./prefix-cache-workload.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    isolates: { type: "string", default: "4" },
    replicas: { type: "string", default: "4" },
    seconds: { type: "string" },
    warmup: { type: "string" },
    utilization: { type: "string", default: "0.8" },
    rate: { type: "string" },
    arms: { type: "string" },
    seed: { type: "string", default: "1" },
    seeds: { type: "string" },
    "prefill-token-us": { type: "string", default: "60" },
    "prefill-ms": { type: "string", default: "5" },
    "decode-ms": { type: "string", default: "4" },
    "max-tokens": { type: "string", default: "16" },
    "kv-fraction": { type: "string" },
    "load-factor": { type: "string" },
    scorers: { type: "string" },
    "no-summaries": { type: "boolean", default: false },
    // The edge's request log lines carry what each prefix choice believed (prefix_held, prefix_most): turns them on to compare those beliefs with the exact index.
    beliefs: { type: "boolean", default: false },
    // policy.prefix.beliefMs for the prefix_cache arms: how long a dispatch or a summary counts as what a replica holds.
    "belief-ms": { type: "string" },
    filters: { type: "string" },
    groups: { type: "string", default: "16" },
    users: { type: "string", default: "3" },
    turns: { type: "string", default: "4" },
    family: { type: "string" },
  },
});
/** A real model family's engine stand-in instead of tiny-lm (undefined: tiny-lm). */
const FAMILY = values.family as PromptTokenizerName | undefined;
if (FAMILY !== undefined) {
  if (FAMILY_PACKAGES[FAMILY] === undefined) throw new Error(`--family: unknown family "${FAMILY}"; known: ${Object.keys(FAMILY_PACKAGES).join(", ")}`);
  if (!provideFamilyFilesFromNodeModules().includes(FAMILY)) throw new Error(`--family ${FAMILY}: its files are not installed (npm install ${FAMILY_PACKAGES[FAMILY]})`);
}
/** The served model: the family's stand-in or tiny-lm. */
const MODEL = FAMILY ?? "tiny-lm";
/** A chat's prompt tokens, as the replicas' model renders them. */
const promptIds: (messages: readonly { role: string; content: string }[]) => ArrayLike<number> =
  FAMILY !== undefined ? (messages) => promptTokenizer(FAMILY).chat(messages, 1e9) : (messages) => encode(chatPrompt(messages));
const quick = values.quick;
const num = (name: keyof typeof values, v: string | undefined, ok: (x: number) => boolean): number => {
  const x = Number(v);
  if (!ok(x)) throw new Error(`--${name}: invalid value ${v}`);
  return x;
};
const posInt = (x: number) => Number.isInteger(x) && x >= 1;
const ISOLATES = num("isolates", values.isolates, posInt);
const REPLICAS = num("replicas", values.replicas, posInt);
const SECONDS = num("seconds", values.seconds ?? (quick ? "8" : "30"), (x) => x > 0 && x <= 60);
const WARMUP_S = num("warmup", values.warmup ?? (quick ? "5" : "10"), (x) => x >= 0 && x <= 30);
const UTILIZATION = num("utilization", values.utilization, (x) => x > 0 && x <= 1.5);
const FIRST_SEED = num("seed", values.seed, Number.isInteger);
/**
 * `--seeds N`: the whole comparison (calibration, every arm) once per workload seed
 * --seed … --seed + N − 1, each target judged in every seed (a miss in any is a MISS),
 * the mean printed beside it. One seed's run is noise-bound at 4 isolates (two runs of the same code
 * differed by ~0.07 in hit ratio, more than the tiers' gap), so a family's run, issue
 * 34's comparison, defaults to 3.
 */
const SEEDS = Array.from({ length: num("seeds", values.seeds ?? (values.family ? "3" : "1"), (x) => posInt(x) && x <= 10) }, (_, i) => FIRST_SEED + i);
const PREFILL_TOKEN_US = num("prefill-token-us", values["prefill-token-us"], (x) => x >= 0);
const PREFILL_MS = num("prefill-ms", values["prefill-ms"], (x) => x >= 0);
const DECODE_MS = num("decode-ms", values["decode-ms"], (x) => x >= 0);
const MAX_TOKENS = num("max-tokens", values["max-tokens"], posInt);
const KV_FRACTION = num("kv-fraction", values["kv-fraction"] ?? (FAMILY ? "0.3" : "0.5"), (x) => x > 0 && x <= 4);
/** ε of the bounded-load line, for the prefix balancers (policy.prefix.loadFactor) and the oracle alike; default the deployment default. */
const LOAD_FACTOR = values["load-factor"] === undefined ? DEFAULT_LOAD_FACTOR : num("load-factor", values["load-factor"], (x) => x >= 0 && x <= 10);
/** `--scorers name=weight,…`: the prefix_cache arms' cost terms (policy.prefix.scorers); unset: the defaults. */
const SCORERS: Record<string, number> | undefined =
  values.scorers === undefined
    ? undefined
    : Object.fromEntries(
        values.scorers.split(",").map((pair) => {
          const [name, weight] = pair.split("=");
          return [name!, num("scorers", weight, (x) => x >= 0)];
        }),
      );
/** `--belief-ms N`: the prefix_cache arms' policy.prefix.beliefMs; unset: the default. */
const BELIEF_MS = values["belief-ms"] === undefined ? undefined : num("belief-ms", values["belief-ms"], (x) => Number.isInteger(x) && x >= 100 && x <= 600_000);
/** `--filters name,…`: the prefix_cache arms' filters (a profile with the `cheapest` picker); unset: the built-in profile's (load_line, room). */
const FILTERS: string[] | undefined = values.filters === undefined ? undefined : values.filters.split(",").filter((f) => f !== "");
/**
 * Per replica: about what its KV cache holds running at once (KV_BLOCKS / a mean
 * prompt's blocks ≈ 8), with headroom; beyond it requests wait in the replica's
 * admission queue (MAX_QUEUED) rather than being refused, as an engine's waiting
 * queue holds them.
 */
const MAX_ONGOING = 16;
const MAX_QUEUED = 64;
/** After the last arrival, in-flight requests get this long, then they are aborted (and counted as failed). */
const DRAIN_S = quick ? 8 : 15;
/** No request runs longer than this (a bound on every load phase). */
const REQUEST_TIMEOUT_MS = 60_000;
const CALIBRATION = { warmupS: quick ? 3 : 4, seconds: quick ? 5 : 8, clientsPerReplica: 4 };
const SHAPE: WorkloadShape = {
  groups: num("groups", values.groups, posInt),
  usersPerGroup: num("users", values.users, posInt),
  systemMin: 2000,
  systemMax: 6000,
  questionMin: 100,
  questionMax: 300,
  turns: num("turns", values.turns, posInt),
};

type ArmName = "round_robin" | "load_aware" | "prefix_hash" | "alone" | "approximate" | "no_home" | "prefix_cache" | "oracle";
const ARM_ORDER: ArmName[] = FAMILY
  ? ["load_aware", "prefix_hash", "alone", "approximate", "no_home", "prefix_cache", "oracle"]
  : ["round_robin", "load_aware", "prefix_hash", "prefix_cache", "oracle"];
/** The approximate tiers: prefix_cache on `bytes` keys, the replicas sending no cache summary; `alone` also without the location's relay. */
const approximateArm = (arm: ArmName) => arm === "approximate" || arm === "alone";
const LABEL: Record<ArmName, string> = {
  round_robin: "round_robin",
  load_aware: "load_aware (default)",
  prefix_hash: "prefix_hash (hash tier)",
  alone: "prefix_cache approximate, each isolate alone (bytes keys, no engine reports, no relay: llm-d's approximate)",
  approximate: "prefix_cache approximate (bytes keys, no engine reports)",
  no_home: `prefix_cache precise without homes (${FAMILY} keys, engine reports; the tier before demand placement)`,
  prefix_cache: FAMILY ? `prefix_cache precise (${FAMILY} keys, engine reports)` : "prefix_cache (precise tier)",
  oracle: "oracle: exact-index longest-prefix router, no edge hop",
};
const chosenArms = new Set<ArmName>(values.arms ? (values.arms.split(",").map((s) => s.trim()) as ArmName[]) : ARM_ORDER);
for (const a of chosenArms) if (!ARM_ORDER.includes(a)) throw new Error(`--arms: unknown arm "${a}"; known: ${ARM_ORDER.join(", ")}`);

// --- what the tree has (other work may still be landing) ---------------------------

/** Whether `policy.balancer` accepts `name` in this tree (the registry, src/policy/balancers/). */
const balancerAvailable = (name: string): boolean => (BALANCER_NAMES as readonly string[]).includes(name);
const replicaCli = readFileSync(resolve(import.meta.dirname, "../../src/replica/cli.ts"), "utf8");
const replicaHas = (flag: string) => replicaCli.includes(`"${flag}"`);
const FEATURES = {
  prefillTokenUs: replicaHas("prefill-token-us"),
  kvEvents: replicaHas("kv-events-endpoint"),
};

// --- the workload and the fleet's size ----------------------------------------------

/** A seed's workload sizes its fleet: each replica's KV cache is KV_FRACTION of that workload's groups' prefixes. */
interface Fleet {
  seed: number;
  totalPrefixBlocks: number;
  kvBlocks: number;
  /** Mean system prompt, characters. */
  meanSystem: number;
}
function fleetFor(seed: number): Fleet {
  const sample = new PrefixWorkload(SHAPE, seed);
  const totalPrefixBlocks = sample.systemPrompts.reduce((a, s) => a + Math.floor(promptIds([{ role: "system", content: s }]).length / 16), 0);
  return { seed, totalPrefixBlocks, kvBlocks: Math.ceil(KV_FRACTION * totalPrefixBlocks), meanSystem: sample.systemPrompts.reduce((a, s) => a + s.length, 0) / SHAPE.groups };
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const mean = (xs: readonly number[]) => {
  const f = xs.filter(Number.isFinite);
  return f.length ? f.reduce((a, b) => a + b, 0) / f.length : NaN;
};

function machineCpu(): { busy: number; total: number } {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const idle = f[3]! + (f[4] ?? 0);
  return { busy: f.reduce((a, b) => a + b, 0) - idle, total: f.reduce((a, b) => a + b, 0) };
}
function ownCpuS(pids: readonly number[]): number {
  let s = 0;
  for (const p of pids) {
    try {
      s += cpuSeconds(p);
    } catch {
      // exited
    }
  }
  return s;
}

// --- replicas' /metrics ---------------------------------------------------------------

interface ReplicaCounters {
  queries: number;
  hits: number;
  promptTokens: number;
}
function sumMetric(text: string, name: string): number {
  let sum = 0;
  let seen = false;
  for (const line of text.split("\n")) {
    if (!line.startsWith(name) || (line[name.length] !== "{" && line[name.length] !== " ")) continue;
    sum += Number(line.slice(line.lastIndexOf(" ") + 1));
    seen = true;
  }
  return seen ? sum : NaN;
}
async function replicaCounters(url: string): Promise<ReplicaCounters> {
  const text = await (await fetch(`${url}/metrics`, { signal: AbortSignal.timeout(10_000) })).text();
  return {
    queries: sumMetric(text, "vllm:prefix_cache_queries_total"),
    hits: sumMetric(text, "vllm:prefix_cache_hits_total"),
    promptTokens: sumMetric(text, "vllm:prompt_tokens_total"),
  };
}

// --- Durable Object counters (the objects' own, as bench/state-cost/state-cost.ts reads them) ----

interface DoCounters {
  routerSnapshotCalls: number;
  relayCalls: number;
  sessionCalls: number;
  reports: number;
}
async function doCounters(stack: LocalStack, deployment: string): Promise<DoCounters> {
  const res = await fetch(`${stack.workerdUrl}/-/deployments/${deployment}`, { headers: { authorization: `Bearer ${stack.adminSecret}` }, signal: AbortSignal.timeout(15_000) });
  if (!res.ok) throw new Error(`GET /-/deployments/${deployment}: ${res.status}`);
  const j = (await res.json()) as { router: { snapshotCalls: number; reports: number }; relay: { calls: number } | null; sessions: { resolves: number; rebinds: number } };
  return { routerSnapshotCalls: j.router.snapshotCalls, relayCalls: j.relay?.calls ?? 0, sessionCalls: j.sessions.resolves + j.sessions.rebinds, reports: j.router.reports };
}
const doDelta = (a: DoCounters, b: DoCounters): DoCounters => ({
  routerSnapshotCalls: b.routerSnapshotCalls - a.routerSnapshotCalls,
  relayCalls: b.relayCalls - a.relayCalls,
  sessionCalls: b.sessionCalls - a.sessionCalls,
  reports: b.reports - a.reports,
});

// --- one arm on its own stack -------------------------------------------------------

interface Sample {
  /** Arrival, ms from the run's start. */
  atMs: number;
  result: StreamResult;
  user: number;
  group: number;
  turn: number;
  promptTokens: number;
  /** Oracle only: the blocks its index said the chosen replica held. */
  heldBlocks?: number;
  /** With KV events: what the exact index says each replica held when the request was sent. */
  heldAtSend?: Map<string, number>;
  /** The prompt's full blocks. */
  promptBlocks?: number;
  /** The edge's request id (edge arms): its log line's prefix belief is looked up by it. */
  requestId?: string;
}

interface Phase {
  arm: ArmName;
  isolates: number;
  mode: "open" | "closed";
  fleet: Fleet;
}

interface PhaseResult {
  arm: ArmName;
  label: string;
  /** The workload seed (its arrivals and conversations). */
  seed: number;
  isolates: number;
  /** The isolate count of the round it ran in (the oracle runs in each round without the edge). */
  round: number;
  mode: "open" | "closed";
  offeredRps: number;
  arrivals: number;
  dropped: number;
  requests: number;
  ok: number;
  failed: number;
  failures: Record<string, number>;
  failureExamples: string[];
  throughputRps: number;
  ttft: { mean: number; p50: number; p90: number; p99: number };
  tpot: { mean: number; p50: number; p90: number };
  e2eP50Ms: number;
  hitRatio: number;
  queries: number;
  hits: number;
  /** Tokens the replicas prefilled (queries − hits), i.e. uncached prompt tokens. */
  prefilled: number;
  uncachedPerRequest: number;
  perReplica: { id: string; requests: number; prefilled: number; hitRatio: number }[];
  /** Of the window's turns after a conversation's first, the share served by the replica that served its previous turn. */
  sameReplicaAsPreviousTurn: number;
  /** Next turns' gap after their previous turn ended: p50 of those that moved and of all, and how many came within 1 s. */
  nextTurnGap: { movedP50Ms: number; p50Ms: number; movedUnder1s: number; under1s: number; moved: number };
  imbalanceRequests: number;
  imbalancePrefill: number;
  doCalls: DoCounters & { adminReadCalls: number; routing: number; telemetryEstimated: number; total: number; per1000: number; routingPer1000: number; perIsolatePerS: number };
  /** Shares of the machine over the window; CPU ms per request of this bench's processes. */
  cpu: { machineBusy: number; own: number; other: number; loadavg1m: number; msPerRequest: { bench: number; workerd: number; replicas: number } };
  generatorLagP99Ms: number;
  /** Set when the machine was busy (> 90 %), other work took > 20 % of it, or the generator lagged > 20 ms (p99). */
  warning?: string;
  oracle?: { batches: number; gaps: number; orphans: number; sameHash: number; stored: number; removed: number; predictedHitTokens: number; indexSource: string };
  /**
   * Where the uncached tokens came from, by the exact index at each request's send
   * (every arm's replicas publish KV events): `choice` the blocks some replica held
   * beyond what the chosen one did (new conversations / later turns), `cold` the
   * blocks no replica held. Tokens per request.
   */
  loss?: { choiceFirstTurn: number; choiceLaterTurn: number; cold: number; missedBest: number };
  /**
   * With --beliefs (edge arms): what each prefix choice believed (the request's log line)
   * against the exact index at send. Of all requests with a belief: `missedBelieving` went
   * to a replica holding less than another while the isolate believed it held the most
   * (wrong beliefs), `missedMoving` while it believed another held more (moved by load or
   * cost); `over` believed more blocks on the chosen replica than it held (evicted or never
   * there), `under` fewer; `overBlocks` the mean excess of those over.
   */
  beliefs?: {
    n: number;
    missedBelieving: number;
    missedMoving: number;
    over: number;
    under: number;
    overBlocks: number;
    found?: { n: number; over: number; under: number; overBlocks: number; underBlocks: number };
    /** Demand placement: the share of requests with a home; of those, served at home, served elsewhere after a refusal, and a group's home differing from its previous request's. */
    homes?: { homed: number; atHome: number; awayAfterRefusal: number; changes: number };
  };
  notes: string[];
}

const functionsRoot = mkdtempSync(join(tmpdir(), "switchyard-prefix-cache-"));
if (values.beliefs) process.env.SWITCHYARD_REQUEST_LOGS = "on";
process.env.SWITCHYARD_REQUEST_LOGS ??= "off";
const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));
let current: LocalStack | undefined;
process.on("SIGINT", () => {
  current?.killAll();
  process.exit(130);
});

function deploymentName(arm: ArmName): string {
  return `pc-${arm.replaceAll("_", "-")}`;
}

function replicaArgs(arm: ArmName, kvBlocks: number, eventsPort?: number): string[] {
  return [
    "--backend", "llm", "--model", MODEL,
    "--kv-blocks", String(kvBlocks),
    "--prefill-ms", String(PREFILL_MS),
    "--decode-ms", String(DECODE_MS),
    "--max-queued", String(MAX_QUEUED),
    ...(FEATURES.prefillTokenUs ? ["--prefill-token-us", String(PREFILL_TOKEN_US)] : []),
    ...(eventsPort !== undefined ? ["--kv-events-endpoint", `tcp://127.0.0.1:${eventsPort}`] : []),
    ...(values["no-summaries"] || approximateArm(arm) ? ["--no-cache-summary"] : []),
    ...(values.beliefs ? ["--enable-prompt-tokens-details"] : []),
  ];
}

/** Runs one arm: a fresh stack and replicas, an unmeasured warm-up then the measured window. */
async function runPhase(p: Phase, rate: number): Promise<PhaseResult> {
  const name = deploymentName(p.arm);
  const named = p.arm === "oracle" ? "load_aware" : approximateArm(p.arm) || p.arm === "no_home" ? "prefix_cache" : p.arm;
  // --filters: the prefix_cache arms as a profile with these filters and its picker; no_home: the profile before the home filter.
  const balancer =
    FILTERS !== undefined && named === "prefix_cache"
      ? { filters: FILTERS, picker: "cheapest" }
      : p.arm === "no_home"
        ? { filters: ["load_line", "room"], picker: "cheapest" }
        : named;
  // approximate: keys no engine report can match (and the replicas send none); otherwise the model's own ("auto").
  const tokenizer = approximateArm(p.arm) ? "bytes" : "auto";
  const dir = mkdtempSync(join(functionsRoot, `${name}-`));
  const functionsDir = join(dir, "functions");
  mkdirSync(functionsDir);
  writeFileSync(
    join(functionsDir, `${name}.ts`),
    `import { defineDeployment } from ${config};
export default defineDeployment({
  name: ${JSON.stringify(name)}, routePrefix: ${JSON.stringify(`/${name}`)}, access: { public: true },
  backend: { kind: "llm", model: ${JSON.stringify(MODEL)} }, openai: { models: [${JSON.stringify(MODEL)}] },
  localReplicas: 0, maxOngoingRequests: ${MAX_ONGOING},${p.arm === "alone" ? `\n  routing: { relay: false },` : ""}
  policy: { balancer: ${JSON.stringify(balancer)}, prefix: { loadFactor: ${LOAD_FACTOR}, tokenizer: ${JSON.stringify(tokenizer)}${SCORERS ? `, scorers: ${JSON.stringify(SCORERS)}` : ""}${BELIEF_MS !== undefined ? `, beliefMs: ${BELIEF_MS}` : ""} } },
});
`,
  );
  const log: string[] = [];
  const isolates = p.arm === "oracle" ? 1 : p.isolates;
  /** Each edge request's prefix belief, by request id, from its log line (--beliefs). */
  const beliefs = new Map<string, { blocks: number; held: number; most: number; home?: string; attempts: number }>();
  const readBelief = (l: string) => {
    const at = l.indexOf('{"msg":"request"');
    if (at < 0 || !l.includes('"prefix_held"')) return;
    const r = JSON.parse(l.slice(at)) as { request_id: string; attempts: number; prefix_blocks: number; prefix_held: number; prefix_most: number; prefix_home?: string };
    beliefs.set(r.request_id, { blocks: r.prefix_blocks, held: r.prefix_held, most: r.prefix_most, attempts: r.attempts, ...(r.prefix_home !== undefined && { home: r.prefix_home }) });
  };
  const stack = new LocalStack({
    port: 0,
    functionsDir,
    stateDir: join(dir, "state"),
    freshState: true,
    edgeIsolates: isolates,
    log: (l) => {
      if (values.beliefs) readBelief(l);
      log.push(l);
    },
  });
  current = stack;
  const keepLog = setInterval(() => log.splice(0, Math.max(0, log.length - 200)), 2_000);
  const followers: KvEventFollower[] = [];
  const notes: string[] = [];
  try {
    await stack.start();
    const index = new ExactPrefixIndex();
    // Every arm's replicas publish KV events: the oracle routes by them; the other arms'
    // index only explains where their misses came from (the loss figures).
    const useEvents = FEATURES.kvEvents;
    const ports = useEvents ? await Promise.all(Array.from({ length: REPLICAS }, () => freePort())) : [];
    const replicas = await Promise.all(
      Array.from({ length: REPLICAS }, (_, i) => stack.startReplica(name, { id: `${name}-${i + 1}`, maxOngoing: MAX_ONGOING, backendArgs: replicaArgs(p.arm, p.fleet.kvBlocks, ports[i]) })),
    );
    if (useEvents) {
      for (const [i, r] of replicas.entries()) {
        const f = new KvEventFollower(r.id, index);
        await f.connect(`tcp://127.0.0.1:${ports[i]}`);
        followers.push(f);
      }
      await sleep(300); // ZMQ's slow joiner: the subscription reaches the publisher before the first event
    } else if (p.arm === "oracle") {
      notes.push("oracle without KV events (replica lacks --kv-events-endpoint): index approximated from its own dispatches");
    }
    for (let i = 0; i < 100; i++) {
      const s = await stack.deploymentState(name);
      if (s.snapshot.replicas.filter((r) => r.load.state === "ready").length >= REPLICAS) break;
      await sleep(100);
    }

    // How requests reach the replicas.
    const signer = p.arm === "oracle" ? new DispatchSigner(await stack.replicaKey(name), name) : undefined;
    const inflight = new Map(replicas.map((r) => [r.id, 0]));
    const urlOf = new Map(replicas.map((r) => [r.id, r.url]));
    const seed = p.fleet.seed;
    const isolatePick = mulberry32(seed ^ 0x51ed);
    let requestSeq = 0;
    const send = async (turn: Turn, scheduledAt: number, stop: AbortSignal): Promise<{ result: StreamResult; heldBlocks?: number; heldAtSend?: Map<string, number>; promptBlocks?: number; requestId?: string }> => {
      const signal = AbortSignal.any([stop, AbortSignal.timeout(REQUEST_TIMEOUT_MS)]);
      // ignore_eos: every answer is MAX_TOKENS long (the model would otherwise end its turn at a newline), as the workload says.
      // include_usage: the last chunk says how much of the prompt the replica found cached (--beliefs compares it with the edge's belief).
      const body = JSON.stringify({ model: MODEL, messages: turn.messages, max_tokens: MAX_TOKENS, stream: true, ...(values.beliefs ? { stream_options: { include_usage: true } } : {}), ignore_eos: true, seed: (turn.user * 1_000 + turn.conversation * 50 + turn.turn) | 0 });
      const keys = blockKeys(promptIds(turn.messages));
      const explain = useEvents ? { heldAtSend: new Map(replicas.map((r) => [r.id, index.heldPrefix(r.id, keys)] as const)), promptBlocks: keys.length } : {};
      if (!signer) {
        const edge = stack.edgeUrls[Math.floor(isolatePick() * isolates)]!;
        const requestId = `pc-${++requestSeq}`;
        return { result: await streamChat(`${edge}/v1/chat/completions`, body, { "x-request-id": requestId }, scheduledAt, signal, MAX_TOKENS), ...explain, requestId };
      }
      const { choice, heldBlocks } = oracleChoice(
        replicas.map((r) => ({ id: r.id, load: inflight.get(r.id)!, capacity: MAX_ONGOING })),
        keys,
        (c) => index.heldPrefix(c.id, keys),
        LOAD_FACTOR,
      );
      if (!useEvents) index.stored(choice.id, keys); // the approximation: what it sent, never evicted
      inflight.set(choice.id, inflight.get(choice.id)! + 1);
      try {
        const headers = await signer.headers("/v1/chat/completions", `pc-${++requestSeq}`, choice.id, body);
        const result = await streamChat(`${urlOf.get(choice.id)}/v1/chat/completions`, body, headers, scheduledAt, signal, MAX_TOKENS);
        result.replica = choice.id;
        return { result, heldBlocks, ...explain };
      } finally {
        inflight.set(choice.id, inflight.get(choice.id)! - 1);
      }
    };

    // Warm every connection once (unmeasured, outside the run).
    const groups = { bench: [process.pid], workerd: [workerdPid(join(dir, "state", "workerd.capnp"))], replicas: replicas.flatMap((r) => (r.child.pid ? [r.child.pid] : [])) };
    const ownPids = [...groups.bench, ...groups.workerd, ...groups.replicas];
    const groupCpu = () => ({ bench: ownCpuS(groups.bench), workerd: ownCpuS(groups.workerd), replicas: ownCpuS(groups.replicas) });
    let g0 = groupCpu();
    let g1 = g0;
    const workload = new PrefixWorkload(SHAPE, seed);
    const samples: Sample[] = [];
    const lags: number[] = [];
    const abort = new AbortController();
    const pending = new Set<Promise<void>>();
    const start = performance.now();
    const fire = (turn: Turn, scheduled: number) => {
      lags.push(performance.now() - scheduled);
      const promptTokens = promptIds(turn.messages).length;
      const pr = send(turn, scheduled, abort.signal).then(({ result, heldBlocks, heldAtSend, promptBlocks, requestId }) => {
        workload.complete(turn, result.answer);
        samples.push({ atMs: scheduled - start, result, user: turn.user, group: turn.group, turn: turn.turn, promptTokens, ...(heldBlocks !== undefined ? { heldBlocks } : {}), ...(heldAtSend ? { heldAtSend, promptBlocks } : {}), ...(requestId ? { requestId } : {}) });
      });
      pending.add(pr);
      void pr.then(() => pending.delete(pr));
    };

    // Window marks: counters at the start and end of the measured window.
    let m0: Promise<{ reps: ReplicaCounters[]; dos: DoCounters }> | undefined;
    let m1: Promise<{ reps: ReplicaCounters[]; dos: DoCounters }> | undefined;
    let cpu0 = machineCpu();
    let cpu1 = cpu0;
    let own0 = 0;
    let own1 = 0;
    const read = async () => ({ reps: await Promise.all(replicas.map((r) => replicaCounters(r.url))), dos: await doCounters(stack, name) });
    const measureStart = () => {
      cpu0 = machineCpu();
      own0 = ownCpuS(ownPids);
      g0 = groupCpu();
      m0 = read();
    };
    const measureEnd = () => {
      cpu1 = machineCpu();
      own1 = ownCpuS(ownPids);
      g1 = groupCpu();
      m1 = read();
    };
    const loadavg1m = loadavg()[0]!;
    let arrivals = 0;
    let dropped = 0;
    if (p.mode === "open") {
      const times = poissonArrivals(rate, WARMUP_S + SECONDS, mulberry32(seed));
      let marked = 0;
      for (const t of times) {
        const due = start + t;
        const wait = due - performance.now();
        if (wait > 0) await sleep(wait);
        if (marked === 0 && t >= WARMUP_S * 1000) {
          measureStart();
          marked = 1;
        }
        arrivals += t >= WARMUP_S * 1000 ? 1 : 0;
        const turn = workload.next();
        if (!turn) {
          if (t >= WARMUP_S * 1000) dropped++;
          continue;
        }
        fire(turn, due);
      }
      await sleep(Math.max(0, start + (WARMUP_S + SECONDS) * 1000 - performance.now()));
      if (marked === 0) measureStart();
      measureEnd();
    } else {
      // Closed loop (calibration): enough clients to keep every replica's prefill queue busy.
      const clients = CALIBRATION.clientsPerReplica * REPLICAS;
      const until = start + (CALIBRATION.warmupS + CALIBRATION.seconds) * 1000;
      setTimeout(measureStart, CALIBRATION.warmupS * 1000);
      await Promise.all(
        Array.from({ length: clients }, async () => {
          while (performance.now() < until) {
            const turn = workload.next();
            if (!turn) {
              await sleep(5);
              continue;
            }
            const scheduled = performance.now();
            const { result } = await send(turn, scheduled, abort.signal);
            workload.complete(turn, result.answer);
            samples.push({ atMs: scheduled - start, result, user: turn.user, group: turn.group, turn: turn.turn, promptTokens: promptIds(turn.messages).length });
          }
        }),
      );
      measureEnd();
    }
    const endOfArrivals = performance.now();
    // Drain, bounded: what has not finished by then is aborted and counted as failed.
    await Promise.race([Promise.all(pending), sleep(DRAIN_S * 1000)]);
    if (pending.size > 0) {
      notes.push(`${pending.size} requests still running ${DRAIN_S} s after the last arrival: aborted`);
      abort.abort();
      await Promise.all(pending);
    }
    const drainMs = performance.now() - endOfArrivals;
    const before = await m0!;
    const after = await m1!;
    // The admin read's own Durable Object calls: one more read now, with no traffic.
    const again = await doCounters(stack, name);
    const adminRead = doDelta(after.dos, again);
    const d = doDelta(before.dos, after.dos);

    const windowS = p.mode === "open" ? SECONDS : CALIBRATION.seconds;
    const w0 = (p.mode === "open" ? WARMUP_S : CALIBRATION.warmupS) * 1000;
    const inWindow = samples.filter((s) => s.atMs >= w0 && s.atMs < w0 + windowS * 1000);
    const ok = inWindow.filter((s) => s.result.answer !== undefined);
    const failures: Record<string, number> = {};
    for (const s of inWindow) if (s.result.answer === undefined) failures[String(s.result.status)] = (failures[String(s.result.status)] ?? 0) + 1;
    const perReplica = replicas.map((r, i) => {
      const q = after.reps[i]!.queries - before.reps[i]!.queries;
      const h = after.reps[i]!.hits - before.reps[i]!.hits;
      return { id: r.id, requests: ok.filter((s) => s.result.replica === r.id).length, prefilled: q - h, hitRatio: h / q };
    });
    const queries = perReplica.reduce((a, r, i) => a + (after.reps[i]!.queries - before.reps[i]!.queries), 0);
    const hits = perReplica.reduce((a, r, i) => a + (after.reps[i]!.hits - before.reps[i]!.hits), 0);
    const maxOverMean = (xs: number[]) => Math.max(...xs) / mean(xs);
    // Where each user's previous turn went (the same conversation: turn k-1 before turn k).
    const previous = new Map<number, { turn: number; replica: string; doneAtMs: number }>();
    let followUps = 0;
    let stayed = 0;
    /** Of next turns, the time from the previous turn's end to this one's send (those that moved, and all). */
    const movedGaps: number[] = [];
    const allGaps: number[] = [];
    for (const s of [...samples].sort((a, b) => a.atMs - b.atMs)) {
      const prev = previous.get(s.user);
      if (s.atMs >= w0 && s.atMs < w0 + windowS * 1000 && s.result.answer !== undefined && prev && s.turn === prev.turn + 1) {
        followUps++;
        if (prev.replica === s.result.replica) stayed++;
        else movedGaps.push(s.atMs - prev.doneAtMs);
        allGaps.push(s.atMs - prev.doneAtMs);
      }
      if (s.result.answer !== undefined) previous.set(s.user, { turn: s.turn, replica: s.result.replica, doneAtMs: s.atMs + s.result.e2eMs });
    }
    const routing = d.routerSnapshotCalls - adminRead.routerSnapshotCalls + d.relayCalls - adminRead.relayCalls + d.sessionCalls;
    const telemetryEstimated = p.arm === "oracle" ? 0 : Math.round((isolates * windowS) / 2);
    const requests = inWindow.length;
    const machineBusy = (cpu1.busy - cpu0.busy) / Math.max(1, cpu1.total - cpu0.total);
    const own = (own1 - own0) / windowS / cpus().length;
    const result: PhaseResult = {
      arm: p.arm,
      label: LABEL[p.arm],
      seed,
      isolates: p.arm === "oracle" ? 0 : isolates,
      round: p.isolates,
      mode: p.mode,
      offeredRps: p.mode === "open" ? rate : NaN,
      arrivals: p.mode === "open" ? arrivals : requests,
      dropped,
      requests,
      ok: ok.length,
      failed: requests - ok.length,
      failures,
      failureExamples: inWindow.filter((s) => s.result.answer === undefined).slice(0, 3).map((s) => `${s.result.status} ${s.result.error ?? ""}`.slice(0, 200)),
      // Open loop: requests that arrived in the window and completed, per second of window;
      // closed loop: completions whose request started in the window.
      throughputRps: ok.length / windowS,
      ttft: { mean: mean(ok.map((s) => s.result.ttftMs)), p50: percentile(ok.map((s) => s.result.ttftMs), 50), p90: percentile(ok.map((s) => s.result.ttftMs), 90), p99: percentile(ok.map((s) => s.result.ttftMs), 99) },
      tpot: { mean: mean(ok.map((s) => s.result.tpotMs)), p50: percentile(ok.map((s) => s.result.tpotMs), 50), p90: percentile(ok.map((s) => s.result.tpotMs), 90) },
      e2eP50Ms: percentile(ok.map((s) => s.result.e2eMs), 50),
      hitRatio: hits / queries,
      queries,
      hits,
      prefilled: queries - hits,
      uncachedPerRequest: (queries - hits) / Math.max(1, ok.length),
      perReplica,
      sameReplicaAsPreviousTurn: stayed / followUps,
      nextTurnGap: { movedP50Ms: percentile(movedGaps, 50), p50Ms: percentile(allGaps, 50), movedUnder1s: movedGaps.filter((g) => g < 1_000).length, under1s: allGaps.filter((g) => g < 1_000).length, moved: movedGaps.length },
      imbalanceRequests: maxOverMean(perReplica.map((r) => r.requests)),
      imbalancePrefill: maxOverMean(perReplica.map((r) => r.prefilled)),
      doCalls: {
        ...d,
        adminReadCalls: adminRead.routerSnapshotCalls + adminRead.relayCalls,
        routing,
        telemetryEstimated,
        total: routing + telemetryEstimated,
        per1000: (1000 * (routing + telemetryEstimated)) / Math.max(1, requests),
        routingPer1000: (1000 * routing) / Math.max(1, requests),
        perIsolatePerS: routing / windowS / Math.max(1, isolates),
      },
      cpu: {
        machineBusy,
        own,
        other: Math.max(0, machineBusy - own),
        loadavg1m,
        msPerRequest: {
          bench: (1000 * (g1.bench - g0.bench)) / Math.max(1, requests),
          workerd: (1000 * (g1.workerd - g0.workerd)) / Math.max(1, requests),
          replicas: (1000 * (g1.replicas - g0.replicas)) / Math.max(1, requests),
        },
      },
      generatorLagP99Ms: percentile(lags, 99),
      notes,
    };
    if (machineBusy > 0.9 || result.cpu.other > 0.2 || result.generatorLagP99Ms > 20) {
      result.warning = `machine ${(100 * machineBusy).toFixed(0)} % busy, ${(100 * result.cpu.other).toFixed(0)} % other work, generator lag p99 ${result.generatorLagP99Ms.toFixed(0)} ms`;
    }
    if (drainMs > 2_000) notes.push(`drain took ${(drainMs / 1000).toFixed(1)} s`);
    const explained = ok.filter((s) => s.heldAtSend !== undefined);
    if (explained.length > 0) {
      let first = 0;
      let later = 0;
      let cold = 0;
      let missedBest = 0;
      for (const s of explained) {
        const held = [...s.heldAtSend!.values()];
        const best = Math.max(0, ...held);
        const chosen = s.heldAtSend!.get(s.result.replica) ?? 0;
        if (chosen < best) missedBest++;
        if (s.turn === 1) first += 16 * (best - chosen);
        else later += 16 * (best - chosen);
        cold += 16 * (s.promptBlocks! - best);
      }
      const n = explained.length;
      result.loss = { choiceFirstTurn: first / n, choiceLaterTurn: later / n, cold: cold / n, missedBest: missedBest / n };
      const believed = explained.flatMap((s) => {
        const b = s.requestId === undefined ? undefined : beliefs.get(s.requestId);
        return b ? [{ s, b }] : [];
      });
      if (believed.length > 0) {
        let missedBelieving = 0;
        let missedMoving = 0;
        let over = 0;
        let under = 0;
        let overBlocks = 0;
        for (const { s, b } of believed) {
          const exact = s.heldAtSend!.get(s.result.replica) ?? 0;
          if (exact < Math.max(0, ...s.heldAtSend!.values())) {
            if (b.held >= b.most) missedBelieving++;
            else missedMoving++;
          }
          if (b.held > exact) {
            over++;
            overBlocks += b.held - exact;
          } else if (b.held < exact) under++;
        }
        const m = believed.length;
        result.beliefs = { n: m, missedBelieving: missedBelieving / m, missedMoving: missedMoving / m, over: over / m, under: under / m, overBlocks: over > 0 ? overBlocks / over : 0 };
        // Demand placement (the home filter): how many had a home, how many were served there, how many went
        // elsewhere after a refusal (more than one attempt), and how often a group's home changed between its requests.
        const homed = believed.filter(({ b }) => b.home !== undefined);
        if (homed.length > 0) {
          const lastHome = new Map<number, string>();
          let changes = 0;
          for (const { s, b } of [...homed].sort((x, y) => x.s.atMs - y.s.atMs)) {
            const before = lastHome.get(s.group);
            if (before !== undefined && before !== b.home) changes++;
            lastHome.set(s.group, b.home!);
          }
          const away = homed.filter(({ s, b }) => s.result.replica !== b.home);
          result.beliefs.homes = {
            homed: homed.length / m,
            atHome: (homed.length - away.length) / homed.length,
            awayAfterRefusal: away.filter(({ b }) => b.attempts > 1).length / homed.length,
            changes: changes / homed.length,
          };
        }
        // Against what the replica found cached when it scheduled the request (its usage), the truth that its prefill paid for.
        const found = believed.filter(({ s }) => s.result.cachedTokens !== undefined);
        if (found.length > 0) {
          let fo = 0;
          let fu = 0;
          let foBlocks = 0;
          let fuBlocks = 0;
          for (const { s, b } of found) {
            const cachedBlocks = Math.floor(s.result.cachedTokens! / 16);
            if (b.held > cachedBlocks) {
              fo++;
              foBlocks += b.held - cachedBlocks;
            } else if (b.held < cachedBlocks) {
              fu++;
              fuBlocks += cachedBlocks - b.held;
            }
          }
          const k = found.length;
          result.beliefs.found = { n: k, over: fo / k, under: fu / k, overBlocks: fo > 0 ? foBlocks / fo : 0, underBlocks: fu > 0 ? fuBlocks / fu : 0 };
        }
      }
    }
    if (p.arm === "oracle") {
      const predicted = ok.reduce((a, s) => a + 16 * (s.heldBlocks ?? 0), 0);
      result.oracle = {
        batches: followers.reduce((a, f) => a + f.batches, 0),
        gaps: followers.reduce((a, f) => a + f.gaps, 0),
        orphans: followers.reduce((a, f) => a + f.orphans, 0),
        sameHash: followers.reduce((a, f) => a + f.sameHash, 0),
        stored: followers.reduce((a, f) => a + f.stored, 0),
        removed: followers.reduce((a, f) => a + f.removed, 0),
        predictedHitTokens: predicted,
        indexSource: useEvents ? "KV events (ZMQ SUB per replica)" : "approximation: its own dispatches, no eviction",
      };
    }
    return result;
  } catch (err) {
    console.error(log.filter((l) => !/registered|listening/.test(l)).slice(-30).join("\n"));
    throw err;
  } finally {
    clearInterval(keepLog);
    for (const f of followers) await f.close();
    await stack.stop();
    current = undefined;
    rmSync(dir, { recursive: true, force: true });
  }
}

// --- the run -------------------------------------------------------------------------

const t0 = Date.now();
const machine = { cpus: cpus().length, loadavg1mAtStart: loadavg()[0]!, when: new Date().toISOString() };
const available = Object.fromEntries(ARM_ORDER.map((a) => [a, a === "oracle" || balancerAvailable(approximateArm(a) || a === "no_home" ? "prefix_cache" : a)])) as Record<ArmName, boolean>;
const skipped = ARM_ORDER.filter((a) => chosenArms.has(a) && !available[a]);
for (const a of skipped) console.log(`${LABEL[a]}: skipped (policy.balancer "${a}" is not in this tree yet)`);
if (!FEATURES.prefillTokenUs) console.log("WARNING: the replica has no --prefill-token-us yet: prefill is --prefill-ms only, the same for cached and uncached prompts (development run, not a measurement)");
const armsToRun = ARM_ORDER.filter((a) => chosenArms.has(a) && available[a]);

console.log(
  `${machine.cpus} CPUs, load average ${machine.loadavg1mAtStart.toFixed(2)}; ${REPLICAS} replicas per arm, KV ${(100 * KV_FRACTION).toFixed(0)} % of the ${SHAPE.groups} groups' prefix blocks each; ` +
    `workload ${SHAPE.groups} groups × ${SHAPE.usersPerGroup} users, system prompts ${SHAPE.systemMin}–${SHAPE.systemMax} characters, questions ${SHAPE.questionMin}–${SHAPE.questionMax} characters, ${SHAPE.turns} turns, max_tokens ${MAX_TOKENS}; ` +
    `prefill ${PREFILL_TOKEN_US} µs per uncached token + ${PREFILL_MS} ms, decode ${DECODE_MS} ms per token; seed${SEEDS.length > 1 ? "s" : ""} ${SEEDS.join(", ")}`,
);

const analytic = (uncached: number) => (REPLICAS * 1e6) / (uncached * PREFILL_TOKEN_US + PREFILL_MS * 1000);
/** Per seed: its fleet, its offered load and the calibration that set it. */
const seedRuns: { fleet: Fleet; rate: number; calibration?: PhaseResult }[] = [];
const results: PhaseResult[] = [];
for (const seed of SEEDS) {
  const fleet = fleetFor(seed);
  console.log(
    `seed ${seed}: KV ${fleet.kvBlocks} blocks per replica (of ${fleet.totalPrefixBlocks} prefix blocks; system prompts mean ${fleet.meanSystem.toFixed(0)} characters, ${((16 * fleet.totalPrefixBlocks) / SHAPE.groups).toFixed(0)} ${MODEL} tokens in full blocks)`,
  );
  // Capacity: calibrate on load_aware at saturation unless --rate is given.
  let rate: number;
  let calibration: PhaseResult | undefined;
  if (values.rate) {
    rate = num("rate", values.rate, (x) => x > 0);
    console.log(`  offered load: --rate ${rate} req/s`);
  } else {
    console.log(`  calibration: load_aware, 1 isolate, closed loop of ${CALIBRATION.clientsPerReplica * REPLICAS} clients, ${CALIBRATION.warmupS} s + ${CALIBRATION.seconds} s`);
    calibration = await runPhase({ arm: "load_aware", isolates: 1, mode: "closed", fleet }, 0);
    rate = UTILIZATION * calibration.throughputRps;
    console.log(
      `  saturation throughput ${calibration.throughputRps.toFixed(1)} req/s (hit ratio ${calibration.hitRatio.toFixed(3)}, ${calibration.uncachedPerRequest.toFixed(0)} uncached tokens per request: analytic ${analytic(calibration.uncachedPerRequest).toFixed(1)} req/s); ` +
        `offered load ${(100 * UTILIZATION).toFixed(0)} % of it: ${rate.toFixed(1)} req/s`,
    );
  }
  seedRuns.push({ fleet, rate, ...(calibration ? { calibration } : {}) });
  // Rounds: 1 isolate, then ISOLATES; arms interleaved in the same order in each round.
  // A family's run (issue 34's comparison) is at ISOLATES only.
  const rounds: Phase[][] = [
    armsToRun.filter((a) => !FAMILY && (!quick || a === "load_aware" || a === "prefix_cache" || a === "oracle")).map((arm) => ({ arm, isolates: 1, mode: "open" as const, fleet })),
    armsToRun.filter((a) => !quick || a !== "oracle").map((arm) => ({ arm, isolates: ISOLATES, mode: "open" as const, fleet })),
  ];
  for (const round of rounds) {
    for (const phase of round) {
      const t = Date.now();
      const r = await runPhase(phase, rate);
      results.push(r);
      console.log(
        `  ${r.label}, ${r.arm === "oracle" ? "bench process" : `${r.isolates} isolate(s)`}: TTFT p50 ${r.ttft.p50.toFixed(0)} ms, p90 ${r.ttft.p90.toFixed(0)} ms, p99 ${r.ttft.p99.toFixed(0)} ms, hit ratio ${r.hitRatio.toFixed(3)}, ${r.throughputRps.toFixed(1)} req/s, ${r.failed} failed, ${r.dropped} dropped (${((Date.now() - t) / 1000).toFixed(0)} s)`,
      );
    }
  }
}

// --- report -----------------------------------------------------------------------------

const f = (x: number, d = 0) => (Number.isFinite(x) ? x.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }) : "–");
const where = (r: PhaseResult) => `${r.arm === "oracle" ? `– (bench; ${r.round}-isolate round)` : String(r.isolates)}${SEEDS.length > 1 ? `, seed ${r.seed}` : ""}`;
const lines: string[] = [];
lines.push(
  "",
  ...markdownTable(
    [
      "arm",
      ...(SEEDS.length > 1 ? ["seed"] : []),
      "isolates",
      "TTFT mean ms",
      "p50",
      "p90",
      "p99",
      "TPOT p50 ms",
      "req/s",
      "hit ratio",
      "uncached tokens / req",
      "imbalance req / prefill (max/mean)",
      "DO calls / 1,000 (routing + telemetry est.)",
      "failed",
      "dropped",
      "CPU machine / bench / other %",
    ],
    results.map((r) => [
      r.label,
      ...(SEEDS.length > 1 ? [r.seed] : []),
      where(r),
      f(r.ttft.mean),
      f(r.ttft.p50),
      f(r.ttft.p90),
      f(r.ttft.p99),
      f(r.tpot.p50, 1),
      f(r.throughputRps, 1),
      f(r.hitRatio, 3),
      f(r.uncachedPerRequest),
      `${f(r.imbalanceRequests, 2)} / ${f(r.imbalancePrefill, 2)}`,
      r.arm === "oracle" ? "–" : `${f(r.doCalls.per1000, 1)} (${f(r.doCalls.routingPer1000, 1)} + ${f((1000 * r.doCalls.telemetryEstimated) / Math.max(1, r.requests), 1)})`,
      r.failed,
      r.dropped,
      `${f(100 * r.cpu.machineBusy)} / ${f(100 * r.cpu.own)} / ${f(100 * r.cpu.other)}`,
    ]),
  ),
);

// Targets, as ratios of arms of one seed, judged in every seed (prefix-cache-targets.ts).
const digitsOf = (t: Target) => (Math.abs(t.threshold) >= 3 ? 2 : 3);
const targets: (Target | { target: string; met: null; why: string })[] = judgeTargets(
  SEEDS.map((seed) => results.filter((r) => r.seed === seed)),
  // A fixed --rate is no share of saturation: judged as below it.
  { isolates: ISOLATES, seconds: SECONDS, ...(values.rate ? {} : { utilization: UTILIZATION }) },
);
for (const a of skipped) targets.push({ target: `${LABEL[a]}`, met: null, why: "not run: balancer not in this tree" });
const measuredOf = (t: (typeof targets)[number]) => {
  if (!("each" in t)) return t.why;
  const d = digitsOf(t);
  const each = t.each.map((v, i) => `${SEEDS.length > 1 ? `seed ${SEEDS[i]}: ` : ""}${v === null ? "not judged" : f(v, d)}${t.missed.includes(i) ? " (miss)" : ""}`);
  return SEEDS.length > 1 ? `${each.join(", ")}; mean ${f(t.mean, d)}${t.why ? `; ${t.why}` : ""}` : `${t.measuredBySeed[0]} = ${each[0]}${t.why ? ` (${t.why})` : ""}`;
};
if (SEEDS.length > 1) {
  for (const [i, seed] of SEEDS.entries()) {
    lines.push("", `Seed ${seed}:`, ...markdownTable(["target", "measured", ""], targets.filter((t): t is Target => "each" in t).map((t) => [t.target, `${t.measuredBySeed[i]} = ${t.each[i] === null ? "–" : f(t.each[i]!, digitsOf(t))}`, t.each[i] === null ? "not judged" : verdict(!t.missed.includes(i))]), "lll"));
  }
  lines.push("", `Judged in every seed (${SEEDS.join(", ")}): a miss in any seed is a MISS; the mean is beside it, not judged.`);
}
lines.push("", ...markdownTable(["target", "measured", ""], targets.map((t) => [t.target, measuredOf(t), `**${verdict(t.met)}**`]), "lll"));
const oracleRows = results.filter((r) => r.oracle);
for (const r of oracleRows) {
  const o = r.oracle!;
  lines.push(
    "",
    `Oracle index (${o.indexSource}): ${o.batches} event batches, ${o.stored} blocks stored, ${o.removed} removed, ${o.gaps} sequence gaps, ${o.orphans} orphan blocks, ${o.sameHash} stored blocks named by their Switchyard key; predicted ${f(o.predictedHitTokens)} hit tokens for the window's requests, the replicas counted ${f(r.hits)}. It dispatches straight to the replica (signed as the edge does), skipping the edge hop (~1–2 ms here).`,
  );
}
for (const r of results) for (const n of r.notes) lines.push(`note, ${r.label} (${where(r)}): ${n}`);
for (const r of results) for (const e of r.failureExamples) lines.push(`failure, ${r.label} (${where(r)}): ${e}`);
for (const r of results) {
  const c = r.cpu.msPerRequest;
  lines.push(`CPU ms per request, ${r.label} (${where(r)}): bench process ${f(c.bench, 1)}, workerd ${f(c.workerd, 1)}, replicas ${f(c.replicas, 1)}; load average ${f(r.cpu.loadavg1m, 2)} at the arm's start`);
  if (r.loss) {
    const l = r.loss;
    lines.push(
      `uncached tokens per request by cause, ${r.label} (${where(r)}), by the exact index at send: held elsewhere, first turns ${f(l.choiceFirstTurn)}, later turns ${f(l.choiceLaterTurn)}; held nowhere ${f(l.cold)}; ${f(100 * l.missedBest, 1)} % of requests not sent to the replica holding the most`,
    );
  }
  if (r.beliefs) {
    const b = r.beliefs;
    lines.push(
      `what the edge believed, ${r.label} (${where(r)}), ${b.n} requests against the exact index at send: not sent to the replica holding the most while believing it was ${f(100 * b.missedBelieving, 1)} %, while believing another held more ${f(100 * b.missedMoving, 1)} %; believed more blocks on the chosen replica than it held ${f(100 * b.over, 1)} % (by ${f(b.overBlocks, 1)} blocks on average), fewer ${f(100 * b.under, 1)} %${b.found ? `; against what the replica found cached when it scheduled the request (${b.found.n} answers' usage): more ${f(100 * b.found.over, 1)} % (by ${f(b.found.overBlocks, 1)} blocks), fewer ${f(100 * b.found.under, 1)} % (by ${f(b.found.underBlocks, 1)} blocks)` : ""}${b.homes ? `; homes: ${f(100 * b.homes.homed, 1)} % of requests had one, ${f(100 * b.homes.atHome, 1)} % of those were served there (${f(100 * b.homes.awayAfterRefusal, 1)} % elsewhere after a refusal), a group's home changed between its requests ${f(100 * b.homes.changes, 1)} % of the time` : ""}`,
    );
  }
  lines.push(`per replica, ${r.label} (${where(r)}), next turns on the previous turn's replica ${f(100 * r.sameReplicaAsPreviousTurn)} % (${r.nextTurnGap.moved} moved, ${r.nextTurnGap.movedUnder1s} of them within 1 s of the previous turn's end, gap p50 ${f(r.nextTurnGap.movedP50Ms)} ms; all next turns: ${r.nextTurnGap.under1s} within 1 s, gap p50 ${f(r.nextTurnGap.p50Ms)} ms): ${r.perReplica.map((x) => `${x.id.replace(/^pc-[a-z-]+-/, "#")} ${x.requests} req, ${f(x.prefilled)} prefilled, hit ${f(x.hitRatio, 2)}`).join("; ")}`);
}
for (const r of results) if (r.warning) lines.push(`WARNING ${r.label} (${where(r)}): ${r.warning}`);
const elapsedS = (Date.now() - t0) / 1000;
lines.push(
  "",
  ...seedRuns.map((sr) => {
    const la = results.find((r) => r.seed === sr.fleet.seed && r.arm === "load_aware");
    const oracle = results.filter((r) => r.seed === sr.fleet.seed && r.arm === "oracle").at(-1);
    return (
      `${SEEDS.length > 1 ? `Seed ${sr.fleet.seed}: o` : "O"}ffered load ${f(sr.rate, 1)} req/s (${values.rate ? "--rate" : `${(100 * UTILIZATION).toFixed(0)} % of load_aware's measured saturation throughput ${f(sr.calibration!.throughputRps, 1)} req/s`}); ` +
      `analytic capacity at load_aware's uncached tokens per request ${f(analytic(la?.uncachedPerRequest ?? NaN), 1)} req/s, at the oracle's ${f(analytic(oracle?.uncachedPerRequest ?? NaN), 1)} req/s.`
    );
  }),
  `${SECONDS} s measured after ${WARMUP_S} s warm-up per arm. ` +
    `${machine.cpus} CPUs, load average ${machine.loadavg1mAtStart.toFixed(2)} at start; request logs ${process.env.SWITCHYARD_REQUEST_LOGS}; run took ${f(elapsedS)} s.`,
);
console.log(lines.join("\n"));

writeResult(
  // A family's run is its own scenario (bench/published/prefix-cache-family/): the README's tiny-lm figures stay apart.
  FAMILY ? "prefix-cache-family" : "prefix-cache",
    {
      when: machine.when,
      quick,
      machine,
      features: FEATURES,
      setup: {
        model: MODEL,
        family: FAMILY ?? null,
        replicas: REPLICAS,
        isolates: ISOLATES,
        // The first seed's fleet and load (every seed's: `seeds`).
        kvBlocks: seedRuns[0]!.fleet.kvBlocks,
        kvFraction: KV_FRACTION,
        loadFactor: LOAD_FACTOR,
        scorers: SCORERS ?? null,
        beliefMs: BELIEF_MS ?? null,
        filters: FILTERS ?? null,
        noSummaries: values["no-summaries"],
        totalPrefixBlocks: seedRuns[0]!.fleet.totalPrefixBlocks,
        maxOngoing: MAX_ONGOING,
        workload: SHAPE,
        meanSystemChars: seedRuns[0]!.fleet.meanSystem,
        maxTokens: MAX_TOKENS,
        prefillTokenUs: PREFILL_TOKEN_US,
        prefillMs: PREFILL_MS,
        decodeMs: DECODE_MS,
        seconds: SECONDS,
        warmupSeconds: WARMUP_S,
        utilization: UTILIZATION,
        offeredRps: seedRuns[0]!.rate,
        seed: FIRST_SEED,
        seeds: seedRuns.map((sr) => ({ ...sr.fleet, offeredRps: sr.rate, saturationRps: sr.calibration?.throughputRps ?? null })),
      },
      calibration: seedRuns[0]!.calibration,
      arms: results,
      targets,
      skipped,
      elapsedSeconds: elapsedS,
    },
  { quick, arms: results.map((a) => ({ arm: `${a.label}, ${a.isolates} isolate(s)`, requests: a.requests, ok: a.ok })) },
);
rmSync(functionsRoot, { recursive: true, force: true });
