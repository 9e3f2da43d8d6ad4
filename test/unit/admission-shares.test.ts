/**
 * Admission across isolates (src/policy/admission-shares.ts): the relay's budgets from
 * the isolates' demand by band. Capacity goes to the highest band first, then in
 * proportion to each isolate's demand in a band; nobody is held back while the
 * location's demand fits.
 */
import { describe, expect, it } from "vitest";
import { AdmissionShares, HEADROOM_WINDOW_MS, SHARE_POST_TTL_MS, flowLevels } from "../../src/policy/admission-shares.ts";
import { AdmissionGate, BUDGET_TTL_MS, flowKey, freeSlots } from "../../src/proxy/serve/admit.ts";
import { defineDeployment } from "../../src/config/deployment.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { T0 } from "../fixtures/clock.ts";

describe("AdmissionShares", () => {
  it("gives no budget while the location's demand fits in the capacity", () => {
    const s = new AdmissionShares();
    s.post(1, [[0, 3]], T0);
    s.post(2, [[0, 5]], T0);
    expect(s.budget(1, 8, T0)).toBeUndefined();
    expect(s.budget(2, 8, T0)).toBeUndefined();
  });

  it("splits a band's capacity in proportion to demand, and serves higher bands first", () => {
    const s = new AdmissionShares();
    s.post(1, [[0, 30]], T0); // a batch flood through isolate 1
    s.post(2, [[0, 10]], T0);
    expect(s.budget(1, 8, T0)).toBe(6);
    expect(s.budget(2, 8, T0)).toBe(2);
    // A critical request arrives at isolate 3: it gets its slot first, the standard bands shrink.
    s.post(3, [[1, 1]], T0);
    expect(s.budget(3, 8, T0)).toBe(1);
    expect(s.budget(1, 8, T0)).toBe(5); // 7 · 30/40 = 5.25
    expect(s.budget(2, 8, T0)).toBe(2); // 7 · 10/40 = 1.75
  });

  it("gives 0 to an isolate whose only demand is in a band that higher ones fill, and at least 1 to any share", () => {
    const s = new AdmissionShares();
    s.post(1, [[1, 8]], T0);
    s.post(2, [[-1, 5]], T0);
    expect(s.budget(1, 8, T0)).toBe(8);
    expect(s.budget(2, 8, T0)).toBe(0);
    s.post(3, [[0, 1000]], T0);
    s.post(4, [[0, 1]], T0);
    expect(s.budget(4, 9, T0)).toBe(1); // 1 · 1/1001, rounded up to one request
  });

  it("forgets an isolate that stopped posting, and one that posts no demand", () => {
    const s = new AdmissionShares();
    s.post(1, [[0, 20]], T0);
    s.post(2, [[0, 20]], T0);
    expect(s.budget(2, 8, T0)).toBe(4);
    expect(s.budget(2, 8, T0 + SHARE_POST_TTL_MS + 1)).toBeUndefined(); // both stale: no demand at all
    s.post(2, [[0, 20]], T0 + SHARE_POST_TTL_MS + 1);
    expect(s.active(T0 + SHARE_POST_TTL_MS + 1)).toBe(1);
    s.post(2, [], T0 + SHARE_POST_TTL_MS + 2);
    expect(s.active(T0 + SHARE_POST_TTL_MS + 2)).toBe(0);
  });
});

