/**
 * A parser for the Prometheus text exposition format (version 0.0.4), shared by the
 * CLI (`switchyard metrics`) and the replica agent (engine /metrics scraping).
 *
 *   # HELP switchyard_requests_total Requests answered, by deployment and status class.
 *   # TYPE switchyard_requests_total counter
 *   switchyard_requests_total{deployment="hello",status="2xx"} 1027 1712345678901
 *
 * Label values escape `\\`, `\"` and `\n`; values are Go floats (`+Inf`, `-Inf`,
 * `NaN` included); a sample may end with a timestamp in epoch milliseconds.
 */
// @ts-nocheck


export interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
  /** Epoch milliseconds, when the exposition gives one. */
  timestamp?: number;
}

export interface Exposition {
  samples: Sample[];
  /** `# HELP` text per metric family. */
  help: Record<string, string>;
  /** `# TYPE` per metric family (counter, gauge, histogram, summary, untyped). */
  types: Record<string, string>;
}

export class PrometheusParseError extends Error {
  constructor(
    readonly lineNumber: number,
    message: string,
  ) {
    super(`metrics line ${lineNumber}: ${message}`);
  }
}

const METRIC_NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;

/** Parses a float the way Prometheus (Go's ParseFloat) writes them. */
export function parseValue(raw: string): number | undefined {
  const lower = raw.toLowerCase();
  if (lower === "+inf" || lower === "inf") return Infinity;
  if (lower === "-inf") return -Infinity;
  if (lower === "nan") return NaN;
  if (!/^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$/.test(raw) && !/^[+-]?0[xX][0-9a-fA-F]+$/.test(raw)) return undefined;
  const n = Number(raw);
  return Number.isNaN(n) ? undefined : n;
}

function unescapeHelp(text: string): string {
  return text.replace(/\\(\\|n)/g, (_, c: string) => (c === "n" ? "\n" : "\\"));
}

/** Parses one sample line (not a comment, not blank). */
export function parseSampleLine(line: string, lineNumber = 1): Sample {
  const fail = (msg: string): never => {
    throw new PrometheusParseError(lineNumber, `${msg}: ${line.length > 200 ? `${line.slice(0, 200)}…` : line}`);
  };
  let rest = line.replace(/^[ \t]+/, "");
  const name = METRIC_NAME.exec(rest)?.[0];
  if (!name) fail("expected a metric name");
  rest = rest.slice(name!.length).replace(/^[ \t]+/, "");
  const labels: Record<string, string> = {};
  if (rest.startsWith("{")) {
    rest = rest.slice(1);
    for (;;) {
      rest = rest.replace(/^[ \t]+/, "");
      if (rest.startsWith("}")) {
        rest = rest.slice(1);
        break;
      }
      const label = LABEL_NAME.exec(rest)?.[0];
      if (!label) fail("expected a label name or '}'");
      rest = rest.slice(label!.length).replace(/^[ \t]+/, "");
      if (!rest.startsWith("=")) fail(`expected '=' after label ${label}`);
      rest = rest.slice(1).replace(/^[ \t]+/, "");
      if (!rest.startsWith('"')) fail(`expected '"' to open the value of label ${label}`);
      let value = "";
      let i = 1;
      for (;;) {
        if (i >= rest.length) fail(`unterminated value of label ${label}`);
        const c = rest[i]!;
        if (c === '"') break;
        if (c === "\\") {
          const next = rest[i + 1];
          if (next === "\\") value += "\\";
          else if (next === '"') value += '"';
          else if (next === "n") value += "\n";
          else fail(`bad escape in the value of label ${label}`);
          i += 2;
          continue;
        }
        value += c;
        i++;
      }
      if (Object.hasOwn(labels, label!)) fail(`label ${label} given twice`);
      labels[label!] = value;
      rest = rest.slice(i + 1).replace(/^[ \t]+/, "");
      if (rest.startsWith(",")) {
        rest = rest.slice(1);
        continue;
      }
      if (rest.startsWith("}")) {
        rest = rest.slice(1);
        break;
      }
      fail("expected ',' or '}' after a label");
    }
  }
  const fields = rest.trim().split(/[ \t]+/).filter((f) => f !== "");
  if (fields.length < 1 || fields.length > 2) fail("expected a value and an optional timestamp");
  const value = parseValue(fields[0]!);
  if (value === undefined) fail(`bad value "${fields[0]}"`);
  const sample: Sample = { name: name!, labels, value: value! };
  if (fields.length === 2) {
    if (!/^-?\d{1,19}$/.test(fields[1]!)) fail(`bad timestamp "${fields[1]}"`);
    sample.timestamp = Number(fields[1]);
  }
  return sample;
}

/** Parses a whole exposition. Throws PrometheusParseError on a malformed line. */
export function parsePrometheusText(text: string): Exposition {
  const out: Exposition = { samples: [], help: {}, types: {} };
  const lines = text.split("\n");
  lines.forEach((raw, index) => {
    const line = raw.endsWith("\r") ? raw.slice(0, -1) : raw;
    if (line.trim() === "") return;
    const trimmed = line.replace(/^[ \t]+/, "");
    if (trimmed.startsWith("#")) {
      const m = /^#[ \t]+(HELP|TYPE)[ \t]+([a-zA-Z_:][a-zA-Z0-9_:]*)(?:[ \t]+(.*))?$/.exec(trimmed);
      if (m?.[1] === "HELP") out.help[m[2]!] = unescapeHelp(m[3] ?? "");
      else if (m?.[1] === "TYPE") out.types[m[2]!] = (m[3] ?? "untyped").trim();
      return; // any other comment
    }
    out.samples.push(parseSampleLine(line, index + 1));
  });
  return out;
}

