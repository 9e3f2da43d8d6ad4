/** The Telemetry object's state: totals summed over isolates, 5 s windows, live isolates. Time injected. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { WINDOW_T0, deploymentDelta, histogramOf } from "../fixtures/telemetry.ts";
import { emptyHistogram } from "../../src/telemetry/histogram.ts";
import { LATENCY_BUCKETS_S, type DeploymentDelta, type TelemetryFlush } from "../../src/telemetry/types.ts";
import { TelemetryWindows, WINDOWS_KEPT, WINDOW_MS } from "../../src/telemetry/windows.ts";

const flush = (isolate: string, sentAt: number, ...deltas: DeploymentDelta[]): TelemetryFlush => ({ isolate, sentAt, deltas });

describe("TelemetryWindows.totals", () => {
  it("is all zeros for a deployment never heard of", () => {
    const w = new TelemetryWindows();
    const t = w.totals("nope");
    expect(t.deployment).toBe("nope");
    expect(t.requests).toEqual({ "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0 });
    expect(t.retries + t.rejections + t.ejections).toBe(0);
    expect(t.duration).toEqual(emptyHistogram());
    expect(t.ttfb).toEqual(emptyHistogram());
  });

  it("sums counters and histograms (bucket-wise) over isolates and flushes", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 3, "5xx": 1 }, retries: 2, rejections: 1, ejections: 0, duration: histogramOf(0.003, 0.2), ttfb: histogramOf(0.001) })), WINDOW_T0);
    w.ingest(flush("i2", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 1, "3xx": 2, "4xx": 4 }, retries: 1, rejections: 0, ejections: 1, duration: histogramOf(0.003, 100), ttfb: histogramOf(0.3) })), WINDOW_T0 + 100);
    w.ingest(flush("i1", WINDOW_T0 + 2_000, deploymentDelta("a", { requests: { "5xx": 2 }, retries: 0, rejections: 3, ejections: 2, duration: histogramOf(7), ttfb: histogramOf(0.001, 0.3) })), WINDOW_T0 + 2_000);

    const t = w.totals("a");
    expect(t.deployment).toBe("a");
    expect(t.requests).toEqual({ "2xx": 4, "3xx": 2, "4xx": 4, "5xx": 3 });
    expect(t.retries).toBe(3);
    expect(t.rejections).toBe(4);
    expect(t.ejections).toBe(3);
    expect(t.duration.buckets).toEqual(histogramOf(0.003, 0.2, 0.003, 100, 7).buckets);
    expect(t.duration.buckets[0]).toBe(2);
    expect(t.duration.buckets[LATENCY_BUCKETS_S.length]).toBe(1);
    expect(t.duration.count).toBe(5);
    expect(t.duration.sum).toBeCloseTo(0.003 + 0.2 + 0.003 + 100 + 7, 9);
    expect(t.ttfb.buckets).toEqual(histogramOf(0.001, 0.3, 0.001, 0.3).buckets);
    expect(t.ttfb.count).toBe(4);
  });

  it("keeps deployments apart, including several in one flush", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 5 } }), deploymentDelta("b", { requests: { "4xx": 2 }, retries: 7 })), WINDOW_T0);
    expect(w.totals("a").requests).toEqual({ "2xx": 5, "3xx": 0, "4xx": 0, "5xx": 0 });
    expect(w.totals("a").retries).toBe(0);
    expect(w.totals("b").requests).toEqual({ "2xx": 0, "3xx": 0, "4xx": 2, "5xx": 0 });
    expect(w.totals("b").retries).toBe(7);
  });

  it("returns a copy: mutating it does not change the state", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 1 }, duration: histogramOf(0.1) })), WINDOW_T0);
    const t = w.totals("a");
    t.requests["2xx"] = 999;
    t.retries = 999;
    t.duration.buckets[0] = 999;
    t.duration.count = 999;
    t.ttfb.sum = 999;
    const again = w.totals("a");
    expect(again.requests["2xx"]).toBe(1);
    expect(again.retries).toBe(0);
    expect(again.duration.buckets[0]).toBe(0);
    expect(again.duration.count).toBe(1);
    expect(again.ttfb.sum).toBe(0);
    // And later ingests do not show up in a copy taken earlier.
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 1 } })), WINDOW_T0 + 1);
    expect(again.requests["2xx"]).toBe(1);
    expect(w.totals("a").requests["2xx"]).toBe(2);
  });

  it("does not keep a reference to the ingested delta (later mutation of it is harmless)", () => {
    const w = new TelemetryWindows();
    const d = deploymentDelta("a", { requests: { "2xx": 1 }, duration: histogramOf(0.1) });
    w.ingest(flush("i1", WINDOW_T0, d), WINDOW_T0);
    d.requests["2xx"] = 50;
    d.duration.buckets[4] = 50;
    expect(w.totals("a").requests["2xx"]).toBe(1);
    expect(w.totals("a").duration.buckets[4]).toBe(1);
  });
});

describe("TelemetryWindows.series", () => {
  it("returns exactly WINDOWS_KEPT points, oldest first, ending at the current window", () => {
    const w = new TelemetryWindows();
    const now = WINDOW_T0 + 3_217; // inside the window starting at WINDOW_T0
    const s = w.series("a", now);
    expect(s).toHaveLength(WINDOWS_KEPT);
    expect(s[s.length - 1]!.t).toBe(WINDOW_T0);
    expect(s[0]!.t).toBe(WINDOW_T0 - (WINDOWS_KEPT - 1) * WINDOW_MS);
    for (let i = 1; i < s.length; i++) expect(s[i]!.t - s[i - 1]!.t).toBe(WINDOW_MS);
  });

  it("fills windows without data with zero rates and null percentiles", () => {
    const w = new TelemetryWindows();
    for (const p of w.series("a", WINDOW_T0)) expect(p).toEqual({ t: p.t, requestsPerSecond: 0, errorsPerSecond: 0, p50Ms: null, p99Ms: null });
  });

  it("puts each flush in the window of its arrival time (now), not its sentAt", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0 - 60_000, deploymentDelta("a", { requests: { "2xx": 5 } })), WINDOW_T0 + 4_999);
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 10 } })), WINDOW_T0 + 5_000);
    const s = w.series("a", WINDOW_T0 + 5_000);
    expect(s.at(-1)).toMatchObject({ t: WINDOW_T0 + 5_000, requestsPerSecond: 2 });
    expect(s.at(-2)).toMatchObject({ t: WINDOW_T0, requestsPerSecond: 1 });
    expect(s.slice(0, -2).every((p) => p.requestsPerSecond === 0)).toBe(true);
  });

  it("requestsPerSecond = all requests in the window / 5; errorsPerSecond counts 5xx only", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 7, "3xx": 1, "4xx": 4, "5xx": 3 } })), WINDOW_T0 + 1_000);
    w.ingest(flush("i2", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 3, "5xx": 2 } })), WINDOW_T0 + 2_000);
    const p = w.series("a", WINDOW_T0 + 4_000).at(-1)!;
    expect(p.t).toBe(WINDOW_T0);
    expect(p.requestsPerSecond).toBe(20 / 5);
    expect(p.errorsPerSecond).toBe(5 / 5); // 4xx are not errors here
  });

  it("4xx-only traffic has zero errors per second", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "4xx": 10 } })), WINDOW_T0);
    const p = w.series("a", WINDOW_T0).at(-1)!;
    expect(p.requestsPerSecond).toBe(2);
    expect(p.errorsPerSecond).toBe(0);
  });

  it("p50/p99 come from the window's duration histogram, in ms", () => {
    const w = new TelemetryWindows();
    // 10 durations: 8 in (0.01, 0.025], 2 in (0.1, 0.25]; from two isolates.
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 6 }, duration: histogramOf(0.02, 0.02, 0.02, 0.02, 0.02, 0.2) })), WINDOW_T0 + 100);
    w.ingest(flush("i2", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 4 }, duration: histogramOf(0.02, 0.02, 0.02, 0.2) })), WINDOW_T0 + 200);
    const p = w.series("a", WINDOW_T0 + 300).at(-1)!;
    // p50: rank 5 of 8 in (0.01,0.025] → 0.01 + 0.015·5/8 = 0.019375 s
    expect(p.p50Ms).toBeCloseTo(19.375, 9);
    // p99: rank 9.9 → (0.1,0.25], 1.9 of 2 → 0.1 + 0.15·0.95 = 0.2425 s
    expect(p.p99Ms).toBeCloseTo(242.5, 9);
  });

  it("percentiles use only the window's own durations, not the totals", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 1 }, duration: histogramOf(50) })), WINDOW_T0);
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 1 }, duration: histogramOf(0.002) })), WINDOW_T0 + WINDOW_MS);
    const s = w.series("a", WINDOW_T0 + WINDOW_MS);
    expect(s.at(-1)!.p50Ms).toBeCloseTo(2.5, 9); // 0.0025 s
    expect(s.at(-2)!.p50Ms).toBeCloseTo(45_000, 6); // rank 0.5 of 1 in (30, 60] → 30 + 30·0.5 = 45 s
  });

  it("a window with requests but no durations has null percentiles", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 3 } })), WINDOW_T0);
    const p = w.series("a", WINDOW_T0).at(-1)!;
    expect(p.requestsPerSecond).toBeCloseTo(0.6, 12);
    expect(p.p50Ms).toBeNull();
    expect(p.p99Ms).toBeNull();
  });

  it("keeps deployments' windows apart", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 5 } }), deploymentDelta("b", { requests: { "5xx": 10 } })), WINDOW_T0);
    expect(w.series("a", WINDOW_T0).at(-1)).toMatchObject({ requestsPerSecond: 1, errorsPerSecond: 0 });
    expect(w.series("b", WINDOW_T0).at(-1)).toMatchObject({ requestsPerSecond: 2, errorsPerSecond: 2 });
    expect(w.series("c", WINDOW_T0).at(-1)).toMatchObject({ requestsPerSecond: 0, errorsPerSecond: 0 });
  });

  it("windows slide out of the series as time passes", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", WINDOW_T0, deploymentDelta("a", { requests: { "2xx": 5 } })), WINDOW_T0);
    // Still the oldest point WINDOWS_KEPT−1 windows later…
    const later = WINDOW_T0 + (WINDOWS_KEPT - 1) * WINDOW_MS;
    const s1 = w.series("a", later);
    expect(s1[0]).toMatchObject({ t: WINDOW_T0, requestsPerSecond: 1 });
    // …and gone one window after that.
    const s2 = w.series("a", later + WINDOW_MS);
    expect(s2[0]!.t).toBe(WINDOW_T0 + WINDOW_MS);
    expect(s2.every((p) => p.requestsPerSecond === 0)).toBe(true);
  });

  it("drops windows beyond the WINDOWS_KEPT most recent ones", () => {
    const w = new TelemetryWindows();
    // Traffic in WINDOWS_KEPT + 1 consecutive windows, i+1 requests in window i.
    for (let i = 0; i <= WINDOWS_KEPT; i++) w.ingest(flush("i1", 0, deploymentDelta("a", { requests: { "2xx": (i + 1) * 5 } })), WINDOW_T0 + i * WINDOW_MS);
    // Looking back from the second-to-last window, the series covers windows 0..WINDOWS_KEPT−1;
    // window 0 was dropped when window WINDOWS_KEPT arrived.
    const s = w.series("a", WINDOW_T0 + (WINDOWS_KEPT - 1) * WINDOW_MS);
    expect(s[0]).toMatchObject({ t: WINDOW_T0, requestsPerSecond: 0 });
    expect(s[1]).toMatchObject({ t: WINDOW_T0 + WINDOW_MS, requestsPerSecond: 2 });
    expect(s.at(-1)).toMatchObject({ requestsPerSecond: WINDOWS_KEPT });
    // From the latest window all WINDOWS_KEPT points have data.
    const latest = w.series("a", WINDOW_T0 + WINDOWS_KEPT * WINDOW_MS);
    expect(latest.map((p) => p.requestsPerSecond)).toEqual(Array.from({ length: WINDOWS_KEPT }, (_, i) => i + 2));
  });

  it("shows gaps between windows with data as zeros", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", 0, deploymentDelta("a", { requests: { "2xx": 5 } })), WINDOW_T0);
    w.ingest(flush("i1", 0, deploymentDelta("a", { requests: { "2xx": 10 } })), WINDOW_T0 + 3 * WINDOW_MS + 1);
    const s = w.series("a", WINDOW_T0 + 3 * WINDOW_MS + 2);
    expect(s.slice(-4).map((p) => p.requestsPerSecond)).toEqual([1, 0, 0, 2]);
    expect(s.slice(-4).map((p) => p.p50Ms)).toEqual([null, null, null, null]);
  });
});

describe("TelemetryWindows.liveIsolates", () => {
  it("counts distinct isolates heard within 30 s (inclusive)", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", 0, deploymentDelta("a")), WINDOW_T0);
    w.ingest(flush("i2", 0, deploymentDelta("a")), WINDOW_T0 + 10_000);
    w.ingest(flush("i1", 0, deploymentDelta("b")), WINDOW_T0 + 20_000); // same isolate again
    expect(w.liveIsolates(WINDOW_T0 + 20_000)).toBe(2);
    expect(w.liveIsolates(WINDOW_T0 + 40_000)).toBe(2); // i2 exactly 30 s ago
    expect(w.liveIsolates(WINDOW_T0 + 40_001)).toBe(1); // i2 31 s ago → gone
    expect(w.liveIsolates(WINDOW_T0 + 50_000)).toBe(1); // i1 heard at +20 s
    expect(w.liveIsolates(WINDOW_T0 + 50_001)).toBe(0);
  });

  it("counts an isolate whose flush had no deltas", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", 0), WINDOW_T0);
    expect(w.liveIsolates(WINDOW_T0)).toBe(1);
  });

  it("honours a custom window", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", 0, deploymentDelta("a")), WINDOW_T0);
    w.ingest(flush("i2", 0, deploymentDelta("a")), WINDOW_T0 + 4_000);
    expect(w.liveIsolates(WINDOW_T0 + 5_000, 1_000)).toBe(1);
  });

  it("forgets isolates it found stale (they do not come back for an earlier `now`)", () => {
    const w = new TelemetryWindows();
    w.ingest(flush("i1", 0, deploymentDelta("a")), WINDOW_T0);
    expect(w.liveIsolates(WINDOW_T0 + 30_001)).toBe(0);
    expect(w.liveIsolates(WINDOW_T0)).toBe(0);
    // Heard again: counted again.
    w.ingest(flush("i1", 0, deploymentDelta("a")), WINDOW_T0 + 60_000);
    expect(w.liveIsolates(WINDOW_T0 + 60_000)).toBe(1);
  });

  it("is zero with nothing ingested", () => {
    expect(new TelemetryWindows().liveIsolates(WINDOW_T0)).toBe(0);
  });
});
