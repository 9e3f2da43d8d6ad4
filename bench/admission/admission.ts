/**
 * Admission (issue 32, docs/admission.md): today's behaviour (admission off: a full
 * fleet answers 503) against holding requests by priority and flow, in the same run,
 * on 4 edge isolates in front of 4 reference LLM replicas (tiny-lm, real inference,
 * decode paced at --decode-ms per token).
 *
 *   npx tsx bench/admission/admission.ts            # full (~9 min)
 *   npx tsx bench/admission/admission.ts --quick    # npm run bench (~3 min)
 *   npx tsx bench/admission/admission.ts --only bounds --held 10000   # one or more of flood,fairness,locations,zero,bounds
 *   npx tsx bench/admission/admission.ts [--seconds 12] [--isolates 4] [--replicas 4] [--slots 2] [--prefill-ms 80] [--decode-ms 25] [--tokens 12]
 *
 * Scenarios, each against both arms (a fresh stack and replicas per arm):
 * - **Priority under a flood.** An interactive client (short streamed chats, critical,
 *   a steady 2 req/s) alone, then beside a batch flood (standard priority, Poisson at
 *   3× the fleet's measured capacity) for the same window. Interactive TTFT p99 under
 *   the flood against its own uncontended p99; interactive failures; the batch's share
 *   completed (held, not lost: the bench deployment waits up to 60 s).
 * - **Fairness.** Four flows (the deployment's flow header, as a tenant id would be)
 *   with closed-loop demand 1 : 1 : 1 : 10 (3, 3, 3 and 30 clients, each flow asking more than its share; 30 s windows in a full run) on the saturated
 *   fleet, spread at random over the isolates. Each flow's share of the requests served within the window (not the tail served after it) against its
 *   max-min fair share (every flow's demand here is at least its share, so each is
 *   1/4), and Jain's index over the four.
 * - **Fairness across locations** (admission on only): the same, with the isolates split
 *   between two locations (StackOptions.edgeLocations), each with its own relay; the
 *   relays share the deployment's slots through the leader shard's answers
 *   (src/policy/location-demand.ts). Against the one-location run above.
 * - **Bounds** (admission on only): --held requests (10,000 where the file limit allows) held at once in one isolate
 *   (a deployment at 0 replicas whose cap, limits.maxPendingRequests, is --held), each a
 *   POST of 1 KiB; then 200 more, which must be refused at once with JSON (503
 *   queue_full); workerd's resident memory before and with them all held; then one
 *   replica starts and every held request must be answered.
 * - **Scale from zero** (admission on only; off has nothing to hold with): a deployment
 *   with minReplicas 0 under the local actuator (src/local/actuator.ts), a burst of 50,
 *   three cycles: failures, the first answer's time against one replica's own start
 *   time (measured in the same run), and the return to 0.
 *
 * Targets (the issue's), printed MET / MISS: interactive TTFT p99 under the flood ≤ 1.5×
 * its uncontended p99; 0 interactive failures and ≥ 99 % of the batch completed; every
 * flow within ±10 % of its fair share and Jain's index ≥ 0.95; scale from zero with 0
 * failures and the first answer within the replica's start time + 1 s, three cycles.
 * Writes bench/results/admission.json.
 */
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { LocalStack } from "../../src/local/stack.ts";
import { connectInspector } from "../shared/inspector.ts";
import { freePort, workerdPid } from "../shared/load-tools.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { streamChat, type StreamResult } from "../prefix-cache/prefix-cache-client.ts";
import { percentile } from "../prefix-cache/prefix-cache-workload.ts";
import { aloneP99, boundsTarget, fairTarget, floodTargets, zeroTarget, type BoundsResult, type FairResult, type FloodResult, type ZeroResult } from "./admission-targets.ts";
import { writeResult, type ArmCount } from "../shared/result-file.ts";
import { judgedText, markdownTable } from "../shared/table.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    seconds: { type: "string" },
    "fair-seconds": { type: "string" },
    isolates: { type: "string", default: "4" },
    replicas: { type: "string", default: "4" },
    slots: { type: "string", default: "2" },
    "decode-ms": { type: "string", default: "25" },
    "prefill-ms": { type: "string", default: "80" },
    tokens: { type: "string", default: "12" },
    held: { type: "string" },
    only: { type: "string", default: "flood,fairness,locations,zero,bounds" },
    out: { type: "string" },
  },
});
const quick = values.quick;
const SECONDS = Number(values.seconds ?? (quick ? "6" : "12"));
/**
 * The fairness scenarios' window: 30 s in a full run. A flow's share is a count of its
 * requests served, and flows of equal demand differed by ±8 % in 10 s (~50 requests
 * each), as much as the ±10 % the target allows; in 28 s (~140 each) by ±3 %.
 */
