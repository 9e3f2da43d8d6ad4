/**
 * The edge's predicted time to first token on one replica, in milliseconds (issue 57):
 *
 *   trip + queueing + uncached prefill
 *
 * - **trip**: the network round trip from this isolate to the replica. Learnt from the
 *   isolate's own dispatches: the time it waited for an answer's head, less the time the
 *   replica says it took (Header.replicaTime), median of the last TRIP_SAMPLES. Before
 *   any sample, estimated from geography when both ends know where they are
 *   (geographyTripMs), else 0: a replica not measured yet looks near, so it is tried,
 *   and its first answer measures it (a prior no better than the others' would leave a
 *   near replica untried behind a far one measured first).
 * - **queueing**: the wait the replica last reported for a new prefill (Load.prefillWaitMs),
 *   less the time since it said so (the queue ahead drains meanwhile; Llumnix projects a
 *   stale status forward the same way), with this isolate's own dispatches since then
 *   booked behind it at their predicted prefill (ReplicaTimings.book), plus, when every
 *   slot is taken, a share of one dispatch's service time per request over capacity
 *   (slots free one service time apart across the replica's capacity).
 * - **uncached prefill**: the prompt's tokens the replica is not believed to hold, at the
 *   replica's measured prefill rate (Load.prefillRate), else the deployment's default.
 *
 * Why a sum of measured parts and not a fitted model: each part is measured where it
 * happens (the trip at the edge, the queue and the rate at the replica, which sees them
 * exactly), so mixed hardware gets its own rates with no training and no per-pool fit;
 * llm-d's learnt predictor says it does not fit mixed pools. Pure: time comes in.
 */

import type { ReplicaChoice } from "./pick-replica.ts";

/** Where something is, in degrees. */
export interface Coordinates {
  readonly lat: number;
  readonly lon: number;
}

/** Coordinates from two values as a runtime gives them (Cloudflare's cf.latitude is a string), or undefined unless both are finite and in range. */
export function coordinatesOf(lat: unknown, lon: unknown): Coordinates | undefined {
  const la = typeof lat === "string" ? (lat.trim() === "" ? NaN : Number(lat)) : lat;
  const lo = typeof lon === "string" ? (lon.trim() === "" ? NaN : Number(lon)) : lon;
  if (typeof la !== "number" || typeof lo !== "number" || !Number.isFinite(la) || !Number.isFinite(lo)) return undefined;
  return Math.abs(la) <= 90 && Math.abs(lo) <= 180 ? { lat: la, lon: lo } : undefined;
}

/** Trip samples kept per replica: the estimate is their median (robust to one slow answer, and to a busy event loop). */
export const TRIP_SAMPLES = 8;
/** Weight of each new dispatch's service time in its running mean. */
const SERVICE_WEIGHT = 0.2;
/** An isolate posts its trip to a replica again at least this often, while it has one (the relay's board drops it after a minute). */
export const TRIP_RESHARE_MS = 30_000;
/** A trip is posted again when it moved by at least this share since it was last posted (or by 1 ms, whichever is more). */
const TRIP_RESHARE_CHANGE = 0.1;
/** Most of this isolate's dispatches a replica's prefill book keeps (the newest). */
export const MAX_PREFILL_BOOKINGS = 64;

/** What one isolate learnt of one replica's timing. */
export class ReplicaTimings {
  readonly #trips: number[] = [];
  #next = 0;
  #tripMs: number | undefined;
  #peerTripMs: number | undefined;
  #serviceMs: number | undefined;
  #sharedMs: number | undefined;
  #sharedAt = -Infinity;
  /** When the replica last said how long a new prefill waits (Load.prefillWaitMs), and what it said. */
  #laneAt = -Infinity;
  #laneWaitMs = 0;
  /** This isolate's dispatches since then: when each was sent and the prefill predicted for it, ms, oldest first. */
  #bookedAt: number[] = [];
  #bookedMs: number[] = [];

  /** The trip's estimate, ms: the median of this isolate's last TRIP_SAMPLES samples, else what a peer of its location measured; undefined with neither. */
  get tripMs(): number | undefined {
    return this.#tripMs ?? this.#peerTripMs;
  }

  /** A peer isolate of this location measured `ms` (the relay's trip board): used until this isolate has a sample of its own. */
  learnPeer(ms: number): void {
    if (Number.isFinite(ms) && ms >= 0) this.#peerTripMs = ms;
  }

