/**
 * Node batching (src/replica/node-reporter.ts) against a fake edge that keeps the
 * protocol's rules: signatures checked, schemas strict, nonces above the last per
 * replica id and per node (replays refused), unknown replicas answered
 * "unknown_replica", drains asked per replica. Replicas are EdgeClients over the
 * reference replica's AdmissionControl, and one test runs two replica agents in
 * front of fake vLLM engines.
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { ReplicaAgent } from "../../src/agent/agent.ts";
import {
  ControlPath,
  DeregisterMessage,
  MAX_NODE_REPLICAS,
  NodeReportMessage,
  PROTOCOL_VERSION,
  RegisterMessage,
  ReportMessage,
  importReplicaKey,
  readSignatureHeaders,
  verifyControl,
  type NodeReportEntry,
} from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { EdgeClient } from "../../src/replica/edge-client.ts";
import { NodeReporter, nodeReportBatches, summaryFields, type NodeMember } from "../../src/replica/node-reporter.ts";
import { SummaryCadence, type SummaryField } from "../../src/replica/summary-cadence.ts";
import type { CacheSummaryWire } from "../../src/prefix/cache-summary.ts";
import { scriptedEdge } from "../fixtures/scripted-edge.ts";

const KEY = "ab".repeat(32);
const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const f of cleanup.splice(0).reverse()) await f();
});

interface Received {
  path: string;
  body: Record<string, unknown>;
  nonce: number;
  status: number;
}

/** A fake edge keeping the control plane's rules (docs/protocol.md §1) in memory. */
async function fakeEdge(reportIntervalMs = 60_000) {
  const key = await importReplicaKey(KEY);
  const members = new Map<string, { node?: string }>();
  const drain = new Set<string>();
  const lastNonce = new Map<string, number>();
  const received: Received[] = [];
  const fresh = (who: string, nonce: number) => {
    if (nonce <= (lastNonce.get(who) ?? 0)) return false;
    lastNonce.set(who, nonce);
    return true;
  };
  const answer = (path: string, raw: unknown, nonce: number): [number, unknown] => {
    const refused: [number, unknown] = [401, { error: { code: "unauthorized", details: { reason: "replayed" } } }];
    const invalid = (issues: unknown): [number, unknown] => [400, { error: { code: "invalid_message", details: issues } }];
    if (path === ControlPath.register) {
      const m = RegisterMessage.safeParse(raw);
      if (!m.success) return invalid(m.error.issues);
      if (!fresh(m.data.replica_id, nonce)) return refused;
      members.set(m.data.replica_id, m.data.node !== undefined ? { node: m.data.node } : {});
      return [200, { ok: true, report_interval_ms: reportIntervalMs }];
    }
    if (path === ControlPath.report) {
      const m = ReportMessage.safeParse(raw);
      if (!m.success) return invalid(m.error.issues);
      if (!fresh(m.data.replica_id, nonce)) return refused;
      if (!members.has(m.data.replica_id)) return [409, { error: { code: "unknown_replica" } }];
      return [200, { ok: true, outcome: "ok", ...(drain.has(m.data.replica_id) && { drain: true }) }];
    }
    if (path === ControlPath.nodeReport) {
      const m = NodeReportMessage.safeParse(raw);
      if (!m.success) return invalid(m.error.issues);
      if (!fresh(`\u0000node:${m.data.node}`, nonce)) return refused;
      const outcomes = m.data.reports.map((r) => (!members.has(r.replica_id) ? "unknown_replica" : drain.has(r.replica_id) ? "drain" : "ok"));
      return [200, { ok: true, outcomes }];
    }
    if (path === ControlPath.deregister) {
      const m = DeregisterMessage.safeParse(raw);
      if (!m.success) return invalid(m.error.issues);
      if (!fresh(m.data.replica_id, nonce)) return refused;
      return [200, { ok: true, removed: members.delete(m.data.replica_id) }];
    }
    return [404, { error: { code: "route_not_found" } }];
  };
  const server = createServer(async (req, res) => {
    const chunks: Buffer[] = [];
    for await (const chunk of req) chunks.push(chunk as Buffer);
    const body = new Uint8Array(Buffer.concat(chunks));
    const path = req.url ?? "";
    const sig = readSignatureHeaders({ get: (n) => (req.headers[n] as string | undefined) ?? null });
    let status: number;
    let out: unknown;
    if (sig.kind !== "present" || !(await verifyControl(key, { timestamp: sig.timestamp, nonce: sig.nonce, path, body }, sig.signature))) {
      [status, out] = [401, { error: { code: "unauthorized", details: { reason: "bad_signature" } } }];
    } else {
      [status, out] = answer(path, JSON.parse(new TextDecoder().decode(body)), sig.nonce);
    }
    received.push({ path, body: JSON.parse(new TextDecoder().decode(body)) as Record<string, unknown>, nonce: sig.kind === "present" ? sig.nonce : -1, status });
    res.writeHead(status, { "content-type": "application/json" }).end(JSON.stringify(out));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    members,
    drain,
    received,
    nodeReports: () => received.filter((m) => m.path === ControlPath.nodeReport),
    entries: (m: Received) => (m.body.reports as NodeReportEntry[]).map((r) => r.replica_id),
  };
}

function reporter(edgeUrl: string, o: { changeReportDelayMs?: number } = { changeReportDelayMs: 1 }) {
  const logs: string[] = [];
  const r = new NodeReporter({ edgeUrl, key: KEY, deployment: "llm", node: "gpu-7", log: (m) => logs.push(m), ...o });
  cleanup.push(() => r.stop());
  return { r, logs };
}

/** A replica of the node: an EdgeClient over an AdmissionControl, reporting through `r`. */
function replica(edgeUrl: string, r: NodeReporter, id: string) {
  const admission = new AdmissionControl(8);
  const drains: string[] = [];
  const client = new EdgeClient({
    edgeUrl,
    key: KEY,
    deployment: "llm",
    replicaId: id,
    advertiseUrl: `http://127.0.0.1:9/${id}`,
    admission,
    nodeReporter: r,
    onDrainRequested: () => drains.push(id),
  });
  cleanup.push(() => client.stop());
  return { client, admission, drains };
}

const waitFor = async (what: string, cond: () => boolean) => {
  await vi.waitFor(() => expect(cond(), what).toBe(true), { timeout: 10_000, interval: 5 });
};

describe("NodeReporter", () => {
  it("one node report carries every replica of the node; each registers on its own, naming the node", async () => {
    const edge = await fakeEdge();
    const { r } = reporter(edge.url);
    const a = replica(edge.url, r, "g7-a");
    const b = replica(edge.url, r, "g7-b");
    await Promise.all([a.client.start(), b.client.start()]);
    await waitFor("a node report naming both", () => edge.nodeReports().some((m) => edge.entries(m).length === 2));

    const registers = edge.received.filter((m) => m.path === ControlPath.register);
    expect(registers.map((m) => m.body.replica_id).sort()).toEqual(["g7-a", "g7-b"]);
    for (const m of registers) expect(m.body.node).toBe("gpu-7");
    // No single reports at all: the node's reports carry them.
    expect(edge.received.filter((m) => m.path === ControlPath.report)).toEqual([]);

    // A change of either replica: one more node report, with both.
    const before = edge.nodeReports().length;
    a.admission.tryAdmit();
    await waitFor("a node report of a's request", () => edge.nodeReports().some((m) => (m.body.reports as NodeReportEntry[]).some((e) => e.replica_id === "g7-a" && e.ongoing === 1)));
    await r.settled();
    const last = edge.nodeReports().at(-1)!;
    expect(edge.nodeReports().length).toBeGreaterThan(before);
    expect(last.body).toMatchObject({ protocol: PROTOCOL_VERSION, deployment: "llm", node: "gpu-7" });
    // Entries follow the order the replicas joined the reporter, which their concurrent registers decide.
    expect(edge.entries(last).sort()).toEqual(["g7-a", "g7-b"]);
    expect(NodeReportMessage.safeParse(last.body).success).toBe(true);
    expect(edge.received.every((m) => m.status === 200)).toBe(true);
  });

  it("signs every message of the process with increasing nonces: node reports and the replicas' own messages, no replay", async () => {
    const edge = await fakeEdge();
    const { r } = reporter(edge.url);
    const a = replica(edge.url, r, "n-a");
    const b = replica(edge.url, r, "n-b");
    await Promise.all([a.client.start(), b.client.start()]);
    for (let i = 0; i < 5; i++) {
      a.admission.tryAdmit();
      b.admission.tryAdmit();
      await r.report();
    }
    await Promise.all([a.client.deregister(), b.client.deregister()]);
    // All accepted: the edge refuses a nonce not above the last one per replica id and per node.
    expect(edge.received.map((m) => m.status).filter((s) => s !== 200)).toEqual([]);
    const nodeNonces = edge.nodeReports().map((m) => m.nonce);
    expect(nodeNonces.length).toBeGreaterThanOrEqual(5);
    for (let i = 1; i < nodeNonces.length; i++) expect(nodeNonces[i]!).toBeGreaterThan(nodeNonces[i - 1]!);
    // One counter for the process: no two messages share a nonce.
    const all = edge.received.map((m) => m.nonce);
    expect(new Set(all).size).toBe(all.length);
    // The deregisters came after every node report naming them.
    const lastNodeReport = edge.received.map((m) => m.path).lastIndexOf(ControlPath.nodeReport);
    const deregisters = edge.received.flatMap((m, i) => (m.path === ControlPath.deregister ? [i] : []));
    expect(deregisters).toHaveLength(2);
    for (const i of deregisters) expect(i).toBeGreaterThan(lastNodeReport);
    for (const m of edge.received.filter((x) => x.path === ControlPath.deregister)) expect(m.body.node).toBe("gpu-7");
  });

  it("unknown_replica: that replica registers again (the other is left alone) and is reported again", async () => {
    const edge = await fakeEdge();
    const { r, logs } = reporter(edge.url);
    const a = replica(edge.url, r, "u-a");
    const b = replica(edge.url, r, "u-b");
    await Promise.all([a.client.start(), b.client.start()]);
    await r.settled();
    // The routing object forgets b (swept after a long silence).
    edge.members.delete("u-b");
    const registersBefore = edge.received.filter((m) => m.path === ControlPath.register).length;
    await r.report();
    await waitFor("b to register again", () => edge.members.has("u-b"));
    const again = edge.received.filter((m) => m.path === ControlPath.register).slice(registersBefore);
    expect(again.map((m) => m.body.replica_id)).toEqual(["u-b"]);
    expect(again[0]!.body.node).toBe("gpu-7");
    // Then a node report with both, both known.
    await waitFor("a node report after b's register", () => {
      const last = edge.nodeReports().at(-1)!;
      return edge.received.indexOf(last) > edge.received.indexOf(again[0]!) && edge.entries(last).length === 2;
    });
    expect(logs.join("\n")).toMatch(/does not know u-b: registering it again/);
    expect(a.drains).toEqual([]);
  });

  it("drain: only that replica's drain callback, once; the other keeps reporting", async () => {
    const edge = await fakeEdge();
    const { r } = reporter(edge.url);
    const a = replica(edge.url, r, "d-a");
    const b = replica(edge.url, r, "d-b");
    await Promise.all([a.client.start(), b.client.start()]);
    await r.settled();
    edge.drain.add("d-a");
    await r.report();
    await r.report();
    expect(a.drains).toEqual(["d-a"]);
    expect(b.drains).toEqual([]);

    // a drains and leaves: later node reports carry b alone.
    a.admission.drain();
    await r.settled();
    await a.client.deregister();
    expect(edge.members.has("d-a")).toBe(false);
    await r.report();
    expect(edge.entries(edge.nodeReports().at(-1)!)).toEqual(["d-b"]);
    expect(a.client.registered).toBe(false);
    expect(b.client.registered).toBe(true);
  });

  it("busy replicas: about one node report a second for all of them (fake clock), not ~4 per replica", async () => {
    const edge = await fakeEdge(1_000);
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] });
    const { r } = reporter(edge.url, {});
    const a = replica(edge.url, r, "b-a");
    const b = replica(edge.url, r, "b-b");
    await a.client.start();
    await b.client.start();
    a.admission.tryAdmit();
    b.admission.tryAdmit();
    await r.settled();
    const before = edge.nodeReports().length;
    // 10 s busy, both loads changing every 20 ms.
    for (let t = 0; t < 10_000; t += 20) {
      for (const x of [a, b]) {
        if (x.admission.ongoing > 1) x.admission.release();
        else x.admission.tryAdmit();
      }
      await vi.advanceTimersByTimeAsync(20);
      await r.settled();
    }
    const sent = edge.nodeReports().slice(before);
    expect(sent.length).toBeGreaterThanOrEqual(9);
    expect(sent.length).toBeLessThanOrEqual(11);
    for (const m of sent) expect(edge.entries(m)).toEqual(["b-a", "b-b"]);
    expect(edge.received.filter((m) => m.path === ControlPath.report)).toEqual([]);

    // Urgent (a drain) at once.
    const n = edge.nodeReports().length;
    b.admission.drain();
    await r.settled();
    expect(edge.nodeReports().length).toBe(n + 1);
    expect((edge.nodeReports().at(-1)!.body.reports as NodeReportEntry[])[1]).toMatchObject({ replica_id: "b-b", state: "draining" });
  });

  it("refuses a replica twice, and more than MAX_NODE_REPLICAS", () => {
    const r = new NodeReporter({ edgeUrl: "http://127.0.0.1:9", key: KEY, deployment: "llm", node: "n" });
    cleanup.push(() => r.stop());
    const member = (id: string) => ({ replicaId: id, source: new AdmissionControl(1), registerAgain: () => Promise.resolve() });
    // Never reaches an edge: the reporter is stopped before any send completes (errors are logged).
    for (let i = 0; i < MAX_NODE_REPLICAS; i++) r.add(member(`r-${i}`));
    expect(() => r.add(member("r-0"))).toThrow(/already/);
    expect(() => r.add(member("one-too-many"))).toThrow(new RegExp(`at most ${MAX_NODE_REPLICAS}`));
  });
});

