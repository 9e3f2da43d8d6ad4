/**
 * Demand placement (src/policy/demand-placement.ts): homes for prefixes that isolates
 * agree on from the demand they saw, balanced by it where rendezvous alone piles heavy
 * prefixes on one replica; and the `home` filter of the prefix_cache profile that
 * sends a placed prompt home whatever the isolate believes is cached elsewhere.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DEFAULT_PREFIX_POLICY } from "../../src/config/deployment.ts";
import { createBalancer, type BalanceInput, type BalancerCandidate } from "../../src/policy/balancers/index.ts";
import { DemandPlacement, PLACEMENT_EVERY_MS, PLACEMENT_HALF_LIFE_MS, PLACEMENT_MAX_ANCHORS, PLACEMENT_MIN_PROMPTS, PLACEMENT_SLACK, type PlacedReplica } from "../../src/policy/demand-placement.ts";
import { anchorKey, rendezvousOrder } from "../../src/policy/prefix-score.ts";
import { keptKeys } from "../../src/policy/recent-prefixes.ts";
import { blockKeys, type BlockKey } from "../../src/prefix/block-keys.ts";
import { buildCacheSummary, CacheSummary } from "../../src/prefix/cache-summary.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

const fleetOf = (...capacities: number[]): PlacedReplica[] => capacities.map((capacity, i) => ({ id: `r${i}`, capacity }));
const anchors = (n: number, prefix = "a") => Array.from({ length: n }, (_, i) => `${prefix}${i}`);
/** Each anchor sent `prompts` times (by default one more than a home needs, so it still has one a little later) with weight `weight` at T0. */
function fed(placement: DemandPlacement, list: readonly string[], prompts = PLACEMENT_MIN_PROMPTS + 1, weight = 1): DemandPlacement {
  for (const a of list) for (let i = 0; i < prompts; i++) placement.record(a, weight, T0);
  return placement;
}
const homes = (p: DemandPlacement, list: readonly string[], fleet: readonly PlacedReplica[], now = T0) => list.map((a) => p.homeOf(a, fleet, now));
const perReplica = (h: readonly (string | undefined)[]) => {
  const n = new Map<string, number>();
  for (const id of h) if (id !== undefined) n.set(id, (n.get(id) ?? 0) + 1);
  return n;
};

