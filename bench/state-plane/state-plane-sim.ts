/**
 * The simulated replicas of bench/state-plane/state-plane.ts: a load generator, run as its
 * own Node process (forked, IPC), that speaks the real signed control protocol
 * for thousands of replicas, and one HTTP sink that answers the requests the
 * edge dispatches to any of them.
 *
 * When each sender reports is the shipped cadence itself (ReportCadence,
 * src/replica/report-cadence.ts: a heartbeat one interval after the last
 * report, load changes coalesced over 250 ms, or until 1 s after the last
 * report while busy, state changes at once, one send at a time), and entries
 * are built by edge-client.ts's reportEntry. Per deployment, `mode` says who sends:
 *  - "replica": each replica reports for itself, as EdgeClient does (register,
 *    a report at once, then its cadence; 409 unknown_replica → register again);
 *  - "node": replicas are grouped `perNode` to a node (registered with `node`),
 *    and the node sends one NodeReportMessage for all of them, as NodeReporter
 *    does (busy while any of them is; entry outcomes unknown_replica → that
 *    replica registers again, drain → it drains).
 * A quarter of the senders (replicas, or whole nodes) stay idle (no load, no
 * churn); the rest carry load, of which `changeRate` per second changes.
 * Control POSTs are spread over the deployment's edge isolates (replica i, or
 * node i, uses isolate i mod N); each deployment has its own bound on POSTs in
 * flight, so one fleet's backlog does not queue the other's messages here.
 *
 * The sink, http://127.0.0.1:<port>/sim/<id>, answers for every simulated
 * replica: 200 "hi" with the replica's load header while it is ready, 503
 * rejected "draining" while it drains (as the reference replica does), and
 * drops the connection once it is dead or has left (as a stopped process
 * would). It does not check dispatch signatures (like replica --accept-unsigned).
 *
 * Commands from the parent (process.send): "start" (config), "change",
 * "kill", "drain", "stats", "stop"; each is answered with a message of the same `ref`.
 */
import { createHmac } from "node:crypto";
import { createServer, type IncomingMessage, type ServerResponse } from "node:http";
import type { Socket } from "node:net";
import {
  ControlPath,
  Header,
  NONCE_HEADER,
  NonceCounter,
  PROTOCOL_VERSION,
  SIGNATURE_HEADER,
  SIGNATURE_SCHEME,
  TIMESTAMP_HEADER,
  formatLoadHeader,
  importReplicaKey,
  signedHeaders,
  stringToSign,
  type Load,
  type SignedParts,
} from "../../src/protocol/index.ts";
import { isBusy, reportEntry, type LoadSource } from "../../src/replica/edge-control.ts";
import { ReportCadence } from "../../src/replica/report-cadence.ts";
import { KeepAlivePool } from "./state-plane-http.ts";

export interface SimDeployment {
  name: string;
  /** The edge isolates its control messages go through (replica or node i uses edges[i mod N]). */
  edges: string[];
  /** Its control POSTs in flight at once (each deployment queues its own, like separate fleets). */
  maxInFlight: number;
  /** The deployment's replica key (64 hex digits). */
  key: string;
  mode: "replica" | "node";
  replicas: number;
  /** Replicas per node ("node" mode). */
  perNode: number;
  maxOngoing: number;
}

export interface SimConfig {
  deployments: SimDeployment[];
  /** Fraction of each deployment's loaded replicas whose load changes per second (background churn). */
  changeRate: number;
  /** A draining replica deregisters this long after it said so (in-flight work finishing). */
  drainHoldMs: number;
  /** Registrations in flight at once during start-up. */
  registerConcurrency: number;
}

/**
 * Events the parent measures: "busy" changes a loaded replica's load to
 * another non-zero load (its sender stays busy: the busy window), "wake" gives
 * an idle replica load (its sender becomes busy: the short window).
 */
export type SimCommand =
  | { ref: number; cmd: "start"; config: SimConfig }
  | { ref: number; cmd: "change"; id: string; kind: "busy" | "wake" }
  | { ref: number; cmd: "kill" | "drain"; id: string }
  | { ref: number; cmd: "stats" }
  | { ref: number; cmd: "stop" };

