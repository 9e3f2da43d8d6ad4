/**
 * First throughput figure for the seed's "hi" deployment, measured side by side
 * in one run: one replica directly, and the edge proxy (workerd) in front of N
 * replicas, with wrk (HTTP/1.1 keep-alive) and ab (the seed's HTTP/1.0 command).
 *   npx tsx bench/hello.ts [--replicas 48] [--seconds 5] [--ab-n 10000]
 * Prints a markdown table and writes bench/results/hello.json.
 */
import { execFile, spawn } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs, promisify } from "node:util";
import { LocalStack } from "../src/local/stack.ts";

const exec = promisify(execFile);
const { values } = parseArgs({
  options: { replicas: { type: "string", default: "48" }, seconds: { type: "string", default: "5" }, "ab-n": { type: "string", default: "10000" } },
});
const replicas = Number(values.replicas);
const seconds = Number(values.seconds);
const abN = Number(values["ab-n"]);

interface Row {
  target: string;
  tool: string;
  rps: number;
  p50ms: number;
  p99ms: number;
  failed: number;
  non2xx: number;
}

async function wrk(target: string, url: string): Promise<Row> {
  const { stdout } = await exec("wrk", ["-t2", "-c64", `-d${seconds}s`, "--latency", url], { timeout: (seconds + 30) * 1000 });
  const ms = (label: string) => {
    const m = new RegExp(`${label}%\\s+([\\d.]+)(us|ms|s)`).exec(stdout);
    if (!m) return NaN;
    const v = Number(m[1]);
    return m[2] === "us" ? v / 1000 : m[2] === "s" ? v * 1000 : v;
  };
  const non2xx = Number(/Non-2xx or 3xx responses: (\d+)/.exec(stdout)?.[1] ?? 0);
  const errors = /Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)/.exec(stdout);
  const failed = errors ? errors.slice(1).reduce((a, b) => a + Number(b), 0) : 0;
  return { target, tool: "wrk -t2 -c64", rps: Number(/Requests\/sec:\s+([\d.]+)/.exec(stdout)?.[1]), p50ms: ms("50"), p99ms: ms("99"), failed, non2xx };
}

async function ab(target: string, url: string): Promise<Row> {
  const { stdout } = await exec("ab", ["-n", String(abN), "-c", "100", url], { timeout: 300_000, maxBuffer: 1 << 20 });
  const n = (re: RegExp) => Number(re.exec(stdout)?.[1] ?? 0);
  return {
    target,
    tool: `ab -n ${abN} -c 100`,
    rps: n(/Requests per second:\s+([\d.]+)/),
    p50ms: n(/50%\s+(\d+)/),
    p99ms: n(/99%\s+(\d+)/),
    failed: n(/Failed requests:\s+(\d+)/),
    non2xx: n(/Non-2xx responses:\s+(\d+)/),
  };
}

const stack = new LocalStack({ port: 0, replicas: { hello: replicas, vad: 0, echo: 0 }, stateDir: ".switchyard/bench", freshState: true });
process.on("exit", () => stack.killAll());
await stack.start();
// One more replica, outside routing and without an admission limit: the physical limit of one replica.
const direct = spawn(
  process.execPath,
  ["dist/replica.mjs", "--deployment", "hello", "--backend", "text", "--text", "hi", "--standalone", "--max-ongoing", "100000", "--id", "direct"],
  { stdio: ["ignore", "pipe", "inherit"] },
);
const directUrl = await new Promise<string>((r) => createInterface({ input: direct.stdout! }).on("line", (l) => r((JSON.parse(l) as { url: string }).url)));
try {
  const rows: Row[] = [];
  rows.push(await wrk("one replica, direct", `${directUrl}/hello`));
  rows.push(await wrk(`Switchyard proxy (workerd port), ${replicas} replicas`, `${stack.workerdUrl}/hello`));
  rows.push(await wrk(`Switchyard proxy (public port, via the HTTP/1.0 front), ${replicas} replicas`, `${stack.url}/hello`));
  rows.push(await ab("one replica, direct", `${directUrl}/hello`));
  rows.push(await ab(`Switchyard proxy (public port), ${replicas} replicas`, `${stack.url}/hello`));
  const lines = ["| target | tool | req/s | p50 ms | p99 ms | failed | non-2xx |", "|---|---|---:|---:|---:|---:|---:|"];
  for (const r of rows) lines.push(`| ${r.target} | ${r.tool} | ${r.rps.toFixed(0)} | ${r.p50ms.toFixed(2)} | ${r.p99ms.toFixed(2)} | ${r.failed} | ${r.non2xx} |`);
  const ratio = (a: Row, b: Row) => (a.rps / b.rps).toFixed(2);
  lines.push("", `proxy/direct req/s — wrk: ${ratio(rows[1]!, rows[0]!)} (workerd port), ${ratio(rows[2]!, rows[0]!)} (public port); ab: ${ratio(rows[4]!, rows[3]!)}`);
  console.log(lines.join("\n"));
  writeFileSync(join("bench/results", "hello.json"), JSON.stringify({ when: new Date().toISOString(), replicas, seconds, abN, rows }, null, 2));
} finally {
  direct.kill("SIGTERM");
  await stack.stop();
}
