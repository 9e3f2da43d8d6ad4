// @ts-nocheck
// The routing Durable Object inside workerd: membership persisted in SQLite,
// load in memory, staleness, draining, restart, and the replay guard on the
// signed nonces. The Worker's control routes (signatures, URL policy) are in
// control-plane.test.ts.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { PROTOCOL_VERSION, type RegisterMessage, type ReportMessage } from "../../src/protocol/index.ts";
import { registerMessage, reportMessage } from "../fixtures/control-messages.ts";
import { FORGET_AFTER_MS, STALE_AFTER_MS } from "../../src/state/membership.ts";
import type { DeploymentRouter } from "../../src/state/deployment-router.ts";

const register = (id: string, url = `http://127.0.0.1:9/${id}`): RegisterMessage => registerMessage(id, { deployment: "hello", url, max_ongoing_requests: 5 });
const report = (id: string, seq: number, extra: Partial<{ state: "ready" | "draining"; ongoing: number }> = {}): ReportMessage =>
  reportMessage(id, seq, { deployment: "hello", ts: Date.now(), ...extra });

/** Nonces only have to increase per replica; one counter for the whole file does. */
let lastNonce = 0;
const nonce = () => ++lastNonce;

function router(name: string): DurableObjectStub<DeploymentRouter> {
  return env.ROUTER.get(env.ROUTER.idFromName(name));
}

