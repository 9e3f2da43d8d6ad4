/**
 * The Llumnix seed, as a measure of what the dispatcher adds to streaming:
 * time to first token (TTFT) and time per output token (TPOT), mean/p50/p90,
 * at concurrency 120 over 5 replicas, directly against the replicas versus
 * through Switchyard, in one run (arms interleaved: direct, proxy, direct, proxy).
 *
 *   npx tsx bench/streaming/streaming.ts [--seconds 10] [--concurrency 120] [--tokens 64]
 *        [--pace seed|model] [--ttft-ms 570] [--tpot-ms 22] [--busy 0] [--out FILE]
 *
 * The replicas are reference replicas running the tiny language model
 * (docs/tiny-lm.md): every token is a real onnxruntime-web inference, streamed
 * as OpenAI `/v1/completions` Server-Sent Events. Both arms send the same
 * request body to the same path: direct to a replica (round robin over the
 * five), through a bare workerd Worker that only fetch()es a replica (round
 * robin: the platform's own cost of a hop, the floor for any Worker proxy), or
 * to the edge's OpenAI route (which reads the body's model, picks a replica and
 * passes the answer back natively, writing an error event itself if the replica
 * fails mid-stream), or to the same deployment by its route prefix (/llm/v1:
 * routed by path, native pipe, no error event). Arms are interleaved, twice.
 *
 * --pace seed (default): the replicas pace their output like the seed's vLLM
 *   (--prefill-ms 570 before the first token, --decode-ms 22 between tokens, on
 *   timers); the model still runs for every token. This is a GPU engine's speed,
 *   which this machine does not have; the pacing is identical in both arms, so
 *   the difference is the dispatcher's.
 * --pace model: no pacing; tokens come as fast as this CPU computes them, so
 *   the proxy's cost shows against the smallest possible TTFT/TPOT.
 * --busy N starts N busy loops (`node -e "for(;;){}"`) before the stack and
 * ends them after the run: the same load for every arm.
 * Proxy CPU per streamed request: utime + stime of each arm's workerd process
 * over the arm (/proc), the stack's idle CPU (load reports, alarms; measured
 * for 3 s first) subtracted, divided by the arm's requests.
 * The fault arm (issue 35, after the others, on a stack of its own whose deployment has
 * `openai.migrationLimit` on: migration reads each event, so it would change the /v1
 * arm above): `--fault-streams` greedy streams of `--tokens` tokens through /v1 on the
 * same replicas and pacing; once every stream has its head and half its tokens, one
 * replica is SIGKILLed. Its streams are continued on the others. Reported: TTFT and
 * TPOT of the migrated streams against the undisturbed ones, and the splice gap (a
 * migrated stream's longest wait between two tokens), against its target: a retry's
 * connect time and one prefill of the continuation, i.e. a fresh request's TTFT
 * through /v1 in the same run (p50), plus one TPOT.
 * Prints a markdown table and writes bench/results/streaming.json.
 */
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { judgeFault, judgeValue } from "../shared/judge.ts";
import { requireServed, writeResult } from "../shared/result-file.ts";
import { addedTarget, sampledTarget } from "../shared/bench-targets.ts";
import { judgedText, markdownTable } from "../shared/table.ts";
import { sseData } from "../../test/fixtures/sse.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { cpuSeconds, startBareWorkers, workerdPid, type BareWorkers } from "../shared/load-tools.ts";

