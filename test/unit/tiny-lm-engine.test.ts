/**
 * The generation engine (src/replica/llm/engine.ts) and its KV-cache scheduler
 * (kv-cache.ts): block accounting, FIFO waiting, preemption, stop strings, seeds,
 * pacing, and aborts that free their blocks. The model is a fake with the same
 * interface (a fixed next-token distribution), so these run in milliseconds.
 */
import { describe, expect, it } from "vitest";
import { LlmEngine, RequestTooLong, type GenerateRequest, type GenerateResult } from "../../src/replica/llm/engine.ts";
import { KvCacheScheduler, SequenceReleased } from "../../src/replica/llm/kv-cache.ts";
import { tinyLmGenerator, type LanguageModel } from "../../src/replica/llm/tiny-lm.ts";
import { VOCAB_SIZE, encode } from "../../src/replica/llm/tokenizer.ts";

/** Greedy output of this model cycles "abcabc…"; sampled output is random over a, b, c. */
function fakeModel(): LanguageModel & { runs: number } {
  const [a, b, c] = encode("abc") as [number, number, number];
  const next = new Map([[a, b], [b, c], [c, a]]);
  const m = {
    id: "fake",
    vocabSize: VOCAB_SIZE,
    embeddingSize: VOCAB_SIZE - 1,
    runs: 0,
    nextLogits: async (_prev2: number, prev1: number) => {
      m.runs++;
      const logits = new Float32Array(VOCAB_SIZE).fill(-20);
      for (const id of [a, b, c]) logits[id] = Math.log(0.1);
      logits[next.get(prev1) ?? a] = Math.log(0.8);
      return logits;
    },
    embed: async (ids: readonly number[]) => Float32Array.from({ length: VOCAB_SIZE - 1 }, (_, i) => (i === 0 ? 1 : 0) * ids.length),
    release: async () => undefined,
  };
  return m;
}

const greedy = { temperature: 0, topP: 1 };

async function collect(gen: AsyncGenerator<string, GenerateResult>): Promise<{ pieces: string[]; result: GenerateResult }> {
  const pieces: string[] = [];
  let step = await gen.next();
  while (!step.done) {
    pieces.push(step.value);
    step = await gen.next();
  }
  return { pieces, result: step.value };
}

const req = (prompt: string, o: Partial<GenerateRequest> = {}): GenerateRequest => ({ prompt: encode(prompt), maxTokens: 8, sampling: greedy, ...o });
const waitFor = async (cond: () => boolean, ms = 2000) => {
  const until = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > until) throw new Error("condition not met in time");
    await new Promise((r) => setTimeout(r, 2));
  }
};

