import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { engineLoad, isEngineMetricsError, type EngineLoad } from "../../src/agent/engine-metrics.ts";

const fixture = (name: string): string => readFileSync(new URL(`../fixtures/engine-metrics/${name}`, import.meta.url), "utf8");

function load(text: string): EngineLoad {
  const out = engineLoad(text);
  if (isEngineMetricsError(out)) throw new Error(`expected load, got error: ${out.error}`);
  return out;
}

function error(text: string): string {
  const out = engineLoad(text);
  if (!isEngineMetricsError(out)) throw new Error(`expected an error, got ${JSON.stringify(out)}`);
  return out.error;
}

const vllm = (lines: string[]): string => lines.join("\n") + "\n";

describe("engineLoad: fixtures", () => {
  it("reads the vLLM fixture: one engine core with LoRA, the adapters of the latest info series", () => {
    expect(load(fixture("vllm.txt"))).toEqual({
      engine: "vllm",
      running: 8,
      waiting: 3,
      kvCacheUsage: 0.4213,
      loraAdapters: ["sql-lora", "summarise-lora"],
      // 182,304 prompt tokens less 120,304 the prefix cache held; the prefill histogram's sum and count.
      prefill: { computedTokens: 62_000, seconds: 12.4, requests: 419 },
    });
  });

  it("leaves the prefill counters out when any of them is missing (they make a rate only together)", () => {
    const text = fixture("vllm.txt").split("\n").filter((l) => !l.startsWith("vllm:prefix_cache_hits_total")).join("\n");
    expect(load(text)).not.toHaveProperty("prefill");
  });

  it("reads the vLLM data-parallel fixture: sums two engine cores, max KV usage, no LoRA (vLLM has none in DP mode)", () => {
    expect(load(fixture("vllm-dp.txt"))).toEqual({ engine: "vllm", running: 8, waiting: 3, kvCacheUsage: 0.4213, loraAdapters: [] });
  });

  it("reads the SGLang fixture: sums two TP ranks, max token usage, no LoRA", () => {
    expect(load(fixture("sglang.txt"))).toEqual({ engine: "sglang", running: 20, waiting: 6, kvCacheUsage: 0.31, loraAdapters: [] });
  });

  it("falls back to vllm:gpu_cache_usage_perc in the legacy fixture", () => {
    expect(load(fixture("vllm-legacy.txt"))).toEqual({ engine: "vllm", running: 7, waiting: 4, kvCacheUsage: 0.625, loraAdapters: [] });
  });
});

describe("engineLoad: vLLM", () => {
  const base = ['vllm:num_requests_running{model_name="a"} 1', 'vllm:num_requests_waiting{model_name="a"} 0'];

  it("prefers kv_cache_usage_perc over gpu_cache_usage_perc when both are present", () => {
    const out = load(vllm([...base, 'vllm:kv_cache_usage_perc{model_name="a"} 0.2', 'vllm:gpu_cache_usage_perc{model_name="a"} 0.9']));
    expect(out.kvCacheUsage).toBe(0.2);
  });

  it("leaves kvCacheUsage out when neither KV metric is present", () => {
    const out = load(vllm(base));
    expect(out).toEqual({ engine: "vllm", running: 1, waiting: 0, loraAdapters: [] });
    expect("kvCacheUsage" in out).toBe(false);
  });

  it("sums running and waiting across models and engines, takes the max KV usage", () => {
    const out = load(
      vllm([
        'vllm:num_requests_running{engine="0",model_name="a"} 2',
        'vllm:num_requests_running{engine="1",model_name="a"} 3',
        'vllm:num_requests_running{engine="0",model_name="b"} 4',
        'vllm:num_requests_waiting{engine="0",model_name="a"} 1',
        'vllm:num_requests_waiting{engine="0",model_name="b"} 10',
        'vllm:kv_cache_usage_perc{engine="0",model_name="a"} 0.5',
        'vllm:kv_cache_usage_perc{engine="1",model_name="a"} 0.75',
        'vllm:kv_cache_usage_perc{engine="0",model_name="b"} 0.1',
      ]),
    );
    expect([out.running, out.waiting, out.kvCacheUsage]).toEqual([9, 11, 0.75]);
  });

  it("unions running and waiting adapters of the latest lora_requests_info series, dropping empties and duplicates", () => {
    const out = load(
      vllm([
        ...base,
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="old",waiting_lora_adapters="older"} 1700000000',
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="b,,a",waiting_lora_adapters="a, c ,"} 1700000100',
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="middle",waiting_lora_adapters=""} 1700000050',
      ]),
    );
    expect(out.loraAdapters).toEqual(["a", "b", "c"]);
  });

  it("gives no adapters when the latest lora_requests_info lists none", () => {
    const out = load(
      vllm([
        ...base,
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="x",waiting_lora_adapters=""} 1700000000',
        'vllm:lora_requests_info{max_lora="2",running_lora_adapters="",waiting_lora_adapters=""} 1700000001',
      ]),
    );
    expect(out.loraAdapters).toEqual([]);
  });

  it("says which vLLM series is missing", () => {
    expect(error(vllm(['vllm:num_requests_running{model_name="a"} 1']))).toBe("vllm metrics without vllm:num_requests_waiting");
    expect(error(vllm(['vllm:num_requests_waiting{model_name="a"} 1']))).toBe("vllm metrics without vllm:num_requests_running");
  });
});

