/** Telemetry shards: an isolate's shard, and the merges of shards' totals, windows and reports. Pure; time injected. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { WINDOW_T0, deploymentDelta, histogramOf } from "../fixtures/telemetry.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { quantile } from "../../src/telemetry/histogram.ts";
import { TELEMETRY_SHARDS, mergeReports, mergeWindows, sumTotals, telemetryShardName, telemetryShardOf, type ShardReport } from "../../src/telemetry/telemetry-shards.ts";
import { LATENCY_BUCKETS_S, type DeploymentTotals, type TelemetryFlush } from "../../src/telemetry/types.ts";
import { TelemetryWindows, WINDOW_MS, emptyWindow, seriesOf, type WindowCounts } from "../../src/telemetry/windows.ts";

const win = (t: number, requests: number, errors: number, ...durations: number[]): WindowCounts => ({ t, requests, errors, duration: histogramOf(...durations) });

/** UUID-shaped ids (what ProxyMetrics uses), from a fixed seed. */
function uuids(n: number, seed = 7): string[] {
  const rnd = mulberry32(seed);
  const hex = (k: number) => Array.from({ length: k }, () => Math.floor(rnd() * 16).toString(16)).join("");
  return Array.from({ length: n }, () => `${hex(8)}-${hex(4)}-4${hex(3)}-a${hex(3)}-${hex(12)}`);
}

describe("telemetryShardOf", () => {
  it("names shards telemetry/<k>, apart from the dashboard's 'global' object", () => {
    expect(TELEMETRY_SHARDS).toBe(16);
    expect(telemetryShardName(0)).toBe("telemetry/0");
    expect(telemetryShardName(15)).toBe("telemetry/15");
    const names = new Set(Array.from({ length: TELEMETRY_SHARDS }, (_, k) => telemetryShardName(k)));
    expect(names.size).toBe(TELEMETRY_SHARDS);
    expect(names.has("global")).toBe(false);
  });

  it("is the same shard every time for an isolate, within range", () => {
    for (const id of uuids(200)) {
      const k = telemetryShardOf(id);
      expect(Number.isInteger(k)).toBe(true);
      expect(k).toBeGreaterThanOrEqual(0);
      expect(k).toBeLessThan(TELEMETRY_SHARDS);
      expect(telemetryShardOf(id)).toBe(k);
      expect(telemetryShardOf(id, TELEMETRY_SHARDS)).toBe(k);
    }
  });

  it("is shard 0 with one shard (or none)", () => {
    for (const id of uuids(20)) {
      expect(telemetryShardOf(id, 1)).toBe(0);
      expect(telemetryShardOf(id, 0)).toBe(0);
    }
  });

  it("spreads UUID isolates evenly: every shard gets some, none more than twice its share", () => {
    const counts = new Array<number>(TELEMETRY_SHARDS).fill(0);
    const ids = uuids(3_200);
    for (const id of ids) counts[telemetryShardOf(id)]!++;
    const share = ids.length / TELEMETRY_SHARDS;
    for (const n of counts) {
      expect(n).toBeGreaterThan(share / 2);
      expect(n).toBeLessThan(share * 2);
    }
  });

  it("spreads ids that differ in one character only", () => {
    const seen = new Set(Array.from({ length: 64 }, (_, i) => telemetryShardOf(`isolate-${i}`)));
    expect(seen.size).toBeGreaterThan(TELEMETRY_SHARDS / 2);
  });

  it("honours other shard counts", () => {
    for (const n of [2, 3, 7, 64]) {
      const seen = new Set(uuids(50 * n).map((id) => telemetryShardOf(id, n)));
      expect([...seen].every((k) => k >= 0 && k < n)).toBe(true);
      expect(seen.size).toBe(n);
    }
  });
});

