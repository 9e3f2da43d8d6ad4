/**
 * The KV block pool's prefix caching (src/replica/llm/kv-cache.ts), as vLLM's automatic
 * prefix caching behaves: full computed blocks are named by their chained block keys
 * (src/prefix/block-keys.ts), a new sequence reuses the longest cached chain, shared
 * blocks are ref-counted, freed named blocks stay cached and are evicted least recently
 * freed first (a chain's tail first), preemption frees and recomputes, and the pool
 * never hands out more blocks than it has. The engine's use of it (prefill charged for
 * uncached tokens only, on one FIFO lane) and its counters are tested at the end.
 */
import { describe, expect, it } from "vitest";
import { blockKeys, type BlockKey } from "../../src/prefix/block-keys.ts";
import { CacheSummary, buildCacheSummary } from "../../src/prefix/cache-summary.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { LlmEngine, type GenerateRequest, type GenerateResult } from "../../src/replica/llm/engine.ts";
import { KvCacheScheduler, type PoolEvent } from "../../src/replica/llm/kv-cache.ts";
import { tinyLmGenerator } from "../../src/replica/llm/tiny-lm.ts";
import { oneLetterModel } from "../fixtures/one-letter-model.ts";
import { encode } from "../../src/replica/llm/tokenizer.ts";

const BS = 16;
/** n token ids starting at `from` (distinct prompts for distinct `from`). */
const ids = (n: number, from = 2) => Array.from({ length: n }, (_, i) => 2 + ((from + i) % 90));

function pool(blocks: number) {
  const events: PoolEvent[] = [];
  const kv = new KvCacheScheduler(blocks, BS, { onEvent: (e) => events.push(e) });
  /** Schedules sequence `id` over `tokens` (all computed at once, as after its prefill) and commits them. */
  const run = (id: number, tokens: number[], extra = "") => {
    const p = kv.acquire(id, tokens.length, { ids: tokens, extra });
    if (p) throw new Error(`sequence ${id} had to wait`);
    const scheduling = kv.takeScheduling(id)!;
    kv.commit(id);
    return scheduling.cachedTokens;
  };
  return { kv, events, run };
}

