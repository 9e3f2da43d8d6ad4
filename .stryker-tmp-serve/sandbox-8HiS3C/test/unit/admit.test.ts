/**
 * The admit stage (src/proxy/serve/admit.ts) over a real routing view: a request
 * goes at once while a slot is free, waits while none is, and leaves the queue in
 * its order as slots free; sheddable requests are refused when the fleet is full;
 * a wait runs out, and a client that leaves is gone at once.
 */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { defineDeployment, type DeploymentInput } from "../../src/config/deployment.ts";
import { AdmissionGate, UNKNOWN_ANSWER_TOKENS, freeSlots, priorityOf, flowOf, tokenCost, type Ticket } from "../../src/proxy/serve/admit.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";

const deployment = (admission: DeploymentInput["admission"] = {}) =>
  defineDeployment({ name: "d", routePrefix: "/d", backend: { kind: "echo" }, admission, policy: { requestTimeoutMs: 60_000 } });

/** A view of replicas with `max` slots each, none in use. */
function viewOf(...maxes: number[]) {
  const view = new RoutingView();
  const replicas = maxes.map((max, i) => ({
    id: `r${i}`,
    url: `http://r${i}.test`,
    epoch: 1,
    models: [],
    loading: [],
    expiresInMs: 600_000,
    load: { seq: 1, ongoing: 0, queued: 0, max, state: "ready" as const },
  }));
  view.applySnapshot({ deployment: "d", replicas }, Date.now());
  return view;
}

/** Takes one slot of replica `id` in the view (a dispatch started here). */
const take = (view: RoutingView, id: string) => view.startDispatch(view.get(id)!);
const free = (view: RoutingView, id: string) => view.endDispatch(view.get(id)!);

const ticket = (over: Partial<Ticket> = {}): Ticket => ({ priority: 0, flow: "f", deadline: Date.now() + 60_000, refresh: async () => undefined, ...over });

/**
 * Requests entering `gate` on the one replica r0 of `view`, and the order they go in:
 * a request that went dispatches at once here, so its slot becomes the view's.
 */
function inOrder(gate: AdmissionGate, view: RoutingView, d: ReturnType<typeof deployment>) {
  const order: string[] = [];
  const enter = (name: string, t: Partial<Ticket>) =>
    gate.enter(d, view, ticket(t)).then((a) => {
      order.push(name);
      if (a.queued) {
        take(view, "r0");
        gate.dispatching();
      }
      return a.outcome;
    });
  return { order, enter };
}

