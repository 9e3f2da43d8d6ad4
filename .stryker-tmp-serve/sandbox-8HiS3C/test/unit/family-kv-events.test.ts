/**
 * The agent's index of an engine's cache against the edge's keys, for real model
 * families (issue 34): KV event batches in vLLM's wire layout built from each
 * family's token ids as transformers renders the chat
 * (test/fixtures/kv-events/families-gen.py), fed to EnginePrefixIndex (what the agent
 * runs per engine), must name the very blocks the edge computes from the same chat
 * with the family's tokenizer (src/prompt/tokenizers/), base model and LoRA adapter
 * apart; evictions (BlockRemoved, per medium) and AllBlocksCleared must show.
 */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { decode } from "@msgpack/msgpack";
import { describe, expect, it } from "vitest";
import { EnginePrefixIndex } from "../../src/agent/engine-prefix-index.ts";
import { promptKeys } from "../../src/prefix/prompt-keys.ts";
import { decodeKvEventBatch } from "../../src/prefix/kv-events.ts";
import { promptTokenizer, type PromptTokenizerName } from "../../src/prompt/tokenizers/index.ts";
import { provideFamilyFilesFromNodeModules } from "../../src/prompt/tokenizers/node-files.ts";

provideFamilyFilesFromNodeModules();
const file = (name: string) => new URL(`../fixtures/kv-events/${name}`, import.meta.url);

describe.each(["qwen3", "llama3", "deepseek-v3", "mistral-nemo", "gemma3"] as const)("%s", (family) => {
  const meta = JSON.parse(readFileSync(file(`families-${family}.json`), "utf8")) as { messages: object[]; chat_template_kwargs: Record<string, unknown>; ids: number[]; blocks: number };
  const batches = (decode(readFileSync(file(`families-${family}.msgpack`))) as Uint8Array[]).map((p) => decodeKvEventBatch(p));
  const tokenizer = promptTokenizer(family as PromptTokenizerName);
  const body = new TextEncoder().encode(JSON.stringify({ model: "m", messages: meta.messages, chat_template_kwargs: meta.chat_template_kwargs }));
  const edgeKeys = (extra: string) => promptKeys(body, "chat", { tokenizer, extra })!.keys;

  it("renders the chat to the token ids the engine's events carry", () => {
    expect(Array.from(tokenizer.chat(meta.messages as never, 1 << 20, { kwargs: meta.chat_template_kwargs }))).toEqual(meta.ids);
    expect(edgeKeys("")).toHaveLength(meta.blocks);
  });

  it("names the engine's blocks with the edge's keys, the LoRA adapter's apart, and follows evictions and a reset", () => {
    const index = new EnginePrefixIndex();
    const held = () => new Set(index.keysMostRecentFirst());
    const base = edgeKeys("");
    const lora = edgeKeys("sql-lora");
    expect(new Set(base).size).toBe(meta.blocks);
    expect(lora.some((k, i) => k === base[i])).toBe(false);

    index.apply(batches[0]!);
    index.apply(batches[1]!);
    expect(held()).toEqual(new Set(base));
    index.apply(batches[2]!); // the same chat under the adapter
    expect(held()).toEqual(new Set([...base, ...lora]));
    index.apply(batches[3]!); // the first two blocks offloaded to CPU too
    index.apply(batches[4]!); // the last block evicted from the GPU: gone
    expect(held().has(base.at(-1)!)).toBe(false);
    expect(held().has(base.at(-2)!)).toBe(true);
    index.apply(batches[5]!); // the first evicted from the GPU: its CPU copy holds it
    expect(held().has(base[0]!)).toBe(true);
    expect(index.stats.unknownParent + index.stats.malformed + index.stats.extraKeys).toBe(0);
    index.apply(batches[6]!);
    expect(index.size).toBe(0);
  });

  it("leaves out an adapter's blocks named only by lora_id (an engine before lora_name): they would pass for the base model's", () => {
    const index = new EnginePrefixIndex();
    const old = { ...batches[2]!, events: batches[2]!.events.map((e) => (e.type === "BlockStored" ? { ...e, loraName: null, extraKeys: null } : e)) };
    index.apply(old);
    expect(index.size).toBe(0);
    expect(index.stats.extraKeys).toBe(meta.blocks);
  });
});