const FAIR_SECONDS = Number(values["fair-seconds"] ?? (quick ? String(SECONDS) : String(Math.max(SECONDS, 30))));
const ISOLATES = Number(values.isolates);
const REPLICAS = Number(values.replicas);
const SLOTS = Number(values.slots);
const DECODE_MS = Number(values["decode-ms"]);
const TOKENS = Number(values.tokens);
const PREFILL_MS = Number(values["prefill-ms"]);
const INTERACTIVE_RATE = 2;
const FLOOD_FACTOR = 3;
/**
 * The flood's onset: until the relay has seen the interactive band's demand under the
 * flood (its headroom, src/policy/admission-shares.ts), the batch holds every slot.
 * Interactive requests sent after it are also reported on their own.
 */
const ONSET_MS = 2_000;
/**
 * The fairness flows' closed-loop clients: a 1 : 1 : 1 : 10 demand skew where every flow
 * asks more than its max-min share (8 slots: 2 each), so that share is 1/4 for all. With
 * 2, 2, 2 and 20 the small flows asked exactly their share: each gap between a client's
 * answer and its next request left a slot the big flow took, work-conserving and fair,
 * and their true max-min share was below the 1/4 the bench held them to (the big flow
 * came out 10–14 % over it in 30 s windows, 3–8 % with 3, 3, 3 and 30).
 */
const FAIR_CLIENTS = [3, 3, 3, 30];
const ZERO_BURST = 50;
const ZERO_CYCLES = 3;
/**
 * workerd keeps 2 file descriptors per held client connection (measured: 17,588 open at
 * ~8,800 held), and traps when it runs out (at ~9,750 held under this machine's hard
 * limit of 20,000), so by default the bounds scenario holds the issue's 10,000 only
 * where the limit allows, else the most whole thousands that fit with room to spare.
 */
const FD_LIMIT = Number(/Max open files\s+(\d+)/.exec(readFileSync("/proc/self/limits", "utf8"))?.[1] ?? 1024);
const HELD = Number(values.held ?? Math.max(1000, Math.min(10_000, Math.floor((FD_LIMIT - 3000) / 2 / 1000) * 1000)));
const ONLY = new Set(values.only.split(",").map((x) => x.trim()));
const SCENARIOS = ["flood", "fairness", "locations", "zero", "bounds"];
for (const x of ONLY) if (!SCENARIOS.includes(x)) throw new Error(`--only: unknown scenario "${x}" (${SCENARIOS.join(", ")})`);
/** The locations scenario: the isolates split between these, each location with its own relay. */
const LOCATIONS = ["AMS", "SIN"];
const OVER_CAP = 200;
for (const [k, v] of Object.entries({ SECONDS, FAIR_SECONDS, ISOLATES, REPLICAS, SLOTS, DECODE_MS, TOKENS })) {
  if (!(v > 0)) throw new Error(`bad ${k}: ${v}`);
}

process.env.SWITCHYARD_REQUEST_LOGS ??= "off";
const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));
const root = mkdtempSync(join(tmpdir(), "switchyard-admission-"));
let current: LocalStack | undefined;
process.on("SIGINT", () => {
  current?.killAll();
  process.exit(130);
});
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const random = mulberry32(32);
// Prefill 80 ms by default: an uncontended TTFT near llm-d-batch-gateway's 96.5 ms baseline.
const replicaArgs = ["--backend", "llm", "--model", "tiny-lm", "--prefill-ms", String(PREFILL_MS), "--decode-ms", String(DECODE_MS)];

type Arm = "off" | "on";

/** A stack serving one /v1 deployment "adm" (model tiny-lm) with admission on or off. */
async function startArm(arm: Arm, extra = "", locations?: readonly string[]): Promise<LocalStack> {
  const dir = mkdtempSync(join(root, `${arm}-`));
  const functionsDir = join(dir, "functions");
  mkdirSync(functionsDir);
  writeFileSync(
    join(functionsDir, "adm.ts"),
    `import { defineDeployment } from ${config};
export default defineDeployment({
  name: "adm", routePrefix: "/adm", access: { public: true },
  backend: { kind: "llm", model: "tiny-lm" }, openai: { models: ["tiny-lm"] },
  localReplicas: 0, maxOngoingRequests: ${SLOTS},
  policy: { requestTimeoutMs: 90_000 },
  admission: { hold: ${arm === "on"}, maxWaitMs: 60_000, maxPriority: 1, priorityHeader: "x-priority", flowHeader: "x-tenant" },
  // Locally every client is one client (the address workerd listens on): its share of the cap is the whole cap.
  limits: { maxPendingRequests: 4096, maxPendingRequestsPerClient: 4096 },
  ${extra}
});
`,
  );
  const edgeLocations = locations && Array.from({ length: ISOLATES }, (_, i) => locations[Math.floor((i * locations.length) / ISOLATES)]!);
  const stack = new LocalStack({ port: 0, functionsDir, stateDir: join(dir, "state"), freshState: true, edgeIsolates: ISOLATES, autoscale: extra.includes("autoscaling"), ...(edgeLocations ? { edgeLocations } : {}) });
  current = stack;
  await stack.start();
  return stack;
}

