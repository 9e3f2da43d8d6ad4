/**
 * The replica's generation engine: it runs requests on a language model token by token,
 * with vLLM-style KV-cache accounting and automatic prefix caching (kv-cache.ts:
 * requests that do not fit wait; a prompt's cached blocks are reused), stop strings,
 * seeded sampling, optional pacing that emulates a GPU engine's speed, and the state
 * behind vLLM's /metrics (vllm-metrics.ts) and KV events (kv-event-publisher.ts).
 *
 * The model (GenerativeModel, below) is the seam: tiny-lm (tiny-lm.ts), where every token
 * is one ONNX run (serialised process-wide by onnx-session.ts), or the engine stand-in
 * (family-standin.ts), a real model family's tokenizer with scripted text. Each request
 * runs its own loop. Pacing (benchmark knobs, 0 = off),
 * all on timers, no CPU spent:
 * - prefill, once a request is scheduled and again if it is rescheduled after a
 *   preemption: `prefillTokenUs` per prompt token that was not found cached, on the
 *   engine's prefill lane (prefill-lane.ts: one prefill at a time, as a GPU's compute),
 *   then `prefillMs`, a fixed wait of the request's own (not on the lane);
 * - `decodeMs` between tokens, in parallel for every running request (token k is due
 *   decodeMs after token k-1 was due, so the model's own compute time hides inside it).
 * Aborting a request's signal (the client went away) ends it at once, takes it off the
 * prefill lane and frees its KV blocks.
 *
 * Where requests wait (for KV blocks, for the prefill lane), a higher `priority` goes
 * first, first come first served within a priority (priority-order.ts).
 *
 * The blocks of a request are named over exactly the token ids it is given (nothing is
 * added), with its `extra` key, so an edge that tokenizes the prompt as the model does
 * and computes blockKeys(ids, { extra }) names them the same.
 */
import { randomUUID } from "node:crypto";
import type { TemplateMessage } from "../../prompt/tiny-lm-chat-template.ts";
import { buildCacheSummary, type CacheSummaryWire } from "../../prefix/cache-summary.ts";
import { KvCacheScheduler, type PoolEvent, type SequenceContent } from "./kv-cache.ts";
import { PrefillLane } from "./prefill-lane.ts";
import { positionRng, randomSeed, type Rng, type SamplingParams } from "./sampling.ts";
import { StopMatcher } from "./stop.ts";
import { BucketHistogram, E2E_BUCKETS_S, ITL_BUCKETS_S, TTFT_BUCKETS_S, renderVllmMetrics, type FinishReason } from "./vllm-metrics.ts";

export type { FinishReason } from "./vllm-metrics.ts";

/**
 * What the engine generates with: a model with its tokenizer and chat template. The
 * engine does the rest (KV cache, scheduling, pacing, stop strings, metrics), so a model
 * is only how prompts become tokens and how the next token is picked: tiny-lm's ONNX
 * graph (tiny-lm.ts), or the engine stand-in's scripted text (family-standin.ts).
 */
export interface GenerativeModel {
  readonly id: string;
  readonly prompts: PromptCodec;
  /** One generation's token source, continuing `prompt`. */
  decoder(prompt: readonly number[], options: DecoderOptions): TokenDecoder;
  /** Embeddings, for a model that makes them. */
  readonly embeddings?: { readonly size: number; embed(ids: readonly number[]): Promise<Float32Array> };
}

/** How a model renders prompts as token ids (its tokenizer and chat template). */
export interface PromptCodec {
  /** Ids of a prompt given as tokens must be in firstId..vocabSize-1. */
  readonly vocabSize: number;
  readonly firstId: number;
  /**
   * A chat, as the model's template renders it with the generation prompt, as tokens;
   * with `continueFinalMessage` (vLLM's continue_final_message), the last message left
   * open and no generation prompt. Throws UnsupportedPrompt for a chat it cannot render.
   */
  chat(messages: readonly TemplateMessage[], extras?: { tools?: readonly unknown[]; kwargs?: Record<string, unknown>; continueFinalMessage?: boolean }): number[];
  /** A text prompt (/v1/completions, embeddings) as tokens. */
  text(prompt: string): number[];
  /** Strings that end a chat answer, for a model whose turn ends in text (tiny-lm); [] where it ends with EOS. */
  readonly chatStop: readonly string[];
}

