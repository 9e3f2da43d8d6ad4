/**
 * Choice across regions (issue 57, docs/latency-choice.md): the `latency` profile (trip +
 * queue + uncached prefill, in ms) against nearest-only (the round trip alone: a custom
 * profile, `trip` and `slots`), load-only (`load_aware`, the default) and today's prefix
 * profile (`prefix_cache`), in one run, on LLM replicas in three regions at different
 * distances from the edge. Each arm's deployment is in bench/regions/functions/<arm>/.
 *
 *   npx tsx bench/regions/regions.ts                 # full: 3 seeds, every scenario (~12.5 min)
 *   npx tsx bench/regions/regions.ts --quick         # 1 seed, short phases (~3 min)
 *   npx tsx bench/regions/regions.ts --only slo      # SLO attainment alone (~45 s quick, ~3 min full)
 *   npx tsx bench/regions/regions.ts [--only main|slo|main,slo] [--seeds 3] [--arms latency,nearest_only,load_aware,prefix_cache]
 *        [--layout 2,2,2] [--delays 5,40,120] [--prompt-chars 480] [--prefill-token-us 200]
 *        [--tokens 4] [--decode-ms 5] [--slots 16] [--unsat-share 0.3] [--overload 2]
 *        [--prefix-chars 400,2400] [--prefix-groups 5] [--dump requests.jsonl]
 *
 * **Regions.** Three, each a set of reference replicas (tiny-lm, paced as a GPU: one
 * prefill lane at `--prefill-token-us` per uncached prompt token, `--decode-ms` per
 * token; 16 slots, a deep queue) behind a TCP relay each that delays every byte by the
 * region's one-way time (test/fixtures/delay-relay.ts; this kernel has no netem): near
 * 5 ms, mid 40 ms, far 120 ms (round trips 10, 80 and 240 ms), `--layout` replicas in
 * each (2, 2, 2). A replica listens on a port of its own and advertises its relay's URL,
 * so the edge dispatches through the relay; it declares its region and coordinates
 * (Frankfurt, Virginia, Sydney: geography's estimate of each trip, what an isolate
 * assumes before it has measured one, is close to the relay's). Every arm has a stack
 * and replicas of its own (no arm inherits another's caches, queues or learnt trips),
 * afresh for each seed; the replicas are warmed directly before the edge sees them.
 *
 * **Edge locations.** Two isolates, in "fra" and "ams" (their coordinates set), each
 * request sent to one at random. On one loopback host every isolate sees the same delay
 * to a replica (the relay cannot tell isolates apart), so the second location shows two
 * isolates that learn their trips apart agreeing, not a different geometry; Amsterdam
 * rather than somewhere far from Frankfurt, so that geography's prior agrees with the
 * delays too.
 *
 * **Load.** Open loop (Poisson, the same seeded sequence in every arm), each request a
 * streamed chat of its own text (no prefix shared: a prompt of `--prompt-chars`
 * characters, one token each), `--tokens` tokens. TTFT at the client, from the scheduled
 * arrival to the first content chunk. The near region's capacity is its replicas' prefill
 * lanes: replicas × 1,000,000 / (prompt tokens × prefill-token-us) requests a second
 * (stated; the nearest-only arm's near throughput under overload measures it). Phases,
 * one after the other in one timeline per arm:
 *   1. warm-up at the unsaturated rate (not measured; the isolates learn their trips);
 *   2. unsaturated: `--unsat-share` (30 %) of the near region's capacity;
 *   3. near region killed (latency and nearest-only arms): the same rate; both near
 *      replicas SIGKILLed a few seconds in, restarted (same ids, ports and relays) a few
 *      seconds later: when the traffic reached the next region, when it came back;
 *   4. near region at `--overload` (2×) its capacity; the run waits for every answer;
 *   5. a prefix held far away (latency and prefix_cache arms): `--prefix-groups` prefixes
 *      of each of two lengths prefilled on the far region's first replica (directly), then
 *      one request of each group through the edge, one at a time: the short prefix saves
 *      less prefill than the extra trip costs, the long one more.
 * **SLO attainment** (in the default run; `--only slo` alone): near
 * replicas of two prefill rates (2 at `--prefill-token-us`, 2 three times slower), half
 * the requests with x-slo-ttft-ms 300 and half 2000, at 90 % of the fleet's capacity,
 * latency against prefix_cache: the share of requests whose first token came within
 * their objective, and the answers that ended within the window per second.
 *
 * **Prediction quality.** Every request carries an x-request-id; the edge's log line for
 * it (its "msg":"request" line) has the chosen replica's prediction (ttft_predicted_ms and
 * its parts), compared with the client's TTFT (which also holds the client → edge hop
 * and the edge's own work, a few ms here): |error| p50 and p90 in ms and as a fraction,
 * per phase and per region of the chosen replica.
 *
 * Targets (the issue's), per seed, MET / MISS (regions-targets.ts): unsaturated, latency
 * p50 within 10 % of the nearest-region ideal (the nearest-only arm's p50); at 2× the near
 * region's capacity, latency p99 ≥ 2× lower than nearest-only's, p50 ≥ 2× lower than
 * load-only's, 0 failed; near region killed, its traffic chosen in the next region within
 * 3 s, and back after the restart; the far prefix taken only where it saves more than the
 * trip; SLO attainment ≥ 1.3× prefix_cache's with throughput within 5 %.
 * Writes bench/results/regions.json (--quick: bench/results/quick/regions.json).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { cpus, loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { LocalStack, type ReplicaProcess } from "../../src/local/stack.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { startDelayRelay, type DelayRelay } from "../../test/fixtures/delay-relay.ts";
import { streamChat, type StreamResult } from "../prefix-cache/prefix-cache-client.ts";
import { freePort, workerdPid, cpuSeconds } from "../shared/load-tools.ts";
import { writeResult, type ArmCount } from "../shared/result-file.ts";
import { markdownTable } from "../shared/table.ts";
import { REGION_ARMS, regionTargets, sloTargets, type KillFigures, type PhaseFigures, type PrefixFigures, type RegionArm, type RegionArmName, type SloArm, type SloFigures } from "./regions-targets.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    seeds: { type: "string", default: "3" },
    arms: { type: "string", default: REGION_ARMS.join(",") },
    layout: { type: "string", default: "2,2,2" },
    delays: { type: "string", default: "5,40,120" },
    "prompt-chars": { type: "string", default: "480" },
    "prefill-token-us": { type: "string", default: "200" },
    tokens: { type: "string", default: "4" },
    "decode-ms": { type: "string", default: "5" },
    slots: { type: "string", default: "16" },
    "unsat-share": { type: "string", default: "0.3" },
    overload: { type: "string", default: "2" },
    "prefix-chars": { type: "string", default: "400,2400" },
    "prefix-groups": { type: "string" },
    /** main: the arms' phases (unsaturated, killed, overload, prefix); slo: the SLO classes on mixed replicas (latency against prefix_cache). */
    only: { type: "string", default: "main,slo" },
    out: { type: "string" },
    /** Every request of every arm (phase, isolate, replica, TTFT, the edge's prediction and attempts) as JSON lines, for a closer look. */
    dump: { type: "string" },
  },
});
const quick = values.quick === true;
const SEEDS = quick ? 1 : Number(values.seeds);
const ARMS = values.arms.split(",").map((a) => a.trim()) as RegionArmName[];
for (const a of ARMS) if (!REGION_ARMS.includes(a)) throw new Error(`--arms: unknown arm "${a}" (${REGION_ARMS.join(", ")})`);
const LAYOUT = values.layout.split(",").map(Number);
const DELAYS = values.delays.split(",").map(Number);
const PROMPT_CHARS = Number(values["prompt-chars"]);
const PREFILL_TOKEN_US = Number(values["prefill-token-us"]);
const TOKENS = Number(values.tokens);
const DECODE_MS = Number(values["decode-ms"]);
const SLOTS = Number(values.slots);
const UNSAT_SHARE = Number(values["unsat-share"]);
const OVERLOAD = Number(values.overload);
/** The prefix held far away: its two lengths (characters, one token each), short then long, and the groups of each. */
const PREFIX_CHARS = values["prefix-chars"].split(",").map(Number) as [number, number];
const ONLY = new Set(values.only.split(",").map((x) => x.trim()));
for (const x of ONLY) if (x !== "main" && x !== "slo") throw new Error(`--only: unknown scenario "${x}" (main, slo)`);
const PREFIX_GROUPS = Number(values["prefix-groups"] ?? (quick ? "3" : "5"));
if (PREFIX_CHARS.length !== 2 || !PREFIX_CHARS.every((x) => Number.isInteger(x) && x > 0)) throw new Error("--prefix-chars takes two lengths: short,long");
if (LAYOUT.length !== 3 || DELAYS.length !== 3 || ![...LAYOUT, ...DELAYS].every((x) => Number.isInteger(x) && x >= 0) || LAYOUT[0]! < 1 || LAYOUT[1]! < 1) {
  throw new Error("--layout and --delays take three whole numbers (near, mid, far); near and mid need a replica each");
}
for (const [k, v] of Object.entries({ SEEDS, PREFIX_GROUPS, PROMPT_CHARS, PREFILL_TOKEN_US, TOKENS, SLOTS, UNSAT_SHARE, OVERLOAD })) if (!(v > 0)) throw new Error(`bad ${k}: ${v}`);

