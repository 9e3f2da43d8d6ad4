/**
 * Balancers as profiles (src/policy/balancers/profile.ts): filters, weighted scorers
 * and a picker. The built-in profiles choose exactly as the balancers they replaced
 * (kept below as the reference, written as they were at d18d34c over the same pure
 * rules); the rules every profile shares (a multiplexed model's holders, the keyless
 * fallback) hold for any picker; configuration takes a profile of a deployment's own;
 * and a new picker plugs in as one plugin.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { DEFAULT_PREFIX_POLICY, defineDeployment } from "../../src/config/deployment.ts";
import {
  BALANCERS,
  FILTERS,
  FILTER_NAMES,
  PICKERS,
  PICKER_NAMES,
  createBalancer,
  profileTerms,
  runProfile,
  type BalanceInput,
  type BalancerCandidate,
  type PickerPlugin,
  type PromptKeys,
} from "../../src/policy/balancers/index.ts";
import { definePicker } from "../../src/policy/balancers/balancer.ts";
import { hasRoom, pickRandom, pickReplica, pickReplicaForModel, pickRoundRobin } from "../../src/policy/pick-replica.ts";
import { anchorKey, rendezvousOrder, underLoadBound } from "../../src/policy/prefix-score.ts";
import { RecentPrefixes, SUMMARY_VIEW_LAG_MS, keptKeys } from "../../src/policy/recent-prefixes.ts";
import { blockKeys, type BlockKey } from "../../src/prefix/block-keys.ts";
import { buildCacheSummary, CacheSummary } from "../../src/prefix/cache-summary.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

const settings = DEFAULT_PREFIX_POLICY;
const c = (id: string, load = 0, over: Partial<BalancerCandidate> = {}): BalancerCandidate => ({ id, load, capacity: 8, models: [], loading: [], ...over });
const keyed: PromptKeys = { keys: blockKeys(Array.from({ length: 64 }, (_, i) => i % 97)), blockSize: 16 };
const input = (over: Partial<BalanceInput> = {}): BalanceInput => ({ random: mulberry32(3), now: T0, ...over });

// ---- The reference: the balancers before profiles. ----
type Pick = (cands: readonly BalancerCandidate[], input: BalanceInput) => BalancerCandidate | undefined;
interface Reference {
  pick: Pick;
  served?(replica: string, input: BalanceInput): void;
}

function prefixAwareBefore(cands: readonly BalancerCandidate[], input: BalanceInput, choose: (pool: readonly BalancerCandidate[], keys: readonly BlockKey[]) => BalancerCandidate | undefined) {
  const { prompt, model, random } = input;
  const keys = prompt !== undefined && prompt.keys.length > 0 ? prompt.keys : undefined;
  if (model !== undefined) {
    const holders = keys ? cands.filter((x) => (x.models.includes(model) || x.loading.includes(model)) && hasRoom(x)) : [];
    return (holders.length > 0 && keys ? choose(holders, keys) : undefined) ?? pickReplicaForModel(cands, model, random);
  }
  return (keys ? choose(cands, keys) : undefined) ?? pickReplica(cands, random);
}
function rankedUnderLine(cands: readonly BalancerCandidate[], keys: readonly BlockKey[], epsilon: number) {
  const pool = underLoadBound(cands, epsilon);
  const room = pool.filter(hasRoom);
  return rendezvousOrder(room.length > 0 ? room : pool, anchorKey(keys)!);
}
/** The profiles that replaced a balancer (`latency` is new: test/unit/latency-choice.test.ts). */
type Replacing = Exclude<(typeof BALANCERS)[number]["name"], "latency">;
const reference: Record<Replacing, () => Reference> = {
  load_aware: () => ({ pick: (cands, { random, model }) => (model !== undefined ? pickReplicaForModel(cands, model, random) : pickReplica(cands, random)) }),
  round_robin: () => {
    let next = 0;
    return {
      pick(cands, { random, model }) {
        if (model !== undefined) return pickReplicaForModel(cands, model, random);
        if (cands.length === 0) return undefined;
        return pickRoundRobin(cands, next++);
      },
    };
  },
  random: () => ({ pick: (cands, { random, model }) => (model !== undefined ? pickReplicaForModel(cands, model, random) : pickRandom(cands, random)) }),
  prefix_hash: () => ({ pick: (cands, inp) => prefixAwareBefore(cands, inp, (pool, keys) => rankedUnderLine(pool, keys, settings.loadFactor)[0]) }),
  prefix_cache: () => {
    const recent = new RecentPrefixes();
    return {
      pick: (cands, inp) =>
        prefixAwareBefore(cands, inp, (pool, keys) => {
          const sent = recent.held(keys, inp.now);
          const ranked = rankedUnderLine(pool, keys, settings.loadFactor);
          const heldBy = (x: BalancerCandidate) => Math.max(x.cache?.matchedBlocks(keys, 16) ?? 0, sent.get(x.id) ?? 0);
          // Since 2026-12-04: a prompt no candidate holds any of goes in rendezvous order, as prefix_hash's.
          if (pool.every((x) => heldBy(x) === 0)) return ranked[0];
          let best: BalancerCandidate | undefined;
          let bestCost = Infinity;
          for (const x of ranked) {
            const held = heldBy(x);
            const cost = settings.prefillWeight * ((keys.length - Math.min(keys.length, held)) / keys.length) + (x.load + 1) / x.capacity;
            if (cost < bestCost) [best, bestCost] = [x, cost];
          }
          return best;
        }),
      served(replica, { prompt, now }) {
        if (prompt && prompt.keys.length > 0) recent.recordKept(replica, keptKeys(prompt.keys), now);
      },
    };
  },
};

