/**
 * The view stage: this isolate's view of a deployment's replicas (liveness, load,
 * models, prefix summaries, breakers), kept fresh from the routing snapshot in
 * the background so that no request waits on a Durable Object once warm.
 */
import { CacheSummary } from "../../prefix/cache-summary.ts";
import { SummaryPool } from "../../state/summary-delta.ts";
import { MAX_TRIP_MS, MAX_TRIP_NOTES, REPORT_STALE_AFTER_MS, type TripNote, type ContinuationForm, type ReplicaRole, type Load, type ReplicaView, type RoutingSnapshot } from "../../protocol/index.ts";
import type { ModelHolderChoice } from "../../policy/pick-replica.ts";
import { ReplicaTimings } from "../../policy/latency-model.ts";
import { breakerAllows, breakerDispatched, breakerFailed, breakerInconclusive, breakerOpen, breakerSucceeded, newBreaker, type Breaker, type BreakerConfig } from "../../policy/circuit-breaker.ts";

/**
 * One isolate's view of a deployment's replicas: the last routing snapshot from
 * the deployment's Durable Object, corrected by the load header of every
 * response and by this isolate's own in-flight count. Pure state, no I/O, so the
 * hot path can be unit-tested; time is passed in.
 */
/** A response from a replica proves it alive for this long, like a report does. */
export const LIVENESS_FROM_RESPONSE_MS = 2_500;
/** A replica that refused a connection is skipped by this isolate for this long. */
export const CONNECT_FAILURE_COOLDOWN_MS = 1_000;

export interface ReplicaEntry extends ModelHolderChoice {
  url: string;
  /** Registration epoch of the replica process (see ReplicaView.epoch). */
  epoch: number;
  models: string[];
  loading: string[];
  reported: Load;
  /** This isolate's dispatches to the replica that have not finished (the ledger's count). */
  readonly inflight: number;
  /**
   * Requests at the replica that are not this isolate's, as of its last report or
   * load header: what it reported, less this isolate's dispatches that were there
   * at that moment (the ledger's count then, not now). Without this a single
   * isolate would count its own requests twice, once in the report and once in
   * flight, or keep counting those of its own that finished after the report.
   */
  others: number;
  /** Epoch ms at which `reported` was the replica's load (a snapshot's report is up to STALE_AFTER_MS old). */
  reportedAt: number;
  /** This isolate's dispatches to the replica, in flight and lately ended (DispatchLedger). */
  readonly ledger: DispatchLedger;
  /** What this isolate learnt of the replica's timing: the trip to it, a dispatch's service time (src/policy/latency-model.ts). */
  readonly timings: ReplicaTimings;
  /** Epoch ms after which the replica is stale (no report, no response). */
  expiresAt: number;
  /** Draining with a deadline: epoch ms when it stops serving (its streams move before, migrate.ts). */
  drainsAt?: number;
  /** The continuation forms it takes, where it declared them (absent: both). */
  continues?: readonly ContinuationForm[];
  /** Its prefill/decode roles, where it declared them (absent: both). */
  roles?: readonly ReplicaRole[];
  /** Its KV bootstrap port (SGLang's protocol), where it declared one. */
  bootstrapPort?: number;
  /** Its region's name, where it declared one (issue 57). */
  region?: string;
  /** Where it is (degrees), where it declared it: a distance estimate before one is measured (issue 57). */
  coordinates?: { lat: number; lon: number };
  /** Epoch ms before which this isolate does not pick the replica (connect failures). */
  downUntil: number;
  /** Outlier ejection state (src/policy/circuit-breaker.ts). */
  breaker: Breaker;
  /** The engine's bearer key, sent as Authorization on every dispatch to it. */
  engineKey?: string;
  /** What the replica last reported holding in its prefix cache (src/prefix/cache-summary.ts); absent when it reports none. */
  cache?: CacheSummary;
  /** When this view first held that summary, epoch ms (the balancer trusts it over older dispatch notes). */
  cacheSince?: number;
}

