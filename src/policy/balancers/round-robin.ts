/**
 * `round_robin`, load-blind (a baseline): the next candidate in a stable order
 * (by replica id). The turn is this instance's own, so one counter per isolate and
 * deployment. Multiplexed models still go to their holders (pickReplicaForModel).
 */
import { pickReplicaForModel, pickRoundRobin } from "../pick-replica.ts";
import { defineBalancer } from "./balancer.ts";

export const roundRobin = defineBalancer({
  name: "round_robin",
  readsPrompt: false,
  create: () => {
    let next = 0;
    return {
      pick(candidates, { random, model }) {
        if (model !== undefined) return pickReplicaForModel(candidates, model, random);
        if (candidates.length === 0) return undefined;
        const turn = next;
        next = turn >= Number.MAX_SAFE_INTEGER ? 0 : turn + 1;
        return pickRoundRobin(candidates, turn);
      },
    };
  },
});