/** An event as it happened at the replica (epoch ms). */
export interface EventReply {
  id: string;
  at: number;
  /** The load's seq after the event (change, drain). */
  seq: number;
  /** Death: when its last report (or its node's) was sent. */
  lastReportAt?: number;
}

export interface SimStats {
  at: number;
  /** Control messages answered, by path. */
  sent: Record<string, number>;
  /** Non-2xx answers and failed POSTs, by "path status". */
  failures: Record<string, number>;
  /** Report entries carried (a node report carries one per replica of the node), by deployment. */
  replicaReports: Record<string, number>;
  /** Live registered replicas, by deployment. */
  registered: Record<string, number>;
  /** Control POST latency since the last stats, ms (from taking a slot to the answer). */
  latencyP50Ms: number;
  latencyP99Ms: number;
  /** Messages waiting for a slot now, by deployment. */
  queued: Record<string, number>;
  /** Requests the sink answered, by what the replica was. */
  sink: { ready: number; draining: number; drainingLate: number; gone: number };
  cpuMs: number;
}

interface Sim {
  id: string;
  d: Dep;
  edge: number;
  node: NodeAgent | undefined;
  /** Never loaded, never churned (a quarter of the senders). */
  idle: boolean;
  load: Load;
  source: LoadSource;
  changed: (urgent: boolean) => void;
  registered: boolean;
  alive: boolean;
  gone: boolean;
  drainingSince: number;
  /** Register and deregister nonces (node reports have the node's). */
  nonces: NonceCounter;
  /** "replica" mode: its own cadence. */
  cadence: ReportCadence | undefined;
  registering: Promise<boolean> | undefined;
}

interface NodeAgent {
  name: string;
  d: Dep;
  edge: number;
  sims: Sim[];
  nonces: NonceCounter;
  cadence: ReportCadence;
  lastSentAt: number;
}

interface Dep {
  cfg: SimDeployment;
  sign: Signer;
  sims: Sim[];
  nodes: NodeAgent[];
  pools: KeepAlivePool[];
  inFlight: number;
  waiting: (() => void)[];
}

let config: SimConfig;
let sinkBase = "";
const sims = new Map<string, Sim>();
const deps: Dep[] = [];
const stats = {
  sent: {} as Record<string, number>,
  failures: {} as Record<string, number>,
  replicaReports: {} as Record<string, number>,
  latencies: [] as number[],
  sink: { ready: 0, draining: 0, drainingLate: 0, gone: 0 },
};
let stopped = false;
const cadences: ReportCadence[] = [];
/** Replicas the parent measures: no background churn on them, so the event is their only change. */
const reserved = new Set<string>();
const lastReportAt = new Map<string, number>();

const bump = (m: Record<string, number>, k: string, by = 1) => (m[k] = (m[k] ?? 0) + by);

/**
 * Signs control messages as signing.ts does (HMAC-SHA256 of its stringToSign,
 * keyed by the replica key's 32 bytes), with node:crypto's synchronous HMAC:
 * WebCrypto's async sign costs a thread-pool round trip per message, which at
 * thousands of messages a second is CPU taken from the processes measured.
 * Checked against signing.ts's own signedHeaders at start.
 */
type Signer = (p: SignedParts) => Record<string, string>;

async function signerFor(hexKey: string): Promise<Signer> {
  const bytes = Buffer.from(hexKey, "hex");
  const sign: Signer = (p) => ({
    [TIMESTAMP_HEADER]: String(p.timestamp),
    [NONCE_HEADER]: String(p.nonce),
    [SIGNATURE_HEADER]: `${SIGNATURE_SCHEME}=${createHmac("sha256", bytes).update(stringToSign(p)).digest("hex")}`,
  });
  const probe: SignedParts = { timestamp: 1_700_000_000_000, nonce: 42, path: ControlPath.report, body: '{"probe":true}' };
  const expected = await signedHeaders(await importReplicaKey(hexKey), probe);
  if (JSON.stringify(sign(probe)) !== JSON.stringify(expected)) throw new Error("the generator's signer disagrees with src/protocol/signing.ts");
  return sign;
}

