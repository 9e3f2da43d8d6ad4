/**
 * `load_aware` (the default): power of two random choices on load relative to
 * capacity (src/policy/pick-replica.ts), avoiding replicas this view believes full;
 * a multiplexed model goes to a replica that holds it (pickReplicaForModel).
 */
import { pickReplica, pickReplicaForModel } from "../pick-replica.ts";
import { defineBalancer } from "./balancer.ts";

export const loadAware = defineBalancer({
  name: "load_aware",
  readsPrompt: false,
  create: () => ({
    pick: (candidates, { random, model }) => (model !== undefined ? pickReplicaForModel(candidates, model, random) : pickReplica(candidates, random)),
  }),
});