describe("KV block pool: prefix caching", () => {
  it("names full computed blocks by their chained keys and reuses them for the same prefix", () => {
    const { kv, events, run } = pool(16);
    const prompt = ids(40); // two full blocks and a partial one
    expect(run(1, prompt)).toBe(0);
    const keys = blockKeys(prompt);
    expect(keys).toHaveLength(2);
    expect(events).toEqual([{ type: "stored", keys, parent: undefined, tokenIds: prompt.slice(0, 32), extra: "" }]);
    expect(kv.cachedBlocks).toBe(2);
    kv.release(1);
    expect(kv.usage).toBe(0); // free cached blocks are free
    expect(kv.freeCachedBlocks).toBe(2);

    // Same first 32 tokens, another tail: both blocks hit, only the rest is computed.
    const next = [...prompt.slice(0, 32), ...ids(20, 50)];
    expect(run(2, next)).toBe(32);
    expect(kv.usedBlocks).toBe(4);
    expect(kv.freeCachedBlocks).toBe(0);
    // Its third block is new: stored with the second as parent.
    expect(events.at(-1)).toEqual({ type: "stored", keys: [blockKeys(next)[2]], parent: keys[1], tokenIds: next.slice(32, 48), extra: "" });
    expect(kv.prefixCacheQueries).toBe(40 + 52);
    expect(kv.prefixCacheHits).toBe(32);
  });

  it("recomputes the last token of a fully cached prompt (vLLM: logits need it)", () => {
    const { run } = pool(8);
    const prompt = ids(32);
    run(1, prompt);
    expect(run(2, prompt)).toBe(16);
    expect(run(3, [...prompt, 7])).toBe(32);
  });

  it("a different extra key (adapter) names other blocks: no hit", () => {
    const { kv, run } = pool(8);
    const prompt = ids(33);
    run(1, prompt, "sql-lora");
    expect(run(2, prompt)).toBe(0);
    expect(run(3, prompt, "sql-lora")).toBe(32);
    expect(kv.isCached(blockKeys(prompt, { extra: "sql-lora" })[1]!)).toBe(true);
  });

  it("ref-counts shared blocks: held once, freed when the last holder goes", () => {
    const { kv, run } = pool(8);
    const shared = ids(32);
    run(1, [...shared, ...ids(8, 40)]); // 3 blocks
    expect(run(2, [...shared, ...ids(8, 60)])).toBe(32); // shares 2, adds 1
    expect(kv.usedBlocks).toBe(4);
    kv.release(1);
    expect(kv.usedBlocks).toBe(3); // the shared two are still held by 2
    expect(kv.freeCachedBlocks).toBe(0);
    kv.release(2);
    expect(kv.usedBlocks).toBe(0);
    expect(kv.freeCachedBlocks).toBe(2);
  });

  it("a block computed twice is cached once: the second copy stays unnamed", () => {
    const { kv, events, run } = pool(8);
    const prompt = ids(32);
    kv.acquire(1, 32, { ids: prompt, extra: "" });
    kv.acquire(2, 32, { ids: prompt, extra: "" }); // scheduled before 1 committed: no hit
    expect(kv.takeScheduling(2)).toEqual({ cachedTokens: 0 });
    kv.commit(1);
    kv.commit(2);
    expect(events.filter((e) => e.type === "stored")).toHaveLength(1);
    expect(kv.cachedBlocks).toBe(2);
    kv.release(1);
    kv.release(2);
    expect(kv.freeCachedBlocks).toBe(2);
  });

  it("evicts only when no plainly free block is left, least recently freed first and a chain from its tail", () => {
    const { kv, events, run } = pool(6);
    const a = ids(48, 2); // 3 full blocks
    const b = ids(32, 40); // 2 full blocks
    run(1, a);
    run(2, b);
    const [a0, a1, a2] = blockKeys(a) as [BlockKey, BlockKey, BlockKey];
    const [b0, b1] = blockKeys(b) as [BlockKey, BlockKey];
    kv.release(1); // freed first: a2, a1, a0 join the queue in that order
    kv.release(2); // then b1, b0
    expect(kv.freeCachedBlocks).toBe(5);
    // One plainly free block is left: a 1-block sequence takes it, evicting nothing.
    run(3, ids(5, 70));
    expect(events.filter((e) => e.type === "removed")).toEqual([]);
    kv.release(3);
    // Five blocks: the plainly free one, then evictions of a2, a1, a0 and b1, in that order.
    run(4, ids(76, 80));
    expect(events.filter((e) => e.type === "removed")).toEqual([
      { type: "removed", keys: [a2] },
      { type: "removed", keys: [a1] },
      { type: "removed", keys: [a0] },
      { type: "removed", keys: [b1] },
    ]);
    expect(kv.isCached(b0)).toBe(true);
    expect(kv.isCached(a0)).toBe(false);
  });

  it("a hit moves blocks out of the eviction queue, and the queue is by time freed", () => {
    const { kv, events, run } = pool(4);
    const a = ids(32, 2);
    const b = ids(32, 40);
    run(1, a);
    kv.release(1);
    run(2, b);
    kv.release(2); // queue: a1, a0, b1, b0
    expect(run(3, [...a, 9])).toBe(32); // a0, a1 in use again; needs 1 more block: evicts b1
    expect(events.filter((e) => e.type === "removed")).toEqual([{ type: "removed", keys: [blockKeys(b)[1]] }]);
    kv.release(3); // a0, a1 freed again, after b0
    run(4, ids(32, 60)); // 2 blocks: plain one (3's third), then b0
    expect(events.filter((e) => e.type === "removed").map((e) => (e.type === "removed" ? e.keys[0] : ""))).toEqual([blockKeys(b)[1], blockKeys(b)[0]]);
  });

  it("refuses to schedule what would need a hit block and the blocks it would free", () => {
    const { kv, run } = pool(3);
    const a = ids(32);
    run(1, a);
    kv.release(1); // 2 free cached + 1 plain
    // 3 blocks, 2 of them hits: the one fresh block must not evict a hit.
    expect(run(2, [...a, ...ids(10, 50)])).toBe(32);
    expect(kv.usedBlocks).toBe(3);
    expect(kv.isCached(blockKeys(a)[1]!)).toBe(true);
  });

  it("preemption frees the victim's blocks, whose cached part it finds again when it resumes (not a new query)", async () => {
    const { kv, run } = pool(4);
    const a = ids(32, 2);
    const b = ids(32, 40);
    run(1, a);
    run(2, b); // full
    expect(kv.prefixCacheQueries).toBe(64);
    expect(kv.acquire(1, 33)).toBeUndefined(); // 1 grows: 2 is preempted
    expect(kv.preemptions).toBe(1);
    expect(kv.freeCachedBlocks).toBe(1); // b's two named blocks were freed; 1 took one (b1, the tail)
    const resumed = kv.acquire(2, 33)!; // 2 comes back with one more token
    expect(resumed).toBeInstanceOf(Promise);
    kv.release(1);
    await resumed;
    expect(kv.takeScheduling(2)).toEqual({ cachedTokens: 16 }); // b0 survived, b1 was evicted
    expect(kv.prefixCacheQueries).toBe(64);
    expect(kv.prefixCacheHits).toBe(0);
  });

  it("never over-commits, and its events always describe what it caches (a seeded random walk)", () => {
    const rand = mulberry32(20261202);
    const total = 24;
    const cachedFromEvents = new Set<BlockKey>();
    const kv = new KvCacheScheduler(total, BS, {
      onEvent: (e) => {
        if (e.type === "stored") for (const k of e.keys) expect(cachedFromEvents.has(k)).toBe(false), cachedFromEvents.add(k);
        else if (e.type === "removed") for (const k of e.keys) expect(cachedFromEvents.delete(k)).toBe(true);
        else cachedFromEvents.clear();
      },
    });
    const prefixes = [ids(48, 2), ids(40, 30), ids(64, 60)];
    const live = new Map<number, { tokens: number[]; waiting: boolean }>();
    let next = 1;
    for (let step = 0; step < 4000; step++) {
      const r = rand();
      if (r < 0.35 || live.size === 0) {
        const base = prefixes[Math.floor(rand() * prefixes.length)]!;
        const tokens = [...base.slice(0, Math.floor(rand() * base.length) + 1), ...ids(Math.floor(rand() * 30), Math.floor(rand() * 90))];
        const id = next++;
        const extra = rand() < 0.2 ? "lora" : "";
        const p = kv.acquire(id, tokens.length, { ids: tokens, extra });
        live.set(id, { tokens, waiting: p !== undefined });
        p?.then(
          () => undefined,
          () => undefined,
        );
      } else if (r < 0.75) {
        const [id, s] = [...live.entries()][Math.floor(rand() * live.size)]!;
        s.tokens.push(Math.floor(rand() * 90) + 2);
        if (s.tokens.length > total * BS) continue;
        const p = kv.acquire(id, s.tokens.length);
        p?.then(
          () => undefined,
          () => undefined,
        );
        kv.commit(id);
      } else {
        const [id] = [...live.entries()][Math.floor(rand() * live.size)]!;
        kv.release(id);
        live.delete(id);
      }
      expect(kv.usedBlocks).toBeLessThanOrEqual(total);
      expect(kv.usedBlocks + kv.freeCachedBlocks).toBeLessThanOrEqual(total);
      expect(kv.cachedBlocks).toBe(cachedFromEvents.size);
    }
    for (const id of live.keys()) kv.release(id);
    expect(kv.usage).toBe(0);
    expect(kv.running + kv.waiting).toBe(0);
    expect(new Set(kv.cachedKeysMostRecentFirst())).toEqual(cachedFromEvents);
    expect(kv.freeCachedBlocks).toBe(kv.cachedBlocks);
    expect(kv.preemptions).toBeGreaterThan(0);
    expect(kv.prefixCacheHits).toBeGreaterThan(0);
    expect(kv.resetPrefixCache()).toBe(true);
    expect(kv.cachedBlocks).toBe(0);
    expect(cachedFromEvents.size).toBe(0);
  });

  it("resets only while nothing runs (vLLM's reset_prefix_cache), announcing it", () => {
    const { kv, events, run } = pool(4);
    run(1, ids(32));
    expect(kv.resetPrefixCache()).toBe(false);
    kv.release(1);
    expect(kv.resetPrefixCache()).toBe(true);
    expect(events.at(-1)).toEqual({ type: "cleared" });
    expect(kv.cachedBlocks).toBe(0);
    expect(run(2, ids(32))).toBe(0);
    expect(kv.usedBlocks).toBe(2);
  });
});

