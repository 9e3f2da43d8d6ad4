/**
 * The agent's proxy mode (issue 33, docs/agent.md "Proxy mode"): what its loopback hop
 * costs against calling the app directly, measured side by side in one run.
 *
 *   npx tsx bench/proxy-agent/proxy-agent.ts            # full (~2 min)
 *   npx tsx bench/proxy-agent/proxy-agent.ts --quick    # npm run bench
 *   npx tsx bench/proxy-agent/proxy-agent.ts [--seconds 8] [--connections 8] [--latency-requests 3000]
 *
 * Two "hi" apps, each started by the agent as its child (`agent --proxy … -- APP`) and
 * registered with a local stack's edge as in production: a Node http server (the
 * cheapest app there is, so the hop's cost shows whole) and a FastAPI app under
 * uvicorn (what the issue's users run; the example's pinned packages). Arms per app:
 * - direct: the client → the app;
 * - agent: the client → the agent → the app, each request signed as the edge signs a
 *   dispatch and checked by the agent (the edge is not on this path: its own cost is
 *   bench/hello/hello.ts's);
 * - nginx (reference, where nginx is installed): the client → nginx (keep-alive
 *   upstream) → the app: what a C proxy's hop costs on the same machine.
 * The client is one Node loop that signs every request in every arm (the signature is
 * ignored where nobody checks it), so only the hop differs.
 *
 * - Latency: sequential requests on one keep-alive connection, the arms alternating in
 *   rounds of 100, so the machine's drift falls on all. p50 and p99; the p50 added.
 * - Throughput: --connections keep-alive loops for --seconds per arm, the arms
 *   alternating in two halves each; req/s, the ratio, and the agent's CPU per request
 *   (its utime + stime over its arm, /proc). Client, agent and app share the
 *   machine's cores, so on a small machine the agent's CPU is also what the ratio loses.
 *
 * Targets (the issue's), per app: p50 added ≤ 0.5 ms; throughput ≥ 0.8× direct.
 * Writes bench/results/proxy-agent.json.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { Agent, request } from "node:http";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { LocalStack } from "../../src/local/stack.ts";
import { Header, importReplicaKey, signDispatch } from "../../src/protocol/index.ts";
import { cpuSeconds, freePort, waitForOk } from "../shared/load-tools.ts";
import { pythonEnv } from "../../scripts/python-env.ts";
import { percentile } from "../prefix-cache/prefix-cache-workload.ts";
import { writeResult } from "../shared/result-file.ts";
import { addedTarget, ratioTarget } from "../shared/bench-targets.ts";
import { judgedText, markdownTable } from "../shared/table.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    seconds: { type: "string" },
    connections: { type: "string", default: "8" },
    "latency-requests": { type: "string" },
    out: { type: "string" },
  },
});
const quick = values.quick;
const SECONDS = Number(values.seconds ?? (quick ? "3" : "8"));
const CONNECTIONS = Number(values.connections);
const LATENCY_REQUESTS = Number(values["latency-requests"] ?? (quick ? "1000" : "3000"));
const ROUND = 100;
process.env.SWITCHYARD_REQUEST_LOGS ??= "off";

const root = mkdtempSync(join(tmpdir(), "switchyard-proxy-agent-"));
const functionsDir = join(root, "functions");
mkdirSync(functionsDir);
const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));
writeFileSync(
  join(functionsDir, "hi.ts"),
  `import { defineDeployment } from ${config};
export default defineDeployment({ name: "hi", routePrefix: "/hi", access: { public: true }, backend: { kind: "external" }, maxOngoingRequests: 256 });
`,
);
const appFile = join(root, "hi.mjs");
writeFileSync(appFile, `import { createServer } from "node:http";\ncreateServer((req, res) => { req.resume(); res.writeHead(200, { "content-type": "text/plain" }); res.end("hi"); }).listen(Number(process.argv[2]), "127.0.0.1");\n`);
writeFileSync(join(root, "hi_app.py"), `from fastapi import FastAPI\nfrom fastapi.responses import PlainTextResponse\n\napp = FastAPI()\n\n\n@app.get("/")\ndef hi() -> PlainTextResponse:\n    return PlainTextResponse("hi")\n`);

const CLI = resolve(import.meta.dirname, "../../src/replica-entry.ts");
const AGENT_ID = "hi-agent";
const stack = new LocalStack({ port: 0, functionsDir, stateDir: join(root, "state"), freshState: true });
let agentProc: ChildProcess | undefined;
process.on("SIGINT", () => {
  agentProc?.kill("SIGKILL");
  stack.killAll();
  process.exit(130);
});

const httpAgent = new Agent({ keepAlive: true, maxSockets: CONNECTIONS });
let nonce = Date.now();

/** One GET of `base`/, signed as a dispatch to the agent; resolves with its latency, ms. */
async function get(base: string, key: CryptoKey): Promise<number> {
  const timestamp = Date.now();
  const n = nonce++;
  const requestId = `b${n}`;
  const signature = await signDispatch(key, { timestamp, nonce: n, method: "GET", deployment: "hi", target: "/", requestId, replica: AGENT_ID, bodySha256: "" });
  const t0 = performance.now();
  return new Promise<number>((ok, fail) => {
    const req = request(`${base}/`, {
      agent: httpAgent,
      headers: { [Header.requestId]: requestId, [Header.deployment]: "hi", [Header.timestamp]: String(timestamp), [Header.nonce]: String(n), [Header.signature]: signature },
    });
    req.once("response", (res) => {
      res.resume();
      res.once("end", () => (res.statusCode === 200 ? ok(performance.now() - t0) : fail(new Error(`${base}: HTTP ${res.statusCode}`))));
    });
    req.once("error", fail);
    req.end();
  });
}

