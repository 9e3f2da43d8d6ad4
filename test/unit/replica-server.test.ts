/**
 * The reference replica's HTTP server (src/replica/server.ts) on loopback, called
 * directly as an orchestrator, a scraper or a stray client would: /-/healthz and what it
 * says, the open routes and the signed ones, --accept-unsigned, vLLM-style API keys,
 * the injected faults, refusals at capacity and the waiting queue, and a handler that
 * fails before or after its answer's head (issue 51: the replica reached by unit tests).
 */
import { afterEach, describe, expect, it } from "vitest";
import { Header, REJECT_STATUS, deriveReplicaKey, dispatchSignature, parseLoadHeader } from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { DispatchGuard } from "../../src/replica/dispatch-guard.ts";
import type { RequestHandler } from "../../src/replica/handlers.ts";
import { ReplicaServer, type ReplicaServerOptions } from "../../src/replica/server.ts";
import { oversizedUpload } from "../fixtures/oversized-upload.ts";

const servers: ReplicaServer[] = [];
afterEach(async () => {
  for (const s of servers.splice(0)) {
    s.server.closeAllConnections();
    await s.close();
  }
});

/** Requests sent with `?hold` wait in the handler until the test lets them go. */
function gated(): { handler: RequestHandler; held: () => number; go: () => void } {
  const waiting: (() => void)[] = [];
  return {
    handler: async (req, res, loadHeaders) => {
      if ((req.url ?? "").includes("hold")) await new Promise<void>((r) => waiting.push(r));
      req.resume();
      res.writeHead(200, { ...loadHeaders(), "content-type": "text/plain" });
      res.end("served");
    },
    held: () => waiting.length,
    go: () => waiting.splice(0).forEach((r) => r()),
  };
}

async function serve(o: Partial<ReplicaServerOptions> & { slots?: number; queue?: number } = {}) {
  const admission = o.admission ?? new AdmissionControl(o.slots ?? 2, o.queue ?? 0);
  const server = new ReplicaServer({ replicaId: "r-1", handler: gated().handler, ...o, admission });
  const { port } = await server.listen(0, "127.0.0.1");
  servers.push(server);
  return { url: `http://127.0.0.1:${port}`, admission, server };
}

describe("/-/healthz", () => {
  it("says the replica's state, slots, queue, counts and what the backend and options add; 503 once draining", async () => {
    const { url, admission } = await serve({ slots: 3, queue: 2, describe: () => ({ model: "m" }), fault: "hang" });
    const ready = await fetch(`${url}/-/healthz`);
    expect(ready.status).toBe(200);
    expect(ready.headers.get(Header.replica)).toBe("r-1");
    expect(parseLoadHeader(ready.headers.get(Header.load)!)).toMatchObject({ ongoing: 0, max: 3 });
    expect(await ready.json()).toEqual({ status: "ready", ongoing: 0, queued: 0, max_ongoing_requests: 3, max_queued_requests: 2, admitted: 0, rejected: 0, model: "m", fault: "hang", fault_refusals: 0 });
    admission.drain();
    const draining = await fetch(`${url}/-/healthz`);
    expect(draining.status).toBe(503);
    expect((await draining.json()) as object).toMatchObject({ status: "draining" });
  });
});

