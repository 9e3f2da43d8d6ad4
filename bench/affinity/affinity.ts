/**
 * Multiplexing and session affinity under load, on the real local stack (workerd +
 * replica processes running real ONNX models), with more models than fit on one
 * replica: functions/vad.ts serves 3 Silero VAD versions on 3 replicas that keep
 * at most 2 loaded each.
 *
 *   npx tsx bench/affinity/affinity.ts [--seconds 8] [--concurrency 6]
 *
 * Measures, in one run:
 * After a 2 s warm-up (random traffic, unmeasured) that starts each replica's wasm
 * runtime:
 *  1. model hit share: requests served by a replica that already had the model
 *     (x-switchyard-model-cache: hit), with a skewed model mix (60/25/15 %),
 *     through Switchyard versus a model-blind router (each request to a random
 *     replica, sent directly; it runs second, on caches Switchyard warmed);
 *  2. session stickiness: share of a session's requests served by the replica
 *     that served its previous request, for sessions that each use one model;
 *  3. Durable Object calls per 1,000 requests for those session requests.
 * Prints markdown tables and writes bench/results/affinity.json.
 */
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { writeResult } from "../shared/result-file.ts";
import { markdownTable } from "../shared/table.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { synthesizeVowel } from "../../src/models/silero-vad.ts";
import { mulberry32 } from "../../src/seeded-random.ts";

const { values } = parseArgs({ options: { seconds: { type: "string" }, concurrency: { type: "string", default: "6" }, quick: { type: "boolean", default: false } } });
const quick = values.quick;
const seconds = Number(values.seconds ?? (quick ? 4 : 8));
const concurrency = Number(values.concurrency);

const MIX: [string, number][] = [
  ["silero-vad-v5", 0.6],
  ["silero-vad-v4", 0.25],
  ["silero-vad-v6", 0.15],
];
const body = JSON.stringify({ samples: synthesizeVowel(16_000) });

function pickModel(r: number): string {
  let acc = 0;
  for (const [m, p] of MIX) if (r < (acc += p)) return m;
  return MIX[0]![0];
}

interface Sample {
  model: string;
  session?: string;
  status: number;
  replica: string;
  hit: boolean;
  ms: number;
  error?: string;
}

async function run(seconds: number, target: (i: number) => { url: string; headers: Record<string, string>; model: string; session?: string }): Promise<Sample[]> {
  const out: Sample[] = [];
  const until = Date.now() + seconds * 1000;
  let i = 0;
  await Promise.all(
    Array.from({ length: concurrency }, async () => {
      while (Date.now() < until) {
        const t = target(i++);
        const started = performance.now();
        let res: Response;
        let text: string;
        try {
          res = await fetch(t.url, { method: "POST", headers: { "content-type": "application/json", ...t.headers }, body });
          text = await res.text();
        } catch (err) {
          out.push({ model: t.model, status: 0, replica: "?", hit: false, ms: performance.now() - started, error: String((err as Error).cause ?? err) });
          continue;
        }
        out.push({
          model: t.model,
          ...(t.session ? { session: t.session } : {}),
          status: res.status,
          replica: res.headers.get("x-switchyard-replica") ?? "?",
          hit: res.headers.get("x-switchyard-model-cache") === "hit",
          ms: performance.now() - started,
          ...(res.status !== 200 ? { error: text.slice(0, 1000) } : {}),
        });
      }
    }),
  );
  return out;
}

const pct = (xs: number[], p: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((p / 100) * s.length))]! : NaN;
};

function summary(name: string, samples: Sample[]) {
  const ok = samples.filter((s) => s.status === 200);
  return {
    arm: name,
    requests: samples.length,
    failed: samples.length - ok.length,
    rps: Math.round(samples.length / seconds),
    hitShare: ok.filter((s) => s.hit).length / Math.max(1, ok.length),
    p50ms: pct(ok.map((s) => s.ms), 50),
    p99ms: pct(ok.map((s) => s.ms), 99),
  };
}

function stickiness(samples: Sample[]): number {
  const last = new Map<string, string>();
  let same = 0;
  let counted = 0;
  for (const s of samples) {
    if (!s.session || s.status !== 200) continue;
    const prev = last.get(s.session);
    if (prev !== undefined) {
      counted++;
      if (prev === s.replica) same++;
    }
    last.set(s.session, s.replica);
  }
  return same / Math.max(1, counted);
}