describe("DemandPlacement", () => {
  it("places an anchor only once it has been sent PLACEMENT_MIN_PROMPTS times lately, and forgets it as its demand decays", () => {
    const fleet = fleetOf(4, 4);
    const p = new DemandPlacement();
    for (let i = 1; i < PLACEMENT_MIN_PROMPTS; i++) p.record("x", 10, T0);
    expect(p.homeOf("x", fleet, T0)).toBeUndefined();
    p.record("x", 10, T0);
    p.record("x", 10, T0);
    // Not placed before the next placement, PLACEMENT_EVERY_MS on; then placed.
    expect(p.homeOf("x", fleet, T0 + PLACEMENT_EVERY_MS - 1)).toBeUndefined();
    expect(p.homeOf("x", fleet, T0 + PLACEMENT_EVERY_MS)).toBe(rendezvousOrder(fleet, "x")[0]!.id);
    expect(p.demandOf("x", T0 + PLACEMENT_HALF_LIFE_MS)).toBeCloseTo(((PLACEMENT_MIN_PROMPTS + 1) * 10) / 2, 6);
    // One half-life on, its prompts count half: no home any more.
    expect(p.homeOf("x", fleet, T0 + PLACEMENT_HALF_LIFE_MS)).toBeUndefined();
    expect(p.homeOf("x", [], T0)).toBeUndefined();
  });

  it("balances heavy anchors that rendezvous alone piles on one replica: no replica above (1 + slack) × its share", () => {
    const fleet = fleetOf(8, 8, 8, 8);
    const list = anchors(16);
    // Rendezvous alone puts more than the line on some replica for these anchors (the case this is for).
    const byRendezvous = perReplica(list.map((a) => rendezvousOrder(fleet, a)[0]!.id));
    const line = (1 + PLACEMENT_SLACK) * (list.length / fleet.length);
    expect(Math.max(...byRendezvous.values())).toBeGreaterThan(line);
    const placed = perReplica(homes(fed(new DemandPlacement(), list), list, fleet));
    expect([...placed.values()].reduce((s, n) => s + n, 0)).toBe(16);
    expect(Math.max(...placed.values())).toBeLessThanOrEqual(line);
  });

  it("weighs anchors by their prompts' weight and replicas by their capacity", () => {
    const fleet = fleetOf(16, 8, 8);
    const list = anchors(40);
    const p = fed(new DemandPlacement(), list);
    // One anchor ten times heavier than the others.
    for (let i = 0; i < 30; i++) p.record("heavy", 1, T0);
    const all = [...list, "heavy"];
    const h = homes(p, all, fleet);
    const load = new Map<string, number>();
    all.forEach((a, i) => load.set(h[i]!, (load.get(h[i]!) ?? 0) + p.demandOf(a, T0)));
    const total = [...load.values()].reduce((s, x) => s + x, 0);
    for (const r of fleet) expect(load.get(r.id)! / total).toBeLessThanOrEqual(((1 + PLACEMENT_SLACK) * r.capacity) / 32 + 1e-9);
    // The large replica takes about half.
    expect(load.get("r0")! / total).toBeGreaterThan(0.35);
  });

  it("gives the same homes to isolates that saw the same demand in another order", () => {
    fc.assert(
      fc.property(fc.array(fc.tuple(fc.integer({ min: 0, max: 30 }), fc.integer({ min: 1, max: 9 })), { minLength: 1, maxLength: 200 }), fc.integer({ min: 1, max: 6 }), (sends, replicas) => {
        const fleet = fleetOf(...Array.from({ length: replicas }, () => 8));
        const a = new DemandPlacement();
        const b = new DemandPlacement();
        for (const [anchor, w] of sends) a.record(`k${anchor}`, w, T0);
        for (const [anchor, w] of [...sends].reverse()) b.record(`k${anchor}`, w, T0);
        const list = anchors(31, "k");
        expect(homes(a, list, fleet)).toEqual(homes(b, list, [...fleet].reverse()));
      }),
    );
  });

  it("keeps homes while demand jitters: a tenth more or less on any anchor moves none", () => {
    const fleet = fleetOf(8, 8, 8, 8);
    const list = anchors(16);
    const rnd = mulberry32(3);
    const weights = list.map(() => 20 + Math.floor(rnd() * 60));
    const before = new DemandPlacement();
    list.forEach((a, i) => fed(before, [a], PLACEMENT_MIN_PROMPTS, weights[i]! / PLACEMENT_MIN_PROMPTS));
    const h = homes(before, list, fleet);
    expect(h.every((id) => id !== undefined)).toBe(true);
    for (const [i, a] of list.entries()) {
      for (const k of [0.9, 1.1]) {
        const after = new DemandPlacement();
        list.forEach((b, j) => fed(after, [b], PLACEMENT_MIN_PROMPTS, ((j === i ? k : 1) * weights[j]!) / PLACEMENT_MIN_PROMPTS));
        expect(homes(after, list, fleet), `${a} × ${k}`).toEqual(h);
      }
    }
  });

  it("places again at once when the fleet changes: a replica that left hands its anchors on", () => {
    const fleet = fleetOf(8, 8, 8);
    const list = anchors(9);
    const p = fed(new DemandPlacement(), list);
    const h = homes(p, list, fleet);
    const gone = h[0]!;
    const rest = fleet.filter((r) => r.id !== gone);
    const after = homes(p, list, rest, T0 + 1);
    expect(after.every((id) => id !== undefined && id !== gone)).toBe(true);
    // Anchors whose home stayed keep it unless the line moves them.
    expect(after.filter((id, i) => h[i] !== gone && id === h[i]).length).toBeGreaterThan(0);
  });

  it("keeps at most PLACEMENT_MAX_ANCHORS anchors: a flood of one-off prompts evicts the lightest, never a heavy prefix", () => {
    const fleet = fleetOf(8, 8);
    const p = fed(new DemandPlacement(), ["heavy"], 50);
    for (let i = 0; i < 10 * PLACEMENT_MAX_ANCHORS; i++) p.record(`once-${i}`, 1, T0 + i);
    expect(p.size).toBe(PLACEMENT_MAX_ANCHORS);
    expect(p.homeOf("heavy", fleet, T0 + 10 * PLACEMENT_MAX_ANCHORS)).toBeDefined();
    // Ignored: a weight that is not a positive number.
    p.record("nan", Number.NaN, T0);
    p.record("zero", 0, T0);
    expect(p.demandOf("nan", T0) + p.demandOf("zero", T0)).toBe(0);
  });
});

