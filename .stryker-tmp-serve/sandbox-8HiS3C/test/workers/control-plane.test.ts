// @ts-nocheck
// The Worker's control routes inside workerd: signed register/report/deregister
// and node reports (HMAC per deployment key, timestamp window, nonce replay guard), the rejection
// counters, and the replica URL policy in local mode (SWITCHYARD_MODE=local in
// vitest.config.ts; production rules are unit-tested in test/unit/replica-url.test.ts).
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import { afterAll, describe, expect, it, vi } from "vitest";
import {
  MAX_NODE_REPLICAS,
  NonceCounter,
  PROTOCOL_VERSION,
  SIGNATURE_WINDOW_MS,
  deriveReplicaKey,
  importReplicaKey,
  signedHeaders,
  type ControlRejectReason,
  type NodeReportEntry,
  type NodeReportMessage,
  type RegisterMessage,
  type ReportMessage,
} from "../../src/protocol/index.ts";
import { registerMessage, reportMessage } from "../fixtures/control-messages.ts";
import { deployments } from "../../.switchyard/deployments.ts";
import { createEdgeApp } from "../../src/index.ts";
import { UNKNOWN_DEPLOYMENT, controlRejections } from "../../src/proxy/routes/control.ts";

const MASTER = "test-replica-secret";
const nonces = new NonceCounter();

const register = (id: string, url = `http://127.0.0.1:9/${id}`, deployment = "hello"): RegisterMessage => registerMessage(id, { deployment, url, max_ongoing_requests: 5 });
const report = (id: string, seq: number, deployment = "hello"): ReportMessage => reportMessage(id, seq, { deployment, ts: Date.now() });

interface Signed {
  path: string;
  body: string;
  headers: Record<string, string>;
}

/** Signs a message the way the replica's EdgeClient does; options bend one part. */
async function sign(
  path: string,
  message: unknown,
  o: { keyFor?: string; key?: string; timestamp?: number; nonce?: number } = {},
): Promise<Signed> {
  const body = typeof message === "string" ? message : JSON.stringify(message);
  const deployment = o.keyFor ?? (message as { deployment?: string }).deployment ?? "hello";
  const key = await importReplicaKey(o.key ?? (await deriveReplicaKey(MASTER, deployment)));
  const headers = await signedHeaders(key, { timestamp: o.timestamp ?? Date.now(), nonce: o.nonce ?? nonces.next(), path, body });
  return { path, body, headers };
}