/**
 * Phase lengths, s: warm-up, unsaturated, near region killed (kill and restart at these
 * offsets), overload. The kill phase runs long enough after the restart for the traffic to come back: an isolate
 * that saw 3 failures on a replica ejects it for policy.ejectBaseMs (5 s) from the last.
 */
const T = quick ? { warmup: 3, unsat: 6, kill: 10, killAt: 2, restartAt: 4, overload: 5 } : { warmup: 4, unsat: 12, kill: 12, killAt: 2, restartAt: 5, overload: 12 };
/** The kill phase's last seconds, where the traffic must be back in the near region. */
const END_WINDOW_S = 2;
/** Arms that run the kill phase: the latency arm (judged) and nearest-only (for comparison); the others spread over the regions anyway. */
const KILL_ARMS: readonly RegionArmName[] = ["latency", "nearest_only"];
/** Arms that run the prefix phase: the latency arm (judged) and today's prefix profile (for comparison). */
const PREFIX_ARMS: readonly RegionArmName[] = ["latency", "prefix_cache"];
/** Each prefix request's own text after the shared prefix, characters. */
const SUFFIX_CHARS = 80;
/** After the far replica took the prefixes: its next load reports (every second) carry them in its cache summary, and the isolates' views refresh. */
const PREFIX_SETTLE_MS = 2_000;
/** Requests sent straight to the near replicas, one at a time, for the nearest region's ideal TTFT. */
const DIRECT_SAMPLES = 20;

/** The chat template's own tokens around the user's text (tiny-lm: "user: …\nassistant: ", one token a character). */
const TEMPLATE_TOKENS = "user: \nassistant: ".length;
const PROMPT_TOKENS = PROMPT_CHARS + TEMPLATE_TOKENS;
/** The template's tokens before the user's text ("user: "): part of every prompt's prefix. */
const TEMPLATE_PREFIX_TOKENS = "user: ".length;
const PREFILL_MS = (PROMPT_TOKENS * PREFILL_TOKEN_US) / 1000;
const NEAR_CAPACITY = (LAYOUT[0]! * 1000) / PREFILL_MS;
const UNSAT_RATE = UNSAT_SHARE * NEAR_CAPACITY;
const OVERLOAD_RATE = OVERLOAD * NEAR_CAPACITY;

/**
 * SLO attainment: two classes of requests (x-slo-ttft-ms), half each, on near replicas of two
 * prefill rates (half of them SLO_SLOW× slower), at SLO_LOAD of the fleet's capacity.
 */
const SLO_CLASSES = [
  { name: "tight", ttftMs: 300 },
  { name: "loose", ttftMs: 2000 },
] as const;
const SLO_SLOW = 3;
const SLO_REPLICAS = { fast: 2, slow: 2 };
const SLO_LOAD = 0.9;
const SLO_ARMS: readonly RegionArmName[] = ["latency", "prefix_cache"];
const SLO_T = quick ? { warmup: 3, window: 10 } : { warmup: 4, window: 15 };
const SLO_CAPACITY = SLO_REPLICAS.fast * (1000 / PREFILL_MS) + SLO_REPLICAS.slow * (1000 / (SLO_SLOW * PREFILL_MS));
const SLO_RATE = SLO_LOAD * SLO_CAPACITY;

interface Region {
  name: "near" | "mid" | "far";
  /** The replica's --region. */
  region: string;
  coordinates: { lat: number; lon: number };
  oneWayMs: number;
  replicas: number;
}
const REGIONS: Region[] = [
  { name: "near", region: "eu-central", coordinates: { lat: 50.11, lon: 8.68 }, oneWayMs: DELAYS[0]!, replicas: LAYOUT[0]! },
  { name: "mid", region: "us-east", coordinates: { lat: 38.95, lon: -77.45 }, oneWayMs: DELAYS[1]!, replicas: LAYOUT[1]! },
  { name: "far", region: "ap-southeast", coordinates: { lat: -33.87, lon: 151.21 }, oneWayMs: DELAYS[2]!, replicas: LAYOUT[2]! },
];
const LOCATIONS = ["fra", "ams"];
const EDGE_COORDINATES = [
  { lat: 50.11, lon: 8.68 },
  { lat: 52.37, lon: 4.9 },
];
const DEPLOYMENT: Record<RegionArmName, string> = { latency: "rg-latency", nearest_only: "rg-nearest", load_aware: "rg-load", prefix_cache: "rg-prefix" };
const FUNCTIONS = resolve(import.meta.dirname, "functions");

// Every request's line: the prediction quality is read from them.
process.env.SWITCHYARD_REQUEST_LOGS = "on";
const root = mkdtempSync(join(tmpdir(), "switchyard-regions-"));
let current: { stack: LocalStack; relays: DelayRelay[] } | undefined;
process.on("SIGINT", () => {
  current?.stack.killAll();
  process.exit(130);
});
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

const WORDS = "yard track switch signal train freight night siding lamp clear line master box keeper ledger river crossing bridge tunnel platform engine car coupler brake whistle timetable station junction depot crane shunter".split(" ");
/** A text of exactly `chars` characters, its own for each request (no shared prefix: the number first). */
function promptOf(n: number, chars: number, rnd: () => number): string {
  let s = `${n} `;
  while (s.length < chars) s += `${WORDS[Math.floor(rnd() * WORDS.length)]!} `;
  return s.slice(0, chars);
}

