/**
 * The engine stand-in (src/replica/llm/family-standin.ts) on the engine: what it caches
 * and announces are the token ids transformers makes of the chat (the fixtures of
 * test/fixtures/kv-events/families-gen.py: apply_chat_template over the family's real
 * files), so its KV events are vLLM's for the same request; it evicts least recently
 * used blocks; it prefills only what is not cached; its streamed text is its tokens'
 * text; greedy answers depend on the prompt alone; it ends its turn with the family's
 * EOS unless ignore_eos.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { LlmEngine, type GenerateRequest } from "../../src/replica/llm/engine.ts";
import { familyStandIn } from "../../src/replica/llm/family-standin.ts";
import type { PoolEvent } from "../../src/replica/llm/kv-cache.ts";
import { familyCodecOf } from "../../src/prompt/tokenizers/hf-family.ts";
import { provideFamilyFilesFromNodeModules } from "../../src/prompt/tokenizers/node-files.ts";
import type { PromptTokenizerName } from "../../src/prompt/tokenizers/index.ts";

provideFamilyFilesFromNodeModules();
const file = (name: string) => new URL(`../fixtures/kv-events/${name}`, import.meta.url);

async function drain(engine: LlmEngine, request: GenerateRequest): Promise<{ text: string; finishReason: string; completionTokens: number; cachedTokens: number }> {
  const gen = engine.generate(request);
  let text = "";
  let step = await gen.next();
  while (!step.done) {
    text += step.value;
    step = await gen.next();
  }
  return { text, ...step.value };
}

const greedy = { temperature: 0, topP: 1 };

describe.each(["qwen3", "llama3", "deepseek-v3", "mistral-nemo", "gemma3"] as const)("%s stand-in", (family) => {
  const meta = JSON.parse(readFileSync(file(`families-${family}.json`), "utf8")) as { messages: object[]; chat_template_kwargs: Record<string, unknown>; ids: number[]; blocks: number };
  const model = familyStandIn(family as PromptTokenizerName);

  it("caches and announces the chat's blocks with the token ids transformers renders", async () => {
    const events: PoolEvent[] = [];
    const engine = new LlmEngine({ model, kvBlocks: 256, onKvEvent: (e) => events.push(e) });
    const prompt = model.prompts.chat(meta.messages as never, { kwargs: meta.chat_template_kwargs });
    expect(prompt).toEqual(meta.ids);
    await drain(engine, { prompt, maxTokens: 1, sampling: greedy });
    const stored = events.flatMap((e) => (e.type === "stored" ? e.tokenIds : []));
    expect(stored).toEqual(meta.ids.slice(0, 16 * meta.blocks));
  });

  it("streams its tokens' text, the same greedy answer for the same prompt, ending its turn with EOS unless ignore_eos", async () => {
    const engine = new LlmEngine({ model, kvBlocks: 256 });
    const prompt = model.prompts.chat([{ role: "user", content: "Where is the market? 🍎" }]);
    const a = await drain(engine, { prompt, maxTokens: 200, sampling: greedy });
    const b = await drain(engine, { prompt, maxTokens: 200, sampling: greedy });
    // The second found the first's full prompt blocks cached, as vLLM counts them: the last token is always computed.
    expect(a.cachedTokens).toBe(0);
    expect(b.cachedTokens).toBe(16 * Math.floor((prompt.length - 1) / 16));
    expect({ ...a, cachedTokens: 0 }).toEqual({ ...b, cachedTokens: 0 });
    expect(a.finishReason).toBe("stop");
    expect(a.completionTokens).toBeGreaterThanOrEqual(13); // 12–63 tokens, then EOS (counted, as vLLM counts it)
    expect(a.text.trim().split(/\s+/).length).toBeGreaterThan(5);
    const long = await drain(engine, { prompt, maxTokens: 200, sampling: greedy, ignoreEos: true });
    expect(long).toMatchObject({ finishReason: "length", completionTokens: 200 });
    expect(long.text.startsWith(a.text)).toBe(true);
    // The streamed pieces are the decoded tokens, nothing lost or doubled.
    const codec = familyCodecOf(family);
    expect(codec.decode(codec.plain(long.text))).toBe(long.text);
    // 200 tokens run through the whole passage (cycled): its sentences come out whole, in order, each piece once.
    for (const sentence of ["Farmers bring apples, cheese and bread, and the children watch the boats go by.", "Nobody is in a hurry here; the days are long, the work is honest,"]) {
      expect(long.text).toContain(sentence);
    }
    // Sampled, it starts where the seed says: two seeds, two starts; the same seed, the same answer.
    const seeded = (seed: number) => drain(engine, { prompt, maxTokens: 8, sampling: { temperature: 1, topP: 1 }, seed, ignoreEos: true });
    const [s1, s2, s1again] = [await seeded(1), await seeded(2), await seeded(1)];
    expect(s1.text).toBe(s1again.text);
    expect(s1.text).not.toBe(s2.text);
  });

  it("prefills only the uncached part of a re-sent prompt, and evicts the least recently used blocks when full", async () => {
    const events: PoolEvent[] = [];
    const engine = new LlmEngine({ model, kvBlocks: 2 * meta.blocks + 4, onKvEvent: (e) => events.push(e) });
    const prompt = meta.ids;
    await drain(engine, { prompt, maxTokens: 1, sampling: greedy });
    const computed = engine.prefillComputedTokens;
    await drain(engine, { prompt, maxTokens: 1, sampling: greedy });
    expect(engine.prefillComputedTokens - computed).toBe(prompt.length - 16 * meta.blocks);
    // Three other prompts as long: the first prompt's blocks are the least recently used, and go.
    for (const salt of [1, 2, 3]) await drain(engine, { prompt: prompt.map((id) => (id + salt) % model.prompts.vocabSize), maxTokens: 1, sampling: greedy });
    expect(events.some((e) => e.type === "removed")).toBe(true);
    const before = engine.prefillComputedTokens;
    await drain(engine, { prompt, maxTokens: 1, sampling: greedy });
    expect(engine.prefillComputedTokens - before).toBe(prompt.length);
  });
});

describe("stand-in prompts", () => {
  const model = familyStandIn("qwen3");
  it("renders tools into the template, and refuses ids outside the vocabulary by its size", () => {
    const plain = model.prompts.chat([{ role: "user", content: "weather?" }]);
    const tools = model.prompts.chat([{ role: "user", content: "weather?" }], { tools: [{ type: "function", function: { name: "get_weather", parameters: { type: "object" } } }] });
    expect(tools.length).toBeGreaterThan(plain.length + 20);
    expect(model.prompts.vocabSize).toBeGreaterThan(151_000);
    expect(model.prompts.firstId).toBe(0);
    expect(model.embeddings).toBeUndefined();
  });
});
