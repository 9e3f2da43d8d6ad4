/**
 * Scenario 4, hot-path state cost: Durable Object invocations per 1,000 proxied
 * requests, and proxy CPU time per request, for plain, session, multiplexed and
 * API-key (rate-limited) requests, on the real local stack (workerd + replica
 * processes on loopback). Target: ≤ 5 Durable Object invocations per 1,000
 * plain requests.
 *
 *   npx tsx bench/state-cost/state-cost.ts [--seconds 8] [--sessions 100] [--skip-keyed] [--skip-bare: no bare Worker, no twins] [--rebuilt] [--out FILE]
 *                               [--rounds 1] [--kinds plain,session,...]
 *   SWITCHYARD_REQUEST_LOGS=off npx tsx bench/state-cost/state-cost.ts --out bench/results/state-cost-nologs.json
 *
 * For each kind: 1 s (multiplexed: 3 s) of unmeasured warm-up with the same traffic, then a wrk
 * run of --seconds (≤ 10) against workerd's own port (HTTP/1.1 keep-alive):
 *  - plain:        GET /hello                                  (4 replicas, 16 connections)
 *  - session:      GET /hello, x-session-id from a pool of --sessions ids
 *  - multiplexed:  POST /vad, serve_multiplexed_model_id cycling v4/v5/v6, a
 *                  2-frame input cut from GET /vad/example (3 replicas, 8 connections)
 *  - keyed:        GET /keyed with one of 4 API keys (a deployment that needs a key,
 *                  with a per-key rate limit set high enough never to refuse);
 *                  defined in a temporary functions folder next to hello and vad.
 * Durable Object calls are read from the admin route (GET /-/deployments/:name):
 * the routing object's snapshotCalls, the session shards' resolves + rebinds, and
 * the isolate's keySetRefreshes and rateLimitSyncs, before and after the run;
 * with a relay (the default), the isolate's calls to it and its own calls to the
 * routing object, AccessKeys and RateLimiter shards both count.
 * Telemetry flushes are not exposed on any route: they are estimated as
 * isolates × seconds / 2 s (one flush per isolate per 2 s under steady load).
 * Proxy CPU: utime + stime of the workerd process (/proc/<pid>/stat, in clock
 * ticks of `getconf CLK_TCK`) before and after each run, also measured for a
 * bare workerd Worker (one fetch() per request, bench/seed/seed.ts's generator) in
 * front of the same 4 replicas, and for an idle interval (replica reports only).
 * --rounds N repeats the whole sequence N times, the bare Worker first in each
 * round, and gives each kind's CPU × bare as the median (and range) of its
 * rounds' ratios, each against the bare Worker of the same round: the machine's
 * drift over a run (2026-12-02: the bare Worker alone 220–304 µs between runs)
 * then moves both sides of a ratio together. --kinds measures only the named kinds.
 * Each kind also has a bare twin, measured right before it in each round: the
 * same wrk script and connections through a bare Worker to the same replicas
 * (multiplexed: each model pinned to one replica, load-tools.ts modelPinnedWorker),
 * so "× bare twin" compares the same requests, a POST body and the kind's own
 * connection count included; "× bare Worker" stays the GET /hello comparison.
 * --rebuilt also measures, after the bare Worker in each round, a Worker whose
 * one fetch() is built as any header-rewriting proxy must build it (headers
 * copied and set both ways, a new Response; load-tools.ts rebuiltWorker): the
 * runtime's floor for a proxy that changes headers, as a ratio to the bare one.
 * Prints markdown tables and writes bench/results/state-cost.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { requireLoadTools } from "../shared/load-tool-deps.ts";
import { requireServed, writeResult } from "../shared/result-file.ts";
import { per1000Target } from "../shared/bench-targets.ts";
import { judgedText, markdownTable, verdict } from "../shared/table.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { CLK_TCK, cpuSeconds, modelPinnedWorker, rebuiltWorker, startBareWorkers, workerdPid, wrk as runWrk, type BareWorkers } from "../shared/load-tools.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
// wrk measures every kind: installed as root, or the bench stops here with the reason (never a table of zeros).
await requireLoadTools("state-cost", ["wrk"]);
const { values } = parseArgs({
  options: {
    seconds: { type: "string" },
    quick: { type: "boolean", default: false },
    sessions: { type: "string", default: "100" },
    "skip-keyed": { type: "boolean", default: false },
    "skip-bare": { type: "boolean", default: false },
    rebuilt: { type: "boolean", default: false },
    out: { type: "string" },
    rounds: { type: "string", default: "1" },
    kinds: { type: "string" },
  },
});
const rounds = Math.max(1, Math.floor(Number(values.rounds)) || 1);
const onlyKinds = values.kinds?.split(",").map((k) => k.trim()).filter(Boolean);
const quick = values.quick;
const seconds = Math.min(10, Number(values.seconds ?? (quick ? 3 : 8)));
const sessionPool = Number(values.sessions);
const withKeyed = !values["skip-keyed"];
const TELEMETRY_FLUSH_S = 2;
const REPLICAS = { hello: 4, vad: 3, keyed: withKeyed ? 2 : 0 };
const MODELS = ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"];
const KEYS = 4;

const log = (line: string) => console.error(`[state-cost] ${line}`);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

// --- wrk with a Lua script ---------------------------------------------------

interface WrkResult {
  requests: number;
  rps: number;
  p50ms: number;
  p99ms: number;
  non2xx: number;
  socketErrors: number;
  error?: string;
}

/** Replicas × maxOngoingRequests: hello 4 × 5 = 20, vad 3 × 4 = 12, keyed 2 × 5 = 10. */
const CONNECTIONS = { hello: 16, vad: 8, keyed: 8 };

