/**
 * The replica agent's index of an engine's prefix cache (src/agent/engine-prefix-index.ts)
 * against KV event batches in vLLM's wire format (test/fixtures/kv-events/agent-*.msgpack,
 * written by Python's msgpack: agent-gen.py), decoded by src/prefix/kv-events.ts.
 */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { EnginePrefixIndex } from "../../src/agent/engine-prefix-index.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { CacheSummary } from "../../src/prefix/cache-summary.ts";
import { decodeKvEventBatch, type KvEventBatch } from "../../src/prefix/kv-events.ts";

const fixture = (name: string) => decodeKvEventBatch(new Uint8Array(readFileSync(new URL(`../fixtures/kv-events/${name}`, import.meta.url))));

interface Meaning {
  block_size: number;
  batches: number;
  prompts: Record<string, { tokens: number[]; lora: string | null; held_blocks: number[]; evicted_blocks: number[] }>;
  held: number;
}
const meaning = JSON.parse(readFileSync(new URL("../fixtures/kv-events/agent-stream.json", import.meta.url), "utf8")) as Meaning;
const stream = Array.from({ length: meaning.batches }, (_, i) => fixture(`agent-stream-${i}.msgpack`));
/** Switchyard's keys of a fixture prompt, as an edge computes them from its tokens. */
const keysOf = (p: string) => blockKeys(meaning.prompts[p]!.tokens, { extra: meaning.prompts[p]!.lora ?? "" });

function session(): { index: EnginePrefixIndex; logs: string[] } {
  const logs: string[] = [];
  const index = new EnginePrefixIndex({ log: (m) => logs.push(m) });
  for (const b of stream) index.apply(b);
  return { index, logs };
}

describe("EnginePrefixIndex on a vLLM session's KV events", () => {
  it("names the engine's blocks with the keys an edge computes from the same prompts (LoRA blocks under the adapter's name)", () => {
    const { index } = session();
    const held = new Set(index.keysMostRecentFirst());
    for (const [name, p] of Object.entries(meaning.prompts)) {
      const keys = keysOf(name);
      for (const i of p.held_blocks) expect(held.has(keys[i]!), `${name} block ${i} held`).toBe(true);
      for (const i of p.evicted_blocks) expect(held.has(keys[i]!), `${name} block ${i} evicted`).toBe(false);
    }
    expect(index.size).toBe(meaning.held);
    // The LoRA prompt's keys are not the base model's.
    expect(held.has(blockKeys(meaning.prompts.L!.tokens)[0]!)).toBe(false);
  });

  it("skips blocks whose parent it never saw, blocks with extra keys an edge cannot name (and their children), and other KV cache groups", () => {
    const { index, logs } = session();
    expect(index.stats.unknownParent).toBe(2);
    expect(index.stats.extraKeys).toBe(1);
    expect(index.stats.otherGroups).toBe(1);
    expect(logs.some((l) => /extra keys/.test(l))).toBe(true);
  });

  it("a block offloaded to CPU stays held when its GPU copy goes", () => {
    const { index } = session();
    expect(index.keysMostRecentFirst()).toContain(keysOf("A")[1]);
  });

  it("orders keys by last store: a re-store makes a block the most recent", () => {
    const { index } = session();
    // Batch 3 stored A's second block again (its CPU copy).
    expect(index.keysMostRecentFirst()[0]).toBe(keysOf("A")[1]);
  });

  it("its summary says how much of each prompt a replica holds, as the edge will ask", () => {
    const { index } = session();
    const s = CacheSummary.parse(index.summary()!)!;
    expect(s.matchedBlocks(keysOf("A"), 16)).toBe(4);
    expect(s.matchedBlocks(keysOf("L"), 16)).toBe(2);
    expect(s.matchedBlocks(keysOf("M"), 16)).toBe(0);
    expect(index.summary()!.n).toBe(meaning.held);
    // Unchanged: the same object (built once per change).
    expect(index.summary()).toBe(index.summary());
  });

  it("the same session in map-shaped batches (an EventBatch without array_like) gives the same index", () => {
    const { index } = session();
    const mapped = new EnginePrefixIndex({});
    for (let i = 0; i < meaning.batches; i++) {
      const b = fixture(`agent-stream-map-${i}.msgpack`);
      expect(b.events.length).toBe(stream[i]!.events.length);
      mapped.apply(b);
    }
    expect(mapped.keysMostRecentFirst()).toEqual(index.keysMostRecentFirst());
    expect(mapped.stats).toEqual(index.stats);
  });

  it("AllBlocksCleared empties it", () => {
    const { index } = session();
    index.apply(fixture("agent-cleared.msgpack"));
    expect(index.size).toBe(0);
    expect(index.summary()!.n).toBe(0);
    expect(index.stats.cleared).toBe(1);
  });

  it("an engine with another block size than 16 gets no summary, and the log says why", () => {
    const { index, logs } = session();
    index.apply(fixture("agent-block32.msgpack"));
    expect(index.summary()).toBeUndefined();
    expect(index.disabled).toMatch(/32 tokens.*16/);
    expect(logs.some((l) => /--block-size 16/.test(l))).toBe(true);
    // For good: later events change nothing.
    index.apply(stream[0]!);
    expect(index.summary()).toBeUndefined();
  });

  it("keeps at most maxBlocks, dropping the least recently stored", () => {
    const index = new EnginePrefixIndex({ maxBlocks: 3 });
    index.apply(stream[0]!);
    index.apply(stream[1]!);
    // Stored in order: A's five blocks, then L's two.
    expect(index.keysMostRecentFirst()).toEqual([keysOf("L")[1], keysOf("L")[0], keysOf("A")[4]]);
  });

  it("a store whose token ids do not fill its blocks is left out", () => {
    const index = new EnginePrefixIndex();
    const bad: KvEventBatch = {
      ts: 0,
      dataParallelRank: null,
      events: [
        {
          type: "BlockStored",
          blockHashes: [1n, 2n],
          parentBlockHash: null,
          tokenIds: [1, 2, 3],
          blockSize: 16,
          loraId: null,
          medium: "GPU",
          loraName: null,
          extraKeys: null,
          groupIdx: null,
          kvCacheSpecKind: null,
          kvCacheSpecSlidingWindow: null,
        },
      ],
    };
    index.apply(bad);
    expect(index.size).toBe(0);
    expect(index.stats.malformed).toBe(1);
  });
});
