/**
 * The prefix rules (src/policy/prefix-score.ts) and the two prefix profiles built on
 * them (src/policy/balancers/: filters load_line and room, then the rendezvous or
 * the cheapest picker): every isolate with the same membership agrees.
 */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { blockKeys, type BlockKey } from "../../src/prefix/block-keys.ts";
import { buildCacheSummary, CacheSummary } from "../../src/prefix/cache-summary.ts";
import { createBalancer, type BalancerCandidate } from "../../src/policy/balancers/index.ts";
import { ANCHOR_BLOCKS, DEFAULT_LOAD_FACTOR, DEFAULT_PREFILL_WEIGHT, anchorKey, rendezvousOrder, underLoadBound } from "../../src/policy/prefix-score.ts";
import type { ReplicaChoice } from "../../src/policy/pick-replica.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

const r = (id: string, load: number, capacity = 8, kv?: number): ReplicaChoice => ({ id, load, capacity, ...(kv !== undefined ? { kv } : {}) });
const tokens = (n: number, seed: number) => {
  const rnd = mulberry32(seed);
  return Array.from({ length: n }, () => Math.floor(rnd() * 97));
};
const fleet = ["r0", "r1", "r2", "r3"].map((id) => r(id, 0));

/**
 * The named profile's choice among `cands` for a prompt with `keys`, where candidate c
 * reports a cache summary of the prompt's first held(c) blocks; the candidate itself.
 */
function profilePick(name: "prefix_hash" | "prefix_cache", cands: readonly ReplicaChoice[], keys: BlockKey[], held: (c: ReplicaChoice) => number, epsilon: number) {
  const withCache = cands.map((c): BalancerCandidate => {
    const n = held(c);
    return { ...c, models: [], loading: [], ...(n > 0 ? { cache: CacheSummary.parse(buildCacheSummary(keys.slice(0, n).reverse(), 16))! } : {}) };
  });
  const picked = createBalancer(name, { loadFactor: epsilon, prefillWeight: DEFAULT_PREFILL_WEIGHT }).pick(withCache, { random: mulberry32(1), now: T0, prompt: { keys, blockSize: 16 } });
  return cands.find((c) => c.id === picked?.id);
}
const pickByPrefixHash = (cands: readonly ReplicaChoice[], keys: BlockKey[], epsilon = DEFAULT_LOAD_FACTOR) => profilePick("prefix_hash", cands, keys, () => 0, epsilon);
const pickByPrefixCache = (cands: readonly ReplicaChoice[], keys: BlockKey[], held: (c: ReplicaChoice) => number, { epsilon = DEFAULT_LOAD_FACTOR } = {}) =>
  profilePick("prefix_cache", cands, keys, held, epsilon);

describe("anchorKey", () => {
  it("is the key of the first ANCHOR_BLOCKS blocks, or of the whole prompt when shorter", () => {
    const keys = blockKeys(tokens(16 * 40, 1));
    expect(anchorKey(keys)).toBe(keys[ANCHOR_BLOCKS - 1]);
    expect(anchorKey(keys.slice(0, 3))).toBe(keys[2]);
    expect(anchorKey([])).toBeUndefined();
  });
});

describe("underLoadBound", () => {
  it("keeps everyone on an idle fleet, and drops the replica above (1+ε) × the mean plus one request", () => {
    expect(underLoadBound(fleet)).toHaveLength(4);
    const hot = [r("a", 6), r("b", 1), r("c", 1), r("d", 0)];
    expect(underLoadBound(hot, 0.25).map((c) => c.id)).toEqual(["b", "c", "d"]);
  });

  it("lets a prefix's replica take a second concurrent request on a quiet fleet", () => {
    expect(underLoadBound([r("a", 1), r("b", 0), r("c", 0), r("d", 0)], 0.25).map((c) => c.id)).toEqual(["a", "b", "c", "d"]);
    expect(underLoadBound([r("a", 2), r("b", 0), r("c", 0), r("d", 0)], 0.25).map((c) => c.id)).toEqual(["b", "c", "d"]);
    // The default ε (1): the line at twice the mean plus one request lets it take up to five.
    expect(underLoadBound([r("a", 4), r("b", 0), r("c", 0), r("d", 0)]).map((c) => c.id)).toEqual(["a", "b", "c", "d"]);
    expect(underLoadBound([r("a", 5), r("b", 0), r("c", 0), r("d", 0)]).map((c) => c.id)).toEqual(["b", "c", "d"]);
  });

  it("does not move a prefix for KV use that swings below the pressure mark", () => {
    expect(underLoadBound([r("a", 0, 8, 0.6), r("b", 0), r("c", 0)]).map((c) => c.id)).toEqual(["a", "b", "c"]);
  });

  it("counts KV fullness near full, and never returns an empty set", () => {
    const kvFull = [r("a", 0, 8, 0.95), r("b", 0), r("c", 0)];
    expect(underLoadBound(kvFull).map((c) => c.id)).toEqual(["b", "c"]);
    expect(underLoadBound([r("x", 100)])).toHaveLength(1);
  });
});

