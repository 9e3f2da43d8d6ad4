/**
 * Dispatch quality on replicas of unequal speed (benchmarks issue, scenario 3):
 * the same fleet shape behind deployments that differ only in
 * `policy.balancer` — Switchyard's load-aware choice, round robin, random (every
 * registered balancer that does not read the prompt) —
 * driven one after another with the same load near fleet capacity.
 *
 *   npx tsx bench/dispatch-quality/dispatch-quality.ts [--seconds 8] [--quick] [--fleet queue|reject]
 *        [--load open|closed] [--utilization 0.85] [--base-ms 50] [--max-queued 64] [--seed 1]
 *
 * Fleet, per deployment (reference replicas, text backend, --service-ms on a timer):
 *   fast-a, fast-b   base ms,     max_ongoing 8
 *   slow             3 × base ms, max_ongoing 8   (three times slower)
 *   small            base ms,     max_ongoing 2   (less capacity)
 * Fleet capacity = Σ max_ongoing / service time (≈ 413 req/s at base 50 ms, the
 * queue fleet's default; ≈ 1,033 req/s at base 20 ms, the reject fleet's, which
 * a 2-core machine cannot also drive open-loop without saturating its CPU).
 *
 * `--fleet queue` (default): every replica also has a FIFO waiting queue of
 * `--max-queued` (64) requests (the replica's --max-queued), as engines have
 * (vLLM's waiting queue, Ray Serve's max_queued_requests): a request that finds
 * the slots taken waits instead of being refused, and only a full queue refuses.
 * A load-blind balancer keeps sending the slow and the small replica a quarter
 * of the traffic each, more than they can serve, and their queues grow: the
 * tail latency users see. Default load: open loop, Poisson arrivals at
 * `utilization` × fleet capacity.
 *
 * `--fleet reject`: the replicas refuse at max_ongoing (no queue), the earlier
 * scenario. Default load: closed loop, `utilization` × Σ max_ongoing clients
 * (22 of 26 slots), each sending its next request when its last one ends: with
 * replicas that refuse, an open loop near capacity is a loss system (Erlang B)
 * where even a perfect balancer fails requests.
 *
 * Honesty: every arm gets the same seeded arrival sequence (open loop); each
 * arm's run is one arrival process of warm-up + measured seconds, and requests
 * scheduled in the warm-up (2 s) are left out of the figures, so queues are in
 * their steady state when the measurement starts. Before the first measured arm,
 * every arm gets one unmeasured run, so that no arm pays for JIT and new
 * connections. Latency runs from each request's scheduled start (the
 * generator's own lag counts against the arm, and is reported). The arms run
 * one after another, each on an idle fleet.
 *
 * Reports per arm: req/s, p50/p90/p99 of successful requests, failures
 * (non-200), replica rejections in the measured window (from each replica's
 * /-/healthz), the proxy's retries and rejections (from /-/metrics, over the
 * arm's warm-up and measured window), per-replica shares, p99 and queue depth
 * (sampled every 200 ms), the machine's CPU use split into this benchmark's
 * processes and other work, and the generator's CPU and lag. A row measured
 * with the machine over 90 % busy, over 20 % of it busy with other work, or the
 * generator over 20 ms late (p99) is flagged and the verdict marked not valid.
 * Prints markdown and writes bench/results/dispatch-quality.json. Target:
 * load-aware p99 ≤ 1/3 of round robin's.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readFileSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { writeResult } from "../shared/result-file.ts";
import { ratioTarget } from "../shared/bench-targets.ts";
import { judgedText, markdownTable } from "../shared/table.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { BALANCERS, type BalancerName } from "../../src/policy/balancers/index.ts";
import { mulberry32 } from "../../src/seeded-random.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "8" },
    quick: { type: "boolean", default: false },
    fleet: { type: "string", default: "queue" },
    load: { type: "string" },
    utilization: { type: "string", default: "0.85" },
    "base-ms": { type: "string" },
    "max-queued": { type: "string", default: "64" },
    seed: { type: "string", default: "1" },
  },
});
const seconds = values.quick ? 3 : Number(values.seconds);
const fleet = values.fleet;
if (fleet !== "queue" && fleet !== "reject") throw new Error("--fleet must be queue or reject");
const loadMode = values.load ?? (fleet === "queue" ? "open" : "closed");
const utilization = Number(values.utilization);
const baseMs = Number(values["base-ms"] ?? (fleet === "queue" ? 50 : 20));
const maxQueued = fleet === "queue" ? Number(values["max-queued"]) : 0;
const seed = Number(values.seed);
/** Long enough for round robin's queues to reach their bound at the default load (~1.8 s for the slow replica). */
const WARMUP_S = 2;
if (!(seconds > 0 && seconds + WARMUP_S <= 10)) throw new Error(`--seconds must be in (0, ${10 - WARMUP_S}] (each load run, warm-up included, stays within 10 s)`);
if (loadMode !== "open" && loadMode !== "closed") throw new Error("--load must be open or closed");
if (!(utilization > 0 && utilization <= 1.5)) throw new Error("--utilization must be in (0, 1.5]");
if (!(Number.isInteger(baseMs) && baseMs >= 1)) throw new Error("--base-ms must be a positive integer");
if (!(Number.isInteger(maxQueued) && maxQueued >= 0)) throw new Error("--max-queued must be a non-negative integer");

