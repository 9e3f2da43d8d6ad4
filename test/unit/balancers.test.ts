/** The balancer registry (src/policy/balancers/) and each registered balancer's choice. */
import { describe, it, expect, expectTypeOf } from "vitest";
import { DEFAULT_PREFIX_POLICY, defineDeployment, type Deployment, type DeploymentInput } from "../../src/config/deployment.ts";
import { BALANCERS, BALANCER_NAMES, balancerProfile, createBalancer, type BalanceInput, type BalancerCandidate, type BalancerName } from "../../src/policy/balancers/index.ts";
import { blockKeys, type BlockKey } from "../../src/prefix/block-keys.ts";
import { buildCacheSummary, CacheSummary } from "../../src/prefix/cache-summary.ts";
import { anchorKey, rendezvousOrder } from "../../src/policy/prefix-score.ts";
import { keptKeys } from "../../src/policy/recent-prefixes.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

const settings = DEFAULT_PREFIX_POLICY;
const minimal: DeploymentInput = { name: "b", routePrefix: "/b", backend: { kind: "text", text: "hi" } };

const c = (id: string, load = 0, over: Partial<BalancerCandidate> = {}): BalancerCandidate => ({ id, load, capacity: 8, models: [], loading: [], ...over });
const fleet = () => ["r0", "r1", "r2", "r3"].map((id) => c(id));
const tokens = (n: number, seed: number) => {
  const rnd = mulberry32(seed);
  return Array.from({ length: n }, () => Math.floor(rnd() * 97));
};
const input = (over: Partial<BalanceInput> = {}): BalanceInput => ({ random: mulberry32(7), now: T0, ...over });
const prompt = (keys: BlockKey[]) => ({ keys, blockSize: 16 });
const summaryOf = (keys: BlockKey[]) => CacheSummary.parse(buildCacheSummary([...keys].reverse(), 16))!;

describe("the registry", () => {
  it("lists every plugin once, under the name it declares, load_aware first (the default)", () => {
    expect(BALANCER_NAMES).toEqual(BALANCERS.map((b) => b.name));
    expect(new Set(BALANCER_NAMES).size).toBe(BALANCER_NAMES.length);
    expect(BALANCER_NAMES[0]).toBe("load_aware");
    expect([...BALANCER_NAMES].sort()).toEqual(["latency", "load_aware", "prefix_cache", "prefix_hash", "random", "round_robin"]);
    for (const name of BALANCER_NAMES) expect(balancerProfile(name).name).toBe(name);
  });

  it("is where policy.balancer's names come from: the config accepts exactly the registered ones", () => {
    expectTypeOf<BalancerName>().toExtend<NonNullable<NonNullable<DeploymentInput["policy"]>["balancer"]>>();
    expectTypeOf<Extract<Deployment["policy"]["balancer"], string>>().toEqualTypeOf<BalancerName>();
    for (const balancer of BALANCER_NAMES) expect(defineDeployment({ ...minimal, policy: { balancer } }).policy.balancer).toBe(balancer);
    expect(() => defineDeployment({ ...minimal, policy: { balancer: "least_latency" as BalancerName } })).toThrow(/balancer/);
    expect(defineDeployment(minimal).policy.balancer).toBe("load_aware");
  });

  it("asks for the prompt only for the prefix balancers and the latency one (its prefill term)", () => {
    expect(BALANCERS.filter((b) => b.readsPrompt).map((b) => b.name)).toEqual(["prefix_hash", "prefix_cache", "latency"]);
    for (const name of BALANCER_NAMES) expect(createBalancer(name, settings).readsPrompt).toBe(balancerProfile(name).readsPrompt);
  });

  it("gives each instance its own state", () => {
    const a = createBalancer("round_robin", settings);
    const b = createBalancer("round_robin", settings);
    const f = fleet();
    expect([0, 1, 2].map(() => a.pick(f, input())!.id)).toEqual(["r0", "r1", "r2"]);
    // A second isolate (or deployment) starts its own turn.
    expect(b.pick(f, input())!.id).toBe("r0");
    expect(a.pick(f, input())!.id).toBe("r3");
  });

  it("every balancer returns undefined only for no candidates, and one of them otherwise", () => {
    const f = fleet();
    for (const name of BALANCER_NAMES) {
      const b = createBalancer(name, settings);
      expect(b.pick([], input()), name).toBeUndefined();
      expect(f, name).toContain(b.pick(f, input({ prompt: prompt(blockKeys(tokens(64, 1))) })));
      expect(f, name).toContain(b.pick(f, input()));
    }
  });
});