describe("summaryFields: which caches' summaries a node report carries within its budget", () => {
  // A field's cost is its filter's base64 plus 64 bytes for the rest of the field.
  const wire = (chars: number): CacheSummaryWire => ({ v: 1, k: 7, n: 1, block: 16, bits: "A".repeat(chars) });
  const a = wire(36); // 100 bytes
  const b = wire(36);

  it("longest waiting first, within the budget to the byte; the others wait", () => {
    const due = [
      { field: a, since: 30 },
      { field: b, since: 10 },
    ];
    expect(summaryFields(due, 100)).toEqual([undefined, b]);
    expect(summaryFields(due, 199)).toEqual([undefined, b]);
    expect(summaryFields(due, 200)).toEqual([a, b]);
    expect(summaryFields(due, 99)).toEqual([undefined, undefined]);
    // One that does not fit does not stop a smaller one behind it.
    expect(summaryFields([{ field: wire(136), since: 1 }, { field: a, since: 2 }], 150)).toEqual([undefined, a]);
  });

  it("ties in waiting go in entry order; a field with no wait recorded counts as the longest waiting", () => {
    expect(summaryFields([{ field: a, since: 20 }, { field: b, since: 20 }], 100)).toEqual([a, undefined]);
    expect(summaryFields([{ field: a, since: 5 }, { field: b, since: undefined }], 100)).toEqual([undefined, b]);
    expect(summaryFields([{ field: a, since: undefined }, { field: b, since: 5 }], 100)).toEqual([a, undefined]);
  });

  it("null (no summary any more) costs nothing and always goes; undefined says nothing", () => {
    expect(summaryFields([{ field: null, since: 9 }, { field: undefined, since: undefined }, { field: a, since: 1 }], 100)).toEqual([null, undefined, a]);
    expect(summaryFields([{ field: a, since: 1 }, { field: null, since: 9 }], 0)).toEqual([undefined, null]);
  });
});