async function wrk(url: string, script: string | undefined, secs: number, connections: number): Promise<WrkResult> {
  const r = await runWrk(url, url, { seconds: secs, threads: 1, connections, ...(script ? { script } : {}) });
  return { requests: r.requests, rps: r.rps, p50ms: r.p50ms, p99ms: r.p99ms, non2xx: r.non2xx, socketErrors: r.failed, ...(r.note ? { error: r.note } : {}) };
}

const lua = (s: string) => `[==[${s}]==]`;
const luaList = (xs: string[]) => `{ ${xs.map(lua).join(", ")} }`;

/** A wrk script that sends `method path` with headers from a per-request function of n. */
function requestScript(method: string, path: string, headers: string, body?: string): string {
  return `-- Generated by bench/state-cost/state-cost.ts
local n = 0
${body !== undefined ? `local body = ${lua(body)}` : "local body = nil"}
request = function()
  n = n + 1
  return wrk.format(${lua(method)}, ${lua(path)}, ${headers}, body)
end
`;
}

// --- the stack, with a keyed deployment in a temporary functions folder ------

const work = mkdtempSync(join(tmpdir(), "sy-state-cost-"));
const functionsDir = join(work, "functions");
mkdirSync(functionsDir);
const abs = (p: string) => JSON.stringify(join(root, p));
writeFileSync(join(functionsDir, "hello.ts"), `export { default } from ${abs("functions/hello.ts")};\n`);
writeFileSync(join(functionsDir, "vad.ts"), `export { default } from ${abs("functions/vad.ts")};\n`);
if (withKeyed) {
  writeFileSync(
    join(functionsDir, "keyed.ts"),
    `// Generated by bench/state-cost/state-cost.ts: hello's replicas behind API keys and a per-key rate limit that never refuses.
import { defineDeployment } from ${abs("src/config/deployment.ts")};
export default defineDeployment({
  name: "keyed",
  routePrefix: "/keyed",
  access: { public: false, rateLimit: { requestsPerSecond: 1_000_000, burst: 1_000_000 } },
  backend: { kind: "text", text: "hi" },
  localReplicas: 2,
  maxOngoingRequests: 5,
  policy: { idempotent: true },
});
`,
  );
}
const stateDir = join(work, "state");
const stackLog: string[] = [];
const stack = new LocalStack({ port: 0, acceptUnsignedDispatches: true, functionsDir, stateDir, freshState: true, replicas: REPLICAS, log: (l) => stackLog.push(l) });
let bare: BareWorkers | undefined;
let rebuilt: BareWorkers | undefined;
let pinned: BareWorkers | undefined;
process.on("exit", () => {
  stack.killAll();
  bare?.child.kill("SIGKILL");
  pinned?.child.kill("SIGKILL");
  rebuilt?.child.kill("SIGKILL");
});
for (const sig of ["SIGINT", "SIGTERM"] as const) process.on(sig, () => process.exit(130));
// Keep the log buffer bounded (workerd writes one JSON line per request).
setInterval(() => stackLog.splice(0, Math.max(0, stackLog.length - 200)), 2_000).unref();

