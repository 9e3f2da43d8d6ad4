/** The autoscaling signal: Ray Serve's formula, smoothing factors, look-back averaging, up/down delays. Time injected. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import { Autoscaler, rawDesired, shouldAnnounce, type AutoscaleDecision, type AutoscalingConfig } from "../../src/policy/autoscale.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

/** Ray Serve's defaults, as defineDeployment fills them in. */
const RAY_DEFAULTS: AutoscalingConfig = defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "text", text: "hi" }, autoscaling: {} }).autoscaling!;

const cfg = (o: Partial<AutoscalingConfig> = {}): AutoscalingConfig => ({ ...RAY_DEFAULTS, ...o });

const S = 1000;

describe("Ray's defaults (via defineDeployment)", () => {
  it("are min 1, max 10, target 2, look-back 30 s, up 30 s, down 600 s, factors 1", () => {
    expect(RAY_DEFAULTS).toMatchObject({
      minReplicas: 1,
      maxReplicas: 10,
      targetOngoingRequests: 2,
      lookBackPeriodS: 30,
      upscaleDelayS: 30,
      downscaleDelayS: 600,
      upscalingFactor: 1,
      downscalingFactor: 1,
    });
  });
});

describe("rawDesired", () => {
  const wide = cfg({ minReplicas: 1, maxReplicas: 100 });

  it("keeps the current count when the load is on target (ratio 1)", () => {
    expect(rawDesired(2, 4, wide)).toBe(2);
    expect(rawDesired(5, 10, wide)).toBe(5);
  });

  it("follows ceil(current · (1 + (ratio − 1) · factor)) with ratio = avg / (target · current)", () => {
    // ratio 2 → double
    expect(rawDesired(2, 8, wide)).toBe(4);
    // ratio 1.25 → 2.5 → 3
    expect(rawDesired(2, 5, wide)).toBe(3);
    // ratio 0.25 → 1
    expect(rawDesired(4, 2, wide)).toBe(1);
    // ratio 13/16 → 6.5 → 7
    expect(rawDesired(8, 13, wide)).toBe(7);
    // ratio 1.0625 → 8.5 → 9
    expect(rawDesired(8, 17, wide)).toBe(9);
    // fractional target: 3 · 3 / (0.5 · 3) → 6
    expect(rawDesired(3, 3, cfg({ targetOngoingRequests: 0.5, maxReplicas: 100 }))).toBe(6);
  });

  it("rounds up: any load above target·current asks for one more", () => {
    expect(rawDesired(4, 8.01, wide)).toBe(5);
    expect(rawDesired(4, 7.99, wide)).toBe(4);
  });

  it("clamps to maxReplicas", () => {
    expect(rawDesired(2, 100, cfg({ maxReplicas: 10 }))).toBe(10);
    expect(rawDesired(10, 21, cfg({ maxReplicas: 10 }))).toBe(10);
    // Already above max (e.g. max lowered): asks for max even with the load on target.
    expect(rawDesired(12, 24, cfg({ maxReplicas: 10 }))).toBe(10);
  });

  it("clamps to minReplicas", () => {
    expect(rawDesired(4, 0, cfg({ minReplicas: 1 }))).toBe(1);
    expect(rawDesired(4, 0, cfg({ minReplicas: 3 }))).toBe(3);
    expect(rawDesired(4, 0, cfg({ minReplicas: 0 }))).toBe(0);
    expect(rawDesired(4, 1, cfg({ minReplicas: 2 }))).toBe(2);
  });

  it("from zero replicas with load: ceil(avg / target), at least min, at most max", () => {
    expect(rawDesired(0, 5, cfg({ minReplicas: 0 }))).toBe(3);
    expect(rawDesired(0, 1, cfg({ minReplicas: 0 }))).toBe(1);
    expect(rawDesired(0, 4, cfg({ minReplicas: 0 }))).toBe(2);
    expect(rawDesired(0, 1, cfg({ minReplicas: 2 }))).toBe(2);
    expect(rawDesired(0, 1000, cfg({ minReplicas: 0, maxReplicas: 10 }))).toBe(10);
    expect(rawDesired(0, 3, cfg({ minReplicas: 0, targetOngoingRequests: 0.5 }))).toBe(6);
  });

  it("from zero replicas without load: min", () => {
    expect(rawDesired(0, 0, cfg({ minReplicas: 0 }))).toBe(0);
    expect(rawDesired(0, 0, cfg({ minReplicas: 1 }))).toBe(1);
  });

  it("smooths upscaling with upscalingFactor (only when ratio > 1)", () => {
    // current 4, avg 16, target 2: ratio 2.
    expect(rawDesired(4, 16, cfg({ maxReplicas: 100, upscalingFactor: 1 }))).toBe(8);
    expect(rawDesired(4, 16, cfg({ maxReplicas: 100, upscalingFactor: 0.5 }))).toBe(6); // 4 · 1.5
    expect(rawDesired(4, 16, cfg({ maxReplicas: 100, upscalingFactor: 0.25 }))).toBe(5); // 4 · 1.25
    expect(rawDesired(4, 16, cfg({ maxReplicas: 100, upscalingFactor: 2 }))).toBe(12); // 4 · 3
    // The downscaling factor plays no part in an upscale.
    expect(rawDesired(4, 16, cfg({ maxReplicas: 100, downscalingFactor: 0.01 }))).toBe(8);
  });

  it("smooths downscaling with downscalingFactor (only when ratio < 1)", () => {
    // current 8, avg 4, target 2: ratio 0.25.
    expect(rawDesired(8, 4, cfg({ downscalingFactor: 1 }))).toBe(2);
    expect(rawDesired(8, 4, cfg({ downscalingFactor: 0.5 }))).toBe(5); // 8 · (1 − 0.375)
    expect(rawDesired(8, 4, cfg({ downscalingFactor: 0.25 }))).toBe(7); // 8 · 0.8125 = 6.5 → 7
    // The upscaling factor plays no part in a downscale.
    expect(rawDesired(8, 4, cfg({ upscalingFactor: 0.01 }))).toBe(2);
  });

  it("with factors 1, does not depend on current (= ceil(avg / target)) on exactly representable inputs", () => {
    for (const current of [1, 2, 4, 8]) {
      for (const avg of [0.5, 1, 2, 3, 4, 6, 8, 12, 16]) expect(rawDesired(current, avg, cfg({ maxReplicas: 100 })), `current ${current}, avg ${avg}`).toBe(Math.max(1, Math.ceil(avg / 2)));
    }
  });

  it("stays within [min, max] and is non-decreasing in the load", () => {
    const rnd = mulberry32(11);
    for (let trial = 0; trial < 200; trial++) {
      const min = Math.floor(rnd() * 3);
      const c = cfg({
        minReplicas: min,
        maxReplicas: min + 1 + Math.floor(rnd() * 20),
        targetOngoingRequests: 0.5 + rnd() * 4,
        upscalingFactor: 0.1 + rnd() * 2,
        downscalingFactor: 0.1 + rnd() * 2,
      });
      const current = Math.floor(rnd() * 15);
      let prev = -Infinity;
      for (let avg = 0; avg <= 80; avg += 0.5) {
        const r = rawDesired(current, avg, c);
        expect(Number.isInteger(r)).toBe(true);
        expect(r).toBeGreaterThanOrEqual(c.minReplicas);
        expect(r).toBeLessThanOrEqual(c.maxReplicas);
        expect(r).toBeGreaterThanOrEqual(prev);
        prev = r;
      }
    }
  });
});

