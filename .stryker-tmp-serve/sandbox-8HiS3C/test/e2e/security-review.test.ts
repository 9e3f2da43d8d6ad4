// @ts-nocheck
// The security review's findings (issue 13), replayed against the real stack
// (workerd edge, the local HTTP front, echo replica processes) as an attacker
// would send them: raw sockets where a client library would clean the request up.
import { statSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Header, importReplicaKey, signDispatch } from "../../src/protocol/index.ts";
import { jsonOf, raw, statusOf } from "./raw-http.ts";
import { signedFetch, startStack, until } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
let secret: Server;
let secretPort = 0;
let secretHits = 0;
let chatKey = "";

beforeAll(async () => {
  // A service the edge must never be made to fetch from.
  secret = createServer((_req, res) => {
    secretHits++;
    res.end("the secret");
  });
  await new Promise<void>((r) => secret.listen(0, "127.0.0.1", r));
  secretPort = (secret.address() as { port: number }).port;
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/security") });
  const created = await fetch(`${stack.url}/-/deployments/chat/keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.adminSecret}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "review" }),
  });
  chatKey = ((await created.json()) as { key: string }).key;
});

afterAll(async () => {
  await stack?.dispose();
  await new Promise((r) => secret?.close(r));
});

const port = () => Number(new URL(stack.url).port);
const replicaOf = (deployment: string) => [...stack.replicas.values()].find((r) => r.deployment === deployment)!;
const counts = async (url: string) => (await (await fetch(`${url}/-/healthz`)).json()) as { admitted: number; ongoing: number; dispatch_refusals: Record<string, number> };
/** The body of a chunked answer, unchunked. */
function dechunk(answer: string): string {
  let rest = answer.slice(answer.indexOf("\r\n\r\n") + 4);
  let out = "";
  for (;;) {
    const nl = rest.indexOf("\r\n");
    const size = parseInt(rest.slice(0, nl), 16);
    if (!(size > 0)) return out;
    out += rest.slice(nl + 2, nl + 2 + size);
    rest = rest.slice(nl + 2 + size + 2);
  }
}


describe("1. the open proxy: a path that leaves its prefix", () => {
  it("never makes the edge fetch another host: every spelling of the review's request gets a JSON 400", async () => {
    const before = await counts(replicaOf("strip").url);
    for (const path of [
      `/strip/%2e%2e/aaa@127.0.0.1:${secretPort}/secret`,
      `/strip/%2E%2E/aaa@127.0.0.1:${secretPort}/secret`,
      `/strip/.%2e/aaa@127.0.0.1:${secretPort}/secret`,
      `/strip/%2e%2e%2faaa@127.0.0.1:${secretPort}/secret`,
      `/strip/..%5caaa@127.0.0.1:${secretPort}/secret`,
    ]) {
      const answer = await raw(port(), `GET ${path} HTTP/1.1\r\nHost: edge\r\n\r\n`);
      expect(statusOf(answer), path).toBe(400);
      expect(jsonOf(answer).error).toMatchObject({ code: "bad_request" });
    }
    // A literal "..": workerd 1.20261117 hands it to the Worker as sent (1.20260426 resolved
    // it first, and no route served what was left: a 404), and the edge refuses it as it
    // refuses the encoded spellings.
    const literal = await raw(port(), `GET /strip/../aaa@127.0.0.1:${secretPort}/secret HTTP/1.1\r\nHost: edge\r\n\r\n`);
    expect(statusOf(literal)).toBe(400);
    expect(jsonOf(literal).error.code).toBe("bad_request");
    expect(secretHits).toBe(0);
    expect((await counts(replicaOf("strip").url)).admitted).toBe(before.admitted);
  });

  it("a prefix forwarded unchanged cannot be left either: /mux/%2e%2e/admin/x never reaches a replica", async () => {
    const before = await counts(replicaOf("mux").url);
    const answer = await raw(port(), "GET /mux/%2e%2e/admin/x HTTP/1.1\r\nHost: edge\r\n\r\n");
    expect(statusOf(answer)).toBe(400);
    expect((await counts(replicaOf("mux").url)).admitted).toBe(before.admitted);
  });

  it("the denial-of-service shape (POST /strip/%2e%2e/metrics) marks no replica down: every request after it is served", async () => {
    for (let i = 0; i < 5; i++) {
      const answer = await raw(port(), "POST /strip/%2e%2e/metrics HTTP/1.1\r\nHost: edge\r\nContent-Length: 1\r\n\r\nx");
      expect(statusOf(answer)).toBe(400);
      // Nothing internal in the answer: no replica address, no runtime error.
      expect(answer).not.toMatch(/127\.0\.0\.1|TypeError|Invalid URL/);
    }
    for (let i = 0; i < 33; i++) expect((await fetch(`${stack.url}/strip/ok?chunks=1`)).status).toBe(200);
  });
});

describe("2. replicas serve only the edge", () => {
  it("a direct request to a replica is refused with a JSON 401 and counted; through the edge it is served", async () => {
    const r = replicaOf("strip");
    const direct = await fetch(`${r.url}/priv?chunks=1`);
    expect(direct.status).toBe(401);
    expect(await direct.json()).toMatchObject({ error: { code: "unauthorized", details: { reason: "unsigned" } } });
    expect((await counts(r.url)).dispatch_refusals.unsigned).toBeGreaterThanOrEqual(1);
    const viaEdge = await fetch(`${stack.url}/strip/priv?chunks=1`);
    expect(viaEdge.status).toBe(200);
    expect(await viaEdge.text()).toBe("chunk 0\n");
  });

  it("refuses forged, stale and replayed dispatches, each counted under its reason", async () => {
    const r = replicaOf("strip");
    const before = (await counts(r.url)).dispatch_refusals;
    const key = await importReplicaKey(await stack.replicaKey("strip"));
    const sign = async (timestamp: number, nonce: number, target = "/x?chunks=1") => ({
      [Header.requestId]: "rid-1",
      [Header.deployment]: "strip",
      [Header.timestamp]: String(timestamp),
      [Header.nonce]: String(nonce),
      [Header.signature]: await signDispatch(key, { timestamp, nonce, method: "GET", deployment: "strip", target, requestId: "rid-1", replica: r.id, bodySha256: "" }),
    });
    // Another deployment's key.
    const otherKey = await importReplicaKey(await stack.replicaKey("mux"));
    const forged = {
      ...(await sign(Date.now(), 11)),
      [Header.signature]: await signDispatch(otherKey, { timestamp: Date.now(), nonce: 11, method: "GET", deployment: "strip", target: "/x?chunks=1", requestId: "rid-1", replica: r.id, bodySha256: "" }),
    };
    expect((await fetch(`${r.url}/x?chunks=1`, { headers: forged })).status).toBe(401);
    // Signed for another path.
    expect((await fetch(`${r.url}/admin?chunks=1`, { headers: await sign(Date.now(), 12) })).status).toBe(401);
    // A minute old.
    expect((await fetch(`${r.url}/x?chunks=1`, { headers: await sign(Date.now() - 60_000, 13) })).status).toBe(401);
    // The same dispatch twice.
    const once = await sign(Date.now(), 14);
    expect((await fetch(`${r.url}/x?chunks=1`, { headers: once })).status).toBe(200);
    const again = await fetch(`${r.url}/x?chunks=1`, { headers: once });
    expect(again.status).toBe(401);
    expect(await again.json()).toMatchObject({ error: { code: "unauthorized", details: { reason: "replayed" } } });
    const after = (await counts(r.url)).dispatch_refusals;
    expect(after.bad_signature! - before.bad_signature!).toBe(2);
    expect(after.stale_timestamp! - before.stale_timestamp!).toBe(1);
    expect(after.replayed! - before.replayed!).toBe(1);
  });

  it("the replica's /-/healthz stays open (load figures only, for probes)", async () => {
    const res = await fetch(`${replicaOf("strip").url}/-/healthz`);
    expect(res.status).toBe(200);
  });
});

describe("3. the edge checks before it pays", () => {
  it("/v1 refuses a caller without a valid key before reading its body: the 401 comes while the upload is still unsent", async () => {
    const head = `POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: ${10 * 1024 * 1024}\r\n\r\n`;
    const answer = await raw(port(), head, { body: '{"messages":[' });
    expect(statusOf(answer)).toBe(401);
    expect(jsonOf(answer).error.code).toBe("unauthorized");
  });

  it("/v1 routes a body whose model comes after a large messages array, with the key checked first", async () => {
    const messages = Array.from({ length: 2000 }, (_, i) => ({ role: "user", content: `message ${i} ${"x".repeat(400)}` }));
    const body = JSON.stringify({ messages, stream: false, model: "echo-model" });
    const res = await fetch(`${stack.url}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${chatKey}`, "content-type": "application/json" }, body });
    expect(res.status).toBe(200);
    // The echo replica sends back exactly the bytes the client sent: forwarded untouched.
    expect(await res.text()).toBe(body);
  });

  it("a slow held upload gets a 408 and never reaches a replica", async () => {
    const r = replicaOf("strip");
    const before = await counts(r.url);
    const answer = await raw(port(), "POST /strip/slow HTTP/1.1\r\nHost: edge\r\nContent-Length: 1000\r\n\r\n", { body: "0123456789" });
    expect(statusOf(answer)).toBe(408);
    expect(jsonOf(answer).error.code).toBe("request_timeout");
    expect((await counts(r.url)).admitted).toBe(before.admitted);
  });

  it("slow streamed uploads never take a replica slot: stalled chunked uploads get 408 at the edge and the replica admits none", async () => {
    const r = replicaOf("strip");
    const before = await counts(r.url);
    // Four chunked uploads (the replica's capacity) that send one chunk and stop. The edge holds a
    // streamed body until its first 64 KiB (or its end) arrive at pace, so these never reach it.
    const stalled = await Promise.all(
      Array.from({ length: 4 }, () => raw(port(), "POST /strip/upload HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: chunked\r\n\r\n", { body: "5\r\nhello\r\n", untilMs: 20_000 })),
    );
    for (const answer of stalled) expect(statusOf(answer)).toBe(408);
    expect((await counts(r.url)).admitted).toBe(before.admitted);
    const res = await fetch(`${stack.url}/strip/after?chunks=1`);
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("chunk 0\n");
  });

  it("a streamed upload that keeps its pace reaches the replica whole, past the part the edge holds first", async () => {
    const body = "z".repeat(300 * 1024);
    const answer = await raw(port(), `POST /strip/big HTTP/1.1\r\nHost: edge\r\nContent-Length: ${body.length}\r\n\r\n`, { body, untilMs: 20_000 });
    expect(statusOf(answer)).toBe(200);
    expect(dechunk(answer)).toBe(body);
  });

  it("session ids used once cost no object call; ids used twice bind within the client's budget", async () => {
    const state = async () => ((await stack.deploymentState("strip")) as unknown as { sessions: { bindings: number; resolves: number; writes: number } }).sessions;
    const before = await state();
    for (let i = 0; i < 300; i++) {
      const res = await fetch(`${stack.url}/strip/s?chunks=1`, { headers: { "x-session-id": `one-shot-${i}` } });
      expect(res.status).toBe(200);
      await res.arrayBuffer();
    }
    const afterOnce = await state();
    expect(afterOnce.resolves).toBe(before.resolves);
    expect(afterOnce.writes).toBe(before.writes);
    const started = Date.now();
    for (let i = 0; i < 300; i++) {
      for (let n = 0; n < 2; n++) {
        const res = await fetch(`${stack.url}/strip/s?chunks=1`, { headers: { "x-session-id": `twice-${i}` } });
        expect(res.status).toBe(200);
        await res.arrayBuffer();
      }
    }
    const seconds = (Date.now() - started) / 1000;
    const made = (await state()).writes - afterOnce.writes;
    // Burst 100, then 10 a second (one client, one isolate).
    expect(made).toBeGreaterThan(0);
    expect(made).toBeLessThanOrEqual(100 + Math.ceil(10 * seconds));
  });

  it("an SSE event that never ends passes through as the replica sends it: the edge holds nothing of it", async () => {
    // The echo replica streams the request back: one 5 MiB "event" with no blank line. The
    // edge pipes it natively (no framing, no buffer to cap), so it arrives whole and unaltered.
    const pad = "a".repeat(5 * 1024 * 1024);
    const body = JSON.stringify({ model: "echo-model", stream: true, prompt: "x", pad });
    // A 503 (with Retry-After) is the edge saying no replica is in its view just now, which a
    // loaded machine can make true for a moment after 900 requests: as a client would, send again.
    let last = "";
    const res = await until(
      "an answer other than 503 from /v1/completions",
      async () => {
        const r = await fetch(`${stack.url}/v1/completions`, { method: "POST", headers: { authorization: `Bearer ${chatKey}`, "content-type": "application/json" }, body });
        if (r.status !== 503) return r;
        last = await r.text();
        return undefined;
      },
      20_000,
      () => last,
    );
    expect(res.status).toBe(200);
    const text = await res.text();
    expect(text.length).toBeGreaterThanOrEqual(pad.length);
    expect(text).toContain(pad);
    expect(text).not.toContain("upstream_failed");
  });
});

describe("4. correctness at the HTTP edge", () => {
  it("Expect: 100-continue is answered, not forwarded: the body arrives and the answer is the replica's", async () => {
    const body = "y".repeat(200_000);
    // As curl sends a large body: the header, then (after waiting up to 1 s for a 100) the body.
    const answer = (await raw(port(), `POST /mux/echo HTTP/1.1\r\nHost: edge\r\nContent-Length: ${body.length}\r\nExpect: 100-continue\r\n\r\n`, { body, untilMs: 10_000 })).replace(
      /^HTTP\/1\.1 100 Continue\r\n\r\n/,
      "",
    );
    expect(statusOf(answer)).toBe(200);
    expect(dechunk(answer)).toBe(body);
  });

  it("serves only a deployment's methods: TRACE and others get a 405 with Allow, and no replica sees them", async () => {
    const r = replicaOf("mux");
    const before = await counts(r.url);
    for (const method of ["TRACE", "PUT", "DELETE", "OPTIONS"]) {
      const answer = await raw(port(), `${method} /mux/x HTTP/1.1\r\nHost: edge\r\nContent-Length: 0\r\n\r\n`);
      expect(statusOf(answer), method).toBe(405);
      expect(answer, method).toMatch(/\r\nallow: GET, POST\r\n/i);
    }
    expect((await counts(r.url)).admitted).toBe(before.admitted);
    // A deployment that lists none serves the usual ones (never TRACE).
    expect((await fetch(`${stack.url}/strip/x?chunks=1`, { method: "DELETE" })).status).toBe(200);
    expect(statusOf(await raw(port(), "TRACE /strip/x HTTP/1.1\r\nHost: edge\r\n\r\n"))).toBe(405);
  });

  it("malformed framing gets the edge's JSON 400 (or 405), not a plain 500", async () => {
    const cases: [string, number][] = [
      ["POST /strip/x HTTP/1.1\r\nHost: edge\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", 400],
      ["POST /strip/x HTTP/1.1\r\nHost: edge\r\nContent-Length: -1\r\n\r\n", 400],
      ["POST /strip/x HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: gzip\r\n\r\n", 400],
      ["GET http://evil.test/strip/x HTTP/1.1\r\nHost: edge\r\n\r\n", 400],
      ["CONNECT evil.test:443 HTTP/1.1\r\nHost: evil.test:443\r\n\r\n", 405],
      ["FOO /strip/x HTTP/1.1\r\nHost: edge\r\n\r\n", 405],
    ];
    for (const [head, status] of cases) {
      const answer = await raw(port(), head);
      expect(statusOf(answer), head).toBe(status);
      expect(jsonOf(answer).error.code, head).toMatch(/^(bad_request|method_not_allowed)$/);
    }
  });
});

describe("5. leaks", () => {
  it("/v1/models and /-/healthz show a private deployment only to callers whose key may use it", async () => {
    const anonymous = (await (await fetch(`${stack.url}/v1/models`)).json()) as { data: { id: string }[] };
    expect(anonymous.data.map((m) => m.id)).toEqual([]);
    const keyed = (await (await fetch(`${stack.url}/v1/models`, { headers: { authorization: `Bearer ${chatKey}` } })).json()) as { data: { id: string }[] };
    expect(keyed.data.map((m) => m.id)).toEqual(["echo-model"]);
    const health = (await (await fetch(`${stack.url}/-/healthz`)).json()) as { ready_replicas: Record<string, number> };
    expect(Object.keys(health.ready_replicas).sort()).toEqual(["mux", "strip"]);
    const keyedHealth = (await (await fetch(`${stack.url}/-/healthz`, { headers: { authorization: `Bearer ${chatKey}` } })).json()) as { ready_replicas: Record<string, number> };
    expect(Object.keys(keyedHealth.ready_replicas).sort()).toEqual(["chat", "mux", "strip"]);
  });

  it("client errors carry a code and the request id, never replica ids, loads or internal errors", async () => {
    // Kill the chat replica: its next request fails for want of a replica.
    const r = replicaOf("chat");
    r.child.kill("SIGKILL");
    await r.exited;
    const res = await until("the dead replica to leave routing", async () => {
      const x = await fetch(`${stack.url}/v1/completions`, { method: "POST", headers: { authorization: `Bearer ${chatKey}` }, body: JSON.stringify({ model: "echo-model", prompt: "x" }) });
      const text = await x.text();
      return x.status === 503 || x.status === 502 ? text : undefined;
    });
    expect(res).not.toContain(r.id);
    expect(res).not.toMatch(/127\.0\.0\.1|"capacity"|"load"|expiresInMs|Network connection/);
    expect(JSON.parse(res)).toMatchObject({ error: { request_id: expect.any(String) } });
  });

  it("a malformed or oversized x-request-id is replaced, never echoed", async () => {
    for (const id of ["<script>alert(1)</script>", "x".repeat(200), "a b"]) {
      const res = await fetch(`${stack.url}/strip/r?chunks=1`, { headers: { "x-request-id": id } });
      expect(res.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
      const missing = await fetch(`${stack.url}/nowhere`, { headers: { "x-request-id": id } });
      const text = await missing.text();
      expect(text).not.toContain(id);
      expect(missing.headers.get("x-request-id")).not.toBe(id);
    }
  });

  it("writes the local secrets readable by their owner only", () => {
    expect(statSync(join(stack.stateDir, "workerd.capnp")).mode & 0o777).toBe(0o600);
    expect(statSync(join(stack.stateDir, "do")).mode & 0o777).toBe(0o700);
  });
});

describe("the signed fetch the tests use is what the edge sends", () => {
  it("a replica serves it", async () => {
    const res = await signedFetch(stack, "strip")(`${replicaOf("strip").url}/x?chunks=1`);
    expect(res.status).toBe(200);
  });
});