// --- control POSTs ------------------------------------------------------------

async function slot(d: Dep): Promise<void> {
  if (d.inFlight < d.cfg.maxInFlight) {
    d.inFlight++;
    return;
  }
  await new Promise<void>((r) => d.waiting.push(r));
}

function release(d: Dep): void {
  const next = d.waiting.shift();
  if (next) next();
  else d.inFlight--;
}

/**
 * POSTs a signed control message of `d` through its edge isolate `edge`;
 * resolves with status and parsed body. `message` may be a function, called
 * when the message goes out (a report then carries the load of that moment);
 * when it returns undefined nothing is sent (the sender died while it waited).
 * A kept-alive connection the edge closed under the request is tried once more
 * on another, signed again (a new nonce: any copy that did arrive is older);
 * a timeout is not: the edge is still working on it, and a copy would only add load.
 */
async function post(d: Dep, edge: number, path: string, nonces: NonceCounter, message: unknown): Promise<{ status: number; body: unknown }> {
  await slot(d);
  const started = performance.now();
  try {
    // Built and signed once the slot is free: the nonce order is the send order, and the timestamp is fresh.
    const m = typeof message === "function" ? (message as () => unknown)() : message;
    if (m === undefined) return { status: -1, body: null };
    const body = Buffer.from(JSON.stringify(m));
    const send = () => d.pools[edge]!.post(path, { "content-type": "application/json", ...d.sign({ timestamp: Date.now(), nonce: nonces.next(), path, body }) }, body);
    const res = await send().catch((err: unknown) => {
      const why = String((err as Error).message ?? err);
      if (why === "timeout") throw err;
      bump(stats.failures, `${path} retried after ${why.slice(0, 40)}`);
      return send();
    });
    bump(stats.sent, path);
    if (res.status !== 200) bump(stats.failures, `${path} ${res.status} ${failureReason(res.body)}`);
    stats.latencies.push(performance.now() - started);
    let parsed: unknown = null;
    try {
      parsed = JSON.parse(res.body);
    } catch {
      // not JSON: counted as a failure above
    }
    return { status: res.status, body: parsed };
  } catch (err) {
    bump(stats.failures, `${path} ${String((err as Error).message ?? err).slice(0, 40)}`);
    return { status: 0, body: null };
  } finally {
    release(d);
  }
}

/** The error code (and reason) of an edge's error answer, for the failure counts. */
function failureReason(body: string): string {
  try {
    const e = (JSON.parse(body) as { error?: { code?: string; details?: { reason?: string } } }).error;
    return [e?.code, e?.details?.reason].filter(Boolean).join("/");
  } catch {
    return body.slice(0, 40);
  }
}

// --- replicas ------------------------------------------------------------------

/** Registers `s`; a register already in flight is joined, not sent twice (two in flight could arrive out of nonce order). */
function register(s: Sim): Promise<boolean> {
  s.registering ??= sendRegister(s).finally(() => (s.registering = undefined));
  return s.registering;
}

async function sendRegister(s: Sim): Promise<boolean> {
  const msg = {
    protocol: PROTOCOL_VERSION,
    deployment: s.d.cfg.name,
    replica_id: s.id,
    url: `${sinkBase}/sim/${s.id}`,
    max_ongoing_requests: s.d.cfg.maxOngoing,
    ...(s.node ? { node: s.node.name } : {}),
  };
  const r = await post(s.d, s.edge, ControlPath.register, s.nonces, () => (s.alive && !s.gone ? msg : undefined));
  if (r.status !== 200) return false;
  s.registered = true;
  return true;
}

/** One replica's own report ("replica" mode), as EdgeClient sends it. */
async function reportOne(s: Sim): Promise<void> {
  if (!s.alive || s.gone) return;
  if (!s.registered) {
    if (await register(s)) await reportOne(s);
    return;
  }
  // The message is built when it is sent: it carries the load of that moment.
  const r = await post(s.d, s.edge, ControlPath.report, s.nonces, () => {
    // Died (or left) while this report waited for a slot: a dead process sends nothing.
    if (!s.alive || s.gone) return undefined;
    lastReportAt.set(s.id, Date.now());
    return { protocol: PROTOCOL_VERSION, deployment: s.d.cfg.name, ...reportEntry(s.id, s.source) };
  });
  if (r.status === -1) return;
  bump(stats.replicaReports, s.d.cfg.name);
  if (r.status === 409 && !s.gone) {
    s.registered = false;
    if (await register(s)) await reportOne(s);
  } else if ((r.body as { drain?: boolean } | null)?.drain === true) startDrain(s);
}

