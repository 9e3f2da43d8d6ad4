/**
 * `trip`: the round trip from this isolate to the candidate alone, ms (the first part of
 * the latency term: src/policy/latency-model.ts). Weighed alone it sends every request
 * to the nearest replica whatever its queue: the nearest-only baseline latency choice is
 * measured against (bench/regions/regions.ts), and, beside load terms, a pull toward
 * near replicas.
 */
import { defineScorer } from "./scorer.ts";

export const trip = defineScorer({
  name: "trip",
  description: "round trip from this isolate to the replica, ms (learnt, else from geography)",
  needsPrompt: false,
  create: () => (_c, ctx) => ctx.ttft().trip,
});
