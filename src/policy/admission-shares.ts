/**
 * Admission across isolates, with no central queue (docs/admission.md, issue 32 §3).
 * Each isolate tells its location's relay, with the view ask it makes anyway, its
 * demand for a deployment by priority band: requests it has in flight plus those it
 * holds. The relay answers each isolate with its budget: how many requests it may
 * have in flight. Capacity (the replicas' slots) goes to the bands from the highest
 * down, and within a band max-min over the flows' demands summed across the isolates,
 * with a cap for each isolate's part of a flow that asks more than its share (or,
 * where an isolate sent no flows, to the isolates in proportion to their demand). An
 * isolate holds a capped flow's requests, or over its budget all of them, even when
 * its view shows a free slot: the slot goes to a flow under its share, a critical one
 * first. Pure; time passed in. The work per ask grows with the
 * location's isolates × flows (arithmetic on at most 64 flows per isolate).
 */
import { MAX_DEMAND_FLOWS } from "../protocol/limits.ts";
import type { LocationDemand } from "../protocol/messages.ts";

/** An isolate's demand: [priority, requests in flight + held], one entry per band it has. */
export type BandDemand = readonly (readonly [priority: number, requests: number])[];

/** A post older than this no longer counts (the isolate stopped asking: idle, or gone). */
export const SHARE_POST_TTL_MS = 1_000;

/**
 * Headroom: a band keeps, out of the capacity left for the bands below it, its peak
 * demand over the last 2.5–5 s (two windows of this length), not just its demand now.
 * An interactive band's requests come and go; without headroom the band below fills
 * every slot it leaves between them and its next request waits for a completion.
 */
export const HEADROOM_WINDOW_MS = 2_500;

/** An isolate's demand per flow: [priority, flow key, requests in flight + held]. */
export type FlowDemand = readonly (readonly [priority: number, flow: string, requests: number])[];

/** A budget, and the caps of the asker's flows that the location's other flows hold back. */
export interface Allotment {
  /** Requests this isolate may have in flight. */
  max: number;
  /**
   * Present when a band of the asker's was split by flow: per flow that asks more than
   * its max-min share across the location, this isolate's part of that share (requests
   * in flight on average, a fraction: the parts sum to the share; the gate keeps the
   * flow to it over time, AdmissionGate). A flow not named asks no more than its share:
   * it is not held back.
   */
  flowCaps?: Record<string, number>;
  /**
   * Requests at this priority or above are not held to the budget: the bands above
   * the highest one held back got all they ask (or ask nothing yet), so they go
   * whenever a slot is free (the headroom the lower bands leave them).
   */
  openFrom: number;
}

/**
 * A sender's own key for the demand of its flows beyond the ones it names (an isolate's
 * to its relay, a relay's to the leader): 16 random hex digits, so no two senders' rests
 * are summed as one flow.
 */
export function randomFlowKey(): string {
  return [...crypto.getRandomValues(new Uint32Array(2))].map((n) => n.toString(16).padStart(8, "0")).join("");
}

/** The other locations' demand (location-demand.ts) counts this long after the leader's answer brought it: a relay refreshes every second while its isolates ask. */
export const ELSEWHERE_TTL_MS = 2_500;

export class AdmissionShares {
  readonly #posts = new Map<number, { demand: BandDemand; flows?: FlowDemand; at: number }>();
  /** The other locations' demand, counted as one more isolate's (never the asker). */
  #elsewhere: { demand: BandDemand; flows: FlowDemand; at: number } | undefined;
  /** The key this location's flows beyond MAX_DEMAND_FLOWS are summed under when it tells the leader (its own). */
  readonly #restKey: string;
  /** Each band's location-wide demand at its peak, this window and the last (HEADROOM_WINDOW_MS). */
  readonly #peaks = new Map<number, { window: number; now: number; last: number }>();
  /** The same per flow in a band split by flow (`${priority} ${flow}`): what the water level is set from. */
  readonly #flowPeaks = new Map<string, { window: number; now: number; last: number }>();