export interface DecoderOptions {
  sampling: SamplingParams;
  rng: Rng;
  /** vLLM's ignore_eos: never end the turn, generate max_tokens. */
  ignoreEos: boolean;
}

export interface TokenDecoder {
  /**
   * The next token and the text it completes ("" while a character is still
   * incomplete); `eos`: the model ended its turn (the token is not text).
   */
  next(): Promise<{ token: number; text: string; eos?: boolean }>;
}

export interface LlmEngineOptions {
  model: GenerativeModel;
  /** KV-cache blocks (vLLM's num_gpu_blocks). */
  kvBlocks: number;
  /** Tokens per block (vLLM's block_size); default 16. */
  blockSize?: number;
  /** Fixed wait before each request's first token (and after a rescheduling), ms (default 0); not on the prefill lane. */
  prefillMs?: number;
  /** Prefill time per prompt token not found cached, microseconds, on the engine's one prefill lane (default 0). */
  prefillTokenUs?: number;
  /** Wait between tokens, ms (default 0). */
  decodeMs?: number;
  /** Longest prompt + max_tokens accepted; default (and at most) the whole KV cache. */
  maxModelLen?: number;
  /** Blocks cached, evicted, cleared, as they happen (for vLLM's KV events). */
  onKvEvent?: (event: PoolEvent) => void;
  /** Requests generating at once at most (vLLM's max_num_seqs): a higher priority preempts past it (kv-cache.ts). Unbounded by default. */
  maxRunning?: number;
  /** How long a finished prefill's blocks wait for a decode replica to read them (vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT, 480 s). */
  kvTransferTimeoutMs?: number;
  /**
   * A decode step waits for the prefill on the lane to end (a GPU that runs a prefill
   * batch does not decode meanwhile): what prefill/decode disaggregation removes. Off by
   * default (decoding keeps its pace beside prefills).
   */
  prefillStallsDecode?: boolean;
}

/** vLLM's VLLM_NIXL_ABORT_REQUEST_TIMEOUT default: a prefill's blocks are freed this long after it finished if no decode read them. */
export const KV_TRANSFER_TIMEOUT_MS = 480_000;

/** Transfers held at once (each a finished prefill's blocks, or an empty hold); past it the oldest are freed. */
export const MAX_HELD_TRANSFERS = 4096;

/** Decode reads held waiting for their prefill at once; past it a read gets nothing (the decode computes the prompt). */
export const MAX_TRANSFER_WAITERS = 1024;

/** A finished prefill's blocks, held for a decode replica (prefill/decode disaggregation). */
interface HeldTransfer {
  blockIds: number[];
  /** The tokens those blocks hold (the prompt's first blockIds.length × blockSize). */
  ids: number[];
  extra: string;
  timer: ReturnType<typeof setTimeout>;
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
  /** vLLM's ignore_eos: generate maxTokens, past the model's end of turn. */
  ignoreEos?: boolean;
  /**
   * Higher is served first where requests wait (KV blocks, the prefill lane); default 0.
   * Switchyard's sense (the edge's x-switchyard-priority), not vLLM's.
   */
  priority?: number;
  /**
   * Folded into the key of every KV block (src/prefix/block-keys.ts): the adapter /
   * multiplexed model the request names (its x-switchyard-model), "" (default) for the base model.
   */
  extra?: string;
  /**
   * A prefill for a decode replica (vLLM's kv_transfer_params.do_remote_decode): when it
   * finishes capped by length, its prompt's computed blocks stay held for a decode replica
   * to read (readTransfer), and the result names them (`kept`).
   */
  keepPrompt?: boolean;
  /**
   * A prefill in SGLang's protocol (its `bootstrap_room`): the prompt's computed blocks
   * are held under this id however the request ends (none when it ended before its
   * prefill), and a decode replica waiting for them gets them at once (awaitTransfer).
   */
  keepAs?: string;
}