describe("KvCacheScheduler", () => {
  it("holds ceil(tokens / 16) blocks per running sequence", () => {
    const kv = new KvCacheScheduler(10, 16);
    expect(kv.acquire(1, 1)).toBeUndefined();
    expect(kv.usedBlocks).toBe(1);
    expect(kv.acquire(1, 16)).toBeUndefined();
    expect(kv.usedBlocks).toBe(1);
    expect(kv.acquire(1, 17)).toBeUndefined();
    expect(kv.usedBlocks).toBe(2);
    expect(kv.acquire(2, 33)).toBeUndefined();
    expect(kv.usedBlocks).toBe(5);
    expect(kv.usage).toBe(0.5);
    expect(kv.running).toBe(2);
    kv.release(1);
    kv.release(1); // idempotent
    expect(kv.usedBlocks).toBe(3);
    kv.release(2);
    expect(kv.usage).toBe(0);
  });

  it("refuses a sequence that can never fit", () => {
    const kv = new KvCacheScheduler(2, 16);
    expect(() => kv.acquire(1, 33)).toThrow(new RangeError("33 tokens need 3 blocks of 16; the KV cache has 2"));
    expect(kv.acquire(1, 32)).toBeUndefined();
  });

  it("refuses a cache of no blocks, a fractional one, or blocks of no tokens; one block of one token is a cache", () => {
    expect(() => new KvCacheScheduler(0, 16)).toThrow(new RangeError("totalBlocks must be a positive integer, got 0"));
    expect(() => new KvCacheScheduler(1.5, 16)).toThrow(new RangeError("totalBlocks must be a positive integer, got 1.5"));
    expect(() => new KvCacheScheduler(2, 0)).toThrow(new RangeError("blockSize must be a positive integer, got 0"));
    expect(() => new KvCacheScheduler(2, 2.5)).toThrow(new RangeError("blockSize must be a positive integer, got 2.5"));
    expect(new KvCacheScheduler(1, 1).maxTokens).toBe(1);
  });

  it("a released waiter's rejection names it", async () => {
    const kv = new KvCacheScheduler(1, 16);
    kv.acquire(1, 16);
    const waiting = kv.acquire(2, 16)!;
    kv.release(2);
    const err = await waiting.catch((e: unknown) => e);
    expect(err).toBeInstanceOf(SequenceReleased);
    expect(err).toMatchObject({ name: "SequenceReleased", message: "sequence 2 was released while waiting" });
  });

  it("queues in FIFO order: nothing overtakes the head, which starts when blocks free", async () => {
    const kv = new KvCacheScheduler(4, 16);
    kv.acquire(1, 48); // 3 blocks
    const order: number[] = [];
    const p2 = kv.acquire(2, 32)!.then(() => order.push(2)); // needs 2: waits
    const p3 = kv.acquire(3, 16)!; // needs 1 (free) but must not overtake 2
    void p3.then(() => order.push(3));
    expect(kv.waiting).toBe(2);
    expect(kv.running).toBe(1);
    kv.release(1);
    await Promise.all([p2, p3]);
    expect(order).toEqual([2, 3]);
    expect(kv.waiting).toBe(0);
    expect(kv.usedBlocks).toBe(3);
  });

  it("a growing sequence preempts the most recently scheduled one, which resumes first when blocks free", async () => {
    const kv = new KvCacheScheduler(4, 16);
    kv.acquire(1, 32); // 2 blocks
    kv.acquire(2, 32); // 2 blocks: full
    expect(kv.acquire(1, 33)).toBeUndefined(); // 1 grows into a third block: 2 is preempted
    expect(kv.preemptions).toBe(1);
    expect(kv.running).toBe(1);
    expect(kv.waiting).toBe(1);
    const resumed = kv.acquire(2, 33)!; // 2 comes back with its tokens: waits
    expect(resumed).toBeInstanceOf(Promise);
    const p4 = kv.acquire(4, 1)!;
    kv.release(1);
    await resumed;
    await p4;
    expect(kv.usedBlocks).toBe(4);
  });

  it("the newest sequence preempts itself when it is the one growing", async () => {
    const kv = new KvCacheScheduler(2, 16);
    kv.acquire(1, 16);
    kv.acquire(2, 16);
    const p = kv.acquire(2, 17);
    expect(p).toBeInstanceOf(Promise);
    expect(kv.running).toBe(1);
    expect(kv.preemptions).toBe(1);
    kv.release(1);
    await p;
    expect(kv.usedBlocks).toBe(2);
  });

  it("releasing a waiting sequence takes it out of the queue and rejects its wait", async () => {
    const kv = new KvCacheScheduler(1, 16);
    kv.acquire(1, 16);
    const p = kv.acquire(2, 16)!;
    kv.release(2);
    await expect(p).rejects.toBeInstanceOf(SequenceReleased);
    expect(kv.waiting).toBe(0);
  });
});