// ---- Random fleets and request sequences. ----
const PROMPTS = [3, 12, 20].map((blocks, p) => blockKeys(Array.from({ length: 16 * blocks }, (_, i) => (i * (p + 3) + p) % 97)));
const replicaArb = fc.record({
  load: fc.integer({ min: 0, max: 10 }),
  capacity: fc.integer({ min: 1, max: 8 }),
  kv: fc.option(fc.double({ min: 0, max: 1, noNaN: true }), { nil: undefined }),
  models: fc.subarray(["m", "n"]),
  loading: fc.subarray(["m"]),
  cache: fc.option(fc.record({ prompt: fc.integer({ min: 0, max: 2 }), blocks: fc.integer({ min: 1, max: 20 }) }), { nil: undefined }),
});
const requestArb = fc.record({ prompt: fc.option(fc.integer({ min: 0, max: 2 }), { nil: undefined }), model: fc.option(fc.constant("m"), { nil: undefined }), seed: fc.integer() });

type ReplicaSpec = typeof replicaArb extends fc.Arbitrary<infer R> ? R : never;

function fleetOf(spec: readonly ReplicaSpec[]) {
  return spec.map((r, i) =>
    c(`r${i}`, r.load, {
      capacity: r.capacity,
      models: r.models,
      loading: r.loading,
      ...(r.kv !== undefined ? { kv: r.kv } : {}),
      ...(r.cache ? { cache: CacheSummary.parse(buildCacheSummary(PROMPTS[r.cache.prompt]!.slice(0, r.cache.blocks).reverse(), 16))! } : {}),
    }),
  );
}

