/**
 * Outlier ejection (src/policy/circuit-breaker.ts), pure and through the routing
 * view (src/proxy/serve/view.ts). Time is explicit everywhere: no timers.
 */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import {
  MAX_EJECT_MS,
  breakerAllows,
  breakerDispatched,
  breakerFailed,
  breakerOpen,
  breakerSucceeded,
  newBreaker,
  type Breaker,
  type BreakerConfig,
} from "../../src/policy/circuit-breaker.ts";
import type { Load, ReplicaView, RoutingSnapshot } from "../../src/protocol/index.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { T0 } from "../fixtures/clock.ts";

const CFG: BreakerConfig = { ejectAfterFailures: 3, ejectBaseMs: 1_000 };

/** `n` failures at `now`; returns what each call returned. */
function fail(b: Breaker, n: number, now: number, cfg: BreakerConfig = CFG): boolean[] {
  const out: boolean[] = [];
  for (let i = 0; i < n; i++) out.push(breakerFailed(b, now, cfg));
  return out;
}

/** Ejects a fresh breaker at `now` (exactly `ejectAfterFailures` failures). */
function ejected(now: number, cfg: BreakerConfig = CFG): Breaker {
  const b = newBreaker();
  fail(b, cfg.ejectAfterFailures, now, cfg);
  return b;
}

/** Sends the half-open probe at `now` and fails it; returns breakerFailed's answer. */
function failProbe(b: Breaker, now: number, cfg: BreakerConfig = CFG): boolean {
  expect(breakerAllows(b, now)).toBe(true);
  breakerDispatched(b, now);
  expect(b.probing).toBe(true);
  return breakerFailed(b, now, cfg);
}

describe("breaker: closed", () => {
  it("starts closed with nothing counted", () => {
    const b = newBreaker();
    expect(b).toEqual({ failures: 0, openUntil: 0, ejections: 0, probing: false });
    expect(breakerAllows(b, T0)).toBe(true);
    expect(breakerOpen(b, T0)).toBe(false);
  });

  it("newBreaker returns independent objects", () => {
    const a = newBreaker();
    const b = newBreaker();
    expect(a).not.toBe(b);
    breakerFailed(a, T0, CFG);
    expect(b.failures).toBe(0);
  });

  it("dispatches while closed are not probes", () => {
    const b = newBreaker();
    for (let i = 0; i < 5; i++) breakerDispatched(b, T0 + i);
    expect(b.probing).toBe(false);
    expect(breakerAllows(b, T0 + 5)).toBe(true);
  });

  it("ejectAfterFailures - 1 failures in a row do not eject", () => {
    const b = newBreaker();
    expect(fail(b, 2, T0)).toEqual([false, false]);
    expect(b.failures).toBe(2);
    expect(b.openUntil).toBe(0);
    expect(breakerAllows(b, T0)).toBe(true);
    expect(breakerOpen(b, T0)).toBe(false);
  });

  it("the ejectAfterFailures-th failure in a row ejects for ejectBaseMs", () => {
    const b = newBreaker();
    expect(fail(b, 3, T0)).toEqual([false, false, true]);
    expect(b.ejections).toBe(1);
    expect(b.openUntil).toBe(T0 + 1_000);
    expect(breakerAllows(b, T0)).toBe(false);
    expect(breakerAllows(b, T0 + 999)).toBe(false);
    expect(breakerOpen(b, T0 + 999)).toBe(true);
  });

  it("the failures may be spread over time: only 'in a row' counts", () => {
    const b = newBreaker();
    expect(breakerFailed(b, T0, CFG)).toBe(false);
    expect(breakerFailed(b, T0 + 30_000, CFG)).toBe(false);
    expect(breakerFailed(b, T0 + 90_000, CFG)).toBe(true);
    // The cool-down starts at the failure that ejected.
    expect(b.openUntil).toBe(T0 + 90_000 + 1_000);
  });

  it("a success resets the failure count", () => {
    const b = newBreaker();
    fail(b, 2, T0);
    breakerSucceeded(b);
    expect(b.failures).toBe(0);
    expect(fail(b, 2, T0)).toEqual([false, false]);
    expect(breakerAllows(b, T0)).toBe(true);
    expect(breakerFailed(b, T0, CFG)).toBe(true);
  });

  it("ejectAfterFailures 1 ejects on the first failure", () => {
    const b = newBreaker();
    expect(breakerFailed(b, T0, { ejectAfterFailures: 1, ejectBaseMs: 250 })).toBe(true);
    expect(b.openUntil).toBe(T0 + 250);
  });

  it("ejectAfterFailures 0 never ejects, however many failures", () => {
    const cfg = { ejectAfterFailures: 0, ejectBaseMs: 1_000 };
    const b = newBreaker();
    const answers = fail(b, 1_000, T0, cfg);
    expect(answers.every((x) => x === false)).toBe(true);
    expect(b.failures).toBe(1_000);
    expect(b.openUntil).toBe(0);
    expect(b.ejections).toBe(0);
    expect(breakerAllows(b, T0)).toBe(true);
    expect(breakerOpen(b, T0)).toBe(false);
  });
});

