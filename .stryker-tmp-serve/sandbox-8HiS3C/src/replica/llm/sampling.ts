/**
 * Choosing the next token from the model's logits, as OpenAI-style servers do: penalties,
 * temperature, nucleus (top_p) sampling, and a seeded PRNG so that the same request with
 * the same `seed` produces the same text. Pure (no I/O, no clock).
 */
// @ts-nocheck

import { mulberry32 } from "../../seeded-random.ts";

export interface SamplingParams {
  /** 0 (greedy: the most likely token, lowest id on ties) to 2. */
  temperature: number;
  /** Nucleus: sample among the most likely tokens whose probabilities add up to top_p (0 < top_p ≤ 1). */
  topP: number;
  /** Subtracted once from the logit of every token already generated (OpenAI's presence_penalty). */
  presencePenalty?: number;
  /** Subtracted from a token's logit once per time it was generated (OpenAI's frequency_penalty). */
  frequencyPenalty?: number;
}

export type Rng = () => number;

/** A 32-bit state from any safe integer seed (negative and above 2^32 included). */
function seedState(seed: number): number {
  const big = BigInt.asUintN(64, BigInt(Math.trunc(seed)));
  const lo = Number(big & 0xffffffffn);
  const hi = Number(big >> 32n);
  return (lo ^ Math.imul(hi, 0x9e3779b1)) >>> 0;
}

/** The seeded PRNG (mulberry32) for a request's `seed`: same seed, same sequence. */
export function createRng(seed: number): Rng {
  return mulberry32(seedState(seed));
}

/**
 * The PRNG for the token at `position` (its index in the sequence, prompt included) of
 * a request seeded `seed`. A token's draw then depends on the seed and its position
 * only, not on the draws before it: a continuation (the prompt followed by the tokens
 * already sent, docs/migration.md) draws at each position what the uninterrupted run
 * drew there, so seeded sampling goes on with the same text.
 */
export function positionRng(seed: number, position: number): Rng {
  return mulberry32((seedState(seed) ^ Math.imul(position + 1, 0x85ebca6b)) >>> 0);
}

/** A fresh random seed for requests that give none. */
export function randomSeed(): number {
  return crypto.getRandomValues(new Uint32Array(1))[0]!;
}

export interface SampleOptions {
  /** How many times each token id was generated so far (for the penalties). */
  counts?: ReadonlyMap<number, number>;
  /** Ids never to choose (e.g. the beginning-of-text token). */
  exclude?: readonly number[];
}

/** The id of the next token. */
export function sampleToken(logits: ArrayLike<number>, params: SamplingParams, rng: Rng, options: SampleOptions = {}): number {
  const n = logits.length;
  const scores = new Float64Array(n);
  for (let i = 0; i < n; i++) scores[i] = logits[i]!;
  if (options.counts && (params.presencePenalty || params.frequencyPenalty)) {
    for (const [id, count] of options.counts) {
      if (id < 0 || id >= n || count <= 0) continue;
      scores[id]! -= (params.presencePenalty ?? 0) + (params.frequencyPenalty ?? 0) * count;
    }
  }
  for (const id of options.exclude ?? []) if (id >= 0 && id < n) scores[id] = -Infinity;

  if (params.temperature === 0) {
    let best = -1;
    for (let i = 0; i < n; i++) if (best < 0 || scores[i]! > scores[best]!) best = i;
    return best;
  }

  let max = -Infinity;
  for (let i = 0; i < n; i++) max = Math.max(max, scores[i]!);
  const probs = new Float64Array(n);
  let total = 0;
  for (let i = 0; i < n; i++) {
    const p = scores[i] === -Infinity ? 0 : Math.exp((scores[i]! - max) / params.temperature);
    probs[i] = p;
    total += p;
  }

  let candidates: number[];
  if (params.topP >= 1) {
    candidates = [];
    for (let i = 0; i < n; i++) if (probs[i]! > 0) candidates.push(i);
  } else {
    // Most likely first, ties by id; keep the smallest prefix whose mass reaches top_p.
    const order = Array.from({ length: n }, (_, i) => i).sort((a, b) => probs[b]! - probs[a]! || a - b);
    candidates = [];
    let mass = 0;
    for (const id of order) {
      if (probs[id]! <= 0) break;
      candidates.push(id);
      mass += probs[id]! / total;
      if (mass >= params.topP) break;
    }
  }
  let kept = 0;
  for (const id of candidates) kept += probs[id]!;
  let r = rng() * kept;
  for (const id of candidates) {
    r -= probs[id]!;
    if (r < 0) return id;
  }
  return candidates[candidates.length - 1]!; // rounding left a sliver: the last candidate
}