describe("Autoscaler.decide", () => {
  /** Look-back short enough that the average is the latest sample (samples 10 s apart). */
  const instant = (o: Partial<AutoscalingConfig> = {}) => cfg({ lookBackPeriodS: 1, ...o });

  it("starts from the clamped current count", () => {
    expect(new Autoscaler().decide(T0, 3, instant()).desired).toBe(3);
    expect(new Autoscaler().decide(T0, 15, instant({ maxReplicas: 10 })).desired).toBe(10);
    expect(new Autoscaler().decide(T0, 0, instant({ minReplicas: 1 })).desired).toBe(1);
    expect(new Autoscaler().decide(T0, 0, instant({ minReplicas: 0 })).desired).toBe(0);
  });

  it("an unsettled count (members restored at a restart, not heard from) is answered, not latched as the starting point", () => {
    // A local stack killed with 8 replicas restarts with 2: the restored 8 must not become
    // the target that the downscale delay then holds for 600 s.
    const a = new Autoscaler();
    expect(a.decide(T0, 8, instant(), false)).toEqual<AutoscaleDecision>({ current: 8, desired: 8, raw: 8, averageOngoing: 0, pendingSince: null, settled: false });
    expect(a.decide(T0 + 3 * S, 2, instant({ minReplicas: 2 }))).toMatchObject({ desired: 2, settled: true });
    // Once latched, an unsettled look neither moves it nor starts a pending change.
    expect(a.decide(T0 + 4 * S, 8, instant({ minReplicas: 2 }), false)).toMatchObject({ desired: 2, pendingSince: null });
  });

  it("reports current, raw and the average load", () => {
    const a = new Autoscaler();
    a.sample(T0, 12, 1);
    const d = a.decide(T0, 2, instant());
    expect(d).toEqual<AutoscaleDecision>({ current: 2, desired: 2, raw: 6, averageOngoing: 12, pendingSince: T0, settled: true });
  });

  it("with no samples, the average is 0 (and wants min)", () => {
    const d = new Autoscaler().decide(T0, 3, instant());
    expect(d.averageOngoing).toBe(0);
    expect(d.raw).toBe(1);
    expect(d.desired).toBe(3);
    expect(d.pendingSince).toBe(T0);
  });

  it("no pending change while the load asks for the announced count", () => {
    const a = new Autoscaler();
    for (let t = 0; t <= 120; t += 10) {
      a.sample(T0 + t * S, 4, 1);
      const d = a.decide(T0 + t * S, 2, instant());
      expect(d.desired).toBe(2);
      expect(d.raw).toBe(2);
      expect(d.pendingSince).toBeNull();
    }
  });

  it("announces an upscale only after upscaleDelayS of continuously wanting it", () => {
    const a = new Autoscaler();
    const c = instant({ upscaleDelayS: 30 });
    a.sample(T0, 4, 1);
    expect(a.decide(T0, 2, c).desired).toBe(2);
    a.sample(T0 + 10 * S, 12, 1);
    let d = a.decide(T0 + 10 * S, 2, c);
    expect(d).toMatchObject({ desired: 2, raw: 6, pendingSince: T0 + 10 * S });
    a.sample(T0 + 20 * S, 12, 1);
    d = a.decide(T0 + 20 * S, 2, c);
    expect(d).toMatchObject({ desired: 2, pendingSince: T0 + 10 * S });
    // 1 ms short of the delay: still waiting.
    a.sample(T0 + 40 * S - 1, 12, 1);
    expect(a.decide(T0 + 40 * S - 1, 2, c)).toMatchObject({ desired: 2, pendingSince: T0 + 10 * S });
    // Exactly the delay: announced, nothing pending.
    a.sample(T0 + 40 * S, 12, 1);
    expect(a.decide(T0 + 40 * S, 2, c)).toMatchObject({ desired: 6, raw: 6, pendingSince: null });
    // And it stays.
    a.sample(T0 + 50 * S, 12, 1);
    expect(a.decide(T0 + 50 * S, 6, c)).toMatchObject({ desired: 6, raw: 6, pendingSince: null });
  });

  it("announces the latest figure wanted when the delay runs out (same direction keeps the timer)", () => {
    const a = new Autoscaler();
    const c = instant({ upscaleDelayS: 30 });
    a.decide(T0, 2, c); // desired 2
    const loads = [6, 10, 14, 8]; // raw 3, 5, 7, 4: all up
    loads.forEach((load, i) => {
      a.sample(T0 + (i + 1) * 10 * S, load, 1);
      const d = a.decide(T0 + (i + 1) * 10 * S, 2, c);
      if (i < 3) expect(d).toMatchObject({ desired: 2, pendingSince: T0 + 10 * S });
      else expect(d).toMatchObject({ desired: 4, raw: 4, pendingSince: null });
    });
  });

  it("a dip back to the announced count resets the upscale timer", () => {
    const a = new Autoscaler();
    const c = instant({ upscaleDelayS: 30 });
    const at = (t: number, load: number) => {
      a.sample(T0 + t * S, load, 1);
      return a.decide(T0 + t * S, 2, c);
    };
    at(0, 4);
    expect(at(10, 12).pendingSince).toBe(T0 + 10 * S);
    expect(at(20, 12).pendingSince).toBe(T0 + 10 * S);
    expect(at(30, 4)).toMatchObject({ desired: 2, pendingSince: null }); // dip
    expect(at(40, 12)).toMatchObject({ desired: 2, pendingSince: T0 + 40 * S });
    expect(at(50, 12).desired).toBe(2); // would have fired here without the dip
    expect(at(60, 12).desired).toBe(2);
    expect(at(70, 12)).toMatchObject({ desired: 6, pendingSince: null });
  });

  it("wanting the other way restarts the timer", () => {
    const a = new Autoscaler();
    const c = instant({ upscaleDelayS: 30, downscaleDelayS: 30 });
    const at = (t: number, load: number) => {
      a.sample(T0 + t * S, load, 1);
      return a.decide(T0 + t * S, 4, c);
    };
    at(0, 8); // desired 4
    expect(at(10, 16)).toMatchObject({ pendingSince: T0 + 10 * S, raw: 8 });
    expect(at(20, 16).pendingSince).toBe(T0 + 10 * S);
    expect(at(30, 2)).toMatchObject({ pendingSince: T0 + 30 * S, raw: 1 }); // now down
    expect(at(40, 16)).toMatchObject({ pendingSince: T0 + 40 * S, desired: 4 }); // up again, fresh timer
    expect(at(60, 16).desired).toBe(4);
    expect(at(70, 16).desired).toBe(8);
  });

  it("announces a downscale only after downscaleDelayS of continuously wanting it", () => {
    const a = new Autoscaler();
    const c = instant({ downscaleDelayS: 600, upscaleDelayS: 30 });
    const at = (t: number, load: number) => {
      a.sample(T0 + t * S, load, 1);
      return a.decide(T0 + t * S, 8, c);
    };
    expect(at(0, 16).desired).toBe(8);
    for (let t = 10; t < 610; t += 10) expect(at(t, 4), `t=${t}`).toMatchObject({ desired: 8, raw: 2, pendingSince: T0 + 10 * S });
    expect(at(610, 4)).toMatchObject({ desired: 2, pendingSince: null });
  });

  it("the downscale delay is not the upscale delay (and vice versa)", () => {
    const c = instant({ upscaleDelayS: 5, downscaleDelayS: 50 });
    const up = new Autoscaler();
    up.decide(T0, 2, c);
    up.sample(T0 + 1, 40, 1);
    up.decide(T0 + 1, 2, c);
    up.sample(T0 + 5 * S + 1, 40, 1);
    expect(up.decide(T0 + 5 * S + 1, 2, c).desired).toBe(10);

    const down = new Autoscaler();
    down.decide(T0, 8, c);
    down.sample(T0 + 1, 0, 1);
    down.decide(T0 + 1, 8, c);
    down.sample(T0 + 5 * S + 1, 0, 1);
    expect(down.decide(T0 + 5 * S + 1, 8, c).desired).toBe(8);
    down.sample(T0 + 50 * S + 1, 0, 1);
    expect(down.decide(T0 + 50 * S + 1, 8, c).desired).toBe(1);
  });

  it("with a zero delay, announces at once", () => {
    const a = new Autoscaler();
    const c = instant({ upscaleDelayS: 0, downscaleDelayS: 0 });
    a.decide(T0, 2, c);
    a.sample(T0 + 10 * S, 12, 1);
    expect(a.decide(T0 + 10 * S, 2, c)).toMatchObject({ desired: 6, pendingSince: null });
    a.sample(T0 + 20 * S, 0, 1);
    expect(a.decide(T0 + 20 * S, 6, c)).toMatchObject({ desired: 1, pendingSince: null });
  });

  it("scales up from zero replicas at once, not after the delay (requests are held for them)", () => {
    const a = new Autoscaler();
    const c = instant({ minReplicas: 0, upscaleDelayS: 30 });
    expect(a.decide(T0, 0, c).desired).toBe(0);
    a.sample(T0 + S, 5, 1);
    expect(a.decide(T0 + S, 0, c)).toMatchObject({ desired: 3, raw: 3, pendingSince: null });
  });
});

