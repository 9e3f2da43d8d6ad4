/** Fixed-bucket latency histograms: observe, merge, quantile (Prometheus' histogram_quantile rule). */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { emptyHistogram, mergeHistogram, observe, quantile } from "../../src/telemetry/histogram.ts";
import { LATENCY_BUCKETS_S, type Histogram } from "../../src/telemetry/types.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { histogramOf } from "../fixtures/telemetry.ts";

const INF = LATENCY_BUCKETS_S.length; // index of the +Inf bucket
const LAST = LATENCY_BUCKETS_S[LATENCY_BUCKETS_S.length - 1]!;

/** The bucket index a single observation lands in. */
function bucketOf(seconds: number): number {
  const h = emptyHistogram();
  observe(h, seconds);
  const idx = h.buckets.findIndex((n) => n === 1);
  expect(h.buckets.reduce((a, n) => a + n, 0)).toBe(1);
  return idx;
}

/** A histogram with the given per-bucket counts (sum is irrelevant to quantiles). */
function withCounts(counts: Record<number, number>): Histogram {
  const h = emptyHistogram();
  for (const [i, n] of Object.entries(counts)) {
    h.buckets[Number(i)] = n;
    h.count += n;
  }
  return h;
}

describe("LATENCY_BUCKETS_S", () => {
  it("is strictly ascending and positive", () => {
    expect(LATENCY_BUCKETS_S.length).toBeGreaterThan(1);
    expect(LATENCY_BUCKETS_S[0]).toBeGreaterThan(0);
    for (let i = 1; i < LATENCY_BUCKETS_S.length; i++) expect(LATENCY_BUCKETS_S[i]!).toBeGreaterThan(LATENCY_BUCKETS_S[i - 1]!);
  });

  it("has only finite bounds (+Inf is implied, not listed)", () => {
    for (const b of LATENCY_BUCKETS_S) expect(Number.isFinite(b)).toBe(true);
  });
});

describe("emptyHistogram", () => {
  it("has one bucket per bound plus +Inf, all zero", () => {
    const h = emptyHistogram();
    expect(h.buckets).toHaveLength(LATENCY_BUCKETS_S.length + 1);
    expect(h.buckets.every((n) => n === 0)).toBe(true);
    expect(h.sum).toBe(0);
    expect(h.count).toBe(0);
  });

  it("returns a fresh histogram each time (no shared arrays)", () => {
    const a = emptyHistogram();
    const b = emptyHistogram();
    a.buckets[0] = 5;
    expect(b.buckets[0]).toBe(0);
  });
});

describe("observe", () => {
  it("puts a value equal to a bound in that bound's bucket (le is inclusive)", () => {
    LATENCY_BUCKETS_S.forEach((bound, i) => expect(bucketOf(bound), `bound ${bound}`).toBe(i));
  });

  it("puts a value just above a bound in the next bucket", () => {
    LATENCY_BUCKETS_S.forEach((bound, i) => expect(bucketOf(bound * (1 + 1e-9)), `above ${bound}`).toBe(i + 1));
  });

  it("puts a value just below a bound in that bound's bucket", () => {
    LATENCY_BUCKETS_S.forEach((bound, i) => expect(bucketOf(bound * (1 - 1e-9)), `below ${bound}`).toBe(i));
  });

  it("puts zero (and anything below the first bound) in the first bucket", () => {
    expect(bucketOf(0)).toBe(0);
    expect(bucketOf(0.001)).toBe(0);
  });

  it("puts values above the last bound in the +Inf bucket", () => {
    expect(bucketOf(LAST + 0.001)).toBe(INF);
    expect(bucketOf(3600)).toBe(INF);
    expect(bucketOf(Infinity)).toBe(INF);
  });

  it("places typical values in the expected bucket", () => {
    expect(bucketOf(0.007)).toBe(1); // (0.005, 0.01]
    expect(bucketOf(0.3)).toBe(6); // (0.25, 0.5]
    expect(bucketOf(1.5)).toBe(8); // (1, 2.5]
    expect(bucketOf(45)).toBe(12); // (30, 60]
  });

  it("accumulates sum and count", () => {
    const h = histogramOf(0.1, 0.2, 100);
    expect(h.count).toBe(3);
    expect(h.sum).toBeCloseTo(100.3, 12);
    expect(h.buckets[4]).toBe(1); // 0.1
    expect(h.buckets[5]).toBe(1); // 0.2
    expect(h.buckets[INF]).toBe(1);
    expect(h.buckets.reduce((a, n) => a + n, 0)).toBe(h.count);
  });
});

