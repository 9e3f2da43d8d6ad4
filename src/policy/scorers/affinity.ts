/**
 * `affinity`: 0 for the prefix's leader (ScoreContext.leader: the first in rendezvous
 * order among the replicas holding about the most of the prompt), 1 for any other.
 *
 * Why: a group's prefix that came to be held by two replicas (a burst past the load
 * line, a cold start) stays split when only `prefill` and `slots` weigh. Both copies
 * look alike, and the slots term sends the group to each in turn, so both stay warm
 * and, under cache pressure, each evicts some other group's prefix. With this term
 * every isolate prefers the same holder unless another has clearly more room
 * (weight / slot share requests fewer), the other copy goes cold, and the cache it
 * took returns to other prefixes. The load line still moves the group when its
 * leader is over it.
 */
import { defineScorer } from "./scorer.ts";

export const affinity = defineScorer({
  name: "affinity",
  description: "0 for the first holder in rendezvous order among those holding about the most of the prompt, 1 for others",
  create: () => (c, { leader }) => (leader === undefined || c.id === leader ? 0 : 1),
});
