/**
 * Issue 14, "Prove it": the routing state plane at ≥ 2,000 replicas per
 * deployment, single routing object against routing shards + relay, side by
 * side in one run of the real local stack.
 *
 *   npx tsx bench/state-plane/state-plane.ts [--shape node|replica] [--sims 2048] [--isolates 8] [--stacks 2|1] [--window-s 10]
 *                                [--rounds 5] [--rps 200] [--poll-ms 50] [--change-rate 0.1] [--quick] [--out FILE]
 *
 * Two public "text" deployments from bench/state-plane/fixtures/, each with 3
 * real reference replicas and --isolates edge isolates (LocalStack edgeIsolates):
 *  - single:  routing {shards: 1, relay: false}: every isolate asks the one object;
 *  - sharded: routing {shards: 3, relay: true} (docs/scaling.md: ~1 shard per 100
 *    busy nodes; 2,048 replicas on 256 nodes of 8).
 * Both get the same report shape (--shape, below), so the difference is the design's.
 * workerd runs all its isolates and objects on one thread, and the single
 * design's control traffic alone (~2,000 signed POSTs/s) takes most of a core:
 * in one process it would slow every measurement of the sharded design too.
 * So by default (--stacks 2) each design has its own stack, one workerd process
 * with its own isolates and objects, from the same functions folder, as the two
 * would not share a thread on Cloudflare; --stacks 1 serves both from one
 * workerd (its isolates sending to both deployments), to show that coupling.
 * Around them, two child processes (so neither shares this one's event loop):
 *  - bench/state-plane/state-plane-sim.ts: --sims simulated replicas per deployment speaking
 *    the signed protocol through the deployment's isolates, at the shipped
 *    cadence (src/replica/report-cadence.ts). --shape node: 8 per node, one
 *    NodeReportMessage per node per heartbeat or coalesced change; --shape
 *    replica: each replica reports for itself. A quarter of the senders idle; --change-rate of the
 *    others change load each second. Its HTTP sink answers for all of them.
 *  - bench/state-plane/state-plane-load.ts: plain GETs of /single and /sharded, --concurrency
 *    loops per isolate, at most --rps per deployment.
 * Measured:
 *  1. in process, before the stacks start: snapshot bytes and isolate CPU per
 *     refresh at 100, 2,000 and 10,000 replicas (bench/state-plane/state-plane-micro.ts);
 *  2. a steady window (--window-s): calls/s on every routing shard and the relay
 *     from the objects' own counters (GET /-/deployments/:name before and after),
 *     and Durable Object calls (snapshot + relay calls) per 1,000 plain requests;
 *  3. event rounds (--rounds per deployment) of four simulated replicas held by
 *     every isolate's view: a load change of a loaded replica (its sender stays
 *     busy: the cadence's 1 s busy window), a load change of an idle one (the
 *     250 ms window), a death (it stops reporting, its sink drops connections)
 *     and a drain (state "draining", deregister --drain-hold-ms later). Each
 *     isolate's GET /-/deployments/:name/view is polled every --poll-ms until all
 *     show it, timed by the isolate's own clock (`at`) from the event. For the
 *     sharded design (bounded views, a sample rotating every 10 s) a round starts
 *     early in a rotation slot;
 *  4. a drain of one real replica per deployment (SIGTERM: it reports draining,
 *     finishes, deregisters and exits), with one stream held on it so that it drains
 *     for ~2.5 s: the same polling, and whether it served any request sent after the
 *     drain (responses name their replica).
 * Prints markdown tables with the targets as MET/MISS and writes
 * bench/results/state-plane.json. Every child process is stopped at the end.
 */
import { fork, type ChildProcess } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { cpus, loadavg, tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs } from "node:util";
import { judgeNoneServed } from "../shared/judge.ts";
import { requireServed, writeResult } from "../shared/result-file.ts";
import { per1000Target } from "../shared/bench-targets.ts";
import { markdownTable, verdict } from "../shared/table.ts";
import { LocalStack } from "../../src/local/stack.ts";
import { Header, dispatchSignature } from "../../src/protocol/index.ts";
import { RELAYED_SNAPSHOT_TTL_MS, SNAPSHOT_TTL_MS } from "../../src/proxy/serve/view.ts";
import { BUSY_CHANGE_REPORT_DELAY_MS, CHANGE_REPORT_DELAY_MS } from "../../src/replica/report-cadence.ts";
import { VIEW_MAX_REPLICAS, VIEW_ROTATE_MS } from "../../src/state/bounded-view.ts";
import { STALE_AFTER_MS } from "../../src/state/membership.ts";
import { RELAY_TTL_MS } from "../../src/state/relay-cadence.ts";
import type { RouterStats } from "../../src/state/deployment-router.ts";
import { CLK_TCK, cpuSeconds, workerdPid } from "../shared/load-tools.ts";
import { measureRefresh, type MicroRow } from "./state-plane-micro.ts";
import type { LoadCounts } from "./state-plane-load.ts";
import type { EventReply, SimStats } from "./state-plane-sim.ts";

const root = resolve(dirname(fileURLToPath(import.meta.url)), "../..");
const { values } = parseArgs({
  options: {
    sims: { type: "string", default: "2048" },
    "per-node": { type: "string", default: "8" },
    isolates: { type: "string", default: "8" },
    "window-s": { type: "string", default: "10" },
    rounds: { type: "string", default: "5" },
    "poll-ms": { type: "string", default: "50" },
    "change-rate": { type: "string", default: "0.1" },
    "drain-hold-ms": { type: "string", default: "2000" },
    concurrency: { type: "string", default: "1" },
    stacks: { type: "string", default: "2" },
    rps: { type: "string", default: "200" },
    shape: { type: "string", default: "node" },
    quick: { type: "boolean", default: false },
    out: { type: "string" },
  },
});
const quick = values.quick;
const SIMS = Number(values.sims);
const PER_NODE = Number(values["per-node"]);
const ISOLATES = Number(values.isolates);
const WINDOW_S = quick ? Math.min(5, Number(values["window-s"])) : Number(values["window-s"]);
const ROUNDS = quick ? Math.min(3, Number(values.rounds)) : Number(values.rounds);
const POLL_MS = Number(values["poll-ms"]);
const CHANGE_RATE = Number(values["change-rate"]);
const DRAIN_HOLD_MS = Number(values["drain-hold-ms"]);
const CONCURRENCY = Number(values.concurrency);
const STACKS = Number(values.stacks);
const RPS = Number(values.rps);
if (STACKS !== 1 && STACKS !== 2) throw new Error("--stacks is 1 or 2");
/**
 * The report shape, the same for both designs, so that single against sharded is the
 * sharding's gain alone: "node" (one NodeReportMessage per node of --per-node replicas,
 * as the agent sends) or "replica" (each replica reports for itself, as the reference
 * replica does). Node reports work with one routing object too; until 2026-12 the single
 * design got per-replica reports and the sharded one node reports, and the headline
 * (1,572 against 91 calls/s) credited an ~8× batching gain to sharding. Run both shapes
 * to see each gain: single/replica against single/node is the batching's.
 */
