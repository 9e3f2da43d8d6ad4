/**
 * The scoring seam of the precise prefix tier (`prefix_cache`): its cost is a
 * weighted sum of terms, each one module with a factory, registered in one list
 * (./index.ts), weighted in configuration (`policy.prefix.scorers`), as the
 * Gateway API Inference Extension's scheduler weighs its scorers. A new term (a
 * replica's distance, a predicted TTFT) is one module here plus one line in the
 * list; the names the configuration accepts come from the list.
 *
 * A term is a cost: lower is better, 0 for the best a term can say. Terms are
 * pure; what they read comes in with the candidate and the context.
 */
import type { BlockKey } from "../../prefix/block-keys.ts";
import type { BalancerCandidate } from "../balancers/balancer.ts";
import type { TtftPrediction } from "../latency-model.ts";

/** What one choice brings to every term. */
export interface ScoreContext {
  /** The prompt's block keys: at least one, except for a request without a prompt scored by terms that need none. */
  keys: readonly BlockKey[];
  /** How many leading blocks of `keys` the candidate holds (its summary, or recent dispatches to it). */
  held: number;
  /**
   * The prefix's leader: of the candidates holding about the most of the prompt (within
   * one dispatch-record stride of it), the first in rendezvous order on the prompt's
   * anchor key, and the blocks it holds. Every isolate with the same beliefs names the
   * same one. Undefined when no candidate holds any of the prompt.
   */
  leader: { id: string; held: number } | undefined;
  /** The candidate's predicted time to first token and its parts, ms (src/policy/latency-model.ts); computed only when a term asks. */
  ttft(): TtftPrediction;
}

/** One term's cost of sending the request to `candidate`. */
export type Score = (candidate: BalancerCandidate, ctx: ScoreContext) => number;

/** A term as registered: its name (what configuration weighs it by), what it means, its factory. */
export interface ScorerPlugin<N extends string = string> {
  readonly name: N;
  readonly description: string;
  /** It reads the prompt's keys: a profile weighing it scores only requests with a prompt (others are chosen as `load_aware` would). */
  readonly needsPrompt: boolean;
  create(): Score;
}

/** Declares a term, checking its shape where it is written. */
export function defineScorer<const N extends string>(plugin: ScorerPlugin<N>): ScorerPlugin<N> {
  return plugin;
}

/** A term with its weight, as a balancer instance uses it. */
export interface WeightedScore {
  name: string;
  weight: number;
  needsPrompt: boolean;
  score: Score;
}

/** The weighted sum of `terms` for `candidate`: the cost the precise tier minimises. */
export function costOf(terms: readonly WeightedScore[], candidate: BalancerCandidate, ctx: ScoreContext): number {
  let cost = 0;
  for (const t of terms) if (t.weight !== 0) cost += t.weight * t.score(candidate, ctx);
  return cost;
}