describe("nodeReportBatches", () => {
  const e = (id: string): NodeReportEntry => ({ replica_id: id, seq: 1, ts: 1, state: "ready", ongoing: 0, queued: 0, models: [], loading: [] });
  const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).byteLength;

  it("the byte bound is exact: a message of exactly maxBytes goes whole, one byte less splits it", () => {
    const entries = [e("a"), e("b"), e("c")];
    const whole = bytes({ protocol: PROTOCOL_VERSION, deployment: "llm", node: "n", reports: entries });
    expect(nodeReportBatches("llm", "n", entries, whole).map((x) => x.start)).toEqual([0]);
    expect(nodeReportBatches("llm", "n", entries, whole - 1).map((x) => x.start)).toEqual([0, 2]);
    const two = bytes({ protocol: PROTOCOL_VERSION, deployment: "llm", node: "n", reports: entries.slice(0, 2) });
    expect(nodeReportBatches("llm", "n", entries, two).map((x) => x.start)).toEqual([0, 2]);
    expect(nodeReportBatches("llm", "n", entries, two - 1).map((x) => x.start)).toEqual([0, 1, 2]);
    // An entry too large alone still goes, alone (the edge refuses that one message, not the others).
    expect(nodeReportBatches("llm", "n", entries, 10).map((x) => x.message.reports.length)).toEqual([1, 1, 1]);
  });

  it("the count bound is exact, and no entries make no message", () => {
    expect(nodeReportBatches("llm", "n", [e("a"), e("b")], undefined, 2).map((x) => x.message.reports.length)).toEqual([2]);
    expect(nodeReportBatches("llm", "n", [e("a"), e("b"), e("c")], undefined, 1).map((x) => x.start)).toEqual([0, 1, 2]);
    expect(nodeReportBatches("llm", "n", [])).toEqual([]);
  });
});

