// The sharded state plane inside workerd: routing shards, the per-location
// snapshot relay that merges them, and the autoscaling leader (shard 0) that
// hears every shard's load. Control routes choosing a shard by node are in
// test/e2e (a sharded deployment on the real stack).
import { runInDurableObject } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { PROTOCOL_VERSION, type NodeReportMessage, type RegisterMessage, type ReportMessage } from "../../src/protocol/index.ts";
import { registerMessage, reportMessage } from "../fixtures/control-messages.ts";
import { RELAY_AT_ZERO_TTL_MS, RELAY_TTL_MS } from "../../src/state/snapshot-relay.ts";
import { routingShardName } from "../../src/state/routing-shards.ts";
import { STALE_AFTER_MS } from "../../src/state/membership.ts";

let lastNonce = 0;
const nonce = () => ++lastNonce;

const register = (deployment: string, id: string, node?: string): RegisterMessage =>
  registerMessage(id, { deployment, url: `http://127.0.0.1:9/${id}`, max_ongoing_requests: 4, ...(node ? { node } : {}) });
const report = (deployment: string, id: string, seq: number, ongoing = 0): ReportMessage => reportMessage(id, seq, { deployment, ts: Date.now(), ongoing });

const shard = (deployment: string, k: number) => env.ROUTER.get(env.ROUTER.idFromName(routingShardName(deployment, k)));
const relay = (deployment: string, location: string) => env.RELAYS.get(env.RELAYS.idFromName(`${deployment}@${location}`));