describe("mergeHistogram", () => {
  it("adds bucket by bucket, plus sum and count", () => {
    const a = histogramOf(0.003, 0.2, 100);
    const b = histogramOf(0.003, 0.003, 0.7);
    mergeHistogram(a, b);
    expect(a.count).toBe(6);
    expect(a.sum).toBeCloseTo(0.003 + 0.2 + 100 + 0.003 + 0.003 + 0.7, 12);
    const expected = new Array<number>(LATENCY_BUCKETS_S.length + 1).fill(0);
    expected[0] = 3;
    expected[5] = 1;
    expected[7] = 1; // 0.7 in (0.5, 1]
    expected[INF] = 1;
    expect(a.buckets).toEqual(expected);
  });

  it("leaves the source unchanged", () => {
    const a = histogramOf(1);
    const b = histogramOf(2, 3);
    const before = structuredClone(b);
    mergeHistogram(a, b);
    expect(b).toEqual(before);
  });

  it("merging an empty histogram changes nothing; merging into an empty one copies", () => {
    const a = histogramOf(0.04, 7);
    const snapshot = structuredClone(a);
    mergeHistogram(a, emptyHistogram());
    expect(a).toEqual(snapshot);
    const e = emptyHistogram();
    mergeHistogram(e, a);
    expect(e).toEqual(snapshot);
  });

  it("equals observing everything into one histogram", () => {
    const rnd = mulberry32(7);
    const all = emptyHistogram();
    const parts = [emptyHistogram(), emptyHistogram(), emptyHistogram()];
    for (let i = 0; i < 300; i++) {
      const v = rnd() ** 3 * 90;
      observe(all, v);
      observe(parts[i % 3]!, v);
    }
    const merged = emptyHistogram();
    for (const p of parts) mergeHistogram(merged, p);
    expect(merged.buckets).toEqual(all.buckets);
    expect(merged.count).toBe(all.count);
    expect(merged.sum).toBeCloseTo(all.sum, 9);
  });

  it("treats missing buckets in the source as zero", () => {
    const a = histogramOf(0.003);
    mergeHistogram(a, { buckets: [2], sum: 0.002, count: 2 });
    expect(a.buckets[0]).toBe(3);
    expect(a.buckets.slice(1).every((n) => n === 0)).toBe(true);
    expect(a.count).toBe(3);
  });
});

