/**
 * The one registration place of balancing rules: `policy.balancer` accepts exactly
 * the names listed here (src/config/deployment.ts derives its enum from
 * BALANCER_NAMES), and benchmarks derive their arms from it. A new rule is one module
 * in this folder (a `defineBalancer` plugin, ./balancer.ts) plus one line below.
 */
import type { BalancerPlugin, BalancerSettings, Balancer } from "./balancer.ts";
import { loadAware } from "./load-aware.ts";
import { prefixCache } from "./prefix-cache.ts";
import { prefixHash } from "./prefix-hash.ts";
import { random } from "./random.ts";
import { roundRobin } from "./round-robin.ts";

/** Every registered balancer, the default first. */
export const BALANCERS = [loadAware, roundRobin, random, prefixHash, prefixCache] as const;

export type BalancerName = (typeof BALANCERS)[number]["name"];

type NamesOf<T extends readonly unknown[]> = { readonly [I in keyof T]: T[I] extends { name: infer N } ? N : never };

/** The registered names, as a tuple of literals (what a zod enum takes). */
export const BALANCER_NAMES = BALANCERS.map((b) => b.name) as unknown as NamesOf<typeof BALANCERS>;

const byName = new Map<string, BalancerPlugin>();
for (const plugin of BALANCERS) {
  // One name, one rule: a second registration is a bug in this list.
  if (byName.has(plugin.name)) throw new Error(`balancer "${plugin.name}" is registered twice`);
  byName.set(plugin.name, plugin);
}

/** The plugin registered under `name`. */
export function balancerPlugin(name: BalancerName): BalancerPlugin<BalancerName> {
  return byName.get(name) as BalancerPlugin<BalancerName>;
}

/** A balancer instance with what the dispatch needs to know of its plugin. */
export interface ActiveBalancer extends Balancer {
  readonly name: BalancerName;
  readonly readsPrompt: boolean;
}

/** A new instance of the named balancer (one per isolate and deployment). */
export function createBalancer(name: BalancerName, settings: BalancerSettings): ActiveBalancer {
  const plugin = balancerPlugin(name);
  const instance = plugin.create(settings);
  return {
    name,
    readsPrompt: plugin.readsPrompt,
    pick: (candidates, input) => instance.pick(candidates, input),
    ...(instance.served ? { served: instance.served.bind(instance) } : {}),
    ...(instance.shareDispatches ? { shareDispatches: instance.shareDispatches.bind(instance) } : {}),
    ...(instance.learnDispatches ? { learnDispatches: instance.learnDispatches.bind(instance) } : {}),
  };
}

export type { BalanceInput, Balancer, BalancerCandidate, BalancerPlugin, BalancerSettings, PromptKeys } from "./balancer.ts";
