/**
 * Engine load from an inference engine's Prometheus /metrics text: the first piece
 * of the replica agent that fronts external engines (vLLM, SGLang) and reports
 * their load to the edge (docs/protocol.md §1, src/protocol/load.ts).
 *
 * Pure: text in, figures (or an error) out; no fetching, no clock.
 *
 * An engine may expose several series per metric (several models, data-parallel
 * engine cores `engine="0"`, tensor-parallel ranks `tp_rank="1"`): running and
 * waiting are summed over every label set, KV-cache usage is the maximum.
 *
 *   vLLM    vllm:num_requests_running, vllm:num_requests_waiting,
 *           vllm:kv_cache_usage_perc (a fraction 0..1 despite the name; falls back
 *           to the removed vllm:gpu_cache_usage_perc only when it is absent),
 *           vllm:lora_requests_info (a gauge whose value is a timestamp; the
 *           series with the latest one gives running_lora_adapters and
 *           waiting_lora_adapters, comma-separated); and, where all are present,
 *           vllm:prompt_tokens_total, vllm:prefix_cache_hits_total and
 *           vllm:request_prefill_time_seconds (_sum, _count): the counters the agent
 *           turns into the engine's prefill rate and wait (src/agent/agent.ts)
 *   SGLang  sglang:num_running_reqs, sglang:num_queue_reqs, sglang:token_usage
 *           (a fraction 0..1)
 */

import { parsePrometheusText, PrometheusParseError, type Sample } from "../telemetry/prometheus-parse.ts";

export interface EngineLoad {
  engine: "vllm" | "sglang";
  /** Requests in the engine's running batch, summed over all series. */
  running: number;
  /** Requests queued in the engine, summed over all series. */
  waiting: number;
  /** KV-cache usage as a fraction 0..1, the maximum over all series; absent when the engine does not say. */
  kvCacheUsage?: number;
  /** LoRA adapters running or waiting (vLLM only), without duplicates or empties, sorted. */
  loraAdapters: string[];
  /** The engine's prefill counters since it started (vLLM), summed over all series; absent when it lacks any of them. */
  prefill?: PrefillCounters;
}

/** Cumulative prefill counters: what two scrapes' difference turns into a rate and a mean prefill time. */
export interface PrefillCounters {
  /** Prompt tokens computed: prompt tokens less those the prefix cache held. */
  computedTokens: number;
  /** Seconds requests spent in prefill, summed (vllm:request_prefill_time_seconds_sum). */
  seconds: number;
  /** Requests whose prefill ended (its _count). */
  requests: number;
}

export interface EngineMetricsError {
  error: string;
}

export function isEngineMetricsError(x: EngineLoad | EngineMetricsError): x is EngineMetricsError {
  return "error" in x;
}

interface EngineNames {
  running: string;
  waiting: string;
  kv: string;
  /** Used only when no `kv` series is present. */
  kvFallback?: string;
  lora?: string;
  prefill?: { prompt: string; cached: string; seconds: string; requests: string };
}

const NAMES: Record<EngineLoad["engine"], EngineNames> = {
  vllm: {
    running: "vllm:num_requests_running",
    waiting: "vllm:num_requests_waiting",
    kv: "vllm:kv_cache_usage_perc",
    kvFallback: "vllm:gpu_cache_usage_perc",
    lora: "vllm:lora_requests_info",
    prefill: {
      prompt: "vllm:prompt_tokens_total",
      cached: "vllm:prefix_cache_hits_total",
      seconds: "vllm:request_prefill_time_seconds_sum",
      requests: "vllm:request_prefill_time_seconds_count",
    },
  },
  sglang: {
    running: "sglang:num_running_reqs",
    waiting: "sglang:num_queue_reqs",
    kv: "sglang:token_usage",
  },
};

class Garbage extends Error {}

function describe(s: Sample): string {
  const labels = Object.entries(s.labels)
    .map(([k, v]) => `${k}="${v}"`)
    .join(",");
  return labels === "" ? s.name : `${s.name}{${labels}}`;
}

/** Sum of a count metric over its series; undefined when there is none. */
function sumCount(samples: readonly Sample[], name: string): number | undefined {
  const series = samples.filter((s) => s.name === name);
  if (series.length === 0) return undefined;
  let total = 0;
  for (const s of series) {
    if (!Number.isFinite(s.value) || s.value < 0) throw new Garbage(`${describe(s)} is ${s.value}, not a count`);
    total += s.value;
  }
  return total;
}