describe("breaker: open and half-open", () => {
  it("lets one dispatch through once the cool-down is over (the probe)", () => {
    const b = ejected(T0);
    expect(breakerAllows(b, T0 + 1_000)).toBe(true);
    // Not a probe yet: not reported as ejected.
    expect(breakerOpen(b, T0 + 1_000)).toBe(false);
    breakerDispatched(b, T0 + 1_000);
    expect(b.probing).toBe(true);
    // Exactly one: nothing else goes while the probe is out, however late.
    expect(breakerAllows(b, T0 + 1_000)).toBe(false);
    expect(breakerAllows(b, T0 + 1_000_000)).toBe(false);
    expect(breakerOpen(b, T0 + 1_000_000)).toBe(true);
  });

  it("the probe may come long after the cool-down", () => {
    const b = ejected(T0);
    expect(breakerAllows(b, T0 + 3_600_000)).toBe(true);
    breakerDispatched(b, T0 + 3_600_000);
    expect(breakerAllows(b, T0 + 3_600_000)).toBe(false);
  });

  it("a dispatch before the cool-down ended is not a probe", () => {
    const b = ejected(T0);
    breakerDispatched(b, T0 + 999);
    expect(b.probing).toBe(false);
    expect(breakerAllows(b, T0 + 1_000)).toBe(true);
  });

  it("a successful probe closes the breaker and forgets the ejections", () => {
    const b = ejected(T0);
    breakerDispatched(b, T0 + 1_000);
    breakerSucceeded(b);
    expect(b).toEqual({ failures: 0, openUntil: 0, ejections: 0, probing: false });
    expect(breakerAllows(b, T0 + 1_000)).toBe(true);
    expect(breakerOpen(b, T0 + 1_000)).toBe(false);
    // A new streak needs ejectAfterFailures failures again and starts at the base cool-down.
    expect(fail(b, 3, T0 + 2_000)).toEqual([false, false, true]);
    expect(b.openUntil).toBe(T0 + 2_000 + 1_000);
  });

  it("a failed probe re-ejects at once with a doubled cool-down", () => {
    const b = ejected(T0);
    const t1 = T0 + 1_000;
    expect(failProbe(b, t1)).toBe(true);
    expect(b.probing).toBe(false);
    expect(b.ejections).toBe(2);
    expect(b.openUntil).toBe(t1 + 2_000);
    expect(breakerAllows(b, t1 + 1_999)).toBe(false);
    expect(breakerOpen(b, t1 + 1_999)).toBe(true);
    const t2 = t1 + 2_000;
    expect(failProbe(b, t2)).toBe(true);
    expect(b.openUntil).toBe(t2 + 4_000);
    const t3 = t2 + 4_000;
    expect(failProbe(b, t3)).toBe(true);
    expect(b.openUntil).toBe(t3 + 8_000);
  });

  it("a failed probe re-ejects even when the count is below a (since raised) threshold", () => {
    const b = ejected(T0);
    const raised = { ejectAfterFailures: 10, ejectBaseMs: 1_000 };
    expect(failProbe(b, T0 + 1_000, raised)).toBe(true);
    expect(b.openUntil).toBe(T0 + 1_000 + 2_000);
    expect(breakerAllows(b, T0 + 1_000)).toBe(false);
  });

  it("the cool-down doubles up to MAX_EJECT_MS and stays there", () => {
    const cfg = { ejectAfterFailures: 2, ejectBaseMs: 5_000 };
    const b = ejected(T0, cfg);
    const cooldowns = [b.openUntil - T0];
    let t = b.openUntil;
    for (let i = 0; i < 8; i++) {
      failProbe(b, t, cfg);
      cooldowns.push(b.openUntil - t);
      t = b.openUntil;
    }
    expect(cooldowns).toEqual([5_000, 10_000, 20_000, 40_000, MAX_EJECT_MS, MAX_EJECT_MS, MAX_EJECT_MS, MAX_EJECT_MS, MAX_EJECT_MS]);
    expect(MAX_EJECT_MS).toBe(60_000);
  });

  it("a base above MAX_EJECT_MS is capped from the first ejection", () => {
    const b = ejected(T0, { ejectAfterFailures: 1, ejectBaseMs: 120_000 });
    expect(b.openUntil).toBe(T0 + MAX_EJECT_MS);
  });

  it("a replica failing forever keeps a finite cool-down (no overflow to NaN/Infinity)", () => {
    const cfg = { ejectAfterFailures: 1, ejectBaseMs: 100 };
    const b = ejected(T0, cfg);
    let t = b.openUntil;
    for (let i = 0; i < 2_000; i++) {
      failProbe(b, t, cfg);
      expect(b.openUntil - t).toBe(i < 9 ? Math.min(MAX_EJECT_MS, 100 * 2 ** (i + 1)) : MAX_EJECT_MS);
      t = b.openUntil;
    }
    expect(Number.isFinite(b.openUntil)).toBe(true);
    expect(b.ejections).toBe(2_001);
  });

  it("success after a failed probe closes everything again", () => {
    const b = ejected(T0);
    failProbe(b, T0 + 1_000);
    breakerDispatched(b, T0 + 3_000);
    breakerSucceeded(b);
    expect(b).toEqual({ failures: 0, openUntil: 0, ejections: 0, probing: false });
    breakerFailed(b, T0 + 4_000, CFG);
    breakerFailed(b, T0 + 4_000, CFG);
    expect(breakerFailed(b, T0 + 4_000, CFG)).toBe(true);
    expect(b.openUntil).toBe(T0 + 5_000);
  });
});