describe("a prompt's anchor is its first kept key, so a dispatch note tells its anchor", () => {
  it("for any length of prompt", () => {
    fc.assert(
      fc.property(fc.integer({ min: 1, max: 2_000 }), (blocks) => {
        const keys = Array.from({ length: blocks }, (_, i) => `b${i}` as BlockKey);
        expect(keptKeys(keys)[0]).toBe(anchorKey(keys));
      }),
    );
  });
});

describe("the prefix_cache profile's home filter", () => {
  const c = (id: string, over: Partial<BalancerCandidate> = {}): BalancerCandidate => ({ id, load: 0, capacity: 8, models: [], loading: [], ...over });
  const tokens = (n: number, seed: number) => {
    const rnd = mulberry32(seed);
    return Array.from({ length: n }, () => Math.floor(rnd() * 97));
  };
  const shared = tokens(512, 1);
  const promptOf = (seed: number) => ({ keys: blockKeys([...shared, ...tokens(64, seed)]), blockSize: 16 });
  const input = (seed: number, now = T0, over: Partial<BalanceInput> = {}): BalanceInput => ({ random: mulberry32(seed), now, prompt: promptOf(seed), ...over });

  it("sends a prefix its isolate and peers sent often to its home, though a summary says another replica holds it", () => {
    const fleet = ["r0", "r1", "r2", "r3"].map((id) => c(id));
    const anchor = anchorKey(promptOf(1).keys)!;
    const home = rendezvousOrder(fleet, anchor)[0]!.id;
    const other = fleet.find((r) => r.id !== home)!.id;
    // `other` reports holding the whole prompt: by belief, the choice is `other`.
    const believed = fleet.map((r) => (r.id === other ? { ...r, cache: CacheSummary.parse(buildCacheSummary([...promptOf(9).keys].reverse(), 16))! } : r));
    const b = createBalancer("prefix_cache", DEFAULT_PREFIX_POLICY);
    expect(b.pick(believed, input(9))!.id).toBe(other);
    // Peers sent the prefix often (their notes, through the relay): it has a home now, and goes there.
    const kept = keptKeys(promptOf(2).keys);
    b.learnDispatches!(
      Array.from({ length: PLACEMENT_MIN_PROMPTS + 1 }, () => ({ r: other, k: kept })),
      T0,
    );
    expect(b.pick(believed, input(9, T0 + PLACEMENT_EVERY_MS))!.id).toBe(home);
    // A home over the load line is passed by for this request (the filters before it).
    const full = believed.map((r) => (r.id === home ? { ...r, load: 40 } : r));
    expect(b.pick(full, input(9, T0 + PLACEMENT_EVERY_MS))!.id).not.toBe(home);
    // The profile before the home filter follows the belief.
    const before = createBalancer({ filters: ["load_line", "room"], picker: "cheapest" }, DEFAULT_PREFIX_POLICY);
    before.learnDispatches!(
      Array.from({ length: PLACEMENT_MIN_PROMPTS + 1 }, () => ({ r: other, k: kept })),
      T0,
    );
    expect(before.pick(believed, input(9, T0 + PLACEMENT_EVERY_MS))!.id).toBe(other);
  });

  it("places on the first attempt's fleet: a retry without the home does not move homes", () => {
    const fleet = ["r0", "r1", "r2", "r3"].map((id) => c(id));
    const anchor = anchorKey(promptOf(1).keys)!;
    const [home, second, third] = rendezvousOrder(fleet, anchor).map((r) => r.id) as [string, string, string];
    const b = createBalancer("prefix_cache", DEFAULT_PREFIX_POLICY);
    // The prefix was sent to the third in its rendezvous order (say the first two were full then).
    for (let i = 0; i <= PLACEMENT_MIN_PROMPTS; i++) b.served!(third, input(i + 2, T0));
    const now = T0 + PLACEMENT_EVERY_MS;
    expect(b.pick(fleet, input(1, now, { fleet }))!.id).toBe(home);
    // The retry's pool lacks the home. Placed on the first attempt's fleet, the prompt has no home
    // in the pool and goes where it is believed held; placed on the pool, its home would be `second`.
    const rest = fleet.filter((r) => r.id !== home);
    expect(b.pick(rest, input(1, now, { fleet }))!.id).toBe(third);
    expect(b.pick(rest, input(1, now))!.id).toBe(second);
    expect(b.pick(fleet, input(1, now + 1, { fleet }))!.id).toBe(home);
  });
});
