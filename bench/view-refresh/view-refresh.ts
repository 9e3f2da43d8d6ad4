/**
 * The view refresh at realistic rates (issue 32, "Prove it"): Durable Object calls per
 * 1,000 requests that one edge isolate makes to keep its routing view fresh, at 1, 10,
 * 100 and 1,000 req/s, for today's pace (`routing.refreshEveryRequests: 1`: a relay ask
 * at the first request past the 250 ms TTL) against the paced refresh (the default, 20:
 * src/proxy/serve/view.ts), in the same run on the real local stack.
 *
 *   npx tsx bench/view-refresh/view-refresh.ts            # full (~4 min)
 *   npx tsx bench/view-refresh/view-refresh.ts --quick    # npm run bench (~1.5 min)
 *   npx tsx bench/view-refresh/view-refresh.ts [--rates 1,10,100,1000] [--out FILE]
 *
 * One workerd isolate serves two public deployments of 2 reference replicas each
 * ("hi", the seed's), identical but for the pace. At each rate, each arm in turn gets
 * Poisson arrivals of GET /<arm> for its window (longer at low rates, so that each
 * window holds ~60 requests, 200 in a full run); calls are the relay's own counter of asks from
 * isolates (GET /-/deployments/:name, `relay.calls`), before and after the window.
 * Latency p50/p99 per arm shows that the pace costs the requests nothing.
 *
 * Targets (the issue's), printed MET / MISS for the paced arm: ≤ 100 calls per 1,000
 * requests at 10 req/s per isolate, and ≤ 5 at 1,000 req/s. The freshness targets of
 * the state plane are bench/state-plane/state-plane.ts's (run at 25 req/s per isolate).
 * Writes bench/results/view-refresh.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { LocalStack } from "../../src/local/stack.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { percentile } from "../prefix-cache/prefix-cache-workload.ts";
import { writeResult } from "../shared/result-file.ts";
import { per1000Target } from "../shared/bench-targets.ts";
import { judgedText, markdownTable, verdict } from "../shared/table.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    rates: { type: "string", default: "1,10,100,1000" },
    out: { type: "string" },
  },
});
const quick = values.quick;
const RATES = values.rates.split(",").map(Number);
if (RATES.some((r) => !(r > 0))) throw new Error(`bad --rates: ${values.rates}`);
/** Each window: ~60 requests at low rates (full: ~200), 30 s at most (full: 60), a few seconds at high ones. */
const windowS = (rate: number) => Math.max(quick ? 3 : 5, Math.min(quick ? 30 : 60, (quick ? 60 : 200) / rate));
const ARMS = [
  { name: "every", what: "today: a relay ask at the first request past the TTL", everyRequests: 1 },
  { name: "paced", what: "every 20 requests past the TTL, 2 s at most, before a lapse, at the TTL while admission is busy", everyRequests: 20 },
] as const;
type ArmName = (typeof ARMS)[number]["name"];

process.env.SWITCHYARD_REQUEST_LOGS ??= "off";
const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));
const root = mkdtempSync(join(tmpdir(), "switchyard-view-refresh-"));
let stack: LocalStack | undefined;
process.on("SIGINT", () => {
  stack?.killAll();
  process.exit(130);
});
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const random = mulberry32(10);

async function relayCalls(name: string): Promise<number> {
  const res = await fetch(`${stack!.workerdUrl}/-/deployments/${name}`, { headers: { authorization: `Bearer ${stack!.adminSecret}` } });
  if (!res.ok) throw new Error(`GET /-/deployments/${name}: ${res.status} ${await res.text()}`);
  const j = (await res.json()) as { relay: { calls: number } | null };
  if (!j.relay) throw new Error(`${name}: no relay`);
  return j.relay.calls;
}

interface Window {
  rate: number;
  arm: ArmName;
  seconds: number;
  requests: number;
  ok: number;
  achievedRate: number;
  calls: number;
  per1000: number;
  p50Ms: number;
  p99Ms: number;
}

/** Poisson arrivals of GET /<arm> at `rate` for `seconds`; the relay's calls over the window. */
async function window(arm: ArmName, rate: number, seconds: number): Promise<Window> {
  const before = await relayCalls(arm);
  const url = `${stack!.workerdUrl}/${arm}`;
  const latencies: number[] = [];
  const sent: Promise<boolean>[] = [];
  const start = performance.now();
  const end = start + seconds * 1000;
  let next = start;
  while (next < end) {
    const wait = next - performance.now();
    if (wait > 1) await sleep(wait);
    const t0 = performance.now();
    sent.push(
      fetch(url).then(
        async (res) => {
          await res.arrayBuffer();
          latencies.push(performance.now() - t0);
          return res.status === 200;
        },
        () => false,
      ),
    );
    next += (-Math.log(1 - random()) / rate) * 1000;
  }
  const results = await Promise.all(sent);
  const elapsed = (performance.now() - start) / 1000;
  // Refreshes run after the response (waitUntil): let the last one land.
  await sleep(100);
  const calls = (await relayCalls(arm)) - before;
  return {
    rate,
    arm,
    seconds,
    requests: results.length,
    ok: results.filter(Boolean).length,
    achievedRate: results.length / elapsed,
    calls,
    per1000: (1000 * calls) / Math.max(1, results.length),
    p50Ms: percentile(latencies, 50),
    p99Ms: percentile(latencies, 99),
  };
}

