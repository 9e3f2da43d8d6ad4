/**
 * The replica's generation engine: it runs requests on a language model token by token,
 * with vLLM-style KV-cache accounting (kv-cache.ts: requests that do not fit wait), stop
 * strings, seeded sampling, optional pacing that emulates a GPU engine's speed, and the
 * state behind vLLM's /metrics (vllm-metrics.ts).
 *
 * Each request runs its own loop; every token is one model run (the runs of all requests
 * are serialised process-wide by onnx-session.ts). Pacing (benchmark knobs, 0 = off):
 * `prefillMs` is waited once a request is scheduled, before its first token, and
 * `decodeMs` between tokens (token k is due decodeMs after token k-1 was due, so the
 * model's own compute time hides inside the pace). Both are timers: no CPU is spent.
 * Aborting a request's signal (the client went away) ends it at once and frees its KV
 * blocks.
 */
import { KvCacheScheduler } from "./kv-cache.ts";
import { createRng, randomSeed, sampleToken, type SamplingParams } from "./sampling.ts";
import { StopMatcher } from "./stop.ts";
import type { LanguageModel } from "./tiny-lm.ts";
import { BOS, tokenText } from "./tokenizer.ts";
import { BucketHistogram, E2E_BUCKETS_S, ITL_BUCKETS_S, TTFT_BUCKETS_S, renderVllmMetrics, type FinishReason } from "./vllm-metrics.ts";

export type { FinishReason } from "./vllm-metrics.ts";

export interface LlmEngineOptions {
  model: LanguageModel;
  /** KV-cache blocks (vLLM's num_gpu_blocks). */
  kvBlocks: number;
  /** Tokens per block (vLLM's block_size); default 16. */
  blockSize?: number;
  /** Wait before each request's first token, ms (default 0). */
  prefillMs?: number;
  /** Wait between tokens, ms (default 0). */
  decodeMs?: number;
  /** Longest prompt + max_tokens accepted; default (and at most) the whole KV cache. */
  maxModelLen?: number;
}

export interface GenerateRequest {
  /** Prompt token ids (at least one). */
  prompt: readonly number[];
  maxTokens: number;
  sampling: SamplingParams;
  /** Same seed, same prompt and parameters: same text. Random when absent. */
  seed?: number;
  stop?: readonly string[];
  /** Aborting ends the generation (finish reason "abort"). */
  signal?: AbortSignal;
}

export interface GenerateResult {
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
}

/** Thrown by `generate` when the request can never be served as asked (see `check`). */
export class RequestTooLong extends Error {
  constructor(message: string) {
    super(message);
    this.name = "RequestTooLong";
  }
}

class Aborted extends Error {}

function sleep(ms: number, signal: AbortSignal | undefined): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) return reject(new Aborted());
    const onAbort = () => {
      clearTimeout(timer);
      reject(new Aborted());
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}

/** Lets I/O (other requests, disconnects, /metrics) in between two tokens when no timer does. */
const yieldToLoop = (): Promise<void> => new Promise((r) => setImmediate(r));

export class LlmEngine {
  readonly model: LanguageModel;
  readonly maxModelLen: number;
  readonly #kv: KvCacheScheduler;
  readonly #prefillMs: number;
  readonly #decodeMs: number;
  #nextId = 1;
  #promptTokens = 0;
  #generationTokens = 0;
  readonly #success: Record<FinishReason, number> = { stop: 0, length: 0, abort: 0 };
  readonly #ttft = new BucketHistogram(TTFT_BUCKETS_S);
  readonly #itl = new BucketHistogram(ITL_BUCKETS_S);
  readonly #e2e = new BucketHistogram(E2E_BUCKETS_S);