export interface GenerateResult {
  finishReason: FinishReason;
  promptTokens: number;
  completionTokens: number;
  /** Prompt tokens found in the prefix cache when the request was first scheduled (vLLM's num_cached_tokens). */
  cachedTokens: number;
  /** A `keepPrompt` request that finished capped by length: the held blocks, for a decode replica to read by this id. */
  kept?: { transferId: string; blockIds: number[] };
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
  readonly model: GenerativeModel;
  readonly maxModelLen: number;
  readonly #kv: KvCacheScheduler;
  readonly #prefillMs: number;
  readonly #prefillTokenUs: number;
  readonly #decodeMs: number;
  readonly #lane = new PrefillLane();
  #nextId = 1;
  #promptTokens = 0;
  #generationTokens = 0;
  #prefillComputed = 0;
  /** Decayed sums of prefilled tokens and their lane time (prefillRate). */
  #rateTokens = 0;
  #rateMs = 0;
  readonly #success: Record<FinishReason, number> = { stop: 0, length: 0, abort: 0 };
  readonly #ttft = new BucketHistogram(TTFT_BUCKETS_S);
  readonly #itl = new BucketHistogram(ITL_BUCKETS_S);
  readonly #e2e = new BucketHistogram(E2E_BUCKETS_S);
  readonly #transfers = new Map<string, HeldTransfer>();
  /** Decode reads waiting for a prefill not finished yet, by transfer id (awaitTransfer). */
  readonly #waiters = new Map<string, (got: { ids: number[]; extra: string } | undefined) => void>();
  readonly #transferTimeoutMs: number;
  readonly #prefillStallsDecode: boolean;

