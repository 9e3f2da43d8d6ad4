/**
 * The replica's vLLM-format /metrics (src/replica/llm/vllm-metrics.ts): names, labels,
 * buckets and number formatting as vLLM's prometheus_client output, parseable by the
 * CLI's Prometheus parser and read correctly by the replica agent's engineLoad.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { engineLoad, isEngineMetricsError } from "../../src/agent/engine-metrics.ts";
import {
  BucketHistogram,
  E2E_BUCKETS_S,
  ITL_BUCKETS_S,
  TTFT_BUCKETS_S,
  formatPromFloat,
  renderVllmMetrics,
  type VllmMetricsState,
} from "../../src/replica/llm/vllm-metrics.ts";
import { parsePrometheusText } from "../../src/telemetry/prometheus-parse.ts";

function state(o: Partial<VllmMetricsState> = {}): VllmMetricsState {
  return {
    modelName: "tiny-lm",
    running: 3,
    waiting: 2,
    kvCacheUsage: 0.4375,
    blockSize: 16,
    numGpuBlocks: 512,
    promptTokens: 1234,
    generationTokens: 5678,
    preemptions: 1,
    prefixCacheQueries: 4096,
    prefixCacheHits: 3072,
    requestSuccess: { stop: 4, length: 5, abort: 1 },
    ttft: new BucketHistogram(TTFT_BUCKETS_S),
    interTokenLatency: new BucketHistogram(ITL_BUCKETS_S),
    e2eLatency: new BucketHistogram(E2E_BUCKETS_S),
    timestampS: 1_712_345_678.25,
    ...o,
  };
}

describe("formatPromFloat", () => {
  it("writes numbers as Python's prometheus_client does", () => {
    expect(formatPromFloat(5)).toBe("5.0");
    expect(formatPromFloat(0)).toBe("0.0");
    expect(formatPromFloat(0.4213)).toBe("0.4213");
    expect(formatPromFloat(2560)).toBe("2560.0");
    expect(formatPromFloat(0.001)).toBe("0.001");
    expect(formatPromFloat(0.0001)).toBe("0.0001");
    expect(formatPromFloat(0.00001)).toBe("1e-05");
    expect(formatPromFloat(1.5e-7)).toBe("1.5e-07");
    expect(formatPromFloat(1e16)).toBe("1e+16");
    expect(formatPromFloat(1712345678.25)).toBe("1712345678.25");
    expect(formatPromFloat(Infinity)).toBe("+Inf");
    expect(formatPromFloat(-Infinity)).toBe("-Inf");
    expect(formatPromFloat(NaN)).toBe("NaN");
  });
});

describe("renderVllmMetrics", () => {
  it("a value on a bucket's bound counts in that bucket (le is ≤), just above it in the next", () => {
    const h = new BucketHistogram([0.01, 0.025]);
    h.observe(0.01);
    h.observe(0.0100001);
    h.observe(0.025);
    h.observe(99);
    expect(h.counts).toEqual([1, 2, 1]);
    expect([h.count, h.sum]).toEqual([4, 0.01 + 0.0100001 + 0.025 + 99]);
  });

  it("HELP texts as vLLM writes them (the engine-metrics fixture, in vLLM's words), for every family both expose", () => {
    const help = (text: string) => new Map(text.split("\n").flatMap((l) => (l.startsWith("# HELP vllm:") ? [[l.split(" ")[2]!, l.split(" ").slice(3).join(" ")] as const] : [])));
    const vllm = help(readFileSync(new URL("../fixtures/engine-metrics/vllm.txt", import.meta.url), "utf8"));
    const ours = help(renderVllmMetrics(state()));
    const shared = [...ours.keys()].filter((k) => vllm.has(k));
    expect(shared.length).toBeGreaterThanOrEqual(6);
    for (const k of shared) expect(ours.get(k), k).toBe(vllm.get(k));
    // And the families the fixture does not show, in vLLM's loggers.py words.
    expect(Object.fromEntries([...ours].filter(([k]) => !vllm.has(k)))).toMatchObject({
      "vllm:e2e_request_latency_seconds": "Histogram of e2e request latency in seconds.",
      "vllm:cache_config_info": "Information of the LLMEngine CacheConfig",
    });
  });

  it("uses vLLM's bucket boundaries", () => {
    expect(TTFT_BUCKETS_S).toEqual([0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]);
    expect(ITL_BUCKETS_S).toEqual([0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0]);
    expect(E2E_BUCKETS_S[0]).toBe(0.3);
    expect(E2E_BUCKETS_S.at(-1)).toBe(7680);
  });

  it("exposes vLLM's gauges, counters and info series with vLLM's names and labels", () => {
    const text = renderVllmMetrics(state());
    const lines = text.split("\n");
    for (const line of [
      "# HELP vllm:num_requests_running Number of requests in model execution batches.",
      "# TYPE vllm:num_requests_running gauge",
      'vllm:num_requests_running{model_name="tiny-lm",engine="0"} 3.0',
      "# TYPE vllm:num_requests_waiting gauge",
      'vllm:num_requests_waiting{model_name="tiny-lm",engine="0"} 2.0',
      "# HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.",
      'vllm:kv_cache_usage_perc{model_name="tiny-lm",engine="0"} 0.4375',
      "# TYPE vllm:prompt_tokens_total counter",
      'vllm:prompt_tokens_total{model_name="tiny-lm",engine="0"} 1234.0',
      'vllm:generation_tokens_total{model_name="tiny-lm",engine="0"} 5678.0',
      'vllm:num_preemptions_total{model_name="tiny-lm",engine="0"} 1.0',
      'vllm:request_success_total{model_name="tiny-lm",engine="0",finished_reason="stop"} 4.0',
      "# TYPE vllm:time_to_first_token_seconds histogram",
      "# HELP vllm:prefix_cache_queries_total Prefix cache queries, in terms of number of queried tokens.",
      "# TYPE vllm:prefix_cache_queries_total counter",
      'vllm:prefix_cache_queries_total{model_name="tiny-lm",engine="0"} 4096.0',
      "# HELP vllm:prefix_cache_hits_total Prefix cache hits, in terms of number of cached tokens.",
      "# TYPE vllm:prefix_cache_hits_total counter",
      'vllm:prefix_cache_hits_total{model_name="tiny-lm",engine="0"} 3072.0',
      'vllm:cache_config_info{block_size="16",cache_dtype="auto",enable_prefix_caching="True",num_cpu_blocks="None",num_gpu_blocks="512",engine="0"} 1.0',
      'vllm:lora_requests_info{max_lora="0",waiting_lora_adapters="",running_lora_adapters=""} 1712345678.25',
    ]) {
      expect(lines).toContain(line);
    }
    expect(text.endsWith("\n")).toBe(true);
  });

  it("writes histograms cumulatively, +Inf bucket, then _count and _sum", () => {
    const ttft = new BucketHistogram(TTFT_BUCKETS_S);
    for (const v of [0.0005, 0.003, 0.003, 0.2, 3000]) ttft.observe(v);
    const text = renderVllmMetrics(state({ ttft }));
    const family = text.split("\n").filter((l) => l.startsWith("vllm:time_to_first_token_seconds"));
    expect(family).toHaveLength(TTFT_BUCKETS_S.length + 3);
    expect(family[0]).toBe('vllm:time_to_first_token_seconds_bucket{model_name="tiny-lm",engine="0",le="0.001"} 1.0');
    expect(family[1]).toBe('vllm:time_to_first_token_seconds_bucket{model_name="tiny-lm",engine="0",le="0.005"} 3.0');
    expect(family[8]).toBe('vllm:time_to_first_token_seconds_bucket{model_name="tiny-lm",engine="0",le="0.25"} 4.0');
    expect(family[21]).toBe('vllm:time_to_first_token_seconds_bucket{model_name="tiny-lm",engine="0",le="2560.0"} 4.0');
    expect(family[22]).toBe('vllm:time_to_first_token_seconds_bucket{model_name="tiny-lm",engine="0",le="+Inf"} 5.0');
    expect(family[23]).toBe('vllm:time_to_first_token_seconds_count{model_name="tiny-lm",engine="0"} 5.0');
    expect(family[24]).toBe('vllm:time_to_first_token_seconds_sum{model_name="tiny-lm",engine="0"} 3000.2065');
  });

  it("parses as Prometheus text, and the replica agent reads running, waiting and KV usage from it", () => {
    const text = renderVllmMetrics(state());
    const exposition = parsePrometheusText(text);
    expect(exposition.types["vllm:inter_token_latency_seconds"]).toBe("histogram");
    expect(exposition.types["vllm:e2e_request_latency_seconds"]).toBe("histogram");
    expect(exposition.types["vllm:generation_tokens_total"]).toBe("counter");
    const load = engineLoad(text);
    if (isEngineMetricsError(load)) throw new Error(load.error);
    expect(load).toEqual({ engine: "vllm", running: 3, waiting: 2, kvCacheUsage: 0.4375, loraAdapters: [] });

    const idle = engineLoad(renderVllmMetrics(state({ running: 0, waiting: 0, kvCacheUsage: 0 })));
    expect(idle).toEqual({ engine: "vllm", running: 0, waiting: 0, kvCacheUsage: 0, loraAdapters: [] });
  });

  it("escapes label values", () => {
    const text = renderVllmMetrics(state({ modelName: 'a"b\\c' }));
    expect(text).toContain('vllm:num_requests_running{model_name="a\\"b\\\\c",engine="0"} 3.0');
    expect(parsePrometheusText(text).samples.find((s) => s.name === "vllm:num_requests_running")?.labels.model_name).toBe('a"b\\c');
  });
});