describe("Autoscaler look-back averaging", () => {
  it("averages the samples within lookBackPeriodS (inclusive), dropping older ones", () => {
    const a = new Autoscaler();
    const c = cfg({ lookBackPeriodS: 30 });
    a.sample(T0, 100, 30);
    a.sample(T0 + 10 * S, 2, 30);
    a.sample(T0 + 20 * S, 4, 30);
    a.sample(T0 + 30 * S, 6, 30);
    // Window [T0, T0+30 s]: all four.
    expect(a.decide(T0 + 30 * S, 2, c).averageOngoing).toBe(28);
    // 1 ms later the first falls out.
    expect(a.decide(T0 + 30 * S + 1, 2, c).averageOngoing).toBe(4);
    // Much later, nothing is left.
    expect(a.decide(T0 + 61 * S, 2, c).averageOngoing).toBe(0);
  });

  it("sample() forgets samples older than its own look-back", () => {
    const a = new Autoscaler();
    a.sample(T0, 100, 10);
    a.sample(T0 + 20 * S, 2, 10); // T0 is now 20 s old: pruned
    // Even a decision with a longer look-back no longer sees it.
    expect(a.decide(T0 + 20 * S, 2, cfg({ lookBackPeriodS: 60 })).averageOngoing).toBe(2);
  });

  it("a decision with a shorter look-back ignores older samples that sample() kept", () => {
    const a = new Autoscaler();
    a.sample(T0, 100, 60);
    a.sample(T0 + 20 * S, 2, 60);
    expect(a.decide(T0 + 20 * S, 2, cfg({ lookBackPeriodS: 10 })).averageOngoing).toBe(2);
    expect(a.decide(T0 + 20 * S, 2, cfg({ lookBackPeriodS: 60 })).averageOngoing).toBe(51);
  });

  it("a short spike is averaged down", () => {
    const a = new Autoscaler();
    const c = cfg({ lookBackPeriodS: 30 });
    for (let t = 0; t <= 20; t += 10) a.sample(T0 + t * S, 4, 30);
    a.sample(T0 + 30 * S, 28, 30); // one sample of 28 among 4s
    const d = a.decide(T0 + 30 * S, 2, c);
    expect(d.averageOngoing).toBe(10);
    expect(d.raw).toBe(5); // not 14
  });
});

