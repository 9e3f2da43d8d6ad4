// @ts-nocheck
// The security review's second pass (issue 28), replayed against the real stack as
// an attacker would send it: raw sockets, partial bodies, captured dispatches.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { ControlPath, Header, bodySha256, importReplicaKey, signDispatch } from "../../src/protocol/index.ts";
import { headerOf, jsonOf, raw, statusOf } from "./raw-http.ts";
import { startStack, until } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
let vaultKey = "";

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/security-second") });
  const created = await fetch(`${stack.url}/-/deployments/vault/keys`, {
    method: "POST",
    headers: { authorization: `Bearer ${stack.adminSecret}`, "content-type": "application/json" },
    body: JSON.stringify({ name: "second-pass" }),
  });
  vaultKey = ((await created.json()) as { key: string }).key;
});

afterAll(async () => {
  await stack?.dispose();
});

const port = () => Number(new URL(stack.url).port);
const replicasOf = (deployment: string) => [...stack.replicas.values()].filter((r) => r.deployment === deployment);
type Counts = { admitted: number; ongoing: number; dispatch_refusals: Record<string, number> };
const counts = async (url: string) => (await (await fetch(`${url}/-/healthz`)).json()) as Counts;
const admittedOf = async (deployment: string) => (await Promise.all(replicasOf(deployment).map((r) => counts(r.url)))).reduce((n, c) => n + c.admitted, 0);
const MiB = 1024 * 1024;

