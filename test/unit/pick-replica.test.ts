/** Power of two random choices, and full-jitter backoff. Randomness is injected. */
import { describe, it, expect } from "vitest";
import { backoffMs, pickReplica, type ReplicaChoice } from "../../src/policy/pick-replica.ts";
import { mulberry32 } from "./seeded-random.ts";


/** A "random" source that returns the given values in turn (then repeats the last). */
function sequence(...values: number[]): () => number {
  let i = 0;
  return () => values[Math.min(i++, values.length - 1)]!;
}

const r = (id: string, load: number, capacity = 5): ReplicaChoice => ({ id, load, capacity });

describe("pickReplica", () => {
  it("returns undefined for no candidates, without drawing randomness", () => {
    let draws = 0;
    expect(pickReplica([], () => (draws++, 0.5))).toBeUndefined();
    expect(draws).toBe(0);
  });

  it("returns the single candidate, with or without headroom", () => {
    const only = r("a", 2);
    expect(pickReplica([only], Math.random)).toBe(only);
    const full = r("b", 9);
    expect(pickReplica([full], Math.random)).toBe(full);
  });

  it("returns the same object it was given (generic over extra fields)", () => {
    const cands = [{ ...r("a", 0), url: "http://a" }, { ...r("b", 1), url: "http://b" }];
    const picked = pickReplica(cands, mulberry32(1));
    expect(picked).toBe(cands[0]);
    expect(picked?.url).toBe("http://a");
  });

  it("samples two distinct replicas and keeps the less loaded", () => {
    const cands = [r("a", 4), r("b", 1), r("c", 3)];
    // i = floor(0 * 3) = 0 (a); j = floor(0.99 * 2) = 1 → j >= i → 2 (c): a vs c → c.
    expect(pickReplica(cands, sequence(0, 0.99))?.id).toBe("c");
    // i = 0 (a); j = floor(0 * 2) = 0 → j >= i → 1 (b): a vs b → b.
    expect(pickReplica(cands, sequence(0, 0))?.id).toBe("b");
    // i = floor(0.99 * 3) = 2 (c); j = 0 (a): c vs a → c.
    expect(pickReplica(cands, sequence(0.99, 0))?.id).toBe("c");
    // i = floor(0.5 * 3) = 1 (b); j = floor(0.99 * 2) = 1 → 2 (c): b vs c → b.
    expect(pickReplica(cands, sequence(0.5, 0.99))?.id).toBe("b");
  });

  it("never compares a replica with itself", () => {
    const rand = mulberry32(7);
    const cands = [r("a", 0), r("b", 3)];
    // With two candidates every pick compares a with b, so a always wins.
    for (let n = 0; n < 1_000; n++) expect(pickReplica(cands, rand)?.id).toBe("a");
  });

  it("compares relative load, so mixed capacities are fair", () => {
    // a: 4/10 = 0.4, b: 3/5 = 0.6 → a despite the higher absolute load.
    expect(pickReplica([r("a", 4, 10), r("b", 3, 5)], sequence(0, 0))?.id).toBe("a");
    expect(pickReplica([r("b", 3, 5), r("a", 4, 10)], sequence(0, 0))?.id).toBe("a");
  });

  it("breaks relative ties by absolute load, then by the first sampled", () => {
    // 2/4 == 4/8 → the lower absolute load (2) wins.
    expect(pickReplica([r("a", 4, 8), r("b", 2, 4)], sequence(0, 0))?.id).toBe("b");
    expect(pickReplica([r("b", 2, 4), r("a", 4, 8)], sequence(0, 0))?.id).toBe("b");
    // A full tie keeps the first sampled (index i).
    expect(pickReplica([r("a", 1), r("b", 1)], sequence(0, 0))?.id).toBe("a");
    expect(pickReplica([r("a", 1), r("b", 1)], sequence(0.99, 0))?.id).toBe("b");
  });

  it("only picks replicas with headroom when some have it", () => {
    const cands = [r("full1", 5), r("room", 4), r("full2", 7)];
    const rand = mulberry32(42);
    for (let n = 0; n < 1_000; n++) expect(pickReplica(cands, rand)?.id).toBe("room");
  });

  it("ignores full replicas entirely while one has room", () => {
    // "big" is at 10/10 (no room); "small" at 1/1 (no room); "ok" at 4/5 has room.
    const cands = [r("big", 10, 10), r("small", 1, 1), r("ok", 4, 5)];
    for (const x of [0, 0.4, 0.9]) expect(pickReplica(cands, sequence(x, x))?.id).toBe("ok");
  });

  it("still picks one when all are believed full (the replica's admission decides)", () => {
    const cands = [r("a", 5), r("b", 9), r("c", 6)];
    const seen = new Map<string, number>();
    const rand = mulberry32(3);
    for (let n = 0; n < 3_000; n++) {
      const p = pickReplica(cands, rand);
      expect(p).toBeDefined();
      seen.set(p!.id, (seen.get(p!.id) ?? 0) + 1);
    }
    // Among full replicas, power of two choices still prefers the less loaded and never the most loaded.
    expect(seen.get("b")).toBeUndefined();
    expect(seen.get("a")!).toBeGreaterThan(seen.get("c")!);
  });

  it("distribution over 10,000 picks on loads [0,1,2,3,4] with capacity 5", () => {
    // All five have room (4 < 5). Replica k wins when it is sampled with a more loaded
    // one: P(k) = 2 * (#more loaded) / (5 * 4) = 0.4, 0.3, 0.2, 0.1, 0.
    const cands = [0, 1, 2, 3, 4].map((load) => r(`r${load}`, load));
    const counts = [0, 0, 0, 0, 0];
    const rand = mulberry32(0xc0ffee);
    for (let n = 0; n < 10_000; n++) counts[pickReplica(cands, rand)!.load]!++;
    expect(counts[4]).toBe(0);
    expect(counts[0]).toBeGreaterThan(counts[1]!);
    expect(counts[1]).toBeGreaterThan(counts[2]!);
    expect(counts[2]).toBeGreaterThan(counts[3]!);
    expect(counts[3]).toBeGreaterThan(0);
    const expected = [4_000, 3_000, 2_000, 1_000, 0];
    // 10,000 draws: a binomial's standard deviation is at most 50; allow ~5σ.
    for (let k = 0; k < 5; k++) expect(Math.abs(counts[k]! - expected[k]!), `load ${k}: ${counts[k]}`).toBeLessThan(250);
  });

  it("never picks the strictly most loaded of ≥2 candidates (random pools, seeded)", () => {
    const rand = mulberry32(99);
    for (let trial = 0; trial < 2_000; trial++) {
      const n = 2 + Math.floor(rand() * 8);
      const capacity = 1 + Math.floor(rand() * 8);
      // Distinct loads, all with room, so there is exactly one most-loaded replica.
      const all = Array.from({ length: capacity }, (_, i) => i);
      for (let i = all.length - 1; i > 0; i--) {
        const j = Math.floor(rand() * (i + 1));
        [all[i], all[j]] = [all[j]!, all[i]!];
      }
      const loads = all.slice(0, Math.min(n, capacity));
      if (loads.length < 2) continue;
      const cands = loads.map((load, i) => r(`r${i}`, load, capacity));
      const worst = cands.reduce((a, b) => (b.load > a.load ? b : a));
      const picked = pickReplica(cands, rand)!;
      expect(picked).not.toBe(worst);
      expect(cands).toContain(picked);
    }
  });

  it("does not mutate the candidates", () => {
    const cands = [r("a", 1), r("b", 5), r("c", 2)];
    const copy = structuredClone(cands);
    pickReplica(cands, mulberry32(5));
    expect(cands).toEqual(copy);
  });
});

