/**
 * Admission across isolates, with no central queue (docs/admission.md, issue 32 §3).
 * Each isolate tells its location's relay, with the view ask it makes anyway, its
 * demand for a deployment by priority band: requests it has in flight plus those it
 * holds. The relay answers each isolate with its budget: how many requests it may
 * have in flight. Capacity (the replicas' slots) goes to the bands from the highest
 * down, and within a band to the isolates in proportion to their demand in it. An
 * isolate over its budget holds its requests even when its view shows a free slot,
 * and its own completions no longer refill its slots: the slot goes to an isolate
 * under its budget, the one with a critical request first. Pure; time passed in.
 */

/** An isolate's demand: [priority, requests in flight + held], one entry per band it has. */
export type BandDemand = readonly (readonly [priority: number, requests: number])[];

/** A post older than this no longer counts (the isolate stopped asking: idle, or gone). */
export const SHARE_POST_TTL_MS = 1_000;

export class AdmissionShares {
  readonly #posts = new Map<number, { demand: BandDemand; at: number }>();

  /** Records an isolate's demand (replacing its previous one). */
  post(isolate: number, demand: BandDemand, now: number): void {
    if (demand.length === 0) this.#posts.delete(isolate);
    else this.#posts.set(isolate, { demand, at: now });
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
    this.#prune(now);
    const totals = new Map<number, number>();
    let total = 0;
    for (const { demand } of this.#posts.values()) {
      for (const [priority, n] of demand) {
        totals.set(priority, (totals.get(priority) ?? 0) + n);
        total += n;
      }
    }
    if (total <= capacity) return undefined;
    const mine = this.#posts.get(isolate)?.demand;
    if (!mine) return undefined;
    let left = Math.max(0, capacity);
    let share = 0;
    for (const priority of [...totals.keys()].sort((a, b) => b - a)) {
      const wanted = totals.get(priority)!;
      const given = Math.min(wanted, left);
      left -= given;
      const own = mine.find(([p]) => p === priority)?.[1] ?? 0;
      share += (given * own) / wanted;
    }
    return share > 0 ? Math.max(1, Math.round(share)) : 0;
  }

  #prune(now: number): void {
    for (const [isolate, p] of this.#posts) if (now - p.at > SHARE_POST_TTL_MS) this.#posts.delete(isolate);
  }
}