describe("sumTotals", () => {
  it("is all zeros for no parts, named for the deployment", () => {
    const t = sumTotals("a", []);
    expect(t).toEqual(deploymentDelta("a"));
  });

  it("adds every counter and merges both histograms bucket by bucket", () => {
    const p1 = deploymentDelta("a", { requests: { "2xx": 3, "5xx": 1 }, retries: 2, rejections: 1, ejections: 0, duration: histogramOf(0.003, 0.2), ttfb: histogramOf(0.001) });
    const p2 = deploymentDelta("a", { requests: { "3xx": 2, "4xx": 4 }, retries: 1, rejections: 0, ejections: 1, duration: histogramOf(100), ttfb: histogramOf(0.3, 0.3) });
    const p3 = deploymentDelta("a", { requests: { "2xx": 1, "5xx": 2 }, rejections: 3, ejections: 2, duration: histogramOf(7) });
    const t = sumTotals("a", [p1, p2, p3]);
    expect(t.deployment).toBe("a");
    expect(t.requests).toEqual({ "2xx": 4, "3xx": 2, "4xx": 4, "5xx": 3 });
    expect(t.retries).toBe(3);
    expect(t.rejections).toBe(4);
    expect(t.ejections).toBe(3);
    expect(t.duration.buckets).toEqual(histogramOf(0.003, 0.2, 100, 7).buckets);
    expect(t.duration.buckets[LATENCY_BUCKETS_S.length]).toBe(1); // 100 s: +Inf
    expect(t.duration.count).toBe(4);
    expect(t.duration.sum).toBeCloseTo(0.003 + 0.2 + 100 + 7, 9);
    expect(t.ttfb).toEqual(histogramOf(0.001, 0.3, 0.3));
  });

  it("leaves its parts unchanged and shares nothing with them", () => {
    const p = deploymentDelta("a", { requests: { "2xx": 1 }, duration: histogramOf(0.1) });
    const before = structuredClone(p);
    const t = sumTotals("a", [p, p]);
    expect(p).toEqual(before);
    t.duration.buckets[0] = 99;
    t.requests["2xx"] = 99;
    expect(p).toEqual(before);
    expect(sumTotals("a", [p, p]).requests["2xx"]).toBe(2);
  });
});

describe("mergeWindows", () => {
  it("is empty for no parts, or empty parts", () => {
    expect(mergeWindows([])).toEqual([]);
    expect(mergeWindows([[], []])).toEqual([]);
  });

  it("sums requests, errors and durations of the same window; keeps other windows; oldest first", () => {
    const a = [win(WINDOW_T0, 10, 1, 0.02, 0.02), win(WINDOW_T0 + WINDOW_MS, 4, 0, 0.2)];
    const b = [win(WINDOW_T0 - WINDOW_MS, 2, 2), win(WINDOW_T0, 5, 3, 0.02, 0.2)];
    const m = mergeWindows([a, b]);
    expect(m.map((w) => w.t)).toEqual([WINDOW_T0 - WINDOW_MS, WINDOW_T0, WINDOW_T0 + WINDOW_MS]);
    expect(m[0]).toEqual(win(WINDOW_T0 - WINDOW_MS, 2, 2));
    expect(m[1]).toEqual(win(WINDOW_T0, 15, 4, 0.02, 0.02, 0.02, 0.2));
    expect(m[2]).toEqual(win(WINDOW_T0 + WINDOW_MS, 4, 0, 0.2));
  });

  it("gives the percentiles of all the durations together, not an average of the shards' percentiles", () => {
    // Shard a: 8 fast requests; shard b: 2 slow ones. p99 over the 10 is in the slow bucket.
    const a = [win(WINDOW_T0, 8, 0, ...new Array<number>(8).fill(0.02))];
    const b = [win(WINDOW_T0, 2, 0, 0.2, 0.2)];
    const [m] = mergeWindows([a, b]);
    const all = histogramOf(...new Array<number>(8).fill(0.02), 0.2, 0.2);
    expect(m!.duration).toEqual(all);
    expect(quantile(m!.duration, 0.5)).toBeCloseTo(0.019375, 12);
    expect(quantile(m!.duration, 0.99)).toBeCloseTo(0.2425, 12);
  });

  it("leaves its parts unchanged", () => {
    const a = [win(WINDOW_T0, 1, 0, 0.1)];
    const before = structuredClone(a);
    const m = mergeWindows([a, a]);
    m[0]!.duration.buckets[4] = 99;
    m[0]!.requests = 99;
    expect(a).toEqual(before);
    expect(emptyWindow(WINDOW_T0)).toEqual(win(WINDOW_T0, 0, 0));
  });
});