describe("AdmissionShares by flow", () => {
  // The bench's fairness case: flows a, b, c of 2 clients and d of 20, spread evenly over 4 isolates, 8 slots.
  const spread = (s: AdmissionShares, at = T0) => {
    for (let i = 1; i <= 4; i++) {
      const flows: [number, string, number][] = [[0, "aaaaaaaaaaaaaaaa", i <= 2 ? 1 : 0], [0, "bbbbbbbbbbbbbbbb", i >= 3 ? 1 : 0], [0, "cccccccccccccccc", i % 2 === 0 ? 1 : 0], [0, "dddddddddddddddd", 5]];
      s.post(i, [[0, flows.reduce((n, f) => n + f[2], 0)]], at, flows);
    }
  };

  it("splits a band max-min over the flows summed across the isolates, and caps the flow that asks more than its share", () => {
    const s = new AdmissionShares();
    spread(s);
    // Level 2: a, b, c get their 2 each; d's 20 are capped at 2 in all: half a request per
    // isolate (each runs one request half the time), in proportion to its part of d's demand.
    const all = [1, 2, 3, 4].map((i) => s.allot(i, 8, T0)!);
    expect(all.map((a) => a.flowCaps!.dddddddddddddddd)).toEqual([0.5, 0.5, 0.5, 0.5]);
    // Each budget is its small flows' demand plus its cap of d, rounded: 2.5 → 3 or 3, 2.5 → 2 or 3.
    expect(all.reduce((n, a) => n + a.max, 0)).toBeGreaterThanOrEqual(8);
    // Uneven demand: d's share goes in proportion (6 and 4 of its 20 → 0.6 and 0.4 of 2).
    s.post(1, [[0, 7]], T0, [[0, "aaaaaaaaaaaaaaaa", 1], [0, "dddddddddddddddd", 6]]);
    s.post(2, [[0, 6]], T0, [[0, "aaaaaaaaaaaaaaaa", 1], [0, "cccccccccccccccc", 1], [0, "dddddddddddddddd", 4]]);
    expect(s.allot(1, 8, T0)!.flowCaps).toEqual({ dddddddddddddddd: 0.6 });
    expect(s.allot(2, 8, T0)!.flowCaps).toEqual({ dddddddddddddddd: 0.4 });
  });

  it("caps a flow more than one request over the level, even by half a request (issue 51: the tolerance is one request)", () => {
    const s = new AdmissionShares();
    // Demands 1, 4 and 4 over 6 slots: the level is 2.5; the flows of 4 are 1.5 over it.
    s.post(1, [[0, 9]], T0, [[0, "aaaaaaaaaaaaaaaa", 1], [0, "bbbbbbbbbbbbbbbb", 4], [0, "cccccccccccccccc", 4]]);
    const caps = s.allot(1, 6, T0)!.flowCaps!;
    expect(caps).toEqual({ bbbbbbbbbbbbbbbb: 2.5, cccccccccccccccc: 2.5 });
  });

  it("splits between clients first, then between a client's flows (a key's first 8 digits are its client's): naming many flows takes one client's share (issue 50)", () => {
    const s = new AdmissionShares();
    // A victim's one flow asks 10; an attacker's ten flows (one client) ask 10 each; 4 slots.
    const victim: [number, string, number] = [0, `${"v".repeat(8)}00000000`, 10];
    const attacker = Array.from({ length: 10 }, (_, i): [number, string, number] => [0, `${"a".repeat(8)}${String(i).padStart(8, "0")}`, 10]);
    s.post(1, [[0, 10]], T0, [victim]);
    s.post(2, [[0, 100]], T0, attacker);
    // Two clients, 2 slots each: the victim's flow is capped at 2; the attacker's ten flows share 2 (0.2 each).
    const mine = s.allot(1, 4, T0)!;
    expect(mine.max).toBe(2);
    expect(mine.flowCaps![victim[1]]).toBe(2);
    const caps = s.allot(2, 4, T0)!.flowCaps!;
    for (const [, key] of attacker) expect(caps[key]).toBeCloseTo(0.2, 5);
    // Flat, the ten flows would have taken 10 of 11 shares.
    expect(flowLevels(new Map([[victim[1], 10], ...attacker.map(([, k, n]) => [k, n] as const)]), 4, (k) => k.slice(0, 8)).get(victim[1])).toBe(2);
  });

  it("flowLevels: one flow per client is waterLevel's one level; a client's flows share its part max-min", () => {
    const one = flowLevels(new Map([["a", 1], ["b", 5], ["c", 9]]), 9, (k) => k);
    expect([...one.values()]).toEqual([4, 4, 4]);
    // Client x (flows x1: 1, x2: 9) and client y (9), 8 slots: 4 each; x's 4 split 1 and 3.
    const two = flowLevels(new Map([["x1", 1], ["x2", 9], ["y1", 9]]), 8, (k) => k[0]!);
    expect(two.get("y1")).toBe(4);
    expect(two.get("x2")).toBe(3);
    expect(Math.min(1, two.get("x1")!)).toBe(1);
    // All fit: no level binds.
    expect([...flowLevels(new Map([["a", 1], ["b", 2]]), 10, (k) => k).values()]).toEqual([Infinity, Infinity]);
  });

  it("sets the level from each flow's recent peak, so a client between two requests does not raise the capped flows' caps", () => {
    const s = new AdmissionShares();
    spread(s);
    s.allot(1, 8, T0); // each ask notes the flows' peaks
    // A client of a ended its request in isolate 1; its next is not posted yet: a looks like 1.
    s.post(1, [[0, 5]], T0 + 100, [[0, "dddddddddddddddd", 5]]);
    const caps = [1, 2, 3, 4].map((i) => s.allot(i, 8, T0 + 100)!.flowCaps!.dddddddddddddddd!);
    expect(caps.reduce((a, b) => a + b, 0)).toBeCloseTo(2, 2); // not 3
    // Past two windows without it, the dip is real: d's share grows to what a leaves.
    const later = T0 + 3 * HEADROOM_WINDOW_MS;
    spread(s, later);
    s.post(1, [[0, 5]], later, [[0, "dddddddddddddddd", 5]]);
    s.allot(1, 8, later);
    s.post(1, [[0, 5]], later + 2 * HEADROOM_WINDOW_MS, [[0, "dddddddddddddddd", 5]]);
    for (const i of [2, 3, 4]) s.post(i, [[0, 6]], later + 2 * HEADROOM_WINDOW_MS, [[0, "aaaaaaaaaaaaaaaa", 0], [0, "bbbbbbbbbbbbbbbb", i >= 3 ? 1 : 0], [0, "cccccccccccccccc", i % 2 === 0 ? 1 : 0], [0, "dddddddddddddddd", 5]]);
    const after = [1, 2, 3, 4].map((i) => s.allot(i, 8, later + 2 * HEADROOM_WINDOW_MS)!.flowCaps?.dddddddddddddddd ?? 0);
    expect(after.reduce((a, b) => a + b, 0)).toBeCloseTo(4, 2); // 8 − b's 2 − c's 2
  });

  it("does not cap a flow within one request of the level", () => {
    const s = new AdmissionShares();
    s.post(1, [[0, 23]], T0, [[0, "aaaaaaaaaaaaaaaa", 3], [0, "dddddddddddddddd", 20]]);
    s.post(2, [[0, 4]], T0, [[0, "bbbbbbbbbbbbbbbb", 2], [0, "cccccccccccccccc", 2]]);
    // Level 2: a's 3 may be a request counted twice by posts 250 ms apart; d's 20 is capped.
    expect(s.allot(1, 8, T0)!.flowCaps).toEqual({ dddddddddddddddd: 2 });
  });

  it("falls back to shares by isolate demand when an isolate with demand in the band sent no flows", () => {
    const s = new AdmissionShares();
    spread(s);
    s.post(5, [[0, 10]], T0); // an isolate of an older version: bands only
    const a = s.allot(1, 8, T0)!;
    expect(a.flowCaps).toBeUndefined();
    expect(a.max).toBe(Math.round((8 * 7) / 38)); // proportional: 7 of the 38 asked
  });

  it("caps no flow in a band that higher bands leave whole", () => {
    const s = new AdmissionShares();
    s.post(1, [[1, 2], [0, 20]], T0, [[1, "aaaaaaaaaaaaaaaa", 2], [0, "dddddddddddddddd", 20]]);
    s.post(2, [[0, 20]], T0, [[0, "eeeeeeeeeeeeeeee", 20]]);
    const a = s.allot(1, 8, T0)!;
    // Band 1 gets its 2 in full (no cap there); band 0's 6 go 3 and 3 between d and e
    // (each is capped at 0 where it has no request: see the next test).
    expect(a.flowCaps).toEqual({ dddddddddddddddd: 3, eeeeeeeeeeeeeeee: 0 });
    expect(a.max).toBe(5);
    expect(s.allot(2, 8, T0)).toEqual({ max: 3, flowCaps: { eeeeeeeeeeeeeeee: 3, dddddddddddddddd: 0 }, openFrom: 1 });
  });

  it("caps a flow over its share even in an isolate where it has no request now, and answers an isolate with no demand", () => {
    const s = new AdmissionShares();
    spread(s);
    // Isolate 1 has no request of d at the moment: uncapped, d's next request there would
    // go at once, end before the next post showed it, and so never be capped there.
    s.post(1, [[0, 1]], T0, [[0, "aaaaaaaaaaaaaaaa", 1]]);
    expect(s.allot(1, 8, T0)!.flowCaps).toMatchObject({ dddddddddddddddd: 0 });
    // An isolate that posted nothing (idle) still gets the caps while the band is short.
    expect(s.allot(9, 8, T0)).toEqual({ max: 0, flowCaps: { dddddddddddddddd: 0 }, openFrom: 1 });
    // While demand fits, nobody gets a budget, posted or not.
    const fits = new AdmissionShares();
    fits.post(1, [[0, 3]], T0, [[0, "aaaaaaaaaaaaaaaa", 3]]);
    expect(fits.allot(9, 8, T0)).toBeUndefined();
  });
});