describe("engineLoad: SGLang", () => {
  it("sums running and queued across ranks, takes the max token usage", () => {
    const out = load(
      [
        'sglang:num_running_reqs{tp_rank="0"} 1',
        'sglang:num_running_reqs{tp_rank="1"} 2',
        'sglang:num_queue_reqs{tp_rank="0"} 3',
        'sglang:num_queue_reqs{tp_rank="1"} 4',
        'sglang:token_usage{tp_rank="0"} 0.9',
        'sglang:token_usage{tp_rank="1"} 0.4',
      ].join("\n"),
    );
    expect(out).toEqual({ engine: "sglang", running: 3, waiting: 7, kvCacheUsage: 0.9, loraAdapters: [] });
  });
});

describe("engineLoad: rejects", () => {
  it("text with neither vllm: nor sglang: series", () => {
    const msg = "unrecognised metrics: no vllm: or sglang: series";
    expect(engineLoad("")).toEqual({ error: msg });
    expect(engineLoad("# HELP up Up.\n# TYPE up gauge\nup 1\nswitchyard_requests_total 3\n")).toEqual({ error: msg });
  });

  it("text with both engines' series", () => {
    expect(error("vllm:num_requests_running 1\nsglang:num_running_reqs 1\n")).toMatch(/^ambiguous metrics/);
  });

  it("text that is not the exposition format", () => {
    expect(error("<html>502 Bad Gateway</html>\n")).toMatch(/^unparseable metrics: metrics line 1/);
  });

  const garbage: [string, string, RegExp][] = [
    ["a NaN running count", 'vllm:num_requests_running{engine="0"} NaN\nvllm:num_requests_waiting 0', /vllm:num_requests_running\{engine="0"\} is NaN, not a count/],
    ["a negative waiting count", "vllm:num_requests_running 1\nvllm:num_requests_waiting -1", /vllm:num_requests_waiting is -1, not a count/],
    ["an infinite running count", "sglang:num_running_reqs +Inf\nsglang:num_queue_reqs 0", /sglang:num_running_reqs is Infinity, not a count/],
    ["KV usage above 1 (a percentage)", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 42", /vllm:kv_cache_usage_perc is 42, not a fraction/],
    ["negative legacy KV usage", "vllm:num_requests_running 1\nvllm:num_requests_waiting 0\nvllm:gpu_cache_usage_perc -0.1", /vllm:gpu_cache_usage_perc is -0.1, not a fraction/],
    ["NaN token usage", "sglang:num_running_reqs 1\nsglang:num_queue_reqs 0\nsglang:token_usage NaN", /sglang:token_usage is NaN, not a fraction/],
  ];
  for (const [what, text, pattern] of garbage) {
    it(`garbage: ${what}`, () => {
      const msg = error(text);
      expect(msg).toMatch(/^bad (vllm|sglang) metrics: /);
      expect(msg).toMatch(pattern);
    });
  }
});
