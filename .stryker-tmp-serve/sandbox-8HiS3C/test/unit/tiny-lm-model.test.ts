/**
 * The tiny language model's artifacts and its ONNX graph: the builder reproduces the
 * committed model byte for byte, and onnxruntime-web's outputs equal the trigram table
 * computed in JS (logits) and the documented embedding.
 */
// @ts-nocheck

import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import path from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import {
  BOS_LOGPROB,
  buildTinyLm,
  float16Bits,
  float16Value,
  MODEL_DIR,
  tableAsFloat16,
  trigramLogProbs,
} from "../../scripts/build-tiny-lm.ts";
import { loadTinyLm, tinyLmDir } from "../../src/replica/llm/load-tiny-lm.ts";
import type { TinyLm } from "../../src/replica/llm/tiny-lm.ts";
import { BOS, VOCAB_SIZE, encode } from "../../src/replica/llm/tokenizer.ts";

const V = VOCAB_SIZE;
const corpus = readFileSync(path.join(MODEL_DIR, "corpus.txt"), "utf8");

describe("float16", () => {
  it("rounds to nearest, ties to even, like IEEE 754 binary16", () => {
    expect(float16Bits(0)).toBe(0);
    expect(float16Bits(-0)).toBe(0x8000);
    expect(float16Bits(1)).toBe(0x3c00);
    expect(float16Bits(-2)).toBe(0xc000);
    expect(float16Bits(65504)).toBe(0x7bff);
    expect(float16Bits(65520)).toBe(0x7c00); // rounds up to infinity
    expect(float16Bits(2 ** -24)).toBe(1); // smallest subnormal
    expect(float16Bits(2 ** -25)).toBe(0); // tie → even (0)
    expect(float16Bits(1 + 2 ** -11)).toBe(0x3c00); // tie between 1 and 1+2^-10 → even
    expect(float16Bits(1 + 3 * 2 ** -11)).toBe(0x3c02); // tie → even (mantissa 2)
    expect(float16Bits(-30)).toBe(0xcf80);
    for (const x of [-30, -11.3, -4.2, -0.001, 0.5, 1000.7]) expect(Math.abs(float16Value(float16Bits(x)) - x)).toBeLessThanOrEqual(Math.abs(x) * 2 ** -11);
  });
});

describe("build", () => {
  let dir: string;
  beforeAll(() => {
    dir = mkdtempSync(path.join(tmpdir(), "tiny-lm-"));
  });
  afterAll(() => rmSync(dir, { recursive: true, force: true }));

  it("rebuilds the committed model byte for byte from the committed corpus", () => {
    const out = buildTinyLm(corpus, dir);
    expect(readFileSync(out.onnxPath).equals(readFileSync(path.join(MODEL_DIR, "tiny-lm.onnx")))).toBe(true);
    expect(readFileSync(out.vocabPath, "utf8")).toBe(readFileSync(path.join(MODEL_DIR, "vocab.json"), "utf8"));
    expect(out.bytes).toBeLessThan(2 * 1024 * 1024);
  });

  it("is a proper trigram distribution: every row sums to 1, <s> is never next, seen trigrams beat unseen", () => {
    const table = trigramLogProbs(corpus);
    for (const [a, b] of [[BOS, BOS], [2, 2], [50, 60], [96, 1]] as const) {
      const row = table.subarray((a * V + b) * V, (a * V + b + 1) * V);
      expect(row[0]).toBe(BOS_LOGPROB);
      let sum = 0;
      for (let c = 1; c < V; c++) sum += Math.exp(row[c]!);
      expect(sum).toBeCloseTo(1, 9);
    }
    const [t, h, e, q] = encode("theq");
    const row = (t! * V + h!) * V;
    expect(table[row + e!]).toBeGreaterThan(table[row + q!]!); // "the" is everywhere in the corpus, "thq" nowhere
    expect(Math.exp(table[row + e!]!)).toBeGreaterThan(0.5);
  });
});

describe("ONNX graph (onnxruntime-web)", () => {
  let model: TinyLm;
  let table: Float32Array;
  beforeAll(async () => {
    model = (await loadTinyLm({ warmupRuns: 0 })).model;
    table = tableAsFloat16(trigramLogProbs(corpus));
  });
  afterAll(() => model.release());

  it("finds models/tiny-lm from the source tree", () => {
    expect(tinyLmDir()).toBe(MODEL_DIR);
  });

  it("logits are exactly the table row of the two previous tokens", async () => {
    const contexts: [number, number][] = [[BOS, BOS], [BOS, 5], [...encode("th")] as [number, number], [96, 96], [1, 2], [40, 73]];
    for (const [a, b] of contexts) {
      const logits = await model.nextLogits(a, b);
      expect(logits).toHaveLength(V);
      expect(Array.from(logits)).toEqual(Array.from(table.subarray((a * V + b) * V, (a * V + b + 1) * V)));
    }
  });

  it("the embedding is the centred, normalised mean of the rows ending at each token", async () => {
    const ids = encode("Switchyard routes requests.");
    const got = await model.embed(ids);
    const mean = new Float64Array(V - 1);
    ids.forEach((id, t) => {
      const prev = t === 0 ? BOS : ids[t - 1]!;
      for (let c = 1; c < V; c++) mean[c - 1]! += table[(prev * V + id) * V + c]! / ids.length;
    });
    const mu = mean.reduce((s, x) => s + x, 0) / mean.length;
    const centred = Array.from(mean, (x) => x - mu);
    const norm = Math.hypot(...centred);
    expect(got).toHaveLength(V - 1);
    got.forEach((x, i) => expect(x).toBeCloseTo(centred[i]! / norm, 5));
    expect(Math.hypot(...got)).toBeCloseTo(1, 5);
    // Similar texts are closer than unrelated ones.
    const dot = (x: Float32Array, y: Float32Array) => x.reduce((s, v, i) => s + v * y[i]!, 0);
    const a = await model.embed(encode("the replica reports its load"));
    const b = await model.embed(encode("replicas report their load"));
    const c = await model.embed(encode("{[(0123456789)]}"));
    expect(dot(a, b)).toBeGreaterThan(dot(a, c));
  });

  it("refuses to embed nothing", async () => {
    await expect(model.embed([])).rejects.toThrow(RangeError);
  });
});
