/**
 * What each step of the proxy's hot path costs inside workerd, per call (issue 18).
 *
 *   npx tsx bench/hot-path-steps/hot-path-steps.ts [--rounds 5] [--cpu-s 0.4] [--n 2000] [--steps a,b] [--headers wrk|sdk] [--out FILE]
 *
 * bench/state-cost/state-cost.ts measures a whole request, and one change to one step is
 * smaller than its round-to-round noise on this machine (bench/README.md, the
 * per-request CPU trials). This bench takes the steps apart: a workerd process
 * (the stack's own binary and compatibility date) runs a Worker
 * (bench/hot-path-steps/hot-path-steps.worker.ts) that calls one step of the proxy's own code
 * N times per request, with a plain `GET /hello`'s inputs. For each step it
 * sends requests one at a time until the process has spent --cpu-s of CPU
 * (utime + stime, /proc), and the step's cost is that CPU less the `none`
 * step's per request, divided by the calls. Rounds interleave the steps; the
 * table gives each step's median and range over the rounds.
 *
 * A tight loop is the step's best case (warm inline caches, nothing else in the
 * caches), so these are lower bounds of what the step costs in a request;
 * bench/state-cost/state-cost.ts, with a feature switched off, gives the whole effect.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { createRequire } from "node:module";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { writeResult } from "../shared/result-file.ts";
import { markdownTable } from "../shared/table.ts";
import { compatibilityDate, compatibilityFlags } from "../../src/config/runtime.ts";
import { cpuSeconds, freePort, waitForOk } from "../shared/load-tools.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const { values } = parseArgs({
  options: {
    rounds: { type: "string", default: "5" },
    "cpu-s": { type: "string", default: "0.4" },
    n: { type: "string", default: "2000" },
    steps: { type: "string" },
    headers: { type: "string", default: "wrk" },
    out: { type: "string" },
  },
});
const rounds = Math.max(1, Math.floor(Number(values.rounds)) || 5);
const cpuBudget = Math.max(0.05, Number(values["cpu-s"]) || 0.4);
const callsPerRequest = Math.max(1, Math.floor(Number(values.n)) || 2000);

/**
 * The request's headers: wrk's (Host only, as bench/state-cost/state-cost.ts sends) or an
 * OpenAI SDK's (what openai-python 1.x sends to /v1/chat/completions, key included).
 */
const CLIENT_HEADERS: Record<string, Record<string, string>> = {
  wrk: {},
  sdk: {
    accept: "application/json",
    "accept-encoding": "gzip, deflate",
    authorization: "Bearer sk-sy-0123456789abcdef0123456789abcdef",
    "content-type": "application/json",
    "user-agent": "OpenAI/Python 1.54.0",
    "x-stainless-arch": "x64",
    "x-stainless-lang": "python",
    "x-stainless-os": "Linux",
    "x-stainless-package-version": "1.54.0",
    "x-stainless-retry-count": "0",
    "x-stainless-runtime": "CPython",
    "x-stainless-runtime-version": "3.12.3",
  },
};
const clientHeaders = CLIENT_HEADERS[values.headers!];
if (!clientHeaders) throw new Error(`--headers: wrk or sdk (got ${values.headers})`);
const agent = new Agent({ keepAlive: true, maxSockets: 1 });
/** One GET with only the chosen headers (node:http adds Host and Connection, as wrk sends). */
function get(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { agent, headers: clientHeaders }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c: string) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, body }));
    });
    req.on("error", reject);
    req.end();
  });
}

const work = mkdtempSync(join(tmpdir(), "hot-path-steps-"));
const script = join(work, "worker.js");
await build({
  entryPoints: [join(root, "bench/hot-path-steps/hot-path-steps.worker.ts")],
  outfile: script,
  bundle: true,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  logLevel: "warning",
});
const port = await freePort();
const config = join(work, "steps.capnp");
writeFileSync(
  config,
  `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "steps", worker = (modules = [(name = "worker.js", esModule = embed "worker.js")], compatibilityDate = ${JSON.stringify(compatibilityDate)}, compatibilityFlags = ${JSON.stringify([...compatibilityFlags])}))],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "steps")],
);
`,
);
const workerdBin = (createRequire(import.meta.url)("workerd") as { default: string }).default;
// stdout is read and dropped, as LocalStack reads workerd's: the log-line step writes to a pipe, not to /dev/null.
const child = spawn(workerdBin, ["serve", config], { stdio: ["ignore", "pipe", "inherit"] });
child.stdout!.resume();
const stop = () => {
  child.kill();
  rmSync(work, { recursive: true, force: true });
};
process.on("exit", stop);
const base = `http://127.0.0.1:${port}`;
await waitForOk(`${base}/steps`, 15_000, child);

const known = JSON.parse((await get(`${base}/steps`)).body) as string[];
const wanted = values.steps?.split(",").map((s) => s.trim()).filter(Boolean) ?? known.filter((s) => s !== "none");
const unknown = wanted.filter((s) => !known.includes(s));
if (unknown.length > 0) throw new Error(`--steps: unknown ${unknown.join(", ")} (known: ${known.join(", ")})`);

/** CPU seconds per request of one step at `callsPerRequest` calls, measured until the budget is spent. */
async function cpuPerRequest(step: string): Promise<number> {
  const url = `${base}/?step=${encodeURIComponent(step)}&n=${callsPerRequest}`;
  for (let w = 0; w < 3; w++) await get(url);
  const pid = child.pid!;
  const before = cpuSeconds(pid);
  let requests = 0;
  let spent = 0;
  while (spent < cpuBudget || requests < 20) {
    const res = await get(url);
    if (res.status !== 200) throw new Error(`${step}: ${res.status} ${res.body}`);
    requests++;
    spent = cpuSeconds(pid) - before;
  }
  return spent / requests;
}

const startLoad = loadavg()[0]!;
console.log(`${cpus().length} CPUs, load average ${startLoad.toFixed(2)}; ${values.headers} request headers; ${callsPerRequest} calls per request, ${cpuBudget} s of CPU per step per round, ${rounds} rounds`);
const perCall: Record<string, number[]> = Object.fromEntries(wanted.map((s) => [s, []]));
for (let round = 1; round <= rounds; round++) {
  const none = await cpuPerRequest("none");
  for (const step of wanted) {
    const us = ((await cpuPerRequest(step)) - none) / callsPerRequest * 1e6;
    perCall[step]!.push(us);
  }
  console.log(`round ${round}: ${wanted.map((s) => `${s} ${perCall[s]!.at(-1)!.toFixed(2)}`).join(", ")} µs`);
}

const median = (xs: number[]) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
};
const rows = wanted.map((step) => {
  const xs = perCall[step]!;
  return { step, medianUs: median(xs), minUs: Math.min(...xs), maxUs: Math.max(...xs), rounds: xs };
});
console.log(
  ["", ...markdownTable(["step", "µs per call (median)", "range"], rows.map((r) => [r.step, r.medianUs.toFixed(2), `${r.minUs.toFixed(2)}–${r.maxUs.toFixed(2)}`]))].join("\n"),
);
console.log(`\nwrote ${writeResult("hot-path-steps", { machine: { cpus: cpus().length, loadavg1mAtStart: startLoad }, options: { rounds, cpuBudget, callsPerRequest, headers: values.headers }, steps: rows }, values.out ? { out: values.out } : {})}`);
stop();