const send = (m: Signed, headers: Record<string, string> = m.headers) =>
  exports.default.fetch(`http://edge${m.path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: m.body,
  });

const post = async (path: string, message: unknown, o?: Parameters<typeof sign>[2]) => send(await sign(path, message, o));

async function expectRejected(res: Response, reason: ControlRejectReason) {
  expect(res.status).toBe(401);
  expect(await res.json()).toMatchObject({ error: { code: "unauthorized", details: { reason } } });
}

const count = (deployment: string, reason: ControlRejectReason) => controlRejections()[deployment]?.[reason] ?? 0;

// Leave the shared "hello" routing object as found: deregister what these tests registered.
afterAll(async () => {
  const stub = env.ROUTER.get(env.ROUTER.idFromName("hello"));
  for (const { id } of (await stub.snapshot()).replicas) {
    await post("/-/replicas/deregister", { protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: id });
  }
  expect((await stub.snapshot()).replicas).toEqual([]);
});

describe("signed control messages", () => {
  it("accepts a signed register, report and deregister", async () => {
    const r1 = await post("/-/replicas/register", register("s1"));
    expect(r1.status).toBe(200);
    expect(await r1.json()).toMatchObject({ ok: true, report_interval_ms: 1000 });
    const r2 = await post("/-/replicas/report", report("s1", 1));
    expect(r2.status).toBe(200);
    expect(await r2.json()).toEqual({ ok: true, outcome: "ok" });
    const r3 = await post("/-/replicas/deregister", { protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: "s1" });
    expect(await r3.json()).toEqual({ ok: true, removed: true });
  });

  it("refuses an unsigned message (the old Bearer secret included) and counts it", async () => {
    const before = count("hello", "unsigned");
    const m = await sign("/-/replicas/register", register("rogue"));
    await expectRejected(await send(m, { authorization: `Bearer ${MASTER}` }), "unsigned");
    // Two of the three headers are not enough.
    const { "x-switchyard-nonce": _dropped, ...partial } = m.headers;
    await expectRejected(await send(m, partial), "unsigned");
    expect(count("hello", "unsigned")).toBe(before + 2);
  });

  it("counts unsigned messages naming no served deployment under one bucket", async () => {
    const before = count(UNKNOWN_DEPLOYMENT, "unsigned");
    const res = await exports.default.fetch("http://edge/-/replicas/register", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(register("x", undefined, "nowhere")),
    });
    await expectRejected(res, "unsigned");
    expect(count(UNKNOWN_DEPLOYMENT, "unsigned")).toBe(before + 1);
    expect(controlRejections()).not.toHaveProperty("nowhere");
  });

  it("parses nothing of an unsigned or wrongly signed message: its body is only scanned for the deployment's name", async () => {
    // A deep body (the review's 240 KB nesting cost 19 ms of JSON.parse before the signature was checked); 60 KB here, under the 64 KiB limit.
    const deep = `{"deployment":"hello","x":${"[".repeat(30_000)}${"]".repeat(30_000)}}`;
    const flat = JSON.stringify(register("parse-me"));
    const parse = vi.spyOn(JSON, "parse");
    try {
      await expectRejected(await send({ path: "/-/replicas/register", body: flat, headers: {} }), "unsigned");
      await expectRejected(await post("/-/replicas/register", register("parse-me"), { keyFor: "echo" }), "bad_signature");
      expect(parse.mock.calls.filter(([text]) => typeof text === "string" && text.includes("parse-me"))).toEqual([]);
      const signedDeep = await sign("/-/replicas/register", deep, { keyFor: "echo" });
      const res = await send(signedDeep);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ error: { code: "invalid_message", message: expect.stringMatching(/deeper/) } });
      const parsedBodies = parse.mock.calls.filter(([text]) => typeof text === "string" && (text.includes("parse-me") || text.includes("[[[")));
      expect(parsedBodies).toEqual([]);
    } finally {
      parse.mockRestore();
    }
  });

  it("refuses a message signed with another deployment's key: a rogue that knows the name cannot join", async () => {
    const before = count("hello", "bad_signature");
    await expectRejected(await post("/-/replicas/register", register("rogue"), { keyFor: "echo" }), "bad_signature");
    // A key derived from a guessed master, and a key that is not derived at all.
    await expectRejected(await post("/-/replicas/register", register("rogue"), { key: await deriveReplicaKey("guess", "hello") }), "bad_signature");
    await expectRejected(await post("/-/replicas/register", register("rogue"), { key: "ab".repeat(32) }), "bad_signature");
    expect(count("hello", "bad_signature")).toBe(before + 3);
    const snap = await env.ROUTER.get(env.ROUTER.idFromName("hello")).snapshot();
    expect(snap.replicas.map((r) => r.id)).not.toContain("rogue");
  });

  it("refuses a signature over different bytes, path, timestamp or nonce than those sent", async () => {
    const m = await sign("/-/replicas/register", register("t1"));
    // Body changed after signing (a different URL).
    await expectRejected(await send({ ...m, body: JSON.stringify(register("t1", "http://127.0.0.1:10/evil")) }), "bad_signature");
    // A register's signature presented on the deregister path.
    await expectRejected(await send({ ...m, path: "/-/replicas/deregister" }), "bad_signature");
    await expectRejected(await send(m, { ...m.headers, "x-switchyard-timestamp": String(Date.now() + 1) }), "bad_signature");
    await expectRejected(await send(m, { ...m.headers, "x-switchyard-nonce": String(nonces.next()) }), "bad_signature");
    // Malformed headers read as a bad signature.
    await expectRejected(await send(m, { ...m.headers, "x-switchyard-signature": m.headers["x-switchyard-signature"]!.toUpperCase() }), "bad_signature");
    await expectRejected(await send(m, { ...m.headers, "x-switchyard-nonce": "-1" }), "bad_signature");
    // The untouched message still goes through: nothing above consumed its nonce.
    expect((await send(m)).status).toBe(200);
  });

  it("refuses stale and future timestamps beyond the window", async () => {
    const before = count("hello", "stale_timestamp");
    await post("/-/replicas/register", register("t2"));
    await expectRejected(await post("/-/replicas/report", report("t2", 1), { timestamp: Date.now() - SIGNATURE_WINDOW_MS - 5_000 }), "stale_timestamp");
    await expectRejected(await post("/-/replicas/report", report("t2", 1), { timestamp: Date.now() + SIGNATURE_WINDOW_MS + 5_000 }), "stale_timestamp");
    expect(count("hello", "stale_timestamp")).toBe(before + 2);
    // Within the window is fine.
    expect((await post("/-/replicas/report", report("t2", 1), { timestamp: Date.now() - 10_000 })).status).toBe(200);
  });

  it("refuses a replay of a captured valid report, and of an older one", async () => {
    const before = count("hello", "replayed");
    expect((await post("/-/replicas/register", register("t3"))).status).toBe(200);
    const first = await sign("/-/replicas/report", report("t3", 1));
    const second = await sign("/-/replicas/report", report("t3", 2));
    expect((await send(second)).status).toBe(200);
    await expectRejected(await send(second), "replayed");
    // Captured earlier but never delivered: its nonce is below the last accepted one.
    await expectRejected(await send(first), "replayed");
    expect(count("hello", "replayed")).toBe(before + 2);
    expect((await env.ROUTER.get(env.ROUTER.idFromName("hello")).stats()).replays).toBeGreaterThanOrEqual(2);
  });

  it("refuses a replayed deregister (a captured one cannot knock the replica out again)", async () => {
    await post("/-/replicas/register", register("t4"));
    const dereg = await sign("/-/replicas/deregister", { protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: "t4" });
    expect(await (await send(dereg)).json()).toEqual({ ok: true, removed: true });
    await post("/-/replicas/register", register("t4"));
    await expectRejected(await send(dereg), "replayed");
    const snap = await env.ROUTER.get(env.ROUTER.idFromName("hello")).snapshot();
    expect(snap.replicas.map((r) => r.id)).toContain("t4");
  });

  it("answers 404 to a signed message for a deployment the Worker does not serve", async () => {
    const res = await post("/-/replicas/register", register("x", undefined, "nowhere"));
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: { code: "route_not_found" } });
  });

  it("validates signed messages: not JSON, unknown fields, bad URLs", async () => {
    const notJson = await post("/-/replicas/register", "{not json");
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ error: { code: "invalid_message" } });
    expect((await post("/-/replicas/register", { ...register("v1"), url: "file:///etc/passwd" })).status).toBe(400);
    expect((await post("/-/replicas/report", { ...report("v1", 1), surprise: true })).status).toBe(400);
  });

  it("refuses bodies without a Content-Length at most 64 KiB before anything else", async () => {
    const res = await exports.default.fetch("http://edge/-/replicas/register", {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: "x".repeat(64 * 1024 + 1),
    });
    expect(res.status).toBe(413);
  });

  it("answers 409 to a signed report from an unregistered replica", async () => {
    const res = await post("/-/replicas/report", report("never-registered", 1));
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({ error: { code: "unknown_replica" } });
  });
});

describe("replica URL policy at registration (production mode)", () => {
  // The same Worker with SWITCHYARD_MODE unset (a user's own edge under wrangler dev without .dev.vars).
  const production = createEdgeApp(deployments).app;
  const postProduction = async (url: string) => {
    const m = await sign("/-/replicas/register", register("u-prod", url));
    const ctx = createExecutionContext();
    const res = await production.request(`http://edge${m.path}`, { method: "POST", headers: { "content-type": "application/json", "content-length": String(new TextEncoder().encode(m.body).length), ...m.headers }, body: m.body }, { ...env, SWITCHYARD_MODE: undefined }, ctx);
    await waitOnExecutionContext(ctx);
    return res;
  };

  it("refuses a loopback replica and names the switch that allows it", async () => {
    const res = await postProduction("http://127.0.0.1:8000");
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; details: { reason: string } } };
    expect(body.error.details.reason).toBe("not_https");
    expect(body.error.message).toMatch(/SWITCHYARD_MODE=local.*\.dev\.vars/);
  });

  it("gives no such hint where local mode would refuse too", async () => {
    const res = await postProduction("https://169.254.169.254/");
    expect(res.status).toBe(400);
    const body = (await res.json()) as { error: { message: string; details: { reason: string } } };
    expect(body.error.details.reason).toBe("link_local");
    expect(body.error.message).not.toMatch(/SWITCHYARD_MODE/);
  });
});

