/**
 * Counters one proxy isolate keeps per deployment, in memory. Flushed as deltas
 * to the Telemetry Durable Object at most every FLUSH_INTERVAL_MS, in the
 * background (waitUntil), so requests never wait on it and the object sees
 * isolates × 1 call per interval, not a call per request; counts that wait for a
 * flush are sent when it is due even if no request comes (IsolateState.flushMetrics).
 * Pure: time is passed in.
 */
import { emptyHistogram, mergeHistogram, observe } from "./histogram.ts";
import type { DeploymentDelta, SloOutcome, StatusClass, TelemetryFlush, TokenCounts } from "./types.ts";

export const FLUSH_INTERVAL_MS = 2_000;

export interface RequestOutcome {
  status: number;
  /** Dispatch attempts (1 = no retry); 0 when refused before any dispatch. */
  attempts: number;
  rejections: number;
  ejections: number;
  /** Time to the response head, ms. */
  ttfbMs: number;
  /** Why its prompt was keyed by bytes, when it was. */
  promptFallback?: string;
  /** What its TTFT objective's prediction said, when it had one. */
  slo?: SloOutcome;
}

/** All-zero counters for a deployment (also the Telemetry object's starting totals). */
export function emptyDelta(deployment: string): DeploymentDelta {
  return {
    deployment,
    requests: { "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0 },
    retries: 0,
    rejections: 0,
    ejections: 0,
    duration: emptyHistogram(),
    ttfb: emptyHistogram(),
    tokens: {},
    promptFallbacks: {},
  };
}

/**
 * Adds `from`'s counters into `into`: the one fold of a delta into totals (the Telemetry
 * object's totals and a sum over its shards both use it, so a new counter is added here once).
 */
export function addDelta(into: DeploymentDelta, from: DeploymentDelta): void {
  for (const k of ["2xx", "3xx", "4xx", "5xx"] as const) into.requests[k] += from.requests[k];
  into.retries += from.retries;
  into.rejections += from.rejections;
  into.ejections += from.ejections;
  mergeHistogram(into.duration, from.duration);
  mergeHistogram(into.ttfb, from.ttfb);
  addTokens(into.tokens, from.tokens);
  addFallbacks(into, from.promptFallbacks);
  if (from.sloOutcomes) {
    const to = (into.sloOutcomes ??= {});
    for (const [outcome, n] of Object.entries(from.sloOutcomes) as [SloOutcome, number][]) to[outcome] = (to[outcome] ?? 0) + n;
  }
}

function addFallbacks(into: DeploymentDelta, from: Readonly<Record<string, number>> | undefined): void {
  if (!from) return;
  const to = (into.promptFallbacks ??= {});
  for (const [reason, n] of Object.entries(from)) to[reason] = (to[reason] ?? 0) + n;
}

function addTokens(into: Record<string, TokenCounts>, from: Readonly<Record<string, TokenCounts>> | undefined): void {
  // `from` may come from an isolate that predates token counts (a rolling deploy).
  if (!from) return;
  for (const [key, t] of Object.entries(from)) {
    const sum = (into[key] ??= { prompt: 0, completion: 0 });
    sum.prompt += t.prompt;
    sum.completion += t.completion;
  }
}

export function statusClass(status: number): StatusClass {
  if (status >= 500) return "5xx";
  if (status >= 400) return "4xx";
  if (status >= 300) return "3xx";
  return "2xx";
}

export class ProxyMetrics {
  readonly isolate = crypto.randomUUID();
  readonly #deltas = new Map<string, DeploymentDelta>();
  #lastFlushAt = 0;

  #delta(deployment: string): DeploymentDelta {
    let d = this.#deltas.get(deployment);
    if (!d) {
      d = emptyDelta(deployment);
      this.#deltas.set(deployment, d);
    }
    return d;
  }

  /** Counts a request once its response head is known. */
  recordResponse(deployment: string, o: RequestOutcome): void {
    const d = this.#delta(deployment);
    d.requests[statusClass(o.status)]++;
    d.retries += Math.max(0, o.attempts - 1);
    d.rejections += o.rejections;
    d.ejections += o.ejections;
    if (o.promptFallback !== undefined) addFallbacks(d, { [o.promptFallback]: 1 });
    if (o.slo !== undefined) {
      const to = (d.sloOutcomes ??= {});
      to[o.slo] = (to[o.slo] ?? 0) + 1;
    }
    observe(d.ttfb, o.ttfbMs / 1000);
  }

  /** Counts the whole response's duration (at stream end, or with the head for sized bodies). */
  recordDuration(deployment: string, totalMs: number): void {
    observe(this.#delta(deployment).duration, totalMs / 1000);
  }

  /** Counts the tokens a replica reported for one /v1 request, under its API key label. */
  recordTokens(deployment: string, key: string, tokens: TokenCounts): void {
    addTokens(this.#delta(deployment).tokens, { [key]: tokens });
  }

  /** When there are counts waiting, how long until their flush is due (ms, ≥ 0); null when none wait. */
  flushDueIn(now: number): number | null {
    if (this.#deltas.size === 0) return null;
    return Math.max(0, this.#lastFlushAt + FLUSH_INTERVAL_MS - now);
  }

  /** The deltas to send, when a flush is due and there is something to send; resets them. */
  takeFlush(now: number): TelemetryFlush | null {
    if (now - this.#lastFlushAt < FLUSH_INTERVAL_MS || this.#deltas.size === 0) return null;
    this.#lastFlushAt = now;
    const deltas = [...this.#deltas.values()];
    this.#deltas.clear();
    return { isolate: this.isolate, sentAt: now, deltas };
  }
}