describe("prefix_hash", () => {
  it("sends prompts sharing the anchor to one replica, whatever follows, and independent callers agree", () => {
    const shared = tokens(16 * ANCHOR_BLOCKS, 5);
    const a = blockKeys([...shared, ...tokens(300, 6)]);
    const b = blockKeys([...shared, ...tokens(900, 7)]);
    const first = pickByPrefixHash(fleet, a)!;
    expect(pickByPrefixHash(fleet, b)).toBe(first);
    // Another isolate: the same membership in another order.
    expect(pickByPrefixHash([...fleet].reverse(), a)!.id).toBe(first.id);
  });

  it("spreads different prefixes over the fleet", () => {
    const hits = new Map<string, number>();
    for (let g = 0; g < 400; g++) {
      const id = pickByPrefixHash(fleet, blockKeys(tokens(16 * 20, 100 + g)))!.id;
      hits.set(id, (hits.get(id) ?? 0) + 1);
    }
    for (const c of fleet) expect(hits.get(c.id)).toBeGreaterThan(60);
  });

  it("moves to the next replica in rendezvous order when the first is over the load line", () => {
    const keys = blockKeys(tokens(16 * 20, 11));
    const order = rendezvousOrder(fleet, anchorKey(keys)!);
    const loaded = fleet.map((c) => (c.id === order[0]!.id ? r(c.id, 7) : r(c.id, 1)));
    expect(pickByPrefixHash(loaded, keys, 0.25)!.id).toBe(order[1]!.id);
    const idleElsewhere = fleet.map((c) => (c.id === order[0]!.id ? r(c.id, 7) : r(c.id, 0)));
    expect(pickByPrefixHash(idleElsewhere, keys)!.id).toBe(order[1]!.id);
  });

  it("has no answer without candidates", () => {
    expect(pickByPrefixHash([], blockKeys(tokens(64, 1)))).toBeUndefined();
  });
});

describe("prefix_cache", () => {
  const keys = blockKeys(tokens(16 * 100, 21));
  const order = rendezvousOrder(fleet, anchorKey(keys)!);

  it("with no cache anywhere, agrees with the hash tier", () => {
    expect(pickByPrefixCache(fleet, keys, () => 0)).toBe(pickByPrefixHash(fleet, keys));
  });

  it("goes to the replica holding the longest prefix", () => {
    const holder = order[2]!;
    expect(pickByPrefixCache(fleet, keys, (c) => (c.id === holder.id ? 80 : 10))!.id).toBe(holder.id);
  });

  it("weighs cached prefill against request slots: a small hit does not beat an emptier replica, a larger one does", () => {
    const loaded = fleet.map((c) => (c.id === order[3]!.id ? r(c.id, 1) : r(c.id, 0)));
    // order[3] holds 5 % more of the prompt (worth 2 × 0.05 = 0.1) but is 1/8 fuller.
    expect(pickByPrefixCache(loaded, keys, (c) => (c.id === order[3]!.id ? 5 : 0))!.id).not.toBe(order[3]!.id);
    // 10 % more (0.2) is worth a request's slot.
    expect(pickByPrefixCache(loaded, keys, (c) => (c.id === order[3]!.id ? 10 : 0))!.id).toBe(order[3]!.id);
    // Holding all of it pays for that load.
    expect(pickByPrefixCache(loaded, keys, (c) => (c.id === order[3]!.id ? 100 : 0))!.id).toBe(order[3]!.id);
  });

  it("never sends to a holder above the load line", () => {
    const holder = order[0]!;
    const loaded = fleet.map((c) => (c.id === holder.id ? r(c.id, 8) : r(c.id, 1)));
    expect(pickByPrefixCache(loaded, keys, (c) => (c.id === holder.id ? 100 : 0))!.id).not.toBe(holder.id);
  });
});