// ---------------------------------------------------------------------------
// Through the routing view.

function load(over: Partial<Load> = {}): Load {
  return { seq: 1, ongoing: 0, queued: 0, max: 5, state: "ready", ...over };
}

function replica(id: string, over: Partial<Omit<ReplicaView, "load">> & { load?: Partial<Load> } = {}): ReplicaView {
  const { load: l, ...rest } = over;
  return { id, url: `http://${id}.test:8000`, epoch: 1, models: [], loading: [], expiresInMs: 3_600_000, ...rest, load: load(l) };
}

function snap(...replicas: ReplicaView[]): RoutingSnapshot {
  return { deployment: "hello", replicas };
}

const ids = (v: RoutingView, now: number) =>
  v
    .candidates(now)
    .map((e) => e.id)
    .sort();

const ejectedIds = (v: RoutingView, now: number) =>
  v
    .describe(now)
    .filter((r) => r.ejected)
    .map((r) => r.id)
    .sort();

function viewAB(now = T0): RoutingView {
  const v = new RoutingView();
  v.applySnapshot(snap(replica("a"), replica("b")), now);
  return v;
}

/** A dispatch to `id` that fails (start, end, failure), as dispatch.ts does it. */
function failedDispatch(v: RoutingView, id: string, now: number, cfg: BreakerConfig = CFG): boolean {
  const e = v.get(id)!;
  v.startDispatch(e, now);
  v.endDispatch(e);
  return v.recordFailure(e, now, cfg);
}