/** Waits for `check` to hold, asking again on every turn (bounded). */
async function until(what: string, check: () => Promise<boolean>, limitMs = 20_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!(await check())) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe("SnapshotRelay", () => {
  it("merges the shards' snapshots, and many isolates' calls cost each shard one call per refresh", async () => {
    const d = "plane-a";
    for (let k = 0; k < 3; k++) {
      await shard(d, k).register(register(d, `r${k}`), nonce(), { index: k, count: 3 });
      await shard(d, k).register(register(d, `s${k}`), nonce(), { index: k, count: 3 });
    }
    const r = relay(d, "TEST");
    const first = await r.view(d, 3, 1);
    expect(first.replicas.map((x) => x.id).sort()).toEqual(["r0", "r1", "r2", "s0", "s1", "s2"]);
    const before = await Promise.all([0, 1, 2].map((k) => shard(d, k).stats()));
    // 40 isolates asking at once, within one TTL: one refresh (or none), not 40.
    const views = await Promise.all(Array.from({ length: 40 }, (_, i) => r.view(d, 3, i)));
    for (const v of views) expect(v.replicas).toHaveLength(6);
    const after = await Promise.all([0, 1, 2].map((k) => shard(d, k).stats()));
    for (let k = 0; k < 3; k++) expect(after[k]!.snapshotCalls - before[k]!.snapshotCalls).toBeLessThanOrEqual(1);
    expect((await r.stats()).calls).toBe(41);
  });

  it("refreshes once its snapshot is RELAY_TTL_MS old, so a new replica in another shard shows up", async () => {
    const d = "plane-b";
    await shard(d, 0).register(register(d, "a"), nonce(), { index: 0, count: 2 });
    const r = relay(d, "TEST");
    expect((await r.view(d, 2, 7)).replicas.map((x) => x.id)).toEqual(["a"]);
    await shard(d, 1).register(register(d, "b"), nonce(), { index: 1, count: 2 });
    await until("the relay to show b", async () => (await r.view(d, 2, 7)).replicas.some((x) => x.id === "b"), 10 * RELAY_TTL_MS);
    expect((await r.stats()).refreshes).toBeGreaterThanOrEqual(2);
  });

  it("at zero asks the shards every RELAY_AT_ZERO_TTL_MS, held requests or not, so a first replica is routable sooner; with a ready replica, every RELAY_TTL_MS", async () => {
    const d = "plane-zero";
    // No held requests (a deployment whose first replica is starting): a snapshot at zero older
    // than RELAY_AT_ZERO_TTL_MS is asked for again.
    const idle = relay(d, "IDLE");
    await idle.view(d, 1, 1);
    await new Promise((res) => setTimeout(res, RELAY_AT_ZERO_TTL_MS + 50));
    await idle.view(d, 1, 2);
    expect((await idle.stats()).refreshes).toBe(2);
    const r = relay(d, "TEST");
    const holding = { bands: [[0, 3]] as [number, number][], held: 3 };
    expect((await r.view(d, 1, 1, "", undefined, holding)).replicas).toEqual([]);
    await new Promise((res) => setTimeout(res, RELAY_AT_ZERO_TTL_MS + 50));
    // An isolate that holds requests: the snapshot is old enough at zero, so the relay asks again,
    // and a replica registered meanwhile is in the answer.
    await shard(d, 0).register(register(d, "first"), nonce(), { index: 0, count: 1 });
    const refreshes = (await r.stats()).refreshes;
    const v = await r.view(d, 1, 1, "", undefined, holding);
    expect((await r.stats()).refreshes).toBe(refreshes + 1);
    expect(v.replicas.map((x) => x.id)).toEqual(["first"]);
    // With a ready replica in it, a snapshot younger than RELAY_TTL_MS is answered from memory.
    const t0 = Date.now();
    await new Promise((res) => setTimeout(res, RELAY_AT_ZERO_TTL_MS + 50));
    await r.view(d, 1, 1);
    // (Unless the machine was slow enough for RELAY_TTL_MS to pass as well.)
    if (Date.now() - t0 < RELAY_TTL_MS) expect((await r.stats()).refreshes).toBe(refreshes + 1);
  });

  it("ages what it hands out, so a replica expires in every isolate when it would in its shard", async () => {
    const d = "plane-c";
    await shard(d, 0).register(register(d, "a"), nonce(), { index: 0, count: 1 });
    const r = relay(d, "TEST");
    const v = (await r.view(d, 1, 1)).replicas[0]!;
    expect(v.expiresInMs).toBeLessThanOrEqual(STALE_AFTER_MS);
    await new Promise((res) => setTimeout(res, 200));
    // Within the TTL the relay answers from memory: the expiry has shrunk by the time held.
    const later = await r.view(d, 1, 1);
    // (Were the machine slow enough for the TTL to pass, the refreshed expiry is shorter still.)
    expect(later.replicas.find((x) => x.id === "a")?.expiresInMs).toBeLessThanOrEqual(v.expiresInMs - 150);
  });

  it("passes each isolate's dispatches on to the location's other isolates with their next view", async () => {
    const d = "plane-peers";
    await shard(d, 0).register(register(d, "a"), nonce(), { index: 0, count: 1 });
    const r = relay(d, "TEST");
    const note = { r: "a", k: ["00000000000000aa", "00000000000000bb"] };
    // An ask without a post gets no peers' notes (an isolate whose balancer shares none).
    expect((await r.view(d, 1, 1)).peers).toBeUndefined();
    const one = await r.view(d, 1, 1, "", { after: 0, notes: [note] });
    expect(one.peers!.notes).toEqual([]);
    const two = await r.view(d, 1, 2, "", { after: 0, notes: [] });
    expect(two.peers!.notes).toEqual([note]);
    expect((await r.view(d, 1, 2, "", { after: two.peers!.cursor, notes: [] })).peers!.notes).toEqual([]);
    // A malformed post is counted and refused; the view is still answered.
    const bad = await r.view(d, 1, 3, "", { after: 0, notes: [{ r: "a", k: ["not hex"] }] });
    expect(bad.replicas.map((x) => x.id)).toEqual(["a"]);
    expect(await r.stats()).toMatchObject({ dispatchNotes: 1, dispatchNotesPosted: 1, dispatchPostsRefused: 1 });
  });

  it("relays of two locations are separate objects, each asking the shards itself", async () => {
    const d = "plane-d";
    await shard(d, 0).register(register(d, "a"), nonce(), { index: 0, count: 1 });
    await relay(d, "AMS").view(d, 1, 1);
    await relay(d, "SIN").view(d, 1, 1);
    expect((await relay(d, "AMS").stats()).refreshes).toBe(1);
    expect((await relay(d, "SIN").stats()).refreshes).toBe(1);
    expect((await shard(d, 0).stats()).snapshotCalls).toBe(2);
  });
});

