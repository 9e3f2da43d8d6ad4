/**
 * Prefill/decode disaggregation (issue 56; docs/pd.md): the same mixed load of long and
 * short prompts, open loop, on 4 unified replicas and on 2 prefill + 2 decode replicas
 * behind the edge (`openai.disaggregation`), once in vLLM's protocol (arm "pd": the
 * prefill answers, then the decode leg) and once in SGLang's (arm "pd-sglang": both legs
 * at once), in one run, per seed.
 *
 *   npx tsx bench/pd/pd.ts [--seconds 30] [--warmup 5] [--rate 16] [--long-share 0.25]
 *        [--long-tokens 2000] [--short-tokens 60] [--max-tokens 48] [--seeds 3] [--quick]
 *
 * Replicas: the engine stand-in for qwen3 (`--model qwen3`: Qwen3's tokenizer, scripted
 * text, no model run per token, so 2 cores can pace 4 replicas), with a GPU's shape of
 * time: `--prefill-token-us 60` per uncached prompt token on one prefill lane,
 * `--prefill-ms 5`, `--decode-ms 4` per token, and `--prefill-stalls-decode`: a decode
 * step waits for the prefill on its replica's lane to end, as a GPU running a prefill
 * batch does not decode meanwhile. That is the interference P/D removes; without it the
 * reference replica decodes beside its prefills and no split could help (stated in the
 * output). The ratio (a 2,000-token prefill ≈ 125 ms ≈ 30 decode steps) is the one the
 * prefix-cache bench models; it is an estimate of a GPU's, not a measurement here.
 *
 * Load: Poisson arrivals at `--rate` req/s, the same seeded sequence in every arm; a
 * `--long-share` of them carry a prompt of about `--long-tokens` tokens (each its own
 * text: no prefix cache helps), the rest `--short-tokens`. Every request is a streamed
 * chat of `--max-tokens` tokens (ignore_eos). TTFT from the scheduled arrival to the
 * first content chunk; TPOT the mean gap between its content chunks.
 *
 * Reports per arm: TTFT p50/p99 (all, long, short), TPOT p50/p99, throughput, and the
 * edge's CPU per request (workerd's CPU seconds over the window / requests). Targets,
 * per seed and per P/D arm: TPOT p99 unified / P/D ≥ 1.5; TTFT p50 P/D / unified ≤ 1.2;
 * short prompts' TTFT p50 P/D / unified ≤ 1.05 (they are not split: no second hop). Writes
 * bench/results/pd.json.
 */
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { LocalStack } from "../../src/local/stack.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { cpuSeconds, workerdPid } from "../shared/load-tools.ts";
import { writeResult } from "../shared/result-file.ts";
import { streamChat, type StreamResult } from "../prefix-cache/prefix-cache-client.ts";
import { pdTargets, type PdArmName } from "./pd-targets.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string", default: "30" },
    warmup: { type: "string", default: "5" },
    rate: { type: "string", default: "16" },
    "long-share": { type: "string", default: "0.25" },
    "long-tokens": { type: "string", default: "2000" },
    "short-tokens": { type: "string", default: "60" },
    "max-tokens": { type: "string", default: "48" },
    seeds: { type: "string", default: "3" },
    quick: { type: "boolean", default: false },
  },
});
const quick = values.quick === true;
const SECONDS = quick ? 10 : Number(values.seconds);
const WARMUP = quick ? 3 : Number(values.warmup);
const RATE = Number(values.rate);
const LONG_SHARE = Number(values["long-share"]);
const LONG_TOKENS = Number(values["long-tokens"]);
const SHORT_TOKENS = Number(values["short-tokens"]);
const MAX_TOKENS = Number(values["max-tokens"]);
const SEEDS = quick ? 1 : Number(values.seeds);
const MODEL = "qwen3";
const PACE = ["--prefill-token-us", "60", "--prefill-ms", "5", "--decode-ms", "4", "--prefill-stalls-decode"];
const MIN_UNCACHED = 256;
const MAX_ONGOING = 16;

