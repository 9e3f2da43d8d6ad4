/**
 * Load generators shared by the benchmarks: wrk (HTTP/1.1 keep-alive) and ab
 * (ApacheBench: HTTP/1.0, one connection per request, the seed's tool), their
 * output parsed into one row shape, and the markdown table the benchmarks print.
 */
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { readFileSync, readdirSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { createServer } from "node:net";
import { join } from "node:path";
import { compatibilityDate } from "../../src/config/runtime.ts";
import { markdownTable } from "./table.ts";
import { Header } from "../../src/protocol/index.ts";

export interface Row {
  target: string;
  tool: string;
  rps: number;
  p50ms: number;
  p99ms: number;
  /** wrk: socket errors (connect, read, write, timeout); ab: "Failed requests". */
  failed: number;
  non2xx: number;
  /** Requests completed. */
  requests: number;
  /** Why the row is bounded, skipped or failed; shown next to the target. */
  note?: string;
}

/** Runs a command and returns its stdout even when it exits non-zero or times out. */
export function run(cmd: string, args: string[], timeoutMs: number): Promise<{ stdout: string; error?: string }> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, killSignal: "SIGINT", maxBuffer: 4 << 20 }, (err, stdout, stderr) => {
      // A load tool that is not there can give no figure at all: stop the bench (ensureLoadTools installs it as root).
      if ((err as NodeJS.ErrnoException | null)?.code === "ENOENT") {
        reject(new Error(`${cmd} is not installed (Debian: apt-get install ${cmd === "ab" ? "apache2-utils" : cmd}; run the bench as root to have it installed)`));
        return;
      }
      const error = err ? `${cmd} ${err.killed ? "killed after its time limit" : `exited ${String(err.code)}`}: ${String(stderr).trim().split("\n").pop() ?? ""}` : undefined;
      resolve({ stdout: String(stdout), error });
    });
  });
}

export interface WrkOptions {
  seconds: number;
  threads?: number;
  connections?: number;
  /** A Lua script (wrk -s) that shapes each request. */
  script?: string;
}

export async function wrk(target: string, url: string, o: WrkOptions): Promise<Row> {
  const t = o.threads ?? 2;
  const c = o.connections ?? 64;
  const script = o.script ? ["-s", o.script] : [];
  const { stdout, error } = await run("wrk", [`-t${t}`, `-c${c}`, `-d${o.seconds}s`, "--latency", ...script, url], (o.seconds + 15) * 1000);
  const ms = (label: string) => {
    const m = new RegExp(`^\\s+${label}%\\s+([\\d.]+)(us|ms|s)`, "m").exec(stdout);
    if (!m) return NaN;
    const v = Number(m[1]);
    return m[2] === "us" ? v / 1000 : m[2] === "s" ? v * 1000 : v;
  };
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout);
  return {
    target,
    tool: `wrk -t${t} -c${c}`,
    rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1] ?? NaN),
    p50ms: ms("50"),
    p99ms: ms("99"),
    failed: errors ? errors.slice(1).reduce((a, b) => a + Number(b), 0) : 0,
    non2xx: Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0),
    requests: Number(/(\d+) requests in/.exec(stdout)?.[1] ?? 0),
    ...(error ? { note: error } : {}),
  };
}

export interface AbOptions {
  requests: number;
  concurrency?: number;
  /** ab -t: stop after this many seconds even if fewer requests completed. */
  timeLimitS?: number;
}

export async function ab(target: string, url: string, o: AbOptions): Promise<Row> {
  const c = o.concurrency ?? 100;
  // -t before -n: ab's -t resets the request count to 50,000, a later -n sets it back.
  const limit = o.timeLimitS ? ["-t", String(o.timeLimitS)] : [];
  const { stdout, error } = await run("ab", [...limit, "-n", String(o.requests), "-c", String(c), url], ((o.timeLimitS ?? 290) + 40) * 1000);
  const n = (re: RegExp, none = 0) => Number(re.exec(stdout)?.[1] ?? none);
  const requests = n(/Complete requests:\s+(\d+)/);
  const cut = o.timeLimitS && requests < o.requests ? `stopped at the ${o.timeLimitS} s bound after ${requests} requests` : undefined;
  const note = [error, cut].filter(Boolean).join("; ");
  return {
    target,
    tool: `ab -n ${o.requests} -c ${c}`,
    rps: n(/Requests per second:\s+([\d.]+)/, NaN),
    p50ms: n(/^\s+50%\s+(\d+)/m, NaN),
    p99ms: n(/^\s+99%\s+(\d+)/m, NaN),
    failed: n(/Failed requests:\s+(\d+)/),
    non2xx: n(/Non-2xx responses:\s+(\d+)/),
    requests,
    ...(note ? { note } : {}),
  };
}

