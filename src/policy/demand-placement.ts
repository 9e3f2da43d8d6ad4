/**
 * Homes for prompts' prefixes that every isolate of a location agrees on without
 * believing anything about the replicas' caches (issue 54). Past saturation a
 * replica's cache turns over faster than any report reaches the edge, so a choice
 * that follows where a prefix was believed to be follows copies that are gone
 * (docs/prefix-routing.md, "What the edge believes, measured"); and rendezvous
 * homes alone (`prefix_hash`) pile several heavy prefixes on one replica by chance,
 * which overruns it and its cache. Either way the fleet falls into the state where
 * misses make load and load makes misses.
 *
 * A placement is consistent hashing with bounded loads over demand rather than
 * over requests in flight: each anchor (src/policy/prefix-score.ts anchorKey) in a
 * fixed order (by key) goes to the first replica in its rendezvous order whose share
 * of the placed demand stays under (1 + PLACEMENT_SLACK) × its capacity's share of
 * the total, else to the least filled. Demand is each anchor's prompts' weight (kept
 * keys, about one per 16 blocks: what a miss would prefill and the cache would hold),
 * decayed with a half-life of PLACEMENT_HALF_LIFE_MS, from this isolate's dispatches
 * and its peers' (the relay's dispatch notes carry the anchor as their first key).
 * Isolates that saw about the same demand place the same anchors on the same
 * replicas; demand moves slowly, so homes do too, and a home moves only when its
 * replica's share passes the line.
 *
 * Pure: time comes in as arguments. Bounded: at most PLACEMENT_MAX_ANCHORS anchors
 * (a new one evicts the lightest, so a flood of one-off prompts cannot push out a
 * heavy prefix), placed at most once every PLACEMENT_EVERY_MS.
 */
import { rendezvousOrder } from "./prefix-score.ts";

/** Half-life of an anchor's demand: long against a replica's cache turnover, so homes hold while traffic jitters. */
export const PLACEMENT_HALF_LIFE_MS = 30_000;
/** Anchors whose demand is kept (each a key and two numbers). */
export const PLACEMENT_MAX_ANCHORS = 256;
/** Homes are recomputed at most this often (and when the fleet changes). */
export const PLACEMENT_EVERY_MS = 1_000;
/** A replica takes anchors while its share of the demand is under (1 + this) × its capacity's share. */
export const PLACEMENT_SLACK = 0.2;
/** Prompts (decayed) from which an anchor gets a home: a prefix used again, not one prompt. */
export const PLACEMENT_MIN_PROMPTS = 3;

/** A replica as the placement weighs it. */
export interface PlacedReplica {
  readonly id: string;
  /** Its request slots (max_ongoing_requests): its share of the demand. */
  readonly capacity: number;
}

interface Demand {
  weight: number;
  prompts: number;
  at: number;
}

const decay = (d: Demand, now: number): number => 2 ** (-Math.max(0, now - d.at) / PLACEMENT_HALF_LIFE_MS);
const decayed = (d: Demand, now: number): number => d.weight * decay(d, now);

export class DemandPlacement {
  readonly #demand = new Map<string, Demand>();
  #homes = new Map<string, string>();
  #placedAt = -Infinity;
  /** The fleet the homes were placed on: each replica's capacity by id. */
  #fleet = new Map<string, number>();
  readonly #maxAnchors: number;

  constructor(maxAnchors = PLACEMENT_MAX_ANCHORS) {
    this.#maxAnchors = maxAnchors;
  }

  /** A prompt whose anchor is `anchor` and whose weight (kept keys) is `weight` was sent, here or by a peer. */
  record(anchor: string, weight: number, now: number): void {
    if (!(weight > 0)) return;
    const d = this.#demand.get(anchor);
    if (d) {
      const k = decay(d, now);
      d.weight = d.weight * k + weight;
      d.prompts = d.prompts * k + 1;
      d.at = Math.max(d.at, now);
      return;
    }
    if (this.#demand.size >= this.#maxAnchors) {
      let lightest: string | undefined;
      let least = Infinity;
      for (const [a, e] of this.#demand) {
        const w = decayed(e, now);
        if (w < least) {
          least = w;
          lightest = a;
        }
      }
      this.#demand.delete(lightest!);
    }
    this.#demand.set(anchor, { weight, prompts: 1, at: now });
  }

  /** `anchor`'s demand now. */
  demandOf(anchor: string, now: number): number {
    const d = this.#demand.get(anchor);
    return d ? decayed(d, now) : 0;
  }

  /** Anchors with demand kept. */
  get size(): number {
    return this.#demand.size;
  }

  /** The replica of `fleet` that is `anchor`'s home, or undefined when its demand is too small to place. */
  homeOf(anchor: string, fleet: readonly PlacedReplica[], now: number): string | undefined {
    if (fleet.length === 0) return undefined;
    if (now - this.#placedAt >= PLACEMENT_EVERY_MS || this.#changed(fleet)) this.#place(fleet, now);
    return this.#homes.get(anchor);
  }

  /** Whether `fleet` is not the one the homes were placed on (one lookup per replica: this runs on every choice). */
  #changed(fleet: readonly PlacedReplica[]): boolean {
    if (fleet.length !== this.#fleet.size) return true;
    for (const r of fleet) if (this.#fleet.get(r.id) !== r.capacity) return true;
    return false;
  }

  #place(fleet: readonly PlacedReplica[], now: number): void {
    this.#fleet = new Map(fleet.map((r) => [r.id, r.capacity]));
    this.#placedAt = now;
    const placed: [string, number][] = [];
    let total = 0;
    for (const [anchor, d] of this.#demand) {
      const k = decay(d, now);
      if (d.prompts * k < PLACEMENT_MIN_PROMPTS) continue;
      const w = d.weight * k;
      placed.push([anchor, w]);
      total += w;
    }
    // A fixed order (not by demand): jitter in two anchors' demand does not reorder them.
    placed.sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
    let capacity = 0;
    for (const r of fleet) capacity += Math.max(1, r.capacity);
    const filled = new Map<string, number>();
    const homes = new Map<string, string>();
    for (const [anchor, w] of placed) {
      const order = rendezvousOrder(fleet, anchor);
      const fits = (r: PlacedReplica) => (filled.get(r.id) ?? 0) + w <= ((1 + PLACEMENT_SLACK) * total * Math.max(1, r.capacity)) / capacity;
      let home = order.find(fits);
      if (home === undefined) {
        // Nowhere under the line: the least filled for its capacity (ties in rendezvous order).
        let least = Infinity;
        for (const r of order) {
          const f = ((filled.get(r.id) ?? 0) + w) / Math.max(1, r.capacity);
          if (f < least) {
            least = f;
            home = r;
          }
        }
      }
      filled.set(home!.id, (filled.get(home!.id) ?? 0) + w);
      homes.set(anchor, home!.id);
    }
    this.#homes = homes;
  }
}
