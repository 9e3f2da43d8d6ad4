// @ts-nocheck
// docs/grafana-dashboard.json: a valid Grafana dashboard model whose every PromQL
// expression names only metrics that /-/metrics emits (renderPrometheus's output).
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { emptyHistogram, observe } from "../../src/telemetry/histogram.ts";
import { emptyDelta } from "../../src/telemetry/proxy-metrics.ts";
import { renderPrometheus } from "../../src/telemetry/prometheus.ts";

const dashboard = JSON.parse(readFileSync(join(import.meta.dirname, "../../docs/grafana-dashboard.json"), "utf8")) as {
  title: string;
  uid: string;
  schemaVersion: number;
  panels: { id: number; type: string; title: string; gridPos: { x: number; y: number; w: number; h: number }; targets: { refId: string; expr: string }[] }[];
  templating: { list: { name: string; query: unknown }[] };
};

/** Every sample name /-/metrics writes, with every optional family present (tokens, bindings, desired replicas, models). */
function emittedNames(): Set<string> {
  const totals = { ...emptyDelta("d"), duration: emptyHistogram(), ttfb: emptyHistogram(), tokens: { public: { prompt: 1, completion: 1 } } };
  observe(totals.duration, 0.1);
  const replica = { id: "r", url: "http://r", epoch: 1, load: { seq: 1, ongoing: 0, queued: 0, max: 1, state: "ready" as const }, models: ["m"], loading: [], expiresInMs: 1 };
  const text = renderPrometheus([{ totals, replicas: [replica], sessionBindings: 1, desiredReplicas: 1 }], 1);
  return new Set(
    text
      .split("\n")
      .filter((l) => l !== "" && !l.startsWith("#"))
      .map((l) => /^[a-zA-Z_:][a-zA-Z0-9_:]*/.exec(l)![0]),
  );
}

/** PromQL words that are not metric names: functions, aggregations, keywords. */
const PROMQL_WORDS = new Set(["sum", "max", "min", "avg", "count", "rate", "increase", "irate", "histogram_quantile", "by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless", "label_values"]);

/** The metric names an expression refers to: identifiers outside label matchers, strings, ranges, groupings and $variables. */
function metricNames(expr: string): string[] {
  const bare = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, "")
    .replace(/\[[^\]]*\]/g, "")
    .replace(/\b(by|without|on|ignoring)\s*\([^)]*\)/g, "")
    .replace(/\$[a-zA-Z_]+/g, "")
    // label_values(metric, label): the second argument is a label.
    .replace(/,\s*[a-zA-Z_]+\s*\)/g, ")");
  return [...bare.matchAll(/[a-zA-Z_:][a-zA-Z0-9_:]*/g)].map((m) => m[0]).filter((w) => !PROMQL_WORDS.has(w) && !/^\d/.test(w));
}

describe("docs/grafana-dashboard.json", () => {
  it("is a Grafana dashboard model: title, uid, schema version, panels with unique ids on the grid, each with queries", () => {
    expect(dashboard.title).toBe("Switchyard");
    expect(dashboard.uid).toMatch(/^[a-zA-Z0-9_-]{1,40}$/);
    expect(dashboard.schemaVersion).toBeGreaterThanOrEqual(30);
    expect(new Set(dashboard.panels.map((p) => p.id)).size).toBe(dashboard.panels.length);
    for (const p of dashboard.panels) {
      expect(p.gridPos.x + p.gridPos.w).toBeLessThanOrEqual(24);
      expect(p.targets.length).toBeGreaterThan(0);
      expect(new Set(p.targets.map((t) => t.refId)).size).toBe(p.targets.length);
    }
  });

  it("has the panels the README promises", () => {
    const titles = dashboard.panels.map((p) => p.title).join("\n");
    for (const t of [/Request rate by status class/, /p50 \/ p99/, /Retries, rejections, ejections/, /Replicas ready/, /desired/, /Tokens .* by API key/]) expect(titles).toMatch(t);
  });

  it("names only metrics that /-/metrics emits, in every panel query and template query", () => {
    const emitted = emittedNames();
    const exprs = [
      ...dashboard.panels.flatMap((p) => p.targets.map((t) => t.expr)),
      ...dashboard.templating.list.flatMap((v) => (typeof v.query === "object" && v.query !== null ? [(v.query as { query: string }).query] : [])),
    ];
    expect(exprs.length).toBeGreaterThan(10);
    const used = new Set<string>();
    for (const expr of exprs) {
      const names = metricNames(expr);
      expect(names.length, expr).toBeGreaterThan(0);
      for (const n of names) {
        expect(emitted.has(n), `${n} in ${expr}`).toBe(true);
        used.add(n);
      }
    }
    // The parser above is not vacuous: it finds the histogram buckets and the token counter.
    expect(used).toContain("switchyard_request_duration_seconds_bucket");
    expect(used).toContain("switchyard_tokens_total");
    expect(metricNames('rate(switchyard_nope_total{deployment=~"$deployment"}[5m])')).toEqual(["switchyard_nope_total"]);
  });
});