describe("backoffMs", () => {
  it("is 0 when random returns 0", () => {
    for (let k = 1; k <= 10; k++) expect(backoffMs(k, 5, 250, () => 0)).toBe(0);
  });

  it("reaches just below the ceiling min(cap, base * 2^(k-1))", () => {
    const almostOne = () => 0.999_999;
    expect(backoffMs(1, 5, 250, almostOne)).toBe(4); // ceiling 5
    expect(backoffMs(2, 5, 250, almostOne)).toBe(9); // ceiling 10
    expect(backoffMs(3, 5, 250, almostOne)).toBe(19); // ceiling 20
    expect(backoffMs(6, 5, 250, almostOne)).toBe(159); // ceiling 160
    expect(backoffMs(7, 5, 250, almostOne)).toBe(249); // ceiling min(250, 320)
    expect(backoffMs(60, 5, 250, almostOne)).toBe(249);
  });

  it("stays within 0 ≤ wait < min(cap, base*2^(k-1)) for seeded random draws", () => {
    const rand = mulberry32(2024);
    for (let n = 0; n < 5_000; n++) {
      const k = 1 + Math.floor(rand() * 12);
      const base = 1 + Math.floor(rand() * 100);
      const cap = 1 + Math.floor(rand() * 5_000);
      const ceiling = Math.min(cap, base * 2 ** (k - 1));
      const wait = backoffMs(k, base, cap, rand);
      expect(Number.isInteger(wait)).toBe(true);
      expect(wait).toBeGreaterThanOrEqual(0);
      expect(wait).toBeLessThan(ceiling);
    }
  });

  it("treats retry numbers below 1 like the first retry", () => {
    expect(backoffMs(0, 8, 1000, () => 0.999)).toBe(7);
    expect(backoffMs(-3, 8, 1000, () => 0.999)).toBe(7);
  });

  it("is 0 when the base or the cap is 0", () => {
    expect(backoffMs(3, 0, 250, () => 0.9)).toBe(0);
    expect(backoffMs(3, 5, 0, () => 0.9)).toBe(0);
  });

  it("defaults to Math.random and stays in bounds", () => {
    for (let n = 0; n < 200; n++) {
      const w = backoffMs(3, 5, 250);
      expect(w).toBeGreaterThanOrEqual(0);
      expect(w).toBeLessThan(20);
    }
  });
});