describe("LlmEngine", () => {
  it("generates token by token, one model run per token, and counts them", async () => {
    const model = fakeModel();
    const engine = new LlmEngine({ model: tinyLmGenerator(model), kvBlocks: 8 });
    const { pieces, result } = await collect(engine.generate(req("xa", { maxTokens: 7 })));
    expect(pieces).toEqual([..."bcabcab"]);
    expect(result).toEqual({ finishReason: "length", promptTokens: 2, completionTokens: 7, cachedTokens: 0 });
    expect(model.runs).toBe(7);
    expect(engine.running).toBe(0);
    expect(engine.kvUsage).toBe(0);
    const text = engine.metricsText();
    expect(text).toContain('vllm:generation_tokens_total{model_name="fake",engine="0"} 7.0');
    expect(text).toContain('vllm:prompt_tokens_total{model_name="fake",engine="0"} 2.0');
    expect(text).toContain('vllm:request_success_total{model_name="fake",engine="0",finished_reason="length"} 1.0');
    expect(text).toContain('vllm:time_to_first_token_seconds_count{model_name="fake",engine="0"} 1.0');
    expect(text).toContain('vllm:inter_token_latency_seconds_count{model_name="fake",engine="0"} 6.0');
  });

  it("stops at a stop string, which is not returned", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 8 });
    const { pieces, result } = await collect(engine.generate(req("a", { maxTokens: 20, stop: ["ca"] })));
    expect(pieces).toEqual(["b"]); // "b", then "c" is held back (it may start "ca"), then "a" completes "ca"
    expect(result.finishReason).toBe("stop");
    expect(result.completionTokens).toBe(3);
  });

  it("same seed, same text; sampled text varies with the seed", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 8 });
    const sampled = (seed: number) => collect(engine.generate(req("a", { maxTokens: 40, seed, sampling: { temperature: 1.5, topP: 1 } }))).then((r) => r.pieces.join(""));
    const a = await sampled(1);
    expect(await sampled(1)).toBe(a);
    expect(await sampled(2)).not.toBe(a);
  });

  it("refuses what can never fit (vLLM's max_model_len = the whole cache)", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 2 });
    expect(engine.maxModelLen).toBe(32);
    expect(engine.check(30, 2)).toBeUndefined();
    expect(engine.check(30, 3)).toMatch(/maximum context length is 32 tokens/);
    expect(engine.check(40, 1)).toMatch(/your prompt has 40 tokens/);
    await expect(collect(engine.generate(req("a".repeat(31), { maxTokens: 2 })))).rejects.toBeInstanceOf(RequestTooLong);
    await expect(collect(engine.generate(req("", { maxTokens: 2 })))).rejects.toBeInstanceOf(RequestTooLong);
  });

  it("a request that does not fit in the free blocks waits, counted as waiting, and runs when blocks free", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 2, decodeMs: 5 });
    const first = collect(engine.generate(req("a".repeat(20), { maxTokens: 10 }))); // 2 blocks
    await waitFor(() => engine.running === 1);
    const second = collect(engine.generate(req("a", { maxTokens: 3 })));
    await waitFor(() => engine.waiting === 1);
    expect(engine.kvUsage).toBe(1);
    expect(engine.metricsText()).toContain('vllm:num_requests_waiting{model_name="fake",engine="0"} 1.0');
    expect((await first).result.completionTokens).toBe(10);
    expect((await second).result.completionTokens).toBe(3);
    expect(engine.waiting).toBe(0);
    expect(engine.kvUsage).toBe(0);
  });

  it("an abort ends the request at once, frees its blocks and is counted as aborted", async () => {
    const model = fakeModel();
    // A decode step every 10 s: ending "at once" means long before the next step.
    const engine = new LlmEngine({ model: tinyLmGenerator(model), kvBlocks: 64, decodeMs: 10_000 });
    const abort = new AbortController();
    const gen = engine.generate(req("a", { maxTokens: 1000, signal: abort.signal }));
    const pieces: string[] = [];
    const done = (async () => {
      for await (const p of gen) pieces.push(p);
    })();
    await waitFor(() => pieces.length >= 1, 5_000);
    expect(engine.running).toBe(1);
    expect(engine.kvUsage).toBeGreaterThan(0);
    abort.abort();
    const ended = await Promise.race([done.then(() => "ended"), new Promise((r) => setTimeout(r, 5_000, "waited for the next decode step"))]);
    expect(ended).toBe("ended");
    expect(pieces).toHaveLength(1);
    expect(engine.running).toBe(0);
    expect(engine.kvUsage).toBe(0);
    expect(engine.metricsText()).toContain('finished_reason="abort"} 1.0');
    const runs = model.runs;
    await new Promise((r) => setTimeout(r, 50));
    expect(model.runs).toBe(runs);
  });

  it("an abort while waiting for blocks leaves the queue", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 1, decodeMs: 10 });
    const first = collect(engine.generate(req("a", { maxTokens: 5 })));
    await waitFor(() => engine.running === 1);
    const abort = new AbortController();
    const second = collect(engine.generate(req("a", { maxTokens: 5, signal: abort.signal })));
    await waitFor(() => engine.waiting === 1);
    abort.abort();
    expect((await second).result).toEqual({ finishReason: "abort", promptTokens: 1, completionTokens: 0, cachedTokens: 0 });
    expect(engine.waiting).toBe(0);
    await first;
  });

  it("paces tokens: the first after prefillMs, then one every decodeMs", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 4, prefillMs: 40, decodeMs: 15 });
    const started = performance.now();
    const times: number[] = [];
    for await (const _ of engine.generate(req("a", { maxTokens: 6 }))) times.push(performance.now() - started);
    expect(times[0]).toBeGreaterThanOrEqual(39);
    const span = times[5]! - times[0]!;
    expect(span).toBeGreaterThanOrEqual(5 * 15 - 2);
    expect(span).toBeLessThan(5 * 15 + 150);
  });

  it("a consumer that stops iterating ends the request and frees its blocks", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 8 });
    for await (const _ of engine.generate(req("a", { maxTokens: 100 }))) break;
    expect(engine.running).toBe(0);
    expect(engine.kvUsage).toBe(0);
    expect(engine.metricsText()).toContain('finished_reason="abort"} 1.0');
  });
});