describe("replica URL policy at registration (local mode)", () => {
  const refused = async (url: string, reason: string) => {
    const res = await post("/-/replicas/register", register("u-rogue", url));
    expect(res.status, url).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: "invalid_message", details: { reason } } });
  };

  it("refuses cloud metadata endpoints, however spelled", async () => {
    await refused("http://169.254.169.254/latest/meta-data/", "link_local");
    await refused("http://metadata.google.internal/computeMetadata/v1/", "metadata");
    await refused("http://[::ffff:169.254.169.254]/", "link_local");
    await refused("http://0xa9fea9fe/", "link_local");
    await refused("http://100.100.100.200/", "metadata");
    await refused("http://[fd00:ec2::254]/", "metadata");
  });

  it("refuses link-local, unspecified and multicast addresses even in local mode", async () => {
    await refused("http://169.254.1.1:8000", "link_local");
    await refused("http://[fe80::1]:8000", "link_local");
    await refused("http://0.0.0.0:8000", "unspecified");
    await refused("http://224.0.0.1:8000", "multicast");
    const snap = await env.ROUTER.get(env.ROUTER.idFromName("hello")).snapshot();
    expect(snap.replicas.map((r) => r.id)).not.toContain("u-rogue");
  });

  it("allows loopback and private addresses in local mode", async () => {
    for (const [id, url] of [
      ["u-lo", "http://127.0.0.1:8000"],
      ["u-name", "http://localhost:8000"],
      ["u-10", "http://10.1.2.3:8000"],
      ["u-192", "http://192.168.1.5:8000"],
      ["u-v6", "http://[::1]:8000"],
    ] as const) {
      expect((await post("/-/replicas/register", register(id, url))).status, url).toBe(200);
    }
  });
});

