/**
 * The admit stage (src/proxy/serve/admit.ts) in the branches test/unit/admit.test.ts
 * does not reach: a request's place from its admission to its end (AdmissionSlot),
 * the gate's counts of requests in flight as the relay is told them (demand), the
 * slots this isolate frees before the view shows them, the relay's budget and its
 * lapse, the leader's hand-off, and each refusal's answer. Issue 51: the folder's
 * mutation score; written against the mutants that survived the other unit tests.
 */
import { describe, expect, it, vi } from "vitest";
import { defineDeployment, type DeploymentInput } from "../../src/config/deployment.ts";
import { MAX_DEMAND_FLOWS } from "../../src/protocol/index.ts";
import {
  AdmissionGate,
  AdmissionSlot,
  BUDGET_TTL_MS,
  HOLD_POLL_MS,
  admissionRefusal,
  flowKey,
  flowOf,
  freeSlots,
  pendingShareOf,
  priorityOf,
  type Ticket,
} from "../../src/proxy/serve/admit.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";

const deployment = (admission: DeploymentInput["admission"] = {}, limits: DeploymentInput["limits"] = {}) =>
  defineDeployment({ name: "d", routePrefix: "/d", backend: { kind: "echo" }, admission, limits, policy: { requestTimeoutMs: 60_000 } });

/** A view of one replica r0 with `max` slots, of which `ongoing` are reported in use (by any isolate). */
function viewOf(max: number, ongoing = 0) {
  const view = new RoutingView();
  view.applySnapshot(
    { deployment: "d", replicas: [{ id: "r0", url: "http://r0.test", epoch: 1, models: [], loading: [], expiresInMs: 600_000, load: { seq: 1, ongoing, queued: 0, max, state: "ready" as const } }] },
    Date.now(),
  );
  return view;
}
const take = (view: RoutingView) => view.startDispatch(view.get("r0")!);
const free = (view: RoutingView) => view.endDispatch(view.get("r0")!);
const ticket = (over: Partial<Ticket> = {}): Ticket => ({ priority: 0, flow: "f", deadline: Date.now() + 60_000, refresh: async () => undefined, ...over });
const tick = () => new Promise((r) => setTimeout(r, 0));