describe("SnapshotRelay admission across locations", () => {
  it("shares the deployment's slots with the other locations through the leader's answers, with no call of their own", async () => {
    const d = "plane-adm";
    // Two shards, 2 replicas of 4 slots: 8 slots.
    await shard(d, 0).register(register(d, "a"), nonce(), { index: 0, count: 2 });
    await shard(d, 1).register(register(d, "b"), nonce(), { index: 1, count: 2 });
    const flood = (flow: string) => ({ bands: [[0, 20]] as [number, number][], held: 16, flows: [[0, flow, 20]] as [number, string, number][] });
    const ams = relay(d, "AMS");
    const sin = relay(d, "SIN");
    // Alone, AMS's isolate gets all 8 slots.
    expect((await ams.view(d, 2, 1, "", undefined, flood("aaaaaaaaaaaaaaaa"))).admissionBudget).toBe(8);
    // SIN's first refresh tells the leader its demand and hears AMS's: half each.
    const first = await sin.view(d, 2, 1, "", undefined, flood("bbbbbbbbbbbbbbbb"));
    expect(first.admissionBudget).toBe(4);
    expect(first.admissionElsewhere).toBeUndefined(); // the relay keeps the leader's word to itself
    // AMS hears of SIN at its next refresh (within RELAY_TTL_MS).
    await until("AMS to share with SIN", async () => (await ams.view(d, 2, 1, "", undefined, flood("aaaaaaaaaaaaaaaa"))).admissionBudget === 4, 10 * RELAY_TTL_MS);
    // The demand rode on the snapshot asks: each relay called each shard once per refresh, no more.
    const calls = (await shard(d, 0).stats()).snapshotCalls + (await shard(d, 1).stats()).snapshotCalls;
    const refreshes = (await ams.stats()).refreshes + (await sin.stats()).refreshes;
    expect(calls).toBe(2 * refreshes);
  });
});

describe("SnapshotRelay rate-limit syncs", () => {
  it("sums its isolates' uses and syncs the RateLimiter shard once per interval, answering every isolate with the global remainder", async () => {
    const d = "plane-rate";
    const r = relay(d, "TEST");
    const limits = { requestsPerSecond: 1, burst: 10 };
    const since = Date.now();
    // The first isolate's sync is sent on at once (none was due before).
    expect(await r.syncRates(d, 3, limits, [{ key: "k", used: 4, since }])).toEqual([{ key: "k", tokens: expect.closeTo(6, 0) }]);
    // Seven more isolates within the interval: joined to the ledger, not sent on, each told the remainder less the location's uses since.
    for (let i = 0; i < 7; i++) await r.syncRates(d, 3, limits, [{ key: "k", used: 1, since }]);
    const stats = await r.stats();
    expect(stats.rateSyncs).toBe(8);
    // One per interval (a machine slow enough to spend more than a second on these calls may have sent one more).
    const elapsedS = (Date.now() - since) / 1000;
    expect(stats.rateShardSyncs).toBeLessThanOrEqual(1 + Math.floor(elapsedS));
    // 11 let through against a burst of 10 (plus the refill at 1/s since).
    const last = await r.syncRates(d, 3, limits, [{ key: "k", used: 0, since }]);
    expect(last[0]!.tokens).toBeLessThan(elapsedS);
  });
});

describe("SnapshotRelay key sets", () => {
  it("holds a deployment's key set for its isolates, and fetches it afresh after an admin change", async () => {
    const d = "plane-keys";
    const keys = env.KEYS.get(env.KEYS.idFromName(d));
    const r = relay(d, "TEST");
    expect(await r.activeKeys(d)).toEqual([]);
    const created = await keys.create("first");
    // Held: twenty isolates asking within the TTL cost no further AccessKeys call.
    for (let i = 0; i < 20; i++) await r.activeKeys(d);
    expect((await r.stats()).keySetRefreshes).toBe(1);
    await r.forgetKeys();
    expect(await r.activeKeys(d)).toHaveLength(1);
    expect((await r.stats()).keySetRefreshes).toBe(2);
    expect(created.id).toBeTruthy();
  });
});

