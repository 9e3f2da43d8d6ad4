/**
 * Edge inference (backend kind "edge", docs/edge-inference.md): what running a
 * small ONNX model inside the Worker costs and saves, in one run.
 *
 *   npx tsx bench/edge-inference/edge-inference.ts [--cold-runs 5] [--requests 300] [--seconds 3] [--skip-wrangler]
 *
 * 1. Bundle size, raw and gzip, of the Worker built by scripts/build.ts from two
 *    temporary functions folders: without the edge kind (`vad`: Silero VAD v5 on a
 *    replica) and with it (the same plus `vad-edge`: the same model at the edge).
 *    With the edge kind the Worker has two more modules: onnxruntime-web's .wasm
 *    (CompiledWasm) and the model's .onnx (Data). Also `wrangler deploy --dry-run`
 *    of the repository with the opt-in example (functions/ + examples/edge-inference/;
 *    its "Total Upload" line), unless --skip-wrangler.
 * 2. Start-up: a fresh workerd process per run (--cold-runs of each bundle), from
 *    spawn to the first answer of GET /-/routes, and the process's resident memory then.
 * 3. Cold first request: in each fresh process of the edge bundle, the first
 *    POST /vad-edge (imports the weights and the wasm, instantiates it, creates the
 *    ORT session, runs), then a second one; resident memory after.
 * 4. Warm latency on one LocalStack (workerd + one reference replica serving the same
 *    model, loaded at its start): --requests sequential requests per target,
 *    edge and replica interleaved so that both see the same machine, for a 1-frame
 *    (32 ms) and a 1 s input; then --seconds of 4 concurrent clients per target (req/s).
 *    Requests go to workerd's own port (HTTP/1.1 keep-alive), request logs off.
 * Prints markdown tables and writes bench/results/edge-inference.json.
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { cpus, loadavg, tmpdir } from "node:os";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { gzipSync } from "node:zlib";
import { bundleWorker, generateDeploymentsModule, type WorkerBundle } from "../../src/local/build.ts";
import { writeResult } from "../shared/result-file.ts";
import { markdownTable } from "../shared/table.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { workerdConfig } from "../../src/local/workerd-config.ts";
import { synthesizeVowel } from "../../src/models/silero-vad.ts";
import { freePort, run } from "../shared/load-tools.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const { values } = parseArgs({
  options: {
    "cold-runs": { type: "string", default: "5" },
    requests: { type: "string", default: "300" },
    seconds: { type: "string", default: "3" },
    "skip-wrangler": { type: "boolean", default: false },
    out: { type: "string" },
  },
});
const coldRuns = Math.max(1, Number(values["cold-runs"]));
const requests = Math.max(10, Number(values.requests));
const seconds = Math.min(10, Math.max(1, Number(values.seconds)));
const MODEL = "silero-vad-v5";

const log = (line: string) => console.error(`[edge-inference] ${line}`);
const loadAtStart = loadavg();
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const abs = (p: string) => JSON.stringify(join(root, p));
const round = (x: number, digits = 1) => Math.round(x * 10 ** digits) / 10 ** digits;

function percentile(xs: number[], p: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil((p / 100) * s.length) - 1))]!;
}
const median = (xs: number[]) => percentile(xs, 50);
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/** Resident memory of a process, MiB (VmRSS). */
function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? round(Number(m[1]) / 1024) : NaN;
}

// --- the two Workers ----------------------------------------------------------

const work = mkdtempSync(join(tmpdir(), "switchyard-edge-bench-"));
const replicaVad = `import { defineDeployment } from ${abs("src/config/deployment.ts")};
// The same model on one reference replica, through the proxy.
export default defineDeployment({
  name: "vad",
  routePrefix: "/vad",
  backend: { kind: "onnx", model: ${JSON.stringify(MODEL)} },
  access: { public: true },
  localReplicas: 1,
  maxOngoingRequests: 8,
  policy: { idempotent: true },
});
`;
const variants = {
  without: { label: "without the edge kind (vad on a replica)", files: { "vad.ts": replicaVad } },
  with: {
    label: `with the edge kind (+ vad-edge: ${MODEL} in the Worker)`,
    files: { "vad.ts": replicaVad, "vad-edge.ts": `export { default } from ${abs("examples/edge-inference/vad-edge.ts")};\n` },
  },
} as const;
type Variant = keyof typeof variants;

interface BundleSize {
  files: { name: string; bytes: number; gzipBytes: number }[];
  bytes: number;
  gzipBytes: number;
}