describe("RoutingView with outlier ejection", () => {
  it("skips an ejected replica until its cool-down ends and reports it as ejected", () => {
    const v = viewAB();
    expect(failedDispatch(v, "a", T0)).toBe(false);
    expect(failedDispatch(v, "a", T0)).toBe(false);
    expect(ids(v, T0)).toEqual(["a", "b"]);
    expect(ejectedIds(v, T0)).toEqual([]);
    expect(failedDispatch(v, "a", T0)).toBe(true);
    expect(ids(v, T0)).toEqual(["b"]);
    expect(ids(v, T0 + 999)).toEqual(["b"]);
    expect(ejectedIds(v, T0 + 999)).toEqual(["a"]);
    expect(v.describe(T0 + 999).find((r) => r.id === "b")!.ejected).toBe(false);
    // Ejection is not a cool-down from a connect failure.
    expect(v.describe(T0).find((r) => r.id === "a")!.coolingDownMs).toBe(0);
  });

  it("readyCount still counts an ejected replica (it ignores this isolate's cool-downs)", () => {
    const v = viewAB();
    for (let i = 0; i < 3; i++) failedDispatch(v, "a", T0);
    expect(v.readyCount(T0)).toBe(2);
  });

  it("lets it back for exactly one probe after the cool-down", () => {
    const v = viewAB();
    for (let i = 0; i < 3; i++) failedDispatch(v, "a", T0);
    const t = T0 + 1_000;
    expect(ids(v, t)).toEqual(["a", "b"]);
    expect(ejectedIds(v, t)).toEqual([]);
    const a = v.get("a")!;
    v.startDispatch(a, t);
    // The probe is out: no second dispatch, and it shows as ejected.
    expect(ids(v, t)).toEqual(["b"]);
    expect(ids(v, t + 60_000)).toEqual(["b"]);
    expect(ejectedIds(v, t)).toEqual(["a"]);
    expect(a.inflight).toBe(1);
  });

  it("a successful probe re-admits the replica", () => {
    const v = viewAB();
    for (let i = 0; i < 3; i++) failedDispatch(v, "a", T0);
    const a = v.get("a")!;
    v.startDispatch(a, T0 + 1_000);
    v.recordSuccess(a);
    v.endDispatch(a);
    expect(ids(v, T0 + 1_000)).toEqual(["a", "b"]);
    expect(ejectedIds(v, T0 + 1_000)).toEqual([]);
    // Several dispatches at once are fine again.
    v.startDispatch(a, T0 + 1_001);
    v.startDispatch(a, T0 + 1_001);
    expect(ids(v, T0 + 1_001)).toEqual(["a", "b"]);
    expect(a.breaker.probing).toBe(false);
  });

  it("a failed probe ejects it again for twice as long", () => {
    const v = viewAB();
    for (let i = 0; i < 3; i++) failedDispatch(v, "a", T0);
    const t = T0 + 1_000;
    expect(failedDispatch(v, "a", t)).toBe(true);
    expect(ids(v, t)).toEqual(["b"]);
    expect(ids(v, t + 1_999)).toEqual(["b"]);
    expect(ejectedIds(v, t + 1_999)).toEqual(["a"]);
    expect(ids(v, t + 2_000)).toEqual(["a", "b"]);
  });

  it("uses the deployment's policy as the breaker config (defaults: 3 failures, 5 s)", () => {
    const d = defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "text", text: "hi" } });
    const v = viewAB();
    expect(failedDispatch(v, "a", T0, d.policy)).toBe(false);
    expect(failedDispatch(v, "a", T0, d.policy)).toBe(false);
    expect(failedDispatch(v, "a", T0, d.policy)).toBe(true);
    expect(ids(v, T0 + 4_999)).toEqual(["b"]);
    expect(ids(v, T0 + 5_000)).toEqual(["a", "b"]);
  });

  it("ejectAfterFailures 0 in the policy never takes a replica out", () => {
    const d = defineDeployment({
      name: "hello",
      routePrefix: "/hello",
      backend: { kind: "text", text: "hi" },
      policy: { ejectAfterFailures: 0 },
    });
    const v = viewAB();
    for (let i = 0; i < 50; i++) expect(failedDispatch(v, "a", T0, d.policy)).toBe(false);
    expect(ids(v, T0)).toEqual(["a", "b"]);
    expect(ejectedIds(v, T0)).toEqual([]);
  });

  it("ejection survives a snapshot of the same replica", () => {
    const v = viewAB();
    for (let i = 0; i < 3; i++) failedDispatch(v, "a", T0);
    v.applySnapshot(snap(replica("a", { load: { seq: 2 } }), replica("b")), T0 + 10);
    expect(ids(v, T0 + 10)).toEqual(["b"]);
    expect(ejectedIds(v, T0 + 10)).toEqual(["a"]);
  });

  it("a re-registered replica (new epoch) starts with a closed breaker", () => {
    const v = viewAB();
    for (let i = 0; i < 3; i++) failedDispatch(v, "a", T0);
    v.applySnapshot(snap(replica("a", { epoch: 2, load: { seq: 0 } }), replica("b")), T0 + 10);
    expect(ids(v, T0 + 10)).toEqual(["a", "b"]);
    expect(ejectedIds(v, T0 + 10)).toEqual([]);
  });

  it("breakers are per replica", () => {
    const v = viewAB();
    failedDispatch(v, "a", T0);
    failedDispatch(v, "a", T0);
    failedDispatch(v, "b", T0);
    failedDispatch(v, "b", T0);
    // One more on a ejects a only.
    failedDispatch(v, "a", T0);
    expect(ids(v, T0)).toEqual(["b"]);
    // A success on b resets b's count only.
    v.recordSuccess(v.get("b")!);
    failedDispatch(v, "b", T0);
    failedDispatch(v, "b", T0);
    expect(ids(v, T0)).toEqual(["b"]);
  });
});