describe("AdmissionGate", () => {
  it("lets a request go at once while the view shows a free slot and nobody waits", async () => {
    const view = viewOf(2);
    const gate = new AdmissionGate();
    expect(await gate.enter(deployment(), view, ticket())).toEqual({ outcome: "go", queued: false });
    expect(freeSlots(view, Date.now())).toBe(2);
  });

  it("holds requests while every slot is taken, then lets them go by priority, fair between flows, as slots free", async () => {
    const view = viewOf(1);
    take(view, "r0");
    const gate = new AdmissionGate();
    const { order, enter } = inOrder(gate, view, deployment({ maxPriority: 1 }));
    const waiting = [enter("a1", { flow: "a" }), enter("a2", { flow: "a" }), enter("b1", { flow: "b" }), enter("critical", { flow: "a", priority: 1 })];
    await Promise.resolve();
    expect(gate.held).toBe(4);
    for (let i = 0; i < 4; i++) {
      free(view, "r0");
      gate.pump();
      await new Promise((r) => setTimeout(r, 0));
      expect(order).toHaveLength(i + 1);
    }
    expect(await Promise.all(waiting)).toEqual(["go", "go", "go", "go"]);
    expect(order).toEqual(["critical", "a1", "b1", "a2"]);
  });

  const LONG = tokenCost(400, 2_000);
  /**
   * Flow "long" (three requests asking 2,000-token answers) and flow "short" (six asking
   * 200) held on one full slot, then let go one by one as the slot frees; `afterEach`
   * runs after each goes. The order they went in.
   */
  async function longAndShort(afterEach: (gate: AdmissionGate, order: string[]) => void = () => {}): Promise<string[]> {
    const view = viewOf(1);
    take(view, "r0");
    const gate = new AdmissionGate();
    const { order, enter } = inOrder(gate, view, deployment());
    const waiting = [
      ...[1, 2, 3].map((i) => enter(`long${i}`, { flow: "long", cost: LONG })),
      ...[1, 2, 3, 4, 5, 6].map((i) => enter(`short${i}`, { flow: "short", cost: tokenCost(400, 200) })),
    ];
    await Promise.resolve();
    for (let i = 0; i < 9; i++) {
      free(view, "r0");
      gate.pump();
      await new Promise((r) => setTimeout(r, 0));
      afterEach(gate, order);
    }
    await Promise.all(waiting);
    return order;
  }

  it("weighs held requests by their tokens: a flow of long answers gets fewer through than a flow of short ones", async () => {
    // By requests they would take turns. Each flow's head goes first in arrival order,
    // then the short flow's six go before the long flow's second.
    expect((await longAndShort()).slice(0, 8)).toEqual(["long1", "short1", "short2", "short3", "short4", "short5", "short6", "long2"]);
  });

  it("corrects a flow's place by the tokens its requests used: a flow that asks large budgets and uses few is not held back for them", async () => {
    // long1 ended having used 150 tokens of the 2,100 it was weighed by (its usage, once known).
    const order = await longAndShort((gate, order) => {
      if (order.at(-1) === "long1") gate.correct(0, "long", LONG, 150);
    });
    // Weighed by its use, long2 (now at 150) goes right after short1 (0), not behind all six (above).
    expect(order.slice(0, 4)).toEqual(["long1", "short1", "long2", "short2"]);
  });

  it("with no budget yet, a critical request goes to ask past held and running lower ones (a replica that preempts takes it)", async () => {
    const view = viewOf(1);
    const gate = new AdmissionGate();
    const d = deployment({ maxPriority: 1 });
    // This isolate's own standard request fills the only slot, and another standard one is held.
    expect(await gate.enter(d, view, ticket())).toEqual({ outcome: "go", queued: false });
    take(view, "r0");
    gate.started(0, "f");
    const heldStandard = gate.enter(d, view, ticket());
    await Promise.resolve();
    expect(gate.held).toBe(1);
    // The critical one goes at once: the held standard one is not ahead of it, and the slots
    // are taken by a lower priority, which the replica's engine pauses for it.
    expect(await gate.enter(d, view, ticket({ priority: 1 }))).toEqual({ outcome: "go", queued: false });
    gate.started(1, "f");
    // Another critical one, with only the critical and a standard one running: still (one is lower).
    expect(await gate.enter(d, view, ticket({ priority: 1 }))).toEqual({ outcome: "go", queued: false });
    // A standard one waits: every request ahead of it or running is of its priority or higher.
    const standard = gate.enter(d, view, ticket());
    await Promise.resolve();
    expect(gate.held).toBe(2);
    free(view, "r0");
    gate.ended(0, "f");
    gate.pump();
    expect((await heldStandard).outcome).toBe("go");
    gate.dispatching();
    free(view, "r0");
    gate.pump();
    expect((await standard).outcome).toBe("go");
  });

  it("estimates a request's tokens from its body's bytes and its answer's budget", () => {
    expect(tokenCost(4_000, 100)).toBe(1_100);
    expect(tokenCost(10, undefined)).toBe(3 + UNKNOWN_ANSWER_TOKENS);
  });

  it("reserves a released request's slot until it dispatches, so one free slot admits one request", async () => {
    const view = viewOf(1);
    take(view, "r0");
    const gate = new AdmissionGate();
    const first = gate.enter(deployment(), view, ticket());
    const second = gate.enter(deployment(), view, ticket());
    free(view, "r0");
    gate.pump();
    gate.pump();
    expect((await first).outcome).toBe("go");
    expect(gate.held).toBe(1);
    // It dispatches (the view counts it); the second still waits until that one ends.
    take(view, "r0");
    gate.dispatching();
    gate.pump();
    expect(gate.held).toBe(1);
    free(view, "r0");
    gate.pump();
    expect((await second).outcome).toBe("go");
  });

  it("refuses a sheddable request while the fleet is full, and holds it behind others while a slot is free", async () => {
    const view = viewOf(1);
    const gate = new AdmissionGate();
    take(view, "r0");
    expect((await gate.enter(deployment(), view, ticket({ priority: -1 }))).outcome).toBe("shed");
    free(view, "r0");
    expect((await gate.enter(deployment(), view, ticket({ priority: -1 }))).outcome).toBe("go");
  });

  it("ends a wait that runs out with expired, and one whose client leaves with gone, taking both out of the queue", async () => {
    const view = viewOf(1);
    take(view, "r0");
    const gate = new AdmissionGate();
    expect((await gate.enter(deployment({ maxWaitMs: 20 }), view, ticket())).outcome).toBe("expired");
    const client = new AbortController();
    const held = gate.enter(deployment(), view, ticket({ signal: client.signal }));
    expect(gate.held).toBe(1);
    client.abort();
    expect((await held).outcome).toBe("gone");
    expect(gate.held).toBe(0);
    // Its deadline bounds the wait too.
    expect((await gate.enter(deployment(), view, ticket({ deadline: Date.now() - 1 }))).outcome).toBe("expired");
  });

  it("holds a request that meets no ready replica only for a deployment that scales from zero", async () => {
    const empty = new RoutingView();
    const gate = new AdmissionGate();
    // Down, with nothing to start a replica: the dispatch answers no_ready_replica at once.
    expect(await gate.enter(deployment(), empty, ticket())).toEqual({ outcome: "go", queued: false });
    const zero = defineDeployment({ name: "z", routePrefix: "/z", backend: { kind: "echo" }, autoscaling: { minReplicas: 0 }, admission: { maxWaitMs: 20 } });
    expect((await gate.enter(zero, empty, ticket())).outcome).toBe("expired");
    // A request that went already and lost its replicas is never let go at once: retrying would spin.
    expect((await gate.enter(deployment({ maxWaitMs: 20 }), empty, ticket({ again: true }))).outcome).toBe("expired");
  });

  it("tells the autoscaler how many requests it holds, as it holds them and while it leads, never for one that goes at once", async () => {
    const zero = defineDeployment({ name: "z", routePrefix: "/z", backend: { kind: "echo" }, autoscaling: { minReplicas: 0 }, admission: { maxWaitMs: 60_000 } });
    const view = new RoutingView();
    const gate = new AdmissionGate();
    const told: number[] = [];
    let refreshed!: () => void;
    const refreshes = new Promise<void>((r) => (refreshed = r));
    const t = ticket({ demand: (n) => told.push(n), refresh: async () => refreshed() });
    const first = gate.enter(zero, view, t);
    const second = gate.enter(zero, view, t);
    expect(told).toEqual([1, 2]);
    // The leader's poll refreshes the view and tells again: a replica has registered meanwhile.
    view.applySnapshot({ deployment: "z", replicas: [{ id: "r0", url: "http://r0.test", epoch: 1, models: [], loading: [], expiresInMs: 600_000, load: { seq: 1, ongoing: 0, queued: 0, max: 4, state: "ready" } }] }, Date.now());
    await refreshes;
    expect((await first).outcome).toBe("go");
    expect((await second).outcome).toBe("go");
    expect(told).toEqual([1, 2]); // released on that refresh: nothing left to tell
    told.length = 0;
    expect(await gate.enter(zero, view, t)).toEqual({ outcome: "go", queued: false });
    expect(told).toEqual([]);
  });

  it("makes a request the replicas just refused wait for a refresh even if the view shows a slot; its leader refreshes the view", async () => {
    const view = viewOf(1);
    const gate = new AdmissionGate();
    let refreshes = 0;
    const a = await gate.enter(deployment(), view, ticket({ again: true, refresh: async () => void refreshes++ }));
    expect(a).toEqual({ outcome: "go", queued: true });
    expect(refreshes).toBe(1);
  });
});

