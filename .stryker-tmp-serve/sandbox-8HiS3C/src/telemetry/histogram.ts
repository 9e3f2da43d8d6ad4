/** Fixed-bucket latency histograms: observe, merge, and estimate quantiles. Pure. */
// @ts-nocheck

import { LATENCY_BUCKETS_S, type Histogram } from "./types.ts";

export function emptyHistogram(): Histogram {
  return { buckets: new Array<number>(LATENCY_BUCKETS_S.length + 1).fill(0), sum: 0, count: 0 };
}

export function observe(h: Histogram, seconds: number): void {
  let i = 0;
  while (i < LATENCY_BUCKETS_S.length && seconds > LATENCY_BUCKETS_S[i]!) i++;
  h.buckets[i]!++;
  h.sum += seconds;
  h.count++;
}

/** Adds `from` into `into` (histograms from many isolates combine bucket by bucket). */
export function mergeHistogram(into: Histogram, from: Histogram): void {
  for (let i = 0; i < into.buckets.length; i++) into.buckets[i]! += from.buckets[i] ?? 0;
  into.sum += from.sum;
  into.count += from.count;
}

/**
 * Quantile `q` (0..1) in seconds, interpolated linearly inside the bucket it
 * falls in (Prometheus' histogram_quantile rule); null for an empty histogram.
 */
export function quantile(h: Histogram, q: number): number | null {
  if (h.count === 0) return null;
  const rank = q * h.count;
  let seen = 0;
  for (let i = 0; i < h.buckets.length; i++) {
    const n = h.buckets[i]!;
    if (seen + n >= rank && n > 0) {
      const lower = i === 0 ? 0 : LATENCY_BUCKETS_S[i - 1]!;
      // Above the last bound there is no upper edge: report the last bound.
      if (i >= LATENCY_BUCKETS_S.length) return lower;
      const upper = LATENCY_BUCKETS_S[i]!;
      return lower + (upper - lower) * ((rank - seen) / n);
    }
    seen += n;
  }
  return LATENCY_BUCKETS_S[LATENCY_BUCKETS_S.length - 1]!;
}