describe("the built-in profiles", () => {
  it("choose exactly as the balancers before profiles did: any fleet, any sequence of requests (models only where the rule was shared)", () => {
    // The cost as it was then: the leader term (added since, test/unit/scorers.test.ts) weighed 0.
    const then = { ...settings, scorers: { leader: 0 } };
    for (const name of BALANCERS.map((b) => b.name).filter((n): n is Replacing => n !== "latency")) {
      fc.assert(
        fc.property(fc.array(replicaArb, { minLength: 0, maxLength: 8 }), fc.array(requestArb, { minLength: 1, maxLength: 12 }), (spec, requests) => {
          const fleet = fleetOf(spec);
          // prefix_cache's home filter (demand placement, issue 54) is new: the profile before it is the one compared.
          const profile = name === "prefix_cache" ? createBalancer({ filters: ["load_line", "room"], picker: "cheapest" }, then) : createBalancer(name, then);
          const before = reference[name]();
          let now = T0;
          for (const r of requests) {
            // The load-blind baselines now pick among a model's holders by their own rule (below), not by two choices.
            const model = name === "round_robin" || name === "random" ? undefined : r.model;
            const req = (): BalanceInput => ({
              random: mulberry32(r.seed),
              now,
              ...(r.prompt !== undefined ? { prompt: { keys: PROMPTS[r.prompt]!, blockSize: 16 } } : {}),
              ...(model !== undefined ? { model } : {}),
            });
            const a = profile.pick(fleet, req());
            const b = before.pick(fleet, req());
            expect(a?.id, `${name}`).toBe(b?.id);
            if (a) {
              profile.served?.(a.id, req());
              before.served?.(a.id, req());
            }
            now += 100;
          }
        }),
        { numRuns: 150 },
      );
    }
  });

  it("are lists of registered plugins, and only those with a prompt-reading stage ask for the prompt", () => {
    expect(BALANCERS.map((b) => [b.name, b.filters, b.picker])).toEqual([
      ["load_aware", ["room"], "two_choices"],
      ["round_robin", [], "round_robin"],
      ["random", [], "random"],
      ["prefix_hash", ["load_line", "room"], "rendezvous"],
      ["prefix_cache", ["load_line", "room", "home"], "cheapest"],
      ["latency", ["slo"], "cheapest"],
    ]);
    expect(FILTER_NAMES).toEqual(FILTERS.map((f) => f.name));
    expect(PICKER_NAMES).toEqual(PICKERS.map((p) => p.name));
    expect(BALANCERS.filter((b) => b.readsPrompt).map((b) => b.name)).toEqual(["prefix_hash", "prefix_cache", "latency"]);
  });

  it("load-blind baselines send a multiplexed model to its holders with room, by their own rule", () => {
    const fleet = [c("a", 0, { models: ["m"] }), c("b", 0, { models: ["m"] }), c("c", 8, { models: ["m"] }), c("d")];
    const rr = createBalancer("round_robin", settings);
    expect([1, 2, 3, 4].map(() => rr.pick(fleet, input({ model: "m" }))!.id)).toEqual(["a", "b", "a", "b"]);
  });
});

/** A picker that records the pools it was shown and answers with `answer(pool)`. */
function spy(answer: (pool: readonly BalancerCandidate[]) => BalancerCandidate | undefined = (pool) => pool.at(-1), readsPrompt = true) {
  const pools: string[][] = [];
  const picker: PickerPlugin = definePicker({
    name: "spy",
    description: "records its pools",
    readsPrompt,
    scores: false,
    create: () => (pool, ctx) => {
      if (readsPrompt) expect(ctx.keys).toBe(keyed.keys);
      pools.push(pool.map((p) => p.id));
      return pool.length === 0 ? undefined : (answer(pool) as (typeof pool)[number]);
    },
  });
  return { pools, balancer: runProfile("spy", [], picker, [], settings) };
}

describe("what every profile shares", () => {
  it("shows a multiplexed model's picker only its holders with room (loaded or loading)", () => {
    const s = spy();
    const fleet = [c("loaded", 0, { models: ["m"] }), c("loading", 0, { loading: ["m"] }), c("full", 8, { models: ["m"] }), c("other", 0, { models: ["x"] }), c("empty")];
    expect(s.balancer.pick(fleet, input({ model: "m", prompt: keyed }))!.id).toBe("loading");
    expect(s.pools).toEqual([["loaded", "loading"]]);
  });

  it("places the model by pickReplicaForModel when no holder has room, never loading a model for a prefix", () => {
    const s = spy();
    const fleet = [c("full", 8, { models: ["m"] }), c("other", 0, { models: ["x"] }), c("empty")];
    expect(s.balancer.pick(fleet, input({ model: "m", prompt: keyed }))!.id).toBe("empty");
    expect(s.pools).toEqual([]);
  });

  it("does not ask a prompt-reading picker without prompt keys (room, then two choices), for a model or not", () => {
    const s = spy();
    const fleet = [c("busy", 7, { models: ["m"] }), c("idle", 0, { models: ["m"] })];
    for (const prompt of [undefined, { keys: [], blockSize: 16 }]) {
      expect(s.balancer.pick(fleet, input({ model: "m", ...(prompt ? { prompt } : {}) }))!.id).toBe("idle");
      expect(s.balancer.pick(fleet, input(prompt ? { prompt } : {}))!.id).toBe("idle");
    }
    expect(s.pools).toEqual([]);
  });

  it("asks a picker that does not read the prompt without one", () => {
    const s = spy((pool) => pool[0], false);
    expect(s.balancer.readsPrompt).toBe(false);
    expect(s.balancer.pick([c("busy", 7), c("idle")], input())!.id).toBe("busy");
    expect(s.pools).toEqual([["busy", "idle"]]);
  });

  it("shows every candidate when no model is named, and takes the picker's answer", () => {
    const s = spy((pool) => pool[1]);
    expect(s.balancer.pick([c("a"), c("b", 5), c("c")], input({ prompt: keyed }))!.id).toBe("b");
    expect(s.pools).toEqual([["a", "b", "c"]]);
  });
});