const bundles = {} as Record<Variant, WorkerBundle & { dir: string; functionsDir: string; size: BundleSize }>;
for (const v of Object.keys(variants) as Variant[]) {
  const dir = join(work, v);
  const functionsDir = join(dir, "functions");
  mkdirSync(functionsDir, { recursive: true });
  for (const [name, text] of Object.entries(variants[v].files)) writeFileSync(join(functionsDir, name), text);
  const bundle = await bundleWorker(join(dir, "worker.js"), functionsDir);
  const files = [bundle.path, ...bundle.modules.map((m) => m.path)].map((p) => ({
    name: basename(p),
    bytes: statSync(p).size,
    gzipBytes: gzipSync(readFileSync(p)).byteLength,
  }));
  const size = { files, bytes: files.reduce((a, f) => a + f.bytes, 0), gzipBytes: files.reduce((a, f) => a + f.gzipBytes, 0) };
  bundles[v] = { ...bundle, dir, functionsDir, size };
  log(`bundle ${v}: ${files.map((f) => `${f.name} ${f.bytes} B`).join(", ")}`);
}

// wrangler's own bundling of the repository with the opt-in edge-inference example
// (SWITCHYARD_FUNCTIONS=functions,examples/edge-inference), as `wrangler deploy` would upload it.
let wrangler: { totalKiB: number; gzipKiB: number; modules: string[] } | { skipped: string };
if (values["skip-wrangler"]) {
  wrangler = { skipped: "--skip-wrangler" };
} else {
  const out = join(work, "wrangler-out");
  const wranglerBin = join(root, "node_modules/.bin/wrangler");
  process.env.WRANGLER_SEND_METRICS = "false";
  process.env.CLOUDFLARE_CF_FETCH_ENABLED = "false";
  process.env.SWITCHYARD_FUNCTIONS = "functions,examples/edge-inference";
  const r = await run(wranglerBin, ["deploy", "--dry-run", "--outdir", out], 120_000);
  delete process.env.SWITCHYARD_FUNCTIONS;
  await generateDeploymentsModule(); // .switchyard/deployments.ts as shipped again (functions/)
  const m = /Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/.exec(r.stdout);
  wrangler = m
    ? { totalKiB: Number(m[1]), gzipKiB: Number(m[2]), modules: readdirSync(out).filter((f) => !f.endsWith(".map") && f !== "README.md") }
    : { skipped: `wrangler printed no "Total Upload" line${r.error ? ` (${r.error})` : ""}` };
  log(`wrangler: ${JSON.stringify(wrangler)}`);
}

// --- start-up and cold first request, one fresh workerd process per run --------

const workerdBin = (createRequire(import.meta.url)("workerd") as { default: string }).default;
const oneSecond = JSON.stringify({ samples: synthesizeVowel(16_000) });
const oneFrame = JSON.stringify({ samples: synthesizeVowel(512) });

interface ColdRun {
  startupMs: number;
  rssAfterStartMiB: number;
  firstRequestMs?: number;
  secondRequestMs?: number;
  rssAfterFirstMiB?: number;
}

async function coldRun(v: Variant): Promise<ColdRun> {
  const b = bundles[v];
  const storage = join(b.dir, "do");
  rmSync(storage, { recursive: true, force: true });
  mkdirSync(storage, { recursive: true });
  const port = await freePort();
  const config = join(b.dir, "workerd.capnp");
  writeFileSync(
    config,
    workerdConfig({
      workerPath: b.path,
      configDir: b.dir,
      storageDir: storage,
      address: `127.0.0.1:${port}`,
      vars: { SWITCHYARD_REPLICA_SECRET: "bench", SWITCHYARD_ADMIN_SECRET: "bench", SWITCHYARD_MODE: "local", SWITCHYARD_REQUEST_LOGS: "off" },
      modules: b.modules,
    }),
  );
  const url = `http://127.0.0.1:${port}`;
  const t0 = performance.now();
  const child = spawn(workerdBin, ["serve", config, "--experimental"], { stdio: ["ignore", "ignore", "inherit"] });
  try {
    let startupMs = NaN;
    for (const until = Date.now() + 20_000; Date.now() < until; ) {
      if (child.exitCode !== null) throw new Error(`workerd exited with ${child.exitCode}`);
      try {
        const res = await fetch(`${url}/-/routes`);
        await res.arrayBuffer();
        if (res.ok) {
          startupMs = performance.now() - t0;
          break;
        }
      } catch {
        await sleep(5);
      }
    }
    if (!Number.isFinite(startupMs)) throw new Error("workerd did not answer within 20 s");
    await sleep(200); // let start-up settle before reading memory
    const result: ColdRun = { startupMs: round(startupMs), rssAfterStartMiB: rssMiB(child.pid!) };
    if (v === "with") {
      const timed = async () => {
        const t = performance.now();
        const res = await fetch(`${url}/vad-edge`, { method: "POST", body: oneSecond, headers: { "content-type": "application/json" } });
        await res.arrayBuffer();
        if (res.status !== 200) throw new Error(`POST /vad-edge answered ${res.status}`);
        return round(performance.now() - t);
      };
      result.firstRequestMs = await timed();
      result.secondRequestMs = await timed();
      result.rssAfterFirstMiB = rssMiB(child.pid!);
    }
    return result;
  } finally {
    child.kill("SIGKILL");
    await new Promise((r) => (child.exitCode !== null ? r(null) : child.once("exit", r)));
  }
}