describe("the gate's counts of requests in flight, as its demand tells them", () => {
  it("counts each priority and flow while they run and forgets them when they end", () => {
    const gate = new AdmissionGate();
    expect(gate.demand()).toBeUndefined();
    gate.started(0, "a");
    gate.started(0, "a");
    gate.started(1, "b");
    expect(gate.inflight).toBe(3);
    const d = gate.demand()!;
    expect(d.held).toBe(0);
    expect(new Map(d.bands)).toEqual(new Map([[0, 2], [1, 1]]));
    expect(d.flows.map(([p, k, n]) => [p, k, n]).sort()).toEqual([[0, flowKey("a"), 2], [1, flowKey("b"), 1]].sort());
    gate.ended(0, "a");
    expect(new Map(gate.demand()!.bands)).toEqual(new Map([[0, 1], [1, 1]]));
    expect(gate.demand()!.flows.find(([p]) => p === 0)![2]).toBe(1);
    gate.ended(0, "a");
    gate.ended(1, "b");
    expect(gate.inflight).toBe(0);
    expect(gate.demand()).toBeUndefined();
    // An end without a start does not go below zero.
    gate.ended(0, "a");
    expect(gate.inflight).toBe(0);
    gate.started(0, "a");
    expect(gate.inflight).toBe(1);
    expect(gate.demand()!.bands).toEqual([[0, 1]]);
  });

  it("tells at most MAX_DEMAND_FLOWS flows: the largest, and the rest summed under one key in the highest of their bands", () => {
    const gate = new AdmissionGate();
    const flows = MAX_DEMAND_FLOWS + 5;
    // The ten largest flows come last, so only an order by size names them.
    const big = (i: number) => i >= flows - 10;
    for (let i = 0; i < flows; i++) for (let n = 0; n <= (big(i) ? 3 : 0); n++) gate.started(i === flows - 11 ? 2 : 0, `f${i}`);
    const d = gate.demand()!;
    expect(d.flows).toHaveLength(MAX_DEMAND_FLOWS);
    // The ten flows with four requests each are told by name, the largest first.
    for (let i = flows - 10; i < flows; i++) expect(d.flows.some(([, k, n]) => k === flowKey(`f${i}`) && n === 4)).toBe(true);
    expect(d.flows.slice(0, 10).every(([, , n]) => n === 4)).toBe(true);
    const rest = d.flows.at(-1)!;
    const named = new Set(d.flows.slice(0, -1).map(([, k]) => k));
    expect(named.has(rest[1])).toBe(false);
    // Everything not named, summed, in the highest band among them (the last small flow, of priority 2, is among the rest: ties keep their order).
    const total = 10 * 4 + (flows - 10);
    expect(d.flows.reduce((s, [, , n]) => s + n, 0)).toBe(total);
    expect(rest[0]).toBe(2);
    // Exactly MAX_DEMAND_FLOWS flows are all told by name.
    const exact = new AdmissionGate();
    for (let i = 0; i < MAX_DEMAND_FLOWS; i++) exact.started(0, `g${i}`);
    expect(new Set(exact.demand()!.flows.map(([, k]) => k))).toEqual(new Set(Array.from({ length: MAX_DEMAND_FLOWS }, (_, i) => flowKey(`g${i}`))));
  });

  it("counts held requests in its demand, by band and flow, and how many it holds", async () => {
    const view = viewOf(1);
    take(view);
    const gate = new AdmissionGate();
    const client = new AbortController();
    const held = gate.enter(deployment({ maxPriority: 1 }), view, ticket({ flow: "h", priority: 1, signal: client.signal }));
    await tick();
    const d = gate.demand()!;
    expect(d.held).toBe(1);
    expect(d.bands).toEqual([[1, 1]]);
    expect(d.flows).toEqual([[1, flowKey("h"), 1]]);
    client.abort();
    expect((await held).outcome).toBe("gone");
  });
});

describe("the queue's order between clients, from the gate's counts in flight", () => {
  it("a client whose requests ended goes before one with a request still running, whatever the arrival order", async () => {
    const view = viewOf(3);
    for (let i = 0; i < 3; i++) take(view);
    const gate = new AdmissionGate();
    gate.started(0, "ip:a");
    gate.started(0, "ip:a");
    gate.started(0, "ip:b");
    const order: string[] = [];
    const b = gate.enter(deployment(), view, ticket({ flow: "ip:b" })).then((r) => order.push(`b:${r.outcome}`));
    const a = gate.enter(deployment(), view, ticket({ flow: "ip:a\u0000t1" })).then((r) => order.push(`a:${r.outcome}`));
    await tick();
    expect(gate.held).toBe(2);
    // Both of a's requests end (two slots free here): a has none running now, b has one.
    gate.ended(0, "ip:a");
    gate.ended(0, "ip:a");
    gate.pump();
    await Promise.all([a, b]);
    expect(order).toEqual(["a:go", "b:go"]);
  });
});