const SHAPE = values.shape as "node" | "replica";
if (SHAPE !== "node" && SHAPE !== "replica") throw new Error("--shape is node or replica");
const REAL_REPLICAS = 3;
const WARMUP_S = 3;
/**
 * Bounds on the run (a machine busy with other work slows every step): no
 * round starts after SOFT_LIMIT_MS, and at HARD_LIMIT_MS the run stops its
 * children and exits with what it has. Each admin and view request may take
 * REQUEST_TIMEOUT_MS.
 */
const SOFT_LIMIT_MS = quick ? 150_000 : 240_000;
const HARD_LIMIT_MS = quick ? 240_000 : 360_000;
const REQUEST_TIMEOUT_MS = 20_000;
/** A sampled view draws a new sample this often. */
const ROTATE_MS = VIEW_ROTATE_MS;
/** The design's cadences this run measured (src/ constants), printed with the results. */
const CADENCES = {
  CHANGE_REPORT_DELAY_MS,
  BUSY_CHANGE_REPORT_DELAY_MS,
  STALE_AFTER_MS,
  SNAPSHOT_TTL_MS,
  RELAY_TTL_MS,
  RELAYED_SNAPSHOT_TTL_MS,
  VIEW_MAX_REPLICAS,
  VIEW_ROTATE_MS,
};
const TARGETS = { maxObjectCallsPerS: 500, deathMs: 3_000, drainMs: 1_000, loadChangeMs: 1_500, doCallsPer1000: 5 };

const SHAPE_WORDS = SHAPE === "node" ? `node reports, ${values["per-node"]} replicas a node` : "per-replica reports";
const DESIGNS = [
  { name: "single", path: "/single", mode: SHAPE, what: `1 routing object, no relay (${SHAPE_WORDS})` },
  { name: "sharded", path: "/sharded", mode: SHAPE, what: `3 routing shards + relay (${SHAPE_WORDS})` },
];

const log = (line: string) => console.error(`[state-plane] ${line}`);
/** All CPUs' busy and total time so far, seconds (/proc/stat): how loaded the machine is, ours or not. */
function machineCpu(): { busy: number; total: number } {
  const f = readFileSync("/proc/stat", "utf8").split("\n")[0]!.trim().split(/\s+/).slice(1).map(Number);
  const total = f.reduce((a, b) => a + b, 0);
  const idle = (f[3] ?? 0) + (f[4] ?? 0);
  return { busy: (total - idle) / CLK_TCK, total: total / CLK_TCK };
}
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const started = Date.now();
const machine = { cpus: cpus().length, loadavg1mAtStart: Number(loadavg()[0]!.toFixed(2)) };

// --- children: IPC with request ids ---------------------------------------------

interface Child {
  proc: ChildProcess;
  call<T>(msg: object, timeoutMs?: number): Promise<T>;
}

let nextRef = 1;
function forkChild(script: string): Child {
  const proc = fork(join(root, script), [], { execArgv: ["--import", "tsx"], stdio: ["ignore", "inherit", "inherit", "ipc"] });
  const waiting = new Map<number, (m: unknown) => void>();
  proc.on("message", (m) => {
    const ref = (m as { ref?: number }).ref;
    if (ref !== undefined) waiting.get(ref)?.(m);
    waiting.delete(ref ?? -1);
  });
  return {
    proc,
    call<T>(msg: object, timeoutMs = 120_000): Promise<T> {
      const ref = nextRef++;
      return new Promise<T>((resolveCall, reject) => {
        const timer = setTimeout(() => reject(new Error(`${script}: no answer to ${JSON.stringify(msg).slice(0, 80)}`)), timeoutMs);
        waiting.set(ref, (m) => {
          clearTimeout(timer);
          const err = (m as { error?: string }).error;
          if (err) reject(new Error(`${script}: ${err}`));
          else resolveCall(m as T);
        });
        proc.send({ ...msg, ref });
      });
    },
  };
}

// --- the stack ------------------------------------------------------------------

// Request logs off unless asked for: one JSON line per request from 8 isolates would be most of the log pipe's work here.
process.env.SWITCHYARD_REQUEST_LOGS ??= "off";
const work = mkdtempSync(join(tmpdir(), "sy-state-plane-"));
const stackLog: string[] = [];
/** One stack per design (--stacks 2), or one for both; each design starts its real replicas in its own. */
const stacks = Array.from(
  { length: STACKS },
  (_, k) =>
    new LocalStack({
      port: 0,
      functionsDir: join(root, "bench/state-plane/fixtures"),
      stateDir: join(work, `state-${k}`),
      freshState: true,
      edgeIsolates: ISOLATES,
      replicas: Object.fromEntries(DESIGNS.map((d, i) => [d.name, STACKS === 1 || i === k ? REAL_REPLICAS : 0])),
      log: (l) => stackLog.push(`[stack ${k}] ${l}`),
    }),
);
const stackOf = (design: string) => stacks[STACKS === 1 ? 0 : DESIGNS.findIndex((d) => d.name === design)]!;
setInterval(() => stackLog.splice(0, Math.max(0, stackLog.length - 200)), 2_000).unref();
let sim: Child | undefined;
let load: Child | undefined;
process.on("exit", () => {
  // By PID, only what this run started.
  sim?.proc.kill("SIGKILL");
  load?.proc.kill("SIGKILL");
  for (const s of stacks) s.killAll();
  rmSync(work, { recursive: true, force: true });
});
for (const sig of ["SIGINT", "SIGTERM"] as const) process.on(sig, () => process.exit(130));

