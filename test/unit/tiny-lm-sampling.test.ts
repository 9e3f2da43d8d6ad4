/** Sampling over logits (src/replica/llm/sampling.ts): seeded determinism, greedy, top_p, temperature, penalties. */
import { describe, expect, it } from "vitest";
import { createRng, positionRng, randomSeed, sampleToken, type SamplingParams } from "../../src/replica/llm/sampling.ts";

const logits = Float32Array.from([-30, Math.log(0.5), Math.log(0.3), Math.log(0.15), Math.log(0.05)]);
const T1: SamplingParams = { temperature: 1, topP: 1 };

function draws(seed: number, n: number, params: SamplingParams = T1): number[] {
  const rng = createRng(seed);
  return Array.from({ length: n }, () => sampleToken(logits, params, rng, { exclude: [0] }));
}

describe("createRng", () => {
  it("gives the same sequence for the same seed, another for another seed", () => {
    const a = createRng(42);
    const b = createRng(42);
    const c = createRng(43);
    const sa = Array.from({ length: 20 }, a);
    expect(Array.from({ length: 20 }, b)).toEqual(sa);
    expect(Array.from({ length: 20 }, c)).not.toEqual(sa);
    expect(sa.every((x) => x >= 0 && x < 1)).toBe(true);
  });

  it("accepts any safe integer seed, and seeds that differ above 32 bits differ", () => {
    for (const seed of [0, -1, 2 ** 40, Number.MAX_SAFE_INTEGER, -(2 ** 53) + 1]) expect(createRng(seed)()).toBeGreaterThanOrEqual(0);
    expect(createRng(1)()).not.toBe(createRng(1 + 2 ** 32)());
    expect(Number.isInteger(randomSeed())).toBe(true);
  });
});

describe("sampleToken", () => {
  it("same seed, same tokens", () => {
    expect(draws(7, 200)).toEqual(draws(7, 200));
    expect(draws(7, 200)).not.toEqual(draws(8, 200));
  });

  it("greedy at temperature 0: the most likely token, the lowest id on ties, no randomness used", () => {
    let calls = 0;
    const rng = () => {
      calls++;
      return 0.99;
    };
    expect(sampleToken(logits, { temperature: 0, topP: 1 }, rng)).toBe(1);
    expect(sampleToken([1, 3, 3, 2], { temperature: 0, topP: 1 }, rng)).toBe(1);
    expect(calls).toBe(0);
  });

  it("never picks an excluded id", () => {
    const flat = new Float32Array(5).fill(0);
    const rng = createRng(1);
    for (let i = 0; i < 500; i++) expect(sampleToken(flat, T1, rng, { exclude: [0, 2] })).not.toBeOneOf([0, 2]);
  });

  it("follows the softmax at temperature 1", () => {
    const n = 20_000;
    const counts = [0, 0, 0, 0, 0];
    for (const t of draws(123, n)) counts[t]!++;
    expect(counts[0]).toBe(0);
    for (const [id, p] of [[1, 0.5], [2, 0.3], [3, 0.15], [4, 0.05]] as const) expect(counts[id]! / n).toBeCloseTo(p, 1);
  });

  it("top_p keeps the smallest most likely set reaching p", () => {
    const seen = new Set(draws(5, 2000, { temperature: 1, topP: 0.75 }));
    expect([...seen].sort()).toEqual([1, 2]); // 0.5 + 0.3 ≥ 0.75
    expect(new Set(draws(5, 500, { temperature: 1, topP: 0.01 }))).toEqual(new Set([1]));
  });

  it("low temperature sharpens, high temperature flattens", () => {
    const share = (t: number) => draws(9, 5000, { temperature: t, topP: 1 }).filter((x) => x === 1).length / 5000;
    expect(share(0.2)).toBeGreaterThan(0.9);
    expect(share(2)).toBeLessThan(0.45);
  });

  it("presence and frequency penalties push repeated tokens down", () => {
    const counts = new Map([[1, 3]]);
    expect(sampleToken(logits, { temperature: 0, topP: 1, frequencyPenalty: 1 }, createRng(1), { counts })).toBe(2);
    expect(sampleToken(logits, { temperature: 0, topP: 1, presencePenalty: 0.1 }, createRng(1), { counts })).toBe(1);
    expect(sampleToken(logits, { temperature: 0, topP: 1, presencePenalty: 1 }, createRng(1), { counts })).toBe(2);
  });
});

