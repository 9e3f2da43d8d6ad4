/**
 * What a large /v1 body costs the edge (issue 13, finding 3): workerd's memory
 * and CPU while it routes 10 MiB chat bodies, and how long an unrelated
 * /hello waits meanwhile. Two arms in one run, in front of nothing (the body's
 * deployment has no replica, so each request ends after routing):
 *
 *   - Switchyard's /v1 route: key checked first, then one scan of the bytes for
 *     the top-level `model`, `stream` and `user` (src/protocol/json-top-level.ts);
 *   - a workerd Worker that does what the route did before: decode the body and
 *     JSON.parse it to read `model`.
 *
 * The body is a long chat (many small message objects, model last): the shape
 * that makes a parser build the most objects. Each round sends `--parallel`
 * bodies at once, alone (CPU and memory of the workerd process), then again
 * while a probe loop GETs /hello (how long other requests wait); the arms are
 * interleaved round by round, and the table shows the median round.
 *
 *   npx tsx bench/openai-body/openai-body.ts [--mib 10] [--parallel 3] [--rounds 3] [--out FILE]
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { build } from "esbuild";
import { compatibilityDate } from "../../src/config/runtime.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { cpuSeconds, freePort, rssBytes, waitForOk, workerdPid } from "../shared/load-tools.ts";
import { markdownTable } from "../shared/table.ts";

const { values } = parseArgs({ options: { mib: { type: "string", default: "10" }, parallel: { type: "string", default: "3" }, rounds: { type: "string", default: "3" }, out: { type: "string" } } });
const MIB = Number(values.mib);
const PARALLEL = Number(values.parallel);
const ROUNDS = Number(values.rounds);
const log = (line: string) => console.error(`[openai-body] ${line}`);
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const root = resolve(import.meta.dirname, "../..");

const work = mkdtempSync(join(tmpdir(), "switchyard-bench-body-"));
const functionsDir = join(work, "functions");
const src = (p: string) => JSON.stringify(join(root, p));
mkdirSync(functionsDir, { recursive: true });
writeFileSync(
  join(functionsDir, "gpt.ts"),
  `import { defineDeployment } from ${src("src/config/deployment.ts")};
export default defineDeployment({ name: "gpt", routePrefix: "/gpt", backend: { kind: "external" }, openai: { models: ["gpt-x"] }, localReplicas: 0, limits: { maxRequestBodyBytes: 64 * 1024 * 1024 } });
`,
);
writeFileSync(
  join(functionsDir, "hello.ts"),
  `import { defineDeployment } from ${src("src/config/deployment.ts")};
export default defineDeployment({ name: "hello", routePrefix: "/hello", access: { public: true }, backend: { kind: "text", text: "hi" }, localReplicas: 2 });
`,
);

/**
 * The route as it was (before 2026-12-01): decode the whole body, JSON.parse it,
 * and check the chat schema with zod (src/proxy/routes/openai.ts at 24ccd60),
 * bundled with esbuild into a workerd Worker of its own.
 */
const parseWorker = `import { z } from "zod";
const Chat = z.looseObject({
  model: z.string().min(1).max(256),
  stream: z.boolean().optional(),
  user: z.string().max(256).optional(),
  messages: z.array(z.looseObject({ role: z.string() })).min(1),
});
export default {
  async fetch(request) {
    if (new URL(request.url).pathname === "/hello") return new Response("hi");
    const json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(await request.arrayBuffer()));
    const parsed = Chat.safeParse(json);
    return Response.json({ model: parsed.success ? parsed.data.model : null }, { status: 503 });
  },
};
`;

function chatBody(mib: number): Uint8Array {
  const messages: string[] = [];
  let size = 0;
  for (let i = 0; size < mib * 1024 * 1024; i++) {
    const m = JSON.stringify({ role: i % 2 ? "assistant" : "user", content: `turn ${i}: ${"lorem ipsum ".repeat(4)}` });
    messages.push(m);
    size += m.length + 1;
  }
  return new TextEncoder().encode(`{"messages":[${messages.join(",")}],"stream":false,"model":"gpt-x"}`);
}

interface Round {
  rssBeforeMb: number;
  rssPeakMb: number;
  cpuSecondsPerBody: number;
  helloP50Ms: number;
  helloMaxMs: number;
  statuses: number[];
}

/**
 * One round: PARALLEL bodies at once, twice. First alone, for the CPU and memory
 * they cost (nothing else runs in the process); then with /hello probed every
 * 20 ms until they are all answered, for how long other requests wait.
 */
async function round(pid: number, bodyUrl: string, helloUrl: string, headers: Record<string, string>, body: Uint8Array): Promise<Round> {
  const send = () =>
    Promise.all(
      Array.from({ length: PARALLEL }, async () => {
        const res = await fetch(bodyUrl, { method: "POST", headers: { "content-type": "application/json", ...headers }, body });
        await res.arrayBuffer();
        return res.status;
      }),
    );
  const rssBefore = rssBytes(pid);
  const cpu0 = cpuSeconds(pid);
  let peak = rssBefore;
  let done = false;
  const sampler = (async () => {
    while (!done) {
      peak = Math.max(peak, rssBytes(pid));
      await sleep(10);
    }
  })();
  const statuses = await send();
  done = true;
  await sampler;
  const cpu = cpuSeconds(pid) - cpu0;

  done = false;
  const hello: number[] = [];
  const prober = (async () => {
    while (!done) {
      const t = performance.now();
      await (await fetch(helloUrl)).text();
      hello.push(performance.now() - t);
      await sleep(20);
    }
  })();
  await send();
  done = true;
  await prober;
  hello.sort((a, b) => a - b);
  return {
    rssBeforeMb: rssBefore / 2 ** 20,
    rssPeakMb: peak / 2 ** 20,
    cpuSecondsPerBody: cpu / PARALLEL,
    helloP50Ms: hello[Math.floor(hello.length / 2)] ?? NaN,
    helloMaxMs: hello.at(-1) ?? NaN,
    statuses,
  };
}

