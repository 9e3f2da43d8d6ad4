/**
 * Where the prefix balancers' choice applies (src/policy/balancers/prefix-fallback.ts):
 * which pool the prefix choice sees, and when it is not asked at all. The choice itself is
 * a spy here, so these hold whatever the rendezvous hash makes of the ids (cases the
 * mutation run found unguarded, 2026-12-03).
 */
import { describe, expect, it } from "vitest";
import { prefixAware } from "../../src/policy/balancers/prefix-fallback.ts";
import type { BalanceInput, BalancerCandidate, PromptKeys } from "../../src/policy/balancers/balancer.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

const c = (id: string, load = 0, over: Partial<BalancerCandidate> = {}): BalancerCandidate => ({ id, load, capacity: 8, models: [], loading: [], ...over });
const keyed: PromptKeys = { keys: blockKeys(Array.from({ length: 64 }, (_, i) => i % 97)), blockSize: 16 };
const input = (over: Partial<BalanceInput> = {}): BalanceInput => ({ random: mulberry32(3), now: T0, ...over });

/** A prefix choice that records the pools it was shown and answers with `answer(pool)`. */
function spy(answer: (pool: readonly BalancerCandidate[]) => BalancerCandidate | undefined = (pool) => pool.at(-1)) {
  const pools: string[][] = [];
  const choose = (pool: readonly BalancerCandidate[], prompt: PromptKeys) => {
    expect(prompt).toBe(keyed);
    pools.push(pool.map((p) => p.id));
    return answer(pool);
  };
  return { pools, choose };
}

describe("prefixAware", () => {
  it("shows a multiplexed model's prefix choice only its holders with room (loaded or loading)", () => {
    const s = spy();
    const fleet = [c("loaded", 0, { models: ["m"] }), c("loading", 0, { loading: ["m"] }), c("full", 8, { models: ["m"] }), c("other", 0, { models: ["x"] }), c("empty")];
    expect(prefixAware(fleet, input({ model: "m", prompt: keyed }), s.choose)!.id).toBe("loading");
    expect(s.pools).toEqual([["loaded", "loading"]]);
  });

  it("asks pickReplicaForModel when no holder has room, never loading a model for a prefix", () => {
    const s = spy();
    const fleet = [c("full", 8, { models: ["m"] }), c("other", 0, { models: ["x"] }), c("empty")];
    // pickReplicaForModel: no holder with room, so the model goes to an empty replica.
    expect(prefixAware(fleet, input({ model: "m", prompt: keyed }), s.choose)!.id).toBe("empty");
    expect(s.pools).toEqual([]);
  });

  it("falls back to pickReplicaForModel when the prefix choice has no answer", () => {
    const s = spy(() => undefined);
    const fleet = [c("a", 0, { models: ["m"] }), c("b", 3, { models: ["m"] })];
    expect(prefixAware(fleet, input({ model: "m", prompt: keyed }), s.choose)!.id).toBe("a");
    expect(s.pools).toEqual([["a", "b"]]);
  });

  it("does not ask the prefix choice without prompt keys, for a model or not", () => {
    const s = spy();
    const fleet = [c("busy", 7, { models: ["m"] }), c("idle", 0, { models: ["m"] })];
    for (const prompt of [undefined, { keys: [], blockSize: 16 }]) {
      expect(prefixAware(fleet, input({ model: "m", ...(prompt ? { prompt } : {}) }), s.choose)!.id).toBe("idle");
      expect(prefixAware(fleet, input(prompt ? { prompt } : {}), s.choose)!.id).toBe("idle");
    }
    expect(s.pools).toEqual([]);
  });

  it("shows every candidate when no model is named, and takes its answer", () => {
    const s = spy((pool) => pool[1]);
    const fleet = [c("a"), c("b", 5), c("c")];
    expect(prefixAware(fleet, input({ prompt: keyed }), s.choose)!.id).toBe("b");
    expect(s.pools).toEqual([["a", "b", "c"]]);
  });
});
