/**
 * Admission across locations (docs/admission.md, "Across locations"). Each location's
 * relay shares the deployment's slots among its own isolates (admission-shares.ts);
 * alone, every busy location would share all of them. So each relay tells the
 * deployment's leader shard its location's demand with the snapshot ask it makes
 * anyway (once per refresh, RELAY_TTL_MS), and the leader answers with the other
 * locations' sum, which the relay counts as one more isolate's demand. The leader
 * keeps only the latest post per location. Pure; time passed in.
 *
 * Cost at the leader: a post replaces the location's entry in running totals
 * (O(its flows)); an answer ranks the totals' flows at most once per RANK_EVERY_MS and
 * takes the asker's own out of the top of that ranking (O(MAX_DEMAND_FLOWS)), so it
 * does not grow with the number of locations.
 */
// @ts-nocheck

import { MAX_DEMAND_FLOWS } from "../protocol/limits.ts";
import type { LocationDemand } from "../protocol/messages.ts";

/** A location's post older than this no longer counts (its relay stopped refreshing: idle, or gone). Relays under pressure refresh every second. */
export const LOCATION_DEMAND_TTL_MS = 3_000;
/** The leader ranks the flows of all locations at most this often. */
const RANK_EVERY_MS = 250;
/** The rest of a band's flows, summed under this key in the leader's answer (a flow key no hash is expected to give). */
export const REST_OF_FLOWS = "0000000000000000";

interface Post {
  demand: LocationDemand;
  at: number;
}

export class LocationDemandBoard {
  readonly #posts = new Map<string, Post>();
  /** Sums over the posts: per band, and per `${priority} ${flow}`. */
  readonly #bands = new Map<number, number>();
  readonly #flows = new Map<string, number>();
  #ranked: { at: number; top: [priority: number, flow: string][] } | undefined;

  /** Records a location's demand, replacing its previous post; an empty one removes it. */
  post(location: string, demand: LocationDemand, now: number): void {
    this.#remove(location);
    if (demand.bands.every(([, n]) => n === 0)) return;
    this.#posts.set(location, { demand, at: now });
    this.#count(demand, 1);
  }

  /** Locations with a fresh post. */
  size(now: number): number {
    this.#prune(now);
    return this.#posts.size;
  }

  /**
   * The demand of every location but `location`: per band, and per flow the largest
   * flows, the rest of each band summed under REST_OF_FLOWS (so each band's flows
   * still sum to its demand). Empty when no other location has demand.
   */
  others(location: string, now: number): LocationDemand {
    this.#prune(now);
    const own = this.#posts.get(location)?.demand;
    const ownBand = new Map(own?.bands ?? []);
    const ownFlow = new Map((own?.flows ?? []).map(([p, f, n]) => [`${p} ${f}`, n]));
    const bands: [number, number][] = [];
    for (const [p, n] of this.#bands) {
      const left = n - (ownBand.get(p) ?? 0);
      if (left > 0) bands.push([p, left]);
    }
    if (bands.length === 0) return { bands, flows: [] };
    if (!this.#ranked || now - this.#ranked.at >= RANK_EVERY_MS) this.#rank(now);
    const flows: [number, string, number][] = [];
    const named = new Map<number, number>();
    for (const [p, f] of this.#ranked!.top) {
      if (flows.length === MAX_DEMAND_FLOWS) break;
      const k = `${p} ${f}`;
      const n = (this.#flows.get(k) ?? 0) - (ownFlow.get(k) ?? 0);
      if (n <= 0) continue;
      flows.push([p, f, n]);
      named.set(p, (named.get(p) ?? 0) + n);
    }
    for (const [p, n] of bands) {
      const rest = n - (named.get(p) ?? 0);
      if (rest > 0) flows.push([p, REST_OF_FLOWS, rest]);
    }
    return { bands, flows };
  }

  /** The flows by total demand, largest first: enough of them that the asker's own, taken out, leave MAX_DEMAND_FLOWS. */
  #rank(now: number): void {
    const all = [...this.#flows].sort((a, b) => b[1] - a[1]).slice(0, 2 * MAX_DEMAND_FLOWS);
    const top = all.map(([k]): [number, string] => {
      const space = k.indexOf(" ");
      return [Number(k.slice(0, space)), k.slice(space + 1)];
    });
    this.#ranked = { at: now, top };
  }

  #count(d: LocationDemand, sign: 1 | -1): void {
    for (const [p, n] of d.bands) bump(this.#bands, p, sign * n);
    for (const [p, f, n] of d.flows) if (f !== REST_OF_FLOWS) bump(this.#flows, `${p} ${f}`, sign * n);
  }

  #remove(location: string): void {
    const old = this.#posts.get(location);
    if (!old) return;
    this.#posts.delete(location);
    this.#count(old.demand, -1);
  }

  #prune(now: number): void {
    for (const [location, p] of this.#posts) if (now - p.at > LOCATION_DEMAND_TTL_MS) this.#remove(location);
  }
}

function bump<K>(m: Map<K, number>, k: K, by: number): void {
  const n = (m.get(k) ?? 0) + by;
  if (n > 0) m.set(k, n);
  else m.delete(k);
}