const body = (n: number) =>
  JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: `Question ${n}: what is a replica?` }], max_tokens: TOKENS, stream: true });

/** One streamed chat through a random isolate. */
function chat(stack: LocalStack, n: number, headers: Record<string, string>, signal: AbortSignal): Promise<StreamResult> {
  const url = stack.edgeUrls[Math.floor(random() * stack.edgeUrls.length)]!;
  // Any answer that streams and ends is whole: the tiny LM may end its turn before max_tokens.
  return streamChat(`${url}/v1/chat/completions`, body(n), headers, performance.now(), signal, 1);
}

/** Poisson arrivals at `rate` per second for `seconds`, each calling `send`; resolves with every result once all are done. */
async function openLoop<T>(rate: number, seconds: number, send: (n: number) => Promise<T>): Promise<T[]> {
  const out: Promise<T>[] = [];
  const end = performance.now() + seconds * 1000;
  let n = 0;
  let next = performance.now();
  while (next < end) {
    const wait = next - performance.now();
    if (wait > 0) await sleep(wait);
    out.push(send(n++));
    next += (-Math.log(1 - random()) / rate) * 1000;
  }
  return Promise.all(out);
}

/**
 * Closed loop: `clients` each send one request after another for `seconds`; returns the
 * results, each marked with whether it ended within the window. The last request of each
 * client ends after it, when the other loops may have stopped (not saturated any more).
 */
async function closedLoop(clients: number, seconds: number, send: (n: number) => Promise<StreamResult>): Promise<(StreamResult & { inWindow: boolean; endedMs: number })[]> {
  const out: (StreamResult & { inWindow: boolean; endedMs: number })[] = [];
  const start = performance.now();
  const end = start + seconds * 1000;
  let n = 0;
  await Promise.all(
    Array.from({ length: clients }, async () => {
      while (performance.now() < end) {
        const r = await send(n++);
        const now = performance.now();
        out.push({ ...r, inWindow: now <= end, endedMs: now - start });
      }
    }),
  );
  return out;
}

const ok = (r: StreamResult) => r.status === 200 && r.error === undefined && r.tokens > 0;

/** Completed requests per second with every slot busy (closed loop, 2 clients per slot). */
async function capacity(stack: LocalStack): Promise<number> {
  const ac = new AbortController();
  await closedLoop(REPLICAS * SLOTS, 2, (n) => chat(stack, n, {}, ac.signal)); // warm-up
  const seconds = quick ? 3 : 5;
  const results = await closedLoop(REPLICAS * SLOTS, seconds, (n) => chat(stack, n, {}, ac.signal));
  return results.filter(ok).length / seconds;
}


const ttft = (rs: StreamResult[]) => {
  const good = rs.filter(ok).map((r) => r.ttftMs);
  return { p50: percentile(good, 50), p99: percentile(good, 99), n: rs.length, failed: rs.length - good.length };
};