describe("LlmEngine, exactly", () => {
  /** A histogram's sum in the engine's /metrics text. */
  const sum = (text: string, name: string) => Number(new RegExp(`^${name}_sum\\{[^}]*\\} (\\S+)$`, "m").exec(text)?.[1]);

  it("text held back for a stop string that never comes is sent at the end, at length; no empty pieces", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 8 });
    const { pieces, result } = await collect(engine.generate(req("xa", { maxTokens: 7, stop: ["bx"] })));
    expect(pieces.join("")).toBe("bcabcab");
    expect(pieces.at(-1)).toBe("b");
    expect(pieces).not.toContain("");
    expect(result).toMatchObject({ finishReason: "length", completionTokens: 7 });
  });

  it("latencies are observed in seconds: TTFT, inter-token and end-to-end sums as paced", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 8, decodeMs: 20 });
    await collect(engine.generate(req("xa", { maxTokens: 4 })));
    const text = engine.metricsText();
    // Three gaps of at least 20 ms each (the pacing's floor); the upper bounds only tell seconds from milliseconds.
    expect(sum(text, "vllm:inter_token_latency_seconds")).toBeGreaterThanOrEqual(0.055);
    expect(sum(text, "vllm:inter_token_latency_seconds")).toBeLessThan(30);
    expect(sum(text, "vllm:e2e_request_latency_seconds")).toBeGreaterThanOrEqual(0.055);
    expect(sum(text, "vllm:e2e_request_latency_seconds")).toBeLessThan(30);
    expect(sum(text, "vllm:time_to_first_token_seconds")).toBeGreaterThanOrEqual(0);
    expect(sum(text, "vllm:time_to_first_token_seconds")).toBeLessThan(30);
  });

  it("sizes: blocks of 16 by default, the context clamped to the cache, an empty prompt refused", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 4, maxModelLen: 1_000 });
    expect(engine.blockSize).toBe(16);
    expect(engine.maxModelLen).toBe(64);
    expect(new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 4, maxModelLen: 40 }).maxModelLen).toBe(40);
    const err = await collect(engine.generate({ prompt: [], maxTokens: 1, sampling: greedy })).catch((e: unknown) => e);
    expect(err).toBeInstanceOf(RequestTooLong);
    expect(err).toMatchObject({ name: "RequestTooLong", message: "the prompt is empty" });
  });

  it("embeddings count their prompt tokens; a model without embeddings says so", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(fakeModel()), kvBlocks: 4 });
    await engine.embed(encode("abc"));
    expect(engine.metricsText()).toContain('vllm:prompt_tokens_total{model_name="fake",engine="0"} 3.0');
    const { embeddings: _, ...generative } = tinyLmGenerator(fakeModel());
    await expect(new LlmEngine({ model: generative, kvBlocks: 4 }).embed([1])).rejects.toThrow("fake makes no embeddings");
  });
});
