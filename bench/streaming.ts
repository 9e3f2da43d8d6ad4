/**
 * The Llumnix seed, as a measure of what the dispatcher adds to streaming:
 * time to first token (TTFT) and time per output token (TPOT), mean/p50/p90,
 * at concurrency 120 over 5 replicas, directly against the replicas versus
 * through Switchyard, in one run (arms interleaved: direct, proxy, direct, proxy).
 *
 *   npx tsx bench/streaming.ts [--seconds 10] [--concurrency 120] [--tokens 64] [--ttft-ms 570] [--tpot-ms 22]
 *
 * The replicas are the reference replica's streaming backend (`echo`: after
 * --ttft-ms it sends one line per "token" every --tpot-ms), paced like the
 * seed's vLLM (TTFT ~570 ms, TPOT ~22 ms), so the figures isolate the
 * dispatcher's overhead on the token path. The generative model of the LLM
 * issue will plug into the same script when it exists. The pacing is the
 * replica's, identical in both arms: the ratios compare like with like.
 * Prints a markdown table and writes bench/results/streaming.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { LocalStack } from "../src/local/stack.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "10" },
    concurrency: { type: "string", default: "120" },
    tokens: { type: "string", default: "64" },
    "ttft-ms": { type: "string", default: "570" },
    "tpot-ms": { type: "string", default: "22" },
  },
});
const seconds = Number(values.seconds);
const concurrency = Number(values.concurrency);
const tokens = Number(values.tokens);
const ttftMs = Number(values["ttft-ms"]);
const tpotMs = Number(values["tpot-ms"]);
const REPLICAS = 5;

interface Sample {
  ttft: number;
  tpot: number;
  ok: boolean;
}

/** Closed loop: `concurrency` clients, each streaming one request after another. */
async function arm(urlFor: (i: number) => string, durationMs: number): Promise<Sample[]> {
  const out: Sample[] = [];
  const until = Date.now() + durationMs;
  let n = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < until) {
        const started = performance.now();
        let first = 0;
        let last = 0;
        let lines = 0;
        try {
          const res = await fetch(urlFor(n++));
          const reader = res.body!.getReader();
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            const now = performance.now();
            if (first === 0) first = now;
            last = now;
            for (const b of value) if (b === 10) lines++;
          }
          out.push({ ttft: first - started, tpot: lines > 1 ? (last - first) / (lines - 1) : NaN, ok: res.status === 200 && lines === tokens });
        } catch {
          out.push({ ttft: NaN, tpot: NaN, ok: false });
        }
      }
    }),
  );
  return out;
}

function stats(xs: number[]): { mean: number; p50: number; p90: number } {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
  return { mean: s.reduce((a, b) => a + b, 0) / Math.max(1, s.length), p50: at(0.5), p90: at(0.9) };
}

const functionsDir = mkdtempSync(join(tmpdir(), "switchyard-bench-stream-"));
const config = JSON.stringify(resolve(import.meta.dirname, "../src/config/deployment.ts"));
writeFileSync(
  join(functionsDir, "llm.ts"),
  `import { defineDeployment } from ${config};
export default defineDeployment({
  name: "llm", routePrefix: "/llm", access: { public: true }, backend: { kind: "echo" },
  localReplicas: ${REPLICAS}, maxOngoingRequests: ${Math.ceil((concurrency / REPLICAS) * 1.5)},
  policy: { idempotent: true },
});
`,
);
const stateDir = mkdtempSync(join(tmpdir(), "switchyard-bench-stream-state-"));
const stack = new LocalStack({ port: 0, functionsDir, stateDir, freshState: true });
process.on("SIGINT", () => {
  stack.killAll();
  process.exit(130);
});
try {
  await stack.start();
  const replicaUrls = [...stack.replicas.values()].map((r) => r.url);
  const query = `/llm?chunks=${tokens}&interval_ms=${tpotMs}&delay_ms=${ttftMs}`;
  const direct = (i: number) => `${replicaUrls[i % replicaUrls.length]}${query}`;
  const proxied = () => `${stack.workerdUrl}${query}`;
  // Warm-up (connections, JIT), not measured.
  await arm(proxied, 2_000);
  await arm(direct, 2_000);
  const half = (seconds * 1000) / 2;
  const d: Sample[] = [];
  const p: Sample[] = [];
  d.push(...(await arm(direct, half)));
  p.push(...(await arm(proxied, half)));
  d.push(...(await arm(direct, half)));
  p.push(...(await arm(proxied, half)));

  const row = (name: string, xs: Sample[]) => ({
    arm: name,
    requests: xs.length,
    failed: xs.filter((x) => !x.ok).length,
    ttft: stats(xs.filter((x) => x.ok).map((x) => x.ttft)),
    tpot: stats(xs.filter((x) => x.ok).map((x) => x.tpot)),
  });
  const rows = [row("direct to the replicas (round robin)", d), row("through Switchyard", p)];
  const [rd, rp] = rows as [ReturnType<typeof row>, ReturnType<typeof row>];
  const overhead = {
    ttftP50Ms: rp.ttft.p50 - rd.ttft.p50,
    ttftMeanMs: rp.ttft.mean - rd.ttft.mean,
    tpotP50Ms: rp.tpot.p50 - rd.tpot.p50,
    tpotMeanMs: rp.tpot.mean - rd.tpot.mean,
  };
  const f = (x: number) => x.toFixed(2);
  const lines = [
    `\nconcurrency ${concurrency} over ${REPLICAS} replicas, ${tokens} tokens per request, replica pacing TTFT ${ttftMs} ms / TPOT ${tpotMs} ms, ${seconds} s per arm (two halves, interleaved)\n`,
    "| arm | requests | failed | TTFT mean | TTFT p50 | TTFT p90 | TPOT mean | TPOT p50 | TPOT p90 |",
    "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ...rows.map((r) => `| ${r.arm} | ${r.requests} | ${r.failed} | ${f(r.ttft.mean)} | ${f(r.ttft.p50)} | ${f(r.ttft.p90)} | ${f(r.tpot.mean)} | ${f(r.tpot.p50)} | ${f(r.tpot.p90)} |`),
    "",
    `added by Switchyard: TTFT p50 ${f(overhead.ttftP50Ms)} ms (${f((100 * overhead.ttftP50Ms) / rd.ttft.p50)} %; target ≤ 1 ms: ${overhead.ttftP50Ms <= 1 ? "PASS" : "MISS"}), ` +
      `TTFT mean ${f(overhead.ttftMeanMs)} ms; TPOT p50 ${f(overhead.tpotP50Ms)} ms (${f((100 * overhead.tpotP50Ms) / rd.tpot.p50)} %; target ≤ 0.2 ms: ${overhead.tpotP50Ms <= 0.2 ? "PASS" : "MISS"}), TPOT mean ${f(overhead.tpotMeanMs)} ms`,
  ];
  console.log(lines.join("\n"));
  mkdirSync(join(import.meta.dirname, "results"), { recursive: true });
  writeFileSync(
    join(import.meta.dirname, "results/streaming.json"),
    `${JSON.stringify({ when: new Date().toISOString(), setup: { concurrency, replicas: REPLICAS, tokens, ttftMs, tpotMs, seconds }, rows, overhead }, null, 2)}\n`,
  );
} finally {
  await stack.stop();
  rmSync(functionsDir, { recursive: true, force: true });
  rmSync(stateDir, { recursive: true, force: true });
}
