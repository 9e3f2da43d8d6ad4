/**
 * Where a plain request's CPU goes inside workerd, native code included:
 * `perf record` on the stack's workerd process and on a bare fetch() Worker's,
 * each under the same wrk load, and the samples per request grouped by what
 * they are (the kernel, memory allocation, V8, the Headers API, the HTTP
 * server, JavaScript itself...). bench/profile/profile-proxy.ts sees only the isolate's
 * JavaScript and calls the rest "(program)"; this sees the whole process, so
 * the proxy's excess over a bare Worker can be split by kind of runtime work.
 *
 *   npx tsx bench/profile/profile-native.ts [--seconds 6] [--connections 16] [--frequency 2000] [--rounds 2] [--top 15]
 *
 * Needs Linux `perf` (Debian: `apt-get install linux-perf`) and leave to
 * profile one's own processes (root, or kernel.perf_event_paranoid ≤ 2).
 * Each round profiles the bare Worker, then the stack (GET /hello, 4 hello
 * replicas); the per-request figures are over all rounds. A sample stands for
 * 1e6 / frequency µs of one thread's CPU, so the table's µs per request are
 * estimates with the sampling's error (~√n samples), not measurements to the µs.
 * JavaScript that V8 compiled shows as one "[JIT]" group: its frames carry no
 * names without V8's --perf-basic-prof.
 */
import { spawn } from "node:child_process";
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { LocalStack } from "../../src/local/stack.ts";
import { run, startBareWorkers, workerdPid, wrk, type BareWorkers } from "../shared/load-tools.ts";
import { requireLoadTools } from "../shared/load-tool-deps.ts";
import { markdownTable } from "../shared/table.ts";

await requireLoadTools("profile-native", ["wrk"]);

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "6" },
    connections: { type: "string", default: "16" },
    frequency: { type: "string", default: "2000" },
    rounds: { type: "string", default: "2" },
    top: { type: "string", default: "15" },
  },
});
const seconds = Math.max(2, Number(values.seconds));
const connections = Math.max(1, Number(values.connections));
const frequency = Math.max(100, Number(values.frequency));
const rounds = Math.max(1, Math.floor(Number(values.rounds)));
const top = Math.max(0, Math.floor(Number(values.top)));
const log = (line: string) => console.error(`[profile-native] ${line}`);

if ((await run("perf", ["--version"], 5_000)).error) {
  console.error("perf is not installed (Debian: apt-get install linux-perf)");
  process.exit(2);
}

/** What a sample is, from its symbol and the object it is in; the first match wins. */
const GROUPS: [name: string, test: (sym: string, dso: string) => boolean][] = [
  ["kernel (syscalls, sockets, wake-ups)", (_s, d) => d.includes("kernel")],
  ["JavaScript, compiled by V8 ([JIT])", (_s, d) => d.startsWith("[JIT]") || d.startsWith("perf-")],
  ["V8 builtins and interpreter", (s) => s.startsWith("Builtins_")],
  ["V8 garbage collection and handles", (s) => /cppgc|v8::internal::Heap|Scavenge|MarkCompact|Sweeper|Marking|Evacuat|GlobalHandles|HeapTracer/.test(s)],
  ["memory allocation and copies", (s) => /tcmalloc|TCMalloc|malloc|\bfree\b|cfree|__mem(move|cpy|set)|operator (new|delete)/.test(s)],
  ["V8 runtime and API", (s) => /v8::|Runtime_/.test(s)],
  ["JS bindings (jsg)", (s) => s.includes("workerd::jsg::")],
  ["Headers API", (s) => /workerd::api::Headers|HttpHeaderTable|getHeaderKeyFor|HeaderName|HeaderMap|HeaderCaseMap/.test(s)],
  ["other Workers APIs (fetch, Request, Response, streams)", (s) => s.includes("workerd::api::")],
  ["HTTP server and client (Rust: hyper, tokio)", (s) => /hyper|tokio|futures_util|bytes::|http::|mio::|workerd_server/.test(s)],
  ["KJ event loop, promises, I/O", (s) => s.includes("kj::")],
  ["workerd, other", (s) => s.includes("workerd::")],
  ["libc and other", () => true],
];

interface Profile {
  requests: number;
  /** Samples per group, and per symbol. */
  groups: Map<string, number>;
  symbols: Map<string, number>;
}

/** `perf report` of one recording: samples per symbol, with the object each is in. */
async function readProfile(file: string, requests: number): Promise<Profile> {
  const { stdout, error } = await run("perf", ["report", "-i", file, "--no-children", "-g", "none", "--sort", "dso,sym", "-n", "--stdio"], 120_000);
  if (error && !stdout) throw new Error(`perf report: ${error}`);
  const groups = new Map<string, number>();
  const symbols = new Map<string, number>();
  for (const line of stdout.split("\n")) {
    // "    8.10%           939  [kernel.kallsyms]  [k] _raw_spin_unlock_irqrestore"
    const m = /^\s*[\d.]+%\s+(\d+)\s+(\S+(?: tid \d+)?)\s+\[[^\]]+\]\s+(.*)$/.exec(line);
    if (!m) continue;
    const n = Number(m[1]);
    const dso = m[2]!;
    const sym = m[3]!.trim();
    const group = GROUPS.find(([, test]) => test(sym, dso))![0];
    groups.set(group, (groups.get(group) ?? 0) + n);
    const key = dso.startsWith("[JIT]") ? "[JIT] (JavaScript)" : sym.length > 110 ? `${sym.slice(0, 107)}...` : sym;
    symbols.set(key, (symbols.get(key) ?? 0) + n);
  }
  return { requests, groups, symbols };
}

