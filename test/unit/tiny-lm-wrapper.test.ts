/**
 * What tiny-lm's wrapper (src/replica/llm/tiny-lm.ts) asks of an ONNX session and checks of
 * its answers, with a scripted runtime in place of onnxruntime-web's session (the real
 * model's outputs are tested in tiny-lm-model.test.ts; these are the shapes it must refuse),
 * its warm-up, and the engine-facing generator: the context it feeds, the ids it never
 * samples, the counts its penalties read.
 */
import * as Ort from "onnxruntime-web";
import { describe, expect, it } from "vitest";
import type { OnnxRuntime, OrtSession } from "../../src/models/onnx-runtime.ts";
import { createRng } from "../../src/replica/llm/sampling.ts";
import { TinyLm, createTinyLm, tinyLmGenerator, warmUpTinyLm, type LanguageModel } from "../../src/replica/llm/tiny-lm.ts";
import { END_OF_TURN } from "../../src/prompt/tiny-lm-chat-template.ts";
import { BOS, VOCAB_SIZE } from "../../src/replica/llm/tokenizer.ts";

/** A runtime whose one session has these names and answers `answer(feeds)`; it records runs and releases. */
function scripted(names: { inputs: string[]; outputs: string[] }, answer: (feeds: Record<string, Ort.Tensor>) => Record<string, { data: unknown } | undefined> = () => ({})) {
  const log = { runs: [] as { dims: readonly number[]; data: bigint[] }[], released: 0 };
  const session = { inputNames: names.inputs, outputNames: names.outputs } as unknown as OrtSession;
  const runtime: OnnxRuntime = {
    Tensor: Ort.Tensor,
    createSession: async () => session,
    run: async (_s, feeds) => {
      const context = feeds["context"] as Ort.Tensor;
      log.runs.push({ dims: context.dims, data: Array.from(context.data as BigInt64Array) });
      return answer(feeds as Record<string, Ort.Tensor>) as never;
    },
    release: async () => {
      log.released++;
    },
  };
  return { runtime, log };
}
const TINY = { inputs: ["context"], outputs: ["logits", "embedding"] };

describe("TinyLm over a session", () => {
  it("refuses a graph without tiny-lm's names, naming what is missing, and releases it", async () => {
    const { runtime, log } = scripted({ inputs: ["ctx"], outputs: ["logits"] });
    await expect(createTinyLm(runtime, new Uint8Array())).rejects.toThrow("tiny-lm: the graph lacks context, embedding");
    expect(log.released).toBe(1);
    const ok = scripted(TINY);
    expect(await createTinyLm(ok.runtime, new Uint8Array())).toBeInstanceOf(TinyLm);
    expect(ok.log.released).toBe(0);
  });

  it("feeds the two previous tokens and takes logits of the vocabulary's size, refusing any other", async () => {
    const good = new Float32Array(VOCAB_SIZE);
    for (const [data, ok] of [[good, true], [undefined, false], [new Float32Array(VOCAB_SIZE - 1), false], [new Float64Array(VOCAB_SIZE), false]] as const) {
      const { runtime, log } = scripted(TINY, () => (data === undefined ? {} : { logits: { data } }));
      const m = new TinyLm(runtime, {} as OrtSession);
      if (ok) expect(await m.nextLogits(5, 9)).toBe(good);
      else await expect(m.nextLogits(5, 9)).rejects.toThrow("tiny-lm: unexpected logits output");
      expect(log.runs).toEqual([{ dims: [1, 2], data: [5n, 9n] }]);
    }
  });

  it("embeds with one run of every position's pair (<s> before the start), refusing nothing to embed and a wrong output", async () => {
    const good = new Float32Array(VOCAB_SIZE - 1);
    const { runtime, log } = scripted(TINY, () => ({ embedding: { data: good } }));
    const m = new TinyLm(runtime, {} as OrtSession);
    expect(await m.embed([7, 8, 9])).toBe(good);
    expect(log.runs).toEqual([{ dims: [3, 2], data: [BigInt(BOS), 7n, 7n, 8n, 8n, 9n] }]);
    await expect(m.embed([])).rejects.toThrow(new RangeError("tiny-lm: nothing to embed"));
    for (const data of [undefined, new Float32Array(VOCAB_SIZE)]) {
      const bad = scripted(TINY, () => (data === undefined ? {} : { embedding: { data } }));
      await expect(new TinyLm(bad.runtime, {} as OrtSession).embed([1])).rejects.toThrow("tiny-lm: unexpected embedding output");
    }
  });
});