async function flood(arm: Arm): Promise<FloodResult> {
  const stack = await startArm(arm);
  try {
    await Promise.all(Array.from({ length: REPLICAS }, (_, i) => stack.startReplica("adm", { id: `adm-${i + 1}`, maxOngoing: SLOTS, backendArgs: replicaArgs })));
    const ac = new AbortController();
    const cap = await capacity(stack);
    const interactive = (n: number) => chat(stack, n, { "x-priority": "critical" }, ac.signal);
    const uncontended = await openLoop(INTERACTIVE_RATE, SECONDS, interactive);
    const statuses: Record<string, number> = {};
    const t0 = performance.now();
    const sentAt: number[] = [];
    const [batch, flooded] = await Promise.all([
      openLoop(cap * FLOOD_FACTOR, SECONDS, (n) =>
        chat(stack, 100_000 + n, { "x-priority": "standard" }, ac.signal).then((r) => {
          statuses[r.status] = (statuses[r.status] ?? 0) + 1;
          return r;
        }),
      ),
      openLoop(INTERACTIVE_RATE, SECONDS, (n) => {
        sentAt[n] = performance.now() - t0;
        return interactive(n);
      }),
    ]);
    const slowest = flooded
      .map((r, n) => ({ atMs: Math.round(sentAt[n]!), ttftMs: Math.round(r.ttftMs) }))
      .sort((a, b) => b.ttftMs - a.ttftMs)
      .slice(0, 5);
    const steady = ttft(flooded.filter((_, n) => sentAt[n]! >= ONSET_MS));
    return { capacity: cap, uncontended: ttft(uncontended), flooded: ttft(flooded), steady, slowest, batch: { sent: batch.length, completed: batch.filter(ok).length, statuses } };
  } finally {
    await stack.stop();
  }
}


async function fairness(arm: Arm, locations?: readonly string[]): Promise<FairResult> {
  const stack = await startArm(arm, "", locations);
  try {
    await Promise.all(Array.from({ length: REPLICAS }, (_, i) => stack.startReplica("adm", { id: `adm-${i + 1}`, maxOngoing: SLOTS, backendArgs: replicaArgs })));
    const ac = new AbortController();
    await closedLoop(REPLICAS * SLOTS, 2, (n) => chat(stack, n, {}, ac.signal)); // warm-up
    const names = ["a", "b", "c", "d"];
    const results = await Promise.all(FAIR_CLIENTS.map((clients, i) => closedLoop(clients, FAIR_SECONDS, (n) => chat(stack, n, { "x-tenant": names[i]! }, ac.signal))));
    // Served while every flow was sending: a flow of 20 clients has up to 20 requests held
    // when the window closes, which the fleet then serves alone (counting them gave it up
    // to 18 more in a 6 s window, the others 2).
    const served = results.map((rs) => rs.filter((r) => ok(r) && r.inWindow).length);
    const steadyServed = results.map((rs) => rs.filter((r) => ok(r) && r.inWindow && r.endedMs >= ONSET_MS).length);
    const total = served.reduce((a, b) => a + b, 0);
    const { jain, maxDeviation } = jainOf(served);
    const steady = jainOf(steadyServed);
    return {
      flows: names.map((flow, i) => ({ flow, clients: FAIR_CLIENTS[i]!, served: served[i]!, share: served[i]! / total })),
      jain,
      maxDeviation,
      steady: { served: steadyServed, ...steady },
      failed: results.flat().filter((r) => !ok(r)).length,
    };
  } finally {
    await stack.stop();
  }
}

/**
 * Jain's index over the flows' served counts against their fair shares, and the largest
 * deviation from one. Every flow's demand (its clients) is at least capacity / 4 slots
 * here, so max-min fairness gives each 1/4.
 */
function jainOf(served: readonly number[]): { jain: number; maxDeviation: number } {
  const total = served.reduce((a, b) => a + b, 0);
  const x = served.map((s) => (s / total) * served.length);
  return { jain: x.reduce((a, b) => a + b, 0) ** 2 / (x.length * x.reduce((a, b) => a + b * b, 0)), maxDeviation: Math.max(...x.map((v) => Math.abs(v - 1))) };
}