  /** `restKey`: this location's own key for the rest of its flows (randomFlowKey); a fixed one in tests. */
  constructor(restKey = "ffffffffffffffff") {
    this.#restKey = restKey;
  }

  /** Records an isolate's demand (replacing its previous one); `flows`, where it sends them, splits each band by flow. */
  post(isolate: number, demand: BandDemand, now: number, flows?: FlowDemand): void {
    if (demand.length === 0) this.#posts.delete(isolate);
    else this.#posts.set(isolate, { demand, at: now, ...(flows !== undefined ? { flows } : {}) });
  }

  /**
   * The other locations' demand, from the leader's answer to this relay's last post: it
   * joins every allotment (a deployment's slots are shared across locations, not given
   * whole to each), until ELSEWHERE_TTL_MS passes without a fresh one.
   */
  elsewhere(demand: LocationDemand, now: number): void {
    this.#elsewhere = demand.bands.length === 0 ? undefined : { demand: demand.bands, flows: demand.flows, at: now };
  }

  /**
   * This location's demand, for the leader: the isolates' fresh posts summed per band
   * and per flow, the largest MAX_DEMAND_FLOWS − 1 flows named and the rest summed
   * under this location's own key (a band whose isolate sent no flows counts there too).
   */
  locationDemand(now: number): LocationDemand {
    this.#prune(now);
    const bands = new Map<number, number>();
    const flows = new Map<string, [number, string, number]>();
    for (const { demand, flows: f } of this.#posts.values()) {
      for (const [p, n] of demand) bands.set(p, (bands.get(p) ?? 0) + n);
      for (const [p, flow, n] of f ?? []) {
        const k = `${p} ${flow}`;
        const had = flows.get(k);
        if (had) had[2] += n;
        else flows.set(k, [p, flow, n]);
      }
    }
    const ranked = [...flows.values()].sort((a, b) => b[2] - a[2]);
    const named = ranked.slice(0, MAX_DEMAND_FLOWS - 1);
    const inNamed = new Map<number, number>();
    for (const [p, , n] of named) inNamed.set(p, (inNamed.get(p) ?? 0) + n);
    const out: [number, string, number][] = [...named];
    // Whatever the named flows leave of a band (flows beyond the cut, isolates that sent none) goes under one key per band.
    for (const [p, n] of bands) if (n > (inNamed.get(p) ?? 0)) out.push([p, this.#restKey, n - (inNamed.get(p) ?? 0)]);
    return { bands: [...bands].filter(([, n]) => n > 0), flows: out };
  }

  /** Isolates with a fresh post (dropping the stale ones). */
  active(now: number): number {
    this.#prune(now);
    return this.#posts.size;
  }

  /**
   * The isolate's budget of requests in flight, or undefined when the location's
   * demand fits in `capacity` (nobody needs holding back). An isolate with demand only
   * in bands that higher ones fill gets 0; one with any share gets at least 1, so a
   * request is never starved by rounding.
   */
  budget(isolate: number, capacity: number, now: number): number | undefined {
    return this.allot(isolate, capacity, now)?.max;
  }

  /**
   * The budget, and caps per flow. Capacity goes to the bands from the highest down.
   * Within a band where every isolate sent its flows, the band's capacity is split
   * max-min fairly over the flows' demands summed across the isolates (water-filling),
   * so a flow of many clients cannot take the slots of a flow of few, wherever their
   * requests land; an isolate's budget is its flows' parts of their shares. Where some
   * isolate sent no flows, the band is split in proportion to each isolate's demand.
   */
  allot(isolate: number, capacity: number, now: number): Allotment | undefined {
    this.#prune(now);
    const totals = new Map<number, number>();
    for (const { demand } of this.#counted()) {
      for (const [priority, n] of demand) totals.set(priority, (totals.get(priority) ?? 0) + n);
    }
    const peaks = notePeaks(this.#peaks, totals, now);
    const mine = this.#posts.get(isolate);
    let left = Math.max(0, capacity);
    let share = 0;
    const caps: Record<string, number> = {};
    /** A band was split by flow: the asker keeps to caps per flow, not to its budget. */
    let flowAware = false;
    /** The highest band that got less than it asks, if any: budgets apply, and bands above it are open. */
    let short: number | undefined;
    // Bands with recent demand but none now keep their headroom too.
    for (const priority of [...new Set([...totals.keys(), ...peaks.keys()])].sort((a, b) => b - a)) {
      const wanted = totals.get(priority) ?? 0;
      const given = Math.min(wanted, left);
      left -= Math.min(left, Math.max(given, peaks.get(priority) ?? 0));
      if (given < wanted) short ??= priority;
      const own = mine?.demand.find(([p]) => p === priority)?.[1] ?? 0;
      const flows = given < wanted ? this.#flowTotals(priority) : undefined;
      if (!flows) {
        if (own > 0) share += (given * own) / wanted;
        continue;
      }
      // The level comes from each flow's recent peak, not its demand now: the isolates'
      // posts are up to 250 ms apart, so a closed-loop client between two requests (one
      // ended in one isolate, the next not yet posted by another) makes its flow look
      // smaller, and the level, with the capped flows' caps, jump for that moment.
      const peak = notePeaks(this.#flowPeaks, new Map([...flows].map(([f, n]) => [`${priority} ${f}`, n])), now, `${priority} `);
      // Max-min between clients first (a flow key's first digits are its client's), then between a client's flows.
      const scope = `${priority} `.length;
      const levels = flowLevels(peak, given, (k) => k.slice(scope, scope + FLOW_KEY_CLIENT_DIGITS));
      const ownFlows = new Map<string, number>();
      for (const [p, flow, n] of mine?.flows ?? []) if (p === priority) ownFlows.set(flow, n);
      flowAware = true;
      for (const [flow, t] of flows) {
        const n = ownFlows.get(flow) ?? 0;
        const level = levels.get(`${priority} ${flow}`)!;
        // Within a request of the level, a flow is not capped: the same lag counts a
        // client's next request in two posts at times, one request more than it has.
        if (t === 0 || peak.get(`${priority} ${flow}`)! <= level + 1) {
          share += n;
          continue;
        }
        // Where it has no request, a flow is capped (at 0) only when it asks more than
        // its share now, not just at its peak: a flow near its share, counted twice for a
        // moment, would otherwise have its next request wait for the next post.
        if (n === 0 && t <= level + 1) continue;
        // Fractional: four isolates with half a request each run one request half the
        // time each. Whole caps rounded across the isolates moved the extra request
        // between them as their demand changed, and each move ran both for a while
        // (the flow ran at 1–2× its share: Jain 0.81 in bench/admission/admission.ts).
        // A flow over its share is capped here even where it has no request now (0):
        // uncapped, its next request here would go at once, be served before the next
        // post showed it, and so never be capped here (measured: one isolate of four
        // served the big flow freely, 35 % of the slots against a fair 25 %).
        const cap = Math.round((level / t) * n * 1000) / 1000;
        share += cap;
        caps[flow] = cap;
      }
    }
    if (short === undefined) return undefined;
    const max = share > 0 ? Math.max(1, Math.round(share)) : 0;
    // Priorities are integers: every band above the highest short one got all it asks,
    // or has no demand yet; either way its next request takes a slot the budget leaves free.
    return { max, ...(flowAware ? { flowCaps: caps } : {}), openFrom: short + 1 };
  }

  /** Each flow's demand in the band summed over the isolates, or undefined when some isolate with demand there sent no flows. */
  #flowTotals(priority: number): Map<string, number> | undefined {
    const out = new Map<string, number>();
    for (const { demand, flows } of this.#counted()) {
      if (!demand.some(([p, n]) => p === priority && n > 0)) continue;
      if (!flows) return undefined;
      for (const [p, flow, n] of flows) if (p === priority) out.set(flow, (out.get(flow) ?? 0) + n);
    }
    return out;
  }

  /** The posts that share the slots: this location's isolates', and the other locations' as one more. */
  *#counted(): Iterable<{ demand: BandDemand; flows?: FlowDemand }> {
    yield* this.#posts.values();
    if (this.#elsewhere) yield this.#elsewhere;
  }

  #prune(now: number): void {
    for (const [isolate, p] of this.#posts) if (now - p.at > SHARE_POST_TTL_MS) this.#posts.delete(isolate);
    if (this.#elsewhere && now - this.#elsewhere.at > ELSEWHERE_TTL_MS) this.#elsewhere = undefined;
  }
}

/**
 * Records each key's demand now into its peak and returns the keys' peaks over the last
 * one to two windows (HEADROOM_WINDOW_MS). Every key is aged, and a key whose peak fell
 * to 0 is forgotten; only keys starting with `scope` are returned (one map holds every
 * band's flows).
 */
function notePeaks<K extends number | string>(peaks: Map<K, { window: number; now: number; last: number }>, demand: Map<K, number>, now: number, scope?: string): Map<K, number> {
  const window = Math.floor(now / HEADROOM_WINDOW_MS);
  const out = new Map<K, number>();
  for (const k of demand.keys()) if (!peaks.has(k)) peaks.set(k, { window, now: 0, last: 0 });
  for (const [k, p] of peaks) {
    if (p.window !== window) {
      p.last = p.window === window - 1 ? p.now : 0;
      p.now = 0;
      p.window = window;
    }
    p.now = Math.max(p.now, demand.get(k) ?? 0);
    const peak = Math.max(p.now, p.last);
    // Every key ages, in scope or not: a band no longer split by flow leaves its flows' entries behind.
    if (peak === 0) peaks.delete(k);
    else if (scope === undefined || String(k).startsWith(scope)) out.set(k, peak);
  }
  return out;
}

/** The digits of a flow key that name its client (admit.ts flowKey): the relay groups flows by them. */
export const FLOW_KEY_CLIENT_DIGITS = 8;

/**
 * Each key's water level in a two-level max-min split of `capacity`: first between the
 * groups (`groupOf`: a flow's client), by their summed demands, then each group's part
 * between its keys. A key gets min(its demand, its level). With one key per group this
 * is waterLevel's one level; a group of many keys shares one group's part, so a client
 * that names many flows does not take many shares.
 */
export function flowLevels<K>(demands: ReadonlyMap<K, number>, capacity: number, groupOf: (key: K) => string): Map<K, number> {
  const groups = new Map<string, { total: number; keys: K[] }>();
  for (const [k, n] of demands) {
    const g = groupOf(k);
    const e = groups.get(g);
    if (e) {
      e.total += n;
      e.keys.push(k);
    } else groups.set(g, { total: n, keys: [k] });
  }
  const top = waterLevel([...groups.values()].map((g) => g.total), capacity);
  const out = new Map<K, number>();
  for (const { total, keys } of groups.values()) {
    const level = keys.length === 1 ? top : waterLevel(keys.map((k) => demands.get(k)!), Math.min(total, top));
    for (const k of keys) out.set(k, level);
  }
  return out;
}

/**
 * The level L at which the demands, each capped at L, sum to `capacity` (Infinity when
 * they fit): demands at or under L get what they ask, the rest get L each.
 */
export function waterLevel(demands: readonly number[], capacity: number): number {
  const sorted = [...demands].sort((a, b) => a - b);
  let left = capacity;
  for (let i = 0; i < sorted.length; i++) {
    const even = left / (sorted.length - i);
    if (sorted[i]! > even) return even;
    left -= sorted[i]!;
  }
  return Infinity;
}
