/** Routing shards: names, which shard owns a node, and the merge of the shards' snapshots. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import fc from "fast-check";
import type { ReplicaView, RoutingSnapshot } from "../../src/protocol/index.ts";
import { T0, registerMessage, reportMessage } from "../fixtures/control-messages.ts";
import { Membership, STALE_AFTER_MS } from "../../src/state/membership.ts";
import { SHARD_LOAD_STALE_MS, fleetLoad, mergeSnapshots, routingShardName, shardOfNode } from "../../src/state/routing-shards.ts";

const reg = registerMessage;
const rep = reportMessage;

function view(id: string, over: Partial<ReplicaView> = {}): ReplicaView {
  return { id, url: `http://${id}.test`, epoch: T0, load: { seq: 1, ongoing: 0, queued: 0, max: 4, state: "ready" }, models: [], loading: [], expiresInMs: 2_000, ...over };
}
const snap = (...replicas: ReplicaView[]): RoutingSnapshot => ({ deployment: "llm", replicas });

describe("routingShardName", () => {
  it("keeps the deployment's own name for shard 0, so one shard is the single object it always was", () => {
    expect(routingShardName("llm", 0)).toBe("llm");
    expect(routingShardName("llm", 3)).toBe("llm#3");
  });
});

describe("shardOfNode", () => {
  it("is 0 with one shard, and in range otherwise", () => {
    expect(shardOfNode("gpu-1", 1)).toBe(0);
    for (let i = 0; i < 500; i++) {
      const k = shardOfNode(`gpu-${i}`, 7);
      expect(k).toBeGreaterThanOrEqual(0);
      expect(k).toBeLessThan(7);
    }
  });

  it("spreads nodes evenly: every shard of 8 owns 12.5 % ± 3 % of 8,000 nodes", () => {
    const counts = new Array<number>(8).fill(0);
    for (let i = 0; i < 8_000; i++) counts[shardOfNode(`node-${i}`, 8)]!++;
    for (const c of counts) expect(Math.abs(c - 1_000)).toBeLessThan(240);
  });

  it("growing from N to N+1 shards moves only the nodes the new shard wins (about 1/(N+1))", () => {
    const nodes = Array.from({ length: 6_000 }, (_, i) => `gpu-${i}.example`);
    for (const n of [1, 4, 8]) {
      let moved = 0;
      for (const node of nodes) {
        const before = shardOfNode(node, n);
        const after = shardOfNode(node, n + 1);
        if (before !== after) {
          moved++;
          expect(after).toBe(n);
        }
      }
      expect(moved / nodes.length).toBeGreaterThan(1 / (n + 1) - 0.03);
      expect(moved / nodes.length).toBeLessThan(1 / (n + 1) + 0.03);
    }
  });
});

describe("mergeSnapshots", () => {
  it("is the union of the shards' replicas", () => {
    const merged = mergeSnapshots("llm", [snap(view("a"), view("b")), snap(), snap(view("c"))]);
    expect(merged.replicas.map((r) => r.id).sort()).toEqual(["a", "b", "c"]);
    expect(merged.deployment).toBe("llm");
  });

  it("keeps the newer registration of a replica that moved shards (higher epoch), whatever the order", () => {
    const old = view("a", { epoch: T0, expiresInMs: 2_400, load: { seq: 90, ongoing: 3, queued: 0, max: 4, state: "ready" } });
    const moved = view("a", { epoch: T0 + 5_000, expiresInMs: 1_000, load: { seq: 0, ongoing: 0, queued: 0, max: 4, state: "ready" } });
    expect(mergeSnapshots("llm", [snap(old), snap(moved)]).replicas).toEqual([moved]);
    expect(mergeSnapshots("llm", [snap(moved), snap(old)]).replicas).toEqual([moved]);
  });

  it("adds up the shards' totals when they sent samples, and sets none when every shard sent all it has", () => {
    const sampled = mergeSnapshots("llm", [{ ...snap(view("a")), total: 900 }, snap(view("b"), view("c"))]);
    expect(sampled.total).toBe(902);
    expect(mergeSnapshots("llm", [snap(view("a")), snap(view("b"))]).total).toBeUndefined();
    expect(mergeSnapshots("llm", [{ ...snap(view("a")), total: 50 }]).total).toBe(50);
  });

  it("between equal epochs keeps the later expiry", () => {
    const a = view("a", { expiresInMs: 500 });
    const b = view("a", { expiresInMs: 2_000 });
    expect(mergeSnapshots("llm", [snap(a), snap(b)]).replicas).toEqual([b]);
    expect(mergeSnapshots("llm", [snap(b), snap(a)]).replicas).toEqual([b]);
  });

  it("membership, drain, expiry and model sets come out as in one object (property: one Membership vs shards by node)", () => {
    const event = fc.oneof(
      fc.record({ kind: fc.constant("register" as const), replica: fc.integer({ min: 0, max: 11 }) }),
      fc.record({
        kind: fc.constant("report" as const),
        replica: fc.integer({ min: 0, max: 11 }),
        ongoing: fc.integer({ min: 0, max: 8 }),
        draining: fc.boolean(),
        models: fc.subarray(["m1", "m2", "m3"]),
      }),
      fc.record({ kind: fc.constant("deregister" as const), replica: fc.integer({ min: 0, max: 11 }) }),
      fc.record({ kind: fc.constant("wait" as const), ms: fc.integer({ min: 0, max: STALE_AFTER_MS }) }),
    );
    fc.assert(
      fc.property(fc.array(event, { maxLength: 60 }), fc.integer({ min: 2, max: 6 }), (events, shards) => {
        const one = new Membership();
        const parts = Array.from({ length: shards }, () => new Membership());
        // Replicas of a node share a shard: 3 replicas per node.
        const shardOf = (r: number) => parts[shardOfNode(`node-${Math.floor(r / 3)}`, shards)]!;
        let now = T0;
        const seqs = new Map<number, number>();
        for (const e of events) {
          if (e.kind === "wait") {
            now += e.ms;
            continue;
          }
          const id = `r${e.replica}`;
          if (e.kind === "register") {
            one.register(reg(id), now);
            shardOf(e.replica).register(reg(id), now);
            seqs.set(e.replica, 0);
          } else if (e.kind === "report") {
            const seq = (seqs.get(e.replica) ?? 0) + 1;
            seqs.set(e.replica, seq);
            const msg = rep(id, seq, { ongoing: e.ongoing, state: e.draining ? "draining" : "ready", models: e.models });
            expect(shardOf(e.replica).report(msg, now)).toBe(one.report(msg, now));
          } else {
            expect(shardOf(e.replica).deregister(id)).toBe(one.deregister(id));
          }
        }
        const sorted = (s: RoutingSnapshot) => [...s.replicas].sort((a, b) => a.id.localeCompare(b.id));
        const merged = mergeSnapshots("llm", parts.map((p) => p.snapshot("llm", now)));
        expect(sorted(merged)).toEqual(sorted(one.snapshot("llm", now)));
      }),
      { numRuns: 300 },
    );
  });
});

describe("growing the shard count", () => {
  it("moves a node's replicas to their new shard through unknown_replica and a register, and no replica leaves routing meanwhile", () => {
    // 30 replicas on 10 nodes, first over 2 shards, then the deployment is redeployed with 3.
    const replicas = Array.from({ length: 30 }, (_, i) => ({ id: `r${i}`, node: `node-${Math.floor(i / 3)}` }));
    const shards = [new Membership(), new Membership(), new Membership()];
    const seqs = new Map<string, number>();
    let now = T0;
    const report = (count: number, r: { id: string; node: string }) => {
      const seq = (seqs.get(r.id) ?? 0) + 1;
      seqs.set(r.id, seq);
      const shard = shards[shardOfNode(r.node, count)]!;
      // The replica's client registers again when its shard does not know it (EdgeClient on a 409).
      if (shard.report(rep(r.id, seq), now) === "unknown_replica") {
        shard.register(reg(r.id), now);
        seqs.set(r.id, 0);
      }
    };
    const routed = () => mergeSnapshots("llm", shards.map((m) => m.snapshot("llm", now))).replicas;
    for (const r of replicas) shards[shardOfNode(r.node, 2)]!.register(reg(r.id), now);
    let moved = 0;
    for (let second = 0; second < 8; second++) {
      now += 1_000;
      for (const r of replicas) report(second < 2 ? 2 : 3, r);
      // At every moment each replica is routed exactly once.
      const ids = routed().map((v) => v.id);
      expect(ids.sort()).toEqual(replicas.map((r) => r.id).sort());
      if (second === 2) moved = replicas.filter((r) => shardOfNode(r.node, 3) !== shardOfNode(r.node, 2)).length;
    }
    expect(moved).toBeGreaterThan(0);
    // The old shards let the moved replicas go stale: each replica is a member of one shard's snapshot only.
    for (const r of replicas) {
      const holders = shards.filter((m) => m.snapshot("llm", now).replicas.some((v) => v.id === r.id));
      expect(holders).toHaveLength(1);
    }
  });
});

describe("fleetLoad", () => {
  it("adds the other shards' latest load to the leader's own, dropping stale ones", () => {
    const now = T0 + 10_000;
    const others = [
      { ready: 3, ongoing: 7, at: now - 100 },
      { ready: 2, ongoing: 1, at: now - SHARD_LOAD_STALE_MS },
      { ready: 9, ongoing: 9, at: now - SHARD_LOAD_STALE_MS - 1 },
    ];
    expect(fleetLoad({ ready: 1, ongoing: 2 }, others, now)).toEqual({ ready: 6, ongoing: 10 });
    expect(fleetLoad({ ready: 0, ongoing: 0 }, [], now)).toEqual({ ready: 0, ongoing: 0 });
  });
});