async function scaleFromZero(): Promise<ZeroResult> {
  const stack = await startArm("on", "autoscaling: { minReplicas: 0, maxReplicas: 4, lookBackPeriodS: 2, downscaleDelayS: 2 },");
  try {
    // One replica's own start time (process start to registered), measured here first.
    const t0 = performance.now();
    const probe = await stack.startReplica("adm", { id: "adm-probe", maxOngoing: SLOTS, backendArgs: replicaArgs });
    const replicaStartMs = performance.now() - t0;
    await stack.stopReplica(probe.id);
    const running = () => [...stack.replicas.values()].filter((r) => r.deployment === "adm").length;
    const desired = async () => {
      const res = await fetch(`${stack.workerdUrl}/-/deployments/adm/autoscale`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
      return ((await res.json()) as { desired: number; current: number });
    };
    const cycles: ZeroResult["cycles"] = [];
    for (let c = 0; c < ZERO_CYCLES; c++) {
      for (;;) {
        const d = await desired();
        if (running() === 0 && d.desired === 0 && d.current === 0) break;
        await sleep(100);
      }
      const ac = new AbortController();
      const sent = performance.now();
      const results = await Promise.all(
        Array.from({ length: ZERO_BURST }, (_, i) =>
          chat(stack, i, {}, ac.signal).then((r) => ({ r, doneMs: performance.now() - sent })),
        ),
      );
      const good = results.filter((x) => ok(x.r));
      // Every request is sent at once, so its TTFT counts from the burst's start.
      const firstAnswerMs = Math.min(...good.map((x) => x.r.ttftMs));
      const lastAnswerMs = Math.max(...results.map((x) => x.doneMs));
      const idleAt = performance.now();
      for (;;) {
        const d = await desired();
        if (running() === 0 && d.current === 0) break;
        if (performance.now() - idleAt > 120_000) throw new Error("scale from zero: did not return to 0 within 120 s");
        await sleep(100);
      }
      cycles.push({ failed: results.length - good.length, firstAnswerMs, lastAnswerMs, backToZeroMs: performance.now() - idleAt });
    }
    return { replicaStartMs, cycles };
  } finally {
    await stack.stop();
  }
}


const rssMiB = (pid: number) => Number(/VmRSS:\s+(\d+)/.exec(readFileSync(`/proc/${pid}/status`, "utf8"))![1]) / 1024;

/** --held requests held in one isolate at once, 200 beyond the cap refused with JSON, then all released by one replica. */
async function bounds(): Promise<BoundsResult> {
  // A "hi" deployment at 0 replicas (no actuator: the held requests wait for the replica this
  // scenario starts), so that releasing them all takes seconds, not an LLM's minutes.
  const dir = mkdtempSync(join(root, "bounds-"));
  const functionsDir = join(dir, "functions");
  mkdirSync(functionsDir);
  writeFileSync(
    join(functionsDir, "held.ts"),
    `import { defineDeployment } from ${config};
export default defineDeployment({
  name: "held", routePrefix: "/held", access: { public: true },
  backend: { kind: "text", text: "hi" }, localReplicas: 0, maxOngoingRequests: 64,
  autoscaling: { minReplicas: 0, maxReplicas: 1 },
  admission: { maxWaitMs: 120_000 }, policy: { requestTimeoutMs: 180_000 },
  limits: { maxPendingRequests: ${HELD}, maxPendingRequestsPerClient: ${HELD} },
});
`,
  );
  // The isolate's V8 heap (what the 128 MB per isolate bounds) through workerd's inspector.
  const inspectorPort = await freePort();
  process.env.SWITCHYARD_WORKERD_INSPECTOR = `127.0.0.1:${inspectorPort}`;
  const stack = new LocalStack({ port: 0, functionsDir, stateDir: join(dir, "state"), freshState: true, log: (l) => l.startsWith("[workerd]") && console.error(l) });
  current = stack;
  await stack.start();
  delete process.env.SWITCHYARD_WORKERD_INSPECTOR;
  const inspector = await connectInspector(inspectorPort);
  // No forced GC first: workerd's inspector left HeapProfiler.collectGarbage unanswered for this
  // stack (1.20261117.1), so the figure includes garbage not yet collected: an upper bound.
  const heapMiB = async () => {
    return ((await inspector.call("Runtime.getHeapUsage")) as { usedSize: number }).usedSize / 2 ** 20;
  };
  try {
    const pid = workerdPid(join(dir, "state", "workerd.capnp"));
    const url = `${stack.workerdUrl}/held/`;
    const payload = "x".repeat(1024);
    const post = () => fetch(url, { method: "POST", body: payload, headers: { "content-type": "text/plain" } });
    const heldNow = async () => ((await (await fetch(`${stack.workerdUrl}/-/deployments/held`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).json()) as { isolate: { held: number } }).isolate.held;
    const rssBefore = rssMiB(pid);
    const heapBefore = await heapMiB();
    console.error(`[admission] bounds: heap ${heapBefore.toFixed(1)} MiB before`);
    const started = performance.now();
    const statusesOf = (xs: number[]) => xs.reduce<Record<string, number>>((m, x) => ((m[x] = (m[x] ?? 0) + 1), m), {});
    const held: Promise<{ status: number; at: number }>[] = [];
    // Opened a batch at a time: 10,000 connects at once overflow the listen backlog (ECONNRESET).
    const BATCH = 250;
    let seen = 0;
    for (let sent = 0; sent < HELD; ) {
      const n = Math.min(BATCH, HELD - sent);
      for (let i = 0; i < n; i++) {
        held.push(
          post().then(
            async (r) => ({ status: r.status, text: await r.text(), at: performance.now() - started }),
            () => ({ status: 0, text: "", at: performance.now() - started }),
          ),
        );
      }
      sent += n;
      for (let i = 0; i < 100 && seen < sent; i++) {
        await sleep(50);
        seen = await heldNow().catch(() => seen);
      }
    }
    for (let i = 0; i < 100 && seen < HELD; i++) {
      await sleep(100);
      seen = await heldNow().catch(() => seen);
    }
    console.error(`[admission] bounds: ${seen} of ${HELD} held`);
    const rssHeld = rssMiB(pid);
    const heapHeld = await heapMiB();
    const over = await Promise.all(
      Array.from({ length: OVER_CAP }, async () => {
        const t0 = performance.now();
        const r = await post();
        const text = await r.text();
        let json = false;
        try {
          json = (JSON.parse(text) as { error?: { code?: string } }).error?.code === "queue_full";
        } catch {
          json = false;
        }
        return { status: r.status, json, ms: performance.now() - t0 };
      }),
    );
    console.error(`[admission] bounds: ${over.filter((o) => o.json).length} of ${OVER_CAP} refused with JSON; starting a replica`);
    await stack.startReplica("held");
    const done = await Promise.all(held);
    return {
      held: HELD,
      heldSeenByIsolate: seen,
      rssBeforeMiB: rssBefore,
      rssHeldMiB: rssHeld,
      heapBeforeMiB: heapBefore,
      heapHeldMiB: heapHeld,
      overCap: { sent: OVER_CAP, refusedJson: over.filter((o) => o.status === 503 && o.json).length, statuses: statusesOf(over.map((o) => o.status)), p99Ms: percentile(over.map((o) => o.ms), 99) },
      released: { ok: done.filter((d) => d.status === 200).length, failed: done.filter((d) => d.status !== 200).length, statuses: statusesOf(done.map((d) => d.status)), lastMs: Math.max(...done.map((d) => d.at)) },
    };
  } finally {
    inspector.close();
    await stack.stop();
  }
}

const f0 = (x: number) => (Number.isFinite(x) ? x.toFixed(0) : "-");
const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : "-");
const f2 = (x: number) => (Number.isFinite(x) ? x.toFixed(2) : "-");
const pct = (x: number) => `${(100 * x).toFixed(1)} %`;

try {
  const started = loadavg()[0]!;
  console.log(`admission: ${ISOLATES} isolates, ${REPLICAS} LLM replicas × ${SLOTS} slots, prefill ${PREFILL_MS} ms, ${TOKENS} tokens at ${DECODE_MS} ms, ${SECONDS} s windows (fairness ${FAIR_SECONDS} s); scenarios ${[...ONLY].join(", ")}; load average ${started.toFixed(2)}`);
  const results: Record<string, unknown> = {};
  const targets: Record<string, boolean | null> = {};
  const arms: ArmCount[] = [];

  if (ONLY.has("flood")) {
    const floods: Record<Arm, FloodResult> = { off: await flood("off"), on: await flood("on") };
    results.flood = floods;
    // With admission off, a batch at 3× capacity is refused (503) for what does not fit: that loss is what
    // the off arm shows, so any share of it may go unanswered (tolerance 1; it must still serve some).
    // With admission on, the flood is held, not lost: 1 %, as the no-loss target says.
    arms.push(...(["off", "on"] as Arm[]).map((a) => ({ arm: `flood-${a}`, requests: floods[a].batch.sent, ok: floods[a].batch.completed, ...(a === "off" && { tolerance: 1 }) })));
    console.log("\n### Priority under a flood (interactive critical at 2 req/s; batch standard at 3× capacity)\n");
    // The uncontended p99 is the slowest of ~25–35 requests, so one hiccup of the machine
    // sets it (a run measured 588 ms alone with admission on against 99 off). Alone, the
    // arms do the same thing: the reference is the lower of the two, which only makes
    // the ratio harder to meet.
    // (Only an arm with MIN_SAMPLES uncontended answers gives a reference: admission-targets.ts.)
    const alone = aloneP99([floods.off, floods.on]) ?? NaN;
    const rows = (["off", "on"] as Arm[]).map((a) => {
      const r = floods[a];
      return [a, f2(r.capacity), f0(r.uncontended.p99), f0(r.flooded.p50), f0(r.flooded.p99), f2(r.flooded.p99 / alone), f0(r.steady.p99), f2(r.steady.p99 / alone), `${r.flooded.failed}/${r.flooded.n}`, pct(r.batch.completed / r.batch.sent), JSON.stringify(r.batch.statuses)];
    });
    const after = `after ${ONSET_MS / 1000} s`;
    console.log(markdownTable(["admission", "capacity req/s", "alone TTFT p99 ms", "flooded p50 ms", "flooded p99 ms", "p99 ratio", `p99 ${after} ms`, `ratio ${after}`, "interactive failed", "batch completed", "batch statuses"], rows).join("\n"));
    const on = floods.on;
    console.log(`\nslowest interactive under the flood, admission on (TTFT ms @ sent ms after the flood began): ${on.slowest.map((x) => `${x.ttftMs} @ ${x.atMs}`).join(", ")}`);
    const t = floodTargets(on, floods.off);
    targets.priorityMet = t.priority.met;
    targets.prioritySteadyMet = t.steady.met;
    targets.noLossMet = t.noLoss.met;
    console.log(`\ntarget: interactive TTFT p99 under the flood ≤ 1.5× alone (${f0(alone)} ms, the lower of the arms' alone p99s): ${f2(on.flooded.p99 / alone)}× (${judgedText(t.priority)})`);
    console.log(`target: the same from ${ONSET_MS / 1000} s after the flood began (${on.steady.n} requests): ${f2(on.steady.p99 / alone)}× (${judgedText(t.steady)})`);
    console.log(`target: 0 interactive failed and ≥ 99 % of the batch completed: ${on.flooded.failed} failed, ${pct(on.batch.completed / on.batch.sent)} (${judgedText(t.noLoss)})`);
  }

  if (ONLY.has("fairness")) {
    const fair: Record<Arm, FairResult> = { off: await fairness("off"), on: await fairness("on") };
    results.fairness = fair;
    console.log(`\n### Fairness (4 flows, closed-loop clients ${FAIR_CLIENTS.join(" : ")}, saturated fleet, ${FAIR_SECONDS} s)\n`);
    const frows = (["off", "on"] as Arm[]).flatMap((a) => fair[a].flows.map((f) => [a, f.flow, f.clients, f.served, pct(f.share), pct(0.25)]));
    console.log(markdownTable(["admission", "flow", "clients", "served", "share", "fair share"], frows).join("\n"));
    for (const a of ["off", "on"] as Arm[]) console.log(`${a}: Jain's index ${fair[a].jain.toFixed(3)}, largest deviation from the fair share ${pct(fair[a].maxDeviation)}, failed ${fair[a].failed}`);
    const st = fair.on.steady;
    console.log(`on, from ${ONSET_MS / 1000} s into the window (the first budgets came): served ${st.served.join(", ")}; Jain's index ${st.jain.toFixed(3)}, largest deviation ${pct(st.maxDeviation)}`);
    const all = fairTarget(fair.on.flows.map((x) => x.served), fair.on.jain, fair.on.maxDeviation, { maxDeviation: 0.1 });
    const steady = fairTarget(st.served, st.jain, st.maxDeviation, { maxDeviation: 0.1 });
    targets.fairMet = all.met;
    targets.fairSteadyMet = steady.met;
    console.log(`\ntarget: each flow within ±10 % of its fair share, Jain's index ≥ 0.95: ${fair.on.jain.toFixed(3)}, ±${pct(fair.on.maxDeviation)} (${judgedText(all)})`);
    console.log(`target: the same from ${ONSET_MS / 1000} s into the window: ${st.jain.toFixed(3)}, ±${pct(st.maxDeviation)} (${judgedText(steady)})`);
  }

  if (ONLY.has("locations")) {
    const one = (results.fairness as Record<Arm, FairResult> | undefined)?.on;
    const two = await fairness("on", LOCATIONS);
    results.locations = { locations: LOCATIONS, on: two };
    console.log(`\n### Fairness across locations (the same flows; ${ISOLATES} isolates in ${LOCATIONS.length} locations, ${LOCATIONS.join(" and ")}, each with its own relay)\n`);
    const lrows = two.flows.map((f, i) => [f.flow, f.clients, one ? `${one.flows[i]!.served} (${pct(one.flows[i]!.share)})` : "-", `${f.served} (${pct(f.share)})`, pct(0.25)]);
    console.log(markdownTable(["flow", "clients", "served, one location", `served, ${LOCATIONS.length} locations`, "fair share"], lrows).join("\n"));
    console.log(`${LOCATIONS.length} locations: Jain's index ${two.jain.toFixed(3)} (one location ${one ? one.jain.toFixed(3) : "not run"}), largest deviation ${pct(two.maxDeviation)}, failed ${two.failed}`);
    console.log(`from ${ONSET_MS / 1000} s into the window: served ${two.steady.served.join(", ")}; Jain's index ${two.steady.jain.toFixed(3)}, largest deviation ${pct(two.steady.maxDeviation)}`);
    const all = fairTarget(two.flows.map((x) => x.served), two.jain, two.maxDeviation, { failed: two.failed });
    const steady = fairTarget(two.steady.served, two.steady.jain, two.steady.maxDeviation, { maxDeviation: 0.1 });
    targets.locationsMet = all.met;
    targets.locationsSteadyMet = steady.met;
    console.log(`\ntarget: Jain's index ≥ 0.95 across ${LOCATIONS.length} locations, none failed: ${two.jain.toFixed(3)} (${judgedText(all)})`);
    console.log(`target: from ${ONSET_MS / 1000} s in, each flow within ±10 % and Jain ≥ 0.95: ${two.steady.jain.toFixed(3)}, ±${pct(two.steady.maxDeviation)} (${judgedText(steady)})`);
  }

  if (ONLY.has("zero")) {
    const zero = await scaleFromZero();
    results.zero = zero;
    console.log(`\n### Scale from zero (burst of ${ZERO_BURST}, local actuator; one replica starts in ${f0(zero.replicaStartMs)} ms)\n`);
    console.log(markdownTable(["cycle", "failed", "first answer ms", "last answer ms", "back to 0 ms"], zero.cycles.map((c, i) => [i + 1, c.failed, f0(c.firstAnswerMs), f0(c.lastAnswerMs), f0(c.backToZeroMs)])).join("\n"));
    const z = zeroTarget(zero, ZERO_CYCLES);
    targets.zeroMet = z.met;
    console.log(`\ntarget: 0 failed, first answer within the replica's start time + 1 s, ${ZERO_CYCLES} cycles back to 0: ${judgedText(z)}`);
  }

  if (ONLY.has("bounds")) {
    const held = await bounds();
    results.bounds = held;
    arms.push({ arm: "bounds", requests: held.held, ok: held.released.ok });
    console.log(`\n### Bounds (${HELD} requests held in one isolate at 0 replicas, then ${OVER_CAP} more, then one replica starts)\n`);
    if (HELD < 10_000) console.log(`(10,000 would need ~${2 * 10_000 + 1_000} file descriptors in workerd, 2 per held connection; this machine allows ${FD_LIMIT}. On Workers the connections are not the isolate's.)\n`);
    console.log(
      markdownTable(
        ["held (seen by the isolate)", "isolate heap before → held", "workerd RSS before → held", "beyond the cap", "released"],
        [[`${held.held} (${held.heldSeenByIsolate})`, `${f1(held.heapBeforeMiB)} → ${f1(held.heapHeldMiB)} MiB (${f2((1024 * (held.heapHeldMiB - held.heapBeforeMiB)) / held.held)} KiB each)`, `${f0(held.rssBeforeMiB)} → ${f0(held.rssHeldMiB)} MiB (${f2((1024 * (held.rssHeldMiB - held.rssBeforeMiB)) / held.held)} KiB each, connections included)`, `${held.overCap.refusedJson}/${held.overCap.sent} refused with JSON 503 queue_full, p99 ${f0(held.overCap.p99Ms)} ms ${JSON.stringify(held.overCap.statuses)}`, `${held.released.ok} answered 200, ${held.released.failed} failed ${JSON.stringify(held.released.statuses)}, last at ${f0(held.released.lastMs)} ms`]],
      ).join("\n"),
    );
    const b = boundsTarget(held, HELD);
    targets.boundsMet = b.met;
    console.log(`\ntarget: ${HELD} held, every one beyond the cap refused with JSON, none lost, the isolate's heap under Workers' 128 MB: ${judgedText(b)}`);
  }
  console.log("\nthe refresh at 1–1,000 req/s per isolate: bench/view-refresh/view-refresh.ts; the cost of a plain request with admission on: bench/state-cost/state-cost.ts (functions/hello holds by default).");

  const path = writeResult(
    "admission",
    {
      setup: { isolates: ISOLATES, replicas: REPLICAS, slots: SLOTS, prefillMs: PREFILL_MS, decodeMs: DECODE_MS, tokens: TOKENS, seconds: SECONDS, fairSeconds: FAIR_SECONDS, interactiveRate: INTERACTIVE_RATE, floodFactor: FLOOD_FACTOR, fairClients: FAIR_CLIENTS, zeroBurst: ZERO_BURST, held: HELD, scenarios: [...ONLY] },
      ...results,
      targets,
    },
    { quick, ...(values.out ? { out: values.out } : {}), ...(arms.length > 0 ? { arms } : {}) },
  );
  console.log(`\nwrote ${path}`);
} finally {
  current?.killAll();
  rmSync(root, { recursive: true, force: true });
}
