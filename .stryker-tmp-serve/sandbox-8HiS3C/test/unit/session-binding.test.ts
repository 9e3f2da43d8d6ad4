/** Session → replica bindings (the SessionRouter's decisions), shard hashing and object names. Time is explicit. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import {
  rebindBinding,
  resolveBinding,
  sessionObjectName,
  sessionShard,
  sessionShardName,
  type StoredBinding,
} from "../../src/state/session-binding.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

const TTL = 600_000;

const stored = (replica: string, expiresAt: number): StoredBinding => ({ replica, expiresAt });

describe("resolveBinding", () => {
  it("binds an unknown session to the proposal, expiring one TTL from now", () => {
    expect(resolveBinding(null, "r1", T0, TTL)).toEqual({ replica: "r1", write: { replica: "r1", expiresAt: T0 + TTL } });
  });

  it("keeps a live binding whatever the proposal", () => {
    const d = resolveBinding(stored("r1", T0 + TTL), "r2", T0, TTL);
    expect(d.replica).toBe("r1");
  });

  it("an expired binding is replaced by the proposal (expiry is exclusive: expiresAt == now is expired)", () => {
    expect(resolveBinding(stored("r1", T0), "r2", T0, TTL)).toEqual({ replica: "r2", write: { replica: "r2", expiresAt: T0 + TTL } });
    expect(resolveBinding(stored("r1", T0 - 1), "r2", T0, TTL)).toEqual({ replica: "r2", write: { replica: "r2", expiresAt: T0 + TTL } });
    expect(resolveBinding(stored("r1", T0 + 1), "r2", T0, TTL).replica).toBe("r1");
  });

  it("does not write while at least half of the TTL is left", () => {
    // Just written: a full TTL left.
    expect(resolveBinding(stored("r1", T0 + TTL), "r1", T0, TTL)).toEqual({ replica: "r1", write: null });
    // Exactly half left: not yet.
    expect(resolveBinding(stored("r1", T0 + TTL / 2), "r2", T0, TTL)).toEqual({ replica: "r1", write: null });
  });

  it("rewrites the expiry (same replica) once less than half of the TTL is left", () => {
    expect(resolveBinding(stored("r1", T0 + TTL / 2 - 1), "r2", T0, TTL)).toEqual({ replica: "r1", write: { replica: "r1", expiresAt: T0 + TTL } });
    expect(resolveBinding(stored("r1", T0 + 1), "r2", T0, TTL)).toEqual({ replica: "r1", write: { replica: "r1", expiresAt: T0 + TTL } });
  });

  it("bounds writes to about two per TTL for a session resolved every few seconds", () => {
    let binding: StoredBinding | null = null;
    let writes = 0;
    const every = 5_000;
    const span = 10 * TTL;
    for (let t = T0; t < T0 + span; t += every) {
      const d = resolveBinding(binding, "r1", t, TTL);
      expect(d.replica).toBe("r1");
      if (d.write) {
        writes++;
        binding = d.write;
      }
      // The binding never lapses while in use.
      expect(binding!.expiresAt).toBeGreaterThan(t);
    }
    // One write per half TTL (plus the first); one per resolve would be 1,200.
    expect(writes).toBeGreaterThanOrEqual(10);
    expect(writes).toBeLessThanOrEqual(2 * 10 + 1);
  });

  it("does not mutate the stored binding", () => {
    const b = stored("r1", T0 + 1);
    resolveBinding(b, "r2", T0, TTL);
    expect(b).toEqual({ replica: "r1", expiresAt: T0 + 1 });
  });
});

describe("rebindBinding (compare-and-set)", () => {
  it("moves a live binding off `from` to `to`", () => {
    expect(rebindBinding(stored("r1", T0 + TTL), "r1", "r2", T0, TTL)).toEqual({ replica: "r2", write: { replica: "r2", expiresAt: T0 + TTL } });
  });

  it("when another proxy already moved it, that binding wins (no write while fresh)", () => {
    // Stored r3 (moved by someone else); this caller still thinks r1.
    expect(rebindBinding(stored("r3", T0 + TTL), "r1", "r2", T0, TTL)).toEqual({ replica: "r3", write: null });
  });

  it("the winning binding's expiry is refreshed when less than half of the TTL is left", () => {
    expect(rebindBinding(stored("r3", T0 + 10), "r1", "r2", T0, TTL)).toEqual({ replica: "r3", write: { replica: "r3", expiresAt: T0 + TTL } });
  });

  it("binds to `to` when there is no binding", () => {
    expect(rebindBinding(null, "r1", "r2", T0, TTL)).toEqual({ replica: "r2", write: { replica: "r2", expiresAt: T0 + TTL } });
  });

  it("binds to `to` when the binding expired, whatever replica it named", () => {
    expect(rebindBinding(stored("r3", T0), "r1", "r2", T0, TTL)).toEqual({ replica: "r2", write: { replica: "r2", expiresAt: T0 + TTL } });
    expect(rebindBinding(stored("r1", T0 - 5), "r1", "r2", T0, TTL)).toEqual({ replica: "r2", write: { replica: "r2", expiresAt: T0 + TTL } });
  });

  it("two proxies moving the same session concurrently converge on the first one's choice", () => {
    let b: StoredBinding | null = stored("r1", T0 + TTL);
    const first = rebindBinding(b, "r1", "r2", T0, TTL);
    b = first.write ?? b;
    const second = rebindBinding(b, "r1", "r3", T0 + 1, TTL);
    b = second.write ?? b;
    expect(first.replica).toBe("r2");
    expect(second.replica).toBe("r2");
    expect(b!.replica).toBe("r2");
  });

  it("a later rebind off the current replica does move it", () => {
    const b = stored("r2", T0 + TTL);
    expect(rebindBinding(b, "r2", "r3", T0, TTL).replica).toBe("r3");
  });
});

describe("sessionShard (FNV-1a, 32 bit)", () => {
  // Published FNV-1a 32-bit test vectors (ASCII input).
  const vectors: [string, number][] = [
    ["", 0x811c9dc5],
    ["a", 0xe40c292c],
    ["foobar", 0xbf9cf968],
  ];

  it("matches the published FNV-1a vectors modulo the shard count", () => {
    for (const [input, hash] of vectors) {
      for (const shards of [1, 2, 7, 8, 1000, 1024]) expect(sessionShard(input, shards), `${input} % ${shards}`).toBe(hash % shards);
    }
  });

  it("is always 0 with one shard", () => {
    for (const id of ["a", "b", "session-123", "x".repeat(256)]) expect(sessionShard(id, 1)).toBe(0);
  });

  it("is stable: the same id always lands on the same shard (fixed values)", () => {
    // Pinned so a change of hash (which would orphan every stored binding) fails here.
    const ids = ["user-1", "user-2", "sess_abc", "0", "~!@#"];
    const first = ids.map((id) => sessionShard(id, 8));
    for (let n = 0; n < 3; n++) expect(ids.map((id) => sessionShard(id, 8))).toEqual(first);
    for (let i = 0; i < ids.length; i++) {
      const h = fnv1a(ids[i]!);
      expect(first[i]).toBe(h % 8);
    }
  });

  it("agrees with an independent byte-wise FNV-1a on 2,000 random ASCII ids", () => {
    const rand = mulberry32(0xf00d);
    for (let n = 0; n < 2_000; n++) {
      const id = randomId(rand);
      expect(sessionShard(id, 1024), id).toBe(fnv1a(id) % 1024);
      expect(sessionShard(id, 1000), id).toBe(fnv1a(id) % 1000);
    }
  });

  it("stays within 0..shards-1 and is an integer", () => {
    const rand = mulberry32(0x5a5a);
    for (let n = 0; n < 2_000; n++) {
      const shards = 1 + Math.floor(rand() * 1024);
      const id = randomId(rand);
      const s = sessionShard(id, shards);
      expect(Number.isInteger(s)).toBe(true);
      expect(s).toBeGreaterThanOrEqual(0);
      expect(s).toBeLessThan(shards);
    }
  });

  it("spreads 10,000 ids reasonably evenly over 8 shards", () => {
    const counts = new Array<number>(8).fill(0);
    for (let i = 0; i < 10_000; i++) counts[sessionShard(`session-${i}`, 8)]!++;
    // 1,250 expected per shard; a binomial's σ ≈ 33. Allow a generous ±15%.
    for (const c of counts) {
      expect(c).toBeGreaterThan(1_250 * 0.85);
      expect(c).toBeLessThan(1_250 * 1.15);
    }
    // Chi-square with 7 degrees of freedom: 24.3 is p ≈ 0.001.
    const chi = counts.reduce((sum, c) => sum + (c - 1_250) ** 2 / 1_250, 0);
    expect(chi).toBeLessThan(24.3);
  });

  it("spreads 10,000 random ids reasonably evenly over 32 shards", () => {
    const rand = mulberry32(0x1234);
    const counts = new Array<number>(32).fill(0);
    for (let i = 0; i < 10_000; i++) counts[sessionShard(randomId(rand), 32)]!++;
    const expected = 10_000 / 32;
    for (const c of counts) {
      expect(c).toBeGreaterThan(expected * 0.75);
      expect(c).toBeLessThan(expected * 1.25);
    }
  });

  it("distinguishes ids that differ in one character", () => {
    const shards = new Set<number>();
    for (const c of "abcdefghijklmnop") shards.add(sessionShard(`session-${c}`, 1024));
    expect(shards.size).toBeGreaterThan(8);
  });
});

describe("sessionShardName / sessionObjectName", () => {
  it("names a shard deployment/sessions/n", () => {
    expect(sessionShardName("hello", 0)).toBe("hello/sessions/0");
    expect(sessionShardName("vad", 7)).toBe("vad/sessions/7");
  });

  it("names the object holding a session by the session's shard", () => {
    for (const id of ["a", "foobar", "user-42"]) {
      expect(sessionObjectName("hello", id, 8)).toBe(`hello/sessions/${sessionShard(id, 8)}`);
    }
    expect(sessionObjectName("hello", "a", 8)).toBe(`hello/sessions/${0xe40c292c % 8}`);
  });

  it("separates deployments: the same session id in two deployments names two objects", () => {
    expect(sessionObjectName("one", "s", 8)).not.toBe(sessionObjectName("two", "s", 8));
  });

  it("every session of a deployment names one of its `shards` objects", () => {
    const names = new Set<string>();
    for (let i = 0; i < 1_000; i++) names.add(sessionObjectName("hello", `s${i}`, 4));
    expect([...names].sort()).toEqual(["hello/sessions/0", "hello/sessions/1", "hello/sessions/2", "hello/sessions/3"]);
  });
});

/** Reference FNV-1a over bytes (ids here are ASCII), written independently of the code under test. */
function fnv1a(s: string): number {
  const bytes = new TextEncoder().encode(s);
  let h = 0x811c9dc5n;
  for (const b of bytes) {
    h ^= BigInt(b);
    h = (h * 0x01000193n) & 0xffffffffn;
  }
  return Number(h);
}

function randomId(rand: () => number): string {
  const len = 1 + Math.floor(rand() * 40);
  let s = "";
  for (let i = 0; i < len; i++) s += String.fromCharCode(0x21 + Math.floor(rand() * 94));
  return s;
}
