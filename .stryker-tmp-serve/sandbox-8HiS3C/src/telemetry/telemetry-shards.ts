/**
 * Telemetry spread over TELEMETRY_SHARDS Durable Objects: which shard an
 * isolate flushes to, and how the shards' parts merge into the fleet's numbers.
 * Pure. Each isolate flushes to exactly one shard, so the fleet's counters,
 * histograms, windows and live isolates are plain sums over the shards (nothing
 * is counted twice, and no shard needs to know the others).
 */
// @ts-nocheck

import { mergeHistogram } from "./histogram.ts";
import { fnv1a, mix } from "../protocol/hashing.ts";
import { addFallbacks, addTokens, emptyDelta } from "./proxy-metrics.ts";
import type { DeploymentTotals } from "./types.ts";
import { emptyWindow, type WindowCounts } from "./windows.ts";

/**
 * How many Telemetry shards. An isolate flushes at most every 2 s (0.5 calls/s),
 * and an object handles ~1,000 calls/s, so one object holds ~2,000 isolates and
 * 16 hold ~32,000: far beyond today's fleets, while a scrape or a dashboard
 * frame (which asks every shard) stays 16 calls.
 */
export const TELEMETRY_SHARDS = 16;

/** The Durable Object name of shard `k` ("global" is the dashboard's object, not a shard). */
export function telemetryShardName(k: number): string {
  return `telemetry/${k}`;
}

/**
 * The shard an isolate flushes to (its id is random per isolate, so the
 * isolates spread evenly). fmix32 after FNV-1a because a power-of-two modulus
 * keeps only the low bits, and FNV-1a's low k bits depend only on the low k
 * bits of each character: ids differing only in "1" against "a" would always
 * share a shard.
 */
export function telemetryShardOf(isolateId: string, shards: number = TELEMETRY_SHARDS): number {
  if (shards <= 1) return 0;
  return mix(fnv1a(isolateId)) % shards;
}

/** What one shard answers for a scrape or a dashboard frame. */
export interface ShardReport {
  /** Per deployment, in the order asked. */
  totals: DeploymentTotals[];
  /** Isolates that flushed to this shard within the last 30 s. */
  liveIsolates: number;
  /** Per deployment, in the order asked, the shard's 5 s windows (only when asked: the dashboard needs them, a scrape does not). */
  windows: WindowCounts[][] | null;
}

/** One deployment's totals summed over parts (shards): counters added, histograms bucket by bucket. */
export function sumTotals(deployment: string, parts: readonly DeploymentTotals[]): DeploymentTotals {
  const sum = emptyDelta(deployment);
  for (const p of parts) {
    for (const k of ["2xx", "3xx", "4xx", "5xx"] as const) sum.requests[k] += p.requests[k];
    sum.retries += p.retries;
    sum.rejections += p.rejections;
    sum.ejections += p.ejections;
    mergeHistogram(sum.duration, p.duration);
    mergeHistogram(sum.ttfb, p.ttfb);
    addTokens(sum.tokens, p.tokens);
    addFallbacks(sum, p.promptFallbacks);
  }
  return sum;
}

/**
 * One deployment's windows summed over parts, oldest first. Windows start on
 * multiples of WINDOW_MS (epoch-aligned), so the same `t` in two shards is the
 * same window; each window keeps its duration histogram, so p50/p99 computed
 * from the merged one are what a single object would have computed.
 */
export function mergeWindows(parts: readonly (readonly WindowCounts[])[]): WindowCounts[] {
  const byStart = new Map<number, WindowCounts>();
  for (const part of parts) {
    for (const w of part) {
      let into = byStart.get(w.t);
      if (!into) {
        into = emptyWindow(w.t);
        byStart.set(w.t, into);
      }
      into.requests += w.requests;
      into.errors += w.errors;
      mergeHistogram(into.duration, w.duration);
    }
  }
  return [...byStart.values()].sort((a, b) => a.t - b.t);
}

/** The fleet's report from every shard's: totals and windows per deployment, live isolates summed. */
export function mergeReports(deployments: readonly string[], reports: readonly ShardReport[]): ShardReport {
  const withWindows = reports.every((r) => r.windows !== null);
  return {
    totals: deployments.map((d, i) => sumTotals(d, reports.map((r) => r.totals[i]!))),
    liveIsolates: reports.reduce((n, r) => n + r.liveIsolates, 0),
    windows: withWindows ? deployments.map((_, i) => mergeWindows(reports.map((r) => r.windows![i]!))) : null,
  };
}