const auth = (design: string) => ({ authorization: `Bearer ${stackOf(design).adminSecret}` });

/** What this bench reads of a routing object's stats (the admin route's `router` and its `shards`). */
type ShardStats = Pick<RouterStats, "snapshotCalls" | "reports" | "nodeReports" | "registrations" | "members" | "fresh" | "calls">;
interface AdminState {
  router: ShardStats & { shards: ShardStats[] };
  relay: { calls: number; refreshes: number; replicas: number } | null;
  at: number;
}
async function admin(name: string): Promise<AdminState> {
  const res = await fetch(`${stackOf(name).workerdUrl}/-/deployments/${name}`, { headers: auth(name), signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  if (!res.ok) throw new Error(`GET /-/deployments/${name}: ${res.status} ${await res.text()}`);
  const body = (await res.json()) as Omit<AdminState, "at">;
  return { router: body.router, relay: body.relay, at: Date.now() };
}

interface ViewEntry {
  id: string;
  seq: number;
  state: string;
  expiresInMs: number;
}
interface ViewDoc {
  at: number;
  byId: Map<string, ViewEntry>;
}
async function viewText(isolate: number, name: string): Promise<string> {
  const res = await fetch(`${stackOf(name).edgeUrls[isolate]}/-/deployments/${name}/view`, { headers: auth(name), signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS) });
  if (!res.ok) throw new Error(`view of ${name} at isolate ${isolate}: ${res.status}`);
  return res.text();
}
/** One isolate's whole view. */
async function view(isolate: number, name: string): Promise<ViewDoc> {
  const body = JSON.parse(await viewText(isolate, name)) as { at: number; replicas: ViewEntry[] };
  return { at: body.at, byId: new Map(body.replicas.map((r) => [r.id, r])) };
}
/**
 * Only the entries of `ids` in one isolate's view: found in the JSON text, not
 * parsed whole (a 2,000-replica view is ~400 KB, and the rounds poll 8 of them
 * every POLL_MS). describe()'s entries are flat objects that start with "id".
 */
async function viewOf(isolate: number, name: string, ids: readonly string[]): Promise<ViewDoc> {
  const text = await viewText(isolate, name);
  const at = Number(/"at":(\d+)/.exec(text.slice(0, 300))?.[1]);
  const byId = new Map<string, ViewEntry>();
  for (const id of ids) {
    const i = text.indexOf(`{"id":${JSON.stringify(id)},`);
    if (i >= 0) byId.set(id, JSON.parse(text.slice(i, text.indexOf("}", i) + 1)) as ViewEntry);
  }
  return { at, byId };
}
const allViews = (name: string, which: readonly number[]) => Promise.all(which.map((i) => view(i, name)));

// --- events ---------------------------------------------------------------------

/**
 * "load change (busy)": a loaded replica's load changes (its sender stays busy, so the
 * cadence coalesces until 1 s after its last report); "load change (idle → busy)": an idle
 * sender gets load (told after the 250 ms window).
 */
type EventKind = "load change (busy)" | "load change (idle → busy)" | "death" | "drain";
const EVENT_KINDS: readonly EventKind[] = ["load change (busy)", "load change (idle → busy)", "death", "drain"];
const isLoadChange = (k: string) => k.startsWith("load change");
interface EventResult {
  design: string;
  kind: EventKind | "drain (real replica)";
  replica: string;
  /** Isolates whose view held the replica when the event happened (the others do not route to it). */
  holders: number;
  /** Isolates that showed it, and the slowest one's delay: when ALL had, ms after the event. */
  seenBy: number;
  allSeenMs: number | null;
  perIsolateMs: (number | null)[];
  /** Death: ms from the replica's last report to the event. */
  sinceLastReportMs?: number;
  /** Real drain: responses it served to requests sent after the drain, and more than 1 s after. */
  servedAfter?: number;
  servedAfter1s?: number;
  /** Real drain: requests to its deployment sent from 1 s after the drain until the replica exited, and how long it ran after the drain. */
  sentInWindow?: number;
  aliveAfterDrainMs?: number;
  pollEveryMs?: number;
  note?: string;
}

const shows: Record<EventKind, (e: ViewEntry | undefined, seq: number) => boolean> = {
  "load change (busy)": (e, seq) => e !== undefined && e.seq >= seq,
  "load change (idle → busy)": (e, seq) => e !== undefined && e.seq >= seq,
  death: (e) => e === undefined || e.expiresInMs <= 0,
  drain: (e) => e === undefined || e.state === "draining",
};

interface Watch {
  kind: EventKind;
  design: string;
  replica: string;
  at: number;
  seq: number;
  holders: number[];
  seen: Map<number, number>;
  /** Load change only: isolates whose view dropped the replica before showing the change (a sample rotated). */
  left: Set<number>;
  /** Death only: since when (the isolate's `at`) each isolate has shown it dead without a break. */
  deadSince: Map<number, number>;
  sinceLastReportMs?: number;
  /** Mean time between two polls of one isolate in the round (the resolution: at least POLL_MS). */
  pollEveryMs?: number;
}

/**
 * Polls each holder's view (each isolate on its own loop, every POLL_MS at
 * most) until every watch is seen by all its holders, or `deadlineMs` after
 * the first event. A watch is seen at the `at` of the first answer showing it;
 * a death at the first answer of its last dead stretch: a replica whose expiry
 * ran out in an isolate's view comes back when a later snapshot still holds a
 * report of it (one sent just before it died, late under load), so a death is
 * final only once the replica is gone from the view.
 */
async function watchUntilSeen(name: string, watches: Watch[], deadlineMs: number): Promise<void> {
  const start = Math.min(...watches.map((w) => w.at));
  const ids = watches.map((w) => w.replica);
  const gaps: number[] = [];
  await Promise.all(
    [...new Set(watches.flatMap((w) => w.holders))].map(async (i) => {
      let lastAt = 0;
      for (;;) {
        const pending = watches.filter((w) => w.holders.includes(i) && !w.seen.has(i) && !w.left.has(i));
        if (pending.length === 0) return;
        if (Date.now() - start > deadlineMs) {
          // Expired but not yet removed when time ran out: dead since then, as far as this isolate routes.
          for (const w of pending) if (w.deadSince.has(i)) w.seen.set(i, w.deadSince.get(i)! - w.at);
          return;
        }
        const polledAt = Date.now();
        const v = await viewOf(i, name, ids);
        if (lastAt) gaps.push(v.at - lastAt);
        lastAt = v.at;
        for (const w of pending) {
          if (v.at < w.at) continue;
          const e = v.byId.get(w.replica);
          if (isLoadChange(w.kind) && e === undefined) w.left.add(i);
          else if (w.kind === "death") {
            if (e !== undefined && e.expiresInMs > 0) w.deadSince.delete(i);
            else if (!w.deadSince.has(i)) w.deadSince.set(i, v.at);
            if (e === undefined) w.seen.set(i, w.deadSince.get(i)! - w.at);
          } else if (shows[w.kind](e, w.seq)) w.seen.set(i, v.at - w.at);
        }
        await sleep(Math.max(0, POLL_MS - (Date.now() - polledAt)));
      }
    }),
  );
  const mean = gaps.length ? gaps.reduce((a, b) => a + b, 0) / gaps.length : NaN;
  for (const w of watches) w.pollEveryMs = mean;
}

function result(w: Watch): EventResult {
  const holders = w.holders.filter((i) => !w.left.has(i));
  const perIsolateMs = holders.map((i) => w.seen.get(i) ?? null);
  const all = perIsolateMs.length > 0 && perIsolateMs.every((x) => x !== null) ? Math.max(...(perIsolateMs as number[])) : null;
  return {
    design: w.design,
    kind: w.kind,
    replica: w.replica,
    holders: holders.length,
    seenBy: perIsolateMs.filter((x) => x !== null).length,
    allSeenMs: all,
    perIsolateMs,
    ...(w.sinceLastReportMs !== undefined ? { sinceLastReportMs: w.sinceLastReportMs } : {}),
    ...(w.pollEveryMs !== undefined ? { pollEveryMs: Math.round(w.pollEveryMs) } : {}),
    // A sampled view can drop it at a rotation (avoided by timing), any view when it expired: its reports were late.
    ...(w.left.size > 0 ? { note: `left ${w.left.size} isolate(s)' views before they showed the change (expired or sampled out)` } : {}),
  };
}

const isolateIndexes = Array.from({ length: ISOLATES }, (_, i) => i);
const used = new Set<string>();

/** Replicas (matching `pick`) held by the most isolates' views now: [id, holders][]. */
function heldByMost(views: ViewDoc[], pick: (id: string, e: ViewEntry) => boolean): [string, number[]][] {
  const holders = new Map<string, number[]>();
  views.forEach((v, i) => {
    for (const [id, e] of v.byId) {
      if (!pick(id, e)) continue;
      let h = holders.get(id);
      if (!h) holders.set(id, (h = []));
      h.push(i);
    }
  });
  return [...holders].sort((a, b) => b[1].length - a[1].length || (a[0] < b[0] ? -1 : 1));
}

/** For a sampled (relay) view: wait until early in a rotation slot, so no rotation falls inside a round. */
async function earlyInSlot(): Promise<void> {
  const offset = Date.now() % ROTATE_MS;
  if (offset >= 1_200 && offset <= 3_000) return;
  await sleep((ROTATE_MS - offset + 1_200) % ROTATE_MS);
}

/** `n` of `ids` held by the most views now, at random among equals: [id, holders][]. */
function pickHeld(views: ViewDoc[], ids: ReadonlySet<string>, n: number): [string, number[]][] {
  const held = heldByMost(views, (id, e) => ids.has(id) && !used.has(id) && e.state === "ready" && e.expiresInMs > 500);
  const out: [string, number[]][] = [];
  while (out.length < n && held.length > 0) {
    const most = held[0]![1].length;
    const top = held.filter((c) => c[1].length === most);
    const pick = top[Math.floor(Math.random() * top.length)]!;
    out.push(pick);
    held.splice(held.indexOf(pick), 1);
  }
  return out;
}

async function simRound(design: (typeof DESIGNS)[number]): Promise<EventResult[]> {
  if (design.name === "sharded") await earlyInSlot();
  const pool = await sim!.call<{ idle: string[]; busy: string[] }>({ cmd: "candidates", deployment: design.name });
  const views = await allViews(design.name, isolateIndexes);
  const [wake] = pickHeld(views, new Set(pool.idle), 1);
  const others = pickHeld(views, new Set(pool.busy), 3);
  if (!wake || others.length < 3) throw new Error(`too few simulated replicas of ${design.name} in view for a round`);
  const chosen: [EventKind, [string, number[]]][] = [
    ["load change (busy)", others[0]!],
    ["load change (idle → busy)", wake],
    ["death", others[1]!],
    ["drain", others[2]!],
  ];
  const command = (kind: EventKind, id: string) =>
    kind === "death" ? { cmd: "kill", id } : kind === "drain" ? { cmd: "drain", id } : { cmd: "change", id, kind: kind === "load change (busy)" ? "busy" : "wake" };
  const watches: Watch[] = await Promise.all(
    chosen.map(async ([kind, [id, holders]]) => {
      used.add(id);
      const r = await sim!.call<EventReply>(command(kind, id));
      return {
        kind,
        design: design.name,
        replica: id,
        at: r.at,
        seq: r.seq,
        holders,
        seen: new Map<number, number>(),
        left: new Set<number>(),
        deadSince: new Map<number, number>(),
        ...(r.lastReportAt !== undefined ? { sinceLastReportMs: r.at - r.lastReportAt } : {}),
      };
    }),
  );
  await watchUntilSeen(design.name, watches, 8_000);
  return watches.map(result);
}

async function realDrain(design: (typeof DESIGNS)[number]): Promise<EventResult> {
  if (design.name === "sharded") await earlyInSlot();
  const views = await allViews(design.name, isolateIndexes);
  const stack = stackOf(design.name);
  const real = [...stack.replicas.values()].filter((r) => r.deployment === design.name).map((r) => r.id);
  const [pick] = heldByMost(views, (id, e) => real.includes(id) && e.state === "ready");
  if (!pick) throw new Error(`no real replica of ${design.name} in any view`);
  const [id, holders] = pick;
  const rp = stack.replicas.get(id)!;
  // A drain with work in progress: one stream held on it keeps it draining for ~2.5 s, so
  // "none served after 1 s" has a window to be judged in (an idle replica exits within
  // ~0.6 s of its drain, and nothing is sent after 1 s while it still runs).
  const held = await holdStream(stack, rp);
  const at = Date.now();
  rp.child.kill("SIGTERM");
  const w: Watch = { kind: "drain", design: design.name, replica: id, at, seq: 0, holders, seen: new Map(), left: new Set(), deadSince: new Map() };
  await watchUntilSeen(design.name, [w], 8_000);
  await rp.exited;
  const exitedAt = Date.now();
  const heldChunks = await held.chunks;
  // Requests sent just before the drain may still be finishing: give them a moment.
  await sleep(1_000);
  const served = await load!.call<{ total: number; after: number; afterPlus1s: number; sentInWindow: number }>({ cmd: "servedBy", id, deployment: design.name, since: at, until: exitedAt });
  return {
    ...result(w),
    kind: "drain (real replica)",
    servedAfter: served.after,
    servedAfter1s: served.afterPlus1s,
    sentInWindow: served.sentInWindow,
    aliveAfterDrainMs: exitedAt - at,
    note: `served ${served.total} requests in all; the stream held through the drain got ${heldChunks} of ${HELD_CHUNKS} chunks`,
  };
}

const HELD_CHUNKS = 25;
/**
 * Starts one stream on a real replica, signed as the edge signs a dispatch (HELD_CHUNKS
 * chunks 100 ms apart), and resolves once its head arrived (the replica admitted it), with
 * the count of chunks it will have got.
 */
async function holdStream(stack: LocalStack, rp: { id: string; deployment: string; url: string }): Promise<{ chunks: Promise<number> }> {
  const target = `/?chunks=${HELD_CHUNKS}&interval_ms=100`;
  const requestId = `drain-hold-${rp.id}`;
  const signature = await dispatchSignature(stack.replicaSecret, { method: "GET", deployment: rp.deployment, target, requestId, replica: rp.id, bodySha256: "" });
  const res = await fetch(`${rp.url}${target}`, { headers: [[Header.requestId, requestId], [Header.deployment, rp.deployment], ...signature] });
  if (res.status !== 200) throw new Error(`the held stream on ${rp.id} answered ${res.status}: ${await res.text()}`);
  // Wrapped: an async function returning the promise itself would wait for the whole stream.
  return { chunks: res.text().then((t) => t.split("\n").filter(Boolean).length) };
}

// --- run ------------------------------------------------------------------------

interface ObjectRow {
  design: string;
  object: string;
  callsPerS: number;
  snapshotCallsPerS: number;
  reportsPerS: number;
  nodeReportsPerS: number;
  registrations: number;
  members: number;
  fresh: number;
}

let micro: MicroRow[] = [];
const objects: ObjectRow[] = [];
const perRequest: { design: string; requests: number; rps: number; snapshotCalls: number; relayCalls: number; doCalls: number; per1000: number; non2xx: number; failed: number }[] = [];
const events: EventResult[] = [];
let simStats: SimStats | undefined;
let windowInfo: { seconds: number; workerdCpuPerS: number[]; benchCpuPerS: number; machineBusyCores: number; replicasCpuPerS: number; simCpuPerS: number; loadCpuPerS: number; simReportsPerS: Record<string, number>; controlPostsPerS: number } | undefined;
let failure: string | undefined;
let roundsCut: string | undefined;
// The backstop: whatever is still running then, the children go (the exit handler) and the run fails.
setTimeout(() => {
  log(`over the ${HARD_LIMIT_MS / 1000} s bound: stopping`);
  process.exit(1);
}, HARD_LIMIT_MS).unref();

try {
  log(`${machine.cpus} CPUs, load average ${machine.loadavg1mAtStart}; ${SIMS} simulated replicas per deployment, ${ISOLATES} isolates`);
  log("micro-measurement: snapshot bytes and isolate CPU per refresh");
  micro = measureRefresh([100, 2_000, 10_000], 3, PER_NODE, quick ? 150 : 300);

  log(`starting ${STACKS} stack(s)`);
  for (const s of stacks) await s.start();
  const pids = stacks.map((_, k) => workerdPid(join(work, `state-${k}`, "workerd.capnp")));
  sim = forkChild("bench/state-plane/state-plane-sim.ts");
  const simStart = await sim.call<{ sink: string; registered: number; ms: number }>(
    {
      cmd: "start",
      config: {
        deployments: await Promise.all(
          DESIGNS.map(async (d) => ({
            name: d.name,
            key: await stackOf(d.name).replicaKey(d.name),
            edges: stackOf(d.name).edgeUrls,
            maxInFlight: 64,
            mode: d.mode,
            replicas: SIMS,
            perNode: PER_NODE,
            maxOngoing: 5,
          })),
        ),
        changeRate: CHANGE_RATE,
        drainHoldMs: DRAIN_HOLD_MS,
        registerConcurrency: 32,
      },
    },
    300_000,
  );
  log(`${simStart.registered} simulated replicas registered in ${simStart.ms} ms (sink ${simStart.sink})`);
  load = forkChild("bench/state-plane/state-plane-load.ts");
  await load.call({ cmd: "start", config: { targets: DESIGNS.map((d) => ({ deployment: d.name, path: d.path, edges: stackOf(d.name).edgeUrls })), concurrency: CONCURRENCY, rps: RPS } });
  log(`request load: ≤ ${RPS} req/s per deployment over ${ISOLATES} isolates × ${CONCURRENCY}; warm-up ${WARMUP_S} s`);
  await sleep(WARMUP_S * 1000);

  // Steady window.
  await sim.call<SimStats>({ cmd: "stats" });
  const before = await Promise.all(DESIGNS.map((d) => admin(d.name)));
  const loadBefore = await load.call<LoadCounts>({ cmd: "counts" });
  const simBefore = await sim.call<SimStats>({ cmd: "stats" });
  const cpu0 = pids.map(cpuSeconds);
  const machine0 = machineCpu();
  const own0 = process.cpuUsage();
  const replicaPids = stacks.flatMap((s) => [...s.replicas.values()].map((r) => r.child.pid!));
  const replicaCpu0 = replicaPids.map(cpuSeconds);
  log(`steady window: ${WINDOW_S} s`);
  await sleep(WINDOW_S * 1000);
  const cpu1 = pids.map(cpuSeconds);
  const machine1 = machineCpu();
  const own = process.cpuUsage(own0);
  const replicaCpu1 = replicaPids.map(cpuSeconds);
  const after = await Promise.all(DESIGNS.map((d) => admin(d.name)));
  const loadAfter = await load.call<LoadCounts>({ cmd: "counts" });
  simStats = await sim.call<SimStats>({ cmd: "stats" });
  const secs = (after[0]!.at - before[0]!.at) / 1000;
  DESIGNS.forEach((d, k) => {
    const b = before[k]!;
    const a = after[k]!;
    const rate = (x: number) => x / secs;
    a.router.shards.forEach((s, i) => {
      const p = b.router.shards[i]!;
      // The admin read between the two calls one snapshot() on each shard.
      objects.push({
        design: d.name,
        object: i === 0 ? `routing object "${d.name}"` : `routing shard "${d.name}#${i}"`,
        callsPerS: rate(s.calls - p.calls - 1),
        snapshotCallsPerS: rate(s.snapshotCalls - p.snapshotCalls - 1),
        reportsPerS: rate(s.reports - p.reports),
        nodeReportsPerS: rate(s.nodeReports - p.nodeReports),
        registrations: s.registrations,
        members: s.members,
        fresh: s.fresh,
      });
    });
    if (a.relay && b.relay) {
      objects.push({
        design: d.name,
        object: `relay "${d.name}@local"`,
        callsPerS: rate(a.relay.calls - b.relay.calls),
        snapshotCallsPerS: rate(a.relay.refreshes - b.relay.refreshes),
        reportsPerS: 0,
        nodeReportsPerS: 0,
        registrations: 0,
        members: a.relay.replicas,
        fresh: a.relay.replicas,
      });
    }
    const snapshotCalls = a.router.snapshotCalls - b.router.snapshotCalls - a.router.shards.length;
    const relayCalls = a.relay && b.relay ? a.relay.calls - b.relay.calls : 0;
    const lb = loadBefore.byDeployment[d.name]!;
    const la = loadAfter.byDeployment[d.name]!;
    const requests = la.ok + la.non2xx - lb.ok - lb.non2xx;
    perRequest.push({
      design: d.name,
      requests,
      rps: requests / secs,
      snapshotCalls,
      relayCalls,
      doCalls: snapshotCalls + relayCalls,
      per1000: (1000 * (snapshotCalls + relayCalls)) / Math.max(1, requests),
      non2xx: la.non2xx - lb.non2xx,
      failed: la.failed - lb.failed,
    });
  });
  const simCalls = (s: SimStats) => Object.values(s.sent).reduce((x, y) => x + y, 0);
  windowInfo = {
    seconds: secs,
    workerdCpuPerS: cpu1.map((c, k) => (c - cpu0[k]!) / secs),
    benchCpuPerS: (own.user + own.system) / 1e6 / secs,
    machineBusyCores: (machine1.busy - machine0.busy) / secs,
    replicasCpuPerS: replicaCpu1.reduce((a, c, k) => a + c - replicaCpu0[k]!, 0) / secs,
    simCpuPerS: simStats.cpuMs / 1000 / secs,
    loadCpuPerS: loadAfter.cpuMs / 1000 / secs,
    simReportsPerS: Object.fromEntries(DESIGNS.map((d) => [d.name, ((simStats!.replicaReports[d.name] ?? 0) - (simBefore.replicaReports[d.name] ?? 0)) / secs])),
    controlPostsPerS: (simCalls(simStats) - simCalls(simBefore)) / secs,
  };
  log(`window done: workerd ${windowInfo.workerdCpuPerS.map((c) => `${(100 * c).toFixed(0)} %`).join(" + ")} CPU, ${windowInfo.controlPostsPerS.toFixed(0)} control POSTs/s`);

  // Event rounds, alternating designs.
  for (let r = 0; r < ROUNDS; r++) {
    if (Date.now() - started > SOFT_LIMIT_MS) {
      roundsCut = `stopped after ${r} of ${ROUNDS} rounds: the run reached its ${SOFT_LIMIT_MS / 1000} s bound`;
      log(roundsCut);
      break;
    }
    for (const d of DESIGNS) {
      log(`round ${r + 1}/${ROUNDS}: ${d.name}`);
      events.push(...(await simRound(d)));
    }
  }
  for (const d of DESIGNS) {
    log(`drain of a real replica: ${d.name}`);
    events.push(await realDrain(d));
  }
} catch (err) {
  failure = String((err as Error).stack ?? err);
  log(`failed: ${failure}\n${stackLog.slice(-30).join("\n")}`);
}

// --- stop everything we started --------------------------------------------------

const finalSim = sim ? await sim.call<SimStats>({ cmd: "stats" }, 10_000).catch(() => undefined) : undefined;
await load?.call({ cmd: "stop" }, 5_000).catch(() => load?.proc.kill("SIGKILL"));
await sim?.call({ cmd: "stop" }, 5_000).catch(() => sim?.proc.kill("SIGKILL"));
for (const s of stacks) await s.stop();

// --- report ---------------------------------------------------------------------

const f = (v: number | null | undefined, d = 0) => (v === null || v === undefined || !Number.isFinite(v) ? "–" : v.toLocaleString("en-US", { minimumFractionDigits: d, maximumFractionDigits: d }));
const quantile = (xs: number[], p: number) => {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.ceil(p * s.length) - 1)]!;
};