describe("slots this isolate frees before the view shows them", () => {
  it("counts a freed slot until exactly HOLD_POLL_MS have passed", async () => {
    let now = 2_000_000;
    const view = viewOf(1);
    take(view);
    const gate = new AdmissionGate(() => now);
    gate.started(0, "f");
    gate.started(0, "f");
    gate.ended(0, "f");
    now += HOLD_POLL_MS;
    expect(await gate.enter(deployment(), view, ticket())).toEqual({ outcome: "go", queued: false });
  });

  it("a request that ended here lets one held request go though the view still counts it, for HOLD_POLL_MS only", async () => {
    let now = 1_000_000;
    // The view is full with this isolate's own request (it has not seen it end yet).
    const view = viewOf(1);
    take(view);
    const gate = new AdmissionGate(() => now);
    gate.started(0, "f");
    const held = gate.enter(deployment(), view, ticket());
    await tick();
    expect(gate.held).toBe(1);
    gate.ended(0, "f");
    gate.pump();
    expect((await held).outcome).toBe("go");
    gate.dispatching();
    // A refused request held no slot: its end frees none.
    gate.started(0, "f");
    const second = gate.enter(deployment({ maxWaitMs: 50 }), view, ticket());
    await tick();
    gate.ended(0, "f", false);
    gate.pump();
    await tick();
    expect(gate.held).toBe(1);
    expect((await second).outcome).toBe("expired");
    // A freed slot lapses after HOLD_POLL_MS: the refresh has had its chance to show it.
    gate.started(0, "f");
    gate.started(0, "f");
    gate.ended(0, "f");
    now += HOLD_POLL_MS + 1;
    const third = gate.enter(deployment({ maxWaitMs: 50 }), view, ticket());
    await tick();
    expect(gate.held).toBe(1);
    expect((await third).outcome).toBe("expired");
  });

  it("a slot freed here lets exactly one request go at once, not two", async () => {
    const view = viewOf(1);
    take(view);
    const gate = new AdmissionGate();
    gate.started(0, "f");
    gate.started(0, "f");
    gate.ended(0, "f");
    expect(await gate.enter(deployment(), view, ticket())).toEqual({ outcome: "go", queued: false });
    const next = gate.enter(deployment({ maxWaitMs: 30 }), view, ticket());
    await tick();
    expect(gate.held).toBe(1);
    expect((await next).outcome).toBe("expired");
  });
});

describe("the relay's budget", () => {
  it("bounds this isolate's requests in flight while fresh, and lapses after BUDGET_TTL_MS", async () => {
    let now = 5_000_000;
    const view = viewOf(8);
    const gate = new AdmissionGate(() => now);
    expect(gate.busy).toBe(false);
    gate.setBudget(1);
    expect(gate.busy).toBe(true);
    expect(await gate.enter(deployment(), view, ticket())).toEqual({ outcome: "go", queued: false });
    gate.started(0, "f");
    // The budget is spent: the next one waits although the view shows free slots.
    const held = gate.enter(deployment({ maxWaitMs: 40 }), view, ticket());
    await tick();
    expect(gate.held).toBe(1);
    expect((await held).outcome).toBe("expired");
    // Once it lapses, none applies.
    now += BUDGET_TTL_MS + 1;
    expect(gate.busy).toBe(false);
    expect(await gate.enter(deployment(), view, ticket())).toEqual({ outcome: "go", queued: false });
    // A budget withdrawn applies no more.
    now += 1;
    gate.setBudget(1);
    gate.setBudget(undefined);
    expect(await gate.enter(deployment(), view, ticket())).toEqual({ outcome: "go", queued: false });
  });

  it("leaves the bands from openFrom up free of it", async () => {
    const view = viewOf(8);
    const gate = new AdmissionGate();
    gate.setBudget(0, undefined, 1);
    expect(await gate.enter(deployment({ maxPriority: 1 }), view, ticket({ priority: 1 }))).toEqual({ outcome: "go", queued: false });
    const standard = gate.enter(deployment({ maxWaitMs: 30 }), view, ticket({ priority: 0 }));
    await tick();
    expect(gate.held).toBe(1);
    // A critical one goes past the held standard one: the budget does not bind its band.
    expect(await gate.enter(deployment({ maxPriority: 1 }), view, ticket({ priority: 1 }))).toEqual({ outcome: "go", queued: false });
    expect((await standard).outcome).toBe("expired");
  });

  it("under caps per flow, a flow at its cap waits and a flow without one goes", async () => {
    const view = viewOf(8);
    const gate = new AdmissionGate();
    gate.setBudget(4, { [flowKey("big")]: 1 });
    expect(await gate.enter(deployment(), view, ticket({ flow: "big" }))).toEqual({ outcome: "go", queued: false });
    gate.started(0, "big");
    const capped = gate.enter(deployment({ maxWaitMs: 40 }), view, ticket({ flow: "big" }));
    await tick();
    expect(gate.held).toBe(1);
    // Another flow is not held behind the capped one.
    expect(await gate.enter(deployment(), view, ticket({ flow: "small" }))).toEqual({ outcome: "go", queued: false });
    expect((await capped).outcome).toBe("expired");
  });

});