describe("breaker: regressions", () => {
  it("failures of requests in flight when the replica was ejected do not stretch the cool-down", () => {
    const b = newBreaker();
    // A replica crashed with five requests in flight: all five fail at once.
    expect(fail(b, 5, T0)).toEqual([false, false, true, false, false]);
    expect(b.ejections).toBe(1);
    expect(b.openUntil).toBe(T0 + 1_000);
  });

  const replica = (id: string) => ({
    id,
    url: `http://${id}.test`,
    epoch: 1,
    models: [],
    loading: [],
    expiresInMs: 600_000,
    load: { seq: 1, ongoing: 0, queued: 0, max: 4, state: "ready" as const },
  });

  it("a probe that ends with no verdict (an honest 'full') does not leave the replica ejected for good", () => {
    const view = new RoutingView();
    view.applySnapshot({ deployment: "d", replicas: [replica("a"), replica("b")] }, T0);
    const e = view.get("a")!;
    for (let i = 0; i < 3; i++) view.recordFailure(e, T0, CFG);
    expect(view.candidates(T0).map((c) => c.id)).toEqual(["b"]);
    const t = T0 + 1_000;
    view.startDispatch(e, t); // the probe
    expect(view.candidates(t).map((c) => c.id)).toEqual(["b"]);
    view.endDispatch(e); // refused as full: neither success nor failure
    expect(view.candidates(t).map((c) => c.id).sort()).toEqual(["a", "b"]);
  });

  it("panic routing: when every candidate is ejected, ejection is ignored", () => {
    const view = new RoutingView();
    view.applySnapshot({ deployment: "d", replicas: [replica("a"), replica("b")] }, T0);
    for (const id of ["a", "b"]) for (let i = 0; i < 3; i++) view.recordFailure(view.get(id)!, T0, CFG);
    expect(view.candidates(T0).map((c) => c.id).sort()).toEqual(["a", "b"]);
    // Exclusions and staleness still apply.
    expect(view.candidates(T0, new Set(["a"])).map((c) => c.id)).toEqual(["b"]);
  });
});
