/**
 * First throughput figure for the seed's "hi" deployment, measured side by side
 * in one run: one replica directly, and the edge proxy (workerd) in front of N
 * replicas, with wrk (HTTP/1.1 keep-alive) and ab (the seed's HTTP/1.0 command).
 *   npx tsx bench/hello/hello.ts [--replicas 48] [--seconds 5] [--ab-n 10000]
 * Prints a markdown table and writes bench/results/hello.json.
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { writeResult } from "../shared/result-file.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { ab as abRun, loadToolTable, wrk as wrkRun, type Row } from "../shared/load-tools.ts";
import { requireLoadTools } from "../shared/load-tool-deps.ts";

await requireLoadTools("hello", ["wrk", "ab"]);

const { values } = parseArgs({
  options: { replicas: { type: "string", default: "48" }, seconds: { type: "string", default: "5" }, "ab-n": { type: "string", default: "10000" } },
});
const replicas = Number(values.replicas);
const seconds = Number(values.seconds);
const abN = Number(values["ab-n"]);
const wrk = (target: string, url: string) => wrkRun(target, url, { seconds });
// Bounded at 10 s per run (the machine is shared); a cut run says so in its row.
const ab = (target: string, url: string) => abRun(target, url, { requests: abN, timeLimitS: 10 });

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
  const lines = [loadToolTable(rows)];
  const ratio = (a: Row, b: Row) => (a.rps / b.rps).toFixed(2);
  lines.push("", `proxy/direct req/s — wrk: ${ratio(rows[1]!, rows[0]!)} (workerd port), ${ratio(rows[2]!, rows[0]!)} (public port); ab: ${ratio(rows[4]!, rows[3]!)}`);
  console.log(lines.join("\n"));
  console.log(`wrote ${writeResult("hello", { replicas, seconds, abN, rows }, { arms: rows.map((r) => ({ arm: `${r.target} (${r.tool})`, requests: r.requests, ok: r.requests - r.non2xx - r.failed })) })}`);
} finally {
  direct.kill("SIGTERM");
  await stack.stop();
}