describe("the leader", () => {
  it("hands its place on when it leaves: the next held request refreshes the view and goes when a slot shows", async () => {
    const view = viewOf(1);
    take(view);
    const gate = new AdmissionGate();
    gate.started(0, "f");
    const refreshedBy: string[] = [];
    const first = gate.enter(deployment(), view, ticket({ deadline: Date.now() + 30, refresh: async () => void refreshedBy.push("first") }));
    let slotShown = false;
    const second = gate.enter(
      deployment(),
      view,
      ticket({
        refresh: async () => {
          refreshedBy.push("second");
          // The refresh shows this isolate's request ended.
          if (!slotShown) {
            slotShown = true;
            free(view);
          }
        },
      }),
    );
    expect((await first).outcome).toBe("expired");
    expect((await second).outcome).toBe("go");
    expect(refreshedBy[0]).toBe("second");
    expect(gate.held).toBe(0);
  });

  it("with nothing in flight here and the view still full by others' reports, lets one held request go to ask the replicas", async () => {
    const view = viewOf(1, 1);
    const gate = new AdmissionGate();
    let refreshes = 0;
    // Refused by the replicas once (again): held, though the view is full by other isolates' load only.
    const held = gate.enter(deployment(), view, ticket({ again: true, refresh: async () => void refreshes++ }));
    expect(await held).toEqual({ outcome: "go", queued: true });
    expect(refreshes).toBe(1);
  });
});

/** `gate` with its corrections (AdmissionGate.correct) recorded instead of made: the calls, in order. */
function correctionsOf(gate: AdmissionGate): { gate: AdmissionGate; corrections: unknown[][] } {
  const correct = vi.spyOn(gate, "correct").mockImplementation(() => undefined);
  return { gate, corrections: correct.mock.calls };
}