async function throughput(base: string, key: CryptoKey, seconds: number): Promise<number> {
  let done = 0;
  const end = performance.now() + seconds * 1000;
  await Promise.all(
    Array.from({ length: CONNECTIONS }, async () => {
      while (performance.now() < end) {
        await get(base, key);
        done++;
      }
    }),
  );
  return done;
}

type Arm = "direct" | "agent" | "nginx";
interface AppResult {
  app: string;
  latency: Partial<Record<Arm, { p50: number; p99: number; n: number }>>;
  throughput: Partial<Record<Arm, number>>;
  agentCpuUsPerRequest: number;
  addedP50Ms: number;
  ratio: number;
  nginxRatio?: number;
}

/** The apps: a Node "hi" server (the cheapest app: the hop's cost shows whole) and a FastAPI "hi" app under uvicorn (what the issue's users run). */
async function apps(): Promise<{ name: string; command: (port: number) => string[] }[]> {
  const out: { name: string; command: (port: number) => string[] }[] = [{ name: "Node http", command: (port) => [process.execPath, appFile, String(port)] }];
  const python = await pythonEnv("model-server", readFileSync(resolve(import.meta.dirname, "../../examples/python-model/requirements.txt"), "utf8").split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#")), { log: console.log }).catch((err: unknown) => {
    console.log(`FastAPI app: skipped (${String(err)})`);
    return undefined;
  });
  if (python) out.push({ name: "FastAPI (uvicorn, 1 worker)", command: (port) => [python, "-m", "uvicorn", "hi_app:app", "--app-dir", root, "--host", "127.0.0.1", "--port", String(port), "--no-access-log", "--log-level", "warning"] });
  return out;
}

/** nginx (where installed) proxying to `upstream` with keep-alive, as a C proxy's hop for reference; undefined without nginx. */
async function startNginx(upstream: string): Promise<{ url: string; child: ChildProcess } | undefined> {
  const bin = ["/usr/sbin/nginx", "/usr/bin/nginx"].find((b) => existsSync(b));
  if (!bin) return undefined;
  const port = await freePort();
  const dir = mkdtempSync(join(root, "nginx-"));
  writeFileSync(
    join(dir, "nginx.conf"),
    `worker_processes 1;\npid ${dir}/nginx.pid;\nerror_log ${dir}/error.log warn;\nevents { worker_connections 1024; }\nhttp {\n  access_log off;\n  client_body_temp_path ${dir}/b; proxy_temp_path ${dir}/p; fastcgi_temp_path ${dir}/f; uwsgi_temp_path ${dir}/u; scgi_temp_path ${dir}/s;\n  upstream app { server ${new URL(upstream).host}; keepalive 32; }\n  server { listen 127.0.0.1:${port}; location / { proxy_pass http://app; proxy_http_version 1.1; proxy_set_header Connection ""; } }\n}\n`,
  );
  const child = spawn(bin, ["-c", join(dir, "nginx.conf"), "-g", "daemon off;"], { stdio: "ignore" });
  const url = `http://127.0.0.1:${port}`;
  await waitForOk(`${url}/`, 10_000, child);
  return { url, child };
}