interface ReplicaShape {
  role: string;
  serviceMs: number;
  maxOngoing: number;
}
const SHAPES: ReplicaShape[] = [
  { role: "fast-a", serviceMs: baseMs, maxOngoing: 8 },
  { role: "fast-b", serviceMs: baseMs, maxOngoing: 8 },
  { role: "slow", serviceMs: 3 * baseMs, maxOngoing: 8 },
  { role: "small", serviceMs: baseMs, maxOngoing: 2 },
];
const capacityRps = SHAPES.reduce((a, s) => a + (1000 * s.maxOngoing) / s.serviceMs, 0);
const slots = SHAPES.reduce((a, s) => a + s.maxOngoing, 0);
const rate = utilization * capacityRps;
const concurrency = Math.max(1, Math.round(utilization * slots));

/**
 * One arm per registered balancer that decides without the prompt (src/policy/balancers/):
 * this load is plain GETs, with no prompt, under which a prefix balancer would choose
 * exactly as load_aware does.
 */
type Balancer = BalancerName;
/** The share of a load-blind arm's requests that may be refused before the run is no result (see writeResult below). */
const LOAD_BLIND_TOLERANCE = 0.75;

const ARMS: { balancer: Balancer; name: string; label: string }[] = BALANCERS.filter((b) => !b.readsPrompt).map((b) => ({
  balancer: b.name,
  name: `dq-${b.name.replaceAll("_", "-")}`,
  label: b.name === "load_aware" ? "Switchyard (load_aware)" : b.name,
}));

interface Sample {
  status: number;
  replica: string;
  /** When it was due, ms after the run's start (open loop: its arrival; closed loop: its send). */
  dueMs: number;
  /** From the scheduled start (open loop) or the send (closed loop) to the end of the body. */
  ms: number;
  /** How late the generator sent it after its scheduled time (open loop). */
  lagMs: number;
  error?: string;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function one(url: string, runStart: number, scheduled: number, out: Sample[]): Promise<void> {
  const sent = performance.now();
  const base = { dueMs: scheduled - runStart, lagMs: sent - scheduled };
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(15_000) });
    const text = await res.text();
    out.push({
      status: res.status,
      replica: res.headers.get("x-switchyard-replica") ?? "?",
      ms: performance.now() - scheduled,
      ...base,
      ...(res.status !== 200 ? { error: text.slice(0, 300) } : {}),
    });
  } catch (err) {
    out.push({ status: 0, replica: "?", ms: performance.now() - scheduled, ...base, error: String((err as Error).cause ?? err) });
  }
}

/** Hooks run once the run has lasted `afterMs` (measurement boundaries); what is left runs at its end. */
type Marks = { afterMs: number; run: () => void }[];

