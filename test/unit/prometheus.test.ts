/** renderPrometheus: Prometheus text exposition format 0.0.4, checked with a small parser. */
import { beforeAll, describe, expect, it } from "vitest";
import type { ReplicaView } from "../../src/protocol/index.ts";
import { renderPrometheus, type DeploymentMetrics } from "../../src/telemetry/prometheus.ts";
import { LATENCY_BUCKETS_S, type DeploymentTotals } from "../../src/telemetry/types.ts";
import { deploymentDelta, histogramOf } from "../fixtures/telemetry.ts";

// ---------------------------------------------------------------------------
// A tiny, strict parser of the text format.

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
}
interface Family {
  name: string;
  help: string;
  type: string;
  samples: Sample[];
}

const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*/;
const LABEL_NAME = /^[a-zA-Z_][a-zA-Z0-9_]*/;

function parseValue(raw: string): number {
  if (raw === "+Inf") return Infinity;
  if (raw === "-Inf") return -Infinity;
  if (raw === "NaN") return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(raw)) throw new Error(`bad value ${JSON.stringify(raw)}`);
  return Number(raw);
}

function parseSample(line: string): Sample {
  const m = NAME.exec(line);
  if (!m) throw new Error(`bad metric name in ${JSON.stringify(line)}`);
  const name = m[0];
  let i = name.length;
  const labels: Record<string, string> = {};
  if (line[i] === "{") {
    i++;
    while (line[i] !== "}") {
      const ln = LABEL_NAME.exec(line.slice(i));
      if (!ln) throw new Error(`bad label name at ${i} in ${JSON.stringify(line)}`);
      i += ln[0].length;
      if (line.slice(i, i + 2) !== '="') throw new Error(`expected =" at ${i} in ${JSON.stringify(line)}`);
      i += 2;
      let v = "";
      for (;;) {
        const c = line[i];
        if (c === undefined) throw new Error(`unterminated label value in ${JSON.stringify(line)}`);
        if (c === '"') break;
        if (c === "\n") throw new Error("raw newline in label value");
        if (c === "\\") {
          const e = line[i + 1];
          if (e === "\\") v += "\\";
          else if (e === '"') v += '"';
          else if (e === "n") v += "\n";
          else throw new Error(`bad escape \\${e} in ${JSON.stringify(line)}`);
          i += 2;
        } else {
          v += c;
          i++;
        }
      }
      i++; // closing quote
      if (ln[0] in labels) throw new Error(`duplicate label ${ln[0]}`);
      labels[ln[0]] = v;
      if (line[i] === ",") i++;
      else if (line[i] !== "}") throw new Error(`expected , or } at ${i} in ${JSON.stringify(line)}`);
    }
    i++;
  }
  if (line[i] !== " ") throw new Error(`expected a space before the value in ${JSON.stringify(line)}`);
  const rest = line.slice(i + 1).split(" ");
  if (rest.length !== 1) throw new Error(`unexpected timestamp or trailing text in ${JSON.stringify(line)}`);
  return { name, labels, value: parseValue(rest[0]!) };
}

/** The family a sample belongs to, given its declared type. */
function belongs(sample: string, family: Family): boolean {
  if (family.type === "histogram") return [`${family.name}_bucket`, `${family.name}_sum`, `${family.name}_count`].includes(sample);
  return sample === family.name;
}

/**
 * Parses an exposition and checks its structure: ends with a newline, no blank
 * lines, every family has exactly one # HELP then one # TYPE before its
 * samples, families are not interleaved or repeated, every sample belongs to
 * the family declared just above it, and no series (name + labels) repeats.
 */