describe("prefix_cache's memory against the replicas' own word", () => {
  it("trusts a replica's summary over its dispatches recorded well before the isolate got it (evictions show)", () => {
    const b = createBalancer("prefix_cache", settings);
    b.served!("a", input({ prompt: keyed }));
    const half = CacheSummary.parse(buildCacheSummary(keyed.keys.slice(0, 2).reverse(), 16))!;
    const none = CacheSummary.parse(buildCacheSummary([], 16))!;
    const fleet = (aSince: number) => [c("a", 0, { cache: none, cacheSince: aSince }), c("b", 0, { cache: half, cacheSince: T0 })];
    // The summary may predate the dispatch's prefill: the record still counts.
    expect(b.pick(fleet(T0 + 1_000), input({ prompt: keyed, now: T0 + 1_000 }))!.id).toBe("a");
    // Built well after it (SUMMARY_VIEW_LAG_MS): a no longer holds the prompt; b holds half of it.
    expect(b.pick(fleet(T0 + SUMMARY_VIEW_LAG_MS + 1), input({ prompt: keyed, now: T0 + SUMMARY_VIEW_LAG_MS + 1 }))!.id).toBe("b");
  });
});

describe("prefix.beliefMs: how long what the edge learnt of a cache counts", () => {
  it("a dispatch counts for beliefMs, then not; a summary counts while younger than beliefMs here", () => {
    const b = createBalancer("prefix_cache", { ...settings, beliefMs: 1_000 });
    const told: { held: number }[] = [];
    const explain = (x: { held: number }) => void told.push(x);
    b.served!("a", input({ prompt: keyed }));
    const pair = [c("a"), c("b")];
    b.pick(pair, input({ prompt: keyed, now: T0 + 999, explain }));
    b.pick(pair, input({ prompt: keyed, now: T0 + 1_000, explain }));
    expect(told.map((t) => t.held)).toEqual([4, 0]);
    const full = CacheSummary.parse(buildCacheSummary([...keyed.keys].reverse(), 16))!;
    const summarised = [c("a", 0, { cache: full, cacheSince: T0 }), c("b")];
    b.pick(summarised, input({ prompt: keyed, now: T0 + 1_000, explain }));
    b.pick(summarised, input({ prompt: keyed, now: T0 + 1_001, explain }));
    expect(told.slice(2).map((t) => t.held)).toEqual([4, 0]);
    // Unset: a dispatch counts RECENT_PREFIX_TTL_MS, a summary until the next.
    const old = createBalancer("prefix_cache", settings);
    old.served!("a", input({ prompt: keyed }));
    old.pick(pair, input({ prompt: keyed, now: T0 + 29_999, explain }));
    old.pick(summarised, input({ prompt: keyed, now: T0 + 600_000, explain }));
    expect(told.slice(4).map((t) => t.held)).toEqual([4, 4]);
  });

  it("is taken from configuration, from 100 ms to 10 min", () => {
    const minimal = { name: "b", routePrefix: "/b", backend: { kind: "text" as const, text: "hi" } };
    expect(defineDeployment({ ...minimal, policy: { balancer: "prefix_cache", prefix: { beliefMs: 1_000 } } }).policy.prefix?.beliefMs).toBe(1_000);
    for (const beliefMs of [99, 600_001, 1.5]) expect(() => defineDeployment({ ...minimal, policy: { balancer: "prefix_cache", prefix: { beliefMs } } })).toThrow(/beliefMs/);
  });
});