describe("scenario: Ray's defaults, load ramps up then down", () => {
  /**
   * Every 10 s: sample the fleet's load, decide, and let the (external)
   * autoscaler act at once (current = desired). target 2, look-back 30 s (4
   * samples), up 30 s, down 600 s, min 1, max 10, start at 2 replicas.
   */
  function run(load: (t: number) => number, until = 1200) {
    const a = new Autoscaler();
    const c = RAY_DEFAULTS;
    let current = 2;
    const out = new Map<number, AutoscaleDecision>();
    for (let t = 0; t <= until; t += 10) {
      a.sample(T0 + t * S, load(t), c.lookBackPeriodS);
      const d = a.decide(T0 + t * S, current, c);
      out.set(t, d);
      current = d.desired;
    }
    return out;
  }

  // 4 ongoing (on target for 2 replicas), 16 from 120 s to 300 s, a short
  // return to 16 from 360 s to 400 s, then 4 for good.
  const load = (t: number) => (t >= 120 && t < 300) || (t >= 360 && t < 400) ? 16 : 4;

  it("follows the expected desired series", () => {
    const ds = run(load);
    const desired = (t: number) => ds.get(t)!.desired;
    // Steady at 2 until the ramp has been wanted for 30 s.
    for (let t = 0; t < 150; t += 10) expect(desired(t), `t=${t}`).toBe(2);
    // The look-back smooths the ramp: raw 4, 5, 7, then 8.
    expect([120, 130, 140, 150].map((t) => ds.get(t)!.raw)).toEqual([4, 5, 7, 8]);
    expect([120, 130, 140].map((t) => ds.get(t)!.pendingSince)).toEqual([T0 + 120 * S, T0 + 120 * S, T0 + 120 * S]);
    // Up at 150 s (30 s after 120 s), to the figure wanted then.
    for (let t = 150; t < 1000; t += 10) expect(desired(t), `t=${t}`).toBe(8);
    expect(ds.get(150)!.pendingSince).toBeNull();
    // The drop at 300 s starts a downscale timer…
    expect(ds.get(300)).toMatchObject({ raw: 7, pendingSince: T0 + 300 * S });
    expect(ds.get(330)).toMatchObject({ raw: 2, pendingSince: T0 + 300 * S });
    // …which the return to 16 (raw back to 8 at 390 s) resets.
    expect(ds.get(390)).toMatchObject({ raw: 8, pendingSince: null });
    expect(ds.get(400)).toMatchObject({ raw: 7, pendingSince: T0 + 400 * S });
    expect(ds.get(990)).toMatchObject({ desired: 8, raw: 2, pendingSince: T0 + 400 * S });
    // Down at 1000 s: 600 s after 400 s.
    for (let t = 1000; t <= 1200; t += 10) expect(desired(t), `t=${t}`).toBe(2);
    expect(ds.get(1000)!.pendingSince).toBeNull();
    expect(ds.get(1200)).toMatchObject({ current: 2, desired: 2, raw: 2, averageOngoing: 4, pendingSince: null });
  });

  it("the announced series changes exactly twice", () => {
    const ds = run(load);
    const changes: [number, number][] = [];
    let prev: number | null = null;
    for (const [t, d] of ds) {
      if (d.desired !== prev) changes.push([t, d.desired]);
      prev = d.desired;
    }
    expect(changes).toEqual([
      [0, 2],
      [150, 8],
      [1000, 2],
    ]);
  });

  it("without the second burst, the downscale comes 600 s after the drop", () => {
    const ds = run((t) => (t >= 120 && t < 300 ? 16 : 4));
    expect(ds.get(890)!.desired).toBe(8);
    expect(ds.get(900)).toMatchObject({ desired: 2, pendingSince: null });
  });

  it("a one-sample burst stays in the 30 s average for exactly the 30 s upscale delay, so it scales up", () => {
    // 16 at 120 s only: the window [t − 30 s, t] holds it from 120 s to 150 s inclusive,
    // average (4 + 4 + 4 + 16) / 4 = 7 → raw ceil(2 · 7/4) = 4 throughout.
    const ds = run((t) => (t === 120 ? 16 : 4), 400);
    expect([120, 130, 140].map((t) => ds.get(t)!.raw)).toEqual([4, 4, 4]);
    expect(ds.get(140)).toMatchObject({ desired: 2, pendingSince: T0 + 120 * S });
    expect(ds.get(150)).toMatchObject({ desired: 4, raw: 4, pendingSince: null });
    expect(ds.get(160)).toMatchObject({ desired: 4, raw: 2, pendingSince: T0 + 160 * S });
  });

  it("a burst that leaves a shorter look-back before the upscale delay does not scale up", () => {
    const a = new Autoscaler();
    const c = cfg({ lookBackPeriodS: 20 });
    const seen: AutoscaleDecision[] = [];
    for (let t = 0; t <= 300; t += 10) {
      a.sample(T0 + t * S, t === 120 ? 16 : 4, c.lookBackPeriodS);
      seen.push(a.decide(T0 + t * S, 2, c));
    }
    expect(seen.every((d) => d.desired === 2)).toBe(true);
    expect(seen[12]).toMatchObject({ raw: 4, pendingSince: T0 + 120 * S }); // (4 + 4 + 16) / 3 = 8 → ceil(8 / 2) = 4
    expect(seen[14]).toMatchObject({ raw: 4, pendingSince: T0 + 120 * S });
    expect(seen[15]).toMatchObject({ raw: 2, pendingSince: null }); // 150 s: out of the window, timer reset
  });
});

