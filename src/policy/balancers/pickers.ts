/**
 * The registered pickers: the last stage of a profile, one replica of the filtered
 * pool. A new picker is one definition here (or its own module) and one entry in
 * PICKERS; `policy.balancer.picker` accepts exactly these names.
 */
import { pickRandom, pickRoundRobin, pickTwoChoices } from "../pick-replica.ts";
import { rendezvousOrder } from "../prefix-score.ts";
import { definePicker } from "./balancer.ts";

/** `two_choices`: power of two random choices on fullness, then load (Ray Serve's rule). */
export const twoChoices = definePicker({
  name: "two_choices",
  description: "power of two random choices on fullness, then load",
  readsPrompt: false,
  scores: false,
  create: () => (pool, { input }) => (pool.length === 0 ? undefined : pickTwoChoices(pool, input.random)),
});

/** `round_robin`, load-blind: the next replica in id order; the turn is the instance's own (one per isolate and deployment). */
export const roundRobin = definePicker({
  name: "round_robin",
  description: "the next replica in id order, load-blind",
  readsPrompt: false,
  scores: false,
  create: () => {
    let next = 0;
    return (pool) => {
      if (pool.length === 0) return undefined;
      const turn = next;
      next = turn >= Number.MAX_SAFE_INTEGER ? 0 : turn + 1;
      return pickRoundRobin(pool, turn);
    };
  },
});

/** `random`, load-blind: uniformly at random. */
export const random = definePicker({
  name: "random",
  description: "uniformly at random, load-blind",
  readsPrompt: false,
  scores: false,
  create: () => (pool, { input }) => pickRandom(pool, input.random),
});

/** `rendezvous`: the first replica in rendezvous order on the prompt's anchor, so every isolate sends a prefix to the same one. */
export const rendezvous = definePicker({
  name: "rendezvous",
  description: "the first replica in rendezvous order on the prompt's anchor key",
  readsPrompt: true,
  scores: false,
  create: () => (pool, { anchor }) => (pool.length === 0 || anchor === undefined ? undefined : rendezvousOrder(pool, anchor)[0]),
});

/**
 * `cheapest`: the lowest cost by the profile's weighted scorers; equal costs keep the
 * earlier replica in rendezvous order on the prompt's anchor, or in the pool's order for
 * a request without a prompt (scored by terms that need none).
 */
export const cheapest = definePicker({
  name: "cheapest",
  description: "the lowest weighted cost by the profile's scorers, ties in rendezvous order",
  readsPrompt: true,
  scores: true,
  create: () => (pool, ctx) => {
    if (pool.length === 0) return undefined;
    let best: (typeof pool)[number] | undefined;
    let bestCost = Infinity;
    for (const c of ctx.anchor === undefined ? pool : rendezvousOrder(pool, ctx.anchor)) {
      const cost = ctx.cost(c);
      // Strictly cheaper only: equal costs keep the earlier (rendezvous) replica.
      if (cost < bestCost) {
        best = c;
        bestCost = cost;
      }
    }
    return best;
  },
});

export const PICKERS = [twoChoices, roundRobin, random, rendezvous, cheapest] as const;