describe("TelemetryWindows.windows and seriesOf (what a shard hands over, and the series from it)", () => {
  it("windows() are the kept windows, oldest first, as a copy", () => {
    const w = new TelemetryWindows();
    w.ingest({ isolate: "i1", sentAt: 0, deltas: [deploymentDelta("a", { requests: { "2xx": 2, "5xx": 1 }, duration: histogramOf(0.02) })] }, WINDOW_T0);
    w.ingest({ isolate: "i1", sentAt: 0, deltas: [deploymentDelta("a", { requests: { "2xx": 4 } })] }, WINDOW_T0 + WINDOW_MS + 1);
    const got = w.windows("a");
    expect(got).toEqual([win(WINDOW_T0, 3, 1, 0.02), win(WINDOW_T0 + WINDOW_MS, 4, 0)]);
    got[0]!.requests = 99;
    got[0]!.duration.buckets[0] = 99;
    expect(w.windows("a")[0]).toEqual(win(WINDOW_T0, 3, 1, 0.02));
    expect(w.windows("never")).toEqual([]);
  });

  it("seriesOf a shard's windows is its series, whatever their order", () => {
    const w = new TelemetryWindows();
    for (let i = 0; i < 5; i++) w.ingest({ isolate: "i1", sentAt: 0, deltas: [deploymentDelta("a", { requests: { "2xx": i + 1 }, duration: histogramOf(0.01 * (i + 1)) })] }, WINDOW_T0 + i * WINDOW_MS);
    const now = WINDOW_T0 + 4 * WINDOW_MS + 10;
    expect(seriesOf(w.windows("a"), now)).toEqual(w.series("a", now));
    expect(seriesOf(w.windows("a").reverse(), now)).toEqual(w.series("a", now));
  });
});

describe("mergeReports", () => {
  const report = (t: DeploymentTotals[], liveIsolates: number, windows: WindowCounts[][] | null): ShardReport => ({ totals: t, liveIsolates, windows });

  it("sums totals per deployment in the order asked, and live isolates", () => {
    const r1 = report([deploymentDelta("a", { requests: { "2xx": 1 } }), deploymentDelta("b", { retries: 2 })], 3, null);
    const r2 = report([deploymentDelta("a", { requests: { "2xx": 4 } }), deploymentDelta("b", { retries: 5 })], 4, null);
    const m = mergeReports(["a", "b"], [r1, r2]);
    expect(m.totals.map((t) => t.deployment)).toEqual(["a", "b"]);
    expect(m.totals[0]!.requests["2xx"]).toBe(5);
    expect(m.totals[1]!.retries).toBe(7);
    expect(m.liveIsolates).toBe(7);
    expect(m.windows).toBeNull();
  });

  it("merges windows per deployment when the shards sent them", () => {
    const r1 = report([deploymentDelta("a"), deploymentDelta("b")], 1, [[win(WINDOW_T0, 1, 0)], []]);
    const r2 = report([deploymentDelta("a"), deploymentDelta("b")], 1, [[win(WINDOW_T0, 2, 1)], [win(WINDOW_T0, 3, 3)]]);
    const m = mergeReports(["a", "b"], [r1, r2]);
    expect(m.windows).toEqual([[win(WINDOW_T0, 3, 1)], [win(WINDOW_T0, 3, 3)]]);
  });

  it("is the fleet's zeros for no shards", () => {
    expect(mergeReports(["a"], [])).toEqual({ totals: [deploymentDelta("a")], liveIsolates: 0, windows: [[]] });
  });
});