interface Target {
  target: string;
  design: string;
  measured: string;
  met: boolean | null;
}
const targets: Target[] = [];
const byDesign = (d: string) => objects.filter((o) => o.design === d);
if (objects.length > 0) {
  const shardedMax = Math.max(...byDesign("sharded").map((o) => o.callsPerS));
  const singleMax = Math.max(...byDesign("single").map((o) => o.callsPerS));
  const fresh = (d: string) => byDesign(d).filter((o) => !o.object.startsWith("relay")).reduce((s, o) => s + o.fresh, 0);
  targets.push({
    target: `sharded: no object above ${TARGETS.maxObjectCallsPerS} calls/s at ≥ 2,000 simulated replicas, while the single object exceeds it`,
    design: "sharded vs single",
    measured: `busiest sharded object ${f(shardedMax)} calls/s with ${f(fresh("sharded"))} fresh replicas; single object ${f(singleMax)} calls/s (${f(fresh("single"))} fresh)`,
    met: fresh("sharded") >= 2_000 && shardedMax <= TARGETS.maxObjectCallsPerS && singleMax > TARGETS.maxObjectCallsPerS,
  });
}
const eventTarget = (kind: EventResult["kind"][], limit: number, name: string) => {
  for (const d of DESIGNS) {
    const es = events.filter((e) => e.design === d.name && kind.includes(e.kind));
    if (es.length === 0) continue;
    const times = es.map((e) => e.allSeenMs).filter((x): x is number => x !== null);
    const unseen = es.length - times.length;
    const max = times.length ? Math.max(...times) : NaN;
    targets.push({
      target: `${name} ≤ ${f(limit)} ms (slowest of ${es.length} events, all isolates)`,
      design: d.name,
      measured: `p50 ${f(quantile(times, 0.5))} ms, max ${f(max)} ms${unseen ? `, ${unseen} not seen by all isolates within 8 s` : ""}`,
      met: unseen === 0 && max <= limit,
    });
  }
};
eventTarget(["death"], TARGETS.deathMs, "death leaves every isolate's view");
eventTarget(["drain", "drain (real replica)"], TARGETS.drainMs, "drain seen (draining or gone) by every isolate");
for (const e of events.filter((x) => x.kind === "drain (real replica)")) {
  // Judged only over requests sent while it still ran, 1 s or more after the drain: once it exited it could serve none.
  const judged = judgeNoneServed(e.servedAfter1s!, e.sentInWindow!);
  targets.push({
    target: "a drained real replica serves no request sent more than 1 s after its drain",
    design: e.design,
    measured: `${e.servedAfter1s} served of ${e.sentInWindow} sent to its deployment from 1 s after the drain until it exited ${f(e.aliveAfterDrainMs!)} ms after it (${e.servedAfter} served of those sent after the drain at all)${judged.why ? `; not judged: ${judged.why}` : ""}`,
    met: judged.met,
  });
}
eventTarget(["load change (idle → busy)"], TARGETS.loadChangeMs, "load change (idle → busy) seen");
eventTarget(["load change (busy)"], TARGETS.loadChangeMs, "load change (busy) seen");
for (const p of perRequest) {
  // Judged over enough requests to show a miss (bench-targets.ts): no requests is not "0 per 1,000".
  const judged = per1000Target(p.doCalls, p.requests, TARGETS.doCallsPer1000);
  targets.push({ target: `plain requests ≤ ${TARGETS.doCallsPer1000} Durable Object calls per 1,000`, design: p.design, measured: `${f(p.per1000, 2)} per 1,000 (${f(p.doCalls)} calls, ${f(p.requests)} requests)${judged.why ? `; not judged: ${judged.why}` : ""}`, met: judged.met });
}

