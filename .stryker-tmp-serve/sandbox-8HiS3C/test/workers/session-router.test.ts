// @ts-nocheck
// The SessionRouter Durable Object inside workerd: resolve/rebind over RPC,
// bindings persisted in SQLite, bounded writes, expiry, and the alarm sweep.
import { runDurableObjectAlarm, runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { sessionRouterFor } from "../../src/state/session-router.ts";
import { sessionObjectName } from "../../src/state/session-binding.ts";
import type { SessionRouter } from "../../src/state/session-router.ts";

const TTL = 600_000;

function shard(name: string): DurableObjectStub<SessionRouter> {
  return env.SESSIONS.get(env.SESSIONS.idFromName(name));
}

interface Row {
  id: string;
  replica: string;
  expires_at: number;
}

function rows(stub: DurableObjectStub<SessionRouter>): Promise<Row[]> {
  return runInDurableObject(stub, (_i, state) => state.storage.sql.exec<Row>("SELECT id, replica, expires_at FROM sessions ORDER BY id").toArray());
}

/** Moves a binding's expiry (as if time had passed) without touching the object's clock. */
function setExpiry(stub: DurableObjectStub<SessionRouter>, session: string, expiresAt: number): Promise<void> {
  return runInDurableObject(stub, (_i, state) => {
    state.storage.sql.exec("UPDATE sessions SET expires_at = ? WHERE id = ?", expiresAt, session);
  });
}

describe("SessionRouter: resolve", () => {
  it("binds a new session to the proposal and keeps it for later proposals", async () => {
    const stub = shard("t-resolve");
    expect(await stub.resolve("s1", "r1", TTL)).toEqual({ replica: "r1" });
    expect(await stub.resolve("s1", "r2", TTL)).toEqual({ replica: "r1" });
    expect(await stub.resolve("s1", "r3", TTL)).toEqual({ replica: "r1" });
    expect(await stub.stats()).toEqual({ bindings: 1, resolves: 3, rebinds: 0, writes: 1 });
  });

  it("keeps sessions apart", async () => {
    const stub = shard("t-apart");
    expect((await stub.resolve("a", "r1", TTL)).replica).toBe("r1");
    expect((await stub.resolve("b", "r2", TTL)).replica).toBe("r2");
    expect((await stub.resolve("a", "r2", TTL)).replica).toBe("r1");
    expect((await stub.resolve("b", "r1", TTL)).replica).toBe("r2");
    expect((await stub.stats()).bindings).toBe(2);
  });

  it("persists bindings in SQLite with their expiry", async () => {
    const stub = shard("t-persist");
    const before = Date.now();
    await stub.resolve("s1", "r1", TTL);
    await stub.resolve("s2", "r2", 30_000);
    const after = Date.now();
    const stored = await rows(stub);
    expect(stored.map((r) => [r.id, r.replica])).toEqual([
      ["s1", "r1"],
      ["s2", "r2"],
    ]);
    expect(stored[0]!.expires_at).toBeGreaterThanOrEqual(before + TTL);
    expect(stored[0]!.expires_at).toBeLessThanOrEqual(after + TTL);
    expect(stored[1]!.expires_at).toBeGreaterThanOrEqual(before + 30_000);
    expect(stored[1]!.expires_at).toBeLessThanOrEqual(after + 30_000);
  });

  it("bindings survive a restart of the object", async () => {
    const id = env.SESSIONS.idFromName("t-restart");
    let stub = env.SESSIONS.get(id);
    await stub.resolve("s1", "r1", TTL);
    await runInDurableObject(stub, (_i, state) => state.abort("restart for test")).catch(() => undefined);
    stub = env.SESSIONS.get(id);
    expect((await stub.resolve("s1", "r9", TTL)).replica).toBe("r1");
    // Counters are in memory: they start over; the binding needed no write.
    expect(await stub.stats()).toEqual({ bindings: 1, resolves: 1, rebinds: 0, writes: 0 });
  });

  it("resolving a live binding repeatedly does not write every time", async () => {
    const stub = shard("t-writes");
    for (let n = 0; n < 50; n++) expect((await stub.resolve("s1", n % 2 ? "r2" : "r1", TTL)).replica).toBe("r1");
    const stats = await stub.stats();
    expect(stats.resolves).toBe(50);
    expect(stats.writes).toBe(1);
  });

  it("rewrites the expiry once less than half of the TTL is left, and only then", async () => {
    const stub = shard("t-refresh");
    await stub.resolve("s1", "r1", TTL);
    // Well over half left: no write.
    await setExpiry(stub, "s1", Date.now() + TTL / 2 + 60_000);
    await stub.resolve("s1", "r2", TTL);
    expect((await stub.stats()).writes).toBe(1);
    // Less than half left: the expiry moves a full TTL ahead, the replica stays.
    const low = Date.now() + 1_000;
    await setExpiry(stub, "s1", low);
    const before = Date.now();
    expect((await stub.resolve("s1", "r2", TTL)).replica).toBe("r1");
    expect((await stub.stats()).writes).toBe(2);
    const [row] = await rows(stub);
    expect(row!.replica).toBe("r1");
    expect(row!.expires_at).toBeGreaterThanOrEqual(before + TTL);
  });

  it("an expired binding is replaced by the next proposal", async () => {
    const stub = shard("t-expired");
    await stub.resolve("s1", "r1", TTL);
    await setExpiry(stub, "s1", Date.now() - 1);
    expect((await stub.resolve("s1", "r2", TTL)).replica).toBe("r2");
    expect((await rows(stub)).map((r) => r.replica)).toEqual(["r2"]);
  });

  it("expires after ttl of real time", async () => {
    const stub = shard("t-ttl");
    expect((await stub.resolve("s1", "r1", 100)).replica).toBe("r1");
    expect((await stub.resolve("s1", "r2", 100)).replica).toBe("r1");
    await new Promise((r) => setTimeout(r, 150));
    expect((await stub.resolve("s1", "r2", 100)).replica).toBe("r2");
  });
});

describe("SessionRouter: rebind (compare-and-set)", () => {
  it("moves a session off `from`, and refuses a move based on an outdated binding", async () => {
    const stub = shard("t-rebind");
    await stub.resolve("s1", "r1", TTL);
    expect(await stub.rebind("s1", "r1", "r2", TTL)).toEqual({ replica: "r2" });
    // A second proxy that still thought r1 loses: the first move wins.
    expect(await stub.rebind("s1", "r1", "r3", TTL)).toEqual({ replica: "r2" });
    expect((await rows(stub)).map((r) => r.replica)).toEqual(["r2"]);
    // A move off the current replica works.
    expect(await stub.rebind("s1", "r2", "r3", TTL)).toEqual({ replica: "r3" });
    expect((await stub.resolve("s1", "r1", TTL)).replica).toBe("r3");
    expect(await stub.stats()).toMatchObject({ bindings: 1, resolves: 2, rebinds: 3, writes: 3 });
  });

  it("concurrent rebinds from the same replica converge on one", async () => {
    const stub = shard("t-race");
    await stub.resolve("s1", "r1", TTL);
    const answers = await Promise.all(["r2", "r3", "r4", "r5"].map((to) => stub.rebind("s1", "r1", to, TTL)));
    const winners = new Set(answers.map((a) => a.replica));
    expect(winners.size).toBe(1);
    const [winner] = [...winners];
    expect(["r2", "r3", "r4", "r5"]).toContain(winner);
    expect((await rows(stub)).map((r) => r.replica)).toEqual([winner]);
  });

  it("binds an unknown or expired session to `to`", async () => {
    const stub = shard("t-rebind-new");
    expect((await stub.rebind("fresh", "r1", "r2", TTL)).replica).toBe("r2");
    await stub.resolve("old", "r7", TTL);
    await setExpiry(stub, "old", Date.now() - 1);
    expect((await stub.rebind("old", "r1", "r2", TTL)).replica).toBe("r2");
    expect((await rows(stub)).map((r) => [r.id, r.replica])).toEqual([
      ["fresh", "r2"],
      ["old", "r2"],
    ]);
  });
});

describe("SessionRouter: alarm sweep", () => {
  it("arms an alarm with the first write", async () => {
    const stub = shard("t-arm");
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
    const before = Date.now();
    await stub.resolve("s1", "r1", TTL);
    const alarm = await runInDurableObject(stub, (_i, state) => state.storage.getAlarm());
    expect(alarm).not.toBeNull();
    expect(alarm!).toBeGreaterThan(before);
  });

  it("does not arm an alarm for reads alone", async () => {
    const stub = shard("t-noarm");
    await stub.stats();
    expect(await runDurableObjectAlarm(stub)).toBe(false);
  });

  it("deletes expired rows, keeps live ones, and re-arms while rows remain", async () => {
    const stub = shard("t-sweep");
    for (const s of ["a", "b", "c", "d"]) await stub.resolve(s, `r-${s}`, TTL);
    await setExpiry(stub, "a", Date.now() - 10);
    await setExpiry(stub, "c", Date.now() - 10_000);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await rows(stub)).map((r) => r.id)).toEqual(["b", "d"]);
    expect((await stub.stats()).bindings).toBe(2);
    // Live rows remain: the sweep is armed again.
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).not.toBeNull();
    // Everything expires: the next sweep empties the table and does not re-arm.
    await setExpiry(stub, "b", Date.now() - 1);
    await setExpiry(stub, "d", Date.now() - 1);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await rows(stub)).toEqual([]);
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
    expect(await runDurableObjectAlarm(stub)).toBe(false);
  });

  it("a write after the table emptied arms the sweep again", async () => {
    const stub = shard("t-rearm");
    await stub.resolve("a", "r1", TTL);
    await setExpiry(stub, "a", Date.now() - 1);
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).toBeNull();
    await stub.resolve("b", "r1", TTL);
    expect(await runInDurableObject(stub, (_i, state) => state.storage.getAlarm())).not.toBeNull();
    expect(await runDurableObjectAlarm(stub)).toBe(true);
    expect((await rows(stub)).map((r) => r.id)).toEqual(["b"]);
  });
});

describe("sessionRouterFor", () => {
  it("names the shard object by deployment and a hash of the session id", async () => {
    const stub = sessionRouterFor(env, "hello", "user-42", 8);
    await stub.resolve("user-42", "r1", TTL);
    const same = env.SESSIONS.get(env.SESSIONS.idFromName(sessionObjectName("hello", "user-42", 8)));
    expect((await same.resolve("user-42", "r2", TTL)).replica).toBe("r1");
    expect(stub.id.equals(same.id)).toBe(true);
  });
});
