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

/** A replica predicted within this share of a request's TTFT objective meets it with room to spare. */
export const SLO_SPARE = 0.5;

/**
 * `slo`: the replicas predicted to meet the request's time-to-first-token objective
 * (BalanceInput.slo; src/policy/latency-model.ts), when any is; with none predicted to
 * meet it, or no objective, the pool as it is (the picker then takes the best
 * prediction; a deployment that asks refuses early instead, src/proxy/serve/choose.ts).
 *
 * Where two or more meet it with room to spare (within SLO_SPARE of it), those with the
 * slowest prefill (the lowest reported rate, within a tenth) are kept: a request whose
 * objective slower hardware meets leaves the fastest to requests that need it. Greedy
 * fastest-first sent loose objectives to the fast replicas too, and tight ones then
 * queued behind them (bench/regions/regions.ts, SLO scenario). A slow replica that fills
 * up predicts past the spare line and drops out of it, so the loose requests return.
 */
export const slo = defineFilter({
  name: "slo",
  description: "replicas predicted to meet the request's TTFT objective, when any is; with room to spare, the slowest prefill among them",
  readsPrompt: false,
  create: () => (pool, ctx) => {
    const target = ctx.input.slo?.ttftMs;
    if (target === undefined) return [...pool];
    const meeting = pool.filter((c) => ctx.ttft(c).total <= target);
    if (meeting.length === 0) return [...pool];
    const roomy = meeting.filter((c) => ctx.ttft(c).total <= SLO_SPARE * target);
    if (roomy.length < 2) return meeting;
    let slowest = Infinity;
    for (const c of roomy) slowest = Math.min(slowest, c.reported?.prefillRate ?? Infinity);
    return slowest === Infinity ? roomy : roomy.filter((c) => (c.reported?.prefillRate ?? Infinity) <= 1.1 * slowest);
  },
});

export const FILTERS = [room, loadLine, home, slo] as const;
