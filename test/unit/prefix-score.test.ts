/** The prefix tiers' pure choices: every isolate with the same membership agrees. */
import { describe, it, expect } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { ANCHOR_BLOCKS, anchorKey, pickByPrefixCache, pickByPrefixHash, rendezvousOrder, underLoadBound } from "../../src/policy/prefix-score.ts";
import type { ReplicaChoice } from "../../src/policy/pick-replica.ts";
import { mulberry32 } from "../../src/seeded-random.ts";

const r = (id: string, load: number, capacity = 8, kv?: number): ReplicaChoice => ({ id, load, capacity, ...(kv !== undefined ? { kv } : {}) });
const tokens = (n: number, seed: number) => {
  const rnd = mulberry32(seed);
  return Array.from({ length: n }, () => Math.floor(rnd() * 97));
};
const fleet = ["r0", "r1", "r2", "r3"].map((id) => r(id, 0));

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

describe("pickByPrefixHash", () => {
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

  it("has no answer for a prompt with no full block (the caller falls back to load)", () => {
    expect(pickByPrefixHash(fleet, [])).toBeUndefined();
    expect(pickByPrefixHash([], blockKeys(tokens(64, 1)))).toBeUndefined();
  });
});

describe("pickByPrefixCache", () => {
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