const stateDir = mkdtempSync(join(tmpdir(), "switchyard-bench-"));
const logLines: string[] = [];
const stack = new LocalStack({ port: 0, acceptUnsignedDispatches: true, stateDir, freshState: true, replicas: { hello: 0, echo: 0, vad: 3 }, log: (l) => logLines.push(l) });
process.on("SIGINT", () => {
  stack.killAll();
  process.exit(130);
});
try {
  await stack.start();
  const replicaUrls = [...stack.replicas.values()].filter((r) => r.deployment === "vad").map((r) => r.url);
  const adminState = async () =>
    (await (await fetch(`${stack.workerdUrl}/-/deployments/vad`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).json()) as {
      router: { snapshotCalls: number };
      sessions: { resolves: number; rebinds: number; writes: number };
    };

  // 1. Model hit share: Switchyard, then a model-blind router on the same replicas.
  const seq = mulberry32(42);
  const models = Array.from({ length: 1_000_000 }, () => pickModel(seq()));
  const pickReplica = mulberry32(7);
  const blindTarget = (i: number) => ({
    url: `${replicaUrls[Math.floor(pickReplica() * replicaUrls.length)]}/vad`,
    headers: { "x-switchyard-model": models[i]! },
    model: models[i]!,
  });
  // Warm-up, not measured: starts every replica's wasm runtime and fills the caches at random.
  await run(2, blindTarget);
  const viaProxy = await run(seconds, (i) => ({ url: `${stack.url}/vad`, headers: { serve_multiplexed_model_id: models[i]! }, model: models[i]! }));
  const blind = await run(seconds, blindTarget);

  // 2. Sessions, each using one model (60 sessions, same skew), through Switchyard.
  const sessionModels = Array.from({ length: 60 }, (_, k) => pickModel(mulberry32(1000 + k)()));
  const before = await adminState();
  const sessions = await run(seconds, (i) => {
    const k = i % sessionModels.length;
    return { url: `${stack.url}/vad`, headers: { "x-switchyard-model": sessionModels[k]!, "x-session-id": `bench-${k}` }, model: sessionModels[k]!, session: `bench-${k}` };
  });
  const after = await adminState();
  const doCalls = after.router.snapshotCalls - before.router.snapshotCalls + (after.sessions.resolves - before.sessions.resolves) + (after.sessions.rebinds - before.sessions.rebinds);

  // The model-blind arm sends some requests to replicas that must first load the model, and a few time out: that is
  // what it measures, so it may leave 5 % unanswered (2 % in the published runs); the others 1 %.
  const BLIND_TOLERANCE = 0.05;
  const rows = [summary("Switchyard (model-aware)", viaProxy), summary("model-blind (random replica, direct)", blind), summary("Switchyard, 60 sessions", sessions)];
  const result = {
    when: new Date().toISOString(),
    setup: { replicas: 3, models: MIX.map(([m]) => m), maxModelsPerReplica: 2, mix: Object.fromEntries(MIX), seconds, concurrency, inputSeconds: 1 },
    arms: rows,
    sessions: {
      stickiness: stickiness(sessions),
      durableObjectCallsPer1000: (1000 * doCalls) / Math.max(1, sessions.length),
      sessionResolves: after.sessions.resolves - before.sessions.resolves,
      sessionRebinds: after.sessions.rebinds - before.sessions.rebinds,
      sessionWrites: after.sessions.writes - before.sessions.writes,
    },
  };
  console.log(`\n3 replicas × ≤2 models, 3 models (mix 60/25/15 %), ${concurrency} concurrent, ${seconds} s per arm, 1 s of audio per request\n`);
  for (const [name, arm] of [["model-aware", viaProxy], ["blind", blind], ["sessions", sessions]] as const) {
    for (const f of arm.filter((x) => x.status !== 200).slice(0, 3)) console.log(`${name}: ${f.status} ${f.error}`);
  }
  console.log(
    markdownTable(
      ["arm", "requests", "failed", "req/s", "served by a replica that had the model", "p50 ms", "p99 ms"],
      rows.map((r) => [r.arm, r.requests, r.failed, r.rps, `${(100 * r.hitShare).toFixed(1)} %`, r.p50ms.toFixed(1), r.p99ms.toFixed(1)]),
    ).join("\n"),
  );
  console.log(`\nsessions: stickiness ${(100 * result.sessions.stickiness).toFixed(1)} %, ${result.sessions.durableObjectCallsPer1000.toFixed(1)} Durable Object calls per 1,000 requests (${result.sessions.sessionResolves} resolves, ${result.sessions.sessionRebinds} rebinds, ${result.sessions.sessionWrites} writes)`);
  if (process.env.BENCH_DEBUG) console.log(logLines.filter((l) => /error|lost|fail|exit/i.test(l)).slice(-40).join("\n"));
  console.log(`wrote ${writeResult("affinity", result, { quick, arms: rows.map((r) => ({ arm: r.arm, requests: r.requests, ok: r.requests - r.failed, ...(r.arm.startsWith("model-blind") && { tolerance: BLIND_TOLERANCE }) })) })}`);
} catch (err) {
  console.error(logLines.filter((l) => !/registered|listening/.test(l)).slice(-30).join("\n"));
  throw err;
} finally {
  await stack.stop();
  rmSync(stateDir, { recursive: true, force: true });
}