describe("DeploymentRouter", () => {
  it("registers replicas, persists membership in SQLite and serves them in the snapshot", async () => {
    const stub = router("t-register");
    await stub.register(register("a"), nonce());
    await stub.register(register("b"), nonce());
    expect(await stub.report(report("a", 3, { ongoing: 2 }), nonce())).toBe("ok");
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
    await stub.register(register("a"), nonce());
    const before = await runInDurableObject(stub, (_i, state) => state.storage.sql.databaseSize);
    for (let seq = 1; seq <= 50; seq++) await stub.report(report("a", seq, { ongoing: seq % 5 }), nonce());
    const after = await runInDurableObject(stub, (_i, state) => state.storage.sql.databaseSize);
    expect(after).toBe(before);
    expect((await stub.stats()).reports).toBe(50);
  });

  it("keeps the newest load: an older seq refreshes liveness but not load", async () => {
    const stub = router("t-seq");
    await stub.register(register("a"), nonce());
    await stub.report(report("a", 10, { ongoing: 4 }), nonce());
    expect(await stub.report(report("a", 9, { ongoing: 0 }), nonce())).toBe("stale_seq");
    expect(await stub.report(report("a", 10, { ongoing: 4 }), nonce())).toBe("ok");
    expect((await stub.snapshot()).replicas[0]!.load.ongoing).toBe(4);
  });

  it("refuses reports from replicas that never registered", async () => {
    expect(await router("t-unknown").report(report("ghost", 1), nonce())).toBe("unknown_replica");
  });

  it("drops replicas whose reports stop from the snapshot within the stale bound", async () => {
    const stub = router("t-stale");
    await stub.register(register("a"), nonce());
    await stub.register(register("b"), nonce());
    // The object's clock is real: wait out the bound while only b keeps reporting.
    await new Promise((r) => setTimeout(r, STALE_AFTER_MS + 200));
    await stub.report(report("b", 1), nonce());
    const snap = await stub.snapshot();
    expect(snap.replicas.map((r) => r.id)).toEqual(["b"]);
    expect(STALE_AFTER_MS).toBeLessThanOrEqual(3_000);
    const stats = await stub.stats();
    expect(stats.members).toBe(2);
    expect(stats.fresh).toBe(1);
  });

  it("shows draining replicas with their state so proxies skip them", async () => {
    const stub = router("t-drain");
    await stub.register(register("a"), nonce());
    await stub.report(report("a", 1, { state: "draining" }), nonce());
    expect((await stub.snapshot()).replicas[0]!.load.state).toBe("draining");
    expect(await stub.deregister({ protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: "a" }, nonce())).toBe(true);
    expect((await stub.snapshot()).replicas).toEqual([]);
  });

  it("restores membership after a restart: members route at once (as heard from at the restart) and report as usual", async () => {
    const id = env.ROUTER.idFromName("t-restart");
    let stub = env.ROUTER.get(id);
    await stub.register(register("a"), nonce());
    // Abort the object: in-memory state is lost, SQLite survives.
    await runInDurableObject(stub, (_i, state) => state.abort("restart for test")).catch(() => undefined);
    stub = env.ROUTER.get(id);
    const afterRestart = await stub.stats();
    expect(afterRestart.members).toBe(1);
    expect(afterRestart.fresh).toBe(1);
    // Not an empty snapshot: proxies applying it keep routing to "a".
    const snap = await stub.snapshot();
    expect(snap.replicas.map((r) => r.id)).toEqual(["a"]);
    expect(snap.replicas[0]!.load.seq).toBe(-1);
    expect(await stub.report(report("a", 1), nonce())).toBe("ok");
    expect((await stub.snapshot()).replicas.map((r) => r.id)).toEqual(["a"]);
  });

  it("sweeps silent members from storage in its alarm (idempotent)", async () => {
    const stub = router("t-sweep");
    await stub.register(register("a"), nonce());
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

describe("DeploymentRouter replay guard", () => {
  const deregister = (id: string) => ({ protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: id });

  it("refuses a nonce that is not above the replica's last, on every control call, and counts it", async () => {
    const stub = router("t-replay");
    const n = nonce();
    expect(await stub.register(register("a"), n)).toMatchObject({ ok: true });
    expect(await stub.register(register("a"), n)).toBe("replayed");
    const r = nonce();
    expect(await stub.report(report("a", 1, { ongoing: 3 }), r)).toBe("ok");
    expect(await stub.report(report("a", 2, { ongoing: 0 }), r)).toBe("replayed");
    expect(await stub.report(report("a", 2, { ongoing: 0 }), r - 1)).toBe("replayed");
    expect(await stub.deregister(deregister("a"), n)).toBe("replayed");
    // The replayed messages changed nothing.
    expect((await stub.snapshot()).replicas[0]!.load).toMatchObject({ seq: 1, ongoing: 3 });
    const stats = await stub.stats();
    expect(stats).toMatchObject({ replays: 4, registrations: 1, reports: 1, members: 1 });
  });

  it("keeps nonces per replica id: another replica's lower nonce is fine", async () => {
    const stub = router("t-replay-ids");
    const low = nonce();
    const high = nonce();
    expect(await stub.register(register("a"), high)).toMatchObject({ ok: true });
    expect(await stub.register(register("b"), low)).toMatchObject({ ok: true });
  });

  it("remembers the nonce after a deregister, so the old register cannot be replayed", async () => {
    const stub = router("t-replay-dereg");
    const n = nonce();
    await stub.register(register("a"), n);
    expect(await stub.deregister(deregister("a"), nonce())).toBe(true);
    expect(await stub.register(register("a"), n)).toBe("replayed");
    expect((await stub.stats()).members).toBe(0);
  });

  it("forgets nonces when the object restarts (the documented bound: the edge's ±30 s timestamp window)", async () => {
    const id = env.ROUTER.idFromName("t-replay-restart");
    let stub = env.ROUTER.get(id);
    const n = nonce();
    await stub.register(register("a"), n);
    await runInDurableObject(stub, (_i, state) => state.abort("restart for test")).catch(() => undefined);
    stub = env.ROUTER.get(id);
    expect(await stub.register(register("a"), n)).toMatchObject({ ok: true });
    expect(await stub.register(register("a"), n)).toBe("replayed");
  });

  it("restart() aborts the object: membership survives, load and nonces do not", async () => {
    const id = env.ROUTER.idFromName("t-restart-rpc");
    let stub = env.ROUTER.get(id);
    const n = nonce();
    await stub.register(register("a"), n);
    await stub.restart().catch(() => undefined);
    stub = env.ROUTER.get(id);
    expect(await stub.stats()).toMatchObject({ members: 1, fresh: 1 });
    expect(await stub.register(register("a"), n)).toMatchObject({ ok: true });
  });
});