/** A language model that records its calls and favours `favourite` (by default <s>, which must never be sampled). */
function recording(favourite = BOS) {
  const calls: { logits: [number, number][]; embeds: number[][] } = { logits: [], embeds: [] };
  const model: LanguageModel = {
    id: "rec",
    vocabSize: VOCAB_SIZE,
    embeddingSize: VOCAB_SIZE - 1,
    nextLogits: async (a, b) => {
      calls.logits.push([a, b]);
      const l = new Float32Array(VOCAB_SIZE).fill(-10);
      l[favourite] = 0;
      l[favourite === BOS ? 7 : BOS] = -1;
      l[8] = -1;
      return l;
    },
    embed: async (ids) => {
      calls.embeds.push([...ids]);
      return new Float32Array(VOCAB_SIZE - 1);
    },
    release: async () => undefined,
  };
  return { model, calls };
}

describe("warmUpTinyLm", () => {
  it("runs the model `runs` times over spread contexts, yields to the loop every 100, then embeds once; 0 runs do nothing", async () => {
    const { model, calls } = recording();
    let yields = 0;
    await warmUpTinyLm(model, 250, async () => void yields++);
    expect(calls.logits).toHaveLength(250);
    expect(calls.logits.slice(0, 3)).toEqual([[0, 0], [1, 7], [2, 14]]);
    expect(yields).toBe(2);
    expect(calls.embeds).toEqual([[2, 3, 4]]);
    const idle = recording();
    await warmUpTinyLm(idle.model, 0, async () => void yields++);
    expect([idle.calls.logits.length, idle.calls.embeds.length, yields]).toEqual([0, 0, 2]);
  });
});

describe("tinyLmGenerator", () => {
  const greedy = { temperature: 0, topP: 1 };

  it("the context is the prompt's last two tokens (<s> before a one-token prompt), then what it generated", async () => {
    const { model, calls } = recording();
    const g = tinyLmGenerator(model);
    const one = g.decoder([42], { sampling: greedy, rng: createRng(1), ignoreEos: false });
    await one.next();
    await one.next();
    const two = g.decoder([41, 42], { sampling: greedy, rng: createRng(1), ignoreEos: false });
    await two.next();
    expect(calls.logits).toEqual([[BOS, 42], [42, 7], [41, 42]]);
  });

  it("never samples <s>, however likely; the frequency penalty reads what it generated", async () => {
    const { model } = recording();
    const d = tinyLmGenerator(model).decoder([5], { sampling: greedy, rng: createRng(1), ignoreEos: false });
    expect((await d.next()).token).toBe(7);
    // 7 at 0, 8 at −1: with a frequency penalty of 2, once 7 was generated (−2) 8 wins; once each, 7 again (−2 > −3).
    const fav = recording(7);
    const p = tinyLmGenerator(fav.model).decoder([5], { sampling: { temperature: 0, topP: 1, frequencyPenalty: 2 }, rng: createRng(1), ignoreEos: false });
    expect([(await p.next()).token, (await p.next()).token, (await p.next()).token]).toEqual([7, 8, 7]);
  });

  it("its prompts: ids from after <s>, the chat's turn end as its stop, embeddings through the model", async () => {
    const { model, calls } = recording();
    const g = tinyLmGenerator(model);
    expect(g.prompts.firstId).toBe(BOS + 1);
    expect(g.prompts.vocabSize).toBe(VOCAB_SIZE);
    expect(g.prompts.chatStop).toEqual([END_OF_TURN]);
    expect(g.prompts.chat([{ role: "user", content: "hi" }]).length).toBeGreaterThan(0);
    expect(g.embeddings?.size).toBe(VOCAB_SIZE - 1);
    await g.embeddings!.embed([3, 4]);
    expect(calls.embeds).toEqual([[3, 4]]);
  });
});