describe("DeploymentRouter shards", () => {
  it("keeps a replica's continuation forms with its identity, across a restart of the object", async () => {
    const d = "plane-forms";
    await shard(d, 0).register(registerMessage("a", { deployment: d, url: "http://127.0.0.1:9/a", max_ongoing_requests: 4, continues: ["chat"] }), nonce());
    await shard(d, 0).register(register(d, "b"), nonce());
    await shard(d, 0).restart().catch(() => undefined);
    const byId = new Map((await shard(d, 0).snapshot()).replicas.map((r) => [r.id, r]));
    expect(byId.get("a")!.continues).toEqual(["chat"]);
    expect(byId.get("b")).not.toHaveProperty("continues");
  });

  it("keeps a replica's region and coordinates with its identity across a restart, and adds their columns to storage that lacks them", async () => {
    const d = "plane-where";
    const at = { region: "eu-central", coordinates: { lat: 50.11, lon: 8.68 } };
    await shard(d, 0).register(registerMessage("a", { deployment: d, url: "http://127.0.0.1:9/a", max_ongoing_requests: 4, ...at }), nonce());
    await shard(d, 0).register(registerMessage("c", { deployment: d, url: "http://127.0.0.1:9/c", max_ongoing_requests: 4, region: "fra" }), nonce());
    await shard(d, 0).register(register(d, "b"), nonce());
    await shard(d, 0).restart().catch(() => undefined);
    const byId = new Map((await shard(d, 0).snapshot()).replicas.map((r) => [r.id, r]));
    expect(byId.get("a")).toMatchObject(at);
    expect(byId.get("c")).toMatchObject({ region: "fra" });
    expect(byId.get("c")).not.toHaveProperty("coordinates");
    expect(byId.get("b")).not.toHaveProperty("region");
    expect(byId.get("b")).not.toHaveProperty("coordinates");
    // Storage written before the columns existed: they are added at the next start, and its rows restore without them.
    await runInDurableObject(shard(d, 0), (_i, state) => {
      for (const column of ["region", "lat", "lon"]) state.storage.sql.exec(`ALTER TABLE replicas DROP COLUMN ${column}`);
    });
    await shard(d, 0).restart().catch(() => undefined);
    const old = await shard(d, 0).snapshot();
    expect(old.replicas.map((r) => r.id).sort()).toEqual(["a", "b", "c"]);
    for (const r of old.replicas) expect(r).not.toHaveProperty("region");
    await shard(d, 0).register(registerMessage("a", { deployment: d, url: "http://127.0.0.1:9/a", max_ongoing_requests: 4, ...at }), nonce());
    await shard(d, 0).restart().catch(() => undefined);
    expect((await shard(d, 0).snapshot()).replicas.find((r) => r.id === "a")).toMatchObject(at);
  });

  it("applies a node report's entries as reports of their own, and refuses its replay", async () => {
    const d = "plane-e";
    const s = shard(d, 0);
    await s.register(register(d, "g1", "gpu-1"), nonce(), { index: 0, count: 1 });
    await s.register(register(d, "g2", "gpu-1"), nonce(), { index: 0, count: 1 });
    const msg: NodeReportMessage = {
      protocol: PROTOCOL_VERSION,
      deployment: d,
      node: "gpu-1",
      reports: [
        { replica_id: "g1", seq: 1, ts: Date.now(), state: "ready", ongoing: 3, queued: 0, models: [], loading: [] },
        { replica_id: "g2", seq: 1, ts: Date.now(), state: "draining", ongoing: 1, queued: 0, models: [], loading: [] },
        { replica_id: "ghost", seq: 1, ts: Date.now(), state: "ready", ongoing: 0, queued: 0, models: [], loading: [] },
      ],
    };
    const n = nonce();
    expect(await s.reportNode(msg, n)).toEqual(["ok", "ok", "unknown_replica"]);
    expect(await s.reportNode(msg, n)).toBe("replayed");
    const snap = await s.snapshot();
    expect(snap.replicas.find((r) => r.id === "g1")!.load).toMatchObject({ seq: 1, ongoing: 3, state: "ready" });
    expect(snap.replicas.find((r) => r.id === "g2")!.load).toMatchObject({ state: "draining" });
    const stats = await s.stats();
    expect(stats.nodeReports).toBe(1);
    expect(stats.reports).toBe(3);
  });

  it("the leader (shard 0) counts another shard's replicas and load in the autoscaling signal", async () => {
    // "hello" (functions/hello.ts) has autoscaling configured.
    const d = "hello";
    await shard(d, 1).register(register(d, "far-1"), nonce(), { index: 1, count: 2 });
    await shard(d, 1).register(register(d, "far-2"), nonce(), { index: 1, count: 2 });
    expect(await shard(d, 1).report(report(d, "far-1", 1, 3), nonce())).toBe("ok");
    await until("the leader to count shard 1's replicas", async () => (await shard(d, 0).autoscale()).current >= 2);
    const status = await shard(d, 0).autoscale();
    expect(status.enabled).toBe(true);
    expect(status.averageOngoing).toBeGreaterThan(0);
  });
});
