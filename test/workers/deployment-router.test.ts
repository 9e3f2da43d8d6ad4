// The routing Durable Object inside workerd: membership persisted in SQLite,
// load in memory, staleness, draining, restart, and the Worker's control routes.
import { env, runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { PROTOCOL_VERSION, type RegisterMessage, type ReportMessage } from "../../src/protocol/index.ts";
import { FORGET_AFTER_MS, STALE_AFTER_MS } from "../../src/state/membership.ts";
import type { DeploymentRouter } from "../../src/state/deployment-router.ts";

const register = (id: string, url = `http://127.0.0.1:9/${id}`): RegisterMessage => ({
  protocol: PROTOCOL_VERSION,
  deployment: "hello",
  replica_id: id,
  url,
  max_ongoing_requests: 5,
});
const report = (id: string, seq: number, extra: Partial<{ state: "ready" | "draining"; ongoing: number }> = {}): ReportMessage => ({
  protocol: PROTOCOL_VERSION,
  deployment: "hello",
  replica_id: id,
  seq,
  ts: Date.now(),
  state: extra.state ?? "ready",
  ongoing: extra.ongoing ?? 0,
  queued: 0,
  models: [],
});

function router(name: string): DurableObjectStub<DeploymentRouter> {
  return env.ROUTER.get(env.ROUTER.idFromName(name));
}

describe("DeploymentRouter", () => {
  it("registers replicas, persists membership in SQLite and serves them in the snapshot", async () => {
    const stub = router("t-register");
    await stub.register(register("a"));
    await stub.register(register("b"));
    expect(await stub.report(report("a", 3, { ongoing: 2 }))).toBe("ok");
    const snap = await stub.snapshot();
    expect(snap.deployment).toBe("hello");
    expect(snap.replicas.map((r) => r.id).sort()).toEqual(["a", "b"]);
    expect(snap.replicas.find((r) => r.id === "a")!.load).toMatchObject({ seq: 3, ongoing: 2, max: 5, state: "ready" });
    await runInDurableObject(stub, (_instance, state) => {
      const rows = state.storage.sql.exec<{ id: string }>("SELECT id FROM replicas ORDER BY id").toArray();
      expect(rows.map((r) => r.id)).toEqual(["a", "b"]);
    });
  });

  it("does not write storage for load reports", async () => {
    const stub = router("t-nowrite");
    await stub.register(register("a"));
    const before = await runInDurableObject(stub, (_i, state) => state.storage.sql.databaseSize);
    for (let seq = 1; seq <= 50; seq++) await stub.report(report("a", seq, { ongoing: seq % 5 }));
    const after = await runInDurableObject(stub, (_i, state) => state.storage.sql.databaseSize);
    expect(after).toBe(before);
    expect((await stub.stats()).reports).toBe(50);
  });

  it("keeps the newest load: an older seq refreshes liveness but not load", async () => {
    const stub = router("t-seq");
    await stub.register(register("a"));
    await stub.report(report("a", 10, { ongoing: 4 }));
    expect(await stub.report(report("a", 9, { ongoing: 0 }))).toBe("stale_seq");
    expect(await stub.report(report("a", 10, { ongoing: 4 }))).toBe("ok");
    expect((await stub.snapshot()).replicas[0]!.load.ongoing).toBe(4);
  });

  it("refuses reports from replicas that never registered", async () => {
    expect(await router("t-unknown").report(report("ghost", 1))).toBe("unknown_replica");
  });

  it("drops replicas whose reports stop from the snapshot within the stale bound", async () => {
    const stub = router("t-stale");
    await stub.register(register("a"));
    await stub.register(register("b"));
    // The object's clock is real: wait out the bound while only b keeps reporting.
    await new Promise((r) => setTimeout(r, STALE_AFTER_MS + 200));
    await stub.report(report("b", 1));
    const snap = await stub.snapshot();
    expect(snap.replicas.map((r) => r.id)).toEqual(["b"]);
    expect(STALE_AFTER_MS).toBeLessThanOrEqual(3_000);
    const stats = await stub.stats();
    expect(stats.members).toBe(2);
    expect(stats.fresh).toBe(1);
  });

  it("shows draining replicas with their state so proxies skip them", async () => {
    const stub = router("t-drain");
    await stub.register(register("a"));
    await stub.report(report("a", 1, { state: "draining" }));
    expect((await stub.snapshot()).replicas[0]!.load.state).toBe("draining");
    expect(await stub.deregister({ protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: "a" })).toBe(true);
    expect((await stub.snapshot()).replicas).toEqual([]);
  });

  it("restores membership after a restart; replicas route again on their next report", async () => {
    const id = env.ROUTER.idFromName("t-restart");
    let stub = env.ROUTER.get(id);
    await stub.register(register("a"));
    // Abort the object: in-memory state is lost, SQLite survives.
    await runInDurableObject(stub, (_i, state) => state.abort("restart for test")).catch(() => undefined);
    stub = env.ROUTER.get(id);
    const afterRestart = await stub.stats();
    expect(afterRestart.members).toBe(1);
    expect(afterRestart.fresh).toBe(0);
    expect(await stub.report(report("a", 1))).toBe("ok");
    expect((await stub.snapshot()).replicas.map((r) => r.id)).toEqual(["a"]);
  });

  it("sweeps silent members from storage in its alarm (idempotent)", async () => {
    const stub = router("t-sweep");
    await stub.register(register("a"));
    await runInDurableObject(stub, (_i, state) => {
      state.storage.sql.exec("UPDATE replicas SET registered_at = 0");
    });
    // Make "a" look silent for longer than FORGET_AFTER_MS.
    await runInDurableObject(stub, (instance) => {
      const realNow = Date.now;
      Date.now = () => realNow() + FORGET_AFTER_MS + 1_000;
      return instance.alarm().finally(() => {
        Date.now = realNow;
      });
    });
    // The alarm armed at registration still fires: running the sweep again changes nothing.
    await runDurableObjectAlarm(stub);
    expect((await stub.stats()).members).toBe(0);
    // With no members left it does not re-arm.
    expect(await runDurableObjectAlarm(stub)).toBe(false);
    await runInDurableObject(stub, (_i, state) => {
      expect(state.storage.sql.exec("SELECT COUNT(*) AS n FROM replicas").one().n).toBe(0);
    });
  });
});

describe("control routes of the Worker", () => {
  const post = (path: string, body: unknown, secret = "test-replica-secret") =>
    exports.default.fetch(`http://edge${path}`, {
      method: "POST",
      headers: { "content-type": "application/json", authorization: `Bearer ${secret}` },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });

  it("accepts a register and a report with the replica secret", async () => {
    const r1 = await post("/-/replicas/register", register("w1"));
    expect(r1.status).toBe(200);
    expect(await r1.json()).toMatchObject({ ok: true, report_interval_ms: 1000 });
    const r2 = await post("/-/replicas/report", report("w1", 1));
    expect(r2.status).toBe(200);
  });

  it("rejects a wrong secret with 401 JSON", async () => {
    const res = await post("/-/replicas/register", register("w2"), "nope");
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ error: { code: "unauthorized" } });
  });

  it("rejects malformed and invalid messages with 400 JSON", async () => {
    const bad = await post("/-/replicas/register", "{not json");
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { code: "invalid_message" } });
    const invalid = await post("/-/replicas/register", { ...register("w3"), url: "file:///etc/passwd" });
    expect(invalid.status).toBe(400);
    const extra = await post("/-/replicas/report", { ...report("w3", 1), surprise: true });
    expect(extra.status).toBe(400);
  });

  it("answers 409 to a report from an unregistered replica", async () => {
    const res = await post("/-/replicas/report", report("never-registered", 1));
    expect(res.status).toBe(409);
    expect(await res.json()).toMatchObject({ error: { code: "unknown_replica" } });
  });

  it("lists routes the way Ray Serve does and 404s unknown paths with JSON", async () => {
    const routes = await exports.default.fetch("http://edge/-/routes");
    expect(await routes.json()).toMatchObject({ "/hello": "hello" });
    const missing = await exports.default.fetch("http://edge/nowhere");
    expect(missing.status).toBe(404);
    expect(await missing.json()).toMatchObject({ error: { code: "route_not_found" } });
  });
});