describe("AdmissionShares headroom", () => {
  it("keeps a higher band's recent peak from the bands below, and says which bands the budget leaves open", () => {
    const s = new AdmissionShares();
    const at = HEADROOM_WINDOW_MS * 100; // the start of a window
    s.post(1, [[0, 20]], at); // a batch flood
    s.post(2, [[1, 2]], at); // two interactive requests in flight
    expect(s.allot(1, 8, at)).toEqual({ max: 6, openFrom: 1 });
    expect(s.allot(2, 8, at)).toEqual({ max: 2, openFrom: 1 });
    // They end; the batch asks more. The band keeps its headroom for its next requests.
    s.post(2, [], at + 100);
    s.post(1, [[0, 24]], at + 100);
    expect(s.allot(1, 8, at + 100)).toEqual({ max: 6, openFrom: 1 });
    // Still within the next window...
    s.post(1, [[0, 24]], at + HEADROOM_WINDOW_MS + 100);
    expect(s.allot(1, 8, at + HEADROOM_WINDOW_MS + 100)?.max).toBe(6);
    // ...and gone two windows later: the batch takes every slot (a critical request that
    // comes now is still not held to the budget: it waits only for a slot to free).
    s.post(1, [[0, 24]], at + 2 * HEADROOM_WINDOW_MS + 100);
    expect(s.allot(1, 8, at + 2 * HEADROOM_WINDOW_MS + 100)).toEqual({ max: 8, openFrom: 1 });
  });

  it("applies headroom even while the location's demand fits the slots, and none when nothing is short", () => {
    const s = new AdmissionShares();
    const at = HEADROOM_WINDOW_MS * 100;
    s.post(1, [[1, 3]], at);
    s.post(2, [[0, 4]], at);
    expect(s.allot(2, 8, at)).toBeUndefined(); // 3 + 4 fit in 8
    s.post(1, [[1, 1]], at + 10);
    s.post(2, [[0, 6]], at + 10);
    // 1 + 6 fit, but the critical band's peak is 3: standard gets 5.
    expect(s.allot(2, 8, at + 10)).toEqual({ max: 5, openFrom: 1 });
    // The highest band short: only bands above it (none ask yet) are open.
    s.post(1, [[1, 12]], at + 20);
    expect(s.allot(1, 8, at + 20)).toEqual({ max: 8, openFrom: 2 });
  });
});