export class RoutingView {
  readonly #replicas = new Map<string, ReplicaEntry>();
  /**
   * The replicas' prefix-cache summaries, parsed once per new digest: a snapshot
   * carries a summary only when this view did not hold its digest (cacheDigests),
   * so an unchanged summary is neither sent nor parsed again.
   */
  readonly #summaries = new SummaryPool<CacheSummary>((w) => CacheSummary.parse(w));
  /** Replicas the deployment has in view: more than this view holds when the relay sent a sample. */
  total = 0;
  /**
   * No ready replica in the view lapses before this epoch ms: a lower bound, exact after
   * a snapshot or a walk (lapsesBefore), since load headers only push expiries later.
   */
  #lapseBound = Infinity;

  /** The summary digests this view holds, for the next snapshot's ask (src/state/summary-delta.ts). */
  cacheDigests(): string {
    return this.#summaries.have();
  }

  /** Summaries parsed so far (each a digest new to this view). */
  get summaryParses(): number {
    return this.#summaries.parses;
  }

  /** Replaces membership with the snapshot's, keeping in-flight counts and newer loads. */
  applySnapshot(snapshot: RoutingSnapshot, now: number): void {
    this.total = snapshot.total ?? snapshot.replicas.length;
    this.#summaries.apply(snapshot.replicas);
    const seen = new Set<string>();
    for (const r of snapshot.replicas) {
      seen.add(r.id);
      const known = this.#replicas.get(r.id);
      if (known && known.url === r.url && known.epoch === r.epoch) {
        // An older snapshot must not undo what newer load headers told us; the same load
        // (same seq) is dated by whichever saw it later.
        const at = reportTime(r, now);
        if (r.load.seq > known.reported.seq || (r.load.seq === known.reported.seq && at > known.reportedAt)) {
          known.reported = r.load;
          known.reportedAt = at;
          if (r.load.prefillWaitMs !== undefined) known.timings.laneSaid(at, r.load.prefillWaitMs);
          // A report relayed by the Durable Object is up to a few seconds old: it counts
          // this isolate's dispatches that were at the replica then, which the ledger knows.
          known.others = Math.max(0, r.load.ongoing + r.load.queued - known.ledger.aliveAt(at));
        }
        if (r.load.seq >= known.reported.seq) {
          known.models = r.models;
          known.loading = r.loading;
          if (r.drainsInMs !== undefined) known.drainsAt = now + r.drainsInMs;
          else delete known.drainsAt;
        }
        known.expiresAt = Math.max(known.expiresAt, now + r.expiresInMs);
        refresh(known);
        this.#fillSummary(known, now);
      } else {
        const e = entryFrom(r, now);
        if (r.load.prefillWaitMs !== undefined) e.timings.laneSaid(e.reportedAt, r.load.prefillWaitMs);
        this.#fillSummary(e, now);
        this.#replicas.set(r.id, e);
      }
    }
    for (const id of this.#replicas.keys()) if (!seen.has(id)) this.#replicas.delete(id);
    this.#lapseBound = this.#earliestLapse();
    // Trips the location's other isolates measured (the relay's trip board): a start for replicas this one has not measured.
    const trips = snapshot.peers?.trips;
    if (trips) for (const t of trips) this.#replicas.get(t.r)?.timings.learnPeer(t.ms);
  }

  /** The trips this isolate measured that are due to be posted to its peers (ReplicaTimings.takeShare), at most MAX_TRIP_NOTES. */
  shareTrips(now: number): TripNote[] {
    const out: TripNote[] = [];
    for (const e of this.#replicas.values()) {
      if (out.length >= MAX_TRIP_NOTES) break;
      const ms = e.timings.takeShare(now);
      if (ms !== undefined) out.push({ r: e.id, ms: Math.min(MAX_TRIP_MS, Math.round(ms * 10) / 10) });
    }
    return out;
  }

  /**
   * Whether a ready replica's liveness in this view runs out before `at`. O(1) while the
   * bound says no; a walk, which moves the bound on, only once `at` reaches it.
   */
  lapsesBefore(at: number): boolean {
    if (at < this.#lapseBound) return false;
    this.#lapseBound = this.#earliestLapse();
    return at >= this.#lapseBound;
  }

  #earliestLapse(): number {
    let min = Infinity;
    for (const e of this.#replicas.values()) if (e.reported.state === "ready" && e.expiresAt < min) min = e.expiresAt;
    return min;
  }

  #fillSummary(e: ReplicaEntry, now: number): void {
    const held = this.#summaries.get(e.id)?.value;
    if (held) {
      if (e.cache !== held) e.cacheSince = now;
      e.cache = held;
    } else {
      delete e.cache;
      delete e.cacheSince;
    }
  }

  /** Applies a load header from a response; ignores loads older than what we have. */
  applyLoad(replicaId: string, load: Load, now: number): void {
    const e = this.#replicas.get(replicaId);
    if (!e) return;
    e.expiresAt = Math.max(e.expiresAt, now + LIVENESS_FROM_RESPONSE_MS);
    if (load.seq < e.reported.seq) return;
    e.reported = load;
    e.reportedAt = now;
    if (load.prefillWaitMs !== undefined) e.timings.laneSaid(now, load.prefillWaitMs);
    // The header excludes the request it answers (or refuses), which is still in flight
    // here, and includes our others that reached the replica before it: all in flight now
    // but that one (the ledger's count at `now` is its count of those in flight).
    e.others = Math.max(0, load.ongoing + load.queued - Math.max(0, e.inflight - 1));
    if (load.models) e.models = load.models;
    if (load.loading) e.loading = load.loading;
    refresh(e);
  }

  /**
   * A dispatch for `model` goes to a replica that does not hold it: count it as
   * loading there until the replica says otherwise, so the next requests for the
   * model follow it instead of starting loads on other replicas.
   */
  noteModelDispatch(e: ReplicaEntry, model: string): void {
    if (!e.models.includes(model) && !e.loading.includes(model)) e.loading = [...e.loading, model];
  }

  markDown(replicaId: string, now: number, forMs = CONNECT_FAILURE_COOLDOWN_MS): void {
    const e = this.#replicas.get(replicaId);
    if (e) e.downUntil = now + forMs;
  }

  /** A dispatch to `e` starts; returns its ledger mark, which endDispatch takes. */
  startDispatch(e: ReplicaEntry, now = Date.now()): number {
    e.ledger.start(now);
    breakerDispatched(e.breaker, now);
    refresh(e);
    return now;
  }

  /** The replica answered (any response head): it is healthy as far as ejection goes. */
  recordSuccess(e: ReplicaEntry): void {
    breakerSucceeded(e.breaker);
  }

  /** The dispatch got no usable answer; returns true when this ejects the replica. */
  recordFailure(e: ReplicaEntry, now: number, cfg: BreakerConfig): boolean {
    return breakerFailed(e.breaker, now, cfg);
  }

  /** The dispatch that startDispatch marked `started` ended (no mark: the oldest in flight). */
  endDispatch(e: ReplicaEntry, started?: number, now = Date.now()): void {
    // A probe that ended without a verdict (recordSuccess/recordFailure) must not
    // leave the replica ejected for good.
    breakerInconclusive(e.breaker);
    if (e.ledger.end(started, now)) refresh(e);
  }

  /** Replicas a dispatch may go to now: ready, fresh, not cooling down, not excluded, not ejected (unless all are). */
  candidates(now: number, exclude?: ReadonlySet<string>): ReplicaEntry[] {
    const out: ReplicaEntry[] = [];
    const ejected: ReplicaEntry[] = [];
    for (const e of this.#replicas.values()) {
      if (e.reported.state !== "ready" || e.expiresAt <= now || e.downUntil > now) continue;
      if (exclude?.has(e.id)) continue;
      if (breakerAllows(e.breaker, now)) out.push(e);
      else ejected.push(e);
    }
    // Panic routing (Envoy's rule): when ejection would leave nothing, ignore it;
    // an ejected replica may have recovered, and an empty answer helps nobody.
    return out.length > 0 ? out : ejected;
  }

  /**
   * Ready replicas whose liveness lapsed in this view but that nothing showed
   * dead: no refused or lost connection (cool-down, ejection), no drain, still in
   * the last snapshot (the routing object drops a replica whose report is older
   * than its hard expiry). A replica that holds what a request needs (its model,
   * its session) is still tried first when merely late: trying a dead one costs a
   * refused connection and a retry, routing around a live one costs a model load
   * or a session's cache.
   */
  lapsed(now: number, exclude?: ReadonlySet<string>): ReplicaEntry[] {
    const out: ReplicaEntry[] = [];
    for (const e of this.#replicas.values()) {
      if (e.reported.state !== "ready" || e.expiresAt > now || e.downUntil > now) continue;
      if (exclude?.has(e.id) || !breakerAllows(e.breaker, now)) continue;
      out.push(e);
    }
    return out;
  }

  /**
   * The candidates, plus the lapsed replicas that hold what the request needs
   * (`holds`): the liveness rule for model holders (docs/architecture.md).
   */
  candidatesHolding(now: number, exclude: ReadonlySet<string> | undefined, holds: (e: ReplicaEntry) => boolean): ReplicaEntry[] {
    const fresh = this.candidates(now, exclude);
    const late = this.lapsed(now, exclude).filter(holds);
    return late.length > 0 ? [...fresh, ...late] : fresh;
  }

  /** Replicas that are ready and fresh, ignoring this isolate's cool-downs. */
  readyCount(now: number): number {
    let n = 0;
    for (const e of this.#replicas.values()) if (e.reported.state === "ready" && e.expiresAt > now) n++;
    return n;
  }

  /**
   * Whether a ready replica's liveness ran out in this view. Its reports may well
   * have reached the Durable Object since the view was fetched: a view left idle
   * past its TTL ages every replica in it, not just dead ones.
   */
  hasLapsed(now: number): boolean {
    for (const e of this.#replicas.values()) if (e.reported.state === "ready" && e.expiresAt <= now) return true;
    return false;
  }

  /** Why each replica is or is not a candidate now (for error details and debugging). */
  describe(now: number): {
    id: string;
    seq: number;
    state: string;
    expiresInMs: number;
    coolingDownMs: number;
    ejected: boolean;
    load: number;
    capacity: number;
    /** Block keys in the replica's prefix-cache summary; absent when it reports none. */
    cacheKeys?: number;
    /** Its prefill/decode roles, where it declared them. */
    roles?: readonly ReplicaRole[];
    /** Its KV bootstrap port, where it declared one. */
    bootstrapPort?: number;
    /** Its region's name, where it declared one. */
    region?: string;
    /** Where it is (degrees), where it declared it. */
    coordinates?: { lat: number; lon: number };
    /** The round trip this isolate measured to it, ms (src/policy/latency-model.ts), once it has. */
    tripMs?: number;
  }[] {
    return [...this.#replicas.values()].map((e) => ({
      id: e.id,
      seq: e.reported.seq,
      state: e.reported.state,
      expiresInMs: e.expiresAt - now,
      coolingDownMs: Math.max(0, e.downUntil - now),
      ejected: breakerOpen(e.breaker, now),
      load: e.load,
      capacity: e.capacity,
      ...(e.cache !== undefined && { cacheKeys: e.cache.keys }),
      ...(e.roles !== undefined && { roles: e.roles }),
      ...(e.bootstrapPort !== undefined && { bootstrapPort: e.bootstrapPort }),
      ...(e.region !== undefined && { region: e.region }),
      ...(e.coordinates !== undefined && { coordinates: e.coordinates }),
      ...(e.timings.tripMs !== undefined && { tripMs: Math.round(e.timings.tripMs * 10) / 10 }),
    }));
  }

  get(replicaId: string): ReplicaEntry | undefined {
    return this.#replicas.get(replicaId);
  }

  get size(): number {
    return this.#replicas.size;
  }
}

function refresh(e: ReplicaEntry): void {
  e.capacity = e.reported.max;
  if (e.reported.kv !== undefined) e.kv = e.reported.kv;
  else delete e.kv;
  // Others' load as last reported, plus all of ours.
  e.load = e.others + e.inflight;
}

/** When a snapshot's report of `r` was the replica's load: its age is what its expiry has run down. */
function reportTime(r: ReplicaView, now: number): number {
  return now - Math.min(REPORT_STALE_AFTER_MS, Math.max(0, REPORT_STALE_AFTER_MS - r.expiresInMs));
}

/** How long a ledger remembers ended dispatches: past the oldest report a view applies (REPORT_STALE_AFTER_MS). */
export const LEDGER_HISTORY_MS = REPORT_STALE_AFTER_MS + 500;
/**
 * Most ended dispatches a ledger remembers per replica (~16 KiB). Past it the oldest go,
 * and a report older than what is left counts fewer of ours than it did: `others` errs
 * high, until the next load header (the replica's answers keep a busy one fresh).
 */
export const LEDGER_MAX_ENDED = 1_024;

/**
 * One isolate's dispatches to one replica: the start of each in flight, and the start
 * and end of each that ended lately. What it answers is how many were at the replica
 * at a past moment (aliveAt), so a report from that moment is reconciled against the
 * dispatches it counted, not against those in flight now. Pure; time is passed in.
 */
export class DispatchLedger {
  /** Start times of the dispatches in flight, in start order. */
  readonly #starts: number[] = [];
  /** Ended dispatches' starts and ends, in end order, from #head on. */
  #endedStart: number[] = [];
  #endedEnd: number[] = [];
  #head = 0;

