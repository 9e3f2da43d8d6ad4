/**
 * `leader`: 0 for the prefix's leader (ScoreContext.leader: the first in rendezvous
 * order among the replicas holding about the most of the prompt); for any other, the
 * share of the prompt the leader holds (0..1).
 *
 * Why: a group's prefix that came to be held by two replicas (a burst past the load
 * line, a cold start) stays split when only `prefill` and `slots` weigh. Both copies
 * look alike, and the slots term sends the group to each in turn, so both stay warm
 * and, under cache pressure, each evicts some other group's prefix. With this term
 * every isolate prefers the same holder unless another has clearly more room, the
 * other copy goes cold, and the cache it took returns to other prefixes. The load
 * line still moves the group when its leader is over it.
 *
 * Scaled by what the leader holds, so a short shared opening (a one-block greeting
 * that every prompt starts with) makes no hot spot of its leader: the pull is as
 * large as the prefix that a split would keep twice.
 */
import { defineScorer } from "./scorer.ts";

export const leader = defineScorer({
  name: "leader",
  description: "for any replica but the prefix's leader (the first holder in rendezvous order among those holding about the most), the share of the prompt the leader holds",
  needsPrompt: true,
  create: () => (c, { keys, leader }) => (leader === undefined || c.id === leader.id || keys.length === 0 ? 0 : Math.min(keys.length, leader.held) / keys.length),
});
