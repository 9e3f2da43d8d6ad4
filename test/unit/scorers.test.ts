/**
 * The precise tier's scoring seam (src/policy/scorers/): the built-in terms give
 * the cost the tier had before the seam, configuration names terms from the
 * registry, and a new term is one module plus one registration.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import { createBalancer, runProfile, type BalancerCandidate } from "../../src/policy/balancers/index.ts";
import { loadLine, room } from "../../src/policy/balancers/filters.ts";
import { cheapest } from "../../src/policy/balancers/pickers.ts";
import type { ReplicaChoice } from "../../src/policy/pick-replica.ts";
import { rendezvousOrder, anchorKey, underLoadBound } from "../../src/policy/prefix-score.ts";
import { SCORERS, SCORER_NAMES, defineScorer, scorerRegistry, scorers, type WeightedScore } from "../../src/policy/scorers/index.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { CacheSummary, buildCacheSummary } from "../../src/prefix/cache-summary.ts";

const r = (id: string, load: number, capacity = 8): ReplicaChoice => ({ id, load, capacity });
const keys = blockKeys(Array.from({ length: 16 * 12 }, (_, i) => (i * 7) % 97));

/**
 * The prefix_cache profile (filters load_line and room, picker cheapest) with `terms`,
 * where candidate c reports a cache summary of the prompt's first held(c) blocks.
 */
function pickByPrefixCache(cands: readonly ReplicaChoice[], held: (c: ReplicaChoice) => number, terms: readonly WeightedScore[], prompt = keys): string | undefined {
  const withCache = cands.map((c): BalancerCandidate => {
    const n = Math.min(prompt.length, held(c));
    return { ...c, models: [], loading: [], ...(n > 0 ? { cache: CacheSummary.parse(buildCacheSummary(prompt.slice(0, n).reverse(), 16))! } : {}) };
  });
  return runProfile("t", [loadLine, room], cheapest, terms, { loadFactor: 1, prefillWeight: 2 }).pick(withCache, { random: () => 0.5, now: 0, prompt: { keys: prompt, blockSize: 16 } })?.id;
}

/**
 * The precise tier as it was written before the seam: 2 × uncached share + slots, cheapest
 * first, rendezvous ties; and, since cold placement (2026-12-04), a prompt no candidate holds
 * any of, where prefill weighs, goes to the first in rendezvous order.
 */
function before(candidates: ReplicaChoice[], held: (c: ReplicaChoice) => number, weight = 2, epsilon = 1): ReplicaChoice | undefined {
  const pool = underLoadBound(candidates, epsilon);
  const room = pool.filter((c) => c.load / c.capacity < 1);
  const ranked = rendezvousOrder(room.length > 0 ? room : pool, anchorKey(keys)!);
  if (weight > 0 && candidates.every((c) => held(c) === 0)) return ranked[0];
  let best: ReplicaChoice | undefined;
  let bestCost = Infinity;
  for (const c of ranked) {
    const cost = weight * ((keys.length - Math.min(keys.length, held(c))) / keys.length) + (c.load + 1) / c.capacity;
    if (cost < bestCost) [best, bestCost] = [c, cost];
  }
  return best;
}