  /**
   * This isolate's trip, to post to its peers, when it has one that moved since it last
   * posted it (by TRIP_RESHARE_CHANGE, at least 1 ms) or was posted TRIP_RESHARE_MS ago;
   * undefined otherwise. Taking it marks it posted.
   */
  takeShare(now: number): number | undefined {
    const ms = this.#tripMs;
    if (ms === undefined) return undefined;
    const last = this.#sharedMs;
    const moved = last === undefined || Math.abs(ms - last) >= Math.max(1, TRIP_RESHARE_CHANGE * last);
    if (!moved && now - this.#sharedAt < TRIP_RESHARE_MS) return undefined;
    this.#sharedMs = ms;
    this.#sharedAt = now;
    return ms;
  }

  /** Trip samples held (at most TRIP_SAMPLES). */
  get tripSamples(): number {
    return this.#trips.length;
  }

  /** The running mean of a dispatch's time at the replica, start to end, ms; undefined before the first. */
  get serviceMs(): number | undefined {
    return this.#serviceMs;
  }

  /**
   * The replica said at `at` that a new prefill would wait `waitMs` (an answer's load
   * header, or a report dated by its age). An older word than the one held is ignored;
   * this isolate's dispatches before it are in it and leave the book.
   */
  laneSaid(at: number, waitMs: number): void {
    if (!(at >= this.#laneAt) || !Number.isFinite(waitMs)) return;
    this.#laneAt = at;
    this.#laneWaitMs = Math.max(0, waitMs);
    let keep = 0;
    while (keep < this.#bookedAt.length && this.#bookedAt[keep]! <= at) keep++;
    if (keep > 0) {
      this.#bookedAt = this.#bookedAt.slice(keep);
      this.#bookedMs = this.#bookedMs.slice(keep);
    }
  }

  /**
   * This isolate sent the replica a request at `at` whose prefill is predicted to take
   * `prefillMs`: it queues behind what the replica last said, until the replica says again.
   * Without it, every request an isolate sends between two of the replica's answers sees
   * the same empty queue, and they all go to the one replica that looked free.
   */
  book(at: number, prefillMs: number): void {
    if (!Number.isFinite(prefillMs) || prefillMs <= 0 || !(at >= this.#laneAt)) return;
    this.#bookedAt.push(at);
    this.#bookedMs.push(prefillMs);
    if (this.#bookedAt.length > MAX_PREFILL_BOOKINGS) {
      this.#bookedAt.shift();
      this.#bookedMs.shift();
    }
  }

  /**
   * How long a prefill sent now would wait, ms: the replica's last word, less the time
   * since, with this isolate's dispatches since then queued behind it (first come, first
   * served, each its predicted prefill). Undefined before the replica said anything.
   */
  laneWaitMs(now: number): number | undefined {
    if (this.#laneAt === -Infinity) return undefined;
    let free = this.#laneAt + this.#laneWaitMs;
    for (let i = 0; i < this.#bookedAt.length; i++) free = Math.max(free, this.#bookedAt[i]!) + this.#bookedMs[i]!;
    return Math.max(0, free - now);
  }

  /** One answer's head came `waitedMs` after its dispatch started, `replicaMs` of it at the replica. */
  recordTrip(waitedMs: number, replicaMs: number): void {
    const sample = Math.max(0, waitedMs - replicaMs);
    if (!Number.isFinite(sample)) return;
    if (this.#trips.length < TRIP_SAMPLES) this.#trips.push(sample);
    else this.#trips[this.#next] = sample;
    this.#next = (this.#next + 1) % TRIP_SAMPLES;
    const sorted = [...this.#trips].sort((a, b) => a - b);
    this.#tripMs = sorted[(sorted.length - 1) >> 1];
  }

  /** A dispatch accepted by the replica ended `ms` after it started. */
  recordService(ms: number): void {
    if (!Number.isFinite(ms) || ms < 0) return;
    this.#serviceMs = this.#serviceMs === undefined ? ms : this.#serviceMs + SERVICE_WEIGHT * (ms - this.#serviceMs);
  }
}

/** Mean Earth radius, km. */
const EARTH_KM = 6371;
/**
 * Round trip per km of great-circle distance, ms: light in fibre covers ~200 km/ms, and
 * paths run ~1.5× the great circle, so a round trip costs 2 × 1.5 / 200 ms per km.
 */
export const TRIP_MS_PER_KM = 0.015;
/** A round trip's floor (same city, same region): switching, a kernel each side. */
export const TRIP_FLOOR_MS = 2;

/** Great-circle distance, km (haversine). */
export function distanceKm(a: Coordinates, b: Coordinates): number {
  const rad = Math.PI / 180;
  const dLat = (b.lat - a.lat) * rad;
  const dLon = (b.lon - a.lon) * rad;
  const h = Math.sin(dLat / 2) ** 2 + Math.cos(a.lat * rad) * Math.cos(b.lat * rad) * Math.sin(dLon / 2) ** 2;
  return 2 * EARTH_KM * Math.asin(Math.min(1, Math.sqrt(h)));
}

/** A round trip estimated from geography alone, ms: what an isolate assumes before it has measured one. */
export function geographyTripMs(a: Coordinates, b: Coordinates): number {
  return TRIP_FLOOR_MS + TRIP_MS_PER_KM * distanceKm(a, b);
}

/** What the model reads of a candidate (a routing view's ReplicaEntry is one). */
export interface LatencyCandidate extends ReplicaChoice {
  readonly coordinates?: Coordinates;
  readonly timings?: { readonly tripMs: number | undefined; readonly serviceMs: number | undefined; laneWaitMs?(now: number): number | undefined };
  /** Its last load (a report or an answer's header) and when it was its load, epoch ms. */
  readonly reported?: { readonly prefillWaitMs?: number; readonly prefillRate?: number };
  readonly reportedAt?: number;
}

/** The deployment's and the isolate's part of a prediction. */
export interface LatencySettings {
  /** Prefill rate assumed for a replica that reports none, uncached tokens per second. */
  readonly prefillTokensPerSecond: number;
  /** A dispatch's service time assumed where none was measured, ms. */
  readonly serviceMs: number;
}

/**
 * The defaults of `policy.latency`: a prefill rate of 10,000 uncached tokens a second
 * (an 8B model on one H100 prefills several times that; a replica that reports its own
 * rate overrides it) and a second of service per dispatch until one is measured.
 */
export const DEFAULT_LATENCY_SETTINGS: LatencySettings = { prefillTokensPerSecond: 10_000, serviceMs: 1_000 };

/** One prediction and its parts, ms. */
export interface TtftPrediction {
  trip: number;
  queue: number;
  prefill: number;
  total: number;
}

/** What one choice shares across its candidates: the pool's fallback, computed once. */
export interface PoolPriors {
  /** The service time assumed for a candidate with none measured. */
  serviceMs: number;
}

function median(xs: number[]): number | undefined {
  if (xs.length === 0) return undefined;
  xs.sort((a, b) => a - b);
  return xs[(xs.length - 1) >> 1];
}

/** The pool's fallbacks: the median measured service time, else the setting. */
export function poolPriors(pool: readonly LatencyCandidate[], settings: LatencySettings): PoolPriors {
  const services: number[] = [];
  for (const c of pool) if (c.timings?.serviceMs !== undefined) services.push(c.timings.serviceMs);
  return { serviceMs: median(services) ?? settings.serviceMs };
}

/** The trip to `c`: learnt, else from geography (when `here` and its coordinates are known), else 0 (tried, then measured). */
export function tripOf(c: LatencyCandidate, here: Coordinates | undefined): number {
  const learnt = c.timings?.tripMs;
  if (learnt !== undefined) return learnt;
  if (here !== undefined && c.coordinates !== undefined) return geographyTripMs(here, c.coordinates);
  return 0;
}

/** Predicted time to first token of a request with `uncachedTokens` to prefill on `c`, sent at `now`. */
export function predictTtft(c: LatencyCandidate, uncachedTokens: number, now: number, here: Coordinates | undefined, priors: PoolPriors, settings: LatencySettings): TtftPrediction {
  const trip = tripOf(c, here);
  const age = c.reportedAt === undefined ? 0 : Math.max(0, now - c.reportedAt);
  const reportedWait = c.timings?.laneWaitMs?.(now) ?? Math.max(0, (c.reported?.prefillWaitMs ?? 0) - age);
  const over = c.load + 1 - c.capacity;
  const slotWait = over > 0 ? (over * (c.timings?.serviceMs ?? priors.serviceMs)) / Math.max(1, c.capacity) : 0;
  const queue = reportedWait + slotWait;
  const rate = c.reported?.prefillRate ?? settings.prefillTokensPerSecond;
  const prefill = uncachedTokens > 0 ? (uncachedTokens * 1000) / rate : 0;
  return { trip, queue, prefill, total: trip + queue + prefill };
}