interface AdminState {
  router: { snapshotCalls: number; reports: number };
  /** The relay of the isolate's location (null when the deployment has `routing.relay: false`). */
  relay: { calls: number; refreshes: number; keySetRefreshes: number; rateShardSyncs: number } | null;
  sessions: { resolves: number; rebinds: number; writes: number };
  isolate: { snapshotRefreshes: number; sessionStoreCalls: number; keySetRefreshes: number; rateLimitSyncs: number };
}
const admin = async (name: string): Promise<AdminState> => {
  const res = await fetch(`${stack.workerdUrl}/-/deployments/${name}`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
  if (!res.ok) throw new Error(`GET /-/deployments/${name}: ${res.status} ${await res.text()}`);
  return (await res.json()) as AdminState;
};
/** A sample from /-/metrics (sum over matching lines). */
const metric = async (name: string, labelPart = ""): Promise<number> => {
  const text = await (await fetch(`${stack.workerdUrl}/-/metrics`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).text();
  let sum = 0;
  for (const line of text.split("\n")) if (line.startsWith(name) && line.includes(labelPart) && !line.startsWith(`${name}_`)) sum += Number(line.split(" ").pop());
  return sum;
};

interface Kind {
  kind: string;
  deployment: "hello" | "vad" | "keyed";
  what: string;
  path: string;
  script: string;
  /** Default: CONNECTIONS[deployment]. */
  connections?: number;
  /** Unmeasured warm-up, s (default 1). */
  warmupS?: number;
}

interface KindResult extends Omit<WrkResult, "error"> {
  kind: string;
  what: string;
  deployment: string;
  connections: number;
  seconds: number;
  retries: number;
  doCalls: {
    deploymentRouterSnapshots: number;
    sessionRouter: number;
    accessKeys: number;
    rateLimiter: number;
    /** Not exposed on any route: isolates × seconds / 2 s. */
    telemetryEstimated: number;
    total: number;
  };
  doCallsPer1000: Record<keyof KindResult["doCalls"], number>;
  /** Control plane, not per request: load reports to the routing object during the run. */
  reportsPerSecond: number;
  sessionResolves: number;
  sessionRebinds: number;
  sessionWrites: number;
  cpu: { seconds: number; usPerRequest: number; usPerRequestNetOfIdle: number };
  /** Per round: this kind's CPU µs per request, the bare Worker's of the same round, and their ratio. */
  rounds?: { usPerRequest: number; bareUsPerRequest: number; ratio: number }[];
  /** Median and range of the rounds' ratios (with the bare Worker). */
  ratioToBare?: { median: number; min: number; max: number };
  /** The kind's bare twin (the same requests through a bare Worker), summed over rounds. */
  twin?: { usPerRequest: number; rps: number; non2xx: number; rounds: number[] };
  /** Median and range of the rounds' CPU ratios to the twin of the same round. */
  ratioToTwin?: { median: number; min: number; max: number };
  /** Median of the rounds' req/s ÷ the twin's req/s. */
  rpsRatioToTwin?: number;
  error?: string;
}

/**
 * A kind's bare twin: the same wrk script and connections, through a bare Worker
 * (one fetch() per request) to the same deployment's replicas. Its CPU is the
 * floor for exactly those requests: a POST body passed on, the kind's own
 * headers, its connection count.
 */
type TwinResult = BareResult;

async function measureKind(k: Kind, pid: number, idleCpuPerS: number, isolates: number, firstRound: boolean): Promise<KindResult> {
  const connections = k.connections ?? CONNECTIONS[k.deployment];
  const url = `${stack.workerdUrl}${k.path}`;
  // A longer warm-up (models loading) is needed once.
  const warmupS = firstRound ? (k.warmupS ?? 1) : 1;
  log(`${k.kind}: warm-up ${warmupS} s, then ${seconds} s, ${connections} connections`);
  await wrk(url, k.script, warmupS, connections);
  await sleep(300);
  const before = await admin(k.deployment);
  const retriesBefore = await metric("switchyard_retries_total", `deployment="${k.deployment}"`);
  const cpu0 = cpuSeconds(pid);
  const t0 = performance.now();
  const r = await wrk(url, k.script, seconds, connections);
  const elapsed = (performance.now() - t0) / 1000;
  const cpu = cpuSeconds(pid) - cpu0;
  const after = await admin(k.deployment);
  const retries = (await metric("switchyard_retries_total", `deployment="${k.deployment}"`)) - retriesBefore;
  const d = <T extends keyof AdminState>(group: T, field: keyof NonNullable<AdminState[T]>) =>
    Number((after[group] as Record<string, number> | null)?.[field as string] ?? 0) - Number((before[group] as Record<string, number> | null)?.[field as string] ?? 0);
  // The admin route itself calls snapshot() once per read, counted by the object: the "after" read adds one.
  // With a relay, the isolate's calls go to the relay and the relay's to the routing object, key set and
  // rate-limit shards: both hops count. Without one, the isolate's calls are the routing object's.
  const relayed = after.relay !== null;
  const doCalls = {
    deploymentRouterSnapshots: relayed ? d("isolate", "snapshotRefreshes") + d("router", "snapshotCalls") - 1 : d("router", "snapshotCalls") - 1,
    sessionRouter: d("sessions", "resolves") + d("sessions", "rebinds"),
    accessKeys: d("isolate", "keySetRefreshes") + (relayed ? d("relay", "keySetRefreshes") : 0),
    rateLimiter: d("isolate", "rateLimitSyncs") + (relayed ? d("relay", "rateShardSyncs") : 0),
    telemetryEstimated: Math.round((isolates * seconds) / TELEMETRY_FLUSH_S),
    total: 0,
  };
  doCalls.total = doCalls.deploymentRouterSnapshots + doCalls.sessionRouter + doCalls.accessKeys + doCalls.rateLimiter + doCalls.telemetryEstimated;
  const per1000 = Object.fromEntries(Object.entries(doCalls).map(([key, v]) => [key, (1000 * v) / Math.max(1, r.requests)])) as KindResult["doCallsPer1000"];
  return {
    kind: k.kind,
    what: k.what,
    deployment: k.deployment,
    connections,
    seconds,
    requests: r.requests,
    rps: r.rps,
    p50ms: r.p50ms,
    p99ms: r.p99ms,
    non2xx: r.non2xx,
    socketErrors: r.socketErrors,
    retries,
    doCalls,
    doCallsPer1000: per1000,
    reportsPerSecond: d("router", "reports") / elapsed,
    sessionResolves: d("sessions", "resolves"),
    sessionRebinds: d("sessions", "rebinds"),
    sessionWrites: d("sessions", "writes"),
    cpu: { seconds: cpu, usPerRequest: (1e6 * cpu) / Math.max(1, r.requests), usPerRequestNetOfIdle: (1e6 * (cpu - idleCpuPerS * elapsed)) / Math.max(1, r.requests) },
    ...(r.error ? { error: r.error } : {}),
  };
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);

/** One kind's rounds as one result: counts and CPU summed, rates and latencies averaged, ratios per round. */
function combineRounds(runs: KindResult[], bareUs: (number | undefined)[], twins: TwinResult[]): KindResult {
  const first = runs[0]!;
  const sum = (f: (r: KindResult) => number) => runs.reduce((a, r) => a + f(r), 0);
  const requests = sum((r) => r.requests);
  const doCalls = Object.fromEntries(Object.keys(first.doCalls).map((key) => [key, sum((r) => r.doCalls[key as keyof KindResult["doCalls"]])])) as KindResult["doCalls"];
  const per1000 = Object.fromEntries(Object.entries(doCalls).map(([key, v]) => [key, (1000 * v) / Math.max(1, requests)])) as KindResult["doCallsPer1000"];
  const cpuS = sum((r) => r.cpu.seconds);
  const netS = sum((r) => (r.cpu.usPerRequestNetOfIdle * r.requests) / 1e6);
  const perRound = runs.flatMap((r, i) => (bareUs[i] ? [{ usPerRequest: r.cpu.usPerRequest, bareUsPerRequest: bareUs[i]!, ratio: r.cpu.usPerRequest / bareUs[i]! }] : []));
  const ratios = perRound.map((r) => r.ratio);
  const twinRatios = twins.map((t, i) => runs[i]!.cpu.usPerRequest / t.usPerRequest);
  const twinRequests = twins.reduce((a, t) => a + t.requests, 0);
  const twin = twins.length
    ? {
        usPerRequest: twins.reduce((a, t) => a + t.usPerRequest * t.requests, 0) / Math.max(1, twinRequests),
        rps: mean(twins.map((t) => t.rps)),
        non2xx: twins.reduce((a, t) => a + t.non2xx, 0),
        rounds: twins.map((t) => t.usPerRequest),
      }
    : undefined;
  const errors = runs.flatMap((r) => (r.error ? [r.error] : []));
  return {
    ...first,
    seconds: sum((r) => r.seconds),
    requests,
    rps: mean(runs.map((r) => r.rps)),
    p50ms: mean(runs.map((r) => r.p50ms)),
    p99ms: mean(runs.map((r) => r.p99ms)),
    non2xx: sum((r) => r.non2xx),
    socketErrors: sum((r) => r.socketErrors),
    retries: sum((r) => r.retries),
    doCalls,
    doCallsPer1000: per1000,
    reportsPerSecond: mean(runs.map((r) => r.reportsPerSecond)),
    sessionResolves: sum((r) => r.sessionResolves),
    sessionRebinds: sum((r) => r.sessionRebinds),
    sessionWrites: sum((r) => r.sessionWrites),
    cpu: { seconds: cpuS, usPerRequest: (1e6 * cpuS) / Math.max(1, requests), usPerRequestNetOfIdle: (1e6 * netS) / Math.max(1, requests) },
    rounds: perRound,
    ...(ratios.length ? { ratioToBare: { median: median(ratios), min: Math.min(...ratios), max: Math.max(...ratios) } } : {}),
    ...(twin
      ? {
          twin,
          ratioToTwin: { median: median(twinRatios), min: Math.min(...twinRatios), max: Math.max(...twinRatios) },
          rpsRatioToTwin: median(twins.map((t, i) => runs[i]!.rps / t.rps)),
        }
      : {}),
    ...(errors.length ? { error: errors.join("; ") } : { error: undefined }),
  };
}

const started = Date.now();
const machine = { cpus: cpus().length, loadavg1mAtStart: Number(loadavg()[0]!.toFixed(2)), clockTicksPerSecond: CLK_TCK };
log(`${machine.cpus} CPUs, load average ${machine.loadavg1mAtStart}; replicas ${JSON.stringify(REPLICAS)}; ${seconds} s per kind, ${rounds} round${rounds === 1 ? "" : "s"}`);

const results: KindResult[] = [];
let idle = { seconds: 0, cpuSeconds: 0, cpuPerSecond: 0, reportsPerSecond: 0 };
type BareResult = { rps: number; p50ms: number; p99ms: number; requests: number; cpuSeconds: number; usPerRequest: number; connections: number; non2xx: number };
let bareResult: (BareResult & { rounds: number[] }) | undefined;
/** --rebuilt: the bare Worker's fetch built as a header-rewriting proxy builds it (load-tools.ts rebuiltWorker). */
let rebuiltResult: { rps: number; usPerRequest: number; rounds: number[]; ratioToBare: { median: number; min: number; max: number } } | undefined;
let isolates = 1;
try {
  await stack.start();
  const pid = workerdPid(join(stateDir, "workerd.capnp"));
  log(`stack up (workerd pid ${pid}, CLK_TCK ${CLK_TCK})`);

  // Inputs: a 2-frame VAD input cut from the replica's own example, API keys for "keyed".
  const example = (await (await fetch(`${stack.workerdUrl}/vad/example`)).json()) as { samples: number[]; sampleRate: number };
  const vadBody = JSON.stringify({ sampleRate: example.sampleRate, samples: example.samples.slice(0, 1024) });
  const keys: string[] = [];
  if (withKeyed) {
    for (let i = 0; i < KEYS; i++) {
      const body = JSON.stringify({ name: `bench-${i}` });
      const res = await fetch(`${stack.workerdUrl}/-/deployments/keyed/keys`, {
        method: "POST",
        headers: { authorization: `Bearer ${stack.adminSecret}`, "content-type": "application/json", "content-length": String(body.length) },
        body,
      });
      if (res.status !== 201) throw new Error(`creating an API key: ${res.status} ${await res.text()}`);
      keys.push(((await res.json()) as { key: string }).key);
    }
  }
  const script = (name: string, text: string) => {
    const p = join(work, `${name}.lua`);
    writeFileSync(p, text);
    return p;
  };
  const kinds: Kind[] = [
    { kind: "plain", deployment: "hello", what: "GET /hello", path: "/hello", script: script("plain", requestScript("GET", "/hello", "{}")) },
    // Sessions twice: as loaded as plain (16 connections on 20 slots, so a bound replica is often
    // full and its sessions move), and lightly (6 connections: bindings hold, cache refreshes only).
    ...[
      { kind: "session", connections: CONNECTIONS.hello, load: "80 % of capacity" },
      { kind: "session-light", connections: 6, load: "30 % of capacity" },
    ].map((v) => ({
      kind: v.kind,
      deployment: "hello" as const,
      what: `GET /hello, x-session-id from ${sessionPool} ids, ${v.connections} connections (${v.load})`,
      path: "/hello",
      connections: v.connections,
      script: script("session", requestScript("GET", "/hello", `{ ["x-session-id"] = "bench-" .. (n % ${sessionPool}) }`)),
    })),
    {
      kind: "multiplexed",
      deployment: "vad",
      what: `POST /vad (1,024 samples), serve_multiplexed_model_id cycling ${MODELS.length} models`,
      path: "/vad",
      // Longer warm-up: each replica's wasm runtime starts and loads its first models.
      warmupS: 3,
      script: script(
        "multiplexed",
        `local models = ${luaList(MODELS)}\n${requestScript("POST", "/vad", `{ ["content-type"] = "application/json", ["serve_multiplexed_model_id"] = models[(n % ${MODELS.length}) + 1] }`, vadBody)}`,
      ),
    },
    ...(withKeyed
      ? [
          {
            kind: "keyed",
            deployment: "keyed" as const,
            what: `GET /keyed with one of ${KEYS} API keys, per-key rate limit`,
            path: "/keyed",
            script: script("keyed", `local keys = ${luaList(keys)}\n${requestScript("GET", "/keyed", `{ ["authorization"] = "Bearer " .. keys[(n % ${KEYS}) + 1] }`)}`),
          },
        ]
      : []),
  ];

  // A first request per deployment (the isolate's first snapshot waits on the object), then idle CPU.
  for (const k of kinds) await wrk(`${stack.workerdUrl}${k.path}`, k.script, 1, 2);
  isolates = Math.max(1, await metric("switchyard_proxy_isolates"));
  await sleep(2_000);
  const idleBefore = await admin("hello");
  const idleVad = await admin("vad");
  const c0 = cpuSeconds(pid);
  const i0 = performance.now();
  await sleep(4_000);
  const idleS = (performance.now() - i0) / 1000;
  const idleCpu = cpuSeconds(pid) - c0;
  const idleAfter = await admin("hello");
  const idleVadAfter = await admin("vad");
  idle = {
    seconds: idleS,
    cpuSeconds: idleCpu,
    cpuPerSecond: idleCpu / idleS,
    reportsPerSecond: (idleAfter.router.reports - idleBefore.router.reports + idleVadAfter.router.reports - idleVad.router.reports) / idleS,
  };
  log(`idle: ${(1000 * idle.cpuPerSecond).toFixed(1)} ms CPU/s, ${idle.reportsPerSecond.toFixed(1)} reports/s (hello + vad)`);

  const measured = onlyKinds ? kinds.filter((k) => onlyKinds.includes(k.kind)) : kinds;
  if (onlyKinds && measured.length !== onlyKinds.length) throw new Error(`--kinds: unknown kind in ${onlyKinds.join(",")} (known: ${kinds.map((k) => k.kind).join(", ")})`);
  let measureBare: (() => Promise<BareResult>) | undefined;
  let measureRebuilt: (() => Promise<BareResult>) | undefined;
  let measureTwin: ((k: Kind, firstRound: boolean) => Promise<TwinResult>) | undefined;
  if (!values["skip-bare"]) {
    const urlsOf = (deployment: string) => [...stack.replicas.values()].filter((r) => r.deployment === deployment).map((r) => r.url);
    const helloUrls = urlsOf("hello");
    /** A warm-up, then one measured wrk run against a one-process Worker, its CPU from /proc. */
    const onWorker = async (workerPid: number, url: string, script: string | undefined, warmupS: number, connections: number): Promise<BareResult> => {
      await wrk(url, script, warmupS, connections);
      const c1 = cpuSeconds(workerPid);
      const r = await wrk(url, script, seconds, connections);
      const cpu = cpuSeconds(workerPid) - c1;
      return { rps: r.rps, p50ms: r.p50ms, p99ms: r.p99ms, requests: r.requests, cpuSeconds: cpu, usPerRequest: (1e6 * cpu) / Math.max(1, r.requests), connections, non2xx: r.non2xx + r.socketErrors };
    };
    const measureWorker = (what: string, workers: BareWorkers) => {
      const workerPid = workerdPid(workers.config);
      return (): Promise<BareResult> => {
        log(`${what} → ${helloUrls.length} replicas: warm-up 1 s, then ${seconds} s`);
        return onWorker(workerPid, `${workers.urls.hello}/hello`, undefined, 1, CONNECTIONS.hello);
      };
    };
    bare = await startBareWorkers(work, { hello: helloUrls, ...(withKeyed ? { keyed: urlsOf("keyed") } : {}) }, "/-/healthz");
    measureBare = measureWorker("bare workerd Worker", bare);
    // Multiplexed requests' twin sends each model to one replica: round robin would make them swap models.
    pinned = await startBareWorkers(work, { vad: urlsOf("vad") }, "/-/healthz", { kind: "pinned", source: modelPinnedWorker });
    const twinPid = { bare: workerdPid(bare.config), pinned: workerdPid(pinned.config) };
    measureTwin = (k, firstRound) => {
      const workers = k.deployment === "vad" ? pinned! : bare!;
      const workerPid = k.deployment === "vad" ? twinPid.pinned : twinPid.bare;
      const connections = k.connections ?? CONNECTIONS[k.deployment];
      const warmupS = firstRound ? (k.warmupS ?? 1) : 1;
      log(`${k.kind}'s bare twin: warm-up ${warmupS} s, then ${seconds} s, ${connections} connections`);
      return onWorker(workerPid, `${workers.urls[k.deployment]}${k.path}`, k.script, warmupS, connections);
    };
    if (values.rebuilt) {
      rebuilt = await startBareWorkers(work, { hello: helloUrls }, "/hello", { kind: "rebuilt", source: rebuiltWorker });
      measureRebuilt = measureWorker("rebuilt workerd Worker", rebuilt);
    }
  }
  // Each round: the bare Worker, then every kind; each kind's ratio is against its round's bare Worker.
  const bareRounds: BareResult[] = [];
  const rebuiltRounds: BareResult[] = [];
  const kindRounds = measured.map(() => [] as KindResult[]);
  const twinRounds = measured.map(() => [] as TwinResult[]);
  for (let round = 1; round <= rounds; round++) {
    if (rounds > 1) log(`round ${round} of ${rounds}`);
    if (measureBare) bareRounds.push(await measureBare());
    if (measureRebuilt) rebuiltRounds.push(await measureRebuilt());
    for (const [i, k] of measured.entries()) {
      // The twin right before its kind: the two sides of the ratio share the machine's state.
      if (measureTwin) twinRounds[i]!.push(await measureTwin(k, round === 1));
      kindRounds[i]!.push(await measureKind(k, pid, idle.cpuPerSecond, isolates, round === 1));
    }
  }
  const bareUs = Array.from({ length: rounds }, (_, i) => bareRounds[i]?.usPerRequest);
  for (const [i, runs] of kindRounds.entries()) results.push(combineRounds(runs, bareUs, twinRounds[i]!));
  if (bareRounds.length) {
    const requests = bareRounds.reduce((a, b) => a + b.requests, 0);
    const cpuS = bareRounds.reduce((a, b) => a + b.cpuSeconds, 0);
    bareResult = {
      rps: mean(bareRounds.map((b) => b.rps)),
      p50ms: mean(bareRounds.map((b) => b.p50ms)),
      p99ms: mean(bareRounds.map((b) => b.p99ms)),
      requests,
      non2xx: bareRounds.reduce((a, b) => a + b.non2xx, 0),
      cpuSeconds: cpuS,
      usPerRequest: (1e6 * cpuS) / Math.max(1, requests),
      connections: CONNECTIONS.hello,
      rounds: bareRounds.map((b) => b.usPerRequest),
    };
  }
  if (rebuiltRounds.length) {
    const ratios = rebuiltRounds.map((r, i) => r.usPerRequest / bareRounds[i]!.usPerRequest);
    rebuiltResult = {
      rps: mean(rebuiltRounds.map((b) => b.rps)),
      usPerRequest: mean(rebuiltRounds.map((b) => b.usPerRequest)),
      rounds: rebuiltRounds.map((b) => b.usPerRequest),
      ratioToBare: { median: median(ratios), min: Math.min(...ratios), max: Math.max(...ratios) },
    };
  }
} catch (err) {
  console.error(stackLog.filter((l) => !/"msg":"request"/.test(l)).slice(-30).join("\n"));
  throw err;
} finally {
  for (const workers of [bare, rebuilt, pinned]) {
    if (!workers || workers.child.exitCode !== null) continue;
    const gone = new Promise((r) => workers.child.once("exit", r));
    workers.child.kill("SIGTERM");
    await Promise.race([gone, sleep(3_000).then(() => workers.child.kill("SIGKILL"))]);
  }
  await stack.stop();
}
rmSync(work, { recursive: true, force: true });

// --- report ------------------------------------------------------------------

const f = (v: number, d = 1) => (Number.isFinite(v) ? v.toFixed(d) : "–");
const plain = results.find((r) => r.kind === "plain");
// Judged over enough requests to show a miss (bench-targets.ts): no requests is not "0 per 1,000".
const judgedPlain = plain ? per1000Target(plain.doCalls.total, plain.requests, 5) : undefined;
const target = plain ? { name: "Durable Object invocations per 1,000 plain requests", value: plain.doCallsPer1000.total, max: 5, pass: judgedPlain!.met, ...(judgedPlain!.why && { why: judgedPlain!.why }) } : undefined;
const lines = [
  "",
  `Durable Object invocations per 1,000 requests (${seconds} s per kind; ${isolates} proxy isolate${isolates === 1 ? "" : "s"}; telemetry estimated: 1 flush per isolate per ${TELEMETRY_FLUSH_S} s)`,
  "",
  ...markdownTable(
    ["kind", "requests", "req/s", "non-2xx", "retries", "DeploymentRouter", "SessionRouter", "AccessKeys", "RateLimiter", "Telemetry (est.)", "total / 1,000", "total calls/s"],
    results.map((r) => {
      const per = (k: keyof typeof r.doCalls) => `${f(r.doCallsPer1000[k], 2)} (${r.doCalls[k]})`;
      return [
        `${r.kind}: ${r.what}`,
        r.requests,
        f(r.rps, 0),
        r.non2xx + r.socketErrors,
        r.retries,
        per("deploymentRouterSnapshots"),
        per("sessionRouter"),
        per("accessKeys"),
        per("rateLimiter"),
        per("telemetryEstimated"),
        `**${f(r.doCallsPer1000.total, 2)}**`,
        f(r.doCalls.total / r.seconds, 1),
      ];
    }),
  ),
  "",
  "Per 1,000 requests, with the raw count in parentheses. Not per request, so not in the total: load reports from replicas to the routing object,",
  ...results.map((r) => `  ${r.kind}: ${f(r.reportsPerSecond, 1)} load reports/s to "${r.deployment}" (${r.deployment === "vad" ? 3 : r.deployment === "keyed" ? 2 : 4} replicas); sessions: ${r.sessionResolves} resolves, ${r.sessionRebinds} rebinds, ${r.sessionWrites} writes`),
  `  idle: ${f(idle.reportsPerSecond, 1)} reports/s (hello + vad).`,
  "",
  "Proxy CPU (workerd process: the Worker and its Durable Objects, utime + stime)",
  "",
  ...markdownTable(
    [
      "kind",
      "connections",
      "req/s",
      "p50 ms",
      "p99 ms",
      "CPU s",
      "CPU µs / request",
      "net of idle",
      `× bare Worker, GET /hello${rounds > 1 ? ` (median of ${rounds} rounds' ratios, range)` : ""}`,
      "bare twin: µs / request, req/s",
      "× bare twin (same requests)",
      "req/s ÷ twin's",
    ],
    [
      ...(bareResult
        ? [
            [
              "bare workerd Worker (one fetch()) → 4 replicas, GET /hello",
              bareResult.connections,
              f(bareResult.rps, 0),
              f(bareResult.p50ms, 2),
              f(bareResult.p99ms, 2),
              f(bareResult.cpuSeconds, 2),
              f(bareResult.usPerRequest, 0),
              "–",
              "1.00",
              "",
              "",
              "",
            ],
          ]
        : []),
      ...results.map((r) => [
        r.kind,
        r.connections,
        f(r.rps, 0),
        f(r.p50ms, 2),
        f(r.p99ms, 2),
        f(r.cpu.seconds, 2),
        f(r.cpu.usPerRequest, 0),
        f(r.cpu.usPerRequestNetOfIdle, 0),
        r.ratioToBare && rounds > 1 ? `**${f(r.ratioToBare.median, 2)}** (${f(r.ratioToBare.min, 2)}–${f(r.ratioToBare.max, 2)})` : bareResult ? f(r.cpu.usPerRequest / bareResult.usPerRequest, 2) : "–",
        ...(r.twin && r.ratioToTwin
          ? [
              `${f(r.twin.usPerRequest, 0)}, ${f(r.twin.rps, 0)}${r.twin.non2xx ? ` (${r.twin.non2xx} non-2xx)` : ""}`,
              `**${f(r.ratioToTwin.median, 2)}**${rounds > 1 ? ` (${f(r.ratioToTwin.min, 2)}–${f(r.ratioToTwin.max, 2)})` : ""}`,
              f(r.rpsRatioToTwin ?? NaN, 2),
            ]
          : ["–", "–", "–"]),
      ]),
    ],
  ),
  "",
  "A kind's bare twin sends the same requests (its wrk script and connections) through a bare Worker to the same replicas: the floor for those requests,",
  "its POST body and headers included. Multiplexed requests' twin sends each model to one replica (load-tools.ts modelPinnedWorker).",
  "",
  ...(rebuiltResult
    ? [`Rebuilt Worker (headers copied and set both ways, a new Response): ${f(rebuiltResult.usPerRequest, 0)} µs per request, ${f(rebuiltResult.rps, 0)} req/s, **${f(rebuiltResult.ratioToBare.median, 2)}** × bare (${f(rebuiltResult.ratioToBare.min, 2)}–${f(rebuiltResult.ratioToBare.max, 2)}).`]
    : []),
  ...(bareResult && rounds > 1 ? [`Bare Worker per round: ${bareResult.rounds.map((u) => f(u, 0)).join(", ")} µs per request.`] : []),
  `Idle (no client traffic; replica reports and Durable Object alarms only): ${f(1000 * idle.cpuPerSecond, 1)} ms CPU per second.`,
  ...(target ? [`Target: ${target.name} ≤ ${target.max}: **${f(target.value, 2)}** (${judgedText({ met: target.pass, ...(target.why && { why: target.why }) })}).`] : []),
  `${machine.cpus} CPUs shared by wrk, workerd and ${REPLICAS.hello + REPLICAS.vad + REPLICAS.keyed} replica processes; load average at start ${machine.loadavg1mAtStart}; request logs ${process.env.SWITCHYARD_REQUEST_LOGS ?? "on"}; run took ${((Date.now() - started) / 1000).toFixed(0)} s.`,
];
// An arm that served nothing gives no figure: stop before printing any (requireServed).
requireServed([...results.map((r) => ({ arm: r.kind, requests: r.requests, ok: r.requests - r.non2xx })), ...(bareResult ? [{ arm: "bare Worker", requests: bareResult.requests, ok: bareResult.requests - bareResult.non2xx }] : [])]);
console.log(lines.join("\n"));
writeResult(
  "state-cost",
  {
      machine,
      options: { seconds, rounds, kinds: onlyKinds ?? null, sessions: sessionPool, replicas: REPLICAS, connections: CONNECTIONS, keys: withKeyed ? KEYS : 0, requestLogs: process.env.SWITCHYARD_REQUEST_LOGS ?? "on", telemetryFlushS: TELEMETRY_FLUSH_S },
      isolates,
      kinds: results,
      bare: bareResult ?? null,
      rebuilt: rebuiltResult ?? null,
      idle,
      target: target ?? null,
      notes: [
        "Durable Object calls from the admin route GET /-/deployments/:name before and after each run; the routing object's snapshotCalls minus the admin read's own call.",
        "Telemetry flushes are not exposed on any route: estimated as isolates × seconds / 2 s.",
        "CPU is the whole workerd process: the Worker isolate and, locally, the Durable Objects (on Cloudflare they run elsewhere). 'net of idle' subtracts the idle CPU rate (replica reports, alarms) over the run.",
      ],
      seconds: (Date.now() - started) / 1000,
  },
  { quick, ...(values.out ? { out: resolve(root, values.out) } : {}) },
);
process.exit(0);