type ArmName = "unified" | PdArmName;
const ARMS: ArmName[] = ["unified", "pd", "pd-sglang"];
/** Each P/D arm's protocol: vLLM's (the prefill's answer, then the decode leg) and SGLang's (both legs at once). */
const PROTOCOL: Record<PdArmName, string> = { pd: "vllm-nixl", "pd-sglang": "sglang" };

/** A word list for prompts: each prompt its own sequence of them (about one token a word in Qwen3's vocabulary). */
const WORDS = "yard track switch signal train freight night siding lamp clear line master box keeper ledger river crossing bridge tunnel platform engine car coupler brake whistle timetable station junction depot crane shunter".split(" ");
function promptOf(tokens: number, rnd: () => number): string {
  const out: string[] = [];
  for (let i = 0; i < tokens; i++) out.push(WORDS[Math.floor(rnd() * WORDS.length)]!);
  return out.join(" ");
}

interface Arrival {
  at: number;
  long: boolean;
  prompt: string;
}
function arrivals(seed: number): Arrival[] {
  const rnd = mulberry32(seed);
  const out: Arrival[] = [];
  for (let t = 0; t < (WARMUP + SECONDS) * 1000; ) {
    t += (-Math.log(1 - rnd()) / RATE) * 1000;
    const long = rnd() < LONG_SHARE;
    out.push({ at: t, long, prompt: `${out.length} ${promptOf(long ? LONG_TOKENS : SHORT_TOKENS, rnd)}` });
  }
  return out;
}

const functionsRoot = mkdtempSync(join(tmpdir(), "switchyard-pd-"));
const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));

interface ArmRun {
  arm: ArmName;
  seed: number;
  sent: number;
  ok: number;
  results: (StreamResult & { long: boolean })[];
  throughputRps: number;
  edgeCpuMsPerRequest: number;
  splits: number;
}

const pct = (xs: readonly number[], p: number) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};

