/**
 * A V8 CPU profile of the edge Worker under load: starts the local stack with
 * workerd's inspector on loopback, samples the Worker's isolate over the
 * DevTools protocol while wrk loads one route, writes the profile (open it in
 * Chrome DevTools or speedscope) and prints the functions with the most self time.
 *   npx tsx bench/profile/profile-proxy.ts [--path /hello] [--seconds 8] [--connections 16]
 *     [--replicas 4] [--top 25] [--out bench/results/proxy.cpuprofile]
 * The load generator must not block this process's event loop: the stack drains
 * workerd's stdout (one log line per request) here, and a blocked drain stalls
 * workerd after ~64 KB of logs (an earlier attempt with a synchronous wrk looked
 * like "the inspector hangs requests").
 */
import { writeFileSync } from "node:fs";
import { parseArgs } from "node:util";
import { LocalStack } from "../../src/local/stack.ts";
import { connectInspector } from "../shared/inspector.ts";
import { freePort, wrk } from "../shared/load-tools.ts";
import { requireLoadTools } from "../shared/load-tool-deps.ts";
import { markdownTable } from "../shared/table.ts";

await requireLoadTools("profile-proxy", ["wrk"]);

const { values } = parseArgs({
  options: {
    path: { type: "string", default: "/hello" },
    seconds: { type: "string", default: "8" },
    connections: { type: "string", default: "16" },
    replicas: { type: "string", default: "4" },
    top: { type: "string", default: "25" },
    out: { type: "string", default: "bench/results/proxy.cpuprofile" },
  },
});

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
}

const inspectorPort = await freePort();
process.env.SWITCHYARD_WORKERD_INSPECTOR = `127.0.0.1:${inspectorPort}`;
const stack = new LocalStack({
  port: 0,
  replicas: { hello: Number(values.replicas) },
  stateDir: ".switchyard/profile",
  freshState: true,
  log: () => undefined,
});
process.on("exit", () => stack.killAll());
await stack.start();
try {
  const url = `${stack.workerdUrl}${values.path}`;
  // Warm up: the Worker's hot functions get optimised before sampling starts.
  for (let i = 0; i < 500; i++) await (await fetch(url)).text();

  const inspector = await connectInspector(inspectorPort);
  const call = inspector.call;

  await call("Profiler.enable");
  await call("Profiler.setSamplingInterval", { interval: 200 });
  await call("Profiler.start");
  const row = await wrk(`proxy ${values.path}`, url, { seconds: Number(values.seconds), connections: Number(values.connections) });
  const { profile } = (await call("Profiler.stop")) as { profile: Profile };
  inspector.close();
  writeFileSync(values.out, JSON.stringify(profile));

  const byNode = new Map(profile.nodes.map((n) => [n.id, n]));
  const self = new Map<string, number>();
  for (const id of profile.samples) {
    const f = byNode.get(id)!.callFrame;
    const name = `${f.functionName || "(anonymous)"}${f.url ? ` ${f.url.split("/").pop()}:${f.lineNumber + 1}` : ""}`;
    self.set(name, (self.get(name) ?? 0) + 1);
  }
  const total = profile.samples.length;
  const idle = self.get("(idle)") ?? 0;
  console.log(`wrk: ${row.rps.toFixed(0)} req/s, p50 ${row.p50ms} ms, p99 ${row.p99ms} ms (profiling slows it)`);
  console.log(`${total} samples, ${((100 * idle) / total).toFixed(1)} % idle; profile written to ${values.out}\n`);
  const busiest = [...self].filter(([k]) => k !== "(idle)").sort((a, b) => b[1] - a[1]).slice(0, Number(values.top));
  // A function's name may hold "|", which would split its cell.
  console.log(markdownTable(["self % of busy", "function"], busiest.map(([name, n]) => [((100 * n) / (total - idle)).toFixed(1), name.replaceAll("|", "\\|")]), "rl").join("\n"));
} finally {
  await stack.stop();
}
process.exit(0);