describe("what a prefix choice believed (BalanceInput.explain)", () => {
  it("tells the prompt's blocks, those believed held on the chosen replica and the most on any, from summaries and dispatches alike", () => {
    const b = createBalancer("prefix_cache", settings);
    const full = CacheSummary.parse(buildCacheSummary([...keyed.keys].reverse(), 16))!;
    const half = CacheSummary.parse(buildCacheSummary(keyed.keys.slice(0, 2).reverse(), 16))!;
    const told: unknown[] = [];
    const explain = (x: unknown) => void told.push(x);
    // The holder of the whole prompt is past the load line: the choice believed it held all 4 blocks, and chose one with 2.
    const fleet = [c("holder", 8, { cache: full }), c("half", 0, { cache: half }), c("none", 0)];
    expect(b.pick(fleet, input({ prompt: keyed, explain }))!.id).toBe("half");
    expect(told).toEqual([{ blocks: 4, blockSize: 16, held: 2, most: 4 }]);
    // A dispatch of this isolate counts as a summary does.
    b.served!("none", input({ prompt: keyed }));
    expect(b.pick([c("none", 0), c("half", 0, { cache: half })], input({ prompt: keyed, explain }))!.id).toBe("none");
    expect(told[1]).toEqual({ blocks: 4, blockSize: 16, held: 4, most: 4 });
  });

  it("tells nothing for a choice that did not score a prefix: no keys, a balancer that reads none", () => {
    const told: unknown[] = [];
    const explain = (x: unknown) => void told.push(x);
    createBalancer("prefix_cache", settings).pick([c("a"), c("b")], input({ explain }));
    createBalancer("load_aware", settings).pick([c("a"), c("b")], input({ prompt: keyed, explain }));
    expect(told).toEqual([]);
  });
});

describe("a profile of a deployment's own", () => {
  const minimal = { name: "own", routePrefix: "/own", backend: { kind: "text" as const, text: "hi" } };

  it("is taken from configuration in registered names, and chooses by its stages", () => {
    const d = defineDeployment({ ...minimal, policy: { balancer: { filters: ["load_line"], picker: "cheapest", scorers: { slots: 1 } } } });
    expect(d.policy.balancer).toEqual({ filters: ["load_line"], picker: "cheapest", scorers: { slots: 1 } });
    const b = createBalancer(d.policy.balancer, settings);
    expect(b.name).toBe("custom");
    expect(b.readsPrompt).toBe(true);
    // Slots alone: the emptiest replica under the line, though another holds the whole prompt.
    const fleet = [c("holder", 2, { cache: CacheSummary.parse(buildCacheSummary([...keyed.keys].reverse(), 16))! }), c("idle"), c("busy", 3)];
    expect(b.pick(fleet, input({ prompt: keyed }))!.id).toBe("idle");
    expect(createBalancer("prefix_cache", settings).pick(fleet, input({ prompt: keyed }))!.id).toBe("holder");
    // profileTerms: the profile's own weights, else prefix.scorers over the defaults.
    expect(profileTerms({ slots: 1 }, settings).map((t) => [t.name, t.weight])).toEqual([["prefill", 0], ["slots", 1], ["leader", 0], ["latency", 0], ["trip", 0]]);
    expect(profileTerms(undefined, settings).map((t) => [t.name, t.weight])).toEqual([["prefill", 2], ["slots", 1], ["leader", 0.25], ["latency", 0], ["trip", 0]]);
  });

  it("refuses names that are not registered, and scorers for a picker that does not read them", () => {
    expect(() => defineDeployment({ ...minimal, policy: { balancer: { filters: ["nearby" as never], picker: "two_choices" } } })).toThrow(/filters/);
    expect(() => defineDeployment({ ...minimal, policy: { balancer: { filters: [], picker: "fastest" as never } } })).toThrow(/picker/);
    expect(() => defineDeployment({ ...minimal, policy: { balancer: { filters: [], picker: "two_choices", scorers: { slots: 1 } } } })).toThrow(/cheapest/);
    expect(() => defineDeployment({ ...minimal, policy: { balancer: "fastest" as never } })).toThrow();
  });

  it("takes a new picker as one plugin: the least loaded, a picker the registry does not have", () => {
    const leastLoaded = definePicker({
      name: "least_loaded",
      description: "the fewest requests in flight",
      readsPrompt: false,
      scores: false,
      create: () => (pool) => [...pool].sort((x, y) => x.load - y.load)[0],
    });
    const b = runProfile("mine", [FILTERS[0]], leastLoaded, [], settings);
    expect(b.pick([c("a", 5), c("b", 2), c("full", 8, { capacity: 1 })], input())!.id).toBe("b");
  });
});