describe("load_aware, round_robin, random", () => {
  it("load_aware avoids the loaded replica of two", () => {
    const b = createBalancer("load_aware", settings);
    for (let i = 0; i < 20; i++) expect(b.pick([c("busy", 7), c("idle", 0)], input({ random: mulberry32(i) }))!.id).toBe("idle");
  });

  it("round_robin skips no one and ignores load", () => {
    const b = createBalancer("round_robin", settings);
    const f = [c("a", 8), c("b"), c("c")];
    expect([0, 1, 2, 3].map(() => b.pick(f, input())!.id)).toEqual(["a", "b", "c", "a"]);
  });

  it("random draws from the input's randomness", () => {
    const b = createBalancer("random", settings);
    expect(b.pick(fleet(), input({ random: () => 0.99 }))!.id).toBe("r3");
    expect(b.pick(fleet(), input({ random: () => 0 }))!.id).toBe("r0");
  });

  it("all three send a multiplexed model to a replica that holds it", () => {
    const f = [c("a"), c("b", 0, { models: ["m"] }), c("c")];
    for (const name of ["load_aware", "round_robin", "random"] as const) {
      const b = createBalancer(name, settings);
      for (let i = 0; i < 5; i++) expect(b.pick(f, input({ model: "m", random: mulberry32(i) }))!.id, name).toBe("b");
    }
  });
});

describe("prefix_hash", () => {
  const shared = tokens(16 * 20, 3);

  it("sends prompts sharing a long prefix to one replica, from independent instances (isolates)", () => {
    const a = createBalancer("prefix_hash", settings);
    const b = createBalancer("prefix_hash", settings);
    const first = a.pick(fleet(), input({ prompt: prompt(blockKeys([...shared, ...tokens(200, 4)])) }))!;
    for (let s = 0; s < 10; s++) {
      const keys = blockKeys([...shared, ...tokens(100 + s, 10 + s)]);
      expect(a.pick(fleet(), input({ prompt: prompt(keys) }))!.id).toBe(first.id);
      expect(b.pick([...fleet()].reverse(), input({ prompt: prompt(keys) }))!.id).toBe(first.id);
    }
  });

  it("spills a hot prefix past the bounded-load line to the next replica in its order", () => {
    const b = createBalancer("prefix_hash", settings);
    const keys = blockKeys(shared);
    const home = b.pick(fleet(), input({ prompt: prompt(keys) }))!.id;
    const hot = fleet().map((r) => (r.id === home ? { ...r, load: 6 } : r));
    expect(b.pick(hot, input({ prompt: prompt(keys) }))!.id).not.toBe(home);
  });

  it("uses the settings' load factor", () => {
    const keys = blockKeys(shared);
    const home = rendezvousOrder(fleet(), anchorKey(keys)!)[0]!.id;
    const warm = fleet().map((r) => (r.id === home ? { ...r, load: 2 } : r));
    // Fullness with the request: 3/8, against a line of (1 + ε) × the mean (1.5/8) plus one request of slack (1/8):
    // above it at ε 0.25 (2.875/8), under it at the default ε 1 (4/8) and at ε 2 (5.5/8).
    expect(createBalancer("prefix_hash", { ...settings, loadFactor: 0.25 }).pick(warm, input({ prompt: prompt(keys) }))!.id).not.toBe(home);
    expect(settings.loadFactor).toBe(1);
    expect(createBalancer("prefix_hash", settings).pick(warm, input({ prompt: prompt(keys) }))!.id).toBe(home);
    expect(createBalancer("prefix_hash", { ...settings, loadFactor: 2 }).pick(warm, input({ prompt: prompt(keys) }))!.id).toBe(home);
  });

  it("chooses as load_aware when the request has no prompt keys", () => {
    const b = createBalancer("prefix_hash", settings);
    for (const p of [undefined, prompt([])]) {
      for (let i = 0; i < 20; i++) expect(b.pick([c("busy", 7), c("idle", 0)], input({ random: mulberry32(i), ...(p ? { prompt: p } : {}) }))!.id).toBe("idle");
    }
  });

  it("chooses by prefix among a multiplexed model's holders with room, and never loads a model for a prefix", () => {
    const b = createBalancer("prefix_hash", settings);
    const keys = blockKeys(shared);
    const holders = [c("h1", 0, { models: ["m"] }), c("h2", 0, { loading: ["m"] })];
    const f = [...holders, c("x"), c("y")];
    const home = rendezvousOrder(holders, anchorKey(keys)!)[0]!.id;
    for (let i = 0; i < 5; i++) expect(b.pick(f, input({ model: "m", prompt: prompt(keys), random: mulberry32(i) }))!.id).toBe(home);
    // Every holder full: the model goes where pickReplicaForModel puts it (an empty replica), prefix or not.
    const full = [c("h1", 8, { models: ["m"] }), c("x", 0, { models: ["a"] }), c("y")];
    expect(b.pick(full, input({ model: "m", prompt: prompt(keys) }))!.id).toBe("y");
  });
});