describe("quantile", () => {
  it("is null for an empty histogram, whatever q", () => {
    for (const q of [0, 0.5, 0.99, 1]) expect(quantile(emptyHistogram(), q)).toBeNull();
  });

  it("interpolates linearly inside a single populated bucket", () => {
    // Four values in (0.1, 0.25].
    const h = histogramOf(0.2, 0.2, 0.2, 0.2);
    expect(quantile(h, 0.25)).toBeCloseTo(0.1 + 0.15 * 0.25, 12);
    expect(quantile(h, 0.5)).toBeCloseTo(0.175, 12);
    expect(quantile(h, 0.75)).toBeCloseTo(0.1 + 0.15 * 0.75, 12);
    expect(quantile(h, 1)).toBeCloseTo(0.25, 12);
  });

  it("uses 0 as the lower edge of the first bucket", () => {
    const h = histogramOf(0.001, 0.001);
    expect(quantile(h, 0.5)).toBeCloseTo(0.0025, 12);
    expect(quantile(h, 1)).toBeCloseTo(0.005, 12);
  });

  it("reports the last finite bound for ranks in the +Inf bucket", () => {
    expect(quantile(histogramOf(100), 0.5)).toBe(LAST);
    expect(quantile(histogramOf(100, 5000, 1e6), 0.99)).toBe(LAST);
    // Mixed: the low half interpolates normally, the top lands in +Inf.
    const mixed = histogramOf(0.003, 100);
    expect(quantile(mixed, 0.5)).toBeCloseTo(0.005, 12);
    expect(quantile(mixed, 0.99)).toBe(LAST);
    expect(quantile(mixed, 1)).toBe(LAST);
  });

  it("skips empty buckets between populated ones", () => {
    // 2 values in (0.005, 0.01], 2 in (2.5, 5].
    const h = histogramOf(0.007, 0.007, 4, 4);
    expect(quantile(h, 0.5)).toBeCloseTo(0.01, 12); // rank 2 = top of the lower bucket
    expect(quantile(h, 0.75)).toBeCloseTo(2.5 + 2.5 * 0.5, 12); // rank 3: half-way through (2.5, 5]
  });

  it("matches Prometheus histogram_quantile on a worked example", () => {
    // Observations: 1 in le=0.005, 3 in (0.005,0.01], 4 in (0.01,0.025], 2 in (0.1,0.25].
    // Cumulative (as Prometheus sees it): 0.005:1 0.01:4 0.025:8 0.05:8 0.1:8 0.25:10 … +Inf:10.
    // histogram_quantile(q): rank = q·10; first bucket with cumulative ≥ rank;
    //   lower + (upper − lower) · (rank − cum_below) / in_bucket.
    const h = histogramOf(0.003, 0.007, 0.007, 0.007, 0.02, 0.02, 0.02, 0.02, 0.2, 0.2);
    const cases: [number, number][] = [
      [0.05, 0 + 0.005 * (0.5 / 1)], // rank 0.5 → le=0.005        → 0.0025
      [0.1, 0.005], //                  rank 1   → le=0.005 (cum 1)  → 0.005
      [0.25, 0.005 + 0.005 * (1.5 / 3)], // rank 2.5 → (0.005,0.01] → 0.0075
      [0.4, 0.01], //                   rank 4   → le=0.01 (cum 4)   → 0.01
      [0.5, 0.01 + 0.015 * (1 / 4)], // rank 5  → (0.01,0.025]       → 0.01375
      [0.8, 0.025], //                  rank 8   → le=0.025 (cum 8, not the empty 0.05/0.1 buckets)
      [0.9, 0.1 + 0.15 * (1 / 2)], //   rank 9   → (0.1,0.25]        → 0.175
      [0.95, 0.1 + 0.15 * (1.5 / 2)], // rank 9.5                    → 0.2125
      [1, 0.25], //                     rank 10  → le=0.25
    ];
    for (const [q, want] of cases) expect(quantile(h, q), `q=${q}`).toBeCloseTo(want, 12);
  });

  it("is monotonic (non-decreasing) in q and stays within [0, last bound]", () => {
    const rnd = mulberry32(42);
    for (let trial = 0; trial < 50; trial++) {
      const h = emptyHistogram();
      const n = 1 + Math.floor(rnd() * 40);
      // Spread across all buckets, including +Inf.
      for (let i = 0; i < n; i++) observe(h, rnd() ** 4 * 120);
      let prev = -Infinity;
      for (let k = 0; k <= 100; k++) {
        const v = quantile(h, k / 100)!;
        expect(v).not.toBeNull();
        expect(v).toBeGreaterThanOrEqual(prev);
        expect(v).toBeGreaterThanOrEqual(0);
        expect(v).toBeLessThanOrEqual(LAST);
        prev = v;
      }
    }
  });

  it("lands inside the bucket holding the rank-th observation", () => {
    const rnd = mulberry32(3);
    for (let trial = 0; trial < 30; trial++) {
      const values = Array.from({ length: 25 }, () => rnd() ** 3 * 20);
      const h = histogramOf(...values);
      const sorted = [...values].sort((a, b) => a - b);
      for (const q of [0.5, 0.9, 0.99]) {
        const idx = Math.max(0, Math.ceil(q * values.length) - 1);
        const b = bucketOf(sorted[idx]!);
        const lower = b === 0 ? 0 : LATENCY_BUCKETS_S[b - 1]!;
        const upper = LATENCY_BUCKETS_S[b]!;
        const v = quantile(h, q)!;
        expect(v).toBeGreaterThanOrEqual(lower - 1e-12);
        expect(v).toBeLessThanOrEqual(upper + 1e-12);
      }
    }
  });

  it("only depends on bucket counts (sum is ignored)", () => {
    const h = withCounts({ 3: 2, 7: 2 });
    const a = quantile(h, 0.6);
    h.sum = 12345;
    expect(quantile(h, 0.6)).toBe(a);
    // rank 2.4 → (0.5, 1], 0.4 of the way through 2 observations → 0.5 + 0.5·0.2
    expect(a).toBeCloseTo(0.6, 12);
  });
});