describe("scorers", () => {
  it("the built-in terms choose as the tier did before the seam (any fleet, any holdings, any prefill weight)", () => {
    fc.assert(
      fc.property(
        fc.array(fc.record({ load: fc.integer({ min: 0, max: 20 }), capacity: fc.integer({ min: 1, max: 16 }), held: fc.integer({ min: 0, max: 14 }) }), { minLength: 1, maxLength: 12 }),
        fc.double({ min: 0, max: 10, noNaN: true }),
        (fleet, weight) => {
          const cands = fleet.map((f, i) => r(`r${i}`, f.load, f.capacity));
          const held = (c: ReplicaChoice) => fleet[Number(c.id.slice(1))]!.held;
          expect(pickByPrefixCache(cands, held, scorers.resolve({ prefill: weight, slots: 1 }))).toBe(before(cands, held, weight)?.id);
        },
      ),
      { numRuns: 300 },
    );
  });

  it("configuration accepts the registered names only, and their weights reach the balancer", () => {
    expect(SCORER_NAMES).toEqual(SCORERS.map((s) => s.name));
    const d = defineDeployment({ name: "x", routePrefix: "/x", backend: { kind: "external" }, policy: { balancer: "prefix_cache", prefix: { scorers: { prefill: 0 } } } });
    expect(d.policy.prefix?.scorers).toEqual({ prefill: 0 });
    expect(() => defineDeployment({ name: "y", routePrefix: "/y", backend: { kind: "external" }, policy: { prefix: { scorers: { distance: 1 } as never } } })).toThrow(/scorers/);

    // r-holder holds the whole prompt but runs 3 requests; the others are idle. With prefill weighed 0, slots alone decide.
    const holder = rendezvousOrder([r("a", 0), r("b", 0), r("c", 0)], anchorKey(keys)!)[2]!.id;
    const cache = CacheSummary.parse(buildCacheSummary(keys, 16))!;
    const fleet = ["a", "b", "c"].map((id) => ({ ...r(id, id === holder ? 3 : 0), models: [], loading: [], ...(id === holder ? { cache } : {}) }));
    const input = { random: () => 0.5, now: 0, prompt: { keys, blockSize: 16 } };
    expect(createBalancer("prefix_cache", { loadFactor: 1, prefillWeight: 2 }).pick(fleet, input)?.id).toBe(holder);
    expect(createBalancer("prefix_cache", { loadFactor: 1, prefillWeight: 2, scorers: { prefill: 0 } }).pick(fleet, input)?.id).not.toBe(holder);
  });

  it("a new term is one module and one registration: a replica's distance", () => {
    // The module: a term with its factory (here, kilometres to each replica, as a share of 1,000).
    const km: Record<string, number> = { near: 10, far: 900 };
    const distance = defineScorer({ name: "distance", description: "distance to the replica, per 1,000 km", needsPrompt: false, create: () => (c) => (km[c.id] ?? 0) / 1000 });
    // The registration: one more entry in the list.
    const registry = scorerRegistry([...SCORERS, distance]);
    expect(registry.names).toEqual([...SCORER_NAMES, "distance"]);
    const fleet = [r("near", 0), r("far", 0)];
    const heldByFar = (c: ReplicaChoice) => (c.id === "far" ? 1 : 0);
    // Without the term, one cached block of twelve makes "far" cheaper; weighed in, distance outweighs it.
    expect(pickByPrefixCache(fleet, heldByFar, scorers.resolve({ prefill: 2, slots: 1 }))).toBe("far");
    expect(pickByPrefixCache(fleet, heldByFar, registry.resolve({ prefill: 2, slots: 1, distance: 5 }))).toBe("near");
    expect(() => scorers.resolve({ distance: 1 })).toThrow(/no scorer "distance"/);
    expect(() => scorerRegistry([...SCORERS, SCORERS[0]])).toThrow(/registered twice/);
  });

  it("leader: every isolate prefers the same one of a prefix's holders, the first in rendezvous order among those holding about the most", () => {
    const ids = ["a", "b", "c", "d"];
    const order = rendezvousOrder(ids.map((id) => r(id, 0, 16)), anchorKey(keys)!).map((c) => c.id);
    const [first, second, third] = order as [string, string, string];
    // The two later ones in rendezvous order hold the whole prompt (a split group); the earlier of them carries one request more.
    const split = (c: ReplicaChoice) => (c.id === second || c.id === third ? keys.length : 0);
    const loads = (busier: string) => ids.map((id) => r(id, id === busier ? 3 : 2, 16));
    const withLeader = scorers.resolve({ prefill: 2, slots: 1, leader: 0.25 });
    const without = scorers.resolve({ prefill: 2, slots: 1 });
    // Without the term the emptier holder wins, so the group alternates between its two copies as their loads swap.
    expect(pickByPrefixCache(loads(second), split, without)).toBe(third);
    expect(pickByPrefixCache(loads(third), split, without)).toBe(second);
    // With it, the leader (second: the earlier holder in rendezvous order, holding all of the prompt) keeps the group
    // while it has at most 4 requests more (0.25 × 1 / (1/16)).
    expect(pickByPrefixCache(loads(second), split, withLeader)).toBe(second);
    expect(pickByPrefixCache(loads(third), split, withLeader)).toBe(second);
    const crowded = ids.map((id) => r(id, id === second ? 7 : 2, 16));
    expect(pickByPrefixCache(crowded, split, withLeader)).toBe(third);
    // About the most: a replica holding one block is no leader, even first in rendezvous order; nor is one a full
    // stride short of the most (a long prompt: dispatch records are kept every 16th block).
    const long = blockKeys(Array.from({ length: 16 * 40 }, (_, i) => (i * 11) % 89));
    const [lFirst, lSecond, lThird] = rendezvousOrder(ids.map((id) => r(id, 0, 16)), anchorKey(long)!).map((c) => c.id) as [string, string, string];
    const lLoads = ids.map((id) => r(id, id === lThird ? 3 : 2, 16));
    const deep = (c: ReplicaChoice) => (c.id === lFirst ? 1 : c.id === lSecond ? long.length - 17 : c.id === lThird ? long.length : 0);
    expect(pickByPrefixCache(lLoads, deep, scorers.resolve({ prefill: 0, slots: 1, leader: 0.25 }), long)).toBe(lThird);
    // Within a stride the earlier in rendezvous order leads, though it holds less and the other is as empty.
    const near = (c: ReplicaChoice) => (c.id === lSecond ? long.length - 15 : c.id === lThird ? long.length : 0);
    expect(pickByPrefixCache(lLoads, near, scorers.resolve({ prefill: 0, slots: 1, leader: 0.25 }), long)).toBe(lSecond);
    expect(pickByPrefixCache(lLoads, near, scorers.resolve({ prefill: 0, slots: 1 }), long)).toBe(lFirst);
    // The pull is the share of the prompt the leader holds: a one-block opening makes no hot spot of its leader.
    const slotsAndLeader = scorers.resolve({ prefill: 0, slots: 1, leader: 0.25 });
    const oneMore = ids.map((id) => r(id, id === second ? 3 : 2, 16));
    expect(pickByPrefixCache(oneMore, (c) => (c.id === second ? 1 : 0), slotsAndLeader)).not.toBe(second);
    expect(pickByPrefixCache(oneMore, (c) => (c.id === second ? keys.length : 0), slotsAndLeader)).toBe(second);
    // With nothing held, the term is 0 for all: the cold placement rule decides (the first in rendezvous order).
    expect(pickByPrefixCache(loads(first), () => 0, withLeader)).toBe(first);
  });
});