const { values } = parseArgs({
  options: {
    seconds: { type: "string" },
    quick: { type: "boolean", default: false },
    concurrency: { type: "string", default: "120" },
    tokens: { type: "string", default: "64" },
    pace: { type: "string", default: "seed" },
    "ttft-ms": { type: "string", default: "570" },
    "tpot-ms": { type: "string", default: "22" },
    busy: { type: "string", default: "0" },
    "fault-streams": { type: "string", default: "40" },
    out: { type: "string" },
  },
});
const quick = values.quick;
const seconds = Number(values.seconds ?? (quick ? 4 : 10));
const concurrency = Number(values.concurrency);
const tokens = Number(values.tokens);
const pace = values.pace;
if (pace !== "seed" && pace !== "model") throw new Error(`--pace must be "seed" or "model", not "${pace}"`);
const ttftMs = pace === "seed" ? Number(values["ttft-ms"]) : 0;
const tpotMs = pace === "seed" ? Number(values["tpot-ms"]) : 0;
const REPLICAS = 5;
/** --busy N: N processes spinning a core each for the whole run (the issue's "under load" condition), ended by this script. */
const busyLoops = Math.max(0, Math.floor(Number(values.busy)) || 0);
/** How long the stack's idle CPU is measured, before the measured arms. */
const IDLE_MS = 3_000;

interface Sample {
  ttft: number;
  /** Time to the response head: the request path alone (the replica sends its head before the prefill). */
  ttfb: number;
  tpot: number;
  /** When each token arrived, ms from the request's start (tokens that came in one read share its time). */
  arrivals: number[];
  ok: boolean;
}

const encoder = new TextEncoder();
/** One request's expected duration at the replicas' pace (≥ 100 ms when unpaced). */
const cycleMs = Math.max(100, ttftMs + tokens * tpotMs);
/** The same body in both arms: /v1/completions, streamed, exactly `tokens` tokens. */
const body = encoder.encode(JSON.stringify({ model: "tiny-lm", prompt: "The edge proxy sends each request to", max_tokens: tokens, temperature: 0.8, stream: true }));
/** A token event of /v1/completions carries `"finish_reason":null`; the closing event and [DONE] do not. */
const TOKEN_MARK = '"finish_reason":null';

function countTokens(text: string): number {
  let n = 0;
  for (let at = text.indexOf(TOKEN_MARK); at >= 0; at = text.indexOf(TOKEN_MARK, at + TOKEN_MARK.length)) n++;
  return n;
}

/** Closed loop: `concurrency` clients, each streaming one request after another. */
async function arm(urlFor: (i: number) => string, durationMs: number): Promise<Sample[]> {
  const out: Sample[] = [];
  const until = Date.now() + durationMs;
  let n = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async (_, client) => {
      const decoder = new TextDecoder();
      // Clients start spread over one request's duration, as independent users
      // would; started together, every request of a closed loop with a fixed
      // duration would arrive in lock-step bursts of `concurrency`, in both arms.
      await new Promise((r) => setTimeout(r, (client / concurrency) * cycleMs));
      while (Date.now() < until) {
        const started = performance.now();
        let first = 0;
        let last = 0;
        let seen = 0;
        const arrivals: number[] = [];
        try {
          const res = await fetch(urlFor(n++), { method: "POST", headers: { "content-type": "application/json" }, body });
          const headersAt = performance.now() - started;
          const reader = res.body!.getReader();
          // Events can split across reads; carry a short tail so a mark is never cut in two.
          let tail = "";
          for (;;) {
            const { done, value } = await reader.read();
            if (done) break;
            const text = tail + decoder.decode(value, { stream: true });
            const k = countTokens(text);
            tail = text.slice(-(TOKEN_MARK.length - 1));
            if (k > 0) {
              const now = performance.now();
              if (seen === 0) first = now;
              last = now;
              seen += k;
              for (let i = 0; i < k; i++) arrivals.push(now - started);
            }
          }
          out.push({ ttft: first - started, tpot: seen > 1 ? (last - first) / (seen - 1) : NaN, ttfb: headersAt, arrivals, ok: res.status === 200 && seen === tokens });
        } catch {
          out.push({ ttft: NaN, tpot: NaN, ttfb: NaN, arrivals: [], ok: false });
        }
      }
    }),
  );
  return out;
}

/** p50 and p99 of a list (NaN when empty). */
function quantiles(xs: number[]): { p50: number; p99: number } {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  const q = (p: number) => (s.length ? s[Math.min(s.length - 1, Math.floor(p * s.length))]! : NaN);
  return { p50: q(0.5), p99: q(0.99) };
}