describe("shards summed = one object", () => {
  it("flushes spread over shards by isolate give the totals, series and live isolates one object would", () => {
    const rnd = mulberry32(11);
    const isolates = uuids(40, 3);
    const one = new TelemetryWindows();
    const shards = Array.from({ length: TELEMETRY_SHARDS }, () => new TelemetryWindows());
    let now = WINDOW_T0;
    for (let i = 0; i < 400; i++) {
      now += Math.floor(rnd() * 700);
      const isolate = isolates[Math.floor(rnd() * isolates.length)]!;
      const deltas = ["a", "b"].map((d) =>
        deploymentDelta(d, {
          requests: { "2xx": Math.floor(rnd() * 5), "4xx": Math.floor(rnd() * 2), "5xx": Math.floor(rnd() * 2) },
          retries: Math.floor(rnd() * 3),
          rejections: Math.floor(rnd() * 2),
          ejections: rnd() < 0.1 ? 1 : 0,
          duration: histogramOf(...Array.from({ length: Math.floor(rnd() * 4) }, () => rnd() * rnd() * 3)),
          ttfb: histogramOf(...Array.from({ length: Math.floor(rnd() * 4) }, () => rnd() * 0.3)),
        }),
      );
      const flush: TelemetryFlush = { isolate, sentAt: now, deltas };
      one.ingest(structuredClone(flush), now);
      shards[telemetryShardOf(isolate)]!.ingest(flush, now);
    }
    // More than one shard took part (else this would prove little).
    expect(new Set(isolates.map((id) => telemetryShardOf(id))).size).toBeGreaterThan(4);

    const deployments = ["a", "b", "never"];
    const reports = shards.map((s): ShardReport => ({
      totals: deployments.map((d) => s.totals(d)),
      liveIsolates: s.liveIsolates(now),
      windows: deployments.map((d) => s.windows(d)),
    }));
    const m = mergeReports(deployments, reports);
    deployments.forEach((d, i) => {
      const want = one.totals(d);
      const got = m.totals[i]!;
      expect({ ...got, duration: { ...got.duration, sum: 0 }, ttfb: { ...got.ttfb, sum: 0 } }).toEqual({
        ...want,
        duration: { ...want.duration, sum: 0 },
        ttfb: { ...want.ttfb, sum: 0 },
      });
      // Sums of floats, added in another order.
      expect(got.duration.sum).toBeCloseTo(want.duration.sum, 9);
      expect(got.ttfb.sum).toBeCloseTo(want.ttfb.sum, 9);
      expect(seriesOf(m.windows![i]!, now)).toEqual(one.series(d, now));
    });
    expect(m.liveIsolates).toBe(one.liveIsolates(now));
  });
});

describe("token counts through the flush and the shards", () => {
  it("isolates' recordTokens, flushed to different shards, sum per deployment and key label", async () => {
    const { ProxyMetrics } = await import("../../src/telemetry/proxy-metrics.ts");
    const a = new ProxyMetrics();
    const b = new ProxyMetrics();
    a.recordTokens("llm", "public", { prompt: 10, completion: 4 });
    a.recordTokens("llm", "public", { prompt: 1, completion: 2 });
    a.recordTokens("llm", "sy-key0001", { prompt: 5, completion: 5 });
    b.recordTokens("llm", "public", { prompt: 100, completion: 40 });
    const shards = [new TelemetryWindows(), new TelemetryWindows()];
    shards[0]!.ingest(a.takeFlush(10_000)!, 10_000);
    shards[1]!.ingest(b.takeFlush(10_000)!, 10_000);
    // A flush from an isolate that predates token counts (no `tokens`) merges too.
    const old = { isolate: "old", sentAt: 10_000, deltas: [{ ...deploymentDelta("llm"), tokens: undefined as never }] };
    shards[1]!.ingest(old, 10_000);
    const reports: ShardReport[] = shards.map((s) => ({ totals: [s.totals("llm")], liveIsolates: 1, windows: null }));
    expect(mergeReports(["llm"], reports).totals[0]!.tokens).toEqual({ public: { prompt: 111, completion: 46 }, "sy-key0001": { prompt: 5, completion: 5 } });
  });
});