describe("NodeReporter and what the edge answers", () => {
  /** A node member over an AdmissionControl, with an optional summary and a scripted registerAgain. */
  const member = (replicaId: string, o: { summary?: SummaryCadence; registerAgain?: () => Promise<void>; drains?: string[] } = {}): NodeMember & { admission: AdmissionControl } => {
    const admission = new AdmissionControl(4);
    return {
      replicaId,
      source: admission,
      admission,
      registerAgain: o.registerAgain ?? (() => Promise.resolve()),
      ...(o.drains && { onDrainRequested: () => o.drains!.push(replicaId) }),
      ...(o.summary && { summary: o.summary }),
    };
  };
  const cache = (bits: string): SummaryCadence => new SummaryCadence(() => ({ v: 1, k: 7, n: 1, block: 16, bits }));
  const carried = (body: Record<string, unknown>) => (body.reports as NodeReportEntry[]).map((r) => [r.replica_id, r.prefix_cache === undefined ? "-" : r.prefix_cache === null ? "null" : r.prefix_cache.bits]);

  async function setup(answer: (body: Record<string, unknown>, n: number) => [number, unknown] | undefined) {
    let n = 0;
    const edge = await scriptedEdge(
      (close) => cleanup.push(close),
      (path, body) => (path === "report-node" ? answer(body, n++) : undefined),
    );
    const logs: string[] = [];
    const r = new NodeReporter({ edgeUrl: edge.url, key: KEY, deployment: "llm", node: "gpu-7", log: (m) => logs.push(m), changeReportDelayMs: 1 });
    cleanup.push(() => r.stop());
    const reports = () => edge.received.filter((m) => m.path === "report-node").map((m) => m.body);
    return { edge, r, logs, reports };
  }
  const ok = (body: Record<string, unknown>): [number, unknown] => [200, { ok: true, outcomes: (body.reports as unknown[]).map(() => "ok") }];

  it("a summary counts as held only for entries the edge applied (ok, drain); the others' go again", async () => {
    const { r, reports } = await setup((body) => [200, { ok: true, outcomes: (body.reports as NodeReportEntry[]).map((x) => (x.replica_id === "a" ? "ok" : x.replica_id === "b" ? "drain" : "stale_seq")) }]);
    r.add(member("a", { summary: cache("AAAA") }));
    r.add(member("b", { summary: cache("BBBB"), drains: [] }));
    r.add(member("c", { summary: cache("CCCC") }));
    await r.settled();
    await r.report();
    await r.report();
    const field = (id: string) => reports().flatMap((body) => carried(body).filter(([x]) => x === id).map(([, f]) => f));
    // Applied once: not sent again (until SUMMARY_RESEND_MS). Never applied (stale_seq): sent in every report.
    expect(field("a")[0]).toBe("AAAA");
    expect(field("a").slice(1).every((f) => f === "-")).toBe(true);
    expect(field("b")[0]).toBe("BBBB");
    expect(field("b").slice(1).every((f) => f === "-")).toBe(true);
    expect(field("c").length).toBeGreaterThanOrEqual(2);
    expect(field("c").every((f) => f === "CCCC")).toBe(true);
    expect(r.replicaIds).toEqual(["a", "b", "c"]);
    expect(r.accepted).toBe(reports().length);
    expect(r.sent).toBeGreaterThanOrEqual(reports().length);
  });

  it("an answer without one outcome per entry is logged and applies nothing", async () => {
    const answers: unknown[] = [{ ok: true }, { ok: true, outcomes: ["drain"] }, { ok: true, outcomes: "drain,drain" }];
    const { r, logs, reports } = await setup((_, n) => [200, answers[n] ?? { ok: true, outcomes: ["ok", "ok"] }]);
    const drains: string[] = [];
    r.add(member("a", { summary: cache("AAAA"), drains }));
    r.add(member("b", { drains }));
    await r.settled();
    await r.report();
    await r.report();
    await r.report();
    expect(logs.filter((l) => l.startsWith("node report answered without one outcome per entry: "))).toHaveLength(3);
    expect(logs[0]).toBe('node report answered without one outcome per entry: {"ok":true}');
    expect(drains).toEqual([]);
    // The summary was not applied until the fourth answer: it went every time until then, and not after.
    const a = reports().map((b) => carried(b)[0]![1]);
    expect(a.slice(0, 4)).toEqual(["AAAA", "AAAA", "AAAA", "AAAA"]);
    expect(a.slice(4).every((f) => f === "-")).toBe(true);
    expect(r.accepted).toBe(reports().length);
  });

  it("drain is announced once per member, and a member without a drain callback is fine", async () => {
    const { r, logs } = await setup((body) => [200, { ok: true, outcomes: (body.reports as unknown[]).map(() => "drain") }]);
    const drains: string[] = [];
    r.add(member("a", { drains }));
    r.add(member("b"));
    await r.settled();
    await r.report();
    await r.report();
    expect(drains).toEqual(["a"]);
    expect(logs.filter((l) => l.includes("to drain"))).toEqual(["the edge asks a to drain", "the edge asks b to drain"]);
  });

  it("an older edge that refuses summaries: said once, summaries off for every member, the report sent again at once without them", async () => {
    const refusal = { error: { code: "invalid_message", details: [{ code: "unrecognized_keys", keys: ["prefix_cache"], path: ["reports", 0] }] } };
    const { r, logs, reports } = await setup((body) => ((body.reports as NodeReportEntry[]).some((x) => x.prefix_cache !== undefined) ? [400, refusal] : ok(body)));
    const [ca, cb] = [cache("AAAA"), cache("BBBB")];
    r.add(member("a", { summary: ca }));
    r.add(member("b", { summary: cb }));
    await vi.waitFor(() => expect(reports().some((b) => carried(b).every(([, f]) => f === "-"))).toBe(true), { timeout: 10_000, interval: 5 });
    await r.settled();
    expect([ca.enabled, cb.enabled]).toEqual([false, false]);
    expect(logs.filter((l) => l.includes("prefix-cache summaries"))).toEqual(["the edge does not take prefix-cache summaries (an older edge): reporting without them"]);
    // A member that joins later sends none either.
    const late = cache("DDDD");
    r.add(member("d", { summary: late }));
    await r.settled();
    expect(late.enabled).toBe(false);
    expect(reports().at(-1)!.reports).toHaveLength(3);
    // A 400 for anything else is a failure like any other: logged, summaries left on.
    const other = await setup(() => [400, { error: { code: "invalid_message", details: "ts" } }]);
    const cc = cache("CCCC");
    other.r.add(member("c", { summary: cc }));
    await other.r.settled();
    expect(cc.enabled).toBe(true);
    expect(other.logs.filter((l) => l.startsWith("node report failed: ")).length).toBeGreaterThanOrEqual(1);
    expect(other.logs.join("\n")).toContain("edge answered 400");
  });

  it("a 400 naming prefix_cache with no summary in the report is an ordinary failure", async () => {
    const { r, logs } = await setup(() => [400, { error: { details: ["prefix_cache"] } }]);
    const c = cache("AAAA");
    c.disable();
    r.add(member("a", { summary: c }));
    await r.settled();
    expect(logs.some((l) => l.includes("prefix-cache summaries"))).toBe(false);
    expect(logs.some((l) => l.startsWith("node report failed: "))).toBe(true);
  });

  it("a failed message of several does not stop the next one; a member that left mid-flight gets no outcome", async () => {
    // Every message naming r-000 is refused; the rest are answered "drain".
    const { r, logs, reports } = await setup((body) =>
      (body.reports as NodeReportEntry[]).some((x) => x.replica_id === "r-000") ? [503, { error: { code: "overloaded" } }] : [200, { ok: true, outcomes: (body.reports as unknown[]).map(() => "drain") }],
    );
    const drains: string[] = [];
    for (let i = 0; i < MAX_NODE_REPLICAS; i++) {
      const m = member(`r-${String(i).padStart(3, "0")}`, { drains });
      // Long model lists: a node report of every member is more than one message.
      Object.defineProperty(m.source, "models", { value: Array.from({ length: 64 }, (_, k) => `a-long-model-name-to-fill-the-report-${k}-${"x".repeat(40)}`) });
      r.add(m);
    }
    await r.settled();
    await r.report();
    const last = reports().filter((b) => (b.reports as NodeReportEntry[])[0]!.replica_id === "r-000").at(-1)!;
    const refused = (last.reports as NodeReportEntry[]).map((x) => x.replica_id);
    expect(refused.length).toBeLessThan(MAX_NODE_REPLICAS);
    // The refused message's members were not told to drain; every member after them was, in the same node report.
    expect(drains.filter((id) => refused.includes(id))).toEqual([]);
    expect(new Set(drains)).toEqual(new Set(Array.from({ length: MAX_NODE_REPLICAS - refused.length }, (_, i) => `r-${String(i + refused.length).padStart(3, "0")}`)));
    expect(logs[0]).toMatch(/^node report failed: Error: edge answered 503/);
    expect(r.accepted).toBe(reports().length - reports().filter((b) => (b.reports as NodeReportEntry[]).some((x) => x.replica_id === "r-000")).length);
  });

  it("registering again: left out of reports until done; a failure is logged and the next report tries again", async () => {
    let known = false;
    let fail = true;
    const { r, logs, reports } = await setup((body) => [200, { ok: true, outcomes: (body.reports as NodeReportEntry[]).map((x) => (x.replica_id === "b" && !known ? "unknown_replica" : "ok")) }]);
    let release!: () => void;
    const registerAgain = () => {
      if (fail) {
        fail = false;
        return Promise.reject(new Error("edge down"));
      }
      return new Promise<void>((res) => (release = () => ((known = true), res())));
    };
    const a = member("a");
    const b = member("b", { registerAgain });
    r.add(a);
    r.add(b);
    await r.settled();
    await vi.waitFor(() => expect(logs).toContain("registering b again failed: Error: edge down"), { timeout: 10_000, interval: 5 });
    await r.report();
    await vi.waitFor(() => expect(release).toBeDefined(), { timeout: 10_000, interval: 5 });
    // While b registers: reports carry a alone, and b's changes send nothing.
    const before = reports().length;
    await r.report();
    expect((reports().at(-1)!.reports as NodeReportEntry[]).map((x) => x.replica_id)).toEqual(["a"]);
    b.admission.tryAdmit();
    await new Promise((res) => setTimeout(res, 20));
    await r.settled();
    expect(reports().length).toBe(before + 1);
    release();
    await vi.waitFor(() => expect(reports().some((x) => (x.reports as NodeReportEntry[]).length === 2 && (x.reports as NodeReportEntry[])[1]!.ongoing === 1)).toBe(true), { timeout: 10_000, interval: 5 });
  });

  it("stop ends the heartbeat; intervalMs sets it (fake clock)", async () => {
    const { r, reports } = await setup((body) => ok(body));
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] });
    r.add(member("a"));
    await r.settled();
    const n0 = reports().length;
    await vi.advanceTimersByTimeAsync(999);
    await r.settled();
    expect(reports().length).toBe(n0);
    await vi.advanceTimersByTimeAsync(1);
    await r.settled();
    expect(reports().length).toBe(n0 + 1);
    r.intervalMs = 100;
    for (let t = 0; t < 1_000; t += 50) {
      await vi.advanceTimersByTimeAsync(50);
      await r.settled();
    }
    expect(reports().length).toBeGreaterThanOrEqual(n0 + 9);
    expect(reports().length).toBeLessThanOrEqual(n0 + 12);
    r.stop();
    const n1 = reports().length;
    await vi.advanceTimersByTimeAsync(5_000);
    await r.settled();
    expect(reports().length).toBe(n1);
  });
});

