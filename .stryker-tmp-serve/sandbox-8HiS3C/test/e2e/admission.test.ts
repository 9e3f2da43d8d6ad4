// @ts-nocheck
// Admission on the real stack (src/proxy/serve/admit.ts, docs/admission.md): a request
// that finds every slot taken is held in its isolate and served when one frees, in
// priority order; a sheddable one is refused instead; a wait runs out with 503 and
// Retry-After; a request waits for a replica that is not there yet. (A held client that
// disconnects leaves through Request.signal, which local workerd does not fire for an
// idle request: test/unit/admit.test.ts covers the gate's side, docs/admission.md says so.) Each step waits for what the edge reports (the admin view's
// count of held requests), never for a time.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../fixtures/wait.ts";
import { startStack } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/admission") });
});
afterAll(async () => {
  await stack?.dispose();
});

/** Requests the edge holds for `deployment` now. */
async function held(deployment: string): Promise<number> {
  const res = await fetch(`${stack.url}/-/deployments/${deployment}`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
  return ((await res.json()) as { isolate: { held: number } }).isolate.held;
}

/** The deployment's one replica's counters. */
async function counts(deployment: string): Promise<{ admitted: number; rejected: number; ongoing: number }> {
  const r = [...stack.replicas.values()].find((x) => x.deployment === deployment)!;
  return (await (await fetch(`${r.url}/-/healthz`)).json()) as never;
}

/**
 * A request that takes the deployment's only slot until `release()`: an echo upload the
 * test keeps open (the edge holds its first 64 KiB, then streams the rest, so the replica
 * runs it until the upload ends). Its answer's first bytes have arrived.
 */
async function hog(deployment: string, headers: Record<string, string> = {}) {
  let end!: () => void;
  const body = new ReadableStream<Uint8Array>({
    start(c) {
      c.enqueue(new Uint8Array(70 * 1024).fill(104));
      end = () => c.close();
    },
  });
  const res = await fetch(`${stack.url}/${deployment}/`, { method: "POST", body, headers, duplex: "half" } as RequestInit);
  expect(res.status).toBe(200);
  const reader = res.body!.getReader();
  await reader.read();
  return {
    release: async () => {
      end();
      while (!(await reader.read()).done);
      await waitFor(`${deployment}'s slot to free`, async () => (await counts(deployment)).ongoing === 0);
    },
  };
}

describe("admission", () => {
  it("holds a request while the only slot is taken and serves it once the slot frees, with no refusal on the way", async () => {
    const before = await counts("one");
    const h = await hog("one");
    const waiting = fetch(`${stack.url}/one/held`, { method: "POST", body: "held body" });
    await waitFor("the request to be held", async () => (await held("one")) === 1);
    await h.release();
    const res = await waiting;
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("held body");
    expect(await held("one")).toBe(0);
    // The edge never sent it to the full replica: no refusal, two requests admitted (the hog and it).
    const after = await counts("one");
    expect(after.rejected - before.rejected).toBe(0);
    expect(after.admitted - before.admitted).toBe(2);
  });

  it("lets the higher priority go first when the slot frees, whatever the arrival order", async () => {
    const h = await hog("one");
    const order: string[] = [];
    const send = (name: string, headers: Record<string, string>) =>
      fetch(`${stack.url}/one/${name}`, { headers }).then(async (r) => {
        order.push(name);
        expect(r.status).toBe(200);
        await r.text();
      });
    const standard = send("standard", {});
    await waitFor("the standard request to be held", async () => (await held("one")) === 1);
    const critical = send("critical", { "x-priority": "critical" });
    await waitFor("both to be held", async () => (await held("one")) === 2);
    await h.release();
    await Promise.all([standard, critical]);
    expect(order).toEqual(["critical", "standard"]);
  });

  it("refuses a sheddable request at once while the fleet is full (429 shed, Retry-After), and serves it when a slot is free", async () => {
    const h = await hog("one");
    const res = await fetch(`${stack.url}/one/`, { headers: { "x-priority": "sheddable" } });
    expect(res.status).toBe(429);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(await res.json()).toMatchObject({ error: { code: "shed", type: "rate_limit_error" } });
    expect(await held("one")).toBe(0);
    await h.release();
    expect((await fetch(`${stack.url}/one/`, { headers: { "x-priority": "sheddable" } })).status).toBe(200);
  });

  it("answers 503 queue_timeout with Retry-After when the wait runs out", async () => {
    const h = await hog("brief");
    const res = await fetch(`${stack.url}/brief/`);
    expect(res.status).toBe(503);
    expect(res.headers.get("retry-after")).toBe("1");
    expect(await res.json()).toMatchObject({ error: { code: "queue_timeout", type: "overloaded_error" } });
    await h.release();
  });

  it("holds a request for a deployment with no replica until one registers", async () => {
    const waiting = fetch(`${stack.url}/zero/`, { method: "POST", body: "first request" });
    await waitFor("the request to be held", async () => (await held("zero")) === 1);
    await stack.startReplica("zero");
    const res = await waiting;
    expect(res.status).toBe(200);
    expect(await res.text()).toContain("first request");
  });

  it("weighs held /v1 requests by their tokens: a tenant's short answers go before another's second long one", async () => {
    const h = await hog("tok");
    const stamp = Date.now();
    const id = (name: string) => `tok-${name}-${stamp}`;
    const send = (name: string, tenant: string, maxTokens: number) =>
      fetch(`${stack.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-tenant": tenant, "x-request-id": id(name) },
        body: JSON.stringify({ model: "tok-model", messages: [{ role: "user", content: name }], max_tokens: maxTokens }),
      }).then(async (r) => {
        expect(r.status).toBe(200);
        await r.text();
      });
    const names = ["long1", "long2", "short1", "short2", "short3"];
    const sent: Promise<void>[] = [];
    for (const [i, name] of names.entries()) {
      sent.push(send(name, name.startsWith("long") ? "batch" : "chat", name.startsWith("long") ? 4_000 : 40));
      await waitFor(`${name} to be held`, async () => (await held("tok")) === i + 1);
    }
    await h.release();
    await Promise.all(sent);
    // The order the edge served them in (its request log lines, as in the test below).
    const at = (name: string) => stack.logLines.findIndex((l) => l.includes(`"request_id":"${id(name)}"`));
    await waitFor("every log line", async () => names.every((n) => at(n) >= 0));
    // By requests the tenants would take turns (long1, short1, long2, ...); by tokens the
    // chat tenant's three short answers cost less than the batch tenant's one long one.
    expect([...names].sort((a, b) => at(a) - at(b))).toEqual(["long1", "short1", "short2", "short3", "long2"]);
  });

  it("corrects a flow's place by the tokens its answers used, read from their usage", async () => {
    const h = await hog("tok");
    const stamp = Date.now();
    const id = (name: string) => `used-${name}-${stamp}`;
    // The echo replica answers with the request's body, so an answer's `usage` (what the
    // edge meters, its last member) is the one the body carries: each "generous" request
    // asks 2,000 tokens and "uses" 150.
    const send = (name: string, tenant: string, maxTokens: number, used: number) =>
      fetch(`${stack.url}/v1/chat/completions`, {
        method: "POST",
        headers: { "content-type": "application/json", "x-tenant": tenant, "x-request-id": id(name) },
        body: JSON.stringify({ model: "tok-model", messages: [{ role: "user", content: name }], max_tokens: maxTokens, usage: { prompt_tokens: 10, completion_tokens: used - 10, total_tokens: used } }),
      }).then(async (r) => {
        expect(r.status).toBe(200);
        await r.text();
      });
    const names = ["generous1", "generous2", "exact1", "exact2", "exact3", "exact4"];
    const sent: Promise<void>[] = [];
    for (const [i, name] of names.entries()) {
      sent.push(name.startsWith("generous") ? send(name, "generous", 2_000, 150) : send(name, "exact", 300, 300));
      await waitFor(`${name} to be held`, async () => (await held("tok")) === i + 1);
    }
    await h.release();
    await Promise.all(sent);
    const at = (name: string) => stack.logLines.findIndex((l) => l.includes(`"request_id":"${id(name)}"`));
    await waitFor("every log line", async () => names.every((n) => at(n) >= 0));
    // By the estimates generous2 would go last (it starts at ~2,000; the others at 0..~900);
    // corrected by generous1's use, it starts at ~150 and goes once exact1 (0) has.
    expect([...names].sort((a, b) => at(a) - at(b))).toEqual(["generous1", "exact1", "generous2", "exact2", "exact3", "exact4"]);
  });

  it("orders held requests by their API keys' priority classes, which a client's header cannot exceed", async () => {
    const admin = { authorization: `Bearer ${stack.adminSecret}`, "content-type": "application/json" };
    const keyOf = async (name: string, priority?: { default: number; max: number }) => {
      const res = await fetch(`${stack.url}/-/deployments/keyed/keys`, { method: "POST", headers: admin, body: JSON.stringify({ name, ...(priority ? { priority } : {}) }) });
      expect(res.status).toBe(201);
      const created = (await res.json()) as { key: string; priority?: unknown };
      expect(created.priority).toEqual(priority);
      return { authorization: `Bearer ${created.key}` };
    };
    // A class with default above max is refused with a clear error.
    const bad = await fetch(`${stack.url}/-/deployments/keyed/keys`, { method: "POST", headers: admin, body: JSON.stringify({ name: "x", priority: { default: 2, max: 1 } }) });
    expect(bad.status).toBe(400);
    const batch = await keyOf("batch");
    const interactive = await keyOf("interactive", { default: 1, max: 1 });
    await waitFor("the new keys to be accepted", async () => {
      const [a, b] = await Promise.all([fetch(`${stack.url}/keyed/`, { headers: batch }), fetch(`${stack.url}/keyed/`, { headers: interactive })]);
      await Promise.all([a.text(), b.text()]);
      return a.status === 200 && b.status === 200;
    });
    const h = await hog("keyed", batch);
    // The order the edge served them in: its request log lines, written as each answer's head
    // is passed on (the second is dispatched only once the first has freed the one slot). Not
    // the order this process reads the answers in: on a busy machine both can be waiting at once.
    const ids = { batch: `prio-batch-${Date.now()}`, interactive: `prio-interactive-${Date.now()}` };
    const send = (name: keyof typeof ids, headers: Record<string, string>) =>
      fetch(`${stack.url}/keyed/${name}`, { headers: { ...headers, "x-request-id": ids[name] } }).then(async (r) => {
        expect(r.status).toBe(200);
        await r.text();
      });
    // The batch key asks for critical: its maximum (the deployment's, 0) holds it to standard.
    const first = send("batch", { ...batch, "x-priority": "critical" });
    await waitFor("the batch request to be held", async () => (await held("keyed")) === 1);
    const second = send("interactive", interactive);
    await waitFor("both to be held", async () => (await held("keyed")) === 2);
    await h.release();
    await Promise.all([first, second]);
    const at = (id: string) => stack.logLines.findIndex((l) => l.includes(`"request_id":"${id}"`));
    await waitFor("both log lines", async () => at(ids.batch) >= 0 && at(ids.interactive) >= 0);
    expect(at(ids.interactive)).toBeLessThan(at(ids.batch));
  });
});