const cold: Record<Variant, ColdRun[]> = { without: [], with: [] };
for (let i = 0; i < coldRuns; i++) {
  for (const v of ["without", "with"] as const) {
    const r = await coldRun(v);
    cold[v].push(r);
    log(`cold ${v} #${i + 1}: ${JSON.stringify(r)}`);
  }
}

// --- warm latency: edge against the replica, same stack ------------------------

process.env.SWITCHYARD_REQUEST_LOGS ??= "off";
const stackLines: string[] = [];
const stack = new LocalStack({ port: 0, stateDir: join(work, "stack"), freshState: true, functionsDir: bundles.with.functionsDir, log: (l) => stackLines.push(l) });

interface WarmRow {
  input: string;
  target: "edge" | "replica";
  requests: number;
  p50ms: number;
  p99ms: number;
  meanMs: number;
  concurrentRps: number;
  concurrentP50ms: number;
  concurrentP99ms: number;
  failed: number;
}
const warm: WarmRow[] = [];
let replicaLoadMs: number | undefined;

try {
  await stack.start();
  replicaLoadMs = Number(/loaded silero-vad-v5 in (\d+) ms/.exec(stackLines.join("\n"))?.[1] ?? NaN);
  const paths = { edge: "/vad-edge", replica: "/vad" } as const;
  const once = async (target: keyof typeof paths, body: string): Promise<number> => {
    const t = performance.now();
    const res = await fetch(`${stack.workerdUrl}${paths[target]}`, { method: "POST", body, headers: { "content-type": "application/json" } });
    await res.arrayBuffer();
    if (res.status !== 200) throw new Error(`${paths[target]} answered ${res.status}`);
    return performance.now() - t;
  };
  // The replica registered during start(); wait until this isolate's routing view has it.
  for (const until = Date.now() + 15_000; ; ) {
    const res = await fetch(`${stack.workerdUrl}${paths.replica}`, { method: "POST", body: oneFrame, headers: { "content-type": "application/json" } });
    await res.arrayBuffer();
    if (res.status === 200) break;
    if (Date.now() > until) throw new Error(`${paths.replica} still answers ${res.status}`);
    await sleep(200);
  }
  for (const [input, body] of [
    ["1 frame (512 samples, 32 ms)", oneFrame],
    ["1 s (16,000 samples, 32 frames)", oneSecond],
  ] as const) {
    for (let i = 0; i < 30; i++) await Promise.all([once("edge", body), once("replica", body)]); // warm-up (and the edge's first request)
    const lat = { edge: [] as number[], replica: [] as number[] };
    for (let i = 0; i < requests; i++) {
      // Alternate which goes first, so neither always follows the other.
      const order = i % 2 === 0 ? (["edge", "replica"] as const) : (["replica", "edge"] as const);
      for (const t of order) lat[t].push(await once(t, body));
    }
    for (const target of ["edge", "replica"] as const) {
      const conc: number[] = [];
      let failed = 0;
      const until = performance.now() + seconds * 1000;
      const started = performance.now();
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          while (performance.now() < until) {
            try {
              conc.push(await once(target, body));
            } catch {
              failed++;
            }
          }
        }),
      );
      const elapsed = (performance.now() - started) / 1000;
      warm.push({
        input,
        target,
        requests,
        p50ms: round(median(lat[target]), 2),
        p99ms: round(percentile(lat[target], 99), 2),
        meanMs: round(mean(lat[target]), 2),
        concurrentRps: Math.round(conc.length / elapsed),
        concurrentP50ms: round(median(conc), 2),
        concurrentP99ms: round(percentile(conc, 99), 2),
        failed,
      });
      log(`warm ${input} ${target}: ${JSON.stringify(warm.at(-1))}`);
    }
  }
} finally {
  await stack.stop();
}