function fireMarks(marks: Marks, start: number, all = false): void {
  const elapsed = performance.now() - start;
  while (marks.length && (all || marks[0]!.afterMs <= elapsed)) marks.shift()!.run();
}

/** Poisson arrivals at `rps` for `secs`; requests never wait for each other. */
async function openLoop(url: string, rps: number, secs: number, rand: () => number, marks: Marks): Promise<Sample[]> {
  const out: Sample[] = [];
  const pending = new Set<Promise<void>>();
  const start = performance.now();
  const end = start + secs * 1000;
  let next = start;
  while (next < end) {
    const now = performance.now();
    fireMarks(marks, start);
    while (next <= now && next < end) {
      const p = one(url, start, next, out);
      pending.add(p);
      void p.then(() => pending.delete(p));
      next += (-Math.log(1 - rand()) * 1000) / rps;
    }
    if (next < end) await sleep(Math.max(0, Math.min(next, start + (marks[0]?.afterMs ?? Infinity)) - performance.now()));
  }
  await sleep(Math.max(0, end - performance.now()));
  fireMarks(marks, start, true);
  await Promise.all(pending);
  return out;
}

/** `clients` loops of one request after another for `secs`. */
async function closedLoop(url: string, clients: number, secs: number, marks: Marks): Promise<Sample[]> {
  const out: Sample[] = [];
  const start = performance.now();
  const end = start + secs * 1000;
  const ticker = setInterval(() => fireMarks(marks, start), 5);
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) await one(url, start, performance.now(), out);
    }),
  );
  clearInterval(ticker);
  fireMarks(marks, start, true);
  return out;
}

const drive = (url: string, secs: number, marks: Marks) =>
  loadMode === "open" ? openLoop(url, rate, secs, mulberry32(seed), marks) : closedLoop(url, concurrency, secs, marks);

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};
/** Clock ticks per second of /proc/<pid>/stat's utime and stime. */
const CLK_TCK = (() => {
  try {
    return Number(execFileSync("getconf", ["CLK_TCK"], { encoding: "utf8" }).trim()) || 100;
  } catch {
    return 100;
  }
})();

/** utime + stime of the processes (all their threads), in seconds; a process that is gone counts 0. */
function processCpuS(pids: readonly number[]): number {
  let ticks = 0;
  for (const pid of pids) {
    try {
      const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
      const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      ticks += Number(f[11]) + Number(f[12]);
    } catch {
      // gone, or not Linux
    }
  }
  return ticks / CLK_TCK;
}

/** The pid of the workerd process whose command line names `configPath`. */
function workerdPid(configPath: string): number | undefined {
  try {
    for (const entry of readdirSync("/proc")) {
      if (!/^\d+$/.test(entry)) continue;
      try {
        if (readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0").includes(configPath)) return Number(entry);
      } catch {
        // exited meanwhile
      }
    }
  } catch {
    // no /proc
  }
  return undefined;
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : NaN);

/** Busy and total jiffies of the whole machine (Linux), to tell whether the CPU was the bottleneck. */
function cpuTimes(): { busy: number; total: number } | undefined {
  try {
    const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
    const idle = f[3]! + (f[4] ?? 0);
    const total = f.reduce((a, b) => a + b, 0);
    return { busy: total - idle, total };
  } catch {
    return undefined;
  }
}

// --- the stack -------------------------------------------------------------

// Request logs cost CPU on a 2-core machine and say nothing about balancing; on unless set.
process.env.SWITCHYARD_REQUEST_LOGS ??= "off";
const functionsDir = mkdtempSync(join(tmpdir(), "switchyard-dq-functions-"));
const stateDir = mkdtempSync(join(tmpdir(), "switchyard-dq-state-"));
const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));
for (const arm of ARMS) {
  writeFileSync(
    join(functionsDir, `${arm.name}.ts`),
    `import { defineDeployment } from ${config};
export default defineDeployment({
  name: ${JSON.stringify(arm.name)}, routePrefix: ${JSON.stringify(`/${arm.name}`)}, access: { public: true },
  backend: { kind: "text", text: "hi" }, localReplicas: 0, maxOngoingRequests: 8,
  policy: { balancer: ${JSON.stringify(arm.balancer)} },
  // Locally every client is one client (the address workerd listens on): its share of the cap is the whole cap,
  // or the load-blind arms' queues meet the per-client share (a quarter) and are refused with 429.
  limits: { maxPendingRequestsPerClient: 1024 },
});
`,
  );
}

