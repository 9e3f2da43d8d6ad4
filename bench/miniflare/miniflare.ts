/**
 * Toolchain measurement (issue 17 §1): the local stack's edge Worker served by
 * raw workerd, as LocalStack does (arm A), and by Miniflare's API (arm B), in
 * ONE run, in front of the SAME replica processes, interleaved A, B, C, A, B, C with
 * the same wrk load.
 *
 *   npx tsx bench/miniflare/miniflare.ts [--replicas 4] [--seconds 8] [--rounds 2] [--connections 16]
 *
 * Arm A: LocalStack (its own bundle, capnp config and workerd process), started
 * with no replicas of its own. Arm B: the same bundle (scripts/build.ts
 * bundleWorker, with the same wasm/data modules), the same plain-text bindings
 * (the stack's replica and admin secrets) and the same six SQLite-backed
 * Durable Object bindings, given to `new Miniflare({...})`.
 *
 * The replicas (dist/replica.mjs, started as LocalStack starts them, with their
 * deployment's key) register with BOTH edges: their --edge is a small fan-out
 * in this process that forwards each signed control message (register, report,
 * deregister) to arm A's workerd and to arm B's Miniflare and answers with A's
 * reply. The signatures hold for both: both edges derive the key from the same
 * master secret. The fan-out runs through all four measurements, so both arms
 * see the same control traffic.
 *
 * Load: wrk -t1 -c16 -d8s GET /hello on each arm's workerd socket (1 s warm-up
 * first). CPU: utime + stime from /proc/<pid>/stat of each arm's workerd process
 * (Miniflare's: the workerd child it spawns) and of this Node process (which
 * hosts Miniflare, whose Node side would show here if it sat in the request path),
 * before and after each wrk run.
 *
 * Arm C: the same Miniflare instance (same workerd process) through a second
 * socket, `unsafeDirectSockets`, bound straight to the user Worker: it shows how
 * much of B's cost is Miniflare's entry Worker, which every request to the
 * mf.ready URL passes through.
 *
 * Prints a markdown table; writes bench/results/miniflare.json.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { mkdirSync, readFileSync, readdirSync, rmSync } from "node:fs";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import { cpus, loadavg } from "node:os";
import { dirname, join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import type { Readable } from "node:stream";
import { parseArgs } from "node:util";
// Miniflare 4's API (the package's `latest` release line), under the alias
// "miniflare-4": wrangler 4.164 runs on miniflare 5 (published as 5.x-beta), whose
// options are a different shape (workers[].config/dev, no outbound network
// allow-list). package.json's overrides give it the project's workerd, so both arms
// run the same runtime binary with wrangler.toml's date and flags.
import { Miniflare } from "miniflare-4";
import { bundleWorker } from "../../src/local/build.ts";
import { writeResult } from "../shared/result-file.ts";
import { markdownTable } from "../shared/table.ts";
import { compatibilityDate, compatibilityFlags, durableObjects } from "../../src/config/runtime.ts";
import { LocalStack, loadDeployments } from "../../src/local/stack.ts";
import { CLK_TCK, cpuSeconds, freePort, waitForOk, workerdPid, wrk } from "../shared/load-tools.ts";
import { requireLoadTools } from "../shared/load-tool-deps.ts";

await requireLoadTools("miniflare", ["wrk"]);

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const { values } = parseArgs({
  options: {
    replicas: { type: "string", default: "4" },
    seconds: { type: "string", default: "8" },
    rounds: { type: "string", default: "2" },
    connections: { type: "string", default: "16" },
  },
});
const N = Number(values.replicas);
const SECONDS = Number(values.seconds);
const ROUNDS = Number(values.rounds);
const CONNECTIONS = Number(values.connections);
const log = (line: string) => console.error(`[miniflare] ${line}`);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const functionsDir = join(root, "functions");
const stateDir = join(root, ".switchyard/bench-miniflare");
const mfDir = join(stateDir, "mf");
rmSync(mfDir, { recursive: true, force: true });
mkdirSync(mfDir, { recursive: true, mode: 0o700 });

// --- arm A: LocalStack's workerd, no replicas of its own ------------------------

const deployments = await loadDeployments(functionsDir);
const stack = new LocalStack({ port: 0, stateDir, freshState: true, replicas: Object.fromEntries(deployments.map((d) => [d.name, 0])) });
const children: ChildProcess[] = [];
let mf: Miniflare | undefined;
process.on("exit", () => {
  stack.killAll();
  for (const c of children) c.kill("SIGKILL");
});
for (const sig of ["SIGINT", "SIGTERM"] as const) process.on(sig, () => process.exit(130));

await stack.start();
const pidA = workerdPid(join(stateDir, "workerd.capnp"));
log(`arm A (raw workerd, LocalStack) at ${stack.workerdUrl}, pid ${pidA}`);

// --- arm B: the same bundle through Miniflare -----------------------------------

const workerPath = join(mfDir, "worker.js");
const bundle = await bundleWorker(workerPath, functionsDir);
const mfPort = await freePort();
const before = new Set(workerdChildren());
mf = new Miniflare({
  host: "127.0.0.1",
  port: mfPort,
  modulesRoot: mfDir,
  modules: [
    { type: "ESModule", path: workerPath },
    ...(bundle.modules ?? []).map((m) => ({ type: m.type === "wasm" ? ("CompiledWasm" as const) : ("Data" as const), path: m.path })),
  ],
  compatibilityDate,
  compatibilityFlags: [...compatibilityFlags],
  bindings: {
    SWITCHYARD_REPLICA_SECRET: stack.replicaSecret,
    SWITCHYARD_ADMIN_SECRET: stack.adminSecret,
    SWITCHYARD_MODE: "local",
    ...(process.env.SWITCHYARD_REQUEST_LOGS ? { SWITCHYARD_REQUEST_LOGS: process.env.SWITCHYARD_REQUEST_LOGS } : {}),
  },
  durableObjects: Object.fromEntries(durableObjects.map((o) => [o.name, { className: o.className, useSQLite: o.sqlite }])),
  durableObjectsPersist: join(mfDir, "do"),
  // As the capnp config: replicas on loopback, never link-local (Miniflare's default denies loopback).
  outboundService: { network: { allow: ["public", "private", "local"], deny: ["169.254.0.0/16", "fe80::/10"] } },
  // The Worker's request logs are read and dropped, as LocalStack does without a log (by default
  // Miniflare prints them through this Node process, which would put that printing in arm B only).
  // Arm C: a second socket on the same workerd process, bound straight to the user Worker
  // (skipping Miniflare's entry Worker, which every request to mf.ready goes through).
  unsafeDirectSockets: [{ host: "127.0.0.1", port: 0 }],
  handleRuntimeStdio: (stdout: Readable, stderr: Readable) => {
    stdout.resume();
    stderr.resume();
  },
});
const mfUrl = (await mf.ready).toString().replace(/\/$/, "");
const mfDirectUrl = (await mf.unsafeGetDirectURL()).toString().replace(/\/$/, "");
await waitForOk(`${mfUrl}/-/routes`, 15_000);
await waitForOk(`${mfDirectUrl}/-/routes`, 15_000);
const pidB = workerdChildren().find((p) => !before.has(p) && p !== pidA);
if (!pidB) throw new Error("cannot find the workerd process Miniflare started");
/** How Miniflare runs workerd (flags differ from LocalStack's `workerd serve CONFIG --experimental`). */
const miniflareWorkerdArgv = readFileSync(`/proc/${pidB}/cmdline`, "utf8").split("\0").filter(Boolean).slice(1);
log(`Miniflare's workerd: ${miniflareWorkerdArgv.join(" ")}`);
log(`arm B (Miniflare ${readVersion("miniflare-4")}) at ${mfUrl}, arm C (its direct socket) at ${mfDirectUrl}, workerd pid ${pidB}`);