// --- report ----------------------------------------------------------------------

const mb = (bytes: number) => (bytes / 1e6).toFixed(2);
const kib = (k: number) => (k / 1024).toFixed(2);
const spread = (xs: number[]) => `${round(median(xs))} (${round(Math.min(...xs))}–${round(Math.max(...xs))})`;
const lines: string[] = [];
lines.push(`## Edge inference (${MODEL}), ${new Date().toISOString().slice(0, 10)}, ${cpus().length} cores, load average ${loadAtStart[0]!.toFixed(2)} at start, ${loadavg()[0]!.toFixed(2)} at end`);
const bundleRows: string[][] = (["without", "with"] as const).map((v) => {
  const s = bundles[v].size;
  return [variants[v].label, s.files.map((f) => `${f.name} (${mb(f.bytes)} / ${mb(f.gzipBytes)})`).join(", "), mb(s.bytes), mb(s.gzipBytes)];
});
if ("totalKiB" in wrangler) {
  bundleRows.push(["`wrangler deploy --dry-run` of functions/ + examples/edge-inference/ (vad-edge included)", wrangler.modules.join(", "), `${kib(wrangler.totalKiB)} MiB`, `${kib(wrangler.gzipKiB)} MiB`]);
}
lines.push("", "### Bundle (scripts/build.ts; gzip of each file, summed)", "", ...markdownTable(["Worker", "modules", "raw MB", "gzip MB"], bundleRows, "llrr"));
const opt = (xs: (number | undefined)[]) => (xs.every((x) => x !== undefined) ? spread(xs as number[]) : "–");
lines.push(
  "",
  `### Start-up and first request (${coldRuns} fresh workerd processes each; median (min–max))`,
  "",
  ...markdownTable(
    ["Worker", "spawn → first answer ms", "RSS after start MiB", "first POST /vad-edge ms (1 s input)", "second ms", "RSS after first MiB"],
    (["without", "with"] as const).map((v) => {
      const rs = cold[v];
      return [
        variants[v].label,
        spread(rs.map((r) => r.startupMs)),
        spread(rs.map((r) => r.rssAfterStartMiB)),
        opt(rs.map((r) => r.firstRequestMs)),
        opt(rs.map((r) => r.secondRequestMs)),
        opt(rs.map((r) => r.rssAfterFirstMiB)),
      ];
    }),
  ),
);
lines.push(
  "",
  `### Warm latency: edge vs one replica through the proxy (${requests} sequential requests each, interleaved; then ${seconds} s of 4 concurrent clients)`,
  "",
  ...markdownTable(
    ["input", "served by", "p50 ms", "p99 ms", "mean ms", "req/s, 4 clients", "p50 / p99 ms, 4 clients", "failed"],
    warm.map((r) => [
      r.input,
      r.target === "edge" ? "edge (in the Worker)" : "replica (proxy → Node)",
      r.p50ms,
      r.p99ms,
      r.meanMs,
      r.concurrentRps,
      `${r.concurrentP50ms} / ${r.concurrentP99ms}`,
      r.failed,
    ]),
    "llrrrrrr",
  ),
);
lines.push("", `Replica: model loaded at replica start in ${replicaLoadMs} ms (not in any request).`);
console.log(lines.join("\n"));

const result = {
  date: new Date().toISOString(),
  machine: { cores: cpus().length, loadavgAtStart: loadAtStart, loadavgAtEnd: loadavg() },
  model: MODEL,
  options: { coldRuns, requests, seconds },
  bundle: Object.fromEntries((["without", "with"] as const).map((v) => [v, { label: variants[v].label, ...bundles[v].size }])),
  wrangler,
  cold: Object.fromEntries((["without", "with"] as const).map((v) => [v, { runs: cold[v], startupMsMedian: median(cold[v].map((r) => r.startupMs)) }])),
  firstRequestMsMedian: median(cold.with.map((r) => r.firstRequestMs!)),
  warm,
  replicaLoadMs,
};
log(`wrote ${writeResult("edge-inference", result, { ...(values.out ? { out: resolve(root, values.out) } : {}), arms: warm.map((w) => ({ arm: `${w.target} ${w.input}`, requests: w.requests, ok: w.requests - w.failed })) })}`);
rmSync(work, { recursive: true, force: true });