type PhaseName = "warmup" | "unsat" | "kill" | "overload" | "prefix";
interface Arrival {
  n: number;
  at: number;
  phase: PhaseName;
  isolate: number;
  prompt: string;
}
/** The seed's arrivals: the same in every arm (an arm without the kill phase skips its stretch of them). */
function arrivals(seed: number, withKill: boolean): { list: Arrival[]; starts: Record<PhaseName, number>; end: number } {
  const rnd = mulberry32(seed);
  const list: Arrival[] = [];
  const plan: [PhaseName, number, number][] = [
    ["warmup", UNSAT_RATE, T.warmup],
    ["unsat", UNSAT_RATE, T.unsat],
    ["kill", UNSAT_RATE, T.kill],
    ["overload", OVERLOAD_RATE, T.overload],
  ];
  const starts = {} as Record<PhaseName, number>;
  let t0 = 0;
  let n = 0;
  for (const [phase, rate, seconds] of plan) {
    // Every arm draws the kill phase's arrivals, so that the overload phase's are the same in all.
    const kept = phase !== "kill" || withKill;
    starts[phase] = t0;
    const end = t0 + seconds * 1000;
    for (let t = t0; ; ) {
      t += (-Math.log(1 - rnd()) / rate) * 1000;
      if (t >= end) break;
      const isolate = rnd() < 0.5 ? 0 : 1;
      const prompt = promptOf(n, PROMPT_CHARS, rnd);
      if (kept) list.push({ n, at: t, phase, isolate, prompt });
      n++;
    }
    if (kept) t0 = end;
  }
  return { list, starts, end: t0 };
}

interface Sent extends StreamResult {
  n: number;
  id: string;
  phase: PhaseName;
  isolate: number;
  /** performance.now() of the scheduled arrival, and of the first token (NaN when none). */
  sentAt: number;
  firstAt: number;
  region: string;
}
/** What the edge logged of one request ("msg":"request"). */
interface EdgeLine {
  status: number;
  replica: string | null;
  attempts: number;
  ttft_predicted_ms?: number;
  ttft_trip_ms?: number;
  ttft_queue_ms?: number;
  ttft_prefill_ms?: number;
}

interface ArmRun {
  arm: RegionArmName;
  seed: number;
  /** The latency arm's run: TTFTs of near replicas served directly, one at a time (the nearest region's ideal). */
  direct: number[];
  sent: Sent[];
  lines: Map<string, EdgeLine>;
  kill?: { at: number; killed: number; restartAt: number; registeredAt: number; restarted: number; phaseEnd: number };
  /** The prefix phase's requests (one per group, each its own prefix, held by the far region's first replica). */
  prefix?: { holder: string; sent: (Sent & { long: boolean })[] };
  /** workerd's CPU over the run, ms per request. */
  edgeCpuMsPerRequest: number;
  wallS: number;
}

/**
 * A port to give a replica: free now, and below the kernel's ephemeral range, so that no
 * outgoing connection (the edge's, the relays') nor a listener on port 0 takes it before
 * the replica listens (a port picked from the ephemeral range once was: EADDRINUSE).
 */
const taken = new Set<number>();
async function listenablePort(): Promise<number> {
  const low = Number(readFileSync("/proc/sys/net/ipv4/ip_local_port_range", "utf8").trim().split(/\s+/)[0] ?? 32768);
  for (let i = 0; i < 200; i++) {
    const port = 10_000 + Math.floor(Math.random() * Math.max(1, low - 10_000));
    if (taken.has(port)) continue;
    const free = await new Promise<boolean>((done) => {
      const srv = createServer();
      srv.once("error", () => done(false));
      srv.listen(port, "127.0.0.1", () => srv.close(() => done(true)));
    });
    if (free) {
      taken.add(port);
      return port;
    }
  }
  return freePort();
}

const regionOfReplica = (id: string) => (/-(near|mid|far)-\d+$/.exec(id)?.[1] ?? "?");

function replicaArgs(r: Region, port: number, relay: DelayRelay, prefillTokenUs: number): string[] {
  return [
    "--backend", "llm", "--model", "tiny-lm",
    "--prefill-token-us", String(prefillTokenUs), "--decode-ms", String(DECODE_MS),
    "--kv-blocks", "4096", "--max-queued", "512",
    "--port", String(port), "--advertise-url", relay.url,
    // The = form: a latitude below 0 would read as a flag.
    "--region", r.region, `--coordinates=${r.coordinates.lat},${r.coordinates.lon}`,
  ];
}

/** One replica of a fleet: where it is, its pace, its port and the relay in front of it. */
interface FleetReplica {
  id: string;
  region: Region;
  prefillTokenUs: number;
  port: number;
  relay: DelayRelay;
}
interface Fleet {
  stack: LocalStack;
  name: string;
  replicas: FleetReplica[];
  /** The edge's request lines by request id. */
  lines: Map<string, EdgeLine>;
  dir: string;
  /** Starts (or restarts, on the same port and relay) one of the fleet's replicas. */
  start(x: FleetReplica): Promise<ReplicaProcess>;
}

/**
 * A stack serving the arm's deployment (2 isolates, in LOCATIONS) and `specs` replicas,
 * each behind a relay of its region's delay, registered, ready and warmed; `run` gets it
 * and the fleet is stopped after, whatever happens.
 */
async function withFleet<T>(arm: RegionArmName, specs: readonly { region: Region; prefillTokenUs: number; id: string }[], run: (f: Fleet) => Promise<T>): Promise<T> {
  const name = DEPLOYMENT[arm];
  const lines = new Map<string, EdgeLine>();
  const dir = mkdtempSync(join(root, `${arm}-`));
  const stack = new LocalStack({
    port: 0,
    functionsDir: join(FUNCTIONS, arm),
    stateDir: join(dir, "state"),
    freshState: true,
    edgeIsolates: LOCATIONS.length,
    edgeLocations: LOCATIONS,
    edgeCoordinates: EDGE_COORDINATES,
    // The replicas are warmed directly (below), not through the edge.
    acceptUnsignedDispatches: true,
    log: (l) => {
      if (!l.includes('"msg":"request"')) {
        // A replica's or workerd's complaint, not its routine output.
        if (/error|exited|usage/i.test(l) && !/replica connection failed|stream failed/.test(l)) console.error(l.slice(0, 300));
        return;
      }
      const json = l.slice(l.indexOf("{"));
      try {
        const x = JSON.parse(json) as EdgeLine & { request_id: string };
        if (x.request_id.startsWith("rg-")) lines.set(x.request_id, x);
      } catch {
        // not a whole line
      }
    },
  });
  const relays: DelayRelay[] = [];
  current = { stack, relays };
  await stack.start();
  try {
    // One relay per replica, delaying as its region; the replica listens on a port of its own and
    // advertises the relay, which forwards to that port.
    const replicas: FleetReplica[] = [];
    for (const spec of specs) {
      const port = await listenablePort();
      const relay = await startDelayRelay(spec.region.oneWayMs, port);
      relays.push(relay);
      replicas.push({ ...spec, port, relay });
    }
    const start = (x: FleetReplica) => stack.startReplica(name, { id: x.id, maxOngoing: SLOTS, backendArgs: replicaArgs(x.region, x.port, x.relay, x.prefillTokenUs) });
    await Promise.all(replicas.map(start));
    const deadline = Date.now() + 30_000;
    while ((await stack.deploymentState(name)).snapshot.replicas.filter((r) => r.load.state === "ready").length < replicas.length) {
      if (Date.now() > deadline) throw new Error(`${arm}: ${replicas.length} replicas not ready`);
      await sleep(200);
    }
    // Each replica's first requests are slow (its code and model warming up, its event loop
    // busy), and an isolate would count that in its first trip samples: warm every replica
    // directly first, as a fleet's replicas are warm, so the edge's warm-up learns trips.
    await Promise.all(
      replicas.map(async (x) => {
        for (let i = 0; i < 2; i++) {
          const body = JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: promptOf(-1 - i, PROMPT_CHARS, Math.random) }], max_tokens: TOKENS, ignore_eos: true, stream: true });
          const r = await streamChat(`http://127.0.0.1:${x.port}/v1/chat/completions`, body, {}, performance.now(), AbortSignal.timeout(30_000), TOKENS);
          if (r.status !== 200) throw new Error(`${x.id}: warm-up answered ${r.status} ${r.error ?? ""}`);
        }
      }),
    );
    return await run({ stack, name, replicas, lines, dir, start });
  } finally {
    await stack.stop();
    await Promise.all(relays.map((r) => r.close()));
    current = undefined;
  }
}