/** A row for a target that was not measured with a tool, and why. */
export function skipped(target: string, tool: string, why: string): Row {
  return { target, tool, rps: NaN, p50ms: NaN, p99ms: NaN, failed: 0, non2xx: 0, requests: 0, note: `skipped: ${why}` };
}

/** The load tools' rows as one markdown table (seed, hello); a row that was not measured shows "–", never 0. */
export function loadToolTable(rows: Row[]): string {
  const num = (v: number, digits: number) => (Number.isFinite(v) ? v.toFixed(digits) : "–");
  return markdownTable(
    ["target", "tool", "req/s", "p50 ms", "p99 ms", "failed", "non-2xx"],
    rows.map((r) => {
      const measured = Number.isFinite(r.rps);
      return [r.note ? `${r.target} (${r.note})` : r.target, r.tool, num(r.rps, r.rps < 10 ? 1 : 0), num(r.p50ms, 2), num(r.p99ms, 2), measured ? r.failed : "–", measured ? r.non2xx : "–"];
    }),
    "llrrrrr",
  ).join("\n");
}

export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", () => r()));
  const port = (srv.address() as { port: number }).port;
  await new Promise<void>((r) => srv.close(() => r()));
  return port;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/** Waits until `url` answers 2xx; fails early when `child` exits. */
export async function waitForOk(url: string, timeoutMs: number, child?: ChildProcess): Promise<void> {
  const until = Date.now() + timeoutMs;
  while (Date.now() < until) {
    if (child && child.exitCode !== null) throw new Error(`exited with ${child.exitCode} before ${url} answered`);
    try {
      if ((await fetch(url)).ok) return;
    } catch {
      // not up yet
    }
    await sleep(100);
  }
  throw new Error(`${url} did not answer within ${timeoutMs} ms`);
}

/** The platform limit: a Worker that does one fetch() per request (round robin over `upstreams`) and nothing else. */
const bareWorker = (upstreams: string[]) => `// Generated by bench/shared/load-tools.ts: one fetch() per request, nothing else.
const UPSTREAMS = ${JSON.stringify(upstreams)};
let next = 0;
export default {
  fetch(request) {
    const url = new URL(request.url);
    return fetch(UPSTREAMS[next++ % UPSTREAMS.length] + url.pathname + url.search, request);
  },
};
`;

/**
 * The floor of any proxy that changes headers both ways: the same fetch() per
 * request, but built as a header-rewriting proxy must build it (the request's
 * headers copied, host dropped, one header set; the answer's head copied into a
 * new Response, one header set). What it costs beyond the bare Worker is the
 * runtime's, not a proxy's own code (bench/state-cost/state-cost.ts --rebuilt).
 */
export const rebuiltWorker = (upstreams: string[]) => `// Generated by bench/shared/load-tools.ts: a rebuilt fetch() per request, nothing else.
const UPSTREAMS = ${JSON.stringify(upstreams)};
let next = 0;
export default {
  async fetch(request) {
    const url = new URL(request.url);
    const headers = new Headers(request.headers);
    headers.delete("host");
    headers.set("x-forwarded-by", "rebuilt");
    const upstream = await fetch(UPSTREAMS[next++ % UPSTREAMS.length] + url.pathname + url.search, { method: request.method, headers, body: request.body, redirect: "manual" });
    const response = new Response(upstream.body, upstream);
    response.headers.set("x-served-by", "rebuilt");
    return response;
  },
};
`;

/**
 * A bare Worker for multiplexed requests: each model (the `serve_multiplexed_model_id`
 * header) goes to one upstream, the first time round robin and then always the same,
 * so no replica ever swaps models. The cheapest correct multiplexing proxy: one
 * header read and one fetch() per request (bench/state-cost/state-cost.ts, the multiplexed
 * kind's bare twin).
 */