async function measureApp(name: string, command: (port: number) => string[], replicaKey: string, key: CryptoKey): Promise<AppResult> {
  const [appPort, agentPort] = [await freePort(), await freePort()];
  const bases: Partial<Record<Arm, string>> = { direct: `http://127.0.0.1:${appPort}`, agent: `http://127.0.0.1:${agentPort}` };
  const agent = spawn(
    process.execPath,
    ["--import", "tsx", CLI, "agent", "--proxy", "--deployment", "hi", "--edge", stack.url, "--app-url", bases.direct!, "--id", AGENT_ID, "--port", String(agentPort), "--max-ongoing", "256", "--", ...command(appPort)],
    { stdio: ["ignore", "pipe", "inherit"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: replicaKey, SWITCHYARD_REPLICA_SECRET: "" } },
  );
  agentProc = agent;
  await new Promise<void>((ok, fail) => {
    agent.once("exit", (code) => fail(new Error(`the agent exited (${code}) before registering`)));
    createInterface({ input: agent.stdout! }).on("line", (l) => {
      if (l.includes('"registered"')) ok();
    });
  });
  const nginx = await startNginx(bases.direct!);
  if (nginx) bases.nginx = nginx.url;
  const arms = (Object.keys(bases) as Arm[]);
  try {
    // Warm every path (JIT, connections).
    for (let i = 0; i < 300; i++) await Promise.all(arms.map((a) => get(bases[a]!, key)));
    const lat: Partial<Record<Arm, number[]>> = {};
    for (const a of arms) lat[a] = [];
    for (let done = 0; done < LATENCY_REQUESTS; done += ROUND) {
      for (const a of arms) for (let i = 0; i < ROUND; i++) lat[a]!.push(await get(bases[a]!, key));
    }
    const served: Partial<Record<Arm, number>> = {};
    let agentCpu = 0;
    for (let half = 0; half < 2; half++) {
      for (const a of arms) {
        const cpu0 = a === "agent" ? cpuSeconds(agent.pid!) : 0;
        served[a] = (served[a] ?? 0) + (await throughput(bases[a]!, key, SECONDS / 2));
        if (a === "agent") agentCpu += cpuSeconds(agent.pid!) - cpu0;
      }
    }
    const p = (xs: number[], q: number) => percentile(xs, q);
    const rows = arms.map((a) => [a === "nginx" ? "nginx (reference)" : a, p(lat[a]!, 50).toFixed(3), p(lat[a]!, 99).toFixed(3), (served[a]! / SECONDS).toFixed(0)]);
    console.log(`\n### ${name}\n\n${markdownTable(["arm", "p50 ms (sequential)", "p99 ms", "req/s (concurrent)"], rows).join("\n")}\n`);
    const result: AppResult = {
      app: name,
      latency: Object.fromEntries(arms.map((a) => [a, { p50: p(lat[a]!, 50), p99: p(lat[a]!, 99), n: lat[a]!.length }])),
      throughput: Object.fromEntries(arms.map((a) => [a, served[a]! / SECONDS])),
      agentCpuUsPerRequest: (agentCpu / served.agent!) * 1e6,
      addedP50Ms: p(lat.agent!, 50) - p(lat.direct!, 50),
      ratio: served.agent! / served.direct!,
      ...(served.nginx !== undefined && { nginxRatio: served.nginx / served.direct! }),
    };
    console.log(`the agent's CPU: ${result.agentCpuUsPerRequest.toFixed(0)} µs per request; p50 added ${result.addedP50Ms.toFixed(3)} ms; throughput ${result.ratio.toFixed(2)}× direct${result.nginxRatio !== undefined ? ` (nginx in its place: ${result.nginxRatio.toFixed(2)}×)` : " (nginx not installed: no reference arm)"}`);
    return result;
  } finally {
    if (nginx) {
      // SIGTERM: the master stops its workers (SIGKILL would orphan them, still listening).
      nginx.child.kill("SIGTERM");
      await new Promise((r) => nginx.child.once("exit", r));
    }
    agent.kill("SIGTERM");
    await new Promise((r) => agent.once("exit", r));
  }
}

async function main(): Promise<void> {
  console.log(`proxy-agent: "hi" apps direct and behind agent --proxy; ${CONNECTIONS} connections, ${SECONDS} s per arm; load average ${loadavg()[0]!.toFixed(2)}`);
  const list = await apps();
  await stack.start();
  const replicaKey = await stack.replicaKey("hi");
  const key = await importReplicaKey(replicaKey);
  const results: AppResult[] = [];
  try {
    for (const app of list) results.push(await measureApp(app.name, app.command, replicaKey, key));
  } finally {
    await stack.stop();
  }
  const targets: Record<string, boolean | null> = {};
  console.log("");
  for (const r of results) {
    const slug = r.app.startsWith("Node") ? "node" : "fastapi";
    // Judged over MIN_SAMPLES answers in each arm (bench-targets.ts): an arm that served nothing has no p50 and no rate.
    const lat = (a: Arm) => ({ value: r.latency[a]!.p50, answers: r.latency[a]!.n });
    const rate = (a: Arm) => ({ value: r.throughput[a]!, answers: r.throughput[a]! * SECONDS });
    const added = addedTarget(lat("agent"), lat("direct"), 0.5);
    const throughput = ratioTarget(rate("agent"), rate("direct"), { atLeast: true, threshold: 0.8 });
    targets[`${slug}AddedP50Met`] = added.met;
    targets[`${slug}ThroughputMet`] = throughput.met;
    console.log(`target (${r.app}): p50 added ≤ 0.5 ms: ${r.addedP50Ms.toFixed(3)} ms (${judgedText(added)})`);
    console.log(`target (${r.app}): throughput ≥ 0.8× direct: ${r.ratio.toFixed(2)}× (${judgedText(throughput)})`);
  }
  const file = writeResult(
    "proxy-agent",
    { setup: { connections: CONNECTIONS, seconds: SECONDS, latencyRequests: LATENCY_REQUESTS, round: ROUND }, apps: results, targets },
    { quick, ...(values.out !== undefined && { out: values.out }), arms: results.flatMap((r) => (["direct", "agent"] as const).map((a) => ({ arm: `${r.app} ${a}`, requests: r.throughput[a]! * SECONDS, ok: r.throughput[a]! * SECONDS }))) },
  );
  console.log(`\nwrote ${file}`);
}

await main();