describe("nodeReportBatches, more", () => {
  const entry = (id: string, models: string[] = []): NodeReportEntry => ({ replica_id: id, seq: 1, ts: 1, state: "ready", ongoing: 0, queued: 0, models, loading: [] });

  it("one message when it fits; split in order by size and by count otherwise, each a valid node report within the bound", () => {
    const small = [entry("a"), entry("b")];
    expect(nodeReportBatches("llm", "n", small).map((b) => b.start)).toEqual([0]);

    const big = Array.from({ length: 6 }, (_, i) => entry(`r${i}`, Array.from({ length: 20 }, (_, k) => `model-${k}`)));
    const one = new TextEncoder().encode(JSON.stringify(big[0])).byteLength;
    const limit = 300 + 2 * one;
    const batches = nodeReportBatches("llm", "n", big, limit);
    expect(batches.length).toBeGreaterThan(1);
    expect(batches.flatMap((b) => b.message.reports.map((r) => r.replica_id))).toEqual(big.map((e) => e.replica_id));
    for (const b of batches) {
      expect(new TextEncoder().encode(JSON.stringify(b.message)).byteLength).toBeLessThanOrEqual(limit);
      expect(NodeReportMessage.safeParse(b.message).success).toBe(true);
      expect(b.message.reports[0]!.replica_id).toBe(big[b.start]!.replica_id);
    }

    const many = Array.from({ length: 5 }, (_, i) => entry(`m${i}`));
    expect(nodeReportBatches("llm", "n", many, undefined, 2).map((b) => b.message.reports.length)).toEqual([2, 2, 1]);
  });
});

