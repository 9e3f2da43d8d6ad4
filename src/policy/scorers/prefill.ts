/**
 * `prefill`: the share of the prompt the replica would still have to prefill,
 * 0 (it holds every block) to 1 (none): Dynamo's overlap term.
 */
import { defineScorer } from "./scorer.ts";

export const prefill = defineScorer({
  name: "prefill",
  description: "the prompt's share the replica would still prefill (0..1)",
  needsPrompt: true,
  create: () => (_c, { keys, held }) => (keys.length === 0 ? 0 : (keys.length - Math.min(keys.length, held)) / keys.length),
});