// Cases the mutation run (npm run mutation, 2026-12-03) found unguarded: the KV-pressure
// mark's edges, the room preference, capacities that differ, the empty inputs and ε.
describe("prefix choice at its edges", () => {
  const keys = blockKeys(tokens(16 * 40, 31));
  const order = rendezvousOrder(fleet, anchorKey(keys)!);

  it("counts KV use from the pressure mark on, and only when it is above the slots in use", () => {
    // At the mark exactly (0.9 ≥ KV_PRESSURE), a replica is as full as its KV cache.
    expect(underLoadBound([r("a", 0, 8, 0.9), r("b", 0), r("c", 0)]).map((c) => c.id)).toEqual(["b", "c"]);
    // Just below the mark, its slots decide.
    expect(underLoadBound([r("a", 0, 8, 0.89), r("b", 0), r("c", 0)]).map((c) => c.id)).toEqual(["a", "b", "c"]);
    // Above the mark but below the slots: the slots (1.0 with this request), not the KV use (0.9), which
    // would have kept it under this line (ε = 0: the mean plus one request, 0.9375 here).
    expect(underLoadBound([r("a", 7, 8, 0.9), r("b", 5), r("c", 5)], 0).map((c) => c.id)).toEqual(["b", "c"]);
    // Above the mark and above the slots (0.75): the KV use, which puts it over the same line.
    expect(underLoadBound([r("a", 5, 8, 0.95), r("b", 5), r("c", 5)], 0).map((c) => c.id)).toEqual(["b", "c"]);
    expect(underLoadBound([r("a", 5, 8, 0.5), r("b", 5), r("c", 5)], 0).map((c) => c.id)).toEqual(["a", "b", "c"]);
  });

  it("returns an empty candidate list as it is, and one candidate whatever its load", () => {
    expect(underLoadBound([])).toEqual([]);
    expect(underLoadBound([r("x", 0)]).map((c) => c.id)).toEqual(["x"]);
  });

  it("prefers a replica with room over a full one under the line, and takes a full one when none has room", () => {
    // Everyone full: the rendezvous first, though full (its admission decides).
    const allFull = fleet.map((c) => r(c.id, 8));
    expect(pickByPrefixHash(allFull, keys)!.id).toBe(order[0]!.id);
    expect(pickByPrefixCache(allFull, keys, () => 0)!.id).toBe(order[0]!.id);
    // The rendezvous first full (capacity 1, one running) while under the line: the next one, which has room.
    const firstFull = fleet.map((c) => (c.id === order[0]!.id ? r(c.id, 1, 1) : r(c.id, 0, 1)));
    expect(pickByPrefixHash(firstFull, keys)!.id).toBe(order[1]!.id);
    expect(pickByPrefixCache(firstFull, keys, () => 0)!.id).toBe(order[1]!.id);
  });

  it("weighs slots as (load + 1) / capacity, so replicas of different sizes compare with this request counted", () => {
    // Equal prefill everywhere (each holds the first block). order[0]: 0 running of 1 slot (with this
    // request: 1.0); order[1]: 1 running of 4 (with it: 0.5). Counting the request, order[1] is emptier.
    const mixed = fleet.map((c) => (c.id === order[0]!.id ? r(c.id, 0, 1) : c.id === order[1]!.id ? r(c.id, 1, 4) : r(c.id, 4, 4)));
    expect(pickByPrefixCache(mixed, keys, () => 1, { epsilon: 10 })!.id).toBe(order[1]!.id);
    // A prompt no one holds any of goes in rendezvous order, as prefix_hash sends it, whatever the slots.
    expect(pickByPrefixCache(mixed, keys, () => 0, { epsilon: 10 })!.id).toBe(order[0]!.id);
  });

  it("takes ε from the options", () => {
    // order[0] holds the whole prompt and runs 2 of 8 while the others run none: under the default
    // line (ε = 1) it keeps the prefix; with ε = 0 it is above the line (mean 3/8·… + slack) and loses it.
    const warm = fleet.map((c) => (c.id === order[0]!.id ? r(c.id, 2) : r(c.id, 0)));
    const held = (c: ReplicaChoice) => (c.id === order[0]!.id ? keys.length : 0);
    expect(pickByPrefixCache(warm, keys, held)!.id).toBe(order[0]!.id);
    expect(pickByPrefixCache(warm, keys, held, { epsilon: 0 })!.id).not.toBe(order[0]!.id);
    // Running 5 of 8 it is over the default line, and under a wider one (ε = 3).
    const hot = fleet.map((c) => (c.id === order[0]!.id ? r(c.id, 5) : r(c.id, 0)));
    expect(pickByPrefixCache(hot, keys, held)!.id).not.toBe(order[0]!.id);
    expect(pickByPrefixCache(hot, keys, held, { epsilon: 3 })!.id).toBe(order[0]!.id);
  });

  it("has no answer without candidates", () => {
    expect(pickByPrefixCache([], keys, () => 0)).toBeUndefined();
  });
});
