/**
 * Dispatch quality on replicas of unequal speed (benchmarks issue, scenario 3):
 * the same fleet shape behind three deployments that differ only in
 * `policy.balancer` — Switchyard's load-aware choice, round robin, random —
 * driven one after another with the same load near fleet capacity.
 *
 *   npx tsx bench/dispatch-quality.ts [--seconds 8] [--quick] [--load closed|open]
 *        [--utilization 0.85] [--base-ms 20] [--seed 1]
 *
 * Fleet, per deployment (reference replicas, text backend, --service-ms on a timer):
 *   fast-a, fast-b   base ms,     max_ongoing 8
 *   slow             3 × base ms, max_ongoing 8   (three times slower)
 *   small            base ms,     max_ongoing 2   (less capacity)
 * Fleet capacity = Σ max_ongoing / service time (≈ 1,033 req/s at base 20 ms).
 *
 * Load (default closed): `utilization` × Σ max_ongoing clients (22 of 26 slots),
 * each sending its next request when the last one ends. This is the fair
 * comparison for these replicas, which reject at max_ongoing instead of
 * queueing: every arm has the same number of requests in the system, fewer
 * than the fleet's slots, so a balancer that sees load never has to be refused
 * and a load-blind one shows its refusals, retries and the latency they cost;
 * the price of a worse choice also shows as fewer req/s (Little's law). With
 * `--load open` (Poisson arrivals at `utilization` × fleet capacity, the same
 * seeded sequence for every arm, latency from each request's scheduled start)
 * every arm is offered the same work, but near capacity the fleet becomes a
 * loss system: bursts find every slot taken and even a perfect balancer must
 * fail requests (Erlang B), and percentiles over the successful requests then
 * leave out a different set of requests per arm. Each arm gets 1 s of
 * unmeasured warm-up at the same load.
 *
 * Reports req/s, p50/p99 of successful requests, failures (non-200), the
 * proxy's retries and replica rejections (from /-/metrics, deltas over the
 * measured arms), per-replica shares (x-switchyard-replica), the machine's CPU
 * use and the generator's lag. Prints markdown and writes
 * bench/results/dispatch-quality.json. Target: load-aware p99 ≤ 1/3 of
 * round robin's.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { LocalStack } from "../src/local/stack.ts";
import { mulberry32 } from "../test/unit/seeded-random.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "8" },
    quick: { type: "boolean", default: false },
    load: { type: "string", default: "closed" },
    utilization: { type: "string", default: "0.85" },
    "base-ms": { type: "string", default: "20" },
    seed: { type: "string", default: "1" },
  },
});
const seconds = values.quick ? 3 : Number(values.seconds);
const loadMode = values.load;
const utilization = Number(values.utilization);
const baseMs = Number(values["base-ms"]);
const seed = Number(values.seed);
if (!(seconds > 0 && seconds <= 9)) throw new Error("--seconds must be in (0, 9] (each load run, warm-up included, stays within 10 s)");
if (loadMode !== "open" && loadMode !== "closed") throw new Error("--load must be open or closed");
if (!(utilization > 0 && utilization <= 1.5)) throw new Error("--utilization must be in (0, 1.5]");
if (!(Number.isInteger(baseMs) && baseMs >= 1)) throw new Error("--base-ms must be a positive integer");
const WARMUP_S = 1;

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

type Balancer = "load_aware" | "round_robin" | "random";
const ARMS: { balancer: Balancer; name: string; label: string }[] = [
  { balancer: "load_aware", name: "dq-load-aware", label: "Switchyard (load_aware)" },
  { balancer: "round_robin", name: "dq-round-robin", label: "round_robin" },
  { balancer: "random", name: "dq-random", label: "random" },
];

interface Sample {
  status: number;
  replica: string;
  /** From the scheduled start (open loop) or the send (closed loop) to the end of the body. */
  ms: number;
  /** How late the generator sent it after its scheduled time (open loop). */
  lagMs: number;
  error?: string;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

async function one(url: string, scheduled: number, out: Sample[]): Promise<void> {
  const sent = performance.now();
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(15_000) });
    const text = await res.text();
    out.push({
      status: res.status,
      replica: res.headers.get("x-switchyard-replica") ?? "?",
      ms: performance.now() - scheduled,
      lagMs: sent - scheduled,
      ...(res.status !== 200 ? { error: text.slice(0, 300) } : {}),
    });
  } catch (err) {
    out.push({ status: 0, replica: "?", ms: performance.now() - scheduled, lagMs: sent - scheduled, error: String((err as Error).cause ?? err) });
  }
}