describe("positionRng", () => {
  it("draws from the seed and the position only: the same pair, the same draw; another position or seed, another", () => {
    expect(positionRng(7, 40)()).toBe(positionRng(7, 40)());
    expect(positionRng(7, 40)()).not.toBe(positionRng(7, 41)());
    expect(positionRng(7, 40)()).not.toBe(positionRng(8, 40)());
    // Spread: 1,000 consecutive positions of one seed fill [0, 1) evenly enough (each tenth gets 60–140).
    const tenths = new Array<number>(10).fill(0);
    for (let p = 0; p < 1000; p++) tenths[Math.floor(positionRng(99, p)() * 10)]!++;
    for (const n of tenths) expect(n).toBeGreaterThan(60);
  });
});

describe("sampleToken against a scripted draw: where each candidate's share of [0, 1) begins and ends", () => {
  /** An rng that returns `r` once. */
  const draw = (r: number) => () => r;
  const ties = [5, 5, 5, 5];

  it("a draw exactly on a boundary goes to the next candidate; each candidate owns [start, end)", () => {
    const T: SamplingParams = { temperature: 1, topP: 1 };
    expect([0, 0.2499, 0.25, 0.5, 0.75, 0.9999].map((r) => sampleToken(ties, T, draw(r)))).toEqual([0, 0, 1, 2, 3, 3]);
  });

  it("top_p keeps candidates until their mass reaches p, then draws among those alone", () => {
    // Four equal candidates: 0.5 is reached by two, exactly; a draw of 0.7 of their mass is the second.
    expect(sampleToken(ties, { temperature: 1, topP: 0.5 }, draw(0.7))).toBe(1);
    expect(sampleToken(ties, { temperature: 1, topP: 0.51 }, draw(0.7))).toBe(2);
    // Most likely first: [1, 3, 2] by probability; p = 0.6 keeps ids 1 and 3.
    const l = [Math.log(0.1), Math.log(0.5), Math.log(0.15), Math.log(0.25)];
    expect(sampleToken(l, { temperature: 1, topP: 0.6 }, draw(0.99))).toBe(3);
    expect(sampleToken(l, { temperature: 1, topP: 0.6 }, draw(0.6))).toBe(1);
    expect(sampleToken(l, { temperature: 1, topP: 0.6 }, draw(0.7))).toBe(3);
  });

  it("logits far from zero: the softmax is taken from the largest, never overflows", () => {
    // exp(1) : exp(0) → 0.731 : 0.269.
    const far = [1000, 999];
    expect(sampleToken(far, { temperature: 1, topP: 1 }, draw(0.73))).toBe(0);
    expect(sampleToken(far, { temperature: 1, topP: 1 }, draw(0.74))).toBe(1);
    expect(sampleToken([-1000, -1001], { temperature: 1, topP: 1 }, draw(0.74))).toBe(1);
  });

  it("greedy with one token, and the penalties exactly: presence once, frequency per count, none for a count of 0", () => {
    expect(sampleToken([3], { temperature: 0, topP: 1 }, draw(0))).toBe(0);
    // Two tokens tied; id 0 generated twice: presence 0.5 + frequency 0.25 × 2 = 1 off its logit → shares 1 : e.
    const p = { temperature: 1, topP: 1, presencePenalty: 0.5, frequencyPenalty: 0.25 };
    const share0 = 1 / (1 + Math.E);
    expect(sampleToken([0, 0], p, draw(share0 - 1e-9), { counts: new Map([[0, 2]]) })).toBe(0);
    expect(sampleToken([0, 0], p, draw(share0 + 1e-9), { counts: new Map([[0, 2]]) })).toBe(1);
    // A count of 0 is no penalty: the tie stays (0.5 : 0.5).
    expect(sampleToken([0, 0], p, draw(0.49), { counts: new Map([[1, 0]]) })).toBe(0);
    expect(sampleToken([0, 0], p, draw(0.51), { counts: new Map([[1, 0]]) })).toBe(1);
    // Ids outside the vocabulary are ignored, counted or excluded.
    expect(sampleToken([0, 0], p, draw(0.51), { counts: new Map([[-1, 3], [2, 3]]), exclude: [-1, 2] })).toBe(1);
  });
});

describe("the seeded draws stay the same across versions", () => {
  // A stream migrated between replicas of different versions goes on drawing what it drew (docs/migration.md): these values are part of that contract.
  it("positionRng and createRng give these first draws", () => {
    expect([positionRng(7, 0)(), positionRng(7, 40)(), positionRng(-3, 5)(), createRng(2 ** 40 + 1)()]).toEqual([0.8873713978100568, 0.49204588937573135, 0.9281619316898286, 0.6583877787925303]);
  });
});