async function runArm(arm: RegionArmName, seed: number): Promise<ArmRun> {
  const began = performance.now();
  const name = DEPLOYMENT[arm];
  const specs = REGIONS.flatMap((r) => Array.from({ length: r.replicas }, (_, i) => ({ id: `${name}-${r.name}-${i + 1}`, region: r, prefillTokenUs: PREFILL_TOKEN_US })));
  return withFleet(arm, specs, async ({ stack, replicas, lines, dir, start }) => {
    // The nearest region's ideal: a near replica's own TTFT with nothing queued, through its
    // relay but not the edge (one request at a time, alternating between the near replicas).
    const direct: number[] = [];
    if (arm === "latency") {
      const near = replicas.filter((x) => x.region.name === "near");
      for (let i = 0; i < DIRECT_SAMPLES; i++) {
        const x = near[i % near.length]!;
        const body = JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: promptOf(-100 - i, PROMPT_CHARS, Math.random) }], max_tokens: TOKENS, ignore_eos: true, stream: true });
        const r = await streamChat(`${x.relay.url}/v1/chat/completions`, body, {}, performance.now(), AbortSignal.timeout(30_000), TOKENS);
        if (r.status === 200) direct.push(r.ttftMs);
      }
    }
    const withKill = KILL_ARMS.includes(arm);
    const { list, starts, end } = arrivals(seed, withKill);
    const workerd = workerdPid(join(dir, "state", "workerd.capnp"));
    const cpu0 = cpuSeconds(workerd);
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), end + 90_000);
    const t0 = performance.now() + 200;
    let kill: ArmRun["kill"];
    let killDone: Promise<void> = Promise.resolve();
    if (withKill) {
      const near = replicas.filter((x) => x.region.name === "near");
      const k = { at: NaN, killed: 0, restartAt: NaN, registeredAt: NaN, restarted: 0, phaseEnd: t0 + starts.kill + T.kill * 1000 };
      kill = k;
      killDone = (async () => {
        await sleep(t0 + starts.kill + T.killAt * 1000 - performance.now());
        const procs = near.map((x) => stack.replicas.get(x.id)).filter((p): p is ReplicaProcess => p !== undefined);
        k.at = performance.now();
        for (const p of procs) p.child.kill("SIGKILL");
        await Promise.all(procs.map((p) => p.exited));
        k.killed = procs.length;
        await sleep(t0 + starts.kill + T.restartAt * 1000 - performance.now());
        k.restartAt = performance.now();
        const back = await Promise.allSettled(near.map(start));
        k.registeredAt = performance.now();
        k.restarted = back.filter((b) => b.status === "fulfilled").length;
      })();
    }
    const sent = await Promise.all(
      list.map(async (a): Promise<Sent> => {
        const at = t0 + a.at;
        const wait = at - performance.now();
        if (wait > 0) await sleep(wait);
        const id = `rg-${arm}-${seed}-${a.n}`;
        const body = JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: a.prompt }], max_tokens: TOKENS, ignore_eos: true, stream: true, temperature: 0 });
        const r = await streamChat(`${stack.edgeUrls[a.isolate]!}/v1/chat/completions`, body, { "x-request-id": id }, at, abort.signal, TOKENS);
        return { ...r, n: a.n, id, phase: a.phase, isolate: a.isolate, sentAt: at, firstAt: at + r.ttftMs, region: regionOfReplica(r.replica) };
      }),
    );
    await killDone;
    clearTimeout(timer);
    // The last lines are written as their streams end: give workerd's output a moment.
    await sleep(500);
    const cpu1 = cpuSeconds(workerd);
    const holder = replicas.find((x) => x.region.name === "far") ?? replicas.find((x) => x.region.name === "mid")!;
    const prefix = PREFIX_ARMS.includes(arm) ? { holder: holder.id, sent: await prefixPhase(stack, holder, arm, seed) } : undefined;
    await sleep(300);
    return { arm, seed, sent, lines, direct, ...(kill && { kill }), ...(prefix && { prefix }), edgeCpuMsPerRequest: ((cpu1 - cpu0) * 1000) / Math.max(1, sent.length), wallS: (performance.now() - began) / 1000 };
  });
}

/**
 * A prefix held far away (issue 57: "a group whose holder is far is sent there only when
 * the saved prefill exceeds the trip"). Each group's prefix of `PREFIX_CHARS` (short and
 * long) is prefilled on `holder` (the farthest region's first replica) by a request sent
 * to it directly; once its load reports have carried its cache summary to the isolates,
 * one request of each group (the prefix and a text of its own) goes through the edge, one
 * at a time. Where the prefix's prefill saves less than the extra trip, the near region
 * serves it faster; where it saves more, the holder does.
 */