  constructor(options: LlmEngineOptions) {
    this.model = options.model;
    this.#kv = new KvCacheScheduler(options.kvBlocks, options.blockSize ?? 16);
    this.#prefillMs = options.prefillMs ?? 0;
    this.#decodeMs = options.decodeMs ?? 0;
    this.maxModelLen = Math.min(options.maxModelLen ?? this.#kv.maxTokens, this.#kv.maxTokens);
  }

  get blockSize(): number {
    return this.#kv.blockSize;
  }

  get kvBlocks(): number {
    return this.#kv.totalBlocks;
  }

  /** Requests generating now (holding KV blocks). */
  get running(): number {
    return this.#kv.running;
  }

  /** Requests waiting for KV blocks. */
  get waiting(): number {
    return this.#kv.waiting;
  }

  /** KV-cache usage, 0..1. */
  get kvUsage(): number {
    return this.#kv.usage;
  }

  /** Why a request of this size can never be served (vLLM's max_model_len check), or undefined. */
  check(promptTokens: number, maxTokens: number): string | undefined {
    if (promptTokens > this.maxModelLen) {
      return `This model's maximum context length is ${this.maxModelLen} tokens. However, your prompt has ${promptTokens} tokens.`;
    }
    if (promptTokens + maxTokens > this.maxModelLen) {
      return `This model's maximum context length is ${this.maxModelLen} tokens. However, you requested ${promptTokens + maxTokens} tokens (${promptTokens} in the prompt, ${maxTokens} for the completion). Please reduce the prompt or max_tokens.`;
    }
    return undefined;
  }

  /**
   * Generates text for `request`, yielding each piece as soon as it is produced (one token
   * per piece, except text held back while it could be the start of a stop string).
   * Returns the finish reason and token counts. Throws RequestTooLong when `check` fails.
   */
  async *generate(request: GenerateRequest): AsyncGenerator<string, GenerateResult, void> {
    const { prompt, maxTokens, signal } = request;
    if (prompt.length === 0) throw new RequestTooLong("the prompt is empty");
    const tooLong = this.check(prompt.length, maxTokens);
    if (tooLong) throw new RequestTooLong(tooLong);
    const id = this.#nextId++;
    const arrival = performance.now();
    const rng = createRng(request.seed ?? randomSeed());
    const stop = new StopMatcher(request.stop ?? []);
    const counts = new Map<number, number>();
    let prev2 = prompt.length >= 2 ? prompt[prompt.length - 2]! : BOS;
    let prev1 = prompt[prompt.length - 1]!;
    let generated = 0;
    let finishReason: FinishReason = "length";
    let lastAt = 0;
    let due = 0;
    let done = false;
    try {
      await this.#hold(id, prompt.length, signal);
      if (this.#prefillMs > 0) await sleep(this.#prefillMs, signal);
      while (generated < maxTokens) {
        if (generated > 0) {
          if (this.#decodeMs > 0) {
            due += this.#decodeMs;
            const wait = due - performance.now();
            if (wait > 0) await sleep(wait, signal);
            else if (wait < -this.#decodeMs) due = performance.now(); // fell behind (it waited for blocks): pace from now
          } else {
            await yieldToLoop();
          }
        }
        if (signal?.aborted) throw new Aborted();
        await this.#hold(id, prompt.length + generated, signal);
        const logits = await this.model.nextLogits(prev2, prev1);
        if (signal?.aborted) throw new Aborted();
        const token = sampleToken(logits, request.sampling, rng, { counts, exclude: [BOS] });
        generated++;
        counts.set(token, (counts.get(token) ?? 0) + 1);
        prev2 = prev1;
        prev1 = token;
        this.#generationTokens++;
        const now = performance.now();
        if (generated === 1) {
          this.#promptTokens += prompt.length;
          this.#ttft.observe((now - arrival) / 1000);
          due = now;
        } else {
          this.#itl.observe((now - lastAt) / 1000);
        }
        lastAt = now;
        const { emit, stopped } = stop.push(tokenText(token));
        if (emit !== "") yield emit;
        if (stopped) {
          finishReason = "stop";
          break;
        }
      }
      if (finishReason === "length") {
        const rest = stop.flush();
        if (rest !== "") yield rest;
      }
      done = true;
    } catch (err) {
      if (!(err instanceof Aborted) && !signal?.aborted) throw err;
      finishReason = "abort";
      done = true;
    } finally {
      this.#kv.release(id);
      // A consumer that stopped iterating early (return()) ended the request too.
      if (!done) finishReason = "abort";
      this.#success[finishReason]++;
      this.#e2e.observe((performance.now() - arrival) / 1000);
    }
    return { finishReason, promptTokens: prompt.length, completionTokens: generated };
  }

  /** Unit-length embedding of a non-empty token sequence (one model run; no KV cache). */
  async embed(ids: readonly number[]): Promise<Float32Array> {
    const embedding = await this.model.embed(ids);
    this.#promptTokens += ids.length;
    return embedding;
  }

  /** vLLM's /metrics text for this engine. */
  metricsText(modelName = this.model.id): string {
    return renderVllmMetrics({
      modelName,
      running: this.#kv.running,
      waiting: this.#kv.waiting,
      kvCacheUsage: this.#kv.usage,
      blockSize: this.#kv.blockSize,
      numGpuBlocks: this.#kv.totalBlocks,
      promptTokens: this.#promptTokens,
      generationTokens: this.#generationTokens,
      preemptions: this.#kv.preemptions,
      requestSuccess: this.#success,
      ttft: this.#ttft,
      interTokenLatency: this.#itl,
      e2eLatency: this.#e2e,
      timestampS: Date.now() / 1000,
    });
  }

  /** Holds `tokens` KV slots for sequence `id`, waiting for blocks if needed; an abort leaves the queue. */
  async #hold(id: number, tokens: number, signal: AbortSignal | undefined): Promise<void> {
    const pending = this.#kv.acquire(id, tokens);
    if (!pending) return;
    if (signal?.aborted) throw new Aborted();
    const onAbort = () => this.#kv.release(id);
    signal?.addEventListener("abort", onAbort, { once: true });
    try {
      await pending;
    } catch {
      throw new Aborted(); // released while waiting: only an abort does that
    } finally {
      signal?.removeEventListener("abort", onAbort);
    }
  }
}