describe("node reports", () => {
  const NODE = "gpu-n1";
  const entry = (id: string, seq: number, load: Partial<NodeReportEntry> = {}): NodeReportEntry => ({
    replica_id: id,
    seq,
    ts: Date.now(),
    state: "ready",
    ongoing: 0,
    queued: 0,
    models: [],
    loading: [],
    ...load,
  });
  const nodeReport = (reports: NodeReportEntry[], node = NODE): NodeReportMessage => ({ protocol: PROTOCOL_VERSION, deployment: "hello", node, reports });
  const onNode = (id: string): RegisterMessage => ({ ...register(id), node: NODE });
  const router = () => env.ROUTER.get(env.ROUTER.idFromName("hello"));
  const loadOf = async (id: string) => (await router().snapshot()).replicas.find((r) => r.id === id)?.load;

  it("a valid node report updates every entry's load, one outcome per entry in order; counted once as a node report", async () => {
    for (const id of ["nr-a", "nr-b"]) expect((await post("/-/replicas/register", onNode(id))).status).toBe(200);
    const before = await router().stats();
    const res = await post("/-/replicas/report-node", nodeReport([entry("nr-a", 1, { ongoing: 2, kv_cache_usage: 0.5 }), entry("nr-b", 1, { ongoing: 3, queued: 1 })]));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true, outcomes: ["ok", "ok"] });
    expect(await loadOf("nr-a")).toMatchObject({ seq: 1, ongoing: 2, kv: 0.5, state: "ready" });
    expect(await loadOf("nr-b")).toMatchObject({ seq: 1, ongoing: 3, queued: 1 });
    const after = await router().stats();
    expect(after.nodeReports - before.nodeReports).toBe(1);
    expect(after.reports - before.reports).toBe(2);

    // An older seq for one entry: stale_seq for it alone (liveness, not load).
    const stale = await post("/-/replicas/report-node", nodeReport([entry("nr-a", 2, { ongoing: 1 }), entry("nr-b", 0, { ongoing: 9 })]));
    expect(await stale.json()).toEqual({ ok: true, outcomes: ["ok", "stale_seq"] });
    expect(await loadOf("nr-a")).toMatchObject({ seq: 2, ongoing: 1 });
    expect(await loadOf("nr-b")).toMatchObject({ seq: 1, ongoing: 3 });
  });

  it("refuses a replay of the same node report (same nonce) with 401 replayed, and changes nothing", async () => {
    await post("/-/replicas/register", onNode("nr-c"));
    const before = count("hello", "replayed");
    const m = await sign("/-/replicas/report-node", nodeReport([entry("nr-c", 5, { ongoing: 4 })]));
    expect((await send(m)).status).toBe(200);
    // Newer load since, then the captured message again.
    expect((await post("/-/replicas/report-node", nodeReport([entry("nr-c", 6, { ongoing: 1 })]))).status).toBe(200);
    await expectRejected(await send(m), "replayed");
    expect(count("hello", "replayed")).toBe(before + 1);
    expect(await loadOf("nr-c")).toMatchObject({ seq: 6, ongoing: 1 });
  });

  it("checks the node report's nonce per node, apart from each replica's own", async () => {
    const own = nonces.next();
    expect((await post("/-/replicas/register", onNode("nr-d"), { nonce: own })).status).toBe(200);
    // Below the replica's last nonce, but the first of its node: accepted.
    expect((await post("/-/replicas/report-node", nodeReport([entry("nr-d", 1)], "gpu-n3"), { nonce: own - 1_000 })).status).toBe(200);
    // Above: and the replica's own next message, below the node's, is accepted too.
    expect((await post("/-/replicas/report-node", nodeReport([entry("nr-d", 2)], "gpu-n4"), { nonce: nonces.next() + 1_000 })).status).toBe(200);
    expect((await post("/-/replicas/report", { ...report("nr-d", 3), node: NODE }, { nonce: own + 1 })).status).toBe(200);
  });

  it("answers unknown_replica for an entry of an unregistered replica, and applies the others", async () => {
    await post("/-/replicas/register", onNode("nr-e"));
    const res = await post("/-/replicas/report-node", nodeReport([entry("nr-ghost", 1), entry("nr-e", 1, { ongoing: 2 })]));
    expect(res.status).toBe(200);
    expect(await res.json()).toEqual({ ok: true, outcomes: ["unknown_replica", "ok"] });
    expect(await loadOf("nr-e")).toMatchObject({ ongoing: 2 });
    expect(await loadOf("nr-ghost")).toBeUndefined();
  });

  it("answers drain for an entry whose replica an operator asked to drain", async () => {
    await post("/-/replicas/register", onNode("nr-f"));
    await post("/-/replicas/register", onNode("nr-g"));
    expect(await router().requestDrain("nr-f")).toBe(true);
    const res = await post("/-/replicas/report-node", nodeReport([entry("nr-f", 1), entry("nr-g", 1)]));
    expect(await res.json()).toEqual({ ok: true, outcomes: ["drain", "ok"] });
  });

  it("refuses too many entries, a replica twice, none, and unknown fields with 400", async () => {
    const many = Array.from({ length: MAX_NODE_REPLICAS + 1 }, (_, i) => entry(`nr-m${i}`, 1));
    for (const bad of [
      nodeReport(many),
      nodeReport([entry("nr-a", 1), entry("nr-a", 2)]),
      nodeReport([]),
      { ...nodeReport([entry("nr-a", 1)]), surprise: true },
      nodeReport([{ ...entry("nr-a", 1), node: NODE } as NodeReportEntry]),
    ]) {
      const res = await post("/-/replicas/report-node", bad);
      expect(res.status).toBe(400);
      expect(await res.json()).toMatchObject({ error: { code: "invalid_message" } });
    }
  });

  it("takes bodies above the 64 KiB of other control messages, up to MAX_NODE_REPORT_BYTES", async () => {
    const models = Array.from({ length: 40 }, (_, k) => `org-${k}/a-fairly-long-model-name-for-the-size-test-${k}`);
    const reports = Array.from({ length: MAX_NODE_REPLICAS }, (_, i) => entry(`nr-big${i}`, 1, { models }));
    const m = nodeReport(reports);
    expect(JSON.stringify(m).length).toBeGreaterThan(64 * 1024);
    const res = await post("/-/replicas/report-node", m);
    expect(res.status).toBe(200);
    expect(((await res.json()) as { outcomes: string[] }).outcomes).toEqual(Array(MAX_NODE_REPLICAS).fill("unknown_replica"));
  });

  it("refuses an unsigned node report", async () => {
    const m = await sign("/-/replicas/report-node", nodeReport([entry("nr-a", 9)]));
    await expectRejected(await send(m, { "content-type": "application/json" }), "unsigned");
  });
});