async function prefixPhase(stack: LocalStack, holder: { id: string; port: number }, arm: RegionArmName, seed: number): Promise<(Sent & { long: boolean })[]> {
  const rnd = mulberry32(seed * 7919 + 57);
  const groups = [false, true].flatMap((long) => Array.from({ length: PREFIX_GROUPS }, (_, g) => ({ long, g, text: promptOf(-1000 - (long ? 500 : 0) - g, PREFIX_CHARS[long ? 1 : 0], rnd) })));
  for (const x of groups) {
    const body = JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: `${x.text}${promptOf(-1, SUFFIX_CHARS, rnd)}` }], max_tokens: 1, ignore_eos: true, stream: true });
    const r = await streamChat(`http://127.0.0.1:${holder.port}/v1/chat/completions`, body, {}, performance.now(), AbortSignal.timeout(30_000), 1);
    if (r.status !== 200) throw new Error(`${holder.id}: a prefix's warm-up answered ${r.status} ${r.error ?? ""}`);
  }
  await sleep(PREFIX_SETTLE_MS);
  const out: (Sent & { long: boolean })[] = [];
  // Short and long alternate, so that neither meets the fleet in a state of its own.
  const order = Array.from({ length: PREFIX_GROUPS }, (_, g) => [groups[g]!, groups[PREFIX_GROUPS + g]!]).flat();
  for (const [i, x] of order.entries()) {
    const id = `rg-${arm}-${seed}-p${i}`;
    const isolate = rnd() < 0.5 ? 0 : 1;
    const body = JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: `${x.text}${promptOf(i, SUFFIX_CHARS, rnd)}` }], max_tokens: TOKENS, ignore_eos: true, stream: true, temperature: 0 });
    const at = performance.now();
    const r = await streamChat(`${stack.edgeUrls[isolate]!}/v1/chat/completions`, body, { "x-request-id": id }, at, AbortSignal.timeout(30_000), TOKENS);
    out.push({ ...r, n: -1, id, phase: "prefix", isolate, sentAt: at, firstAt: at + r.ttftMs, region: regionOfReplica(r.replica), long: x.long });
    await sleep(100);
  }
  return out;
}

const pct = (xs: readonly number[], q: number) => {
  const s = xs.filter(Number.isFinite).sort((a, b) => a - b);
  return s.length ? s[Math.min(s.length - 1, Math.floor((q / 100) * s.length))]! : NaN;
};
const ok = (r: StreamResult) => r.status === 200;

function phaseFigures(rs: readonly Sent[]): PhaseFigures {
  const good = rs.filter(ok);
  const ttft = good.map((r) => r.ttftMs);
  const byRegion: Record<string, number> = {};
  for (const r of good) byRegion[r.region] = (byRegion[r.region] ?? 0) + 1;
  return { sent: rs.length, ok: good.length, failed: rs.length - good.length, p50: pct(ttft, 50), p90: pct(ttft, 90), p99: pct(ttft, 99), byRegion };
}

function killFigures(run: ArmRun): KillFigures | undefined {
  const k = run.kill;
  if (!k) return undefined;
  const phase = run.sent.filter((r) => r.phase === "kill");
  const after = phase.filter((r) => r.sentAt >= k.at && r.sentAt < k.restartAt);
  const attempts = (r: Sent) => run.lines.get(r.id)?.attempts ?? NaN;
  const nextFirst = after.filter((r) => ok(r) && r.region === "mid" && attempts(r) === 1).map((r) => r.firstAt - k.at);
  const nextAny = after.filter((r) => ok(r) && r.region === "mid").map((r) => r.firstAt - k.at);
  const touched = after.filter((r) => !ok(r) || attempts(r) > 1);
  const backs = phase.filter((r) => ok(r) && r.region === "near" && r.sentAt >= k.registeredAt).map((r) => r.firstAt - k.registeredAt);
  const endWindow = phase.filter((r) => r.sentAt >= k.phaseEnd - END_WINDOW_S * 1000);
  const min = (xs: number[]) => (xs.length ? Math.min(...xs) : null);
  return {
    killed: k.killed,
    sentAfterKill: after.length,
    failedAfterKill: after.filter((r) => !ok(r)).length,
    failoverMs: min(nextFirst),
    firstNextMs: min(nextAny),
    retriedAfterKill: after.filter((r) => attempts(r) > 1).length,
    lastTouchedDeadMs: touched.length ? Math.max(...touched.map((r) => r.sentAt - k.at)) : null,
    restarted: k.restarted,
    registeredMs: k.registeredAt - k.restartAt,
    backMs: min(backs),
    endSent: endWindow.length,
    endNearShare: endWindow.length ? endWindow.filter((r) => ok(r) && r.region === "near").length / endWindow.length : NaN,
  };
}


interface SloSent extends Sent {
  sloMs: number;
  fast: boolean;
  endAt: number;
}
interface SloRun {
  arm: RegionArmName;
  seed: number;
  sent: SloSent[];
  lines: Map<string, EdgeLine>;
  windowStart: number;
  windowEnd: number;
}

/** The SLO scenario for one arm: near replicas of two prefill rates, two SLO classes, open loop at SLO_LOAD. */
async function runSloArm(arm: RegionArmName, seed: number): Promise<SloRun> {
  const name = DEPLOYMENT[arm];
  const near = REGIONS[0]!;
  const specs = [
    ...Array.from({ length: SLO_REPLICAS.fast }, (_, i) => ({ id: `${name}-fast-near-${i + 1}`, region: near, prefillTokenUs: PREFILL_TOKEN_US })),
    ...Array.from({ length: SLO_REPLICAS.slow }, (_, i) => ({ id: `${name}-slow-near-${i + 1}`, region: near, prefillTokenUs: SLO_SLOW * PREFILL_TOKEN_US })),
  ];
  return withFleet(arm, specs, async ({ stack, lines }) => {
    const rnd = mulberry32(seed * 104729 + 5);
    const list: { n: number; at: number; isolate: number; slo: (typeof SLO_CLASSES)[number]; prompt: string; measured: boolean }[] = [];
    const total = (SLO_T.warmup + SLO_T.window) * 1000;
    for (let t = 0, n = 0; ; n++) {
      t += (-Math.log(1 - rnd()) / SLO_RATE) * 1000;
      if (t >= total) break;
      list.push({ n, at: t, isolate: rnd() < 0.5 ? 0 : 1, slo: SLO_CLASSES[rnd() < 0.5 ? 0 : 1]!, prompt: promptOf(n, PROMPT_CHARS, rnd), measured: t >= SLO_T.warmup * 1000 });
    }
    const t0 = performance.now() + 200;
    const abort = new AbortController();
    const timer = setTimeout(() => abort.abort(), total + 90_000);
    const sent = await Promise.all(
      list.map(async (a): Promise<SloSent & { measured: boolean }> => {
        const at = t0 + a.at;
        const wait = at - performance.now();
        if (wait > 0) await sleep(wait);
        const id = `rg-slo-${arm}-${seed}-${a.n}`;
        const body = JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: a.prompt }], max_tokens: TOKENS, ignore_eos: true, stream: true, temperature: 0 });
        const r = await streamChat(`${stack.edgeUrls[a.isolate]!}/v1/chat/completions`, body, { "x-request-id": id, "x-slo-ttft-ms": String(a.slo.ttftMs) }, at, abort.signal, TOKENS);
        return { ...r, n: a.n, id, phase: "unsat", isolate: a.isolate, sentAt: at, firstAt: at + r.ttftMs, endAt: at + r.e2eMs, region: regionOfReplica(r.replica), sloMs: a.slo.ttftMs, fast: r.replica.includes("-fast-"), measured: a.measured };
      }),
    );
    clearTimeout(timer);
    await sleep(500);
    return { arm, seed, sent: sent.filter((x) => x.measured), lines, windowStart: t0 + SLO_T.warmup * 1000, windowEnd: t0 + total };
  });
}

