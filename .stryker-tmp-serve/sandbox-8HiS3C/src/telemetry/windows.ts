/**
 * Per-deployment totals and 5 s windows of what the proxy isolates flushed: a
 * Telemetry shard's state, apart from its runtime. Pure; time passed in.
 */
// @ts-nocheck

import { emptyHistogram, mergeHistogram, quantile } from "./histogram.ts";
import { addFallbacks, addTokens, emptyDelta } from "./proxy-metrics.ts";
import type { DeploymentDelta, DeploymentTotals, Histogram, TelemetryFlush, WindowPoint } from "./types.ts";

export const WINDOW_MS = 5_000;
/** 5 minutes of windows. */
export const WINDOWS_KEPT = 60;

/** One 5 s window's counts (what shards hand over, so that their windows merge exactly). */
export interface WindowCounts {
  /** Window start, epoch ms (a multiple of WINDOW_MS). */
  t: number;
  requests: number;
  /** 5xx answers. */
  errors: number;
  duration: Histogram;
}

export function emptyWindow(t: number): WindowCounts {
  return { t, requests: 0, errors: 0, duration: emptyHistogram() };
}

/** The last WINDOWS_KEPT windows up to now from `windows` (any order), oldest first, empty windows filled in. */
export function seriesOf(windows: readonly WindowCounts[], now: number): WindowPoint[] {
  const byStart = new Map(windows.map((w) => [w.t, w]));
  const end = now - (now % WINDOW_MS);
  const out: WindowPoint[] = [];
  for (let t = end - (WINDOWS_KEPT - 1) * WINDOW_MS; t <= end; t += WINDOW_MS) {
    const w = byStart.get(t);
    const p50 = w ? quantile(w.duration, 0.5) : null;
    const p99 = w ? quantile(w.duration, 0.99) : null;
    out.push({
      t,
      requestsPerSecond: w ? w.requests / (WINDOW_MS / 1000) : 0,
      errorsPerSecond: w ? w.errors / (WINDOW_MS / 1000) : 0,
      p50Ms: p50 === null ? null : p50 * 1000,
      p99Ms: p99 === null ? null : p99 * 1000,
    });
  }
  return out;
}

export class TelemetryWindows {
  readonly #totals = new Map<string, DeploymentTotals>();
  readonly #windows = new Map<string, WindowCounts[]>();
  /** Isolates heard from, with when (to count the live ones). */
  readonly #isolates = new Map<string, number>();

  ingest(flush: TelemetryFlush, now: number): void {
    this.#isolates.set(flush.isolate, now);
    for (const d of flush.deltas) this.#add(d, now);
  }

  #add(d: DeploymentDelta, now: number): void {
    let t = this.#totals.get(d.deployment);
    if (!t) {
      t = emptyDelta(d.deployment);
      this.#totals.set(d.deployment, t);
    }
    for (const k of ["2xx", "3xx", "4xx", "5xx"] as const) t.requests[k] += d.requests[k];
    t.retries += d.retries;
    t.rejections += d.rejections;
    t.ejections += d.ejections;
    mergeHistogram(t.duration, d.duration);
    mergeHistogram(t.ttfb, d.ttfb);
    addTokens(t.tokens, d.tokens);
    addFallbacks(t, d.promptFallbacks);

    const w = this.#window(d.deployment, now);
    w.requests += d.requests["2xx"] + d.requests["3xx"] + d.requests["4xx"] + d.requests["5xx"];
    w.errors += d.requests["5xx"];
    mergeHistogram(w.duration, d.duration);
  }

  #window(deployment: string, now: number): WindowCounts {
    const start = now - (now % WINDOW_MS);
    let ws = this.#windows.get(deployment);
    if (!ws) {
      ws = [];
      this.#windows.set(deployment, ws);
    }
    let last = ws[ws.length - 1];
    if (!last || last.t !== start) {
      last = emptyWindow(start);
      ws.push(last);
      while (ws.length > WINDOWS_KEPT) ws.shift();
    }
    return last;
  }

  totals(deployment: string): DeploymentTotals {
    return structuredClone(this.#totals.get(deployment) ?? emptyDelta(deployment));
  }

  /** Every deployment's totals, as the Telemetry object persists them (a copy). */
  allTotals(): DeploymentTotals[] {
    return structuredClone([...this.#totals.values()]);
  }

  /** Takes back totals persisted earlier (an object that was evicted and is loaded again); before any ingest. */
  restoreTotals(totals: readonly DeploymentTotals[]): void {
    for (const t of totals) this.#totals.set(t.deployment, structuredClone(t));
  }

  /** The last WINDOWS_KEPT windows up to now, oldest first, empty windows filled in. */
  series(deployment: string, now: number): WindowPoint[] {
    return seriesOf(this.#windows.get(deployment) ?? [], now);
  }

  /** The windows kept for a deployment, oldest first (a copy). */
  windows(deployment: string): WindowCounts[] {
    return structuredClone(this.#windows.get(deployment) ?? []);
  }

  /** Isolates that flushed within `withinMs`. */
  liveIsolates(now: number, withinMs = 30_000): number {
    let n = 0;
    for (const [id, at] of this.#isolates) {
      if (now - at <= withinMs) n++;
      else this.#isolates.delete(id);
    }
    return n;
  }
}