describe("prefix_cache", () => {
  const shared = tokens(16 * 40, 5);
  const keysA = blockKeys([...shared, ...tokens(160, 6)]);

  it("prefers the replica whose reported cache holds the prompt over the rendezvous home", () => {
    const b = createBalancer("prefix_cache", settings);
    const home = rendezvousOrder(fleet(), anchorKey(keysA)!)[0]!.id;
    const other = fleet().find((r) => r.id !== home)!.id;
    const f = fleet().map((r) => (r.id === other ? { ...r, cache: summaryOf(keysA) } : r));
    expect(b.pick(f, input({ prompt: prompt(keysA) }))!.id).toBe(other);
    // Keys made with another block size never match a summary (tokens differ).
    expect(b.pick(f, input({ prompt: { keys: keysA, blockSize: 64 } }))!.id).toBe(home);
  });

  it("remembers where it sent a prefix: a prompt sharing it follows, before any report says so", () => {
    const b = createBalancer("prefix_cache", settings);
    const home = rendezvousOrder(fleet(), anchorKey(keysA)!)[0]!.id;
    const other = fleet().find((r) => r.id !== home)!.id;
    // The first request went to `other` (say the home was full then) and was served there.
    b.served!(other, input({ prompt: prompt(keysA) }));
    const keysB = blockKeys([...shared, ...tokens(320, 7)]);
    expect(b.pick(fleet(), input({ prompt: prompt(keysB) }))!.id).toBe(other);
    // Another instance (isolate) has no such memory: it goes home.
    expect(createBalancer("prefix_cache", settings).pick(fleet(), input({ prompt: prompt(keysB) }))!.id).toBe(home);
    // Forgotten after the TTL.
    expect(b.pick(fleet(), input({ prompt: prompt(keysB), now: T0 + 60_000 }))!.id).toBe(home);
  });

  it("weighs what is held against load: a cached replica that is much fuller loses at a low prefill weight", () => {
    const home = rendezvousOrder(fleet(), anchorKey(keysA)!)[0]!.id;
    const other = fleet().find((r) => r.id !== home)!.id;
    const f = fleet().map((r) => (r.id === other ? { ...r, load: 1, cache: summaryOf(keysA) } : r));
    expect(createBalancer("prefix_cache", settings).pick(f, input({ prompt: prompt(keysA) }))!.id).toBe(other);
    // Prefill alone at 0.1 (the leader term, which pulls toward the holder too, weighed 0).
    expect(createBalancer("prefix_cache", { ...settings, prefillWeight: 0.1, scorers: { leader: 0 } }).pick(f, input({ prompt: prompt(keysA) }))!.id).not.toBe(other);
  });

  it("tells its peers where it sent a prefix, once per replica and prompt, after the first take", () => {
    const a = createBalancer("prefix_cache", settings);
    // Before the first take (no relay asked yet), nothing is kept for peers.
    a.served!("r1", input({ prompt: prompt(keysA) }));
    expect(a.shareDispatches!()).toEqual([]);
    a.served!("r1", input({ prompt: prompt(keysA) }));
    a.served!("r1", input({ prompt: prompt(keysA) }));
    a.served!("r2", input({ prompt: prompt(keysA) }));
    const notes = a.shareDispatches!();
    expect(notes.map((n) => n.r)).toEqual(["r1", "r2"]);
    expect(notes[0]!.k).toEqual(keptKeys(keysA));
    expect(a.shareDispatches!()).toEqual([]);
  });

  it("learns a peer's dispatch: the next turn through another isolate follows its history", () => {
    const home = rendezvousOrder(fleet(), anchorKey(keysA)!)[0]!.id;
    const other = fleet().find((r) => r.id !== home)!.id;
    const a = createBalancer("prefix_cache", settings);
    const b = createBalancer("prefix_cache", settings);
    a.shareDispatches!();
    a.served!(other, input({ prompt: prompt(keysA) }));
    const nextTurn = blockKeys([...shared, ...tokens(160, 6), ...tokens(200, 8)]);
    expect(b.pick(fleet(), input({ prompt: prompt(nextTurn) }))!.id).toBe(home);
    b.learnDispatches!(a.shareDispatches!(), T0);
    expect(b.pick(fleet(), input({ prompt: prompt(nextTurn) }))!.id).toBe(other);
    // What b learned is not told on again (only its own dispatches are).
    expect(b.shareDispatches!()).toEqual([]);
  });

  it("chooses as load_aware without prompt keys, and learns nothing from them", () => {
    const b = createBalancer("prefix_cache", settings);
    b.served!("busy", input());
    for (let i = 0; i < 20; i++) expect(b.pick([c("busy", 7), c("idle", 0)], input({ random: mulberry32(i) }))!.id).toBe("idle");
  });
});
