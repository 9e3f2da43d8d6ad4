/** Power of two random choices, and full-jitter backoff. Randomness is injected. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { backoffMs, fullness, pickRandom, pickReplica, pickReplicaForModel, pickRoundRobin, type ModelHolderChoice, type ReplicaChoice } from "../../src/policy/pick-replica.ts";
import type { ReplicaView, RoutingSnapshot } from "../../src/protocol/index.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";


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

/** A multiplexing candidate: load, capacity, loaded models and models being loaded. */
const m = (id: string, load: number, models: string[] = [], loading: string[] = [], capacity = 5): ModelHolderChoice => ({ id, load, capacity, models, loading });

/** Counts draws, so tests can tell the deterministic rule from two choices. */
function counting(rand: () => number) {
  const c = { draws: 0, rand: () => (c.draws++, rand()) };
  return c;
}

describe("pickReplicaForModel: holders with room (rule 1)", () => {
  it("returns undefined for no candidates, without drawing randomness", () => {
    const c = counting(() => 0.5);
    expect(pickReplicaForModel([], "m1", c.rand)).toBeUndefined();
    expect(c.draws).toBe(0);
  });

  it("returns the single candidate whatever it holds and however loaded", () => {
    for (const only of [m("a", 0), m("a", 0, ["m1"]), m("a", 9), m("a", 9, ["other"]), m("a", 9, [], ["m1"])]) {
      expect(pickReplicaForModel([only], "m1", mulberry32(1))).toBe(only);
    }
  });

  it("prefers a holder with room over emptier, less loaded non-holders", () => {
    const holder = m("holder", 4, ["x", "y", "m1"]);
    const cands = [m("idle1", 0), holder, m("idle2", 0), m("idle3", 1, ["x"])];
    const rand = mulberry32(11);
    for (let n = 0; n < 1_000; n++) expect(pickReplicaForModel(cands, "m1", rand)).toBe(holder);
  });

  it("a model being loaded counts as held (requests wait on that load rather than start another)", () => {
    const loadingIt = m("loading", 3, ["x"], ["m1"]);
    const cands = [m("empty", 0), loadingIt, m("other", 0, ["y"])];
    const rand = mulberry32(12);
    for (let n = 0; n < 500; n++) expect(pickReplicaForModel(cands, "m1", rand)?.id).toBe("loading");
  });

  it("never picks a full holder while another holder has room", () => {
    const cands = [m("full", 5, ["m1"]), m("over", 8, ["m1"]), m("room", 4, ["m1"]), m("idle", 0)];
    const rand = mulberry32(13);
    for (let n = 0; n < 1_000; n++) expect(pickReplicaForModel(cands, "m1", rand)?.id).toBe("room");
  });

  it("samples two distinct holders with room and keeps the less loaded (exact draws)", () => {
    // Pool = holders with room in candidate order: h3 (3), h1 (1), h2 (2); "n" and "full" are not in it.
    const cands = [m("n", 0), m("h3", 3, ["m1"]), m("full", 5, ["m1"]), m("h1", 1, [], ["m1"]), m("h2", 2, ["m1", "x"])];
    // i = 0 (h3); j = floor(0 * 2) = 0 → 1 (h1): h3 vs h1 → h1.
    expect(pickReplicaForModel(cands, "m1", sequence(0, 0))?.id).toBe("h1");
    // i = 0 (h3); j = floor(0.99 * 2) = 1 → 2 (h2): h3 vs h2 → h2.
    expect(pickReplicaForModel(cands, "m1", sequence(0, 0.99))?.id).toBe("h2");
    // i = floor(0.99 * 3) = 2 (h2); j = 0 (h3): h2 vs h3 → h2.
    expect(pickReplicaForModel(cands, "m1", sequence(0.99, 0))?.id).toBe("h2");
  });

  it("compares holders on relative load (mixed capacities)", () => {
    // a: 4/10 = 0.4 beats b: 3/5 = 0.6.
    const cands = [m("b", 3, ["m1"], [], 5), m("a", 4, ["m1"], [], 10)];
    expect(pickReplicaForModel(cands, "m1", sequence(0, 0))?.id).toBe("a");
    expect(pickReplicaForModel(cands, "m1", sequence(0.99, 0))?.id).toBe("a");
  });

  it("statistically prefers the less loaded holder (10,000 seeded picks)", () => {
    // Holders with loads 0..3 (all with room), plus idle non-holders that must never win.
    const holders = [0, 1, 2, 3].map((load) => m(`h${load}`, load, ["m1"]));
    const cands = [m("idle-a", 0), ...holders, m("idle-b", 0, [], ["other"])];
    const counts = new Map<string, number>();
    const rand = mulberry32(0xfeed);
    for (let n = 0; n < 10_000; n++) {
      const id = pickReplicaForModel(cands, "m1", rand)!.id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    expect(counts.get("idle-a")).toBeUndefined();
    expect(counts.get("idle-b")).toBeUndefined();
    // Power of two choices over 4: P(k) = 2 * (#more loaded) / (4 * 3) = 1/2, 1/3, 1/6, 0.
    expect(counts.get("h3")).toBeUndefined();
    const expected = [5_000, 3_333, 1_667];
    for (let k = 0; k < 3; k++) {
      const got = counts.get(`h${k}`) ?? 0;
      expect(Math.abs(got - expected[k]!), `h${k}: ${got}`).toBeLessThan(250);
    }
    expect(counts.get("h0")!).toBeGreaterThan(counts.get("h1")!);
    expect(counts.get("h1")!).toBeGreaterThan(counts.get("h2")!);
  });
});

describe("pickReplicaForModel: nobody with room holds it (rule 2)", () => {
  it("a new model lands on the replica with the fewest models (loaded + loading), without randomness", () => {
    const cands = [
      m("two-loaded", 0, ["x", "y"]),
      m("one-plus-loading", 0, ["x"], ["z"]),
      m("one", 4, ["y"]), // busier, but holds the fewest models
      m("three", 0, ["x", "y", "z"]),
    ];
    const c = counting(mulberry32(5));
    for (let n = 0; n < 100; n++) expect(pickReplicaForModel(cands, "new", c.rand)?.id).toBe("one");
    expect(c.draws).toBe(0);
  });

  it("an empty replica beats any replica holding models", () => {
    const cands = [m("a", 0, ["x"]), m("b", 1, [], ["x"]), m("empty", 4)];
    expect(pickReplicaForModel(cands, "new", mulberry32(1))?.id).toBe("empty");
  });

  it("ties on model count go to the lower relative load", () => {
    // Both hold one model: 3/10 = 0.3 beats 2/4 = 0.5 despite the higher absolute load.
    const cands = [m("half", 2, ["x"], [], 4), m("third", 3, ["y"], [], 10)];
    expect(pickReplicaForModel(cands, "new", mulberry32(1))?.id).toBe("third");
    expect(pickReplicaForModel([...cands].reverse(), "new", mulberry32(1))?.id).toBe("third");
  });

  it("ties on model count and relative load go to the lower absolute load", () => {
    // 4/8 == 2/4 → the lower absolute load (2).
    const cands = [m("big", 4, ["x"], [], 8), m("small", 2, ["y"], [], 4)];
    expect(pickReplicaForModel(cands, "new", mulberry32(1))?.id).toBe("small");
    expect(pickReplicaForModel([...cands].reverse(), "new", mulberry32(1))?.id).toBe("small");
  });

  it("a complete tie keeps the first candidate", () => {
    const cands = [m("first", 1, ["x"]), m("second", 1, ["y"])];
    expect(pickReplicaForModel(cands, "new", mulberry32(1))?.id).toBe("first");
    expect(pickReplicaForModel([...cands].reverse(), "new", mulberry32(1))?.id).toBe("second");
  });

  it("skips non-holders without room, even when they hold fewer models", () => {
    const cands = [m("empty-but-full", 5), m("fuller", 6, []), m("room", 4, ["x", "y"])];
    expect(pickReplicaForModel(cands, "new", mulberry32(1))?.id).toBe("room");
  });

  it("when every holder is full, the model spreads to the best non-holder with room", () => {
    const cands = [m("h1", 5, ["m1"]), m("h2", 7, ["m1", "x"]), m("busy", 3, ["x"]), m("calm", 1, ["y"]), m("crowded", 0, ["x", "y"])];
    const c = counting(mulberry32(8));
    for (let n = 0; n < 50; n++) expect(pickReplicaForModel(cands, "m1", c.rand)?.id).toBe("calm");
    expect(c.draws).toBe(0);
  });

  it("a hot model whose holders are all full spreads to exactly one more replica", () => {
    // Integration with the routing view, as dispatch uses it: pick, note the model
    // as loading there, count the dispatch in flight (requests stay open).
    const replica = (id: string, ongoing: number, models: string[]): ReplicaView => ({
      id,
      url: `http://${id}.test:8000`,
      epoch: 1,
      models,
      loading: [],
      expiresInMs: 10_000,
      load: { seq: 1, ongoing, queued: 0, max: 4, state: "ready" },
    });
    const snap: RoutingSnapshot = {
      deployment: "mux",
      replicas: [replica("h1", 4, ["hot"]), replica("h2", 4, ["hot", "x"]), replica("a", 1, ["x"]), replica("b", 0, ["x", "y"]), replica("c", 2, ["y"])],
    };
    const T = T0;
    const view = new RoutingView();
    view.applySnapshot(snap, T);
    const rand = mulberry32(77);
    const chosen: string[] = [];
    // "a" and "c" tie on one model; "a" is less loaded (1/4 < 2/4). It has room for 3 more.
    for (let n = 0; n < 3; n++) {
      const e = pickReplicaForModel(view.candidates(T), "hot", rand)!;
      view.noteModelDispatch(e, "hot");
      view.startDispatch(e);
      chosen.push(e.id);
    }
    expect(chosen).toEqual(["a", "a", "a"]);
    const holdersNow = view.candidates(T).filter((e) => e.models.includes("hot") || e.loading.includes("hot")).map((e) => e.id).sort();
    expect(holdersNow).toEqual(["a", "h1", "h2"]);
    // Now "a" is full too: the model spreads to one more replica ("c", one model), not to "b" (two models).
    const next = pickReplicaForModel(view.candidates(T), "hot", rand)!;
    expect(next.id).toBe("c");
  });
});

describe("pickReplicaForModel: nobody has room (rule 3)", () => {
  it("picks among the holders, never a non-holder, even a less loaded one", () => {
    const cands = [m("n1", 5), m("h1", 6, ["m1"]), m("n2", 5, ["x"]), m("h2", 9, [], ["m1"])];
    const rand = mulberry32(21);
    const seen = new Set<string>();
    for (let n = 0; n < 1_000; n++) seen.add(pickReplicaForModel(cands, "m1", rand)!.id);
    // Two holders: every pick compares h1 with h2, so the less loaded always wins.
    expect([...seen]).toEqual(["h1"]);
  });

  it("two choices among full holders prefers the less loaded and never the most loaded", () => {
    const cands = [m("h5", 5, ["m1"]), m("h9", 9, ["m1"]), m("h6", 6, ["m1"]), m("n", 5, ["x"])];
    const counts = new Map<string, number>();
    const rand = mulberry32(22);
    for (let n = 0; n < 3_000; n++) {
      const id = pickReplicaForModel(cands, "m1", rand)!.id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    expect(counts.get("n")).toBeUndefined();
    expect(counts.get("h9")).toBeUndefined();
    expect(counts.get("h5")!).toBeGreaterThan(counts.get("h6")!);
  });

  it("with no holder at all, picks among every candidate by two choices", () => {
    const cands = [m("a", 5, ["x"]), m("b", 9), m("c", 6, ["y"])];
    // i = 0 (a); j = floor(0 * 2) = 0 → 1 (b): a vs b → a.
    expect(pickReplicaForModel(cands, "m1", sequence(0, 0))?.id).toBe("a");
    // i = floor(0.5 * 3) = 1 (b); j = floor(0.99 * 2) = 1 → 2 (c): b vs c → c.
    expect(pickReplicaForModel(cands, "m1", sequence(0.5, 0.99))?.id).toBe("c");
    const seen = new Set<string>();
    const rand = mulberry32(23);
    for (let n = 0; n < 1_000; n++) seen.add(pickReplicaForModel(cands, "m1", rand)!.id);
    expect([...seen].sort()).toEqual(["a", "c"]);
  });
});

describe("pickReplicaForModel: general", () => {
  it("returns the same object it was given (generic over extra fields)", () => {
    const cands = [{ ...m("a", 0, ["m1"]), url: "http://a" }, { ...m("b", 1), url: "http://b" }];
    const picked = pickReplicaForModel(cands, "m1", mulberry32(1));
    expect(picked).toBe(cands[0]);
    expect(picked?.url).toBe("http://a");
  });

  it("does not mutate the candidates", () => {
    const cands = [m("a", 1, ["x"]), m("b", 5, ["m1"]), m("c", 2, [], ["y"])];
    const copy = structuredClone(cands);
    for (const model of ["m1", "x", "new"]) pickReplicaForModel(cands, model, mulberry32(5));
    expect(cands).toEqual(copy);
  });

  it("matches model ids exactly (no prefix or case folding)", () => {
    const cands = [m("prefix", 0, ["m1-large"]), m("case", 0, ["M1"]), m("exact", 3, ["m1"])];
    const rand = mulberry32(31);
    for (let n = 0; n < 200; n++) expect(pickReplicaForModel(cands, "m1", rand)?.id).toBe("exact");
  });

  it("always returns one of the candidates (random pools, seeded)", () => {
    const rand = mulberry32(0xabc);
    const pool = ["m1", "m2", "m3", "m4"];
    for (let trial = 0; trial < 2_000; trial++) {
      const n = 1 + Math.floor(rand() * 6);
      const cands = Array.from({ length: n }, (_, i) => {
        const cap = 1 + Math.floor(rand() * 4);
        return m(
          `r${i}`,
          Math.floor(rand() * (cap + 2)),
          pool.filter(() => rand() < 0.3),
          pool.filter(() => rand() < 0.1),
          cap,
        );
      });
      const model = pool[Math.floor(rand() * pool.length)]!;
      const picked = pickReplicaForModel(cands, model, rand)!;
      expect(cands).toContain(picked);
      const holdsIt = (c: ModelHolderChoice) => c.models.includes(model) || c.loading.includes(model);
      const room = (c: ModelHolderChoice) => c.load < c.capacity;
      if (cands.some((c) => holdsIt(c) && room(c))) {
        expect(holdsIt(picked) && room(picked)).toBe(true);
      } else if (cands.some(room)) {
        // The deterministic rule: no non-holder with room has fewer models.
        expect(room(picked)).toBe(true);
        const count = (c: ModelHolderChoice) => c.models.length + c.loading.length;
        for (const c of cands) if (room(c)) expect(count(picked)).toBeLessThanOrEqual(count(c));
      } else if (cands.some(holdsIt)) {
        expect(holdsIt(picked)).toBe(true);
      }
    }
  });
});

describe("pickRoundRobin (load-blind baseline)", () => {
  it("returns undefined for no candidates", () => {
    expect(pickRoundRobin([], 0)).toBeUndefined();
    expect(pickRoundRobin([], 7)).toBeUndefined();
  });

  it("cycles over the candidates in id order, whatever order they come in", () => {
    const cands = [r("c", 0), r("a", 0), r("b", 0)];
    expect([0, 1, 2, 3, 4, 5, 6].map((t) => pickRoundRobin(cands, t)?.id)).toEqual(["a", "b", "c", "a", "b", "c", "a"]);
    const shuffled = [r("b", 0), r("c", 0), r("a", 0)];
    for (let t = 0; t < 9; t++) expect(pickRoundRobin(shuffled, t)?.id).toBe(pickRoundRobin(cands, t)?.id);
  });

  it("ignores load and capacity: full replicas get their turn (their admission decides)", () => {
    const cands = [r("a", 0, 8), r("b", 99, 2), r("c", 8, 8)];
    const counts = new Map<string, number>();
    for (let t = 0; t < 300; t++) {
      const id = pickRoundRobin(cands, t)!.id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    expect(Object.fromEntries(counts)).toEqual({ a: 100, b: 100, c: 100 });
  });

  it("returns the same object it was given and does not reorder the input", () => {
    const cands = [{ ...r("b", 0), url: "http://b" }, { ...r("a", 0), url: "http://a" }];
    expect(pickRoundRobin(cands, 0)).toBe(cands[1]);
    expect(cands.map((c) => c.id)).toEqual(["b", "a"]);
  });

  it("handles turns past the number of candidates, negative and huge turns", () => {
    const cands = [r("a", 0), r("b", 0), r("c", 0)];
    expect(pickRoundRobin(cands, 3_000_001)?.id).toBe("b");
    expect(pickRoundRobin(cands, -1)?.id).toBe("c");
    expect(cands).toContain(pickRoundRobin(cands, Number.MAX_SAFE_INTEGER));
    expect(cands).toContain(pickRoundRobin(cands, 2.5));
  });

  it("a retry that excludes the tried replica still lands on a candidate", () => {
    // dispatch passes view.candidates(now, tried): the tried replica is gone from the list.
    const remaining = [r("a", 0), r("c", 0)];
    for (let t = 0; t < 10; t++) expect(["a", "c"]).toContain(pickRoundRobin(remaining, t)!.id);
  });

  it("only sees what the routing view offers: draining and stale replicas are skipped", () => {
    const T = T0;
    const view = new RoutingView();
    const replica = (id: string, state: "ready" | "draining", expiresInMs = 10_000): ReplicaView => ({
      id,
      url: `http://${id}.test:8000`,
      epoch: 1,
      models: [],
      loading: [],
      expiresInMs,
      load: { seq: 1, ongoing: 0, queued: 0, max: 4, state },
    });
    view.applySnapshot({ deployment: "rr", replicas: [replica("a", "ready"), replica("b", "draining"), replica("c", "ready"), replica("d", "ready", 0)] }, T);
    const seen = new Set<string>();
    for (let t = 0; t < 20; t++) seen.add(pickRoundRobin(view.candidates(T), t)!.id);
    expect([...seen].sort()).toEqual(["a", "c"]);
  });
});

describe("pickRandom (load-blind baseline)", () => {
  it("returns undefined for no candidates, without drawing randomness", () => {
    let draws = 0;
    expect(pickRandom([], () => (draws++, 0.5))).toBeUndefined();
    expect(draws).toBe(0);
  });

  it("maps the random draw onto the candidates uniformly, ignoring load", () => {
    const cands = [r("a", 0), r("b", 50), r("c", 5, 5)];
    expect(pickRandom(cands, () => 0)?.id).toBe("a");
    expect(pickRandom(cands, () => 0.34)?.id).toBe("b");
    expect(pickRandom(cands, () => 0.99)?.id).toBe("c");
    // Outside Math.random's contract, but must not overrun.
    expect(pickRandom(cands, () => 1)?.id).toBe("c");
  });

  it("spreads evenly over many picks (seeded)", () => {
    const cands = [r("a", 0), r("b", 9, 2), r("c", 1), r("d", 100)];
    const rand = mulberry32(99);
    const counts = new Map<string, number>();
    for (let n = 0; n < 8_000; n++) {
      const id = pickRandom(cands, rand)!.id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    for (const id of ["a", "b", "c", "d"]) {
      expect(counts.get(id)!).toBeGreaterThan(1_800);
      expect(counts.get(id)!).toBeLessThan(2_200);
    }
  });

  it("returns the same object it was given", () => {
    const cands = [{ ...r("a", 0), url: "http://a" }];
    expect(pickRandom(cands, Math.random)).toBe(cands[0]);
  });
});

describe("pickReplica with queueing replicas (reported load above max_ongoing)", () => {
  const T = T0;
  /** A view of replicas as their load headers describe them: ongoing, queued, max. */
  function viewOf(loads: Record<string, [ongoing: number, queued: number, max: number]>) {
    const view = new RoutingView();
    const replicas: ReplicaView[] = Object.entries(loads).map(([id, [ongoing, queued, max]]) => ({
      id,
      url: `http://${id}.test:8000`,
      epoch: 1,
      models: [],
      loading: [],
      expiresInMs: 10_000,
      load: { seq: 1, ongoing, queued, max, state: "ready" },
    }));
    view.applySnapshot({ deployment: "q", replicas } satisfies RoutingSnapshot, T);
    return view;
  }

  it("counts the queue in the load, and a replica with a queue stays a candidate", () => {
    const view = viewOf({ a: [8, 40, 8], b: [2, 3, 2] });
    const cands = view.candidates(T);
    expect(cands.map((c) => [c.id, c.load, c.capacity])).toEqual([
      ["a", 48, 8],
      ["b", 5, 2],
    ]);
    for (const x of [0, 0.5, 0.99]) expect(pickReplica(cands, sequence(x, x))).toBeDefined();
  });

  it("a replica with free slots wins over any replica with a queue", () => {
    const view = viewOf({ slow: [8, 1, 8], busy: [7, 0, 8], small: [2, 1, 2] });
    const rand = mulberry32(5);
    for (let n = 0; n < 1_000; n++) expect(pickReplica(view.candidates(T), rand)?.id).toBe("busy");
  });

  it("between replicas with queues, the shorter queue relative to max_ongoing wins", () => {
    // slow: (8 + 4) / 8 = 1.5; small: (2 + 2) / 2 = 2.0; fast: (8 + 16) / 8 = 3.0.
    const view = viewOf({ slow: [8, 4, 8], small: [2, 2, 2], fast: [8, 16, 8] });
    const seen = new Map<string, number>();
    const rand = mulberry32(9);
    for (let n = 0; n < 3_000; n++) {
      const id = pickReplica(view.candidates(T), rand)!.id;
      seen.set(id, (seen.get(id) ?? 0) + 1);
    }
    // Two choices: the best wins both pairs it is in (2/3), the middle one the pair with the worst (1/3).
    expect(seen.get("fast")).toBeUndefined();
    expect(seen.get("slow")! / 3_000).toBeCloseTo(2 / 3, 1);
    expect(seen.get("small")! / 3_000).toBeCloseTo(1 / 3, 1);
  });

  it("this isolate's own in-flight dispatches add to a queue it has not heard of yet", () => {
    const view = viewOf({ a: [4, 0, 4], b: [4, 0, 4] });
    const a = view.get("a")!;
    for (let i = 0; i < 3; i++) view.startDispatch(a, T);
    expect(a.load).toBe(7);
    expect(pickReplica(view.candidates(T), sequence(0, 0))?.id).toBe("b");
  });
});

describe("KV-cache usage (LLM engines) counts as fullness", () => {
  const kv = (id: string, load: number, capacity: number, kvUsage: number): ReplicaChoice => ({ id, load, capacity, kv: kvUsage });

  it("fullness is the larger of slots used and KV cache used", () => {
    expect(fullness(kv("a", 2, 256, 0.9))).toBe(0.9);
    expect(fullness(kv("a", 128, 256, 0.1))).toBe(0.5);
    expect(fullness(r("a", 2, 4))).toBe(0.5);
  });

  it("few requests but a nearly full KV cache lose to many requests on an empty one", () => {
    const longContexts = kv("long", 4, 256, 0.95);
    const shortOnes = kv("short", 40, 256, 0.2);
    for (const draws of [sequence(0, 0.9), sequence(0.9, 0)]) expect(pickReplica([longContexts, shortOnes], draws)?.id).toBe("short");
  });

  it("a replica whose KV cache is full has no room while another has", () => {
    const full = kv("full", 1, 256, 1);
    const room = kv("room", 200, 256, 0.5);
    for (let i = 0; i < 20; i++) expect(pickReplica([full, room], mulberry32(i))?.id).toBe("room");
    // Model choice: a holder whose cache is full does not count as a holder with room.
    const holderFull: ModelHolderChoice = { ...full, models: ["lora-a"], loading: [] };
    const other: ModelHolderChoice = { ...room, models: [], loading: [] };
    expect(pickReplicaForModel([holderFull, other], "lora-a", mulberry32(1))?.id).toBe("room");
  });

  it("the routing view carries kv from snapshots and load headers", () => {
    const T = T0;
    const view = new RoutingView();
    const replica: ReplicaView = { id: "e1", url: "http://e1.test", epoch: 1, models: [], loading: [], expiresInMs: 10_000, load: { seq: 1, ongoing: 1, queued: 0, max: 256, state: "ready", kv: 0.4 } };
    view.applySnapshot({ deployment: "llm", replicas: [replica] } satisfies RoutingSnapshot, T);
    expect(view.get("e1")?.kv).toBe(0.4);
    view.applyLoad("e1", { seq: 2, ongoing: 1, queued: 0, max: 256, state: "ready", kv: 0.8 }, T + 10);
    expect(view.get("e1")?.kv).toBe(0.8);
    view.applyLoad("e1", { seq: 3, ongoing: 1, queued: 0, max: 256, state: "ready" }, T + 20);
    expect(view.get("e1")?.kv).toBeUndefined();
  });
});