function sloFigures(r: SloRun): SloFigures {
  const met = (x: SloSent) => ok(x) && x.ttftMs <= x.sloMs;
  const classes = SLO_CLASSES.map((c) => {
    const rs = r.sent.filter((x) => x.sloMs === c.ttftMs);
    return { name: c.name, ttftMs: c.ttftMs, sent: rs.length, met: rs.filter(met).length, toFast: rs.filter((x) => ok(x) && x.fast).length, p50: pct(rs.filter(ok).map((x) => x.ttftMs), 50) };
  });
  const windowS = (r.windowEnd - r.windowStart) / 1000;
  return {
    sent: r.sent.length,
    ok: r.sent.filter(ok).length,
    met: r.sent.filter(met).length,
    // Answers that ended within the window, per second: an arm that falls behind completes fewer.
    throughputRps: r.sent.filter((x) => ok(x) && x.endAt <= r.windowEnd).length / windowS,
    classes,
  };
}

function prefixFigures(run: ArmRun): PrefixFigures | undefined {
  const p = run.prefix;
  if (!p) return undefined;
  const holderRegion = REGIONS.find((r) => r.name === regionOfReplica(p.holder))!;
  const figures = (long: boolean) => {
    const rs = p.sent.filter((x) => x.long === long);
    const good = rs.filter(ok);
    return { savedMs: ((PREFIX_CHARS[long ? 1 : 0] + TEMPLATE_PREFIX_TOKENS) * PREFILL_TOKEN_US) / 1000, sent: rs.length, ok: good.length, toHolder: good.filter((x) => x.replica === p.holder).length, p50: pct(good.map((x) => x.ttftMs), 50) };
  };
  return { extraTripMs: 2 * (holderRegion.oneWayMs - REGIONS[0]!.oneWayMs), short: figures(false), long: figures(true) };
}

/** |predicted − client TTFT| over a run's answered requests that the edge predicted (its log lines). */
function predictionFigures(run: ArmRun, phases: readonly PhaseName[]) {
  const rows = run.sent
    .filter((r) => phases.includes(r.phase) && ok(r))
    .flatMap((r) => {
      const l = run.lines.get(r.id);
      return l?.ttft_predicted_ms === undefined ? [] : [{ predicted: l.ttft_predicted_ms, actual: r.ttftMs, trip: l.ttft_trip_ms ?? NaN, queue: l.ttft_queue_ms ?? NaN, prefill: l.ttft_prefill_ms ?? NaN, region: r.region }];
    });
  const abs = rows.map((x) => Math.abs(x.predicted - x.actual));
  const frac = rows.map((x) => Math.abs(x.predicted - x.actual) / x.actual);
  const signed = rows.map((x) => x.predicted - x.actual);
  return {
    n: rows.length,
    answered: run.sent.filter((r) => phases.includes(r.phase) && ok(r)).length,
    absP50Ms: pct(abs, 50),
    absP90Ms: pct(abs, 90),
    fracP50: pct(frac, 50),
    fracP90: pct(frac, 90),
    signedP50Ms: pct(signed, 50),
    predictedP50Ms: pct(rows.map((x) => x.predicted), 50),
    actualP50Ms: pct(rows.map((x) => x.actual), 50),
    parts: { tripP50Ms: pct(rows.map((x) => x.trip), 50), queueP50Ms: pct(rows.map((x) => x.queue), 50), prefillP50Ms: pct(rows.map((x) => x.prefill), 50) },
    /** Per region of the chosen replica: requests, predicted and actual TTFT p50, predicted queue p50. */
    byRegion: ["near", "mid", "far"].map((region) => {
      const xs = rows.filter((x) => x.region === region);
      return { region, n: xs.length, predictedP50Ms: pct(xs.map((x) => x.predicted), 50), actualP50Ms: pct(xs.map((x) => x.actual), 50), queueP50Ms: pct(xs.map((x) => x.queue), 50) };
    }),
  };
}

const f0 = (x: number | null | undefined) => (x === null || x === undefined || !Number.isFinite(x) ? "–" : x.toFixed(0));
const f2 = (x: number | null | undefined) => (x === null || x === undefined || !Number.isFinite(x) ? "–" : x.toFixed(2));
const share = (f: PhaseFigures) => ["near", "mid", "far"].map((r) => `${Math.round((100 * (f.byRegion[r] ?? 0)) / Math.max(1, f.ok))}`).join(" / ");

const runs: ArmRun[] = [];
const started = Date.now();
const machine = { cpus: cpus().length, loadavg1mAtStart: loadavg()[0]! };
console.log(
  `regions: ${LOCATIONS.length} edge isolates (${LOCATIONS.join(", ")}); replicas near/mid/far ${LAYOUT.join("/")} behind relays of ${DELAYS.join("/")} ms one way; ` +
    `prompt ${PROMPT_TOKENS} tokens × ${PREFILL_TOKEN_US} µs = ${PREFILL_MS.toFixed(0)} ms of prefill; near capacity ${NEAR_CAPACITY.toFixed(1)} req/s; ` +
    `unsaturated ${UNSAT_RATE.toFixed(1)} req/s, overload ${OVERLOAD_RATE.toFixed(1)} req/s; ${SEEDS} seed(s); arms ${ARMS.join(", ")}; load average ${machine.loadavg1mAtStart.toFixed(2)}`,
);
const sloRuns: SloRun[] = [];
try {
  for (let seed = 1; seed <= SEEDS; seed++) {
    for (const arm of ONLY.has("main") ? ARMS : []) {
      const r = await runArm(arm, seed);
      runs.push(r);
      const u = phaseFigures(r.sent.filter((x) => x.phase === "unsat"));
      const o = phaseFigures(r.sent.filter((x) => x.phase === "overload"));
      console.log(
        `seed ${seed} ${arm}: unsaturated p50 ${f0(u.p50)} p99 ${f0(u.p99)} ms (${u.ok}/${u.sent}, near/mid/far % ${share(u)}); ` +
          `overload p50 ${f0(o.p50)} p99 ${f0(o.p99)} ms (${o.ok}/${o.sent}, ${share(o)}); ${r.wallS.toFixed(0)} s`,
      );
    }
    for (const arm of ONLY.has("slo") ? SLO_ARMS : []) {
      const began = performance.now();
      const r = await runSloArm(arm, seed);
      sloRuns.push(r);
      const f = sloFigures(r);
      console.log(`seed ${seed} SLO ${arm}: ${f.met}/${f.sent} met their SLO (${f.classes.map((c) => `${c.name} ${c.met}/${c.sent}`).join(", ")}), ${f.throughputRps.toFixed(1)} req/s; ${((performance.now() - began) / 1000).toFixed(0)} s`);
    }
  }
} finally {
  current?.stack.killAll();
  rmSync(root, { recursive: true, force: true });
}

if (values.dump) {
  const all: { arm: string; seed: number; sent: Sent[]; lines: Map<string, EdgeLine> }[] = [
    ...runs.map((r) => ({ arm: r.arm as string, seed: r.seed, sent: [...r.sent, ...(r.prefix?.sent ?? [])], lines: r.lines })),
    ...sloRuns.map((r) => ({ arm: `slo-${r.arm}`, seed: r.seed, sent: r.sent, lines: r.lines })),
  ];
  const rows = all.flatMap((r) =>
    r.sent.map((x) => {
      const l = r.lines.get(x.id);
      return JSON.stringify({ arm: r.arm, seed: r.seed, n: x.n, phase: x.phase, isolate: x.isolate, sentMs: Math.round(x.sentAt - r.sent[0]!.sentAt), status: x.status, replica: x.replica, ttftMs: Math.round(x.ttftMs), attempts: l?.attempts, predicted: l?.ttft_predicted_ms, trip: l?.ttft_trip_ms, queue: l?.ttft_queue_ms, prefill: l?.ttft_prefill_ms, ...("sloMs" in x && { slo: x.sloMs }), ...(x.error && { error: x.error }) });
    }),
  );
  writeFileSync(values.dump, `${rows.join("\n")}\n`);
  console.log(`dumped ${rows.length} requests to ${values.dump}`);
}

