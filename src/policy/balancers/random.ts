/**
 * `random`, load-blind (a baseline): a candidate chosen uniformly at random.
 * Multiplexed models still go to their holders (pickReplicaForModel).
 */
import { pickRandom, pickReplicaForModel } from "../pick-replica.ts";
import { defineBalancer } from "./balancer.ts";

export const random = defineBalancer({
  name: "random",
  readsPrompt: false,
  create: () => ({
    pick: (candidates, { random, model }) => (model !== undefined ? pickReplicaForModel(candidates, model, random) : pickRandom(candidates, random)),
  }),
});
