/**
 * `slots`: the replica's request slots in use, with this request, as a share of
 * its capacity (above 1 when it is over). Slots, not KV use: one long prompt
 * fills ~1/8 of a KV cache, so KV use swings with each request and would move a
 * conversation off the replica that holds its history for a replica one request
 * emptier. A KV cache near full still keeps a replica out above the load line
 * (prefix-score.ts, underLoadBound).
 */
import { defineScorer } from "./scorer.ts";

export const slots = defineScorer({
  name: "slots",
  description: "request slots in use with this request, as a share of capacity",
  needsPrompt: false,
  create: () => (c) => (c.load + 1) / c.capacity,
});