function stats(xs: number[]): { mean: number; p50: number; p90: number } {
  const s = xs.filter((x) => Number.isFinite(x)).sort((a, b) => a - b);
  const at = (q: number) => s[Math.min(s.length - 1, Math.floor(q * s.length))] ?? NaN;
  return { mean: s.reduce((a, b) => a + b, 0) / Math.max(1, s.length), p50: at(0.5), p90: at(0.9) };
}

/** A streamed chat through `url`, greedy; each content event's arrival (ms from the start), and the replica that began it. */
async function faultStream(url: string, i: number, onToken: (n: number) => void, onHead: (replica: string | null) => void = () => undefined): Promise<{ replica: string | null; arrivals: number[]; ok: boolean; text: string }> {
  const started = performance.now();
  const arrivals: number[] = [];
  let text = "";
  let ok = false;
  let replica: string | null = null;
  try {
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: `Tell me about the edge, part ${i}.` }], max_tokens: tokens, temperature: 0, ignore_eos: true, stream: true }),
    });
    replica = res.headers.get("x-switchyard-replica");
    onHead(replica);
    let error = false;
    let done = false;
    for await (const data of sseData(res.body!)) {
      if (data === "[DONE]") {
        done = true;
        continue;
      }
      const chunk = JSON.parse(data) as { error?: unknown; choices?: { delta?: { content?: string } }[] };
      if (chunk.error) error = true;
      const piece = chunk.choices?.[0]?.delta?.content;
      if (piece) {
        text += piece;
        arrivals.push(performance.now() - started);
        onToken(arrivals.length);
      }
    }
    ok = res.status === 200 && done && !error && arrivals.length === tokens;
  } catch {
    ok = false;
  }
  return { replica, arrivals, ok, text };
}

/**
 * The fault arm (see the header): its own stack with migration on, the same replicas;
 * one replica SIGKILLed mid-stream.
 */
