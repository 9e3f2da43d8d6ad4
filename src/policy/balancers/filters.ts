/**
 * The registered filters: rules that narrow a profile's pool before its picker
 * chooses. A filter prefers, never empties (a pool it would empty passes whole),
 * because the view lags and a replica's own admission check is authoritative.
 * A new filter is one definition here (or its own module) and one entry in FILTERS;
 * `policy.balancer.filters` accepts exactly these names.
 */
import { hasRoom } from "../pick-replica.ts";
import { loadLineLimit, underLoadBound } from "../prefix-score.ts";
import { defineFilter } from "./balancer.ts";

/** `room`: the replicas this view believes have a free slot (and KV room), when any has. */
export const room = defineFilter({
  name: "room",
  description: "replicas with a free slot and KV room, when any has one",
  readsPrompt: false,
  create: () => (pool) => {
    const withRoom = pool.filter(hasRoom);
    return withRoom.length > 0 ? withRoom : [...pool];
  },
});

/** `load_line`: the replicas under the bounded-load line, (1 + prefix.loadFactor) × the mean fullness (src/policy/prefix-score.ts). */
export const loadLine = defineFilter({
  name: "load_line",
  description: "replicas under the bounded-load line, (1 + prefix.loadFactor) × the mean fullness",
  readsPrompt: false,
  create: ({ loadFactor }) => (pool) => underLoadBound(pool, loadFactor),
  limit: ({ loadFactor }) => (pool, chosen) => loadLineLimit(pool, chosen, loadFactor),
});

/**
 * `home`: the prompt's home by the demand placement (src/policy/demand-placement.ts), when
 * it passed the filters before this one; otherwise the pool as it is. After `load_line`
 * and `room`, a home over the line or full in this view is passed by for this request,
 * and the replica's own check (the load limit) passes it by where the view lags.
 */
export const home = defineFilter({
  name: "home",
  description: "the prompt's home by demand placement (bounded loads over each prefix's demand), when it passed the filters before",
  readsPrompt: true,
  readsHome: true,
  create: () => (pool, { home }) => {
    const at = home === undefined ? undefined : pool.find((c) => c.id === home);
    return at ? [at] : [...pool];
  },
});

export const FILTERS = [room, loadLine, home] as const;
