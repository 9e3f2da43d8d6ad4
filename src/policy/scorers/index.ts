/**
 * The one registration place of the precise tier's scoring terms (./scorer.ts):
 * `policy.prefix.scorers` accepts exactly these names (src/config/deployment.ts
 * derives its keys from SCORER_NAMES). A new term is one module in this folder
 * plus one line below.
 */
import { latency } from "./latency.ts";
import { leader } from "./leader.ts";
import { prefill } from "./prefill.ts";
import type { ScorerPlugin, WeightedScore } from "./scorer.ts";
import { slots } from "./slots.ts";
import { trip } from "./trip.ts";

/** Every registered term. */
export const SCORERS = [prefill, slots, leader, latency, trip] as const;

export type ScorerName = (typeof SCORERS)[number]["name"];

type NamesOf<T extends readonly unknown[]> = { readonly [I in keyof T]: T[I] extends { name: infer N } ? N : never };

/** The registered names, as a tuple of literals (what a zod enum takes). */
export const SCORER_NAMES = SCORERS.map((s) => s.name) as unknown as NamesOf<typeof SCORERS>;

/**
 * Weights when configuration names none: 2 × prefill + slots (prefix.prefillWeight sets
 * prefill's) + 0.25 × leader, so a prefix stays with its leader while that one runs at
 * most a quarter of its slots more than another holder. The term took the approximate
 * tier's hit ratio from 0.55 to 0.63–0.66 (means of 3 seeds, three runs; requests not
 * sent to the replica holding the most from 13–21 % to 3–12 %) and left the precise
 * tier's within its noise (bench/prefix-cache/prefix-cache.ts --family qwen3, 2026-12-05).
 */
export const DEFAULT_SCORER_WEIGHTS: Readonly<Record<ScorerName, number>> = { prefill: 2, slots: 1, leader: 0.25, latency: 0, trip: 0 };

/**
 * A registry over `plugins`: their names, and the weighted terms a configuration's
 * weights resolve to (in registration order; an unnamed term weighs 0). The
 * built-in one is `scorers`; a test builds its own with an extra term.
 */
export function scorerRegistry(plugins: readonly ScorerPlugin[]) {
  const byName = new Map<string, ScorerPlugin>();
  for (const p of plugins) {
    // One name, one term: a second registration is a bug in the list.
    if (byName.has(p.name)) throw new Error(`scorer "${p.name}" is registered twice`);
    byName.set(p.name, p);
  }
  return {
    names: [...byName.keys()],
    /** The weighted terms for `weights` (name → weight). An unknown name throws: configuration validates names first. */
    resolve(weights: Readonly<Record<string, number>>): WeightedScore[] {
      for (const name of Object.keys(weights)) if (!byName.has(name)) throw new Error(`no scorer "${name}"; registered: ${[...byName.keys()].join(", ")}`);
      return plugins.map((p) => ({ name: p.name, weight: weights[p.name] ?? 0, needsPrompt: p.needsPrompt, score: p.create() }));
    },
  };
}

/** The registry of the built-in terms. */
export const scorers = scorerRegistry(SCORERS);

export type { Score, ScoreContext, ScorerPlugin, WeightedScore } from "./scorer.ts";
export { costOf, defineScorer } from "./scorer.ts";