  get inflight(): number {
    return this.#starts.length;
  }

  start(now: number): void {
    const s = this.#starts;
    // Clocks do not run back in practice; a start earlier than the last keeps the order anyway.
    if (s.length === 0 || s[s.length - 1]! <= now) s.push(now);
    else s.splice(upperBound(s, 0, s.length, now), 0, now);
  }

  /** A dispatch started at `started` ended (undefined: the oldest); false when none was in flight. */
  end(started: number | undefined, now: number): boolean {
    const s = this.#starts;
    if (s.length === 0) return false;
    let i = started === undefined ? 0 : s.indexOf(started);
    if (i < 0) i = 0;
    const begun = s[i]!;
    s.splice(i, 1);
    this.#endedStart.push(begun);
    this.#endedEnd.push(Math.max(now, this.#endedEnd.at(-1) ?? now));
    this.#trim(now);
    return true;
  }

  /** Dispatches in flight at `at`: started by then and not ended by then. */
  aliveAt(at: number): number {
    let n = upperBound(this.#starts, 0, this.#starts.length, at);
    const ends = this.#endedEnd;
    // Those ended after `at` are the suffix past the last end ≤ at.
    for (let i = upperBound(ends, this.#head, ends.length, at); i < ends.length; i++) if (this.#endedStart[i]! <= at) n++;
    return n;
  }

  #trim(now: number): void {
    const ends = this.#endedEnd;
    while (this.#head < ends.length && (ends[this.#head]! < now - LEDGER_HISTORY_MS || ends.length - this.#head > LEDGER_MAX_ENDED)) this.#head++;
    if (this.#head > 256 && this.#head * 2 > ends.length) {
      this.#endedStart = this.#endedStart.slice(this.#head);
      this.#endedEnd = ends.slice(this.#head);
      this.#head = 0;
    }
  }
}

/** The first index in sorted `a[from, to)` whose value is above `x`. */
function upperBound(a: readonly number[], from: number, to: number, x: number): number {
  let lo = from;
  let hi = to;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (a[mid]! <= x) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

function entryFrom(r: ReplicaView, now: number): ReplicaEntry {
  return {
    id: r.id,
    url: r.url,
    epoch: r.epoch,
    models: r.models,
    loading: r.loading,
    reported: r.load,
    get inflight() {
      return this.ledger.inflight;
    },
    others: r.load.ongoing + r.load.queued,
    reportedAt: reportTime(r, now),
    ledger: new DispatchLedger(),
    timings: new ReplicaTimings(),
    capacity: r.load.max,
    load: r.load.ongoing + r.load.queued,
    ...(r.load.kv !== undefined ? { kv: r.load.kv } : {}),
    expiresAt: now + r.expiresInMs,
    ...(r.drainsInMs !== undefined ? { drainsAt: now + r.drainsInMs } : {}),
    ...(r.continues !== undefined ? { continues: r.continues } : {}),
    ...(r.roles !== undefined ? { roles: r.roles } : {}),
    ...(r.bootstrapPort !== undefined ? { bootstrapPort: r.bootstrapPort } : {}),
    ...(r.region !== undefined ? { region: r.region } : {}),
    ...(r.coordinates !== undefined ? { coordinates: r.coordinates } : {}),
    downUntil: 0,
    breaker: newBreaker(),
    ...(r.engineKey !== undefined ? { engineKey: r.engineKey } : {}),
  };
}

/**
 * Per-isolate cache of routing views, one per deployment. Module scope on
 * purpose: an isolate serves many requests, and the view must outlive each of
 * them. A view older than SNAPSHOT_TTL_MS is refreshed in the background
 * (stale-while-revalidate) so no request waits on the Durable Object except the
 * very first one of an isolate.
 */
export const SNAPSHOT_TTL_MS = 1_000;
/**
 * The TTL of a view that comes from a relay, which holds the shards' snapshot
 * for up to RELAY_TTL_MS (1 s) itself: a load change reaches the isolate within
 * ~1.25 s of its report (~1 s without relays). A relay call is cheap (same
 * location, no storage) and the relay absorbs the rate, so the isolate asks
 * four times a second.
 */
export const RELAYED_SNAPSHOT_TTL_MS = 250;
/*
 * Past its TTL, a view is refreshed at the next request only once every so many
 * requests (the deployment's `routing.refreshEveryRequests`), or when it ages past
 * VIEW_MAX_AGE_MS, or when a replica in it is about to lapse, or while admission holds
 * or budgets requests here. The TTL alone made an isolate ask its relay four times a
 * second whatever its traffic: 400 calls per 1,000 requests at 10 req/s, where the
 * load header on every answer already keeps the replicas this isolate uses fresh.
 */
/** A view older than this is refreshed at the next request, however few came. */
export const VIEW_MAX_AGE_MS = 2_000;
/** A view is refreshed this long before a ready replica in it would lapse (drop out of the candidates). */
export const LAPSE_MARGIN_MS = 250;

/** How often a deployment's view is refreshed (above). */
export interface RefreshPace {
  /** No refresh sooner than this after the last one, ms (the TTL). */
  ttlMs: number;
  /** Past the TTL, a refresh every this many requests; 1: at the first request past it. */
  everyRequests: number;
}
/** After a failed refresh, wait this long before asking again. */
const REFRESH_FAILURE_BACKOFF_MS = 250;
/**
 * Requests wait for a refresh of a view with a lapsed replica only this long
 * after the refresh started (a Durable Object call takes ~1 ms locally, tens of
 * ms across locations): a slow or hung object cannot hold traffic up longer.
 */
export const LAPSED_REFRESH_WAIT_MS = 100;

/**
 * Fetches a deployment's snapshot. `have`: the prefix-cache summary digests the
 * isolate's view holds (RoutingView.cacheDigests), so the answer leaves them out.
 */
/** A deployment's snapshot; `have`: the summary digests the view holds; `view`: the view it will be folded into (what the ask posts of it). */
export type SnapshotSource = (deployment: string, have: string, view: RoutingView) => Promise<RoutingSnapshot>;

export class SnapshotCache {
  readonly #views: BackgroundRefresh<RoutingView, RoutingSnapshot>;

  /**
   * `pace`: each deployment's TTL and requests per refresh (default: SNAPSHOT_TTL_MS, every
   * request past it). `busy`: whether admission holds or budgets the deployment's requests
   * here, which refreshes at the TTL (the relay's budgets lapse unless re-asked, SHARE_POST_TTL_MS).
   */
  constructor(
    source: SnapshotSource,
    now: () => number = Date.now,
    pace: (deployment: string) => RefreshPace = () => ({ ttlMs: SNAPSHOT_TTL_MS, everyRequests: 1 }),
    busy: (deployment: string) => boolean = () => false,
  ) {
    this.#views = new BackgroundRefresh({
      source: (deployment, view) => source(deployment, view.cacheDigests(), view),
      initial: () => new RoutingView(),
      apply: (view, snapshot, at) => {
        view.applySnapshot(snapshot, at);
        return view;
      },
      ttlMs: (deployment) => pace(deployment).ttlMs,
      due: (deployment, s, n) =>
        s.uses >= pace(deployment).everyRequests || n - s.fetchedAt >= VIEW_MAX_AGE_MS || busy(deployment) || s.value.lapsesBefore(n + LAPSE_MARGIN_MS),
      failureBackoffMs: REFRESH_FAILURE_BACKOFF_MS,
      staleWaitMs: LAPSED_REFRESH_WAIT_MS,
      what: "snapshot",
      now,
    });
  }

  /** Durable Object calls made by this cache (observability and tests). */
  get refreshes(): number {
    return this.#views.refreshes;
  }

  /**
   * Returns the deployment's view. Waits for the Durable Object when the
   * isolate has no view yet or the view has nothing to route to (a wait joins a
   * refresh another request started). Otherwise a due refresh runs in the
   * background, handed to `background` (ctx.waitUntil).
   *
   * A view past its TTL in which a ready replica's liveness ran out is worth a
   * short wait (LAPSED_REFRESH_WAIT_MS) too: a view left idle ages live replicas
   * as well as dead ones, and routing around a live one sends a multiplexed
   * model or a session to a replica without its state, which costs far more.
   * Snapshots list only live replicas, so a dead one costs one such wait.
   */
  view(deployment: string, background: (p: Promise<unknown>) => void): Promise<RoutingView> {
    return this.#views.get(deployment, background, cannotRoute, hasLapsedSinceDue);
  }

  /** view()'s answer when it would not wait, with no promise (the usual case); undefined when view() would wait. */
  viewNow(deployment: string, background: (p: Promise<unknown>) => void): RoutingView | undefined {
    return this.#views.now(deployment, background, cannotRoute, hasLapsedSinceDue);
  }
}

// Module-level, so the hot path allocates no closures for them.
const cannotRoute = (s: Refreshed<RoutingView>, now: number) => s.fetchedAt === 0 || s.value.readyCount(now) === 0;
const hasLapsedSinceDue = (s: Refreshed<RoutingView>, now: number) => now - s.fetchedAt >= SNAPSHOT_TTL_MS && s.value.hasLapsed(now);

/**
 * Per-key values an isolate keeps and refreshes from a Durable Object in the
 * background (stale-while-revalidate): routing views and API key sets. A value
 * older than `ttlMs` is refreshed after the response (`background`), so requests
 * do not wait; only when the caller says the value is unusable (none yet, or no
 * ready replica) does a request wait, for the refresh already in flight or a
 * new one. A failed refresh keeps the old value and backs off before retrying.
 */
export interface BackgroundRefreshOptions<T, S> {
  /** Fetches a fresh copy (a Durable Object call); `current` is the value it will be folded into. */
  source: (key: string, current: T) => Promise<S>;
  /** The value before the first successful fetch. */
  initial: () => T;
  /** Folds a fetched copy into the value (returns the new value, or the same one updated). */
  apply: (value: T, fetched: S, now: number) => T;
  /** How long a value serves before a refresh, ms: one figure, or one per key. */
  ttlMs: number | ((key: string) => number);
  /**
   * Past the TTL, whether a refresh is due now (`uses`: gets since the last refresh
   * started). Default: always; a refresh then follows the first get past the TTL.
   */
  due?: (key: string, s: Refreshed<T> & { uses: number }, now: number) => boolean;
  failureBackoffMs: number;
  /**
   * How long after a refresh starts a request that finds the value `stale` (see
   * get) may wait for it; later ones use the old value. Bounds what a slow or
   * hung source costs. Default 0: never wait for a stale value.
   */
  staleWaitMs?: number;
  /** Named in the log line of a failed refresh. */
  what: string;
  now?: () => number;
}

export interface Refreshed<T> {
  value: T;
  /** Epoch ms of the last successful refresh (0: never). */
  fetchedAt: number;
}

interface Slot<T> extends Refreshed<T> {
  /** Gets since the last refresh started. */
  uses: number;
  /** Epoch ms before which no new refresh starts. */
  nextRefreshAt: number;
  refreshing: Promise<void> | null;
  /** Epoch ms the refresh in flight started. */
  refreshStartedAt: number;
}

export class BackgroundRefresh<T, S> {
  readonly #o: BackgroundRefreshOptions<T, S>;
  readonly #now: () => number;
  readonly #slots = new Map<string, Slot<T>>();
  /** Durable Object calls made (observability and tests). */
  refreshes = 0;

  constructor(options: BackgroundRefreshOptions<T, S>) {
    this.#o = options;
    this.#now = options.now ?? Date.now;
  }

  /**
   * The key's value. Waits for a refresh when `unusable` says the current one
   * cannot serve; when `stale` says it can but a fresher one would serve better,
   * waits for the refresh only while it is younger than `staleWaitMs`.
   */
  async get(
    key: string,
    background: (p: Promise<unknown>) => void,
    unusable: (s: Refreshed<T>, now: number) => boolean,
    stale?: (s: Refreshed<T>, now: number) => boolean,
  ): Promise<T> {
    const s = this.#slot(key);
    const answer = this.#answer(key, s, background, unusable, stale);
    if (answer === UNUSABLE) {
      if (s.refreshing) await s.refreshing;
      else if (this.#now() >= s.nextRefreshAt) await this.#refresh(key, s);
    } else if (answer !== NOW) {
      await settledWithin(s.refreshing!, answer);
    }
    return s.value;
  }

  /**
   * What get() answers without waiting, with no promise; undefined when get() would
   * wait (then call get(), which waits as it would have). The usual case on the hot
   * path: a value that serves, its refresh (when due) handed to `background`.
   */
  now(
    key: string,
    background: (p: Promise<unknown>) => void,
    unusable: (s: Refreshed<T>, now: number) => boolean,
    stale?: (s: Refreshed<T>, now: number) => boolean,
  ): T | undefined {
    const s = this.#slot(key);
    return this.#answer(key, s, background, unusable, stale) === NOW ? s.value : undefined;
  }

  #slot(key: string): Slot<T> {
    let s = this.#slots.get(key);
    if (!s) {
      s = { value: this.#o.initial(), fetchedAt: 0, uses: 0, nextRefreshAt: 0, refreshing: null, refreshStartedAt: 0 };
      this.#slots.set(key, s);
    }
    return s;
  }

  /**
   * Whether the slot's value serves now (NOW; a due refresh is handed to `background`),
   * is UNUSABLE (wait for a refresh), or is stale while a refresh younger than
   * `staleWaitMs` runs (the ms left to wait for it).
   */
  #answer(
    key: string,
    s: Slot<T>,
    background: (p: Promise<unknown>) => void,
    unusable: (s: Refreshed<T>, now: number) => boolean,
    stale: ((s: Refreshed<T>, now: number) => boolean) | undefined,
  ): typeof NOW | typeof UNUSABLE | number {
    const now = this.#now();
    s.uses++;
    if (unusable(s, now)) return UNUSABLE;
    if (!s.refreshing && now >= s.nextRefreshAt && (this.#o.due?.(key, s, now) ?? true)) background(this.#refresh(key, s));
    // The time left is checked before `stale`, which may walk the whole value.
    const left = s.refreshStartedAt + (this.#o.staleWaitMs ?? 0) - now;
    return s.refreshing && left > 0 && stale?.(s, now) ? left : NOW;
  }

  /** Forgets the key's value (and its back-off): the next get fetches afresh. */
  forget(key: string): void {
    this.#slots.delete(key);
  }

  #refresh(key: string, s: Slot<T>): Promise<void> {
    this.refreshes++;
    s.uses = 0;
    const p = this.#o
      .source(key, s.value)
      .then((fetched) => {
        const now = this.#now();
        s.value = this.#o.apply(s.value, fetched, now);
        s.fetchedAt = now;
        const ttl = this.#o.ttlMs;
        s.nextRefreshAt = now + (typeof ttl === "number" ? ttl : ttl(key));
      })
      .catch((err: unknown) => {
        // Keep serving the old value (the Durable Object may be restarting).
        s.nextRefreshAt = this.#now() + this.#o.failureBackoffMs;
        console.error(JSON.stringify({ msg: `${this.#o.what} refresh failed`, deployment: key, error: String(err) }));
      })
      .finally(() => {
        s.refreshing = null;
      });
    s.refreshing = p;
    s.refreshStartedAt = this.#now();
    return p;
  }
}

// #answer's verdicts besides a wait in ms.
const NOW = Symbol("now");
const UNUSABLE = Symbol("unusable");

/** Waits for `p` (which never rejects) or `ms`, whichever comes first. */
function settledWithin(p: Promise<void>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const timeout = new Promise<void>((r) => (timer = setTimeout(r, ms)));
  return Promise.race([p, timeout]).finally(() => {
    if (timer !== undefined) clearTimeout(timer);
  });
}