async function faultArm(streams: number): Promise<{
  streams: number;
  killed: string;
  /** Replicas SIGKILLed. */
  kills: number;
  /** Streams that started on the victim. */
  onVictim: number;
  /** Migrations that took, as the edge logged them. */
  migrationsSeen: number;
  failed: number;
  undisturbed: { ttft: ReturnType<typeof stats>; tpot: ReturnType<typeof stats> };
  migratedStats: { ttft: ReturnType<typeof stats>; tpot: ReturnType<typeof stats> };
  spliceGapMs: ReturnType<typeof stats> & { max: number };
  freshTtftP50Ms: number;
}> {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-bench-fault-"));
  writeFileSync(
    join(dir, "llm.ts"),
    `import { defineDeployment } from ${config};
export default defineDeployment({
  name: "llm", routePrefix: "/llm", access: { public: true }, backend: { kind: "llm", model: "tiny-lm" },
  openai: { models: ["tiny-lm"], migrationLimit: 2 }, localReplicas: 0, maxOngoingRequests: ${perReplica}, policy: { stripPrefix: true },
});
`,
  );
  const faultState = mkdtempSync(join(tmpdir(), "switchyard-bench-fault-state-"));
  // The edge logs each migration ("stream migrated", ok true when the continuation took): the
  // fault arm counts what it saw there, not the streams that happened to start on the victim.
  let migrationsSeen = 0;
  const s = new LocalStack({
    port: 0,
    functionsDir: dir,
    stateDir: faultState,
    freshState: true,
    log: (line) => {
      const json = line.slice(line.indexOf("{"));
      if (!line.startsWith("[workerd]") || !json.includes('"stream migrated"')) return;
      try {
        if ((JSON.parse(json) as { ok?: boolean }).ok === true) migrationsSeen++;
      } catch {
        // another line that mentions it
      }
    },
  });
  try {
    await s.start();
    const args = ["--backend", "llm", "--model", "tiny-lm", "--prefill-ms", String(ttftMs), "--decode-ms", String(tpotMs), "--kv-blocks", String(perReplica * 16)];
    await Promise.all(Array.from({ length: REPLICAS }, (_, i) => s.startReplica("llm", { id: `fault-${i + 1}`, backendArgs: args })));
    const url = `${s.workerdUrl}/v1/chat/completions`;
    // Fresh requests through /v1 on this stack: the splice gap's reference (connect + prefill + first token).
    const fresh = await Promise.all(Array.from({ length: 10 }, (_, i) => faultStream(url, 1000 + i, () => undefined)));
    const freshTtftP50Ms = stats(fresh.filter((x) => x.ok).map((x) => x.arrivals[0]!)).p50;
    let heads = 0;
    let half = 0;
    let killed = "";
    let kills = 0;
    const replicaOf: (string | null)[] = [];
    const results = await Promise.all(
      Array.from({ length: streams }, (_, i) =>
        faultStream(
          url,
          i,
          (n) => {
            if (n === Math.floor(tokens / 2)) half++;
            // Once every stream has its head and one is halfway, the replica serving the most of them dies.
            if (killed === "" && heads === streams && half > 0) {
              const by = new Map<string, number>();
              for (const r of replicaOf) if (r) by.set(r, (by.get(r) ?? 0) + 1);
              killed = [...by.entries()].sort((a, b) => b[1] - a[1])[0]?.[0] ?? "";
              const victim = s.replicas.get(killed);
              if (victim?.child.pid) {
                process.kill(victim.child.pid, "SIGKILL");
                kills++;
              }
            }
          },
          (replica) => {
            replicaOf[i] = replica;
            heads++;
          },
        ),
      ),
    );
    const moved = results.filter((r) => r.replica === killed);
    const stay = results.filter((r) => r.replica !== killed);
    const ttftOf = (xs: typeof results) => stats(xs.filter((x) => x.ok).map((x) => x.arrivals[0]!));
    const tpotOf = (xs: typeof results) => stats(xs.filter((x) => x.ok && x.arrivals.length > 1).map((x) => (x.arrivals.at(-1)! - x.arrivals[0]!) / (x.arrivals.length - 1)));
    const gaps = moved.filter((x) => x.ok).map((x) => Math.max(...x.arrivals.slice(1).map((t, k) => t - x.arrivals[k]!)));
    return {
      streams,
      killed,
      kills,
      onVictim: moved.length,
      migrationsSeen,
      failed: results.filter((x) => !x.ok).length,
      undisturbed: { ttft: ttftOf(stay), tpot: tpotOf(stay) },
      migratedStats: { ttft: ttftOf(moved), tpot: tpotOf(moved) },
      spliceGapMs: { ...stats(gaps), max: Math.max(...gaps) },
      freshTtftP50Ms,
    };
  } finally {
    await s.stop();
    rmSync(dir, { recursive: true, force: true });
    rmSync(faultState, { recursive: true, force: true });
  }
}