function parseExposition(text: string): Map<string, Family> {
  expect(text.endsWith("\n")).toBe(true);
  const lines = text.slice(0, -1).split("\n");
  const families = new Map<string, Family>();
  const seriesSeen = new Set<string>();
  let current: Family | null = null;
  let pendingHelp: { name: string; help: string } | null = null;
  for (const line of lines) {
    if (line === "") throw new Error("blank line");
    if (line.startsWith("# HELP ")) {
      if (pendingHelp) throw new Error(`# HELP ${pendingHelp.name} not followed by # TYPE`);
      const [, name, help] = /^# HELP (\S+) (.*)$/.exec(line) ?? [];
      if (!name || help === undefined) throw new Error(`bad HELP line ${line}`);
      if (families.has(name)) throw new Error(`family ${name} declared twice (interleaved or repeated)`);
      pendingHelp = { name, help };
      current = null;
      continue;
    }
    if (line.startsWith("# TYPE ")) {
      const [, name, type] = /^# TYPE (\S+) (counter|gauge|histogram|summary|untyped)$/.exec(line) ?? [];
      if (!name || !type) throw new Error(`bad TYPE line ${line}`);
      if (!pendingHelp || pendingHelp.name !== name) throw new Error(`# TYPE ${name} without a # HELP just before it`);
      current = { name, help: pendingHelp.help, type, samples: [] };
      families.set(name, current);
      pendingHelp = null;
      continue;
    }
    if (line.startsWith("#")) throw new Error(`unexpected comment ${line}`);
    if (!current) throw new Error(`sample before any # TYPE: ${line}`);
    const s = parseSample(line);
    if (!belongs(s.name, current)) throw new Error(`sample ${s.name} inside family ${current.name}`);
    const key = `${s.name}${JSON.stringify(Object.entries(s.labels).sort())}`;
    if (seriesSeen.has(key)) throw new Error(`series repeated: ${key}`);
    seriesSeen.add(key);
    current.samples.push(s);
  }
  if (pendingHelp) throw new Error(`# HELP ${pendingHelp.name} at the end without # TYPE`);
  for (const f of families.values()) if (f.samples.length === 0) throw new Error(`family ${f.name} has no samples`);
  return families;
}

// ---------------------------------------------------------------------------
// Inputs.

function replica(id: string, o: { state?: "ready" | "draining"; ongoing?: number; queued?: number; max?: number; models?: string[] } = {}): ReplicaView {
  return {
    id,
    url: `http://${id}.local:8000`,
    epoch: 1,
    load: { seq: 1, ongoing: o.ongoing ?? 0, queued: o.queued ?? 0, max: o.max ?? 4, state: o.state ?? "ready" },
    models: o.models ?? [],
    loading: [],
    expiresInMs: 10_000,
  };
}

const dm = (t: DeploymentTotals, o: Partial<Omit<DeploymentMetrics, "totals">> = {}): DeploymentMetrics => ({
  totals: t,
  replicas: [],
  sessionBindings: null,
  desiredReplicas: null,
  ...o,
});

function samplesOf(fams: Map<string, Family>, family: string, sampleName = family): Sample[] {
  return fams.get(family)?.samples.filter((s) => s.name === sampleName) ?? [];
}

function valueOf(fams: Map<string, Family>, family: string, labels: Record<string, string>, sampleName = family): number | undefined {
  return samplesOf(fams, family, sampleName).find((s) => Object.entries(labels).every(([k, v]) => s.labels[k] === v) && Object.keys(s.labels).length === Object.keys(labels).length)?.value;
}

const FULL: DeploymentMetrics[] = [
  dm(
    deploymentDelta("hello", {
      requests: { "2xx": 1027, "3xx": 2, "4xx": 13, "5xx": 3 },
      retries: 7,
      rejections: 5,
      ejections: 1,
      duration: histogramOf(0.003, 0.02, 0.02, 0.2, 1.5, 100),
      ttfb: histogramOf(0.001, 0.004, 0.3),
      tokens: { public: { prompt: 120, completion: 45 }, "sy-AbCdEfG": { prompt: 7, completion: 0 } },
    }),
    {
      replicas: [replica("r1", { ongoing: 3, queued: 1, max: 5, models: ["m-a", "org/m-b"] }), replica("r2", { state: "draining", ongoing: 1, max: 8 })],
      sessionBindings: 42,
      desiredReplicas: 3,
    },
  ),
  dm(deploymentDelta("vad", { requests: { "2xx": 9, "3xx": 0, "4xx": 0, "5xx": 1 }, duration: histogramOf(0.05) }), {
    replicas: [replica("v1", { models: ["silero"] })],
    sessionBindings: null,
    desiredReplicas: null,
  }),
];

// ---------------------------------------------------------------------------