const logLines: string[] = [];
const stack = new LocalStack({ port: 0, stateDir, functionsDir, freshState: true, log: (l) => logLines.push(l) });
process.on("SIGINT", () => {
  stack.killAll();
  process.exit(130);
});

const admin = () => ({ authorization: `Bearer ${stack.adminSecret}` });

async function metrics(): Promise<string> {
  return (await fetch(`${stack.workerdUrl}/-/metrics`, { headers: admin() })).text();
}
function counter(text: string, name: string, deployment: string): number {
  let sum = 0;
  const prefix = `${name}{deployment="${deployment}"`;
  for (const line of text.split("\n")) if (line.startsWith(prefix)) sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  return sum;
}

/** Sent so far per deployment (every request the proxy answered or we gave up on). */
const sentTo = new Map<string, number>();

type Counters = Record<string, { requests: number; sent: number; retries: number; rejections: number; settled: boolean }>;

/**
 * Counters after the isolate's next flushes: the isolate flushes at most every
 * 2 s, triggered by a request. Waits that out and sends one request per
 * deployment (the first triggers a flush), waits again and sends one more (a
 * flush that carries the other deployments' requests too), then polls until
 * the request totals match what was sent. Before any request, all are 0.
 */
async function settledCounters(): Promise<Counters> {
  if (sentTo.size === 0) return Object.fromEntries(ARMS.map((a) => [a.name, { requests: 0, sent: 0, retries: 0, rejections: 0, settled: true }]));
  const poke = async (name: string) => {
    await (await fetch(`${stack.workerdUrl}/${name}`)).text();
    sentTo.set(name, (sentTo.get(name) ?? 0) + 1);
  };
  await sleep(2_500);
  for (const arm of ARMS) await poke(arm.name);
  await sleep(2_200);
  await poke(ARMS[0]!.name);
  let text = "";
  let settled = false;
  for (let i = 0; i < 40 && !settled; i++) {
    await sleep(100);
    text = await metrics();
    settled = ARMS.every((a) => counter(text, "switchyard_requests_total", a.name) === sentTo.get(a.name));
  }
  return Object.fromEntries(
    ARMS.map((a) => [
      a.name,
      {
        requests: counter(text, "switchyard_requests_total", a.name),
        sent: sentTo.get(a.name) ?? 0,
        retries: counter(text, "switchyard_retries_total", a.name),
        rejections: counter(text, "switchyard_replica_rejections_total", a.name),
        settled,
      },
    ]),
  );
}

async function waitReady(name: string, n: number): Promise<void> {
  for (let i = 0; i < 100; i++) {
    const state = await stack.deploymentState(name);
    if (state.snapshot.replicas.filter((r) => r.load.state === "ready").length >= n) return;
    await sleep(100);
  }
  throw new Error(`${name}: fewer than ${n} ready replicas after 10 s`);
}

interface Health {
  ongoing: number;
  queued?: number;
  admitted: number;
  rejected: number;
}
/** Replica URL per deployment and role. */
const replicaUrls = new Map<string, string>();
const health = async (url: string): Promise<Health> => (await (await fetch(`${url}/-/healthz`)).json()) as Health;
const healthOf = (arm: string) => Promise.all(SHAPES.map((s) => health(replicaUrls.get(`${arm}-${s.role}`)!)));

