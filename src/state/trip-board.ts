/**
 * A relay's board of the round trips its location's isolates measured to each replica
 * (issue 57, src/policy/latency-model.ts): each isolate posts the trips that changed
 * with its view ask, and the answer carries the newest trip per replica that the other
 * isolates posted since its cursor. A new isolate of the location then starts with its
 * peers' trips, where it would otherwise guess from geography or try each replica once.
 * Trips are a location's own (the relay is per location), which is what makes them
 * worth sharing. No extra Durable Object call: they ride on the view asks.
 *
 * Bounded: one entry per replica (a newer post replaces it), at most TRIP_BOARD_MAX
 * entries (the oldest go), each dropped TRIP_BOARD_TTL_MS after it was posted. Pure:
 * time is passed in.
 */
import { MAX_TRIP_NOTES } from "../protocol/limits.ts";
import type { TripNote } from "../protocol/messages.ts";

/** How long a posted trip stays: isolates re-post theirs at least every TRIP_RESHARE_MS (src/policy/latency-model.ts). */
export const TRIP_BOARD_TTL_MS = 60_000;
/** Most replicas a board holds trips for. */
export const TRIP_BOARD_MAX = 4_096;

interface Entry {
  ms: number;
  at: number;
  seq: number;
  /** The posting isolate (its seed): it is not sent its own trips back. */
  from: number;
}

export class TripBoard {
  /** Replica → its newest trip; a Map keeps insertion order, and a re-post moves the entry to the end. */
  readonly #entries = new Map<string, Entry>();
  #seq = 0;

  /** Isolate `from` posts `trips` at `now`. */
  post(from: number, trips: readonly TripNote[], now: number): void {
    for (const t of trips) {
      this.#entries.delete(t.r);
      this.#entries.set(t.r, { ms: t.ms, at: now, seq: ++this.#seq, from });
    }
    this.#trim(now);
  }

  /**
   * The trips other isolates than `from` posted after cursor `after`, at most `max` (the
   * newest), and the cursor to send next. A cursor from before a restart of this board
   * (beyond its sequence) reads from the start.
   */
  since(after: number, from: number, now: number, max = MAX_TRIP_NOTES): { trips: TripNote[]; cursor: number } {
    this.#trim(now);
    const start = after > this.#seq ? 0 : after;
    const trips: TripNote[] = [];
    // The map holds entries oldest first (a re-post moves its entry to the end): the last `max` are the newest.
    for (const [r, e] of this.#entries) if (e.seq > start && e.from !== from) trips.push({ r, ms: e.ms });
    return { trips: trips.length > max ? trips.slice(trips.length - max) : trips, cursor: this.#seq };
  }

  get size(): number {
    return this.#entries.size;
  }

  #trim(now: number): void {
    for (const [r, e] of this.#entries) {
      if (e.at + TRIP_BOARD_TTL_MS > now && this.#entries.size <= TRIP_BOARD_MAX) break;
      this.#entries.delete(r);
    }
  }
}
