/**
 * `latency`: the candidate's predicted time to first token in milliseconds: the trip from
 * this isolate, the queue ahead of a new prefill, and the prompt's uncached tokens at the
 * replica's prefill rate (src/policy/latency-model.ts). One unit for all three, so a
 * cached prefix far away beats an empty replica nearby exactly when the prefill it saves
 * is longer than the extra trip. Weighed beside unitless terms, its weight is per ms.
 */
import { defineScorer } from "./scorer.ts";

export const latency = defineScorer({
  name: "latency",
  description: "predicted time to first token, ms: trip + queue + uncached prefill",
  needsPrompt: false,
  create: () => (_c, ctx) => ctx.ttft().total,
});
