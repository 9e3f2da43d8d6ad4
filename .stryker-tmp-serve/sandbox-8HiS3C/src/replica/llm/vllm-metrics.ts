/**
 * The replica's /metrics for its language model, in vLLM's Prometheus exposition: the
 * same metric names, label names, bucket boundaries, HELP texts and number formatting
 * as vLLM's V1 engine (vllm/v1/metrics/loggers.py, rendered by Python's
 * prometheus_client), so that what reads a vLLM server (the replica agent,
 * src/agent/engine-metrics.ts; Prometheus dashboards) reads this replica too. Pure.
 *
 * Every series carries model_name="<served model>" and engine="0", as vLLM's do.
 */
// @ts-nocheck

import { escapeLabelValue } from "../../telemetry/prometheus.ts";

/** vLLM's buckets for vllm:time_to_first_token_seconds. */
export const TTFT_BUCKETS_S: readonly number[] = [
  0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];
/** vLLM's buckets for vllm:inter_token_latency_seconds and vllm:time_per_output_token_seconds. */
export const ITL_BUCKETS_S: readonly number[] = [0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0];
/** vLLM's request_latency_buckets (vllm:e2e_request_latency_seconds). */
export const E2E_BUCKETS_S: readonly number[] = [
  0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0,
];

/** A cumulative-bucket histogram with fixed upper bounds (prometheus_client's Histogram). */
export class BucketHistogram {
  readonly bounds: readonly number[];
  /** Observations per bucket (not cumulative); the last one is +Inf. */
  readonly counts: number[];
  sum = 0;
  count = 0;

  constructor(bounds: readonly number[]) {
    this.bounds = bounds;
    this.counts = new Array<number>(bounds.length + 1).fill(0);
  }

  observe(value: number): void {
    let i = 0;
    while (i < this.bounds.length && value > this.bounds[i]!) i++;
    this.counts[i]!++;
    this.sum += value;
    this.count++;
  }
}

export type FinishReason = "stop" | "length" | "abort";

export interface VllmMetricsState {
  modelName: string;
  running: number;
  waiting: number;
  /** 0..1 */
  kvCacheUsage: number;
  blockSize: number;
  numGpuBlocks: number;
  promptTokens: number;
  generationTokens: number;
  preemptions: number;
  /** Prompt tokens looked up in the prefix cache (vllm:prefix_cache_queries). */
  prefixCacheQueries: number;
  /** Of those, tokens found cached (vllm:prefix_cache_hits). */
  prefixCacheHits: number;
  requestSuccess: Readonly<Record<FinishReason, number>>;
  ttft: BucketHistogram;
  interTokenLatency: BucketHistogram;
  e2eLatency: BucketHistogram;
  /** Seconds since the epoch: the value of vllm:lora_requests_info (vLLM sets it to the time of its last update). */
  timestampS: number;
}

/**
 * A number as Python's prometheus_client writes it (floatToGoString / repr): "5.0",
 * "0.4213", "1e-05", "1.7e+16", "+Inf", "-Inf", "NaN".
 */
export function formatPromFloat(v: number): string {
  if (Number.isNaN(v)) return "NaN";
  if (v === Infinity) return "+Inf";
  if (v === -Infinity) return "-Inf";
  const abs = Math.abs(v);
  if (abs !== 0 && (abs < 1e-4 || abs >= 1e16)) {
    const [mantissa, exp] = v.toExponential().split("e") as [string, string];
    const sign = exp.startsWith("-") ? "-" : "+";
    const digits = exp.replace(/^[+-]/, "").padStart(2, "0");
    return `${mantissa}e${sign}${digits}`;
  }
  const s = String(v);
  return Number.isInteger(v) ? `${s}.0` : s;
}

const labelText = (labels: readonly (readonly [string, string])[]) => `{${labels.map(([k, v]) => `${k}="${escapeLabelValue(v)}"`).join(",")}}`;

/** The exposition text (format 0.0.4). */
export function renderVllmMetrics(s: VllmMetricsState): string {
  const base: [string, string][] = [
    ["model_name", s.modelName],
    ["engine", "0"],
  ];
  const lines: string[] = [];
  const family = (name: string, type: "gauge" | "counter" | "histogram", help: string) => {
    lines.push(`# HELP ${name} ${help}`, `# TYPE ${name} ${type}`);
  };
  const sample = (name: string, labels: readonly (readonly [string, string])[], value: number) => {
    lines.push(`${name}${labelText(labels)} ${formatPromFloat(value)}`);
  };
  const histogram = (name: string, help: string, h: BucketHistogram) => {
    family(name, "histogram", help);
    let cumulative = 0;
    for (let i = 0; i < h.bounds.length; i++) {
      cumulative += h.counts[i]!;
      sample(`${name}_bucket`, [...base, ["le", formatPromFloat(h.bounds[i]!)]], cumulative);
    }
    sample(`${name}_bucket`, [...base, ["le", "+Inf"]], h.count);
    sample(`${name}_count`, base, h.count);
    // Sums of many float seconds: round away the binary noise (microseconds).
    sample(`${name}_sum`, base, Math.round(h.sum * 1e6) / 1e6);
  };

  /** A family with one sample, labelled with the base labels only. */
  const single = (name: string, type: "gauge" | "counter", help: string, value: number) => {
    family(name, type, help);
    sample(name, base, value);
  };

  single("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.", s.running);
  single("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.", s.waiting);
  single("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", s.kvCacheUsage);
  // Counters in tokens, as vLLM's PrometheusStatLogger declares them (prometheus_client adds _total).
  single("vllm:prefix_cache_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.", s.prefixCacheQueries);
  single("vllm:prefix_cache_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.", s.prefixCacheHits);
  single("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.", s.preemptions);
  single("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.", s.promptTokens);
  single("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.", s.generationTokens);
  family("vllm:request_success_total", "counter", "Count of successfully processed requests.");
  for (const reason of ["stop", "length", "abort"] as const) {
    sample("vllm:request_success_total", [...base, ["finished_reason", reason]], s.requestSuccess[reason]);
  }
  histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", s.ttft);
  histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", s.interTokenLatency);
  histogram("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", s.interTokenLatency);
  histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", s.e2eLatency);
  family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig");
  sample(
    "vllm:cache_config_info",
    [
      ["block_size", String(s.blockSize)],
      ["cache_dtype", "auto"],
      ["enable_prefix_caching", "True"],
      ["num_cpu_blocks", "None"],
      ["num_gpu_blocks", String(s.numGpuBlocks)],
      ["engine", "0"],
    ],
    1,
  );
  family("vllm:lora_requests_info", "gauge", "Running stats on lora requests.");
  sample(
    "vllm:lora_requests_info",
    [
      ["max_lora", "0"],
      ["waiting_lora_adapters", ""],
      ["running_lora_adapters", ""],
    ],
    s.timestampS,
  );
  return `${lines.join("\n")}\n`;
}