describe("renderPrometheus: structure", () => {
  it("with no deployments, renders just the isolates gauge", () => {
    expect(renderPrometheus([], 3)).toBe(
      "# HELP switchyard_proxy_isolates Proxy isolates that flushed metrics in the last 30 s.\n# TYPE switchyard_proxy_isolates gauge\nswitchyard_proxy_isolates 3\n",
    );
  });

  it("gives every family one # HELP and one # TYPE before its samples, families not interleaved", () => {
    const text = renderPrometheus(FULL, 2);
    const fams = parseExposition(text); // throws on any structural violation
    // Each family name appears in exactly one HELP and one TYPE line.
    for (const name of fams.keys()) {
      expect(text.split("\n").filter((l) => l.startsWith(`# HELP ${name} `))).toHaveLength(1);
      expect(text.split("\n").filter((l) => l.startsWith(`# TYPE ${name} `))).toHaveLength(1);
    }
    // Both deployments' samples sit inside the one family block.
    const req = fams.get("switchyard_requests_total")!;
    expect(req.type).toBe("counter");
    expect(new Set(req.samples.map((s) => s.labels.deployment))).toEqual(new Set(["hello", "vad"]));
  });

  it("declares the expected families with the expected types", () => {
    const fams = parseExposition(renderPrometheus(FULL, 2));
    const types = Object.fromEntries([...fams.values()].map((f) => [f.name, f.type]));
    expect(types).toEqual({
      switchyard_proxy_isolates: "gauge",
      switchyard_requests_total: "counter",
      switchyard_retries_total: "counter",
      switchyard_replica_rejections_total: "counter",
      switchyard_replica_ejections_total: "counter",
      switchyard_request_duration_seconds: "histogram",
      switchyard_time_to_first_byte_seconds: "histogram",
      switchyard_replicas: "gauge",
      switchyard_replica_ongoing_requests: "gauge",
      switchyard_replica_queued_requests: "gauge",
      switchyard_replica_max_ongoing_requests: "gauge",
      switchyard_replica_models_loaded: "gauge",
      switchyard_model_loaded: "gauge",
      switchyard_session_bindings: "gauge",
      switchyard_desired_replicas: "gauge",
      switchyard_tokens_total: "counter",
    });
    for (const f of fams.values()) expect(f.help.length).toBeGreaterThan(0);
  });

  it("token counters per deployment, key label and kind; none for a deployment without tokens", () => {
    const fams = parseExposition(renderPrometheus(FULL, 2));
    expect(valueOf(fams, "switchyard_tokens_total", { deployment: "hello", key: "public", kind: "prompt" })).toBe(120);
    expect(valueOf(fams, "switchyard_tokens_total", { deployment: "hello", key: "public", kind: "completion" })).toBe(45);
    expect(valueOf(fams, "switchyard_tokens_total", { deployment: "hello", key: "sy-AbCdEfG", kind: "prompt" })).toBe(7);
    expect(samplesOf(fams, "switchyard_tokens_total").filter((s) => s.labels.deployment === "vad")).toHaveLength(0);
  });

  it("counts prompts keyed by bytes per deployment and reason", () => {
    const d = deploymentDelta("qwen", { promptFallbacks: { non_text_content: 3, template_error: 1 } });
    const fams = parseExposition(renderPrometheus([{ ...FULL[0]!, totals: d }], 1));
    expect(valueOf(fams, "switchyard_prompt_key_fallbacks_total", { deployment: "qwen", reason: "non_text_content" })).toBe(3);
    expect(valueOf(fams, "switchyard_prompt_key_fallbacks_total", { deployment: "qwen", reason: "template_error" })).toBe(1);
  });

  it("counts requests with a TTFT objective per deployment and predicted outcome", () => {
    const d = deploymentDelta("qwen", { sloOutcomes: { predicted_met: 5, predicted_missed: 2, refused: 1 } });
    const fams = parseExposition(renderPrometheus([{ ...FULL[0]!, totals: d }], 1));
    expect(valueOf(fams, "switchyard_slo_requests_total", { deployment: "qwen", outcome: "predicted_met" })).toBe(5);
    expect(valueOf(fams, "switchyard_slo_requests_total", { deployment: "qwen", outcome: "predicted_missed" })).toBe(2);
    expect(valueOf(fams, "switchyard_slo_requests_total", { deployment: "qwen", outcome: "refused" })).toBe(1);
  });

  it("the self-check parser rejects interleaved families and missing HELP/TYPE", () => {
    const ok = "# HELP a x\n# TYPE a gauge\na 1\n# HELP b y\n# TYPE b gauge\nb 2\n";
    expect(() => parseExposition(ok)).not.toThrow();
    expect(() => parseExposition(ok + "# HELP a x\n# TYPE a gauge\na{k=\"v\"} 3\n")).toThrow(/declared twice/);
    expect(() => parseExposition("# HELP a x\n# TYPE a gauge\na 1\nb 2\n")).toThrow(/inside family a/);
    expect(() => parseExposition("# TYPE a gauge\na 1\n")).toThrow(/without a # HELP/);
    expect(() => parseExposition("a 1\n")).toThrow(/before any # TYPE/);
    expect(() => parseExposition('# HELP a x\n# TYPE a gauge\na{k="v\\q"} 1\n')).toThrow(/bad escape/);
  });
});

describe("renderPrometheus: counters", () => {
  it("renders request counts per status class, and retry/rejection/ejection counters", () => {
    const fams = parseExposition(renderPrometheus(FULL, 2));
    expect(valueOf(fams, "switchyard_requests_total", { deployment: "hello", code: "2xx" })).toBe(1027);
    expect(valueOf(fams, "switchyard_requests_total", { deployment: "hello", code: "3xx" })).toBe(2);
    expect(valueOf(fams, "switchyard_requests_total", { deployment: "hello", code: "4xx" })).toBe(13);
    expect(valueOf(fams, "switchyard_requests_total", { deployment: "hello", code: "5xx" })).toBe(3);
    expect(valueOf(fams, "switchyard_requests_total", { deployment: "vad", code: "5xx" })).toBe(1);
    expect(samplesOf(fams, "switchyard_requests_total")).toHaveLength(8);
    expect(valueOf(fams, "switchyard_retries_total", { deployment: "hello" })).toBe(7);
    expect(valueOf(fams, "switchyard_replica_rejections_total", { deployment: "hello" })).toBe(5);
    expect(valueOf(fams, "switchyard_replica_ejections_total", { deployment: "hello" })).toBe(1);
    expect(valueOf(fams, "switchyard_retries_total", { deployment: "vad" })).toBe(0);
    expect(valueOf(fams, "switchyard_proxy_isolates", {})).toBe(2);
  });

  it("renders exact sample lines", () => {
    const lines = renderPrometheus(FULL, 2).split("\n");
    expect(lines).toContain('switchyard_requests_total{deployment="hello",code="2xx"} 1027');
    expect(lines).toContain('switchyard_retries_total{deployment="hello"} 7');
    expect(lines).toContain('switchyard_request_duration_seconds_bucket{deployment="hello",le="0.005"} 1');
    expect(lines).toContain('switchyard_request_duration_seconds_bucket{deployment="hello",le="+Inf"} 6');
    expect(lines).toContain('switchyard_request_duration_seconds_count{deployment="hello"} 6');
    expect(lines).toContain('switchyard_replicas{deployment="hello",state="draining"} 1');
    expect(lines).toContain('switchyard_replica_ongoing_requests{deployment="hello",replica="r1"} 3');
    expect(lines).toContain('switchyard_model_loaded{deployment="hello",replica="r1",model="org/m-b"} 1');
    expect(lines).toContain('switchyard_desired_replicas{deployment="hello"} 3');
  });
});

describe("renderPrometheus: histograms", () => {
  let fams: Map<string, Family>;
  beforeAll(() => {
    fams = parseExposition(renderPrometheus(FULL, 2));
  });

  for (const family of ["switchyard_request_duration_seconds", "switchyard_time_to_first_byte_seconds"]) {
    for (const dep of ["hello", "vad"]) {
      it(`${family}{deployment="${dep}"}: buckets in le order, cumulative, ending with +Inf = _count`, () => {
        const buckets = samplesOf(fams, family, `${family}_bucket`).filter((s) => s.labels.deployment === dep);
        expect(buckets.map((b) => b.labels.le)).toEqual([...LATENCY_BUCKETS_S.map(String), "+Inf"]);
        for (const b of buckets) expect(Object.keys(b.labels).sort()).toEqual(["deployment", "le"]);
        for (let i = 1; i < buckets.length; i++) expect(buckets[i]!.value).toBeGreaterThanOrEqual(buckets[i - 1]!.value);
        const count = valueOf(fams, family, { deployment: dep }, `${family}_count`);
        expect(count).toBeDefined();
        expect(buckets.at(-1)!.value).toBe(count);
        expect(valueOf(fams, family, { deployment: dep }, `${family}_sum`)).toBeDefined();
      });
    }
  }

  it("cumulates the per-bucket counts exactly", () => {
    // duration for hello: 0.003, 0.02, 0.02, 0.2, 1.5, 100
    const h = FULL[0]!.totals.duration;
    const buckets = samplesOf(fams, "switchyard_request_duration_seconds", "switchyard_request_duration_seconds_bucket").filter((s) => s.labels.deployment === "hello");
    const byLe = Object.fromEntries(buckets.map((b) => [b.labels.le!, b.value]));
    expect(byLe).toEqual({
      "0.005": 1,
      "0.01": 1,
      "0.025": 3,
      "0.05": 3,
      "0.1": 3,
      "0.25": 4,
      "0.5": 4,
      "1": 4,
      "2.5": 5,
      "5": 5,
      "10": 5,
      "30": 5,
      "60": 5,
      "+Inf": 6,
    });
    expect(valueOf(fams, "switchyard_request_duration_seconds", { deployment: "hello" }, "switchyard_request_duration_seconds_sum")).toBeCloseTo(h.sum, 12);
    expect(valueOf(fams, "switchyard_request_duration_seconds", { deployment: "hello" }, "switchyard_request_duration_seconds_count")).toBe(6);
  });

  it("renders an empty histogram as all-zero buckets", () => {
    const f = parseExposition(renderPrometheus([dm(deploymentDelta("a"))], 0));
    const buckets = samplesOf(f, "switchyard_time_to_first_byte_seconds", "switchyard_time_to_first_byte_seconds_bucket");
    expect(buckets).toHaveLength(LATENCY_BUCKETS_S.length + 1);
    expect(buckets.every((b) => b.value === 0)).toBe(true);
    expect(valueOf(f, "switchyard_time_to_first_byte_seconds", { deployment: "a" }, "switchyard_time_to_first_byte_seconds_sum")).toBe(0);
  });
});

describe("renderPrometheus: label escaping", () => {
  it("escapes backslash, double quote and newline in label values (and they parse back)", () => {
    const nasty = 'a\\b"c\nd';
    const text = renderPrometheus([dm(deploymentDelta("hello"), { replicas: [replica(nasty, { models: ['m"1\\'] })] })], 1);
    expect(text).toContain('replica="a\\\\b\\"c\\nd"');
    expect(text).toContain('model="m\\"1\\\\"');
    // No sample line is broken by a raw newline.
    const fams = parseExposition(text);
    const ongoing = samplesOf(fams, "switchyard_replica_ongoing_requests");
    expect(ongoing).toHaveLength(1);
    expect(ongoing[0]!.labels.replica).toBe(nasty);
    expect(samplesOf(fams, "switchyard_model_loaded")[0]!.labels).toEqual({ deployment: "hello", replica: nasty, model: 'm"1\\' });
  });

  it("escapes the backslash before the quote (no double-escaping)", () => {
    const text = renderPrometheus([dm(deploymentDelta("hello"), { replicas: [replica('\\"')] })], 1);
    // \"  →  \\ then \"  →  \\\"
    expect(text).toContain('replica="\\\\\\""');
  });
});

describe("renderPrometheus: gauges", () => {
  let fams: Map<string, Family>;
  beforeAll(() => {
    fams = parseExposition(renderPrometheus(FULL, 2));
  });

  it("counts replicas by state, both states always present", () => {
    expect(valueOf(fams, "switchyard_replicas", { deployment: "hello", state: "ready" })).toBe(1);
    expect(valueOf(fams, "switchyard_replicas", { deployment: "hello", state: "draining" })).toBe(1);
    expect(valueOf(fams, "switchyard_replicas", { deployment: "vad", state: "ready" })).toBe(1);
    expect(valueOf(fams, "switchyard_replicas", { deployment: "vad", state: "draining" })).toBe(0);
    const none = parseExposition(renderPrometheus([dm(deploymentDelta("x"))], 0));
    expect(valueOf(none, "switchyard_replicas", { deployment: "x", state: "ready" })).toBe(0);
    expect(valueOf(none, "switchyard_replicas", { deployment: "x", state: "draining" })).toBe(0);
  });

  it("reports each replica's ongoing, queued and max", () => {
    expect(valueOf(fams, "switchyard_replica_ongoing_requests", { deployment: "hello", replica: "r1" })).toBe(3);
    expect(valueOf(fams, "switchyard_replica_queued_requests", { deployment: "hello", replica: "r1" })).toBe(1);
    expect(valueOf(fams, "switchyard_replica_max_ongoing_requests", { deployment: "hello", replica: "r1" })).toBe(5);
    expect(valueOf(fams, "switchyard_replica_ongoing_requests", { deployment: "hello", replica: "r2" })).toBe(1);
    expect(valueOf(fams, "switchyard_replica_max_ongoing_requests", { deployment: "hello", replica: "r2" })).toBe(8);
    expect(valueOf(fams, "switchyard_replica_ongoing_requests", { deployment: "vad", replica: "v1" })).toBe(0);
    expect(samplesOf(fams, "switchyard_replica_ongoing_requests")).toHaveLength(3);
  });

  it("reports models loaded per replica, and one series per loaded model", () => {
    expect(valueOf(fams, "switchyard_replica_models_loaded", { deployment: "hello", replica: "r1" })).toBe(2);
    expect(valueOf(fams, "switchyard_replica_models_loaded", { deployment: "hello", replica: "r2" })).toBe(0);
    expect(valueOf(fams, "switchyard_replica_models_loaded", { deployment: "vad", replica: "v1" })).toBe(1);
    const loaded = samplesOf(fams, "switchyard_model_loaded").map((s) => `${s.labels.deployment}/${s.labels.replica}/${s.labels.model}=${s.value}`);
    expect(loaded.sort()).toEqual(["hello/r1/m-a=1", "hello/r1/org/m-b=1", "vad/v1/silero=1"]);
  });

  it("omits per-replica and model families when there are no replicas or models", () => {
    const f = parseExposition(renderPrometheus([dm(deploymentDelta("x"))], 0));
    expect(f.has("switchyard_replica_ongoing_requests")).toBe(false);
    expect(f.has("switchyard_model_loaded")).toBe(false);
    const noModels = parseExposition(renderPrometheus([dm(deploymentDelta("x"), { replicas: [replica("r")] })], 0));
    expect(noModels.has("switchyard_model_loaded")).toBe(false);
    expect(valueOf(noModels, "switchyard_replica_models_loaded", { deployment: "x", replica: "r" })).toBe(0);
  });

  it("reports session bindings and desired replicas, omitted when null", () => {
    expect(valueOf(fams, "switchyard_session_bindings", { deployment: "hello" })).toBe(42);
    expect(valueOf(fams, "switchyard_desired_replicas", { deployment: "hello" })).toBe(3);
    expect(samplesOf(fams, "switchyard_session_bindings").map((s) => s.labels.deployment)).toEqual(["hello"]);
    expect(samplesOf(fams, "switchyard_desired_replicas").map((s) => s.labels.deployment)).toEqual(["hello"]);
    const none = parseExposition(renderPrometheus([dm(deploymentDelta("x"))], 0));
    expect(none.has("switchyard_session_bindings")).toBe(false);
    expect(none.has("switchyard_desired_replicas")).toBe(false);
  });

  it("renders zero (not omitted) for session bindings and desired replicas of 0", () => {
    const f = parseExposition(renderPrometheus([dm(deploymentDelta("x"), { sessionBindings: 0, desiredReplicas: 0 })], 0));
    expect(valueOf(f, "switchyard_session_bindings", { deployment: "x" })).toBe(0);
    expect(valueOf(f, "switchyard_desired_replicas", { deployment: "x" })).toBe(0);
  });

  it("keeps a family's block intact when only a later deployment contributes to it", () => {
    // desired replicas only for the second deployment; session bindings only for the first.
    const text = renderPrometheus([dm(deploymentDelta("a"), { sessionBindings: 1 }), dm(deploymentDelta("b"), { desiredReplicas: 2, replicas: [replica("r", { models: ["m"] })] })], 0);
    const fams = parseExposition(text);
    expect(valueOf(fams, "switchyard_desired_replicas", { deployment: "b" })).toBe(2);
    expect(valueOf(fams, "switchyard_session_bindings", { deployment: "a" })).toBe(1);
    expect(valueOf(fams, "switchyard_model_loaded", { deployment: "b", replica: "r", model: "m" })).toBe(1);
  });
});