/** workerd processes whose parent is this process. */
function workerdChildren(): number[] {
  const out: number[] = [];
  for (const e of readdirSync("/proc")) {
    if (!/^\d+$/.test(e)) continue;
    try {
      const stat = readFileSync(`/proc/${e}/stat`, "utf8");
      const ppid = Number(stat.slice(stat.lastIndexOf(")") + 2).split(" ")[1]);
      const argv0 = readFileSync(`/proc/${e}/cmdline`, "utf8").split("\0")[0] ?? "";
      if (ppid === process.pid && argv0.endsWith("workerd")) out.push(Number(e));
    } catch {
      // exited meanwhile
    }
  }
  return out;
}
function readVersion(pkg: string): string {
  return (JSON.parse(readFileSync(join(root, "node_modules", pkg, "package.json"), "utf8")) as { version: string }).version;
}

// --- the control-plane fan-out and the replicas ---------------------------------

const edges = [stack.workerdUrl, mfUrl];
const fanout = createServer((req: IncomingMessage, res: ServerResponse) => {
  const chunks: Buffer[] = [];
  req.on("data", (c: Buffer) => chunks.push(c));
  req.on("end", () => {
    const body = Buffer.concat(chunks);
    const headers: Record<string, string> = {};
    for (const [k, v] of Object.entries(req.headers)) if (typeof v === "string" && k !== "host" && k !== "connection" && k !== "content-length") headers[k] = v;
    const send = (edge: string) =>
      fetch(`${edge}${req.url}`, { method: req.method, headers, ...(req.method === "GET" || req.method === "HEAD" ? {} : { body }) });
    const [a, b] = edges.map(send);
    void b!.then((r) => r.arrayBuffer().then((buf) => r.ok || log(`Miniflare edge answered ${req.url} with ${r.status}: ${Buffer.from(buf).toString().slice(0, 200)}`)), (e: Error) => log(`Miniflare edge: ${e.message}`));
    a!.then(
      async (r) => {
        const buf = Buffer.from(await r.arrayBuffer());
        const h: Record<string, string> = {};
        r.headers.forEach((v, k) => {
          if (k !== "content-length" && k !== "transfer-encoding" && k !== "connection") h[k] = v;
        });
        res.writeHead(r.status, h).end(buf);
      },
      (e: Error) => res.writeHead(502).end(e.message),
    );
  });
});
await new Promise<void>((r) => fanout.listen(0, "127.0.0.1", () => r()));
const fanoutUrl = `http://127.0.0.1:${(fanout.address() as { port: number }).port}`;