const arms: RegionArm[] = runs.map((r) => {
  const kill = killFigures(r);
  const prefix = prefixFigures(r);
  const direct = r.direct.length ? { directNear: { n: r.direct.length, p50: pct(r.direct, 50) } } : {};
  return { arm: r.arm, seed: r.seed, ...direct, unsat: phaseFigures(r.sent.filter((x) => x.phase === "unsat")), overload: phaseFigures(r.sent.filter((x) => x.phase === "overload")), ...(kill && { kill }), ...(prefix && { prefix }) };
});
const targets = regionTargets(arms);

// The near region's throughput while nearest-only overloads it: answers whose first token came within the overload window, per second.
const nearThroughput = runs
  .filter((r) => r.arm === "nearest_only")
  .map((r) => {
    const start = Math.min(...r.sent.filter((x) => x.phase === "overload").map((x) => x.sentAt));
    const end = start + T.overload * 1000;
    const served = r.sent.filter((x) => ok(x) && x.region === "near" && x.firstAt >= start && x.firstAt < end).length;
    return { seed: r.seed, rps: served / T.overload };
  });
const latencyRuns = runs.filter((r) => r.arm === "latency");
const prediction = latencyRuns.map((r) => ({ seed: r.seed, all: predictionFigures(r, ["unsat", "kill", "overload"]), unsat: predictionFigures(r, ["unsat"]), overload: predictionFigures(r, ["overload"]) }));
if (runs.length) {
  console.log("\n### TTFT at the client, ms (unsaturated and near region at 2× its capacity)\n");
  console.log(
    markdownTable(
      ["arm", "seed", "unsat ok/sent", "p50", "p90", "p99", "near / mid / far %", "overload ok/sent", "p50", "p90", "p99", "near / mid / far %", "edge CPU ms/req"],
      arms.map((a) => {
        const r = runs.find((x) => x.arm === a.arm && x.seed === a.seed)!;
        const u = a.unsat!;
        const o = a.overload!;
        return [a.arm, a.seed, `${u.ok}/${u.sent}`, f0(u.p50), f0(u.p90), f0(u.p99), share(u), `${o.ok}/${o.sent}`, f0(o.p50), f0(o.p90), f0(o.p99), share(o), f2(r.edgeCpuMsPerRequest)];
      }),
      "lrrrrrrrrrrrr",
    ).join("\n"),
  );
  for (const a of arms.filter((x) => x.directNear)) {
    const n = arms.find((x) => x.arm === "nearest_only" && x.seed === a.seed)?.unsat;
    console.log(`seed ${a.seed}: the nearest region's ideal TTFT p50 ${f0(a.directNear!.p50)} ms (a near replica served directly, one request at a time, ${a.directNear!.n} requests; no edge hop); nearest-only's unsaturated p50 ${f0(n?.p50)} ms`);
  }
  for (const t of nearThroughput) {
    console.log(`nearest-only, seed ${t.seed}: the near region served ${t.rps.toFixed(1)} req/s while offered ${OVERLOAD_RATE.toFixed(1)} (first tokens within the overload window): its measured capacity, against ${NEAR_CAPACITY.toFixed(1)} stated`);
  }
  
  const killed = arms.filter((a) => a.kill);
  if (killed.length) {
    console.log(`\n### Near region killed (SIGKILL of its ${LAYOUT[0]} replicas ${T.killAt} s into the phase, restarted ${T.restartAt} s in; ${UNSAT_RATE.toFixed(1)} req/s)\n`);
    console.log(
      markdownTable(
        ["arm", "seed", "sent after the kill", "failed", "retried (edge log)", "last sent touching the dead region, ms after", "first in next region, any attempt, ms", "failover: first chosen in next region, ms", "restart → registered, ms", "registered → first near, ms", `near share, last ${END_WINDOW_S} s`],
        killed.map((a) => {
          const k = a.kill!;
          return [a.arm, a.seed, k.sentAfterKill, k.failedAfterKill, k.retriedAfterKill, f0(k.lastTouchedDeadMs), f0(k.firstNextMs), f0(k.failoverMs), f0(k.registeredMs), f0(k.backMs), `${f0(100 * k.endNearShare)} % of ${k.endSent}`];
        }),
        "lrrrrrrrrrr",
      ).join("\n"),
    );
  }
  
  const withPrefix = arms.filter((a) => a.prefix);
  if (withPrefix.length) {
    console.log(`\n### A prefix held in the far region (${PREFIX_GROUPS} groups per length, each prefix prefilled on the far region's first replica, then one request of each through the edge, one at a time; the others hold none of it)\n`);
    console.log(
      markdownTable(
        ["arm", "seed", "prompt", "prefix tokens", "prefill it saves, ms", "extra trip to the holder, ms", "answered / sent", "sent to the holder", "TTFT p50 ms", "predicted p50 ms (latency arm)"],
        withPrefix.flatMap((a) =>
          (["short", "long"] as const).map((which) => {
            const c = a.prefix![which];
            const run = runs.find((r) => r.arm === a.arm && r.seed === a.seed)!;
            const predicted = run.prefix!.sent.filter((x) => x.long === (which === "long") && ok(x)).flatMap((x) => run.lines.get(x.id)?.ttft_predicted_ms ?? []);
            return [a.arm, a.seed, which, PREFIX_CHARS[which === "long" ? 1 : 0] + TEMPLATE_PREFIX_TOKENS, f0(c.savedMs), f0(a.prefix!.extraTripMs), `${c.ok}/${c.sent}`, `${c.toHolder} of ${c.ok}`, f0(c.p50), predicted.length ? f0(pct(predicted, 50)) : "–"];
          }),
        ),
        "lrlrrrrrrr",
      ).join("\n"),
    );
  }
  
  if (prediction.length) {
    console.log("\n### Prediction quality (latency arm: the edge's ttft_predicted_ms for the replica it chose against the client's TTFT; stated, not a target)\n");
    console.log(
      markdownTable(
        ["seed", "phases", "requests (with a prediction / answered)", "|error| p50 ms", "p90 ms", "|error| / TTFT p50", "p90", "predicted − actual p50 ms", "predicted p50", "actual p50", "trip / queue / prefill p50 ms"],
        prediction.flatMap((p) =>
          (["unsat", "overload", "all"] as const).map((k) => {
            const x = p[k];
            return [p.seed, k === "all" ? "all measured" : k === "unsat" ? "unsaturated" : "overload", `${x.n}/${x.answered}`, f0(x.absP50Ms), f0(x.absP90Ms), f2(x.fracP50), f2(x.fracP90), f0(x.signedP50Ms), f0(x.predictedP50Ms), f0(x.actualP50Ms), `${f0(x.parts.tripP50Ms)} / ${f0(x.parts.queueP50Ms)} / ${f0(x.parts.prefillP50Ms)}`];
          }),
        ),
      ).join("\n"),
    );
    console.log(`\nThe trip each isolate learnt (latency arm, its edge log's ttft_trip_ms p50 by the chosen replica's region, ms; the relays' round trips are ${DELAYS.map((d) => 2 * d).join(" / ")}):\n`);
  console.log(
    markdownTable(
      ["seed", "isolate", "near", "mid", "far"],
      latencyRuns.flatMap((r) =>
        LOCATIONS.map((loc, i) => [
          r.seed,
          loc,
          ...["near", "mid", "far"].map((region) => {
            const trips = [...r.sent, ...(r.prefix?.sent ?? [])].filter((x) => x.isolate === i && x.region === region && ok(x)).flatMap((x) => r.lines.get(x.id)?.ttft_trip_ms ?? []);
            return trips.length ? `${f0(pct(trips, 50))} (${trips.length})` : "–";
          }),
        ]),
      ),
      "llrrr",
    ).join("\n"),
  );
  console.log("\nBy the chosen replica's region (predicted against actual TTFT p50, ms; the predicted queue p50):\n");
    console.log(
      markdownTable(
        ["seed", "phase", "near: n, predicted / actual, queue", "mid", "far"],
        prediction.flatMap((p) =>
          (["unsat", "overload"] as const).map((k) => [p.seed, k === "unsat" ? "unsaturated" : "overload", ...p[k].byRegion.map((b) => (b.n ? `${b.n}: ${f0(b.predictedP50Ms)} / ${f0(b.actualP50Ms)}, ${f0(b.queueP50Ms)}` : "–"))]),
        ),
        "lllll",
      ).join("\n"),
    );
  }
}