/** Samples every replica's queue depth and ongoing count until stopped. */
function sampleQueues(arm: string, everyMs: number): { stop: () => Promise<{ queued: number[]; ongoing: number[] }[]> } {
  const series = SHAPES.map(() => ({ queued: [] as number[], ongoing: [] as number[] }));
  let running = true;
  const loop = (async () => {
    while (running) {
      const t = performance.now();
      try {
        const hs = await healthOf(arm);
        hs.forEach((h, i) => {
          series[i]!.queued.push(h.queued ?? 0);
          series[i]!.ongoing.push(h.ongoing);
        });
      } catch {
        // a missed sample
      }
      await sleep(Math.max(0, everyMs - (performance.now() - t)));
    }
  })();
  return {
    stop: async () => {
      running = false;
      await loop;
      return series;
    },
  };
}

try {
  await stack.start();
  await Promise.all(
    ARMS.flatMap((arm) =>
      SHAPES.map(async (s) => {
        const rp = await stack.startReplica(arm.name, {
          id: `${arm.name}-${s.role}`,
          maxOngoing: s.maxOngoing,
          backendArgs: ["--backend", "text", "--text", "hi", "--service-ms", String(s.serviceMs), "--max-queued", String(maxQueued)],
        });
        replicaUrls.set(rp.id, rp.url);
      }),
    ),
  );
  for (const arm of ARMS) await waitReady(arm.name, SHAPES.length);
  // This benchmark's processes: the generator (and the stack's front), workerd, every replica.
  const wpid = workerdPid(join(stateDir, "workerd.capnp"));
  const ownPids = [process.pid, ...(wpid ? [wpid] : []), ...[...stack.replicas.values()].flatMap((r) => (r.child.pid ? [r.child.pid] : []))];
  const ncpu = cpus().length;

  // Every arm once, unmeasured, before any is measured (connections, JIT, the proxy's
  // views), so that the first measured arm does not pay for starting the machinery.
  for (const arm of ARMS) {
    const w = await drive(`${stack.workerdUrl}/${arm.name}`, 1, []);
    sentTo.set(arm.name, (sentTo.get(arm.name) ?? 0) + w.length);
  }
  const before = await settledCounters();
  const arms = [];
  for (const arm of ARMS) {
    // The fleet is idle (queues empty) before each arm.
    for (let i = 0; i < 100; i++) {
      const hs = await healthOf(arm.name);
      if (hs.every((h) => h.ongoing === 0 && (h.queued ?? 0) === 0)) break;
      await sleep(100);
    }
    // What the machine does with this benchmark idle (other work shows up here).
    const idle0 = cpuTimes();
    await sleep(1_000);
    const idle1 = cpuTimes();

    // One arrival process of warm-up + measured seconds; the marks open and close the measured window.
    let cpu0: ReturnType<typeof cpuTimes>;
    let cpu1: ReturnType<typeof cpuTimes>;
    let own0 = 0;
    let own1 = 0;
    let gen0 = process.cpuUsage();
    let gen: NodeJS.CpuUsage = { user: 0, system: 0 };
    let h0: Promise<Health[]> = Promise.resolve([]);
    let sampler: ReturnType<typeof sampleQueues> | undefined;
    let sampled: ReturnType<ReturnType<typeof sampleQueues>["stop"]> | undefined;
    const marks: Marks = [
      {
        afterMs: WARMUP_S * 1000,
        run: () => {
          cpu0 = cpuTimes();
          own0 = processCpuS(ownPids);
          gen0 = process.cpuUsage();
          h0 = healthOf(arm.name);
          sampler = sampleQueues(arm.name, 200);
        },
      },
      {
        afterMs: (WARMUP_S + seconds) * 1000,
        run: () => {
          cpu1 = cpuTimes();
          own1 = processCpuS(ownPids);
          gen = process.cpuUsage(gen0);
          sampled = sampler?.stop();
        },
      },
    ];
    const all = await drive(`${stack.workerdUrl}/${arm.name}`, WARMUP_S + seconds, marks);
    const queues = await sampled!;
    const h1 = await healthOf(arm.name);
    const h0v = await h0;
    sentTo.set(arm.name, (sentTo.get(arm.name) ?? 0) + all.length);
    const samples = all.filter((s) => s.dueMs >= WARMUP_S * 1000 && s.dueMs < (WARMUP_S + seconds) * 1000);
    const ok = samples.filter((s) => s.status === 200);
    const byReplica: Record<string, { requests: number; share: number; p50ms: number; p99ms: number; rejected: number; queuedMean: number; queuedMax: number; ongoingMean: number }> = {};
    SHAPES.forEach((s, i) => {
      const mine = ok.filter((x) => x.replica === `${arm.name}-${s.role}`);
      byReplica[s.role] = {
        requests: mine.length,
        share: mine.length / Math.max(1, ok.length),
        p50ms: pct(mine.map((x) => x.ms), 50),
        p99ms: pct(mine.map((x) => x.ms), 99),
        rejected: h1[i]!.rejected - (h0v[i]?.rejected ?? 0),
        queuedMean: mean(queues[i]!.queued),
        queuedMax: Math.max(0, ...queues[i]!.queued),
        ongoingMean: mean(queues[i]!.ongoing),
      };
    });
    const failures: Record<string, number> = {};
    for (const s of samples) if (s.status !== 200) failures[String(s.status)] = (failures[String(s.status)] ?? 0) + 1;
    const lags = samples.map((s) => s.lagMs);
    arms.push({
      balancer: arm.balancer,
      label: arm.label,
      deployment: arm.name,
      requests: samples.length,
      ok: ok.length,
      failed: samples.length - ok.length,
      failures,
      failureExamples: samples.filter((s) => s.status !== 200).slice(0, 3).map((s) => `${s.status} ${s.error ?? ""}`),
      rps: samples.length / seconds,
      okRps: ok.length / seconds,
      p50ms: pct(ok.map((s) => s.ms), 50),
      p90ms: pct(ok.map((s) => s.ms), 90),
      p99ms: pct(ok.map((s) => s.ms), 99),
      maxMs: ok.reduce((m, s) => Math.max(m, s.ms), 0),
      /** Refusals by the replicas in the measured window (each is a retry or a failure at the proxy). */
      replicaRejections: Object.values(byReplica).reduce((a, r) => a + r.rejected, 0),
      byReplica,
      generator: {
        cpuShareOfOneCore: (gen.user + gen.system) / 1e6 / seconds,
        lagP50ms: loadMode === "open" ? pct(lags, 50) : null,
        lagP99ms: loadMode === "open" ? pct(lags, 99) : null,
        lagMaxMs: loadMode === "open" ? Math.max(0, ...lags) : null,
      },
      machineCpuBusy: cpu0! && cpu1! ? (cpu1.busy - cpu0.busy) / Math.max(1, cpu1.total - cpu0.total) : null,
      /** CPU of this benchmark's processes (generator, workerd, replicas) in the measured window, as a share of the machine. */
      ownCpu: wpid ? (own1 - own0) / seconds / ncpu : null,
      machineCpuBusyBefore: idle0 && idle1 ? (idle1.busy - idle0.busy) / Math.max(1, idle1.total - idle0.total) : null,
    });
  }
  const after = await settledCounters();

  const rows = arms.map((a) => ({
    ...a,
    /** The proxy's counters over the arm's warm-up and measured window. */
    retries: after[a.deployment]!.retries - before[a.deployment]!.retries,
    rejections: after[a.deployment]!.rejections - before[a.deployment]!.rejections,
    countersSettled: before[a.deployment]!.settled && after[a.deployment]!.settled,
    counters: { before: before[a.deployment], after: after[a.deployment] },
    // The proxy, the replicas and the generator share this machine: a row measured
    // while it was saturated, or while something else ran, says more about the CPU
    // than about the balancer.
    /** Other work on the machine during the measured window (machine busy minus this benchmark's processes). */
    otherCpu: a.machineCpuBusy !== null && a.ownCpu !== null ? Math.max(0, a.machineCpuBusy - a.ownCpu) : null,
    cpuBound: [
      a.machineCpuBusy !== null && a.ownCpu !== null && a.machineCpuBusy - a.ownCpu > 0.2
        ? `${(100 * (a.machineCpuBusy - a.ownCpu)).toFixed(0)} % of the machine busy with other work during the arm`
        : a.ownCpu === null && a.machineCpuBusyBefore !== null && a.machineCpuBusyBefore > 0.2
          ? `${(100 * a.machineCpuBusyBefore).toFixed(0)} % CPU busy before the arm (other work on the machine)`
          : "",
      a.machineCpuBusy !== null && a.machineCpuBusy > 0.9 ? `${(100 * a.machineCpuBusy).toFixed(0)} % CPU busy during the arm` : "",
      a.generator.lagP99ms !== null && a.generator.lagP99ms > 20 ? `generator lag p99 ${a.generator.lagP99ms.toFixed(0)} ms` : "",
    ].filter(Boolean),
  }));
  const la = rows.find((r) => r.balancer === "load_aware")!;
  const rr = rows.find((r) => r.balancer === "round_robin")!;
  const rnd = rows.find((r) => r.balancer === "random")!;
  const ratioRr = la.p99ms / rr.p99ms;
  const ratioRandom = la.p99ms / rnd.p99ms;

  const fleetText = fleet === "queue" ? `replicas queue up to ${maxQueued} beyond max_ongoing` : "replicas refuse at max_ongoing (no queue)";
  const loadText =
    loadMode === "open"
      ? `open loop, Poisson arrivals at ${rate.toFixed(0)} req/s (${(100 * utilization).toFixed(0)} % of ${capacityRps.toFixed(0)} req/s fleet capacity, seed ${seed})`
      : `closed loop, ${concurrency} clients (${(100 * utilization).toFixed(0)} % of ${slots} slots; fleet capacity ${capacityRps.toFixed(0)} req/s)`;
  console.log(
    `\nPer deployment 4 replicas: ${SHAPES.map((s) => `${s.role} ${s.serviceMs} ms × ${s.maxOngoing}`).join(", ")}; ${fleetText}; ${loadText}; ${seconds} s measured per arm after ${WARMUP_S} s warm-up; request logs ${process.env.SWITCHYARD_REQUEST_LOGS}.\n`,
  );
  const capShare = SHAPES.map((s) => (1000 * s.maxOngoing) / s.serviceMs / capacityRps);
  const table = rows.map((r) => {
    const shares = SHAPES.map((s) => `${(100 * r.byReplica[s.role]!.share).toFixed(1)}`).join(" / ");
    const queues = SHAPES.map((s) => r.byReplica[s.role]!.queuedMean.toFixed(1)).join(" / ");
    const lag = `${(100 * r.generator.cpuShareOfOneCore).toFixed(0)} % of a core${r.generator.lagP99ms === null ? "" : `, ${r.generator.lagP99ms.toFixed(1)} / ${r.generator.lagMaxMs!.toFixed(1)} ms`}`;
    const p = (x: number | null) => (x === null ? "–" : `${(100 * x).toFixed(0)}`);
    const cpu = `${p(r.machineCpuBusy)} / ${p(r.ownCpu)} / ${p(r.otherCpu)} % (${p(r.machineCpuBusyBefore)} %)`;
    const q = r.countersSettled ? "" : "?";
    return [r.label, r.okRps.toFixed(0), r.p50ms.toFixed(1), r.p90ms.toFixed(1), r.p99ms.toFixed(1), r.failed, r.replicaRejections, `${r.retries}${q} / ${r.rejections}${q}`, `${shares} %`, queues, cpu, lag];
  });
  table.push(["(capacity share)", "", "", "", "", "", "", "", `${capShare.map((c) => (100 * c).toFixed(1)).join(" / ")} %`, "", "", ""]);
  console.log(
    markdownTable(
      [
        "balancer",
        "ok req/s",
        "p50 ms",
        "p90 ms",
        "p99 ms",
        "failed (non-200)",
        "replica rejections",
        "proxy retries / rejections (incl. warm-up)",
        "share fast-a / fast-b / slow / small",
        "mean queue fast-a / fast-b / slow / small",
        "CPU: machine / this bench / other (before the arm)",
        "generator CPU, lag p99 / max",
      ],
      table,
      "lrrrrrrrllrr",
    ).join("\n"),
  );
  for (const r of rows) for (const f of r.failureExamples) console.log(`${r.label}: ${f}`);
  for (const r of rows) if (r.cpuBound.length) console.log(`WARNING ${r.label}: ${r.cpuBound.join("; ")}: CPU-bound, not a measure of the balancer`);
  const trustworthy = la.cpuBound.length === 0 && rr.cpuBound.length === 0;
  // Over MIN_SAMPLES answers in both arms (bench-targets.ts): a p99 of nothing is no result.
  const ratioJudged = ratioTarget({ value: la.p99ms, answers: la.ok }, { value: rr.p99ms, answers: rr.ok }, { atLeast: false, threshold: 1 / 3 });
  const judged = `${judgedText(ratioJudged)}${trustworthy ? "" : " (not valid: a compared arm was CPU-bound, see WARNING)"}`;
  console.log(`\nSwitchyard p99 / round_robin p99 = ${la.p99ms.toFixed(1)} / ${rr.p99ms.toFixed(1)} = ${ratioRr.toFixed(2)} (target ≤ 0.33): ${judged}`);
  console.log(`Switchyard p99 / random p99      = ${la.p99ms.toFixed(1)} / ${rnd.p99ms.toFixed(1)} = ${ratioRandom.toFixed(2)}`);
  console.log(`per-replica p99 ms / max queue (fast-a / fast-b / slow / small):`);
  for (const r of rows) console.log(`  ${r.label}: ${SHAPES.map((s) => `${r.byReplica[s.role]!.p99ms.toFixed(1)} / ${r.byReplica[s.role]!.queuedMax}`).join(", ")}`);
  if (rows.some((r) => !r.countersSettled)) {
    console.log("(?: the proxy's counters had not caught up with every request when read)");
    for (const r of rows) console.log(`  ${r.label}: requests_total ${r.counters.before?.requests}/${r.counters.before?.sent} before, ${r.counters.after?.requests}/${r.counters.after?.sent} after`);
  }

  const result = {
    when: new Date().toISOString(),
    setup: {
      fleet,
      replicas: SHAPES.map((s) => ({ ...s, maxQueued })),
      fleetCapacityRps: capacityRps,
      slots,
      load: loadMode === "open" ? { mode: "open", rps: rate, utilization, arrivals: "poisson", seed } : { mode: "closed", clients: concurrency, utilization },
      seconds,
      warmupSeconds: WARMUP_S,
      requestLogs: process.env.SWITCHYARD_REQUEST_LOGS,
      target: "workerd port (HTTP/1.1 keep-alive)",
      latency: loadMode === "open" ? "from scheduled start to end of body, successful requests scheduled in the measured window" : "from send to end of body, successful requests sent in the measured window",
      counters: "replicaRejections: replicas' /-/healthz over the measured window; retries and rejections: the proxy's /-/metrics over warm-up and measured window",
    },
    arms: rows,
    ratios: {
      loadAwareP99OverRoundRobinP99: ratioRr,
      target: 1 / 3,
      met: ratioJudged.met,
      verdict: judged,
      loadAwareP99OverRandomP99: ratioRandom,
    },
  };
  // The load-blind arms' refusals are what they measure: open loop at this share of the
  // fleet's capacity, they send the slow and small replicas more than those serve, so the
  // edge's queue for them fills (limits.maxPendingRequests) and refuses the rest (503,
  // counted as failed above; their p99 is over what they served, which flatters them).
  // Switchyard's arm must serve what it was sent (1 %).
  const armCounts = arms.map((a) => ({ arm: a.label, requests: a.requests, ok: a.ok, ...(a.balancer === "load_aware" ? {} : { tolerance: LOAD_BLIND_TOLERANCE }) }));
  console.log(`wrote ${writeResult("dispatch-quality", result, { quick: values.quick, arms: armCounts })}`);
} catch (err) {
  console.error(logLines.filter((l) => !/registered|listening/.test(l)).slice(-30).join("\n"));
  throw err;
} finally {
  await stack.stop();
  rmSync(stateDir, { recursive: true, force: true });
  rmSync(functionsDir, { recursive: true, force: true });
}