/** A node's report for all its live, registered replicas ("node" mode), as NodeReporter sends it. */
async function reportNode(n: NodeAgent): Promise<void> {
  for (const s of n.sims) if (s.alive && !s.gone && !s.registered) await register(s);
  let reporting: Sim[] = [];
  const r = await post(n.d, n.edge, ControlPath.nodeReport, n.nonces, () => {
    reporting = n.sims.filter((s) => s.alive && !s.gone && s.registered);
    if (reporting.length === 0) return undefined;
    n.lastSentAt = Date.now();
    return { protocol: PROTOCOL_VERSION, deployment: n.d.cfg.name, node: n.name, reports: reporting.map((s) => reportEntry(s.id, s.source)) };
  });
  bump(stats.replicaReports, n.d.cfg.name, reporting.length);
  const outcomes = (r.body as { outcomes?: string[] } | null)?.outcomes;
  if (!outcomes) return;
  let unknown = false;
  outcomes.forEach((o, i) => {
    const s = reporting[i]!;
    if (o === "unknown_replica") {
      s.registered = false;
      unknown = true;
    } else if (o === "drain") startDrain(s);
  });
  // As NodeReporter: those register again, and the node reports once more (the next send starts with the registers).
  if (unknown) void n.cadence.now();
}

function setLoad(s: Sim, ongoing: number, state = s.load.state): void {
  s.load = { ...s.load, seq: s.load.seq + 1, ongoing, state };
}

function startDrain(s: Sim): void {
  if (s.load.state === "draining" || !s.alive) return;
  setLoad(s, s.load.ongoing, "draining");
  s.drainingSince = Date.now();
  // A state change is urgent: reported at once.
  s.changed(true);
  setTimeout(() => void deregister(s), config.drainHoldMs);
}

async function deregister(s: Sim): Promise<void> {
  if (s.gone) return;
  s.gone = true;
  s.cadence?.stop();
  // As EdgeClient and NodeReporter.remove: no report of it in flight, so the deregister's nonce arrives last.
  await (s.cadence ?? s.node?.cadence)?.settled();
  await post(s.d, s.edge, ControlPath.deregister, s.nonces, {
    protocol: PROTOCOL_VERSION,
    deployment: s.d.cfg.name,
    replica_id: s.id,
    ...(s.node ? { node: s.node.name } : {}),
  });
}

function kill(s: Sim): void {
  s.alive = false;
  s.cadence?.stop();
}

/** A different load for `s`: 1..max-1 for a loaded one, 0 never (it stays busy). */
function otherBusyLoad(s: Sim): number {
  const max = s.d.cfg.maxOngoing;
  let ongoing = s.load.ongoing;
  while (ongoing === s.load.ongoing) ongoing = 1 + Math.floor(Math.random() * (max - 1));
  return ongoing;
}

// --- the sink --------------------------------------------------------------------