describe("a request's place from admission to its end (AdmissionSlot)", () => {
  it("counts it in flight from admission to end, frees its slot for the next, and ends once", async () => {
    const view = viewOf(1);
    const gate = new AdmissionGate();
    const d = deployment();
    const slot = await AdmissionSlot.enter(gate, d, view, ticket({ flow: "s" }));
    if (typeof slot === "string") throw new Error(slot);
    expect(gate.inflight).toBe(1);
    take(view);
    slot.dispatching();
    const next = AdmissionSlot.enter(gate, d, view, ticket({ flow: "t" }));
    await tick();
    expect(gate.held).toBe(1);
    free(view);
    slot.end();
    expect(gate.inflight).toBe(0);
    const second = await next;
    if (typeof second === "string") throw new Error(second);
    expect(gate.inflight).toBe(1);
    slot.end();
    expect(gate.inflight).toBe(1);
    second.end();
    expect(gate.inflight).toBe(0);
  });

  it("refuses with the gate's outcome, and a client that leaves ends the slot", async () => {
    const view = viewOf(1);
    take(view);
    const gate = new AdmissionGate();
    expect(await AdmissionSlot.enter(gate, deployment(), view, ticket({ priority: -1 }))).toBe("shed");
    free(view);
    const client = new AbortController();
    const slot = await AdmissionSlot.enter(gate, deployment(), view, ticket({ signal: client.signal }));
    expect(typeof slot).not.toBe("string");
    expect(gate.inflight).toBe(1);
    client.abort();
    expect(gate.inflight).toBe(0);
  });

  it("again: gives its slot up without freeing one, waits, and counts again once it goes", async () => {
    const view = viewOf(1);
    const gate = new AdmissionGate();
    const slot = await AdmissionSlot.enter(gate, deployment(), view, ticket({ refresh: async () => undefined }));
    if (typeof slot === "string") throw new Error(slot);
    expect(gate.inflight).toBe(1);
    // Every replica refused it: it waits for a refresh, then goes to ask (nothing else runs here).
    expect(await slot.again()).toBe("go");
    expect(gate.inflight).toBe(1);
    slot.dispatching();
    slot.end();
    expect(gate.inflight).toBe(0);
    // Again with a wait that runs out: not counted.
    const short = await AdmissionSlot.enter(gate, deployment({ maxWaitMs: 1 }), viewOf(1, 1), ticket({ deadline: Date.now() + 60_000 }));
    if (typeof short === "string") throw new Error(short);
    take(view);
    expect(gate.inflight).toBe(1);
  });

  it("again: a request the replicas refused keeps its client's turn (it was not served), and goes before the other client's next", async () => {
    const view = viewOf(1);
    take(view);
    const gate = new AdmissionGate();
    const order: string[] = [];
    const enter = (name: string, flow: string) =>
      AdmissionSlot.enter(gate, deployment(), view, ticket({ flow })).then((s) => {
        order.push(name);
        if (typeof s === "string") throw new Error(s);
        return s;
      });
    const a1 = enter("a1", "a");
    const a2 = enter("a2", "a");
    const v1 = enter("v1", "v");
    await tick();
    expect(gate.held).toBe(3);
    // The hog ends: a1 goes, runs and ends; then v1 goes.
    free(view);
    gate.pump();
    const first = await a1;
    first.dispatching();
    first.end();
    const victim = await v1;
    expect(order).toEqual(["a1", "v1"]);
    // Every replica refused v1 (a slot the view showed was not free yet): it is held again.
    victim.dispatching();
    const again = victim.again().then((o) => {
      order.push("v1 again");
      return o;
    });
    await tick();
    // The slot frees: v1's client was not served, so it is not charged the turn: v1 goes, not a2.
    gate.pump();
    await tick();
    expect(order).toEqual(["a1", "v1", "v1 again"]);
    expect(await again).toBe("go");
    victim.end();
    await a2;
    expect(gate.held).toBe(0);
  });

  it("again: refunds only a turn its client was charged (let go through the queue), never one that went at once", async () => {
    const view = viewOf(1);
    const { gate, corrections } = correctionsOf(new AdmissionGate());
    // A slot free in view, nobody waiting: it goes at once, charged nothing.
    const atOnce = await AdmissionSlot.enter(gate, deployment(), view, ticket({ flow: "o", cost: 40 }));
    if (typeof atOnce === "string") throw new Error(atOnce);
    // Refused by every replica: nothing to refund. Held again (through the queue), it is charged this time.
    expect(await atOnce.again()).toBe("go");
    expect(corrections).toEqual([]);
    // Refused again: that charge is refunded, once.
    expect(await atOnce.again()).toBe("go");
    expect(corrections).toEqual([[0, "o", 40, 0]]);
    atOnce.end();
  });

  it("used: corrects its flow's place by what it used, only when it was weighed by an estimate", async () => {
    const view = viewOf(1);
    const { gate, corrections } = correctionsOf(new AdmissionGate());
    const weighed = await AdmissionSlot.enter(gate, deployment(), view, ticket({ flow: "w", cost: 500 }));
    if (typeof weighed === "string") throw new Error(weighed);
    weighed.used(120);
    const unweighed = await AdmissionSlot.enter(gate, deployment(), view, ticket({ flow: "u" }));
    if (typeof unweighed === "string") throw new Error(unweighed);
    unweighed.used(7);
    expect(corrections).toEqual([[0, "w", 500, 120]]);
  });
});