const hello = deployments.find((d) => d.name === "hello")!;
if (hello.backend.kind !== "text") throw new Error("functions/hello.ts: expected a text backend");
const key = await stack.replicaKey("hello");
const replicaUrls = await Promise.all(Array.from({ length: N }, (_, i) => startReplica(`hello-mf-${i + 1}`)));
log(`${N} replicas registered through the fan-out: ${replicaUrls.join(" ")}`);

async function startReplica(id: string): Promise<string> {
  const env: NodeJS.ProcessEnv = { ...process.env, SWITCHYARD_REPLICA_KEY: key };
  delete env.SWITCHYARD_REPLICA_SECRET;
  const args = [join(root, "dist/replica.mjs"), "--deployment", "hello", "--backend", "text", "--text", (hello.backend as { text: string }).text, "--edge", fanoutUrl, "--id", id, "--max-ongoing", String(hello.maxOngoingRequests), "--drain-timeout-ms", "5000"];
  const child = spawn(process.execPath, args, { stdio: ["ignore", "pipe", "inherit"], env });
  children.push(child);
  return new Promise<string>((res, rej) => {
    let url = "";
    createInterface({ input: child.stdout! }).on("line", (line) => {
      try {
        const ev = JSON.parse(line) as { event?: string; url?: string };
        if (ev.event === "listening" && ev.url) url = ev.url;
        if (ev.event === "registered") res(url);
      } catch {
        // not an event line
      }
    });
    child.once("exit", (code) => rej(new Error(`replica ${id} exited with ${code} before registering`)));
  });
}