describe("AdmissionGate under a budget", () => {
  const d = defineDeployment({ name: "d", routePrefix: "/d", backend: { kind: "echo" }, policy: { requestTimeoutMs: 60_000 }, admission: { maxWaitMs: 60_000 } });
  const view = () => {
    const v = new RoutingView();
    v.applySnapshot({ deployment: "d", replicas: [{ id: "r0", url: "http://r0.test", epoch: 1, models: [], loading: [], expiresInMs: 600_000, load: { seq: 1, ongoing: 0, queued: 0, max: 4, state: "ready" } }] }, Date.now());
    return v;
  };
  const ticket = () => ({ priority: 0, flow: "f", deadline: Date.now() + 60_000, refresh: async () => undefined });

  it("holds a request over its budget though its view shows free slots, and lets it go when the budget grows", async () => {
    const gate = new AdmissionGate();
    const v = view();
    expect((await gate.enter(d, v, ticket())).outcome).toBe("go");
    gate.started(0, "f");
    gate.setBudget(1);
    let outcome: string | undefined;
    const held = gate.enter(d, v, ticket()).then((a) => (outcome = a.outcome));
    await Promise.resolve();
    expect(gate.held).toBe(1);
    expect(gate.demand()).toEqual({ bands: [[0, 2]], held: 1, flows: [[0, flowKey("f"), 2]] }); // one in flight, one held
    gate.setBudget(2);
    gate.pump();
    await held;
    expect(outcome).toBe("go");
  });

  it("keeps to a budget only while it is fresh: past BUDGET_TTL_MS without a new one, held requests go (issue 51)", async () => {
    let now = Date.now();
    const gate = new AdmissionGate(() => now);
    const v = view();
    expect((await gate.enter(d, v, ticket())).outcome).toBe("go");
    gate.started(0, "f");
    gate.setBudget(1);
    const held = gate.enter(d, v, ticket());
    await Promise.resolve();
    expect(gate.held).toBe(1);
    // Just within the TTL: still kept to it.
    now += BUDGET_TTL_MS;
    gate.pump();
    await Promise.resolve();
    expect(gate.held).toBe(1);
    // Past it: the relay is gone or idle, and a budget it no longer renews applies no more.
    now += 1;
    gate.pump();
    expect(gate.held).toBe(0);
    expect((await held).outcome).toBe("go");
  });

  it("lets its own completion refill its slot only while under budget", async () => {
    const gate = new AdmissionGate();
    const v = view();
    for (let i = 0; i < 2; i++) {
      expect((await gate.enter(d, v, ticket())).outcome).toBe("go");
      gate.started(0, "f");
    }
    gate.setBudget(1); // the relay gave the others this isolate's share
    const held = gate.enter(d, v, ticket());
    await Promise.resolve();
    gate.ended(0, "f");
    gate.pump();
    await Promise.resolve();
    expect(gate.held).toBe(1); // 1 in flight = its budget: the freed slot is left for others
    gate.ended(0, "f");
    gate.pump();
    expect((await held).outcome).toBe("go");
    expect(gate.demand()).toBeUndefined();
  });

  it("lets a held request go on a slot its own request freed, though the view still counts it full", async () => {
    const gate = new AdmissionGate();
    const v = new RoutingView();
    // Our request runs on a one-slot replica, and the report counts it.
    v.applySnapshot({ deployment: "d", replicas: [{ id: "r0", url: "http://r0.test", epoch: 1, models: [], loading: [], expiresInMs: 600_000, load: { seq: 1, ongoing: 1, queued: 0, max: 1, state: "ready" } }] }, Date.now());
    v.startDispatch(v.get("r0")!);
    gate.started(0, "f");
    const held = gate.enter(d, v, ticket());
    await Promise.resolve();
    expect(gate.held).toBe(1); // our own request fills the replica: held, not sent to be refused
    // Our request ends. The view cannot know whose request the report counted: still full.
    v.endDispatch(v.get("r0")!);
    gate.ended(0, "f");
    expect(freeSlots(v, Date.now())).toBe(0);
    gate.pump();
    expect((await held).outcome).toBe("go");
  });

  it("sends a request to ask the replicas when only other isolates' reported load fills them and nobody waits here", async () => {
    const gate = new AdmissionGate();
    const v = new RoutingView();
    v.applySnapshot({ deployment: "d", replicas: [{ id: "r0", url: "http://r0.test", epoch: 1, models: [], loading: [], expiresInMs: 600_000, load: { seq: 1, ongoing: 2, queued: 0, max: 2, state: "ready" } }] }, Date.now());
    expect(freeSlots(v, Date.now())).toBe(0);
    expect(await gate.enter(d, v, ticket())).toEqual({ outcome: "go", queued: false });
  });

  it("splits its budget max-min fairly between its flows: a heavy flow at its share waits while a light one goes", async () => {
    const gate = new AdmissionGate();
    const v = view(); // one replica, 4 slots
    const t = (flow: string) => ({ ...ticket(), flow });
    const outcomes: Record<string, string> = {};
    const enter = (name: string, flow: string) => gate.enter(d, v, t(flow)).then((a) => (outcomes[name] = a.outcome));
    for (const flow of ["heavy", "heavy", "light"]) {
      expect((await gate.enter(d, v, t(flow))).outcome).toBe("go");
      gate.started(0, flow);
    }
    gate.setBudget(3); // at its budget: what comes now is held
    const light = enter("light", "light");
    const heavy = enter("heavy", "heavy");
    await Promise.resolve();
    expect(gate.held).toBe(2);
    // One more slot. Demand: heavy 3, light 2; an even split of 4 is 2 each: heavy (2 in flight) is at its share.
    gate.setBudget(4);
    gate.pump();
    await light;
    expect(outcomes).toEqual({ light: "go" });
    gate.dispatching();
    gate.started(0, "light");
    // Another: light has its 2; heavy's share is the rest, 3.
    gate.setBudget(5);
    gate.pump();
    await heavy;
    expect(outcomes).toEqual({ light: "go", heavy: "go" });
  });

  it("splits its budget between clients before their flows: a client's many flows share one client's part (issue 50)", async () => {
    const gate = new AdmissionGate();
    const v = view(); // one replica, 4 slots
    const t = (flow: string) => ({ ...ticket(), flow });
    const outcomes: Record<string, string> = {};
    // The attacker's two requests run, each in a flow of its own naming; the victim's one runs.
    for (const flow of ["attacker\u0000x1", "attacker\u0000x2", "victim"]) {
      expect((await gate.enter(d, v, t(flow))).outcome).toBe("go");
      gate.started(0, flow);
    }
    gate.setBudget(3);
    const victim = gate.enter(d, v, t("victim")).then((a) => (outcomes.victim = a.outcome));
    const attacker = gate.enter(d, v, t("attacker\u0000x3")).then((a) => (outcomes.attacker = a.outcome));
    await Promise.resolve();
    expect(gate.held).toBe(2);
    // One more slot. By client: attacker 3, victim 2; an even split of 4 is 2 each: the attacker is at its share
    // (flat, its three flows of one request each would each have been under a share of 4 / 4).
    gate.setBudget(4);
    gate.pump();
    await victim;
    expect(outcomes).toEqual({ victim: "go" });
    gate.dispatching();
    gate.started(0, "victim");
    gate.setBudget(5);
    gate.pump();
    await attacker;
    expect(outcomes).toEqual({ victim: "go", attacker: "go" });
  });

  it("keeps a flow to the relay's cap for it, and lets a flow without one go", async () => {
    const gate = new AdmissionGate();
    const v = view(); // 4 slots
    const t = (flow: string) => ({ ...ticket(), flow });
    expect((await gate.enter(d, v, t("big"))).outcome).toBe("go");
    gate.started(0, "big");
    // A budget of 1 and a cap of 1 for "big": a second "big" waits; "small" (no cap) goes though the budget is spent.
    gate.setBudget(1, { [flowKey("big")]: 1 });
    const held = gate.enter(d, v, t("big"));
    await Promise.resolve();
    expect(gate.held).toBe(1);
    expect((await gate.enter(d, v, t("small"))).outcome).toBe("go");
    gate.started(0, "small");
    // The next answer raises the cap: the held one goes.
    gate.setBudget(2, { [flowKey("big")]: 2 });
    gate.pump();
    expect((await held).outcome).toBe("go");
  });

  it("keeps a flow to a fractional cap over time: half a request runs one request half the time", async () => {
    let at = Date.now();
    const gate = new AdmissionGate(() => at);
    const v = view(); // 4 slots
    const t = { ...ticket(), flow: "big" };
    const cap = () => gate.setBudget(1, { [flowKey("big")]: 0.5 }); // renewed as the relay's answers come
    cap();
    // Owing nothing, one request goes; a second would pass the cap rounded up.
    expect((await gate.enter(d, v, t)).outcome).toBe("go");
    gate.started(0, "big");
    at += 400; // it runs 400 ms: 200 slot-ms beyond half a request
    cap();
    gate.ended(0, "big");
    // Now it owes: the next waits (and earns back while it waits), though a slot is free.
    const held = gate.enter(d, v, t);
    await Promise.resolve();
    expect(gate.held).toBe(1);
    at += 200; // 100 slot-ms earned back: still owing
    cap();
    expect(gate.pump()).toBe(false);
    at += 200; // 200: paid
    cap();
    expect(gate.pump()).toBe(true);
    expect((await held).outcome).toBe("go");
  });

  it("does not hold a flow under its share behind the held requests of a flow at its cap", async () => {
    const at = Date.now();
    const gate = new AdmissionGate(() => at);
    const v = view(); // 4 slots
    const t = (flow: string) => ({ ...ticket(), flow });
    gate.setBudget(2, { [flowKey("big")]: 1 });
    expect((await gate.enter(d, v, t("big"))).outcome).toBe("go");
    gate.started(0, "big");
    void gate.enter(d, v, t("big")); // at its cap: held
    await Promise.resolve();
    expect(gate.held).toBe(1);
    // "small" has no cap: the held "big" request is not ahead of it.
    expect((await gate.enter(d, v, t("small"))).outcome).toBe("go");
    expect(gate.held).toBe(1);
    gate.setBudget(undefined); // lapses: the held one is let go at the next pump
    gate.pump();
  });

  it("lets a request of a band the budget leaves open go past the held ones of the band below, and not them", async () => {
    const at = Date.now();
    const gate = new AdmissionGate(() => at); // a stopped clock: the budget never lapses, so only pump() can let the batch go
    const v = view(); // 4 slots
    for (let i = 0; i < 2; i++) {
      expect((await gate.enter(d, v, ticket())).outcome).toBe("go");
      gate.started(0, "f");
    }
    gate.setBudget(2, undefined, 1); // at its budget; priority 1 and above are open
    const batch = gate.enter(d, v, ticket());
    await Promise.resolve();
    expect(gate.held).toBe(1);
    // A critical request goes on a free slot though the budget is spent and a batch request
    // waits: at once, not through the queue (the batch request keeps to the budget).
    expect(await gate.enter(d, v, { ...ticket(), priority: 1 })).toEqual({ outcome: "go", queued: false });
    gate.started(1, "f");
    expect(gate.held).toBe(1);
    gate.pump();
    await Promise.resolve();
    expect(gate.held).toBe(1); // the batch request still keeps to the budget
    gate.setBudget(4, undefined, 1);
    gate.pump();
    expect((await batch).outcome).toBe("go");
    gate.dispatching();
    gate.started(0, "f");
    // Every slot taken (4 in flight, the view's 4): a critical request goes to ask the replicas,
    // as a request with nobody ahead of it does; a standard one would wait behind the budget.
    gate.setBudget(4, undefined, 1);
    v.applySnapshot({ deployment: "d", replicas: [{ id: "r0", url: "http://r0.test", epoch: 1, models: [], loading: [], expiresInMs: 600_000, load: { seq: 2, ongoing: 4, queued: 0, max: 4, state: "ready" } }] }, at);
    const standard = gate.enter(d, v, ticket());
    await Promise.resolve();
    expect(gate.held).toBe(1);
    expect(await gate.enter(d, v, { ...ticket(), priority: 1 })).toEqual({ outcome: "go", queued: false });
    gate.setBudget(undefined);
    gate.ended(0, "f");
    gate.pump();
    expect((await standard).outcome).toBe("go");
  });

  it("keys a client's flows under its client's digits, and its own flow (no header) as it always was", () => {
    expect(flowKey("key:abc")).toMatch(/^[0-9a-f]{16}$/);
    expect(flowKey("key:abc\u0000t1").slice(0, 8)).toBe(flowKey("key:abc").slice(0, 8));
    expect(flowKey("key:abc\u0000t1")).not.toBe(flowKey("key:abc\u0000t2"));
    expect(flowKey("key:abc\u0000t1")).not.toBe(flowKey("key:abc"));
    expect(flowKey("key:def\u0000t1").slice(0, 8)).not.toBe(flowKey("key:abc\u0000t1").slice(0, 8));
  });

  it("tells the relay its demand per flow, under keys, the rest summed under one of its own past MAX_DEMAND_FLOWS", () => {
    const gate = new AdmissionGate();
    for (let i = 0; i < 70; i++) gate.started(0, `client-${i}`);
    const demand = gate.demand()!;
    expect(demand.flows).toHaveLength(64);
    expect(demand.flows.reduce((n, f) => n + f[2], 0)).toBe(70);
    for (const [, key] of demand.flows) expect(key).toMatch(/^[0-9a-f]{16}$/);
    expect(demand.flows.map(([, k]) => k)).toContain(flowKey("client-0"));
  });
});