describe("rawDesired: floating point", () => {
  const cfg = { minReplicas: 1, maxReplicas: 100, targetOngoingRequests: 2, lookBackPeriodS: 30, upscaleDelayS: 30, downscaleDelayS: 600, upscalingFactor: 1, downscalingFactor: 1 };
  it("does not round a whole result up by one (10 · 6/20 = 3, 9 · 2/18 = 1, 7 · 58/14 = 29)", () => {
    expect(rawDesired(10, 6, cfg)).toBe(3);
    expect(rawDesired(9, 2, cfg)).toBe(1);
    expect(rawDesired(7, 58, cfg)).toBe(29);
  });
});

describe("shouldAnnounce (the webhook)", () => {
  it("stays quiet at a steady state, including the first look after a (re)start", () => {
    expect(shouldAnnounce(null, { current: 3, desired: 3 })).toBe(false);
    expect(shouldAnnounce(3, { current: 3, desired: 3 })).toBe(false);
  });

  it("announces a first look that already wants another size (a late first alarm under load)", () => {
    expect(shouldAnnounce(null, { current: 1, desired: 5 })).toBe(true);
    expect(shouldAnnounce(null, { current: 4, desired: 2 })).toBe(true);
  });

  it("announces each change from the last announcement, whatever the fleet's size", () => {
    expect(shouldAnnounce(5, { current: 1, desired: 5 })).toBe(false);
    expect(shouldAnnounce(5, { current: 5, desired: 1 })).toBe(true);
    expect(shouldAnnounce(1, { current: 1, desired: 2 })).toBe(true);
  });
});