describe("a request that meets a full fleet", () => {
  it("whose client has left already is gone at once; a sheddable one the replicas refused is shed even with a slot in view", async () => {
    const view = viewOf(1);
    take(view);
    const gate = new AdmissionGate();
    const left = new AbortController();
    left.abort();
    expect(await gate.enter(deployment(), view, ticket({ signal: left.signal }))).toEqual({ outcome: "gone", queued: false });
    expect(gate.held).toBe(0);
    free(view);
    expect(await gate.enter(deployment(), view, ticket({ priority: -1, again: true }))).toEqual({ outcome: "shed", queued: false });
  });

  it("pump lets nothing go before a request has shown the gate its view, or with nothing held", () => {
    const gate = new AdmissionGate();
    expect(gate.pump()).toBe(false);
  });
});

describe("refusals and shares", () => {
  it("each outcome's answer: its status, code, message and Retry-After", async () => {
    const d = deployment();
    const cases = [
      ["shed", 429, "shed", 'every replica of "d" is busy and this request is sheddable', "1"],
      ["expired", 503, "queue_timeout", 'no replica of "d" had a free slot within the request\'s wait', "1"],
      ["gone", 408, "request_timeout", "the client disconnected while its request was held", null],
    ] as const;
    for (const [outcome, status, code, message, retry] of cases) {
      const res = admissionRefusal(outcome, d, `r-${outcome}`);
      expect(res.status, outcome).toBe(status);
      expect(((await res.json()) as { error: unknown }).error, outcome).toMatchObject({ code, message, request_id: `r-${outcome}` });
      expect(res.headers.get("retry-after"), outcome).toBe(retry);
    }
  });

  it("a client's share of the pending cap: its own limit, else a quarter of the deployment's, at least 1", () => {
    expect(pendingShareOf(deployment({}, { maxPendingRequests: 10 }))).toBe(3);
    expect(pendingShareOf(deployment({}, { maxPendingRequests: 2 }))).toBe(1);
    expect(pendingShareOf(deployment({}, { maxPendingRequests: 10, maxPendingRequestsPerClient: 7 }))).toBe(7);
  });

  it("free slots: each replica's capacity less its load", () => {
    expect(freeSlots(viewOf(4, 1), Date.now())).toBe(3);
    expect(freeSlots(viewOf(4, 4), Date.now())).toBe(0);
    expect(freeSlots(new RoutingView(), Date.now())).toBe(-1);
  });

  it("a priority header: trimmed, at most four digits, a number alone; empty is absent", async () => {
    const d = deployment({ priorityHeader: "x-priority", maxPriority: 1 });
    const h = (v: string) => new Headers({ "x-priority": v });
    expect(priorityOf(d, h(" 1 "), undefined)).toEqual({ ok: true, priority: 1 });
    expect(priorityOf(d, h("-1000"), undefined)).toEqual({ ok: true, priority: -1000 });
    expect(priorityOf(d, h("   "), -3)).toEqual({ ok: true, priority: -3 });
    for (const bad of ["12345", "1x", "x1", "1.5", "--1"]) {
      const got = priorityOf(d, h(bad), undefined);
      expect(got.ok, bad).toBe(false);
      if (!got.ok) expect(((await got.response.json()) as { error: { message: string } }).error.message).toBe("x-priority: an integer or one of critical, standard, sheddable");
    }
  });

  it("a flow named by header is cut at 256 characters", () => {
    const d = deployment({ flowHeader: "x-tenant" });
    expect(flowOf(d, new Headers({ "x-tenant": "t".repeat(1000) }), "key:k")).toBe(`key:k\u0000${"t".repeat(256)}`);
    expect(flowOf(deployment(), new Headers({ undefined: "t" }), "key:k")).toBe("key:k");
  });
});