export const modelPinnedWorker = (upstreams: string[]) => `// Generated by bench/shared/load-tools.ts: one header read and one fetch() per request.
const UPSTREAMS = ${JSON.stringify(upstreams)};
const BY_MODEL = new Map();
let next = 0;
export default {
  fetch(request) {
    const url = new URL(request.url);
    const model = request.headers.get(${JSON.stringify(Header.rayModel)});
    let upstream = model === null ? undefined : BY_MODEL.get(model);
    if (upstream === undefined) {
      upstream = UPSTREAMS[next++ % UPSTREAMS.length];
      if (model !== null) BY_MODEL.set(model, upstream);
    }
    return fetch(upstream + url.pathname + url.search, request);
  },
};
`;

export interface BareWorkers {
  /** URL of each named bare Worker. */
  urls: Record<string, string>;
  child: ChildProcess;
  /** The capnp config's path (names the process in /proc). */
  config: string;
}

/**
 * One workerd process serving one bare Worker per named pool of upstreams, each
 * on its own loopback port; resolves once every one answers GET `readyPath`.
 */
export async function startBareWorkers(
  dir: string,
  pools: Record<string, string[]>,
  readyPath = "/hello",
  worker: { kind: string; source: (upstreams: string[]) => string } = { kind: "bare", source: bareWorker },
): Promise<BareWorkers> {
  const names = Object.keys(pools);
  const ports: Record<string, number> = {};
  const file = (name: string) => `${worker.kind}-${name}.js`;
  for (const name of names) {
    writeFileSync(join(dir, file(name)), worker.source(pools[name]!));
    ports[name] = await freePort();
  }
  const service = (name: string) =>
    `(modules = [(name = "worker.js", esModule = embed ${JSON.stringify(file(name))})], compatibilityDate = ${JSON.stringify(compatibilityDate)}, globalOutbound = "internet")`;
  const config = join(dir, `${worker.kind}.capnp`);
  writeFileSync(
    config,
    `using Workerd = import "/workerd/workerd.capnp";

const config :Workerd.Config = (
  services = [
${names.map((n) => `    (name = "${worker.kind}-${n}", worker = ${service(n)}),`).join("\n")}
    (name = "internet", network = (allow = ["public", "private", "local"])),
  ],
  sockets = [
${names.map((n) => `    (name = "${n}", address = "127.0.0.1:${ports[n]}", http = (), service = "${worker.kind}-${n}"),`).join("\n")}
  ],
);
`,
  );
  const workerdBin = (createRequire(import.meta.url)("workerd") as { default: string }).default;
  const child = spawn(workerdBin, ["serve", config], { stdio: ["ignore", "ignore", "inherit"] });
  const urls = Object.fromEntries(names.map((n) => [n, `http://127.0.0.1:${ports[n]}`]));
  for (const n of names) await waitForOk(`${urls[n]}${readyPath}`, 15_000, child);
  return { urls, child, config };
}

// --- a process's CPU time and memory (Linux /proc) ----------------------------

export const CLK_TCK = Number((await run("getconf", ["CLK_TCK"], 5_000)).stdout.trim()) || 100;

/** The pid of the workerd process whose command line names `configPath` (what `pgrep -f` would find). */
export function workerdPid(configPath: string): number {
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    let argv: string[];
    try {
      argv = readFileSync(`/proc/${entry}/cmdline`, "utf8").split("\0");
    } catch {
      continue; // exited meanwhile
    }
    if (argv[0]?.endsWith("workerd") && argv.includes(configPath)) return Number(entry);
  }
  throw new Error(`no workerd process serving ${configPath}`);
}

/** utime + stime of a process (all its threads), in seconds. */
export function cpuSeconds(pid: number): number {
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  // Fields after "(comm)": state is field 3, utime 14, stime 15.
  const f = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(f[11]) + Number(f[12])) / CLK_TCK;
}

/** Resident memory of a process now, bytes. */
export function rssBytes(pid: number): number {
  const m = /^VmRSS:\s+(\d+) kB$/m.exec(readFileSync(`/proc/${pid}/status`, "utf8"));
  return m ? Number(m[1]) * 1024 : NaN;
}