/** Maximum of a fraction metric over its series; undefined when there is none. */
function maxFraction(samples: readonly Sample[], name: string): number | undefined {
  const series = samples.filter((s) => s.name === name);
  if (series.length === 0) return undefined;
  let max = 0;
  for (const s of series) {
    if (!(s.value >= 0 && s.value <= 1)) throw new Garbage(`${describe(s)} is ${s.value}, not a fraction in [0, 1]`);
    max = Math.max(max, s.value);
  }
  return max;
}

function splitAdapters(list: string | undefined): string[] {
  return (list ?? "")
    .split(",")
    .map((a) => a.trim())
    .filter((a) => a !== "");
}

/** The adapters of the lora_requests_info series with the latest timestamp value. */
function loraAdapters(samples: readonly Sample[], name: string): string[] {
  let latest: Sample | undefined;
  for (const s of samples) {
    if (s.name !== name || !Number.isFinite(s.value)) continue;
    if (latest === undefined || s.value > latest.value) latest = s;
  }
  if (latest === undefined) return [];
  const all = new Set([...splitAdapters(latest.labels.running_lora_adapters), ...splitAdapters(latest.labels.waiting_lora_adapters)]);
  return [...all].sort();
}

/** Turns an engine's /metrics text into load figures, or says why it cannot. */
export function engineLoad(text: string): EngineLoad | EngineMetricsError {
  let samples: Sample[];
  try {
    samples = parsePrometheusText(text).samples;
  } catch (e) {
    if (e instanceof PrometheusParseError) return { error: `unparseable metrics: ${e.message}` };
    throw e;
  }
  const hasVllm = samples.some((s) => s.name.startsWith("vllm:"));
  const hasSglang = samples.some((s) => s.name.startsWith("sglang:"));
  if (!hasVllm && !hasSglang) return { error: "unrecognised metrics: no vllm: or sglang: series" };
  if (hasVllm && hasSglang) return { error: "ambiguous metrics: both vllm: and sglang: series" };
  const engine: EngineLoad["engine"] = hasVllm ? "vllm" : "sglang";
  const names = NAMES[engine];
  try {
    const running = sumCount(samples, names.running);
    if (running === undefined) return { error: `${engine} metrics without ${names.running}` };
    const waiting = sumCount(samples, names.waiting);
    if (waiting === undefined) return { error: `${engine} metrics without ${names.waiting}` };
    let kvCacheUsage = maxFraction(samples, names.kv);
    if (kvCacheUsage === undefined && names.kvFallback !== undefined) kvCacheUsage = maxFraction(samples, names.kvFallback);
    const load: EngineLoad = { engine, running, waiting, loraAdapters: names.lora ? loraAdapters(samples, names.lora) : [] };
    if (kvCacheUsage !== undefined) load.kvCacheUsage = kvCacheUsage;
    if (names.prefill) {
      const prompt = sumCount(samples, names.prefill.prompt);
      const cached = sumCount(samples, names.prefill.cached);
      const seconds = sumCount(samples, names.prefill.seconds);
      const requests = sumCount(samples, names.prefill.requests);
      if (prompt !== undefined && cached !== undefined && seconds !== undefined && requests !== undefined) {
        load.prefill = { computedTokens: Math.max(0, prompt - cached), seconds, requests };
      }
    }
    return load;
  } catch (e) {
    if (e instanceof Garbage) return { error: `bad ${engine} metrics: ${e.message}` };
    throw e;
  }
}

/**
 * How many LoRA adapters the engine keeps loaded at once: the `max_lora` label of
 * vLLM's latest vllm:lora_requests_info series (vLLM's --max-loras). Undefined when
 * the engine reports no LoRA info (LoRA off, SGLang) or the text does not parse.
 */
export function maxLoraAdapters(text: string): number | undefined {
  let samples: Sample[];
  try {
    samples = parsePrometheusText(text).samples;
  } catch (e) {
    if (e instanceof PrometheusParseError) return undefined;
    throw e;
  }
  let latest: Sample | undefined;
  for (const s of samples) {
    if (s.name !== NAMES.vllm.lora || !Number.isFinite(s.value)) continue;
    if (latest === undefined || s.value > latest.value) latest = s;
  }
  const raw = latest?.labels.max_lora;
  if (raw === undefined || !/^\d{1,4}$/.test(raw.trim())) return undefined;
  const n = Number(raw.trim());
  return n >= 1 ? n : undefined;
}