/** Poisson arrivals at `rps` for `secs`; requests never wait for each other. */
async function openLoop(url: string, rps: number, secs: number, rand: () => number): Promise<Sample[]> {
  const out: Sample[] = [];
  const pending = new Set<Promise<void>>();
  const start = performance.now();
  const end = start + secs * 1000;
  let next = start;
  while (next < end) {
    const now = performance.now();
    while (next <= now && next < end) {
      const p = one(url, next, out);
      pending.add(p);
      void p.then(() => pending.delete(p));
      next += (-Math.log(1 - rand()) * 1000) / rps;
    }
    if (next < end) await sleep(Math.max(0, next - performance.now()));
  }
  await Promise.all(pending);
  return out;
}

/** `clients` loops of one request after another for `secs`. */
async function closedLoop(url: string, clients: number, secs: number): Promise<Sample[]> {
  const out: Sample[] = [];
  const end = performance.now() + secs * 1000;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) await one(url, performance.now(), out);
    }),
  );
  return out;
}

const drive = (url: string, secs: number, arrivalSeed: number) =>
  loadMode === "open" ? openLoop(url, rate, secs, mulberry32(arrivalSeed)) : closedLoop(url, concurrency, secs);

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};

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
const config = JSON.stringify(resolve(import.meta.dirname, "../src/config/deployment.ts"));
for (const arm of ARMS) {
  writeFileSync(
    join(functionsDir, `${arm.name}.ts`),
    `import { defineDeployment } from ${config};
export default defineDeployment({
  name: ${JSON.stringify(arm.name)}, routePrefix: ${JSON.stringify(`/${arm.name}`)}, access: { public: true },
  backend: { kind: "text", text: "hi" }, localReplicas: 0, maxOngoingRequests: 8,
  policy: { balancer: ${JSON.stringify(arm.balancer)} },
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

/**
 * Counters after the isolate's next flushes: the isolate flushes at most every
 * 2 s, triggered by a request. Waits that out and sends one request per
 * deployment (the first triggers a flush), waits again and sends one more (a
 * flush that carries the other deployments' requests too), then polls until
 * the request totals match what was sent.
 */
async function settledCounters(): Promise<Record<string, { requests: number; sent: number; retries: number; rejections: number; settled: boolean }>> {
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

try {
  await stack.start();
  await Promise.all(
    ARMS.flatMap((arm) =>
      SHAPES.map((s) =>
        stack.startReplica(arm.name, {
          id: `${arm.name}-${s.role}`,
          maxOngoing: s.maxOngoing,
          backendArgs: ["--backend", "text", "--text", "hi", "--service-ms", String(s.serviceMs)],
        }),
      ),
    ),
  );
  for (const arm of ARMS) await waitReady(arm.name, SHAPES.length);

  // Warm-up of every arm (connections, JIT, the proxy's views), unmeasured.
  for (const arm of ARMS) {
    const w = await drive(`${stack.workerdUrl}/${arm.name}`, WARMUP_S, seed + 1000);
    sentTo.set(arm.name, (sentTo.get(arm.name) ?? 0) + w.length);
  }
  const before = await settledCounters();

  const arms = [];
  for (const arm of ARMS) {
    // What the machine does with this benchmark idle (other work shows up here).
    const idle0 = cpuTimes();
    await sleep(1_000);
    const idle1 = cpuTimes();
    const cpu0 = cpuTimes();
    const gen0 = process.cpuUsage();
    const t0 = performance.now();
    const samples = await drive(`${stack.workerdUrl}/${arm.name}`, seconds, seed);
    const elapsedS = (performance.now() - t0) / 1000;
    const gen = process.cpuUsage(gen0);
    const cpu1 = cpuTimes();
    sentTo.set(arm.name, (sentTo.get(arm.name) ?? 0) + samples.length);
    const ok = samples.filter((s) => s.status === 200);
    const byReplica: Record<string, { requests: number; share: number; p50ms: number; p99ms: number }> = {};
    for (const s of SHAPES) {
      const mine = ok.filter((x) => x.replica === `${arm.name}-${s.role}`);
      byReplica[s.role] = { requests: mine.length, share: mine.length / Math.max(1, ok.length), p50ms: pct(mine.map((x) => x.ms), 50), p99ms: pct(mine.map((x) => x.ms), 99) };
    }
    const failures: Record<string, number> = {};
    for (const s of samples) if (s.status !== 200) failures[String(s.status)] = (failures[String(s.status)] ?? 0) + 1;
    arms.push({
      balancer: arm.balancer,
      label: arm.label,
      deployment: arm.name,
      requests: samples.length,
      ok: ok.length,
      failed: samples.length - ok.length,
      failures,
      failureExamples: samples.filter((s) => s.status !== 200).slice(0, 3).map((s) => `${s.status} ${s.error ?? ""}`),
      rps: samples.length / elapsedS,
      okRps: ok.length / elapsedS,
      p50ms: pct(ok.map((s) => s.ms), 50),
      p90ms: pct(ok.map((s) => s.ms), 90),
      p99ms: pct(ok.map((s) => s.ms), 99),
      maxMs: ok.reduce((m, s) => Math.max(m, s.ms), 0),
      byReplica,
      generator: {
        cpuShareOfOneCore: (gen.user + gen.system) / 1e6 / elapsedS,
        lagP99ms: loadMode === "open" ? pct(samples.map((s) => s.lagMs), 99) : null,
        lagMaxMs: loadMode === "open" ? samples.reduce((m, s) => Math.max(m, s.lagMs), 0) : null,
      },
      machineCpuBusy: cpu0 && cpu1 ? (cpu1.busy - cpu0.busy) / Math.max(1, cpu1.total - cpu0.total) : null,
      machineCpuBusyBefore: idle0 && idle1 ? (idle1.busy - idle0.busy) / Math.max(1, idle1.total - idle0.total) : null,
    });
  }
  const after = await settledCounters();

  const rows = arms.map((a) => ({
    ...a,
    retries: after[a.deployment]!.retries - before[a.deployment]!.retries,
    rejections: after[a.deployment]!.rejections - before[a.deployment]!.rejections,
    countersSettled: before[a.deployment]!.settled && after[a.deployment]!.settled,
    counters: { before: before[a.deployment], after: after[a.deployment] },
    // The proxy, the replicas and the generator share this machine: a row measured
    // while it was saturated, or while something else ran, says more about the CPU
    // than about the balancer.
    cpuBound: [
      a.machineCpuBusyBefore !== null && a.machineCpuBusyBefore > 0.2 ? `${(100 * a.machineCpuBusyBefore).toFixed(0)} % CPU busy before the arm (other work on the machine)` : "",
      a.machineCpuBusy !== null && a.machineCpuBusy > 0.9 ? `${(100 * a.machineCpuBusy).toFixed(0)} % CPU busy during the arm` : "",
      a.generator.lagP99ms !== null && a.generator.lagP99ms > 20 ? `generator lag p99 ${a.generator.lagP99ms.toFixed(0)} ms` : "",
    ].filter(Boolean),
  }));
  const la = rows.find((r) => r.balancer === "load_aware")!;
  const rr = rows.find((r) => r.balancer === "round_robin")!;
  const rnd = rows.find((r) => r.balancer === "random")!;
  const ratioRr = la.p99ms / rr.p99ms;
  const ratioRandom = la.p99ms / rnd.p99ms;

  const loadText =
    loadMode === "open"
      ? `open loop, Poisson arrivals at ${rate.toFixed(0)} req/s (${(100 * utilization).toFixed(0)} % of ${capacityRps.toFixed(0)} req/s fleet capacity)`
      : `closed loop, ${concurrency} clients (${(100 * utilization).toFixed(0)} % of ${slots} slots; fleet capacity ${capacityRps.toFixed(0)} req/s)`;
  console.log(
    `\nPer deployment 4 replicas: ${SHAPES.map((s) => `${s.role} ${s.serviceMs} ms × ${s.maxOngoing}`).join(", ")}; ${loadText}; ${seconds} s per arm after ${WARMUP_S} s warm-up; request logs ${process.env.SWITCHYARD_REQUEST_LOGS}.\n`,
  );
  console.log("| balancer | req/s | p50 ms | p90 ms | p99 ms | failed (non-200) | retries | rejections | share fast-a / fast-b / slow / small | machine CPU (idle before) | generator CPU, lag p99 |");
  console.log("|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|");
  const capShare = SHAPES.map((s) => (1000 * s.maxOngoing) / s.serviceMs / capacityRps);
  for (const r of rows) {
    const shares = SHAPES.map((s) => `${(100 * r.byReplica[s.role]!.share).toFixed(1)}`).join(" / ");
    const lag = `${(100 * r.generator.cpuShareOfOneCore).toFixed(0)} % of a core${r.generator.lagP99ms === null ? "" : `, ${r.generator.lagP99ms.toFixed(1)} ms`}`;
    const cpu = r.machineCpuBusy === null ? "–" : `${(100 * r.machineCpuBusy).toFixed(0)} % (${(100 * (r.machineCpuBusyBefore ?? NaN)).toFixed(0)} %)`;
    console.log(
      `| ${r.label} | ${r.rps.toFixed(0)} | ${r.p50ms.toFixed(1)} | ${r.p90ms.toFixed(1)} | ${r.p99ms.toFixed(1)} | ${r.failed} | ${r.retries}${r.countersSettled ? "" : "?"} | ${r.rejections}${r.countersSettled ? "" : "?"} | ${shares} % | ${cpu} | ${lag} |`,
    );
  }
  console.log(`| (capacity share) | | | | | | | | ${capShare.map((c) => (100 * c).toFixed(1)).join(" / ")} % | | |`);
  for (const r of rows) for (const f of r.failureExamples) console.log(`${r.label}: ${f}`);
  // The proxy, the replicas and the generator share this machine: a row measured
  // while it was saturated, or while something else ran, says more about the CPU
  // than about the balancer.
  for (const r of rows) if (r.cpuBound.length) console.log(`WARNING ${r.label}: ${r.cpuBound.join("; ")}: CPU-bound, not a measure of the balancer`);
  const trustworthy = la.cpuBound.length === 0 && rr.cpuBound.length === 0;
  const verdict = `${ratioRr <= 1 / 3 ? "PASS" : "MISS"}${trustworthy ? "" : " (not valid: a compared arm was CPU-bound, see WARNING)"}`;
  console.log(`\nSwitchyard p99 / round_robin p99 = ${la.p99ms.toFixed(1)} / ${rr.p99ms.toFixed(1)} = ${ratioRr.toFixed(2)} (target ≤ 0.33): ${verdict}`);
  console.log(`Switchyard p99 / random p99      = ${la.p99ms.toFixed(1)} / ${rnd.p99ms.toFixed(1)} = ${ratioRandom.toFixed(2)}`);
  console.log(`per-replica p99 ms (fast-a / fast-b / slow / small):`);
  for (const r of rows) console.log(`  ${r.label}: ${SHAPES.map((s) => r.byReplica[s.role]!.p99ms.toFixed(1)).join(" / ")}`);
  if (rows.some((r) => !r.countersSettled)) {
    console.log("(?: the proxy's counters had not caught up with every request when read)");
    for (const r of rows) console.log(`  ${r.label}: requests_total ${r.counters.before?.requests}/${r.counters.before?.sent} before, ${r.counters.after?.requests}/${r.counters.after?.sent} after`);
  }

  const result = {
    when: new Date().toISOString(),
    setup: {
      replicas: SHAPES,
      fleetCapacityRps: capacityRps,
      slots,
      load: loadMode === "open" ? { mode: "open", rps: rate, utilization, arrivals: "poisson", seed } : { mode: "closed", clients: concurrency, utilization },
      seconds,
      warmupSeconds: WARMUP_S,
      requestLogs: process.env.SWITCHYARD_REQUEST_LOGS,
      target: "workerd port (HTTP/1.1 keep-alive)",
      latency: loadMode === "open" ? "from scheduled start to end of body, successful requests" : "from send to end of body, successful requests",
    },
    arms: rows,
    ratios: {
      loadAwareP99OverRoundRobinP99: ratioRr,
      target: 1 / 3,
      verdict,
      loadAwareP99OverRandomP99: ratioRandom,
    },
  };
  mkdirSync(join(import.meta.dirname, "results"), { recursive: true });
  writeFileSync(join(import.meta.dirname, "results/dispatch-quality.json"), `${JSON.stringify(result, null, 2)}\n`);
} catch (err) {
  console.error(logLines.filter((l) => !/registered|listening/.test(l)).slice(-30).join("\n"));
  throw err;
} finally {
  await stack.stop();
  rmSync(stateDir, { recursive: true, force: true });
  rmSync(functionsDir, { recursive: true, force: true });
}
