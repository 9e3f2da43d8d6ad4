/**
 * What the two prefix balancers share: where their prefix choice applies, and what
 * decides otherwise.
 * - A request with no prompt keys (no parsable prompt, or not one full block): the
 *   load-aware choice, as `load_aware` makes it.
 * - A multiplexed model: the prefix choice among the model's holders that have room,
 *   so a cached prefix never costs a model load; when no holder has room, or there
 *   are no keys, pickReplicaForModel (which may load the model elsewhere).
 */
import { fullness, pickReplica, pickReplicaForModel } from "../pick-replica.ts";
import type { BalanceInput, BalancerCandidate, PromptKeys } from "./balancer.ts";

export function prefixAware<T extends BalancerCandidate>(
  candidates: readonly T[],
  input: BalanceInput,
  choose: (pool: readonly T[], prompt: PromptKeys) => T | undefined,
): T | undefined {
  const { prompt, model, random } = input;
  const keyed = prompt !== undefined && prompt.keys.length > 0 ? prompt : undefined;
  if (model !== undefined) {
    const holders = keyed ? candidates.filter((c) => (c.models.includes(model) || c.loading.includes(model)) && fullness(c) < 1) : [];
    return (holders.length > 0 && keyed ? choose(holders, keyed) : undefined) ?? pickReplicaForModel(candidates, model, random);
  }
  return (keyed ? choose(candidates, keyed) : undefined) ?? pickReplica(candidates, random);
}