describe("scale from zero and back (minReplicas 0)", () => {
  const zero = cfg({ minReplicas: 0, maxReplicas: 4, upscaleDelayS: 30, downscaleDelayS: 60 });

  it("wants the first replica at once when requests are held at zero, not after the upscale delay", () => {
    const a = new Autoscaler();
    expect(a.decide(T0, 0, zero).desired).toBe(0);
    a.sample(T0 + S, 3, zero.lookBackPeriodS); // three requests held at the edge
    const d = a.decide(T0 + S, 0, zero);
    expect(d.desired).toBe(2); // ceil(3 held / 2 per replica)
    expect(d.pendingSince).toBeNull();
  });

  it("scales beyond the first replica only after the upscale delay, as before", () => {
    const a = new Autoscaler();
    a.sample(T0, 1, zero.lookBackPeriodS);
    expect(a.decide(T0, 0, zero).desired).toBe(1);
    a.sample(T0 + S, 8, zero.lookBackPeriodS);
    expect(a.decide(T0 + S, 1, zero).desired).toBe(1);
    expect(a.decide(T0 + 31 * S, 1, zero).desired).toBeGreaterThan(1);
  });

  it("returns to 0 after the downscale delay once nothing is left, even with a downscaling factor below 1", () => {
    const slow = { ...zero, downscalingFactor: 0.3 };
    expect(rawDesired(1, 0, slow)).toBe(0);
    expect(rawDesired(1, 0.1, slow)).toBe(1);
    expect(rawDesired(1, 0, { ...slow, minReplicas: 1 })).toBe(1);
    const a = new Autoscaler();
    a.sample(T0, 1, slow.lookBackPeriodS);
    expect(a.decide(T0, 0, slow).desired).toBe(1);
    // Idle from now: the last sample leaves the 30 s look-back, then the 60 s delay runs.
    a.sample(T0 + 31 * S, 0, slow.lookBackPeriodS);
    expect(a.decide(T0 + 31 * S, 1, slow).desired).toBe(1);
    expect(a.decide(T0 + 90 * S, 1, slow).desired).toBe(1);
    expect(a.decide(T0 + 91 * S, 1, slow).desired).toBe(0);
  });
});