describe("1. bodies read before authentication are held to the pace and bounded", () => {
  it("a sized body that stops short of its end gets 408 once the bytes stop, on /v1, on a path route and on the control routes", async () => {
    // Each would have been allowed its size at 1 KiB/s before (17 min, 65 s, and no bound at all).
    const [v1, path, control] = await Promise.all([
      raw(port(), `POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: ${MiB}\r\n\r\n`, {
        body: `{"model":"open-model","pad":"${"a".repeat(900_000)}`,
        untilMs: 40_000,
      }),
      // ≤ 64 KiB: held by the edge before dispatch; 200 bytes, then nothing.
      raw(port(), `POST /drip/held HTTP/1.1\r\nHost: edge\r\nContent-Length: ${64 * 1024}\r\n\r\n`, { body: "b".repeat(200), untilMs: 40_000 }),
      // An unsigned node report declaring 256 KiB, 100 bytes sent (the control routes' pace is the default: 10 s).
      raw(port(), `POST ${ControlPath.nodeReport} HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: ${256 * 1024}\r\n\r\n`, {
        body: `{"deployment":"drip","pad":"${"c".repeat(70)}`,
        untilMs: 40_000,
      }),
    ]);
    for (const [name, answer] of Object.entries({ v1, path, control })) {
      expect(statusOf(answer), name).toBe(408);
      expect(jsonOf(answer).error.code, name).toBe("request_timeout");
    }
  });

  it("one client holds at most 16 MiB of unread bodies in an isolate, whatever cf-connecting-ip it claims: the rest get 429 before they send", async () => {
    // Three 10 MiB /v1 bodies from one client, each claiming another address; each sends a
    // little and stalls. The first is held (until its 408); the others are refused at once.
    const head = (ip: string) =>
      `POST /v1/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\ncf-connecting-ip: ${ip}\r\nContent-Length: ${10 * MiB - 1}\r\n\r\n`;
    // The first sends 100 KB (the rate floor is then far off) and a byte every 250 ms for 3 s: held, then cut 1 s after its last byte.
    const first = raw(port(), head("203.0.113.1"), { body: `{"model":"open-model","prompt":"${"p".repeat(100_000)}`, drip: { piece: "p", everyMs: 250, count: 12 }, untilMs: 40_000 });
    // The first is being read once the edge has it: wait for the event, not a time.
    await until("the first body to be held", async () => {
      const probe = await raw(port(), head("203.0.113.9"), { body: "", untilMs: 10_000 });
      return statusOf(probe) === 429 ? probe : undefined;
    });
    const refused = await Promise.all(["203.0.113.2", "203.0.113.3"].map((ip) => raw(port(), head(ip), { body: '{"model":"open-model"', untilMs: 10_000 })));
    for (const answer of refused) {
      expect(statusOf(answer)).toBe(429);
      expect(headerOf(answer, "retry-after")).toBe("1");
      expect(jsonOf(answer).error.code).toBe("rate_limited");
    }
    expect(statusOf(await first)).toBe(408);
    // Once it is cut, the client's share is free again.
    const res = await fetch(`${stack.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "open-model", prompt: "x" }) });
    expect(res.status).toBe(200);
  });
});

describe("3. slow uploads cannot fill a deployment", () => {
  it("16 connections dripping a byte at a time, reopened when cut, take no replica slot: every probe is served", async () => {
    // The review's attack, scaled to the fixture's pace (1 s idle): 8 slots in all (2 replicas × 4).
    const before = await admittedOf("drip");
    let stop = false;
    let cut = 0;
    const dripper = async () => {
      while (!stop) {
        const answer = await raw(port(), "POST /drip/echo HTTP/1.1\r\nHost: edge\r\nContent-Length: 100000\r\n\r\n", { body: "x", drip: { piece: "x", everyMs: 200 }, untilMs: 15_000 });
        if (statusOf(answer) === 408) cut++;
      }
    };
    const drippers = Array.from({ length: 16 }, dripper);
    const statuses: number[] = [];
    // Probes until every dripper was cut at least once, so the probes overlap the whole attack.
    while (cut < 32 || statuses.length < 21) {
      const res = await fetch(`${stack.url}/drip/probe?chunks=1`);
      await res.arrayBuffer();
      statuses.push(res.status);
    }
    stop = true;
    await Promise.all(drippers);
    expect(statuses.filter((s) => s !== 200)).toEqual([]);
    // Only the probes reached a replica.
    expect((await admittedOf("drip")) - before).toBe(statuses.length);
  });
  it("a duplex deployment streams uploads from the first byte, and caps each client's uploads in flight instead", async () => {
    // Two chunked uploads that keep sending (a byte every 300 ms, inside the pace): both reach the replica.
    const replica = replicasOf("duplex")[0]!;
    const open = Array.from({ length: 2 }, () =>
      raw(port(), "POST /duplex/up HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: chunked\r\n\r\n", { body: "1\r\na\r\n", drip: { piece: "1\r\na\r\n", everyMs: 300, count: 10 }, untilMs: 4_000 }),
    );
    await until("both uploads to be on the replica", async () => ((await counts(replica.url)).ongoing >= 2 ? true : undefined));
    // A third from the same client, claiming another address, is refused.
    const third = await raw(port(), "POST /duplex/up HTTP/1.1\r\nHost: edge\r\ncf-connecting-ip: 192.0.2.7\r\nTransfer-Encoding: chunked\r\n\r\n", { body: "1\r\na\r\n", untilMs: 10_000 });
    expect(statusOf(third)).toBe(429);
    expect(jsonOf(third).error.code).toBe("rate_limited");
    await Promise.all(open);
    // Their places are given back when they end.
    await until("the uploads to end", async () => ((await counts(replica.url)).ongoing === 0 ? true : undefined));
    const again = await raw(port(), "POST /duplex/up HTTP/1.1\r\nHost: edge\r\nTransfer-Encoding: chunked\r\n\r\n", { body: "1\r\na\r\n0\r\n\r\n", untilMs: 10_000 });
    expect(statusOf(again)).toBe(200);
  });
});

describe("4. a captured signed dispatch cannot be replayed elsewhere or with another body", () => {
  it("another replica of the deployment refuses it; the same replica refuses it again; a changed body is refused", async () => {
    const [a, b] = replicasOf("drip");
    const key = await importReplicaKey(await stack.replicaKey("drip"));
    const body = "the original body";
    const digest = await bodySha256(new TextEncoder().encode(body));
    // A dispatch exactly as the edge signs it for replica a.
    const captured = async (nonce: number) => {
      const timestamp = Date.now();
      const requestId = `capture-${nonce}`;
      return {
        [Header.requestId]: requestId,
        [Header.deployment]: "drip",
        [Header.timestamp]: String(timestamp),
        [Header.nonce]: String(nonce),
        [Header.bodySha256]: digest,
        [Header.signature]: await signDispatch(key, { timestamp, nonce, method: "POST", deployment: "drip", target: "/echo/path", requestId, replica: a!.id, bodySha256: digest }),
      };
    };
    const reason = async (res: Response) => ((await res.json()) as { error: { details: { reason: string } } }).error.details.reason;
    const headers = await captured(900_001);
    const served = await fetch(`${a!.url}/echo/path`, { method: "POST", headers, body });
    expect(served.status).toBe(200);
    expect(await served.text()).toBe(body);
    // Replayed to the other replica, with the same body or another.
    const elsewhere = await fetch(`${b!.url}/echo/path`, { method: "POST", headers, body: "TAMPERED-BODY" });
    expect(elsewhere.status).toBe(401);
    expect(await reason(elsewhere)).toBe("bad_signature");
    const elsewhereSame = await fetch(`${b!.url}/echo/path`, { method: "POST", headers, body });
    expect(elsewhereSame.status).toBe(401);
    // Replayed to the same replica.
    const again = await fetch(`${a!.url}/echo/path`, { method: "POST", headers, body });
    expect(again.status).toBe(401);
    expect(await reason(again)).toBe("replayed");
    // A fresh capture with its body changed on the way (or its digest header dropped).
    const tampered = await fetch(`${a!.url}/echo/path`, { method: "POST", headers: await captured(900_002), body: "TAMPERED-BODY" });
    expect(tampered.status).toBe(401);
    expect(await reason(tampered)).toBe("bad_signature");
    const { [Header.bodySha256]: _dropped, ...undigested } = await captured(900_003);
    const dropped = await fetch(`${a!.url}/echo/path`, { method: "POST", headers: undigested, body: "TAMPERED-BODY" });
    expect(dropped.status).toBe(401);
    // A GET captured for a, replayed to b.
    const timestamp = Date.now();
    const get = {
      [Header.requestId]: "capture-get",
      [Header.deployment]: "drip",
      [Header.timestamp]: String(timestamp),
      [Header.nonce]: "900004",
      [Header.signature]: await signDispatch(key, { timestamp, nonce: 900_004, method: "GET", deployment: "drip", target: "/hello", requestId: "capture-get", replica: a!.id, bodySha256: "" }),
    };
    expect((await fetch(`${b!.url}/hello`, { headers: get })).status).toBe(401);
    expect((await fetch(`${a!.url}/hello`, { headers: get })).status).toBe(200);
  });

  it("the edge's own dispatches of held bodies pass the replica's digest check", async () => {
    const body = JSON.stringify({ model: "open-model", prompt: "digest me" });
    for (let i = 0; i < 4; i++) {
      const res = await fetch(`${stack.url}/v1/completions`, { method: "POST", headers: { "content-type": "application/json" }, body });
      expect(res.status).toBe(200);
      expect(await res.text()).toBe(body);
      const held = await fetch(`${stack.url}/drip/echo`, { method: "POST", body: `held ${i}` });
      expect(await held.text()).toBe(`held ${i}`);
    }
  });
});

describe("5. leaks and noise", () => {
  it("a private model answers exactly as an unknown one without a valid key, on every /v1 POST route", async () => {
    for (const path of ["/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/v1/responses"]) {
      const body = (model: string) => JSON.stringify({ model, messages: [{ role: "user", content: "x" }], prompt: "x", input: "x" });
      const answers = [];
      for (const [model, authorization] of [
        ["no-such-model", undefined],
        ["vault-model", undefined],
        ["vault-model", "Bearer sk-sy-wrong"],
      ] as const) {
        const res = await fetch(`${stack.url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...(authorization ? { authorization } : {}) }, body: body(model) });
        const json = (await res.json()) as { error: { code: string; message: string; type: string } };
        answers.push({ status: res.status, code: json.error.code, type: json.error.type, message: json.error.message.replace(model, "MODEL") });
      }
      expect(answers[1], path).toEqual(answers[0]);
      expect(answers[2], path).toEqual(answers[0]);
      expect(answers[0]!.status).toBe(404);
    }
    const keyed = await fetch(`${stack.url}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${vaultKey}` },
      body: JSON.stringify({ model: "vault-model", prompt: "x" }),
    });
    expect(keyed.status).toBe(200);
  });

  it("a replica's own routes are not served through a public prefix", async () => {
    const before = await admittedOf("drip");
    for (const path of ["/drip/-/healthz", "/drip/-/anything", "/drip/metrics", "/drip/metrics/", "/drip/health", "/drip/metrics;x"]) {
      const res = await fetch(`${stack.url}${path}`);
      expect(res.status, path).toBe(404);
      const text = await res.text();
      expect(text, path).not.toMatch(/max_ongoing_requests|dispatch_refusals|admitted/);
    }
    expect(await admittedOf("drip")).toBe(before);
    // Paths that merely look alike are served.
    expect((await fetch(`${stack.url}/drip/metrics-report?chunks=1`)).status).toBe(200);
  });

  it("a `;` path parameter on a dot segment is refused like the dot segment itself", async () => {
    for (const path of ["/drip/..;/x", "/drip/..%3B/x", "/drip/.;/x"]) {
      const answer = await raw(port(), `GET ${path} HTTP/1.1\r\nHost: edge\r\n\r\n`);
      expect(statusOf(answer), path).toBe(400);
    }
  });

  it("cf-connecting-ip from a client does not buy it a session budget of its own", async () => {
    const state = async () => ((await stack.deploymentState("drip")) as unknown as { sessions: { writes: number } }).sessions;
    const before = await state();
    const started = Date.now();
    const elapsed = () => (Date.now() - started) / 1000;
    // New sessions (each bound on its second request), 8 at a time (the replicas' slots), each from another spoofed
    // address, until there are more of them than one honest budget (100 at once, then 10 a
    // second) allows over the time taken: were the header to buy a budget, every one of them
    // would be written. Counted against the time, not a fixed number, so a slow machine only
    // makes the run longer.
    let sessions = 0;
    while (sessions < 250 || (sessions <= 100 + Math.ceil(10 * elapsed()) + 25 && sessions < 2_000)) {
      const batch = Array.from({ length: 8 }, (_, k) => sessions + k);
      sessions += batch.length;
      await Promise.all(
        batch.map(async (i) => {
          for (let n = 0; n < 2; n++) {
            const res = await fetch(`${stack.url}/drip/s?chunks=1`, { headers: { "x-session-id": `spoof-${i}`, "cf-connecting-ip": `198.51.100.${i % 250}` } });
            await res.arrayBuffer();
            expect(res.status).toBe(200);
          }
        }),
      );
    }
    const seconds = elapsed();
    const made = (await state()).writes - before.writes;
    expect(made).toBeLessThanOrEqual(100 + Math.ceil(10 * seconds));
    expect(sessions).toBeGreaterThan(100 + Math.ceil(10 * seconds));
    expect(made).toBeLessThan(sessions);
  });

  it("an upload the client aborts is logged as the client's, never as an unhandled proxy error", async () => {
    const lines = stack.logLines.length;
    await Promise.all([
      raw(port(), `POST /v1/chat/completions HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n`, { body: '{"model":"open-model"', untilMs: 300 }),
      raw(port(), `POST ${ControlPath.nodeReport} HTTP/1.1\r\nHost: edge\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n`, { body: '{"deployment":"drip"', untilMs: 300 }),
      raw(port(), `POST /drip/upload HTTP/1.1\r\nHost: edge\r\nContent-Length: 200000\r\n\r\n`, { body: "u".repeat(70_000), untilMs: 300 }),
    ]);
    // The stack still serves, and its log has no proxy-bug line for the aborts.
    await until("the stack to answer after the aborts", async () => ((await fetch(`${stack.url}/drip/after?chunks=1`)).status === 200 ? true : undefined));
    expect(stack.logLines.slice(lines).filter((l) => l.includes("unhandled error"))).toEqual([]);
  });
});