describe("who is served", () => {
  it("refuses a dispatch the edge did not sign with 401 and its reason, logging it once per 10 s however many come", async () => {
    const logs: string[] = [];
    const guard = new DispatchGuard(await deriveReplicaKey("master", "d"), "d", "r-1");
    const { url } = await serve({ guard, log: (m) => void logs.push(m) });
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${url}/v1/x`, { method: "POST", body: "{}" });
      expect(res.status).toBe(401);
      expect(res.headers.get(Header.rejected)).toBe("unauthorized");
      expect(await res.json()).toMatchObject({ error: { code: "unauthorized", details: { reason: "unsigned" } } });
    }
    expect(logs).toHaveLength(1);
    expect(logs[0]).toMatch(/^refused a dispatch not signed by the edge \(unsigned; 1 so far\): POST \/v1\/x$/);
    const health = (await (await fetch(`${url}/-/healthz`)).json()) as { dispatch_refusals: Record<string, number> };
    expect(health.dispatch_refusals.unsigned).toBe(3);
  });

  it("a signed dispatch whose body runs past what a digest may cover: 401, and the connection closes with the rest unread", async () => {
    const guard = new DispatchGuard(await deriveReplicaKey("master", "d"), "d", "r-1");
    const { url } = await serve({ guard });
    const sha = "ab".repeat(32);
    const signature = await dispatchSignature("master", { method: "POST", deployment: "d", target: "/v1/x", requestId: "req-big", replica: "r-1", bodySha256: sha });
    const headers = { ...Object.fromEntries(signature), [Header.requestId]: "req-big", [Header.deployment]: "d", [Header.bodySha256]: sha };
    // 101 MiB: past the 100 MiB a signed digest may cover.
    // Resolved: the connection closed. The answer, unless the close's reset discarded it (oversized-upload.ts).
    const big = await oversizedUpload(`${url}/v1/x`, headers, 101);
    if (big) {
      expect(big.status).toBe(401);
      expect(JSON.parse(big.text)).toMatchObject({ error: { code: "unauthorized", details: { reason: "bad_signature" } } });
    }
  });

  it("answers the backend's open routes (GET /health, /metrics) without a signature, and nothing else", async () => {
    const guard = new DispatchGuard(await deriveReplicaKey("master", "d"), "d", "r-1");
    const unadmitted: ReplicaServerOptions["unadmitted"] = (req, res) => {
      res.writeHead(200);
      res.end(`open ${req.method} ${req.url}`);
      return true;
    };
    const { url } = await serve({ guard, unadmitted });
    expect(await (await fetch(`${url}/metrics?name=x`)).text()).toBe("open GET /metrics?name=x");
    expect((await fetch(`${url}/health`, { method: "HEAD" })).status).toBe(200);
    for (const [method, path] of [["POST", "/metrics"], ["GET", "/metricsx"], ["GET", "/v1/models"]] as const) {
      expect((await fetch(`${url}${path}`, { method })).status, `${method} ${path}`).toBe(401);
    }
  });

  it("with acceptUnsigned, serves a request that carries no signature, and still checks one that does", async () => {
    const guard = new DispatchGuard(await deriveReplicaKey("master", "d"), "d", "r-1");
    const { url } = await serve({ guard, acceptUnsigned: true });
    expect(await (await fetch(`${url}/x`)).text()).toBe("served");
    const forged = await fetch(`${url}/x`, { headers: { [Header.signature]: "0".repeat(64), [Header.timestamp]: String(Date.now()), [Header.nonce]: "1" } });
    expect(forged.status).toBe(401);
  });

  it("with API keys, answers vLLM's 401 without one of them, and counts each key's requests by its place in the list", async () => {
    let keys = ["key-a", "key-b"];
    const { url, admission } = await serve({ apiKeys: () => keys });
    const none = await fetch(`${url}/x`);
    expect(none.status).toBe(401);
    expect(await none.json()).toEqual({ error: "Unauthorized" });
    expect((await fetch(`${url}/x`, { headers: { authorization: "Bearer key-c" } })).status).toBe(401);
    expect((await fetch(`${url}/x`, { headers: { authorization: "key-a" } })).status).toBe(401);
    // Refused before admission: no slot taken, nothing counted.
    expect(admission.counts).toEqual({ admitted: 0, rejected: 0 });
    for (const k of ["key-b", "key-b", "key-a"]) expect(await (await fetch(`${url}/x`, { headers: { authorization: `Bearer ${k}` } })).text()).toBe("served");
    let health = (await (await fetch(`${url}/-/healthz`)).json()) as { api_key_requests: number[] };
    expect(health.api_key_requests).toEqual([1, 2]);
    // A key file reloaded: read at each request.
    keys = ["key-c"];
    expect((await fetch(`${url}/x`, { headers: { authorization: "Bearer key-c" } })).status).toBe(200);
    expect((await fetch(`${url}/x`, { headers: { authorization: "Bearer key-a" } })).status).toBe(401);
    health = (await (await fetch(`${url}/-/healthz`)).json()) as { api_key_requests: number[] };
    expect(health.api_key_requests).toEqual([1]);
  });
});

describe("faults, for testing a fleet", () => {
  it("lie: claims to be idle in its load header while refusing every request as at capacity", async () => {
    const { url } = await serve({ fault: "lie", slots: 4 });
    const res = await fetch(`${url}/x`, { method: "POST", body: "{}" });
    expect(res.status).toBe(REJECT_STATUS);
    expect(res.headers.get(Header.rejected)).toBe("capacity");
    expect(parseLoadHeader(res.headers.get(Header.load)!)).toMatchObject({ ongoing: 0, queued: 0, max: 4 });
    expect(await res.json()).toMatchObject({ error: { code: "all_replicas_busy", message: "replica r-1 is at capacity" } });
    expect(((await (await fetch(`${url}/-/healthz`)).json()) as { fault_refusals: number }).fault_refusals).toBe(1);
  });

  it("hang: admits the request and never answers; its slot frees when the client leaves", async () => {
    const { url, admission } = await serve({ fault: "hang", slots: 1 });
    const client = new AbortController();
    const pending = fetch(`${url}/x`, { signal: client.signal }).catch((e: unknown) => e);
    await expect.poll(() => admission.ongoing, { timeout: 30_000 }).toBe(1);
    client.abort();
    await pending;
    await expect.poll(() => admission.ongoing, { timeout: 30_000 }).toBe(0);
  });
});

describe("admission at the server", () => {
  it("at capacity refuses before reading the body, with the reason and its load; a waiting place is served when a slot frees", async () => {
    const gate = gated();
    const { url, admission } = await serve({ handler: gate.handler, slots: 1, queue: 1 });
    const first = fetch(`${url}/x?hold`);
    await expect.poll(() => gate.held(), { timeout: 30_000 }).toBe(1);
    const queued = fetch(`${url}/x`);
    await expect.poll(() => admission.queued, { timeout: 30_000 }).toBe(1);
    const refused = await fetch(`${url}/x`, { method: "POST", body: "x".repeat(1000) });
    expect(refused.status).toBe(REJECT_STATUS);
    expect(refused.headers.get(Header.rejected)).toBe("capacity");
    expect(parseLoadHeader(refused.headers.get(Header.load)!)).toMatchObject({ ongoing: 1, queued: 1, max: 1 });
    expect(await refused.json()).toMatchObject({ error: { code: "all_replicas_busy", message: "replica r-1 is at capacity" } });
    gate.go();
    expect(await (await first).text()).toBe("served");
    expect(await (await queued).text()).toBe("served");
    await expect.poll(() => admission.ongoing, { timeout: 30_000 }).toBe(0);
    expect(admission.counts).toEqual({ admitted: 2, rejected: 1 });
  });

  it("a draining replica refuses new requests as draining", async () => {
    const { url, admission } = await serve();
    admission.drain();
    const res = await fetch(`${url}/x`);
    expect(res.status).toBe(REJECT_STATUS);
    expect(res.headers.get(Header.rejected)).toBe("draining");
    expect(((await res.json()) as { error: { message: string } }).error.message).toBe("replica r-1 is draining");
  });
});

describe("a handler that fails", () => {
  it("before its answer's head: 500 internal_error, logged, and the slot freed; after it: the connection is cut", async () => {
    const logs: string[] = [];
    const handler: RequestHandler = async (req, res) => {
      if ((req.url ?? "").includes("late")) {
        res.writeHead(200, { "content-type": "text/plain" });
        res.write("part");
      }
      throw new Error("model crashed");
    };
    const { url, admission } = await serve({ handler, log: (m) => void logs.push(m) });
    const early = await fetch(`${url}/x`);
    expect(early.status).toBe(500);
    expect(early.headers.get(Header.replica)).toBe("r-1");
    expect(await early.json()).toMatchObject({ error: { code: "internal_error", message: "replica handler failed" } });
    expect(logs).toEqual(["handler error: Error: model crashed"]);
    const late = await fetch(`${url}/x?late`);
    expect(late.status).toBe(200);
    await expect(late.text()).rejects.toThrow();
    await expect.poll(() => admission.ongoing, { timeout: 30_000 }).toBe(0);
  });
});