const functionsDir = mkdtempSync(join(tmpdir(), "switchyard-bench-stream-"));
const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));
const perReplica = Math.ceil((concurrency / REPLICAS) * 1.5);
writeFileSync(
  join(functionsDir, "llm.ts"),
  `import { defineDeployment } from ${config};
export default defineDeployment({
  name: "llm", routePrefix: "/llm", access: { public: true }, backend: { kind: "llm", model: "tiny-lm" },
  openai: { models: ["tiny-lm"] }, localReplicas: 0, maxOngoingRequests: ${perReplica}, policy: { stripPrefix: true },
});
`,
);
const stateDir = mkdtempSync(join(tmpdir(), "switchyard-bench-stream-state-"));
const stack = new LocalStack({ port: 0, acceptUnsignedDispatches: true, functionsDir, stateDir, freshState: true });
process.on("SIGINT", () => {
  stack.killAll();
  process.exit(130);
});
let bare: BareWorkers | undefined;
const busy = Array.from({ length: busyLoops }, () => spawn(process.execPath, ["-e", "for(;;){}"], { stdio: "ignore" }));
process.on("exit", () => {
  for (const b of busy) b.kill("SIGKILL");
});
try {
  await stack.start();
  // Enough KV blocks that a replica never makes a request wait for memory: both arms see the same engine.
  const replicaArgs = ["--backend", "llm", "--model", "tiny-lm", "--prefill-ms", String(ttftMs), "--decode-ms", String(tpotMs), "--kv-blocks", String(perReplica * 16)];
  await Promise.all(Array.from({ length: REPLICAS }, (_, i) => stack.startReplica("llm", { id: `llm-${i + 1}`, backendArgs: replicaArgs })));
  const replicaUrls = [...stack.replicas.values()].map((r) => r.url);
  // The platform's floor: a workerd Worker that only fetch()es a replica (round robin), no routing logic.
  bare = await startBareWorkers(functionsDir, { llm: replicaUrls }, "/health");
  const bareUrl = bare.urls.llm!;
  const direct = (i: number) => `${replicaUrls[i % replicaUrls.length]}/v1/completions`;
  const viaBare = () => `${bareUrl}/v1/completions`;
  const proxied = () => `${stack.workerdUrl}/v1/completions`;
  // The same deployment by its route prefix: routed by path, the body untouched, the native pipe (no error event).
  const byPrefix = () => `${stack.workerdUrl}/llm/v1/completions`;
  // Warm-up (connections, JIT), not measured.
  await arm(proxied, 2_000);
  await arm(byPrefix, 2_000);
  await arm(viaBare, 2_000);
  await arm(direct, 2_000);

  // Proxy CPU per streamed request: utime + stime of the arm's workerd process over the arm,
  // less the stack's idle CPU (replicas' load reports, Durable Object alarms) over the same time.
  const stackPid = workerdPid(join(stateDir, "workerd.capnp"));
  const barePid = workerdPid(bare.config);
  const idleFrom = cpuSeconds(stackPid);
  await new Promise((r) => setTimeout(r, IDLE_MS));
  const stackIdlePerS = (cpuSeconds(stackPid) - idleFrom) / (IDLE_MS / 1000);
  const cpu = { bare: { cpuS: 0, wallS: 0 }, proxied: { cpuS: 0, wallS: 0 }, byPrefix: { cpuS: 0, wallS: 0 } };
  const timedArm = async (urlFor: (i: number) => string, durationMs: number, pid: number, into: { cpuS: number; wallS: number }) => {
    const c0 = cpuSeconds(pid);
    const t0 = performance.now();
    const xs = await arm(urlFor, durationMs);
    into.cpuS += cpuSeconds(pid) - c0;
    into.wallS += (performance.now() - t0) / 1000;
    return xs;
  };

  const half = (seconds * 1000) / 2;
  const d: Sample[] = [];
  const b: Sample[] = [];
  const p: Sample[] = [];
  const x: Sample[] = [];
  for (let round = 0; round < 2; round++) {
    d.push(...(await arm(direct, half)));
    b.push(...(await timedArm(viaBare, half, barePid, cpu.bare)));
    p.push(...(await timedArm(proxied, half, stackPid, cpu.proxied)));
    x.push(...(await timedArm(byPrefix, half, stackPid, cpu.byPrefix)));
  }
  /** µs per streamed request; the stack's idle CPU subtracted from its arms (the bare Worker's process has no idle work). */
  const usPer = (c: { cpuS: number; wallS: number }, requests: number, idlePerS: number) => (1e6 * Math.max(0, c.cpuS - idlePerS * c.wallS)) / Math.max(1, requests);
  const proxyCpu = {
    stackIdleMsPerS: 1000 * stackIdlePerS,
    bareUs: usPer(cpu.bare, b.length, 0),
    openaiUs: usPer(cpu.proxied, p.length, stackIdlePerS),
    byPrefixUs: usPer(cpu.byPrefix, x.length, stackIdlePerS),
  };

  const fault = await faultArm(Number(values["fault-streams"]));
  // Refusals at max_ongoing (each one a retry by the proxy before the first byte): from the replicas' own counters.
  let rejected = 0;
  for (const url of replicaUrls) rejected += ((await (await fetch(`${url}/-/healthz`)).json()) as { rejected: number }).rejected;
  const row = (name: string, xs: Sample[]) => ({
    arm: name,
    requests: xs.length,
    failed: xs.filter((x) => !x.ok).length,
    ttft: stats(xs.filter((x) => x.ok).map((x) => x.ttft)),
    tpot: stats(xs.filter((x) => x.ok).map((x) => x.tpot)),
    ttfb: stats(xs.filter((x) => x.ok).map((x) => x.ttfb)),
  });
  const rows = [
    row("direct to the replicas (round robin)", d),
    row("bare workerd Worker (fetch only, round robin)", b),
    row("through Switchyard: /v1 (routed by body, SSE error events)", p),
    row("through Switchyard: /llm/v1 (routed by path, native pipe)", x),
  ];
  const [rd, rb, rp, rx] = rows as [ReturnType<typeof row>, ReturnType<typeof row>, ReturnType<typeof row>, ReturnType<typeof row>];
  /**
   * Chunk by chunk against direct. TPOT as (last − first) / (n − 1) cannot see a delay
   * the proxy adds to every chunk alike (it cancels), so each token's arrival is compared
   * instead: for token k, the p50 over requests of its time from the request's start,
   * through the proxy less direct. A constant delay per chunk shows at every k; one that
   * grows (a proxy falling behind) shows as drift from the first token to the last. The
   * gaps between tokens (p99) show chunks held back and released together.
   */
  const byToken = (xs: Sample[]) => Array.from({ length: tokens }, (_, k) => stats(xs.filter((x) => x.ok).map((x) => x.arrivals[k]!)).p50);
  const gaps = (xs: Sample[]) => quantiles(xs.filter((x) => x.ok).flatMap((x) => x.arrivals.slice(1).map((t, i) => t - x.arrivals[i]!)));
  const directByToken = byToken(d);
  const chunkwise = (name: string, xs: Sample[]) => {
    const added = byToken(xs).map((t, k) => t - directByToken[k]!);
    return { arm: name, firstMs: added[0]!, midMs: added[Math.floor(tokens / 2)]!, lastMs: added[tokens - 1]!, driftMs: added[tokens - 1]! - added[0]!, maxMs: Math.max(...added), gapP50Ms: gaps(xs).p50, gapP99Ms: gaps(xs).p99 };
  };
  const perChunk = [chunkwise("direct", d), chunkwise("bare Worker", b), chunkwise("/v1", p), chunkwise("/llm/v1", x)];
  const directGaps = gaps(d);
  const overhead = {
    ttftP50Ms: rp.ttft.p50 - rd.ttft.p50,
    ttftMeanMs: rp.ttft.mean - rd.ttft.mean,
    tpotP50Ms: rp.tpot.p50 - rd.tpot.p50,
    tpotMeanMs: rp.tpot.mean - rd.tpot.mean,
  };
  /** What Switchyard adds over the platform's own hop (a Worker that only fetches). */
  const overBare = {
    ttftP50Ms: rp.ttft.p50 - rb.ttft.p50,
    ttftMeanMs: rp.ttft.mean - rb.ttft.mean,
    tpotP50Ms: rp.tpot.p50 - rb.tpot.p50,
    tpotMeanMs: rp.tpot.mean - rb.tpot.mean,
  };
  // The overhead targets, over MIN_SAMPLES answers in every arm compared (bench-targets.ts).
  const answered = (r: typeof rd) => r.requests - r.failed;
  const ttftAdded = addedTarget({ value: rp.ttft.p50, answers: answered(rp) }, { value: rd.ttft.p50, answers: answered(rd) }, 1);
  const byBody = addedTarget({ value: rp.ttft.p50, answers: answered(rp) }, { value: rx.ttft.p50, answers: answered(rx) }, 1);
  const drift = sampledTarget({ value: perChunk[2]!.driftMs, answers: Math.min(answered(rp), answered(rd)) }, { atLeast: false, threshold: 0.2 });
  const gapAdded = addedTarget({ value: perChunk[2]!.gapP99Ms, answers: answered(rp) }, { value: directGaps.p99, answers: answered(rd) }, 1);
  const f = (x: number) => x.toFixed(2);
  const lines = [
    `\nconcurrency ${concurrency} over ${REPLICAS} replicas of the tiny LM (/v1/completions, streamed), ${tokens} tokens per request, ` +
      (pace === "seed" ? `paced like the seed's vLLM (prefill ${ttftMs} ms, ${tpotMs} ms per token)` : "unpaced (the model's own speed on this CPU)") +
      `, ${seconds} s per arm (two halves, interleaved); replicas refused ${rejected} requests (at max_ongoing ${perReplica})` +
      `${busyLoops > 0 ? `; ${busyLoops} busy loop${busyLoops === 1 ? "" : "s"} running` : ""}\n`,
    ...markdownTable(
      ["arm", "requests", "failed", "TTFT mean", "TTFT p50", "TTFT p90", "TPOT mean", "TPOT p50", "TPOT p90", "response head p50 / p90"],
      rows.map((r) => [r.arm, r.requests, r.failed, f(r.ttft.mean), f(r.ttft.p50), f(r.ttft.p90), f(r.tpot.mean), f(r.tpot.p50), f(r.tpot.p90), `${f(r.ttfb.p50)} / ${f(r.ttfb.p90)}`]),
    ),
    "",
    `added by Switchyard: TTFT p50 ${f(overhead.ttftP50Ms)} ms (${f((100 * overhead.ttftP50Ms) / rd.ttft.p50)} %; target ≤ 1 ms: ${judgedText(ttftAdded)}), ` +
      `TTFT mean ${f(overhead.ttftMeanMs)} ms; TPOT p50 ${f(overhead.tpotP50Ms)} ms (${f((100 * overhead.tpotP50Ms) / rd.tpot.p50)} %; not a target: a delay added to every chunk cancels out of it, see "chunk by chunk" below), TPOT mean ${f(overhead.tpotMeanMs)} ms`,
    `of which the platform's hop (bare Worker vs direct): TTFT p50 ${f(rb.ttft.p50 - rd.ttft.p50)} ms, mean ${f(rb.ttft.mean - rd.ttft.mean)} ms; ` +
      `Switchyard over the bare Worker: TTFT p50 ${f(overBare.ttftP50Ms)} ms, mean ${f(overBare.ttftMeanMs)} ms; TPOT p50 ${f(overBare.tpotP50Ms)} ms, mean ${f(overBare.tpotMeanMs)} ms`,
    `workerd CPU per streamed request (the stack's idle ${proxyCpu.stackIdleMsPerS.toFixed(1)} ms/s subtracted): bare Worker ${proxyCpu.bareUs.toFixed(0)} µs; ` +
      `/v1 ${proxyCpu.openaiUs.toFixed(0)} µs (${(proxyCpu.openaiUs / proxyCpu.bareUs).toFixed(2)} × bare); /llm/v1 ${proxyCpu.byPrefixUs.toFixed(0)} µs (${(proxyCpu.byPrefixUs / proxyCpu.bareUs).toFixed(2)} × bare)`,
    `by route prefix (native pipe): TTFT p50 ${f(rx.ttft.p50 - rd.ttft.p50)} ms over direct (${f(rx.ttft.p50 - rb.ttft.p50)} ms over the bare Worker), mean ${f(rx.ttft.mean - rd.ttft.mean)} ms; TPOT p50 ${f(rx.tpot.p50 - rd.tpot.p50)} ms`,
    `/v1 ÷ native pipe, TTFT p50 added over direct: ${f(overhead.ttftP50Ms / (rx.ttft.p50 - rd.ttft.p50))} (target ≤ 1.5 with one busy loop)`,
    `/v1 over /llm/v1 (the same request, routed by its body's model instead of its path): TTFT p50 ${f(rp.ttft.p50 - rx.ttft.p50)} ms (target ≤ 1 ms: ${judgedText(byBody)})`,
    "",
    "Chunk by chunk: each token's arrival (p50 over requests, from the request's start) less direct's, ms; gaps between tokens",
    "",
    ...markdownTable(
      ["arm", "token 1", "token n/2", "token n", "drift (n − 1)", "worst token", "gap p50", "gap p99"],
      perChunk.map((c) => [c.arm, f(c.firstMs), f(c.midMs), f(c.lastMs), f(c.driftMs), f(c.maxMs), f(c.gapP50Ms), f(c.gapP99Ms)]),
    ),
    "",
    `/v1 per chunk: drift ${f(perChunk[2]!.driftMs)} ms from token 1 to ${tokens} (target ≤ 0.2 ms: ${judgedText(drift)}); ` +
      `gap p99 ${f(perChunk[2]!.gapP99Ms)} ms against direct's ${f(directGaps.p99)} ms (target ≤ + 1 ms: ${judgedText(gapAdded)})`,
  ];
  const spliceTarget = fault.freshTtftP50Ms + fault.undisturbed.tpot.p50;
  // Judged only when a replica died under streams and the edge logged their migrations (judge.ts).
  const faultVerdict = judgeFault({ faults: fault.kills, touched: fault.onVictim, observed: fault.migrationsSeen, failed: fault.failed });
  const spliceVerdict = faultVerdict.met === null ? faultVerdict : judgeValue(fault.spliceGapMs.p50 - spliceTarget, { atLeast: false, threshold: 0 });
  lines.push(
    "",
    `Fault arm (migration on, its own stack): ${fault.streams} greedy chat streams of ${tokens} tokens; ${fault.kills ? `${fault.killed} SIGKILLed mid-stream` : "no replica killed"}; ${fault.onVictim} streams on it, ${fault.migrationsSeen} migrations in the edge's log; ${fault.failed} failed (target 0: ${judgedText(faultVerdict)})`,
    "",
    ...markdownTable(
      ["streams", "TTFT p50", "TTFT p90", "TPOT p50", "TPOT p90"],
      [
        ["undisturbed", f(fault.undisturbed.ttft.p50), f(fault.undisturbed.ttft.p90), f(fault.undisturbed.tpot.p50), f(fault.undisturbed.tpot.p90)],
        ["migrated", f(fault.migratedStats.ttft.p50), f(fault.migratedStats.ttft.p90), f(fault.migratedStats.tpot.p50), f(fault.migratedStats.tpot.p90)],
      ],
    ),
    "",
    `splice gap (a migrated stream's longest wait between two tokens): p50 ${f(fault.spliceGapMs.p50)} ms, p90 ${f(fault.spliceGapMs.p90)} ms, max ${f(fault.spliceGapMs.max)} ms; ` +
      `target ≤ a fresh /v1 request's TTFT p50 (${f(fault.freshTtftP50Ms)} ms: connect + prefill + first token) + one TPOT p50 (${f(fault.undisturbed.tpot.p50)} ms) = ${f(spliceTarget)} ms: ${judgedText(spliceVerdict)}`,
  );
  requireServed(rows.map((r) => ({ arm: r.arm, requests: r.requests, ok: r.requests - r.failed })));
  console.log(lines.join("\n"));
  writeResult(
    pace === "seed" ? "streaming" : "streaming-model-pace",
    { setup: { concurrency, replicas: REPLICAS, tokens, pace, ttftMs, tpotMs, seconds, busyLoops, model: "tiny-lm", endpoint: "/v1/completions" }, rows, overhead, overBare, byPrefix: { ttftP50Ms: rx.ttft.p50 - rd.ttft.p50, ttftMeanMs: rx.ttft.mean - rd.ttft.mean, tpotP50Ms: rx.tpot.p50 - rd.tpot.p50 }, openaiOverPrefixTtftP50Ms: rp.ttft.p50 - rx.ttft.p50, perChunk, replicaRejections: rejected, proxyCpu, fault: { ...fault, spliceTargetMs: spliceTarget } },
    { quick, ...(values.out ? { out: values.out } : {}) },
  );
} finally {
  for (const b of busy) b.kill("SIGKILL");
  bare?.child.kill();
  await stack.stop();
  rmSync(functionsDir, { recursive: true, force: true });
  rmSync(stateDir, { recursive: true, force: true });
}