const sloArms: SloArm[] = sloRuns.map((r) => ({ arm: r.arm, seed: r.seed, slo: sloFigures(r) }));
if (sloArms.length) {
  console.log(
    `\n### SLO attainment (near replicas: ${SLO_REPLICAS.fast} at ${PREFILL_TOKEN_US} µs a token, ${SLO_REPLICAS.slow} at ${SLO_SLOW * PREFILL_TOKEN_US}; half the requests x-slo-ttft-ms ${SLO_CLASSES[0].ttftMs}, half ${SLO_CLASSES[1].ttftMs}; ${SLO_RATE.toFixed(1)} req/s, ${Math.round(100 * SLO_LOAD)} % of the fleet's ${SLO_CAPACITY.toFixed(1)}; ${SLO_T.window} s after ${SLO_T.warmup} s)\n`,
  );
  console.log(
    markdownTable(
      ["arm", "seed", "met / sent", "attainment", ...SLO_CLASSES.flatMap((c) => [`${c.name} (${c.ttftMs} ms) met`, "TTFT p50", "on fast replicas"]), "ended in the window, req/s"],
      sloArms.map((a) => [a.arm, a.seed, `${a.slo.met}/${a.slo.sent}`, f2(a.slo.met / a.slo.sent), ...a.slo.classes.flatMap((c) => [`${c.met}/${c.sent}`, f0(c.p50), `${c.toFast}`]), a.slo.throughputRps.toFixed(1)]),
    ).join("\n"),
  );
}
const sloTargetList = sloArms.length ? sloTargets(sloArms) : [];
const allTargets = [...(runs.length ? targets : []), ...sloTargetList];

console.log("\n### Targets (per seed)\n");
console.log(
  markdownTable(
    ["target", "per seed", "mean", "verdict"],
    allTargets.map((t) => {
      const j = t.judged;
      const seeds = j.each.map((v, i) => `seed ${i + 1}: ${v === null ? "not judged" : v >= Number.MAX_VALUE ? "never" : v.toFixed(2)}${j.missed.includes(i) ? " (miss)" : ""}`).join(", ");
      return [t.name, seeds, Number.isFinite(j.mean) && j.mean < Number.MAX_VALUE ? j.mean.toFixed(2) : "–", `**${j.met === null ? `NOT JUDGED (${j.why})` : j.met ? "MET" : "MISS"}**`];
    }),
    "lllr",
  ).join("\n"),
);
console.log(
  `\nNotes: one loopback host: every edge isolate sees the same delay to a replica (the relay cannot tell isolates apart), so the second location ("${LOCATIONS[1]}") shows isolates agreeing, not a different geometry. ` +
    (runs.length
      ? `At ${OVERLOAD}× the near region's capacity at most 1/${OVERLOAD} of the requests can be served there, so any arm's p50 is at best about the next region's TTFT; with equal capacity per region (--layout ${LAYOUT.join(",")}), load-only's p50 is the mid region's too. ` +
        `Phases: warm-up ${T.warmup} s, unsaturated ${T.unsat} s, kill ${T.kill} s, overload ${T.overload} s. `
      : "The main scenarios are not in this run (--only main). ") +
    (ONLY.has("slo") ? "" : "SLO attainment (two x-slo-ttft-ms classes on replicas of two prefill rates, latency against prefix_cache) is not in this run: --only main,slo (or slo). ") +
    `${machine.cpus} CPUs, load average ${machine.loadavg1mAtStart.toFixed(2)} at start; run took ${((Date.now() - started) / 1000).toFixed(0)} s.`,
);

const counts: ArmCount[] = runs.flatMap((r) => {
  const phases = (["warmup", "unsat", "kill", "overload"] as PhaseName[]).flatMap((phase) => {
    const rs = r.sent.filter((x) => x.phase === phase);
    if (rs.length === 0) return [];
    // The kill's victims (streams on the killed replicas, requests sent while the edge learnt they were dead) are what the phase measures.
    return [{ arm: `${r.arm} seed ${r.seed} ${phase}`, requests: rs.length, ok: rs.filter(ok).length, ...(phase === "kill" && { tolerance: 0.25 }) }];
  });
  const p = r.prefix?.sent;
  return p?.length ? [...phases, { arm: `${r.arm} seed ${r.seed} prefix`, requests: p.length, ok: p.filter(ok).length }] : phases;
});
for (const r of sloRuns) counts.push({ arm: `SLO ${r.arm} seed ${r.seed}`, requests: r.sent.length, ok: r.sent.filter(ok).length });
console.log(
  `wrote ${writeResult(
    "regions",
    {
      quick,
      machine,
      setup: { locations: LOCATIONS, edgeCoordinates: EDGE_COORDINATES, regions: REGIONS, promptTokens: PROMPT_TOKENS, prefillTokenUs: PREFILL_TOKEN_US, prefillMs: PREFILL_MS, tokens: TOKENS, decodeMs: DECODE_MS, slots: SLOTS, nearCapacity: NEAR_CAPACITY, unsatRate: UNSAT_RATE, overloadRate: OVERLOAD_RATE, phases: T },
      arms,
      prediction,
      nearThroughput,
      slo: { setup: { classes: SLO_CLASSES, replicas: SLO_REPLICAS, slowFactor: SLO_SLOW, load: SLO_LOAD, capacity: SLO_CAPACITY, rate: SLO_RATE, phases: SLO_T }, arms: sloArms },
      targets: allTargets.map((t) => ({ name: t.name, ...t.judged })),
      scenarios: [...ONLY],
    },
    { quick, ...(values.out ? { out: values.out } : {}), arms: counts },
  )}`,
);
