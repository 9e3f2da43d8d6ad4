/**
 * The Prometheus text exposition format (version 0.0.4), what the edge's
 * /-/metrics serves: formatting, and the change detection of `metrics --follow`.
 * Parsing is in src/telemetry/prometheus-parse.ts, re-exported here.
 *
 *   # HELP switchyard_requests_total Requests answered, by deployment and status class.
 *   # TYPE switchyard_requests_total counter
 *   switchyard_requests_total{deployment="hello",status="2xx"} 1027 1712345678901
 *
 * Label values escape `\\`, `\"` and `\n`; values are Go floats (`+Inf`, `-Inf`,
 * `NaN` included); a sample may end with a timestamp in epoch milliseconds.
 */
// @ts-nocheck


import type { Sample } from "../telemetry/prometheus-parse.ts";

// The parser lives in src/telemetry/prometheus-parse.ts (shared with the replica agent).
export { parsePrometheusText, parseSampleLine, parseValue, PrometheusParseError } from "../telemetry/prometheus-parse.ts";
export type { Exposition, Sample } from "../telemetry/prometheus-parse.ts";

/** Writes a value back in the exposition's spelling. */
export function formatValue(value: number): string {
  if (value === Infinity) return "+Inf";
  if (value === -Infinity) return "-Inf";
  if (Number.isNaN(value)) return "NaN";
  return String(value);
}

export function escapeLabelValue(value: string): string {
  return value.replace(/\\/g, "\\\\").replace(/"/g, '\\"').replace(/\n/g, "\\n");
}

/** The sample's series in canonical form (labels sorted): `name{a="1",b="2"}`. */
export function seriesKey(sample: Pick<Sample, "name" | "labels">): string {
  const names = Object.keys(sample.labels).sort();
  if (names.length === 0) return sample.name;
  return `${sample.name}{${names.map((n) => `${n}="${escapeLabelValue(sample.labels[n]!)}"`).join(",")}}`;
}

/** A sample as an exposition line (canonical label order, no timestamp). */
export function formatSample(sample: Sample): string {
  return `${seriesKey(sample)} ${formatValue(sample.value)}`;
}

/**
 * A sample as JSON: `value` is a number, or "+Inf", "-Inf", "NaN" (which JSON
 * cannot write as numbers).
 */
export function sampleJson(sample: Sample): { name: string; labels: Record<string, string>; value: number | string; timestamp?: number } {
  const value = Number.isFinite(sample.value) ? sample.value : formatValue(sample.value);
  return sample.timestamp === undefined ? { name: sample.name, labels: sample.labels, value } : { name: sample.name, labels: sample.labels, value, timestamp: sample.timestamp };
}

/**
 * `metrics --follow`: remembers the last value printed per series and returns the
 * samples that are new or whose value changed (NaN equals NaN here).
 */
export class SampleDiff {
  readonly #last = new Map<string, number>();

  changed(samples: readonly Sample[]): Sample[] {
    const out: Sample[] = [];
    for (const s of samples) {
      const key = seriesKey(s);
      if (!this.#last.has(key) || !Object.is(this.#last.get(key), s.value)) out.push(s);
      this.#last.set(key, s.value);
    }
    return out;
  }
}
