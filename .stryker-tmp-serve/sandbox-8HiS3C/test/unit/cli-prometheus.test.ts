/** The CLI's Prometheus text parser and the change detection of `metrics --follow`. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { filterLines, followRound, renderFollow, stamp } from "../../src/cli/commands/metrics.ts";
import {
  formatSample,
  parsePrometheusText,
  parseSampleLine,
  PrometheusParseError,
  SampleDiff,
  sampleJson,
  seriesKey,
  type Sample,
} from "../../src/cli/prometheus.ts";

const EXPOSITION = `# HELP switchyard_requests_total Requests answered,\\nby status class.
# TYPE switchyard_requests_total counter
switchyard_requests_total{deployment="hello",status="2xx"} 1027 1712345678901
switchyard_requests_total{deployment="hello",status="5xx"} 3
# a free comment

switchyard_replicas{deployment="vad"} 3
# TYPE switchyard_request_duration_seconds histogram
switchyard_request_duration_seconds_bucket{deployment="hello",le="0.005"} 10
switchyard_request_duration_seconds_bucket{deployment="hello",le="+Inf"} 12
switchyard_request_duration_seconds_sum{deployment="hello"} 0.0421
switchyard_request_duration_seconds_count{deployment="hello"} 12
odd{path="C:\\\\dir\\\\",quote="say \\"hi\\"",nl="a\\nb",empty=""} -1.5e-3
gauge_nan NaN
gauge_inf +Inf
gauge_minus_inf -Inf
`;

describe("parsePrometheusText", () => {
  const parsed = parsePrometheusText(EXPOSITION);

  it("reads samples, labels, values and timestamps, skipping comments and blank lines", () => {
    expect(parsed.samples).toHaveLength(11);
    expect(parsed.samples[0]).toEqual({
      name: "switchyard_requests_total",
      labels: { deployment: "hello", status: "2xx" },
      value: 1027,
      timestamp: 1712345678901,
    });
    expect(parsed.samples[1]).toEqual({ name: "switchyard_requests_total", labels: { deployment: "hello", status: "5xx" }, value: 3 });
    expect(parsed.samples[4]!.labels.le).toBe("+Inf");
    expect(parsed.samples[5]!.value).toBeCloseTo(0.0421);
  });

  it("unescapes label values (backslash, quote, newline)", () => {
    const odd = parsed.samples.find((s) => s.name === "odd")!;
    expect(odd.labels).toEqual({ path: "C:\\dir\\", quote: 'say "hi"', nl: "a\nb", empty: "" });
    expect(odd.value).toBe(-0.0015);
    // Written back, the escapes come back (labels in canonical order).
    expect(formatSample(odd)).toBe('odd{empty="",nl="a\\nb",path="C:\\\\dir\\\\",quote="say \\"hi\\""} -0.0015');
  });

  it("reads +Inf, -Inf and NaN values", () => {
    const value = (name: string) => parsed.samples.find((s) => s.name === name)!.value;
    expect(value("gauge_nan")).toBeNaN();
    expect(value("gauge_inf")).toBe(Infinity);
    expect(value("gauge_minus_inf")).toBe(-Infinity);
  });

  it("keeps HELP (unescaped) and TYPE", () => {
    expect(parsed.help.switchyard_requests_total).toBe("Requests answered,\nby status class.");
    expect(parsed.types).toEqual({ switchyard_requests_total: "counter", switchyard_request_duration_seconds: "histogram" });
  });

  it("accepts a trailing comma, spaces around tokens and CRLF line ends", () => {
    expect(parsePrometheusText('m{a="1",} 2\r\n  m2 { a = "x" , b="y" }   7  \r\n').samples).toEqual([
      { name: "m", labels: { a: "1" }, value: 2 },
      { name: "m2", labels: { a: "x", b: "y" }, value: 7 },
    ]);
    expect(parseSampleLine("m{} 1")).toEqual({ name: "m", labels: {}, value: 1 });
  });

  it("rejects malformed lines with the line number", () => {
    const bad = [
      "1metric 3",
      'm{a="1" 3',
      'm{a="unterminated} 3',
      'm{a="bad \\x escape"} 3',
      "m{a=1} 3",
      "m",
      "m one",
      "m 1 2 3",
      "m 1 1.5",
      'm{a="1",a="2"} 3',
    ];
    for (const line of bad) {
      expect(() => parsePrometheusText(`# ok\n${line}\n`), line).toThrow(PrometheusParseError);
      try {
        parsePrometheusText(`# ok\n${line}\n`);
      } catch (err) {
        expect((err as PrometheusParseError).lineNumber).toBe(2);
      }
    }
  });

  it("writes non-finite values as strings in JSON", () => {
    const json = parsed.samples.filter((s) => s.name.startsWith("gauge_")).map(sampleJson);
    expect(JSON.parse(JSON.stringify(json))).toEqual([
      { name: "gauge_nan", labels: {}, value: "NaN" },
      { name: "gauge_inf", labels: {}, value: "+Inf" },
      { name: "gauge_minus_inf", labels: {}, value: "-Inf" },
    ]);
    expect(sampleJson(parsed.samples[0]!)).toEqual({ name: "switchyard_requests_total", labels: { deployment: "hello", status: "2xx" }, value: 1027, timestamp: 1712345678901 });
  });

  it("gives the same series key whatever the label order", () => {
    expect(seriesKey({ name: "m", labels: { b: "2", a: "1" } })).toBe(seriesKey({ name: "m", labels: { a: "1", b: "2" } }));
    expect(seriesKey({ name: "m", labels: {} })).toBe("m");
  });
});

describe("metrics --follow diffing", () => {
  const s = (name: string, value: number, labels: Record<string, string> = {}): Sample => ({ name, labels, value });

  it("prints everything first, then only new or changed samples", () => {
    const diff = new SampleDiff();
    expect(diff.changed([s("a", 1), s("b", 2, { x: "1" })])).toHaveLength(2);
    expect(diff.changed([s("a", 1), s("b", 2, { x: "1" })])).toEqual([]);
    expect(diff.changed([s("a", 2), s("b", 2, { x: "1" }), s("b", 0, { x: "2" })])).toEqual([s("a", 2), s("b", 0, { x: "2" })]);
    // A series that disappears and comes back with its old value is not a change.
    expect(diff.changed([s("b", 2, { x: "1" })])).toEqual([]);
    expect(diff.changed([s("a", 2)])).toEqual([]);
  });

  it("treats NaN as equal to NaN and notices Inf", () => {
    const diff = new SampleDiff();
    diff.changed([s("n", NaN), s("i", 1)]);
    expect(diff.changed([s("n", NaN), s("i", Infinity)])).toEqual([s("i", Infinity)]);
  });

  it("filters with --grep and renders stamped lines or one JSON line", () => {
    const diff = new SampleDiff();
    const at = new Date("2024-05-01T12:00:00.250Z");
    const first = followRound(diff, [s("req_total", 1, { d: "hello" }), s("other", 5)], /req_/);
    expect(renderFollow(first, at, false)).toBe('2024-05-01T12:00:00Z req_total{d="hello"} 1\n');
    const second = followRound(diff, [s("req_total", 4, { d: "hello" }), s("other", 6)], /req_/);
    expect(JSON.parse(renderFollow(second, at, true))).toEqual({ time: "2024-05-01T12:00:00.250Z", samples: [{ name: "req_total", labels: { d: "hello" }, value: 4 }] });
    expect(renderFollow([], at, false)).toBe("");
    expect(stamp(at)).toBe("2024-05-01T12:00:00Z");
  });

  it("filters exposition lines for the plain listing", () => {
    expect(filterLines("a 1\nb 2\n# HELP a x\n", /^a|HELP a/)).toBe("a 1\n# HELP a x\n");
    expect(filterLines("a 1\n", /zzz/)).toBe("");
    expect(filterLines("a 1\nb 2", undefined)).toBe("a 1\nb 2\n");
  });
});