describe("a request's priority and flow", () => {
  const headers = (h: Record<string, string>) => new Headers(h);

  it("come from the deployment's default, its header (a number or a band's name) and the body, capped at maxPriority", () => {
    const d = deployment({ priorityHeader: "x-priority", maxPriority: 1, defaultPriority: 0 });
    expect(priorityOf(d, headers({}), undefined)).toEqual({ ok: true, priority: 0 });
    expect(priorityOf(d, headers({ "x-priority": "sheddable" }), undefined)).toEqual({ ok: true, priority: -1 });
    expect(priorityOf(d, headers({ "x-priority": "Critical" }), undefined)).toEqual({ ok: true, priority: 1 });
    expect(priorityOf(d, headers({ "x-priority": "7" }), undefined)).toEqual({ ok: true, priority: 1 });
    expect(priorityOf(d, headers({}), -5)).toEqual({ ok: true, priority: -5 });
    // The header, when sent, wins over the body.
    expect(priorityOf(d, headers({ "x-priority": "-2" }), 1)).toEqual({ ok: true, priority: -2 });
    const bad = priorityOf(d, headers({ "x-priority": "urgent" }), undefined);
    expect(bad.ok).toBe(false);
    if (!bad.ok) expect(bad.response.status).toBe(400);
    // A deployment that names no header reads none.
    expect(priorityOf(deployment(), headers({ "x-priority": "critical" }), undefined)).toEqual({ ok: true, priority: 0 });
  });

  it("take the API key's priority class, when it has one, as the default and the cap", () => {
    const d = deployment({ priorityHeader: "x-priority", maxPriority: 0, defaultPriority: 0 });
    const critical = { default: 1, max: 1 };
    expect(priorityOf(d, headers({}), undefined, critical)).toEqual({ ok: true, priority: 1 });
    expect(priorityOf(d, headers({ "x-priority": "sheddable" }), undefined, critical)).toEqual({ ok: true, priority: -1 });
    // A batch key: sheddable by default, and never above standard whatever it asks.
    const batch = { default: -1, max: 0 };
    expect(priorityOf(d, headers({}), undefined, batch)).toEqual({ ok: true, priority: -1 });
    expect(priorityOf(d, headers({ "x-priority": "critical" }), 5, batch)).toEqual({ ok: true, priority: 0 });
    // Without a class, the deployment's: a client's ask for critical is lowered to its maximum, 0.
    expect(priorityOf(d, headers({ "x-priority": "critical" }), undefined)).toEqual({ ok: true, priority: 0 });
  });

  it("refuses a default above the maximum in configuration", () => {
    expect(() => deployment({ defaultPriority: 1, maxPriority: 0 })).toThrow(/defaultPriority/);
  });

  it("is the client unless the deployment names a flow header the request carries", () => {
    expect(flowOf(deployment(), headers({ "x-tenant": "t1" }), "key:abc")).toBe("key:abc");
    const d = deployment({ flowHeader: "x-tenant" });
    // A flow of its client's (issue 50): a header names a share of the client's, never another client's flow.
    expect(flowOf(d, headers({ "x-tenant": "t1" }), "key:abc")).toBe("key:abc\u0000t1");
    expect(flowOf(d, headers({ "x-tenant": "t1" }), "key:def")).not.toBe(flowOf(d, headers({ "x-tenant": "t1" }), "key:abc"));
    expect(flowOf(d, headers({}), "ip:10.0.0.1")).toBe("ip:10.0.0.1");
  });
});