/** Waits until an edge's routing object lists every replica as ready. */
async function readyOn(edge: string): Promise<void> {
  const until = Date.now() + 20_000;
  let last = "";
  while (Date.now() < until) {
    const r = await fetch(`${edge}/-/deployments/hello`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
    const text = await r.text();
    if (r.ok) {
      const s = JSON.parse(text) as { snapshot: { replicas: { load: { state: string } }[] } };
      const ready = s.snapshot.replicas.filter((x) => x.load.state === "ready").length;
      last = `${ready}/${s.snapshot.replicas.length} ready`;
      if (ready === N) return;
    } else last = `${r.status} ${text.slice(0, 200)}`;
    await sleep(200);
  }
  throw new Error(`${edge}: replicas not all ready (${last})`);
}
await readyOn(stack.workerdUrl);
await readyOn(mfUrl);
for (const u of [...edges, mfDirectUrl]) {
  const r = await fetch(`${u}/hello`);
  log(`${u}/hello → ${r.status} ${(await r.text()).trim().slice(0, 40)}`);
}

// --- interleaved measurement ----------------------------------------------------

interface Run {
  arm: "workerd" | "miniflare" | "miniflare-direct";
  round: number;
  rps: number;
  p50ms: number;
  p99ms: number;
  requests: number;
  failed: number;
  non2xx: number;
  workerdCpuS: number;
  nodeCpuS: number;
  workerdUsPerReq: number;
  totalUsPerReq: number;
  note?: string;
}
const arms = { workerd: { url: stack.workerdUrl, pid: pidA }, miniflare: { url: mfUrl, pid: pidB }, "miniflare-direct": { url: mfDirectUrl, pid: pidB } } as const;
const runs: Run[] = [];
const nodeCpu = () => {
  const u = process.cpuUsage();
  return (u.user + u.system) / 1e6;
};
const started = Date.now();
const machine = { cpus: cpus().length, loadavg1mAtStart: Number(loadavg()[0]!.toFixed(2)), clockTicksPerSecond: CLK_TCK };
try {
  for (let round = 1; round <= ROUNDS; round++) {
    for (const arm of ["workerd", "miniflare", "miniflare-direct"] as const) {
      const { url, pid } = arms[arm];
      await wrk("warm-up", `${url}/hello`, { seconds: 1, threads: 1, connections: 8 });
      const w0 = cpuSeconds(pid);
      const n0 = nodeCpu();
      const row = await wrk(arm, `${url}/hello`, { seconds: SECONDS, threads: 1, connections: CONNECTIONS });
      const workerdCpuS = cpuSeconds(pid) - w0;
      const nodeCpuS = nodeCpu() - n0;
      const r: Run = {
        arm,
        round,
        rps: row.rps,
        p50ms: row.p50ms,
        p99ms: row.p99ms,
        requests: row.requests,
        failed: row.failed,
        non2xx: row.non2xx,
        workerdCpuS,
        nodeCpuS,
        workerdUsPerReq: (workerdCpuS / row.requests) * 1e6,
        totalUsPerReq: ((workerdCpuS + nodeCpuS) / row.requests) * 1e6,
        ...(row.note ? { note: row.note } : {}),
      };
      runs.push(r);
      log(`round ${round} ${arm}: ${r.rps.toFixed(0)} req/s, workerd ${r.workerdUsPerReq.toFixed(0)} µs/req, +node ${r.totalUsPerReq.toFixed(0)} µs/req`);
    }
  }
} finally {
  for (const c of children) {
    c.kill("SIGTERM");
  }
  await sleep(500);
  fanout.close();
  await mf?.dispose();
  await stack.stop();
}

// --- report ----------------------------------------------------------------------

const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;
const summary = (arm: Run["arm"]) => {
  const rs = runs.filter((r) => r.arm === arm);
  const requests = rs.reduce((a, r) => a + r.requests, 0);
  return {
    rps: mean(rs.map((r) => r.rps)),
    workerdUsPerReq: (rs.reduce((a, r) => a + r.workerdCpuS, 0) / requests) * 1e6,
    totalUsPerReq: (rs.reduce((a, r) => a + r.workerdCpuS + r.nodeCpuS, 0) / requests) * 1e6,
    p50ms: mean(rs.map((r) => r.p50ms)),
    p99ms: mean(rs.map((r) => r.p99ms)),
    failed: rs.reduce((a, r) => a + r.failed + r.non2xx, 0),
  };
};
const A = summary("workerd");
const B = summary("miniflare");
const C = summary("miniflare-direct");
const ratios = {
  throughput: B.rps / A.rps,
  workerdCpuPerRequest: B.workerdUsPerReq / A.workerdUsPerReq,
  totalCpuPerRequest: B.totalUsPerReq / A.totalUsPerReq,
  directThroughput: C.rps / A.rps,
  directWorkerdCpuPerRequest: C.workerdUsPerReq / A.workerdUsPerReq,
  directTotalCpuPerRequest: C.totalUsPerReq / A.totalUsPerReq,
};
const within = ratios.throughput >= 0.9 && ratios.totalCpuPerRequest <= 1.1;
const f0 = (v: number) => (Number.isFinite(v) ? v.toFixed(0) : "–");
const f2 = (v: number) => (Number.isFinite(v) ? v.toFixed(2) : "–");
const lines = [
  ...markdownTable(
    ["run", "arm", "req/s", "p50 ms", "p99 ms", "failed + non-2xx", "workerd CPU µs/req", "workerd + Node CPU µs/req"],
    [
      ...runs.map((r) => [r.round, r.arm, f0(r.rps), f2(r.p50ms), f2(r.p99ms), r.failed + r.non2xx, f0(r.workerdUsPerReq), f0(r.totalUsPerReq)]),
      ...(
        [
          ["workerd (LocalStack)", A],
          [`Miniflare ${readVersion("miniflare-4")} (mf.ready URL)`, B],
          ["Miniflare, unsafeDirectSockets", C],
        ] as const
      ).map(([arm, m]) => ["mean", arm, f0(m.rps), f2(m.p50ms), f2(m.p99ms), m.failed, f0(m.workerdUsPerReq), f0(m.totalUsPerReq)]),
    ],
    "llrrrrrr",
  ),
  "",
  `- Miniflare / workerd throughput: **${f2(ratios.throughput)}**`,
  `- Miniflare / workerd CPU per request (workerd process): **${f2(ratios.workerdCpuPerRequest)}**; with this Node process: **${f2(ratios.totalCpuPerRequest)}**`,
  `- Miniflare's direct socket / workerd: throughput **${f2(ratios.directThroughput)}**, CPU per request (workerd process) **${f2(ratios.directWorkerdCpuPerRequest)}**, with Node **${f2(ratios.directTotalCpuPerRequest)}**`,
  `- Decision rule (≤ 10 % cost in throughput and CPU per request): ${within ? "within: Miniflare qualifies" : "exceeded: keep raw workerd"}`,
  `- ${machine.cpus} CPUs shared with wrk and ${N} replicas; load average at start ${machine.loadavg1mAtStart}; wrk -t1 -c${CONNECTIONS} -d${SECONDS}s GET /hello, ${ROUNDS} rounds A, B, C; run took ${((Date.now() - started) / 1000).toFixed(0)} s of measurement.`,
];
console.log(lines.join("\n"));
writeResult(
  "miniflare",
  { machine, versions: { miniflare: readVersion("miniflare-4"), workerd: readVersion("workerd") }, miniflareWorkerdArgv, options: { replicas: N, seconds: SECONDS, rounds: ROUNDS, connections: CONNECTIONS, requestLogs: process.env.SWITCHYARD_REQUEST_LOGS ?? "on" }, runs, summary: { workerd: A, miniflare: B, miniflareDirect: C }, ratios, withinRule: within },
  { arms: runs.map((r) => ({ arm: r.arm, requests: r.requests, ok: r.requests - r.non2xx })) },
);
process.exit(0);