function merge(into: Profile, p: Profile): void {
  into.requests += p.requests;
  for (const [k, v] of p.groups) into.groups.set(k, (into.groups.get(k) ?? 0) + v);
  for (const [k, v] of p.symbols) into.symbols.set(k, (into.symbols.get(k) ?? 0) + v);
}

const work = mkdtempSync(join(tmpdir(), "sy-profile-native-"));
const functionsDir = join(work, "functions");
mkdirSync(functionsDir);
writeFileSync(join(functionsDir, "hello.ts"), `export { default } from ${JSON.stringify(resolve(import.meta.dirname, "../../functions/hello.ts"))};\n`);
const stateDir = join(work, "state");
const stack = new LocalStack({ port: 0, acceptUnsignedDispatches: true, functionsDir, stateDir, freshState: true, replicas: { hello: 4 } });
let bare: BareWorkers | undefined;
process.on("exit", () => {
  stack.killAll();
  bare?.child.kill("SIGKILL");
});
const totals = { bare: { requests: 0, groups: new Map(), symbols: new Map() } as Profile, proxy: { requests: 0, groups: new Map(), symbols: new Map() } as Profile };
const load = Number(loadavg()[0]!.toFixed(2));
try {
  await stack.start();
  const upstreams = [...stack.replicas.values()].map((r) => r.url);
  bare = await startBareWorkers(work, { hello: upstreams }, "/-/healthz");
  const arms = [
    { name: "bare" as const, url: `${bare.urls.hello}/hello`, pid: workerdPid(bare.config) },
    { name: "proxy" as const, url: `${stack.workerdUrl}/hello`, pid: workerdPid(join(stateDir, "workerd.capnp")) },
  ];
  for (let round = 1; round <= rounds; round++) {
    for (const arm of arms) {
      log(`round ${round}: ${arm.name}, warm-up 2 s, then perf for ${seconds} s inside a ${seconds + 2} s wrk run`);
      await wrk(arm.url, arm.url, { seconds: 2, threads: 1, connections });
      const file = join(work, `${arm.name}-${round}.data`);
      // wrk runs 1 s longer on each side of the recording, so the recording sees steady load only.
      const loadRun = wrk(arm.url, arm.url, { seconds: seconds + 2, threads: 1, connections });
      await new Promise((r) => setTimeout(r, 1_000));
      const recording = spawn("perf", ["record", "-F", String(frequency), "-p", String(arm.pid), "-o", file, "--", "sleep", String(seconds)], { stdio: "ignore" });
      const recorded = await new Promise<number | null>((r) => recording.once("exit", r));
      const result = await loadRun;
      if (recorded !== 0) throw new Error(`perf record exited with ${recorded} (is kernel.perf_event_paranoid > 2?)`);
      // Requests inside the recording: the run's rate over the recording's seconds.
      merge(totals[arm.name], await readProfile(file, result.rps * seconds));
    }
  }
} finally {
  bare?.child.kill();
  await stack.stop();
}
rmSync(work, { recursive: true, force: true });

const usPer = (p: Profile, samples: number) => (samples * 1e6) / frequency / Math.max(1, p.requests);
const f = (x: number) => x.toFixed(1);
const { bare: b, proxy: p } = totals;
const sum = (m: Map<string, number>) => [...m.values()].reduce((a, v) => a + v, 0);
const rows = GROUPS.map(([name]) => ({ name, proxy: usPer(p, p.groups.get(name) ?? 0), bare: usPer(b, b.groups.get(name) ?? 0) }))
  .filter((r) => r.proxy + r.bare > 0)
  .sort((x, y) => y.proxy - y.bare - (x.proxy - x.bare));
const totalP = usPer(p, sum(p.groups));
const totalB = usPer(b, sum(b.groups));
const excess = totalP - totalB;
const lines = [
  "",
  `workerd CPU per plain GET /hello by kind of work, estimated from perf samples (${frequency} Hz, ${rounds} × ${seconds} s per arm, ${connections} connections, 4 replicas; ` +
    `${Math.round(p.requests)} proxied and ${Math.round(b.requests)} bare requests sampled; ${cpus().length} CPUs, load average ${load} at start)`,
  "",
  ...markdownTable(
    ["work", "Switchyard µs / request", "bare Worker µs / request", "Switchyard − bare", "share of the excess"],
    [
      ...rows.map((r) => [r.name, f(r.proxy), f(r.bare), f(r.proxy - r.bare), `${((100 * (r.proxy - r.bare)) / excess).toFixed(0)} %`]),
      ["**all**", `**${f(totalP)}**`, `**${f(totalB)}**`, `**${f(excess)}** (${(totalP / totalB).toFixed(2)} × bare)`, "100 %"],
    ],
  ),
];
if (top > 0) {
  const names = new Set([...p.symbols.keys(), ...b.symbols.keys()]);
  const diffs = [...names].map((s) => ({ s, d: usPer(p, p.symbols.get(s) ?? 0) - usPer(b, b.symbols.get(s) ?? 0), proxy: usPer(p, p.symbols.get(s) ?? 0) }));
  diffs.sort((x, y) => y.d - x.d);
  lines.push(
    "",
    `The ${top} symbols that grow most (µs per request, Switchyard − bare):`,
    "",
    // A symbol may hold "|" (C++ operators), which would split its cell.
    ...markdownTable(["symbol", "Switchyard", "− bare"], diffs.slice(0, top).map(({ s, d, proxy }) => [`\`${s.replaceAll("|", "\\|")}\``, f(proxy), `+${f(d)}`])),
  );
}
console.log(lines.join("\n"));
process.exit(0);