const median = (rs: Round[], k: keyof Omit<Round, "statuses">) => [...rs].map((r) => r[k]).sort((a, b) => a - b)[Math.floor(rs.length / 2)]!;

const stack = new LocalStack({ port: 0, functionsDir, stateDir: join(work, "stack"), freshState: true });
let parser: ReturnType<typeof spawn> | undefined;
try {
  await stack.start();
  const admin = { authorization: `Bearer ${stack.adminSecret}`, "content-type": "application/json" };
  const key = ((await (await fetch(`${stack.workerdUrl}/-/deployments/gpt/keys`, { method: "POST", headers: admin, body: '{"name":"bench"}' })).json()) as { key: string }).key;

  const port = await freePort();
  writeFileSync(join(work, "parse-src.js"), parseWorker);
  await build({ entryPoints: [join(work, "parse-src.js")], bundle: true, format: "esm", outfile: join(work, "parse.js"), nodePaths: [join(root, "node_modules")], logLevel: "silent" });
  const config = join(work, "parse.capnp");
  writeFileSync(
    config,
    `using Workerd = import "/workerd/workerd.capnp";
const config :Workerd.Config = (
  services = [(name = "parse", worker = (modules = [(name = "worker.js", esModule = embed "parse.js")], compatibilityDate = ${JSON.stringify(compatibilityDate)}))],
  sockets = [(name = "http", address = "127.0.0.1:${port}", http = (), service = "parse")],
);
`,
  );
  const workerdBin = (createRequire(import.meta.url)("workerd") as { default: string }).default;
  parser = spawn(workerdBin, ["serve", config], { stdio: ["ignore", "ignore", "inherit"] });
  const parserUrl = `http://127.0.0.1:${port}`;
  await waitForOk(`${parserUrl}/hello`, 15_000, parser);

  const body = chatBody(MIB);
  log(`body: ${(body.byteLength / 2 ** 20).toFixed(1)} MiB; ${PARALLEL} at once, ${ROUNDS} rounds per arm`);
  const arms: { name: string; pid: number; bodyUrl: string; helloUrl: string; headers: Record<string, string> }[] = [
    { name: "Switchyard /v1 (key first, one scan)", pid: workerdPid(join(work, "stack", "workerd.capnp")), bodyUrl: `${stack.workerdUrl}/v1/chat/completions`, helloUrl: `${stack.workerdUrl}/hello`, headers: { authorization: `Bearer ${key}` } },
    { name: "the old route: decode, JSON.parse, zod (a Worker of its own)", pid: workerdPid(config), bodyUrl: `${parserUrl}/v1/chat/completions`, helloUrl: `${parserUrl}/hello`, headers: {} },
  ];
  const results: { arm: string; rounds: Round[] }[] = arms.map((a) => ({ arm: a.name, rounds: [] }));
  // Warm-up, then the arms interleaved round by round.
  for (const a of arms) await round(a.pid, a.bodyUrl, a.helloUrl, a.headers, body);
  for (let r = 0; r < ROUNDS; r++) {
    for (const [i, a] of arms.entries()) {
      const one = await round(a.pid, a.bodyUrl, a.helloUrl, a.headers, body);
      results[i]!.rounds.push(one);
      log(`${a.name}: round ${r + 1}: RSS ${one.rssBeforeMb.toFixed(0)} → peak ${one.rssPeakMb.toFixed(0)} MB, CPU ${(one.cpuSecondsPerBody * 1000).toFixed(0)} ms/body, /hello p50 ${one.helloP50Ms.toFixed(1)} max ${one.helloMaxMs.toFixed(0)} ms, statuses ${one.statuses.join(",")}`);
    }
  }
  const lines = [
    `${PARALLEL} × ${(body.byteLength / 2 ** 20).toFixed(1)} MiB chat bodies at once (median of ${ROUNDS} rounds):`,
    "",
    ...markdownTable(
      ["arm", "RSS growth MB", "CPU ms / body", "/hello p50 ms", "/hello max ms"],
      results.map((r) => [
        r.arm,
        (median(r.rounds, "rssPeakMb") - median(r.rounds, "rssBeforeMb")).toFixed(0),
        (median(r.rounds, "cpuSecondsPerBody") * 1000).toFixed(0),
        median(r.rounds, "helloP50Ms").toFixed(1),
        median(r.rounds, "helloMaxMs").toFixed(0),
      ]),
    ),
  ];
  const [sy, old] = results;
  lines.push("", `Ratios (Switchyard / the old route): CPU per body ${(median(sy!.rounds, "cpuSecondsPerBody") / median(old!.rounds, "cpuSecondsPerBody")).toFixed(2)}, RSS growth ${((median(sy!.rounds, "rssPeakMb") - median(sy!.rounds, "rssBeforeMb")) / Math.max(1, median(old!.rounds, "rssPeakMb") - median(old!.rounds, "rssBeforeMb"))).toFixed(2)}`);
  console.log(lines.join("\n"));
  if (values.out) writeFileSync(values.out, JSON.stringify({ when: new Date().toISOString(), mib: MIB, parallel: PARALLEL, results }, null, 2));
} finally {
  parser?.kill("SIGKILL");
  await stack.stop();
  rmSync(work, { recursive: true, force: true });
}