async function runArm(arm: ArmName, seed: number): Promise<ArmRun> {
  const name = arm === "pd" ? "pdb" : arm === "pd-sglang" ? "pds" : "uni";
  const dir = mkdtempSync(join(functionsRoot, `${name}-`));
  const functionsDir = join(dir, "functions");
  mkdirSync(functionsDir);
  writeFileSync(
    join(functionsDir, `${name}.ts`),
    `import { defineDeployment } from ${config};
export default defineDeployment({
  name: ${JSON.stringify(name)}, routePrefix: ${JSON.stringify(`/${name}`)}, access: { public: true },
  backend: { kind: "llm", model: ${JSON.stringify(MODEL)} },
  openai: { models: [${JSON.stringify(MODEL)}]${arm !== "unified" ? `, disaggregation: { protocol: ${JSON.stringify(PROTOCOL[arm])}, minUncachedTokens: ${MIN_UNCACHED} }` : ""} },
  localReplicas: 0, maxOngoingRequests: ${MAX_ONGOING},
  policy: { balancer: "prefix_cache", requestTimeoutMs: 60_000 },
});
`,
  );
  let splits = 0;
  const stack = new LocalStack({
    port: 0,
    functionsDir,
    stateDir: join(dir, "state"),
    freshState: true,
    log: (l) => {
      if (l.includes('"pd_prefill":"')) splits++;
    },
  });
  await stack.start();
  try {
    const roles: (string | undefined)[] = arm !== "unified" ? ["prefill", "prefill", "decode", "decode"] : [undefined, undefined, undefined, undefined];
    await Promise.all(
      roles.map((role, i) =>
        stack.startReplica(name, {
          id: `${name}-${role ?? "u"}-${i + 1}`,
          maxOngoing: MAX_ONGOING,
          backendArgs: ["--backend", "llm", "--model", MODEL, "--kv-blocks", "8192", "--max-queued", "64", ...PACE, ...(role ? ["--role", role] : [])],
        }),
      ),
    );
    const deadline = Date.now() + 30_000;
    while ((await stack.deploymentState(name)).snapshot.replicas.filter((r) => r.load.state === "ready").length < 4) {
      if (Date.now() > deadline) throw new Error(`${arm}: 4 replicas not ready`);
      await new Promise((r) => setTimeout(r, 200));
    }
    const workerd = workerdPid(join(dir, "state", "workerd.capnp"));
    const url = `${stack.url}/v1/chat/completions`;
    const list = arrivals(seed);
    const start = performance.now() + 200;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), (WARMUP + SECONDS + 60) * 1000);
    let cpuAtWindow = NaN;
    let cpuAtEnd = NaN;
    const windowStart = start + WARMUP * 1000;
    const windowEnd = start + (WARMUP + SECONDS) * 1000;
    setTimeout(() => (cpuAtWindow = cpuSeconds(workerd)), windowStart - performance.now());
    setTimeout(() => (cpuAtEnd = cpuSeconds(workerd)), windowEnd - performance.now());
    splits = 0;
    const pending = list.map(async (a) => {
      const wait = start + a.at - performance.now();
      if (wait > 0) await new Promise((r) => setTimeout(r, wait));
      const body = JSON.stringify({ model: MODEL, messages: [{ role: "user", content: a.prompt }], max_tokens: MAX_TOKENS, ignore_eos: true, stream: true, temperature: 0 });
      const r = await streamChat(url, body, {}, start + a.at, abort.signal, MAX_TOKENS);
      return { ...r, long: a.long, at: start + a.at };
    });
    const all = await Promise.all(pending);
    clearTimeout(timer);
    const inWindow = all.filter((r) => r.at >= windowStart && r.at < windowEnd);
    const ok = inWindow.filter((r) => r.status === 200);
    return {
      arm,
      seed,
      sent: inWindow.length,
      ok: ok.length,
      results: inWindow,
      throughputRps: ok.length / SECONDS,
      edgeCpuMsPerRequest: ((cpuAtEnd - cpuAtWindow) * 1000) / Math.max(1, inWindow.length),
      splits,
    };
  } finally {
    await stack.stop();
  }
}

const runs: ArmRun[] = [];
const started = Date.now();
const machine = { cpus: cpus().length, loadavg1mAtStart: loadavg()[0]! };
try {
  for (let seed = 1; seed <= SEEDS; seed++) {
    for (const arm of ARMS) {
      const r = await runArm(arm, seed);
      runs.push(r);
      const ok = r.results.filter((x) => x.status === 200);
      const f = (n: number) => (Number.isFinite(n) ? n.toFixed(0) : "–");
      console.log(
        `seed ${seed} ${arm}: ${r.ok}/${r.sent} ok, TTFT p50 ${f(pct(ok.map((x) => x.ttftMs), 50))} ms (long ${f(pct(ok.filter((x) => x.long).map((x) => x.ttftMs), 50))}, short ${f(pct(ok.filter((x) => !x.long).map((x) => x.ttftMs), 50))}), ` +
          `TPOT p50 ${pct(ok.map((x) => x.tpotMs), 50).toFixed(1)} p99 ${pct(ok.map((x) => x.tpotMs), 99).toFixed(1)} ms, ${r.throughputRps.toFixed(1)} req/s, edge CPU ${r.edgeCpuMsPerRequest.toFixed(2)} ms/request, ${r.splits} split`,
      );
    }
  }
} finally {
  rmSync(functionsRoot, { recursive: true, force: true });
}

