/**
 * Admission across isolates (src/policy/admission-shares.ts): the relay's budgets from
 * the isolates' demand by band. Capacity goes to the highest band first, then in
 * proportion to each isolate's demand in a band; nobody is held back while the
 * location's demand fits.
 */
import { describe, expect, it } from "vitest";
import { AdmissionShares, SHARE_POST_TTL_MS } from "../../src/policy/admission-shares.ts";
import { AdmissionGate, freeSlots } from "../../src/proxy/serve/admit.ts";
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
    expect(gate.demand()).toEqual({ bands: [[0, 2]], held: 1 }); // one in flight, one held
    gate.setBudget(2);
    gate.pump();
    await held;
    expect(outcome).toBe("go");
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
});