try {
  const dir = join(root, "functions");
  mkdirSync(dir);
  for (const arm of ARMS) {
    writeFileSync(
      join(dir, `${arm.name}.ts`),
      `import { defineDeployment } from ${config};
export default defineDeployment({
  name: "${arm.name}", routePrefix: "/${arm.name}", access: { public: true },
  backend: { kind: "text", text: "hi" }, localReplicas: 2, maxOngoingRequests: 64,
  routing: { refreshEveryRequests: ${arm.everyRequests} },
});
`,
    );
  }
  stack = new LocalStack({ port: 0, functionsDir: dir, stateDir: join(root, "state"), freshState: true });
  await stack.start();
  const load = loadavg()[0]!;
  console.log(`view refresh: 1 isolate, 2 deployments × 2 replicas ("hi"), rates ${RATES.join(", ")} req/s; load average ${load.toFixed(2)}`);
  // Warm both (first view, replicas seen ready).
  for (const arm of ARMS) for (let i = 0; i < 20; i++) await fetch(`${stack.workerdUrl}/${arm.name}`).then((r) => r.arrayBuffer());

  const windows: Window[] = [];
  for (const rate of RATES) {
    for (const arm of ARMS) {
      const w = await window(arm.name, rate, windowS(rate));
      windows.push(w);
      console.error(`[view-refresh] ${rate} req/s ${arm.name}: ${w.requests} requests (${w.achievedRate.toFixed(1)}/s), ${w.calls} relay calls`);
    }
  }

  const f1 = (x: number) => (Number.isFinite(x) ? x.toFixed(1) : "-");
  console.log("\n### Relay calls per 1,000 requests, one isolate\n");
  console.log(
    markdownTable(
      ["req/s per isolate", "arm", "window s", "requests (achieved req/s)", "relay calls", "calls per 1,000", "p50 / p99 ms"],
      windows.map((w) => [w.rate, w.arm, f1(w.seconds), `${w.requests} (${f1(w.achievedRate)})`, w.calls, `**${f1(w.per1000)}**`, `${f1(w.p50Ms)} / ${f1(w.p99Ms)}`]),
    ).join("\n"),
  );
  for (const arm of ARMS) console.log(`- ${arm.name}: ${arm.what}`);
  const at = (rate: number) => windows.find((w) => w.rate === rate && w.arm === "paced");
  const ten = at(10);
  const thousand = at(1000);
  // Judged over enough requests to show a miss (bench-targets.ts); 1,000 req/s must also be reached.
  const tenJudged = ten ? per1000Target(ten.calls, ten.requests, 100) : undefined;
  const thousandJudged = thousand ? per1000Target(thousand.calls, thousand.requests, 5) : undefined;
  const tenMet = tenJudged?.met ?? null;
  const thousandMet = thousandJudged?.met === true ? thousand!.achievedRate >= 800 : (thousandJudged?.met ?? null);
  console.log(`\ntarget: ≤ 100 calls per 1,000 requests at 10 req/s per isolate: ${ten ? f1(ten.per1000) : "not run"} (${tenJudged ? judgedText(tenJudged) : verdict(null)})`);
  console.log(
    `target: ≤ 5 calls per 1,000 requests at 1,000 req/s per isolate: ${thousand ? `${f1(thousand.per1000)} at ${f1(thousand.achievedRate)} req/s achieved` : "not run"} (${thousandJudged?.met === null ? judgedText(thousandJudged) : verdict(thousandMet)})`,
  );
  const path = writeResult(
    "view-refresh",
    { setup: { rates: RATES, arms: ARMS, loadavg1mAtStart: load }, windows, targets: { tenMet, thousandMet } },
    { quick, ...(values.out ? { out: values.out } : {}), arms: windows.map((w) => ({ arm: `${w.arm}@${w.rate}`, requests: w.requests, ok: w.ok })) },
  );
  console.log(`\nwrote ${path}`);
} finally {
  await stack?.stop().catch(() => stack?.killAll());
  rmSync(root, { recursive: true, force: true });
}