// ---- the engine over it --------------------------------------------------------------


async function drain(gen: AsyncGenerator<string, GenerateResult>): Promise<GenerateResult> {
  let step = await gen.next();
  while (!step.done) step = await gen.next();
  return step.value;
}

const greedy = { temperature: 0, topP: 1 };
const request = (prompt: number[], o: Partial<GenerateRequest> = {}): GenerateRequest => ({ prompt, maxTokens: 2, sampling: greedy, ...o });

describe("LlmEngine with prefix caching", () => {
  it("counts vLLM's prefix_cache_queries/hits in tokens and names blocks over exactly the ids it is given, with the extra key", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel()), kvBlocks: 64 });
    const prompt = encode("user: a prompt long enough to fill three blocks of sixteen tokens\nassistant: ");
    await drain(engine.generate(request(prompt, { extra: "chat-lora" })));
    await drain(engine.generate(request(prompt, { extra: "chat-lora" })));
    const full = Math.floor(prompt.length / 16);
    const text = engine.metricsText();
    expect(text).toContain(`vllm:prefix_cache_queries_total{model_name="fake",engine="0"} ${2 * prompt.length}.0`);
    expect(text).toContain(`vllm:prefix_cache_hits_total{model_name="fake",engine="0"} ${full * 16}.0`);
    const summary = CacheSummary.parse(engine.cacheSummary())!;
    const keys = blockKeys(prompt, { extra: "chat-lora" });
    expect(summary.matchedBlocks(keys, 16)).toBe(keys.length);
    expect(summary.matchedBlocks(blockKeys(prompt), 16)).toBe(0);
    expect(engine.cachedBlocks).toBeGreaterThanOrEqual(full);
  });

  it("charges prefill only for uncached tokens, one prefill at a time (FIFO)", async () => {
    // 2 ms a token: a 65-token prompt holds the lane 130 ms; its repeat, 64 tokens cached, 2 ms.
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel()), kvBlocks: 64, prefillTokenUs: 2000 });
    const prompt = ids(65);
    expect(await timed(engine.generate(request(prompt, { maxTokens: 1 })))).toBeGreaterThanOrEqual(129);
    expect(engine.prefillComputedTokens).toBe(65);
    await drain(engine.generate(request(prompt, { maxTokens: 1 })));
    expect(engine.prefillComputedTokens).toBe(66);

    // Two cold prompts at once: the second's prefill waits for the first's.
    const started = performance.now();
    const firstTokenAt: number[] = [];
    const both = [ids(40, 10), ids(40, 50)].map(async (p, i) => {
      for await (const _ of engine.generate(request(p, { maxTokens: 1 }))) firstTokenAt[i] = performance.now() - started;
    });
    await Promise.all(both);
    expect(firstTokenAt[0]).toBeGreaterThanOrEqual(79);
    expect(firstTokenAt[1]).toBeGreaterThanOrEqual(159);
  });

  it("decoding requests keep their pace while prefills queue on the lane", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel()), kvBlocks: 64, prefillTokenUs: 10_000, decodeMs: 5 }); // 10 ms a token
    const decoding = engine.generate(request(ids(1, 5), { maxTokens: 1000 }));
    await decoding.next(); // its 10 ms prefill is done: it decodes now
    const prefill = drain(engine.generate(request(ids(30, 60), { maxTokens: 1 }))); // 300 ms on the lane
    let tokens = 0;
    let prefilled = false;
    void prefill.then(() => (prefilled = true));
    while (!prefilled) {
      // Bounded: a decode that ended (1,000 tokens) before the prefill did fails the test below, never spins.
      if ((await decoding.next()).done) break;
      tokens++;
    }
    expect(prefilled).toBe(true);
    await decoding.return(undefined as never);
    // At a 5 ms pace it made tokens all along the 300 ms prefill, not after it.
    expect(tokens).toBeGreaterThan(10);
  });

  it("an abort takes a request off the prefill lane and the next one goes", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel()), kvBlocks: 64, prefillTokenUs: 50_000 }); // 50 ms a token
    const abort = new AbortController();
    const long = drain(engine.generate(request(ids(200, 3), { signal: abort.signal }))); // 10 s of lane
    const queued = drain(engine.generate(request(ids(2, 80), { maxTokens: 1 })));
    await waitFor(() => engine.prefillsQueued === 1);
    abort.abort();
    expect((await long).finishReason).toBe("abort");
    expect((await queued).completionTokens).toBe(1);
    expect(engine.kvUsage).toBe(0);
  });

  it("builds its cache summary from 10,000 cached blocks cheaply (measured, not asserted), most recently used first", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel()), kvBlocks: 10_000 });
    const prompts = Array.from({ length: 100 }, (_, i) => [2 + (i % 95), 2 + Math.floor(i / 95), ...Array.from({ length: 1598 }, (_, j) => 2 + ((i + j * 31) % 95))]);
    for (const p of prompts) await drain(engine.generate(request(p, { maxTokens: 1 })));
    expect(engine.cachedBlocks).toBe(10_000);
    engine.cacheSummary(); // warm
    const started = performance.now();
    const runs = 20;
    for (let i = 0; i < runs; i++) engine.cacheSummary();
    console.log(`cacheSummary() over 10,000 cached blocks: ${((performance.now() - started) / runs).toFixed(2)} ms`);
    const summary = CacheSummary.parse(engine.cacheSummary())!;
    expect(summary.keys).toBe(10_000);
    expect(summary.matchedBlocks(blockKeys(prompts[42]!), 16)).toBe(100);

    // Past what the filter holds, it keeps the most recently used keys.
    const kv = new KvCacheScheduler(64, 16);
    const old = ids(32, 2);
    const recent = ids(32, 40);
    for (const [id, tokens] of [old, recent].entries()) {
      kv.acquire(id, tokens.length, { ids: tokens, extra: "" });
      kv.commit(id);
      kv.release(id);
    }
    expect(kv.cachedKeysMostRecentFirst()).toEqual([...blockKeys(recent), ...blockKeys(old)]);
    const tiny = CacheSummary.parse(buildCacheSummary(kv.cachedKeysMostRecentFirst(), 16, 64))!; // 64 bytes: 64 keys at most
    expect(tiny.matchedBlocks(blockKeys(recent), 16)).toBe(2);
  });
});

async function timed(gen: AsyncGenerator<string, GenerateResult>): Promise<number> {
  const started = performance.now();
  await drain(gen);
  return performance.now() - started;
}

async function waitFor(cond: () => boolean, limitMs = 20_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error("timed out waiting for the engine");
    await new Promise((r) => setImmediate(r));
  }
}