interface ArmFigures {
  arm: ArmName;
  seed: number;
  sent: number;
  ok: number;
  throughputRps: number;
  edgeCpuMsPerRequest: number;
  splits: number;
  ttft: { p50: number; p99: number; longP50: number; shortP50: number; shortP99: number };
  tpot: { p50: number; p99: number };
}
const figures: ArmFigures[] = runs.map((r) => {
  const ok = r.results.filter((x) => x.status === 200);
  const ttft = ok.map((x) => x.ttftMs);
  const short = ok.filter((x) => !x.long).map((x) => x.ttftMs);
  return {
    arm: r.arm,
    seed: r.seed,
    sent: r.sent,
    ok: r.ok,
    throughputRps: r.throughputRps,
    edgeCpuMsPerRequest: r.edgeCpuMsPerRequest,
    splits: r.splits,
    ttft: { p50: pct(ttft, 50), p99: pct(ttft, 99), longP50: pct(ok.filter((x) => x.long).map((x) => x.ttftMs), 50), shortP50: pct(short, 50), shortP99: pct(short, 99) },
    tpot: { p50: pct(ok.map((x) => x.tpotMs), 50), p99: pct(ok.map((x) => x.tpotMs), 99) },
  };
});

const judged = figures.map((f) => {
  const run = runs.find((r) => r.arm === f.arm && r.seed === f.seed)!;
  return { arm: f.arm, seed: f.seed, ok: f.ok, splits: f.splits, ttftP50: f.ttft.p50, shortTtftP50: f.ttft.shortP50, shortOk: run.results.filter((x) => x.status === 200 && !x.long).length, tpotP99: f.tpot.p99 };
});
const targets = [...pdTargets(judged, "pd"), ...pdTargets(judged, "pd-sglang")];
console.log("");
console.log("| arm | seed | ok/sent | TTFT p50 | p99 | long p50 | short p50 | TPOT p50 | TPOT p99 | req/s | edge CPU ms/req | split |");
console.log("|---|---|---|---|---|---|---|---|---|---|---|---|");
for (const f of figures) {
  const n = (x: number, d = 0) => (Number.isFinite(x) ? x.toFixed(d) : "–");
  console.log(`| ${f.arm} | ${f.seed} | ${f.ok}/${f.sent} | ${n(f.ttft.p50)} | ${n(f.ttft.p99)} | ${n(f.ttft.longP50)} | ${n(f.ttft.shortP50)} | ${n(f.tpot.p50, 1)} | ${n(f.tpot.p99, 1)} | ${n(f.throughputRps, 1)} | ${n(f.edgeCpuMsPerRequest, 2)} | ${f.splits} |`);
}
console.log("");
for (const t of targets) {
  const j = t.judged;
  const seeds = j.each.map((v, i) => `seed ${i + 1}: ${v === null ? "not judged" : v.toFixed(3)}${j.missed.includes(i) ? " (miss)" : ""}`).join(", ");
  console.log(`| ${t.name} | ${seeds}; mean ${Number.isFinite(j.mean) ? j.mean.toFixed(3) : "–"} | **${j.met === null ? `NOT JUDGED (${j.why})` : j.met ? "MET" : "MISS"}** |`);
}
console.log(
  `\n${machine.cpus} CPUs, load average ${machine.loadavg1mAtStart.toFixed(2)} at start; ${RATE} req/s open loop, ${(100 * LONG_SHARE).toFixed(0)} % long prompts (~${LONG_TOKENS} words) and the rest ~${SHORT_TOKENS}, ${MAX_TOKENS} tokens each, streamed; ` +
    `replicas: ${MODEL} stand-in, ${PACE.join(" ")}; P/D splits at ${MIN_UNCACHED} uncached tokens; ${SECONDS} s measured after ${WARMUP} s; run took ${((Date.now() - started) / 1000).toFixed(0)} s.`,
);
console.log(
  `wrote ${writeResult(
    "pd",
    { quick, machine, setup: { rate: RATE, longShare: LONG_SHARE, longTokens: LONG_TOKENS, shortTokens: SHORT_TOKENS, maxTokens: MAX_TOKENS, seconds: SECONDS, warmup: WARMUP, pace: PACE, minUncachedTokens: MIN_UNCACHED, model: MODEL }, arms: figures, targets: targets.map((t) => ({ name: t.name, ...t.judged })) },
    { quick, arms: runs.map((r) => ({ arm: `${r.arm} seed ${r.seed}`, requests: r.sent, ok: r.ok })) },
  )}`,
);