/** A fake vLLM engine: /health, /v1/models and /metrics with `running` requests. */
async function fakeEngine(model: string) {
  const state = { running: 0 };
  const server = createServer((req, res) => {
    req.resume();
    if (req.url === "/health") return res.end();
    if (req.url === "/v1/models") return res.end(JSON.stringify({ object: "list", data: [{ id: model, object: "model" }] }));
    if (req.url === "/metrics") {
      return res.end(
        `# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{model_name="${model}"} ${state.running}\n` +
          `# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{model_name="${model}"} 0\n` +
          `# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{model_name="${model}"} 0.1\n`,
      );
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, state };
}

describe("replica agents sharing a NodeReporter", () => {
  it("two engines, one node report; an admin drain of one leaves the other reporting", async () => {
    // A heartbeat a second: the drain is asked in the answer to the next node report.
    const edge = await fakeEdge(1_000);
    const { r } = reporter(edge.url, { changeReportDelayMs: 5 });
    const engines = [await fakeEngine("m-a"), await fakeEngine("m-b")];
    const agents = engines.map(
      (e, i) =>
        new ReplicaAgent({
          deployment: "llm",
          edgeUrl: edge.url,
          key: KEY,
          replicaId: `gpu-7-${i}`,
          engineUrl: e.url,
          scrapeIntervalMs: 10,
          drainGraceMs: 0,
          drainTimeoutMs: 1_000,
          engineStartTimeoutMs: 5_000,
          nodeReporter: r,
        }),
    );
    const done = agents.map((a) => a.run());
    cleanup.push(async () => {
      for (const a of agents) void a.shutdown("test over");
      await Promise.all(done);
    });
    await waitFor("a node report of both engines", () => edge.nodeReports().some((m) => edge.entries(m).length === 2));
    engines[1]!.state.running = 3;
    await waitFor("engine b's load in a node report", () =>
      edge.nodeReports().some((m) => (m.body.reports as NodeReportEntry[]).some((e) => e.replica_id === "gpu-7-1" && e.ongoing === 3)),
    );
    expect(edge.received.filter((m) => m.path === ControlPath.report)).toEqual([]);
    const last = edge.nodeReports().at(-1)!.body.reports as NodeReportEntry[];
    // Both engines, each with its own model (the order of entries in a node report is not part of the protocol).
    expect(last.map((e) => [e.replica_id, e.models]).sort((a, b) => String(a[0]).localeCompare(String(b[0])))).toEqual([["gpu-7-0", ["m-a"]], ["gpu-7-1", ["m-b"]]]);

    edge.drain.add("gpu-7-0");
    expect(await done[0]).toBe(0);
    expect(edge.members.has("gpu-7-0")).toBe(false);
    expect(agents[1]!.phase).toBe("serving");
    const after = edge.nodeReports().length;
    engines[1]!.state.running = 1;
    await waitFor("a node report of b alone", () => edge.nodeReports().slice(after).some((m) => edge.entries(m).join() === "gpu-7-1"));
    expect(edge.received.every((m) => m.status === 200)).toBe(true);
  });
});