function sink(req: IncomingMessage, res: ServerResponse): void {
  const m = /^\/sim\/([^/]+)/.exec(req.url ?? "");
  const s = m ? sims.get(m[1]!) : undefined;
  req.resume();
  if (!s || !s.alive || s.gone) {
    // A stopped replica's port answers nothing.
    stats.sink.gone++;
    (res.socket as Socket | null)?.destroy();
    return;
  }
  const headers = { [Header.load]: formatLoadHeader(s.load), [Header.protocol]: String(PROTOCOL_VERSION), [Header.replica]: s.id };
  if (s.load.state === "draining") {
    stats.sink.draining++;
    if (Date.now() - s.drainingSince > 1_000) stats.sink.drainingLate++;
    const body = JSON.stringify({ error: { code: "all_replicas_busy", message: `replica ${s.id} is draining` } });
    res.writeHead(503, { ...headers, [Header.rejected]: "draining", "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
    return;
  }
  stats.sink.ready++;
  res.writeHead(200, { ...headers, "content-type": "text/plain", "content-length": 2 });
  res.end("hi");
}

// --- start, commands ----------------------------------------------------------------

function newCadence(send: () => Promise<void>, busy: () => boolean): ReportCadence {
  const c = new ReportCadence({ send, busy, onError: (err) => bump(stats.failures, `cadence ${String(err).slice(0, 40)}`) });
  cadences.push(c);
  return c;
}

async function start(c: SimConfig): Promise<{ sink: string; registered: number; ms: number }> {
  config = c;
  const server = createServer(sink);
  server.keepAliveTimeout = 65_000;
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", () => r()));
  sinkBase = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  for (const cfg of c.deployments) {
    const perEdge = Math.max(2, Math.ceil(cfg.maxInFlight / cfg.edges.length));
    const d: Dep = { cfg, sign: await signerFor(cfg.key), sims: [], nodes: [], pools: cfg.edges.map((e) => new KeepAlivePool(e, perEdge)), inFlight: 0, waiting: [] };
    deps.push(d);
    for (let i = 0; i < cfg.replicas; i++) {
      let node: NodeAgent | undefined;
      if (cfg.mode === "node") {
        const k = Math.floor(i / cfg.perNode);
        node = d.nodes[k];
        if (!node) {
          const n: NodeAgent = {
            name: `simnode-${cfg.name}-${k}`,
            d,
            edge: k % cfg.edges.length,
            sims: [],
            nonces: new NonceCounter(),
            cadence: undefined as unknown as ReportCadence,
            lastSentAt: 0,
          };
          n.cadence = newCadence(
            () => reportNode(n),
            () => n.sims.some((s) => s.alive && !s.gone && s.registered && isBusy(s.source)),
          );
          d.nodes.push((node = n));
        }
      }
      // Every fourth sender (replica, or node) idles.
      const idle = (node ? d.nodes.length - 1 : i) % 4 === 0;
      const s: Sim = {
        id: `sim-${cfg.name}-${i}`,
        d,
        edge: node ? node.edge : i % cfg.edges.length,
        node,
        idle,
        load: { seq: 0, ongoing: idle ? 0 : 1 + Math.floor(Math.random() * (cfg.maxOngoing - 1)), queued: 0, max: cfg.maxOngoing, state: "ready" },
        source: undefined as unknown as LoadSource,
        changed: () => undefined,
        registered: false,
        alive: true,
        gone: false,
        drainingSince: 0,
        nonces: new NonceCounter(),
        cadence: undefined,
        registering: undefined,
      };
      s.source = { maxOngoing: cfg.maxOngoing, load: () => s.load, models: [], loading: [], onChange: () => undefined };
      if (node) {
        const n = node;
        s.changed = (urgent) => n.cadence.changed(urgent);
        n.sims.push(s);
      } else {
        const cadence = newCadence(
          () => reportOne(s),
          () => isBusy(s.source),
        );
        s.cadence = cadence;
        s.changed = (urgent) => cadence.changed(urgent);
      }
      d.sims.push(s);
      sims.set(s.id, s);
    }
  }
  // Register everything, a bounded number at a time; each sender's cadence starts with its first report.
  const t0 = Date.now();
  const all = [...sims.values()];
  let next = 0;
  await Promise.all(
    Array.from({ length: c.registerConcurrency }, async () => {
      while (next < all.length) {
        const s = all[next++]!;
        for (let tries = 0; tries < 5 && !(await register(s)); tries++) await new Promise((r) => setTimeout(r, 200));
        if (s.cadence) {
          s.cadence.start();
          void s.cadence.now();
        } else if (s.node && s.node.sims[s.node.sims.length - 1] === s) {
          s.node.cadence.start();
          void s.node.cadence.now();
        }
      }
    }),
  );
  // Background churn: every 100 ms, a tenth of the per-second share of loaded replicas changes load.
  const churn = setInterval(() => {
    if (stopped) return;
    for (const d of deps) {
      const n = Math.round((d.sims.length * c.changeRate) / 10);
      for (let k = 0; k < n; k++) {
        const s = d.sims[Math.floor(Math.random() * d.sims.length)]!;
        if (s.idle || !s.alive || s.gone || s.load.state !== "ready" || reserved.has(s.id)) continue;
        setLoad(s, otherBusyLoad(s));
        s.changed(false);
      }
    }
  }, 100);
  churn.unref();
  return { sink: sinkBase, registered: all.filter((s) => s.registered).length, ms: Date.now() - t0 };
}

let lastStatsCpu = process.cpuUsage();
function snapshotStats(): SimStats {
  const lat = stats.latencies.sort((a, b) => a - b);
  const q = (p: number) => (lat.length ? lat[Math.min(lat.length - 1, Math.floor(p * lat.length))]! : NaN);
  const cpu = process.cpuUsage(lastStatsCpu);
  lastStatsCpu = process.cpuUsage();
  const out: SimStats = {
    at: Date.now(),
    sent: { ...stats.sent },
    failures: { ...stats.failures },
    replicaReports: { ...stats.replicaReports },
    registered: Object.fromEntries(deps.map((d) => [d.cfg.name, d.sims.filter((s) => s.registered && s.alive && !s.gone).length])),
    latencyP50Ms: q(0.5),
    latencyP99Ms: q(0.99),
    queued: Object.fromEntries(deps.map((d) => [d.cfg.name, d.waiting.length])),
    sink: { ...stats.sink },
    cpuMs: (cpu.user + cpu.system) / 1000,
  };
  stats.latencies = [];
  return out;
}

/** Which replicas an event may pick: live, ready, and idle or loaded as the event needs. */
function candidates(deployment: string): { idle: string[]; busy: string[] } {
  const out = { idle: [] as string[], busy: [] as string[] };
  for (const s of deps.find((d) => d.cfg.name === deployment)?.sims ?? []) {
    if (!s.alive || s.gone || !s.registered || s.load.state !== "ready" || reserved.has(s.id)) continue;
    // A "wake" needs its whole sender idle: an idle replica (or all of an idle node).
    (s.idle ? out.idle : out.busy).push(s.id);
  }
  return out;
}

process.on("message", (raw) => {
  const m = raw as SimCommand | { ref: number; cmd: "candidates"; deployment: string };
  const reply = (body: object) => process.send?.({ ref: m.ref, ...body });
  void (async () => {
    try {
      switch (m.cmd) {
        case "start":
          reply(await start(m.config));
          return;
        case "stats":
          reply(snapshotStats());
          return;
        case "candidates":
          reply(candidates(m.deployment));
          return;
        case "stop":
          stopped = true;
          for (const c of cadences) c.stop();
          for (const d of deps) for (const p of d.pools) p.close();
          reply({ ok: true });
          setTimeout(() => process.exit(0), 50);
          return;
        default: {
          const s = sims.get(m.id);
          if (!s || !s.alive || s.gone) return reply({ error: `no live replica ${m.id}` });
          reserved.add(s.id);
          const at = Date.now();
          if (m.cmd === "change") {
            if (m.kind === "wake" && !s.idle) return reply({ error: `${m.id} is not idle` });
            setLoad(s, m.kind === "wake" ? 1 + Math.floor(Math.random() * (s.d.cfg.maxOngoing - 1)) : otherBusyLoad(s));
            // The sender stops idling (a node wakes once: its other replicas are not "idle" any more either).
            for (const x of s.node ? s.node.sims : [s]) x.idle = false;
            s.changed(false);
          } else if (m.cmd === "drain") startDrain(s);
          else {
            const last = s.node ? s.node.lastSentAt : (lastReportAt.get(s.id) ?? 0);
            kill(s);
            return reply({ id: s.id, at, seq: s.load.seq, lastReportAt: last } satisfies EventReply);
          }
          return reply({ id: s.id, at, seq: s.load.seq } satisfies EventReply);
        }
      }
    } catch (err) {
      reply({ error: String(err) });
    }
  })();
});
process.on("disconnect", () => process.exit(0));
