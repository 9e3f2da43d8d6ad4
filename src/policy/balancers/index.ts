/**
 * The one registration place of the balancing seam: the filters, the pickers, and
 * the built-in profiles (a balancer is a profile: ./profile.ts). `policy.balancer`
 * takes a built-in profile's name or a profile of its own, `{ filters, picker,
 * scorers }`; the names it accepts come from the lists below (src/config/deployment.ts
 * derives its enums from BALANCER_NAMES, FILTER_NAMES, PICKER_NAMES and SCORER_NAMES),
 * and benchmarks derive their arms from BALANCERS. A new rule is one plugin module
 * (or definition) plus one entry in its list.
 */
import type { BalancerSettings, FilterPlugin, PickerPlugin } from "./balancer.ts";
import { FILTERS } from "./filters.ts";
import { PICKERS } from "./pickers.ts";
import { profileTerms, readsPrompt, runProfile, type ProfileSpec } from "./profile.ts";
import type { ActiveBalancer } from "./profile.ts";

type NamesOf<T extends readonly unknown[]> = { readonly [I in keyof T]: T[I] extends { name: infer N } ? N : never };

export type FilterName = (typeof FILTERS)[number]["name"];
export type PickerName = (typeof PICKERS)[number]["name"];
/** The registered filter names, as a tuple of literals (what a zod enum takes). */
export const FILTER_NAMES = FILTERS.map((f) => f.name) as unknown as NamesOf<typeof FILTERS>;
/** The registered picker names, as a tuple of literals. */
export const PICKER_NAMES = PICKERS.map((p) => p.name) as unknown as NamesOf<typeof PICKERS>;

function byName<P extends { name: string }>(kind: string, plugins: readonly P[]): Map<string, P> {
  const map = new Map<string, P>();
  for (const p of plugins) {
    // One name, one plugin: a second registration is a bug in its list.
    if (map.has(p.name)) throw new Error(`${kind} "${p.name}" is registered twice`);
    map.set(p.name, p);
  }
  return map;
}
const filterByName = byName<FilterPlugin>("filter", FILTERS);
const pickerByName = byName<PickerPlugin>("picker", PICKERS);

/** A profile of registered plugins, as `policy.balancer` takes it. */
export type BalancerProfile = ProfileSpec<FilterName, PickerName>;

/** A built-in profile: its name and what it does, in registered names. */
interface NamedProfile<N extends string> extends BalancerProfile {
  readonly name: N;
  readonly description: string;
  /** Whether it reads the prompt (derived from its plugins). */
  readonly readsPrompt: boolean;
}

function profile<const N extends string>(name: N, description: string, spec: BalancerProfile): NamedProfile<N> {
  return { name, description, ...spec, readsPrompt: readsPrompt(spec.filters.map((f) => filterByName.get(f)!), pickerByName.get(spec.picker)!) };
}

/** Every built-in profile, the default first. */
export const BALANCERS = [
  profile("load_aware", "power of two random choices on load, replicas with room first", { filters: ["room"], picker: "two_choices" }),
  profile("round_robin", "the next replica in id order, load-blind (a baseline)", { filters: [], picker: "round_robin" }),
  profile("random", "uniformly at random, load-blind (a baseline)", { filters: [], picker: "random" }),
  profile("prefix_hash", "rendezvous on the prompt's anchor under the bounded-load line", { filters: ["load_line", "room"], picker: "rendezvous" }),
  profile("prefix_cache", "the prompt's home by demand placement, else the lowest cost of prefill still to do and slots in use, under the bounded-load line", {
    filters: ["load_line", "room", "home"],
    picker: "cheapest",
  }),
  profile("latency", "the lowest predicted time to first token (trip + queue + uncached prefill, ms), among those predicted to meet the request's SLO when any is", {
    filters: ["slo"],
    picker: "cheapest",
    // Slots at 1 (a millisecond per full replica) only break near-ties: without it, replicas alike in every part would all go to the first.
    scorers: { latency: 1, slots: 1 },
  }),
] as const;

export type BalancerName = (typeof BALANCERS)[number]["name"];
/** The built-in profiles' names, as a tuple of literals. */
export const BALANCER_NAMES = BALANCERS.map((b) => b.name) as unknown as NamesOf<typeof BALANCERS>;
const builtIn = byName<NamedProfile<BalancerName>>("profile", BALANCERS);

/** The built-in profile registered under `name`. */
export function balancerProfile(name: BalancerName): NamedProfile<BalancerName> {
  return builtIn.get(name)!;
}

/** A new instance of a built-in profile by name, or of a profile of the deployment's own. */
export function createBalancer(balancer: BalancerName | BalancerProfile, settings: BalancerSettings): ActiveBalancer {
  const spec = typeof balancer === "string" ? balancerProfile(balancer) : balancer;
  const filters = spec.filters.map((f) => filterByName.get(f)!);
  const picker = pickerByName.get(spec.picker)!;
  return runProfile(typeof balancer === "string" ? balancer : "custom", filters, picker, picker.scores ? profileTerms(spec.scorers, settings) : [], settings);
}

export { FILTERS, PICKERS };
export type { ActiveBalancer, ProfileSpec } from "./profile.ts";
export { profileTerms, runProfile } from "./profile.ts";
export type { BalanceInput, PrefixBelief, RequestSlo, Balancer, BalancerCandidate, BalancerSettings, Filter, FilterPlugin, Picker, PickerPlugin, PromptKeys, StageContext } from "./balancer.ts";