const lines = [
  `## State plane at ${f(SIMS)} simulated replicas per deployment (${ISOLATES} edge isolates ${STACKS === 2 ? "per design, one workerd per design" : "in one workerd serving both designs"}; both designs on ${SHAPE_WORDS})`,
  "",
  ...(failure ? ["**The run failed:** " + failure.split("\n")[0], ""] : []),
  ...(roundsCut ? [`**Rounds cut short:** ${roundsCut}.`, ""] : []),
  "Snapshot bytes and isolate CPU per refresh (in process; Node's V8 for workerd's)",
  "",
  ...markdownTable(
    [
      "replicas",
      "design",
      "replicas in the isolate's view",
      "JSON bytes",
      "V8 bytes",
      "isolate CPU µs / refresh (deserialize + apply)",
      "sender CPU µs (object snapshot / relay view)",
      "relay merge µs",
    ],
    micro.map((m) => [
      f(m.replicas),
      m.design === "single" ? "single object" : "3 shards + relay",
      f(m.viewReplicas),
      f(m.jsonBytes),
      f(m.v8Bytes),
      `${f(m.isolateCpuUs)} (${f(m.deserializeUs)} + ${f(m.applyUs)})`,
      f(m.senderCpuUs),
      f(m.mergeCpuUs),
    ]),
    "rlrrrrrr",
  ),
  "",
  `Calls/s on each object, steady window of ${f(windowInfo?.seconds, 1)} s (objects' own counters)`,
  "",
  ...markdownTable(
    ["design", "object", "calls/s", "snapshot calls/s (relay: refreshes/s)", "replica reports/s", "node reports/s", "members", "fresh"],
    objects.map((o) => [o.design, o.object, `**${f(o.callsPerS)}**`, f(o.snapshotCallsPerS, 1), f(o.reportsPerS), f(o.nodeReportsPerS), f(o.members), f(o.fresh)]),
    "llrrrrrr",
  ),
  "",
  "Durable Object calls per 1,000 plain requests (same window; snapshot calls on the shards + relay calls; reports are control plane, above)",
  "",
  ...markdownTable(
    ["design", "requests", "req/s", "shard snapshot calls", "relay calls", "per 1,000 requests", "calls/s per isolate", "non-2xx", "failed"],
    perRequest.map((p) => [
      p.design,
      f(p.requests),
      f(p.rps),
      f(p.snapshotCalls),
      f(p.relayCalls),
      `**${f(p.per1000, 2)}**`,
      f(p.doCalls / (windowInfo?.seconds ?? NaN) / ISOLATES, 2),
      f(p.non2xx),
      f(p.failed),
    ]),
  ),
  "",
  `Time until every isolate's view shows the event (polled every ${POLL_MS} ms, timed by the isolate's clock), ms`,
  "",
  ...markdownTable(
    ["design", "event", "events", "isolates holding the replica", "p50", "max", "mean poll interval", "notes"],
    DESIGNS.flatMap((d) =>
      [...EVENT_KINDS, "drain (real replica)" as const].flatMap((kind) => {
        const es = events.filter((e) => e.design === d.name && e.kind === kind);
        if (es.length === 0) return [];
        const times = es.map((e) => e.allSeenMs).filter((x): x is number => x !== null);
        const notes = [
          ...(kind === "death" ? [`${f(quantile(es.map((e) => e.sinceLastReportMs ?? NaN), 0.5))} ms median since its last report`] : []),
          ...(kind === "drain (real replica)" ? es.map((e) => `served ${e.servedAfter} requests sent after the drain, ${e.servedAfter1s} after 1 s`) : []),
          ...(times.length < es.length ? [`${es.length - times.length} not seen by all`] : []),
          ...new Set(es.map((e) => e.note).filter((n): n is string => n !== undefined && kind !== "drain (real replica)")),
        ];
        return [
          [
            d.name,
            kind,
            es.length,
            es.map((e) => e.holders).join(", "),
            f(quantile(times, 0.5)),
            f(times.length ? Math.max(...times) : NaN),
            f(es.reduce((a, e) => a + (e.pollEveryMs ?? 0), 0) / es.length),
            notes.join("; "),
          ],
        ];
      }),
    ),
    "llrrrrrl",
  ),
  "",
  "Targets",
  "",
  ...markdownTable(["target", "design", "measured", ""], targets.map((t) => [t.target, t.design, t.measured, `**${verdict(t.met)}**`]), "llll"),
  "",
  ...(windowInfo
    ? [
        `Load during the window: ${f(windowInfo.controlPostsPerS)} signed control POSTs/s from the generator (replica reports carried: ${DESIGNS.map((d) => `${d.name} ${f(windowInfo!.simReportsPerS[d.name])}/s`).join(", ")}; POST p50 ${f(simStats?.latencyP50Ms, 1)} ms, p99 ${f(simStats?.latencyP99Ms, 1)} ms), CPU (% of one core): workerd ${windowInfo.workerdCpuPerS.map((c, k) => `${f(100 * c)} %${STACKS === 2 ? ` (${DESIGNS[k]!.name})` : ""}`).join(", ")}, generator ${f(100 * windowInfo.simCpuPerS)} %, request load ${f(100 * windowInfo.loadCpuPerS)} %, real replicas ${f(100 * windowInfo.replicasCpuPerS)} %, this script ${f(100 * windowInfo.benchCpuPerS)} %; the whole machine was busy ${f(windowInfo.machineBusyCores, 2)} of ${machine.cpus} cores (${f(windowInfo.machineBusyCores - windowInfo.workerdCpuPerS.reduce((a, b) => a + b, 0) - windowInfo.simCpuPerS - windowInfo.loadCpuPerS - windowInfo.replicasCpuPerS - windowInfo.benchCpuPerS, 2)} of them not this run's).`,
      ]
    : []),
  ...(finalSim ? [`Sink: ${f(finalSim.sink.ready)} requests served by simulated replicas, ${f(finalSim.sink.draining)} refused while draining (${f(finalSim.sink.drainingLate)} more than 1 s into the drain), ${f(finalSim.sink.gone)} to dead or departed ones; control failures: ${JSON.stringify(finalSim.failures)}.`] : []),
  `Cadences (src/): ${Object.entries(CADENCES).map(([k, v]) => `${k} ${v}`).join(", ")}.`,
  `${machine.cpus} CPUs shared by ${STACKS === 2 ? `2 workerd processes (one per design, ${ISOLATES} isolates and the objects each)` : `one workerd process (${ISOLATES} isolates and both designs' objects)`}, the generator, the request load, ${2 * REAL_REPLICAS} replica processes and this script; load average at start ${machine.loadavg1mAtStart}; request logs ${process.env.SWITCHYARD_REQUEST_LOGS}; run took ${f((Date.now() - started) / 1000)} s.`,
];
if (!failure) requireServed(perRequest.map((p) => ({ arm: p.design, requests: p.requests, ok: p.requests - p.non2xx - p.failed })));
console.log(lines.join("\n"));
writeResult(
  SHAPE === "node" ? "state-plane" : "state-plane-replica",
  {
      machine,
      options: { shape: SHAPE, stacks: STACKS, rps: RPS, sims: SIMS, perNode: PER_NODE, isolates: ISOLATES, windowS: WINDOW_S, rounds: ROUNDS, pollMs: POLL_MS, changeRate: CHANGE_RATE, drainHoldMs: DRAIN_HOLD_MS, concurrency: CONCURRENCY, realReplicas: REAL_REPLICAS, quick },
      designs: DESIGNS,
      cadences: CADENCES,
      micro,
      objects,
      perRequest,
      events,
      targets,
      window: windowInfo ?? null,
      generator: finalSim ?? null,
      failure: failure ?? null,
      roundsCut: roundsCut ?? null,
      seconds: (Date.now() - started) / 1000,
  },
  { quick, ...(values.out ? { out: resolve(root, values.out) } : {}) },
);
process.exit(failure ? 1 : 0);