  constructor(options: LlmEngineOptions) {
    this.#transferTimeoutMs = options.kvTransferTimeoutMs ?? KV_TRANSFER_TIMEOUT_MS;
    this.#prefillStallsDecode = options.prefillStallsDecode === true;
    this.model = options.model;
    this.#kv = new KvCacheScheduler(options.kvBlocks, options.blockSize ?? 16, {
      ...(options.onKvEvent && { onEvent: options.onKvEvent }),
      ...(options.maxRunning !== undefined && { maxRunning: options.maxRunning }),
    });
    this.#prefillMs = options.prefillMs ?? 0;
    this.#prefillTokenUs = options.prefillTokenUs ?? 0;
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

  /** Blocks in the prefix cache (named: held by requests or free cached). */
  get cachedBlocks(): number {
    return this.#kv.cachedBlocks;
  }

  /** Prompt tokens prefills computed: the uncached ones, and recomputations after preemption. */
  get prefillComputedTokens(): number {
    return this.#prefillComputed;
  }

  /** Prefills waiting for the prefill lane. */
  get prefillsQueued(): number {
    return this.#lane.queued;
  }

  /** How long a new prefill would wait for the lane now, whole ms (Load.prefillWaitMs). */
  get prefillWaitMs(): number {
    return Math.ceil(this.#lane.waitMs());
  }

  /**
   * Uncached tokens prefilled per second of lane time, over the last prefills (each one's
   * weight decays by a tenth per later prefill): Load.prefillRate. Undefined before the
   * first prefill that took lane time.
   */
  get prefillRate(): number | undefined {
    return this.#rateMs > 0 ? Math.max(1, Math.round((this.#rateTokens / this.#rateMs) * 1000)) : undefined;
  }

  /**
   * The prefix cache's summary for load reports (src/prefix/cache-summary.ts): a Bloom
   * filter over the cached block keys, most recently used first. O(cached blocks);
   * about a millisecond at 10,000 blocks.
   */
  cacheSummary(): CacheSummaryWire {
    return buildCacheSummary(this.#kv.cachedKeysMostRecentFirst(), this.#kv.blockSize);
  }

  /** Drops the prefix cache (vLLM's reset_prefix_cache): only while no request runs. Returns whether it did. */
  resetPrefixCache(): boolean {
    return this.#kv.resetPrefixCache();
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
    const priority = request.priority ?? 0;
    if (prompt.length === 0) throw new RequestTooLong("the prompt is empty");
    const tooLong = this.check(prompt.length, maxTokens);
    if (tooLong) throw new RequestTooLong(tooLong);
    const id = this.#nextId++;
    const arrival = performance.now();
    // The sequence's tokens, prompt then generated: the KV cache names its blocks from these.
    const ids: number[] = [...prompt];
    // Each token draws from the seed and its position (positionRng), so a continuation on another replica samples on as this one would.
    const seed = request.seed ?? randomSeed();
    let tokenRng = positionRng(seed, prompt.length);
    const decoder = this.model.decoder(prompt, { sampling: request.sampling, rng: () => tokenRng(), ignoreEos: request.ignoreEos === true });
    const stop = new StopMatcher(request.stop ?? []);
    let generated = 0;
    let cachedTokens: number | undefined;
    let finishReason: FinishReason = "length";
    let lastAt = 0;
    let due = 0;
    let done = false;
    let kept: GenerateResult["kept"];
    try {
      await this.#hold(id, prompt.length, signal, { ids, extra: request.extra ?? "" }, priority);
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
        // Scheduled now (first, or again after a preemption): compute what is not cached.
        const scheduling = this.#kv.takeScheduling(id);
        if (scheduling) {
          cachedTokens ??= Math.min(scheduling.cachedTokens, prompt.length);
          await this.#prefill(prompt.length + generated - scheduling.cachedTokens, signal, priority);
        }
        // A decode step (not this request's first token, which its prefill just gave) waits out the prefill on the lane.
        if (!scheduling && this.#prefillStallsDecode && this.#lane.busy) {
          await this.#lane.whenTurnEnds();
          if (signal?.aborted) throw new Aborted();
        }
        tokenRng = positionRng(seed, prompt.length + generated);
        const { token, text, eos } = await decoder.next();
        if (signal?.aborted) throw new Aborted();
        this.#kv.commit(id);
        ids.push(token);
        generated++;
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
        if (eos) {
          finishReason = "stop";
          const rest = stop.flush();
          if (rest !== "") yield rest;
          break;
        }
        const { emit, stopped } = stop.push(text);
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
      if (done && request.keepPrompt === true && finishReason === "length") kept = this.#keep(id, prompt, request.extra ?? "");
      if (request.keepAs !== undefined) this.#keepAs(request.keepAs, id, prompt, request.extra ?? "");
      this.#kv.release(id);
      // A consumer that stopped iterating early (return()) ended the request too.
      if (!done) finishReason = "abort";
      this.#success[finishReason]++;
      this.#e2e.observe((performance.now() - arrival) / 1000);
    }
    return { finishReason, promptTokens: prompt.length, completionTokens: generated, cachedTokens: cachedTokens ?? 0, ...(kept && { kept }) };
  }

  /** Finished prefills whose blocks wait for a decode replica. */
  get heldTransfers(): number {
    return this.#transfers.size;
  }

  /** Blocks those hold (a block two of them share counts once). */
  get heldTransferBlocks(): number {
    return this.#kv.pinnedBlocks;
  }

  /**
   * A decode replica reads a finished prefill's blocks: the tokens they hold, once. The
   * blocks are freed on read (as vLLM's NixlConnector frees them once the decode has
   * pulled them). Undefined when `transferId` holds none (never, already read, or timed
   * out) or `blockIds` are not the ones it holds.
   */
  readTransfer(transferId: string, blockIds: readonly number[]): { ids: number[]; extra: string } | undefined {
    const t = this.#transfers.get(transferId);
    if (!t || t.blockIds.length !== blockIds.length || t.blockIds.some((b, i) => b !== blockIds[i])) return undefined;
    this.#dropTransfer(transferId);
    return { ids: t.ids, extra: t.extra };
  }

  /**
   * A decode replica reads a prefill's blocks by the id it was told (SGLang's room),
   * waiting up to `timeoutMs` for a prefill that has not finished (the legs run at
   * once): the tokens they hold, once, or undefined when none came (then the decode
   * computes the prompt). A prefill that held none answers at once with no tokens.
   */
  awaitTransfer(transferId: string, timeoutMs: number, signal?: AbortSignal): Promise<{ ids: number[]; extra: string } | undefined> {
    const held = this.#transfers.get(transferId);
    if (held) {
      this.#dropTransfer(transferId);
      return Promise.resolve({ ids: held.ids, extra: held.extra });
    }
    // One reader per room; past MAX_TRANSFER_WAITERS a read is not held (the decode computes the prompt).
    if (this.#waiters.has(transferId) || this.#waiters.size >= MAX_TRANSFER_WAITERS || signal?.aborted) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const done = (got: { ids: number[]; extra: string } | undefined) => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", gone);
        this.#waiters.delete(transferId);
        resolve(got);
      };
      const gone = () => done(undefined);
      const timer = setTimeout(gone, timeoutMs);
      timer.unref?.();
      signal?.addEventListener("abort", gone, { once: true });
      this.#waiters.set(transferId, done);
    });
  }

  /** Decode reads waiting for their prefill (awaitTransfer). */
  get transferWaiters(): number {
    return this.#waiters.size;
  }

  /** SGLang's prefill: its blocks go to the decode waiting for them, else are held for it (an empty hold when none were computed). */
  #keepAs(transferId: string, id: number, prompt: readonly number[], extra: string): void {
    const blockIds = this.#kv.pin(id, prompt.length);
    const ids = prompt.slice(0, blockIds.length * this.#kv.blockSize);
    const waiter = this.#waiters.get(transferId);
    if (waiter) {
      this.#kv.unpin(blockIds);
      waiter({ ids, extra });
      return;
    }
    this.#holdTransfer(transferId, blockIds, ids, extra);
  }

  /**
   * Blocks computed by a prefill replica, read from it: the full blocks of `ids` become
   * cached here, so the request that follows finds them and computes only the rest.
   * Returns the tokens now cached from the start of `ids`.
   */
  importPrefix(ids: readonly number[], extra: string): number {
    return this.#kv.importBlocks(ids, extra) * this.#kv.blockSize;
  }

  /** Holds a finished prefill's prompt blocks for a decode replica, at most half the pool in all (the oldest holds go first). */
  #keep(id: number, prompt: readonly number[], extra: string): { transferId: string; blockIds: number[] } | undefined {
    const blockIds = this.#kv.pin(id, prompt.length);
    if (blockIds.length === 0) return undefined;
    const transferId = randomUUID();
    this.#holdTransfer(transferId, blockIds, prompt.slice(0, blockIds.length * this.#kv.blockSize), extra);
    return { transferId, blockIds };
  }

  /**
   * Holds pinned blocks for a reader, until read or KV_TRANSFER_TIMEOUT_MS: at most half
   * the pool's blocks and MAX_HELD_TRANSFERS holds in all, vLLM's and SGLang's alike (the
   * oldest go first).
   */
  #holdTransfer(transferId: string, blockIds: number[], ids: number[], extra: string): void {
    this.#dropTransfer(transferId);
    for (const oldest of this.#transfers.keys()) {
      if (this.#kv.pinnedBlocks <= this.#kv.totalBlocks / 2 && this.#transfers.size < MAX_HELD_TRANSFERS) break;
      this.#dropTransfer(oldest);
    }
    const timer = setTimeout(() => this.#dropTransfer(transferId), this.#transferTimeoutMs);
    timer.unref();
    this.#transfers.set(transferId, { blockIds, ids, extra, timer });
  }

  #dropTransfer(transferId: string): void {
    const t = this.#transfers.get(transferId);
    if (!t) return;
    this.#transfers.delete(transferId);
    clearTimeout(t.timer);
    this.#kv.unpin(t.blockIds);
  }

  /** Unit-length embedding of a non-empty token sequence (one model run; no KV cache); throws for a model that makes none. */
  async embed(ids: readonly number[]): Promise<Float32Array> {
    if (!this.model.embeddings) throw new Error(`${this.model.id} makes no embeddings`);
    const embedding = await this.model.embeddings.embed(ids);
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
      prefixCacheQueries: this.#kv.prefixCacheQueries,
      prefixCacheHits: this.#kv.prefixCacheHits,
      requestSuccess: this.#success,
      ttft: this.#ttft,
      interTokenLatency: this.#itl,
      e2eLatency: this.#e2e,
      timestampS: Date.now() / 1000,
    });
  }

  /** The prefill of `uncached` tokens: its turn on the prefill lane, then the fixed wait. */
  async #prefill(uncached: number, signal: AbortSignal | undefined, priority: number): Promise<void> {
    this.#prefillComputed += uncached;
    const laneMs = (uncached * this.#prefillTokenUs) / 1000;
    if (laneMs > 0) {
      await this.#lane.run(laneMs, signal, priority);
      this.#rateTokens = this.#rateTokens * 0.9 + uncached;
      this.#rateMs = this.#rateMs * 0.9 + laneMs;
    }
    if (this.#prefillMs > 0) await sleep(this.#prefillMs, signal);
  }

  /** Holds `tokens` KV slots for sequence `id`, waiting for blocks if needed (by `priority`, on the first call); an abort leaves the queue. */
  async #hold(id: number, tokens: number, signal: AbortSignal | undefined, content?: SequenceContent, priority?: number): Promise<void> {
    const pending = this.#kv.acquire(id, tokens, content, priority);
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
