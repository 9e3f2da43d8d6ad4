/**
 * The SnapshotRelay Durable Object: one per deployment and location
 * (`<name>@<colo>`; Cloudflare places an object near its first caller). The
 * location's isolates ask it for their routing view instead of asking the
 * routing shards, so each shard sees one call per location every RELAY_TTL_MS,
 * whatever the number of isolates. It keeps the shards' merged snapshot in
 * memory, ages it by the time held (a replica's expiry stays what its shard
 * said), and hands each isolate a bounded view (bounded-view.ts). It is also
 * the location's tier for rate limits: isolates report their keys' uses here,
 * and the relay syncs their sum with the RateLimiter shards once a second
 * (src/policy/rate-limit-relay.ts), and for API key sets, which it holds for
 * RELAY_KEY_SET_TTL_MS. And it passes each isolate's recent dispatches on to the
 * location's other isolates with their next view (dispatch-board.ts).
 */
import { DurableObject } from "cloudflare:workers";
import { keysFor, type ActiveKey, type KeysBinding } from "./access-keys.ts";
import type { RouterBinding } from "./deployment-router.ts";
import { rateLimiterFor, type RateLimitsBinding } from "./rate-limiter.ts";
import { AdmissionDemandPost, LocationDemand, RelayDispatchPost, type RoutingSnapshot } from "../protocol/index.ts";
import { AdmissionShares, randomFlowKey } from "../policy/admission-shares.ts";
import { RateRelayLedger } from "../policy/rate-limit-relay.ts";
import type { RateRemaining, RateUse } from "../policy/rate-limit-sync.ts";
import type { BucketLimits } from "../policy/token-bucket.ts";
import { agedSnapshot, boundedView } from "./bounded-view.ts";
import { DispatchBoard } from "./dispatch-board.ts";
import { TripBoard } from "./trip-board.ts";
import { RELAY_AT_ZERO_TTL_MS, RELAY_KEY_SET_TTL_MS, RELAY_MAX_REPLICAS, RELAY_RATE_SYNC_INTERVAL_MS, RELAY_TTL_MS } from "./relay-cadence.ts";
import { mergedSnapshot, tellHeldDemand } from "./routing-plane.ts";
import { HELD_DEMAND_INTERVAL_MS, heldDemand } from "./routing-shards.ts";
import { RELAY_MAX_SUMMARY_BYTES, RELAY_SUMMARY_BYTES, SummaryPool, VIEW_SUMMARY_BYTES, decodeDigests, summaryDelta, withHeldSummaries } from "./summary-delta.ts";
import type { CacheSummaryWire } from "../prefix/cache-summary.ts";

export { RELAY_AT_ZERO_TTL_MS, RELAY_KEY_SET_TTL_MS, RELAY_MAX_REPLICAS, RELAY_RATE_SYNC_INTERVAL_MS, RELAY_TTL_MS } from "./relay-cadence.ts";
/** A refresh that takes longer is given up; the relay answers from what it has. */
const SHARD_CALL_TIMEOUT_MS = 2_000;

export interface RelayStats {
  /** Views handed to isolates. */
  calls: number;
  /** Merged refreshes (each one call per shard). */
  refreshes: number;
  /** Replicas in the merged snapshot. */
  replicas: number;
  /** Rate-limit syncs from isolates, and those the relay sent on to RateLimiter shards. */
  rateSyncs: number;
  rateShardSyncs: number;
  /** Key-set fetches from the AccessKeys object. */
  keySetRefreshes: number;
  /** Prefix-cache summaries held (replicas), and their bytes. */
  summaries: number;
  summaryBytes: number;
  /** Dispatch notes on the board now, those ever posted to it (new ones only), and posts refused as malformed. */
  dispatchNotes: number;
  dispatchNotesPosted: number;
  dispatchPostsRefused: number;
}

/** The binding of the snapshot relays (wrangler.toml: RELAYS). */
export interface RelaysBinding {
  RELAYS: DurableObjectNamespace<SnapshotRelay>;
}

/** The snapshot relay of a deployment in one location (`colo`). */
export function relayFor(env: RelaysBinding, deployment: string, location: string): DurableObjectStub<SnapshotRelay> {
  return env.RELAYS.get(env.RELAYS.idFromName(`${deployment}@${location}`));
}

/** What a relay calls: the routing shards, the key sets and the rate-limit shards. */
type RelayEnv = RouterBinding & KeysBinding & RateLimitsBinding;

export class SnapshotRelay extends DurableObject<RelayEnv> {
  #merged: RoutingSnapshot | null = null;
  #fetchedAt = 0;
  #refreshing: Promise<void> | null = null;
  #calls = 0;
  #refreshes = 0;
  /** Random per relay: picks this relay's sample of a deployment too large for RELAY_MAX_REPLICAS. */
  readonly #seed = crypto.getRandomValues(new Uint32Array(1))[0]!;
  #rateSyncs = 0;
  #rateShardSyncs = 0;
  #keys: { hashes: ActiveKey[]; at: number } | null = null;
  #keysRefreshing: Promise<ActiveKey[]> | null = null;
  #keySetRefreshes = 0;
  /** One ledger per RateLimiter shard. */
  readonly #ledgers = new Map<number, RateRelayLedger>();
  /** The merged snapshot's prefix-cache summaries (wire form), bounded by RELAY_MAX_SUMMARY_BYTES. */
  readonly #summaries = new SummaryPool<CacheSummaryWire>((w) => w, RELAY_MAX_SUMMARY_BYTES);
  /** The location's isolates' recent dispatches, passed on to the others. */
  readonly #board = new DispatchBoard();
  /** The round trips the location's isolates measured to each replica (trip-board.ts). */
  readonly #trips = new TripBoard();
  /** The location's isolates' admission demand, and their budgets from it. */
  readonly #shares = new AdmissionShares(randomFlowKey());
  /** This relay told the leader of demand at its last refresh: the next tells it when the demand is gone. */
  #toldDemand = false;
  /** The location's isolates' held requests, by isolate, and when the autoscaler last heard of them. */
  readonly #held = new Map<string, { held: number; at: number }>();
  #heldToldAt = 0;
  #dispatchNotesPosted = 0;
  #dispatchPostsRefused = 0;

  /**
   * The view for the isolate with `seed`. Refreshes first when the merged
   * snapshot is RELAY_TTL_MS old (isolates refresh in the background, so no
   * request waits on this); concurrent callers share one refresh. `have`: the
   * summary digests the isolate holds (summary-delta.ts): the view carries only
   * the summaries it lacks, at most VIEW_SUMMARY_BYTES of them. `dispatches`: the
   * isolate's dispatches since its last ask, which join the board; the answer then
   * carries the other isolates' since its cursor (`peers`).
   */
  async view(deployment: string, shards: number, seed: number, have = "", dispatches?: RelayDispatchPost, demand?: AdmissionDemandPost): Promise<RoutingSnapshot> {
    this.#calls++;
    let after: number | undefined;
    let tripsAfter: number | undefined;
    if (dispatches !== undefined) {
      const post = RelayDispatchPost.safeParse(dispatches);
      if (post.success) {
        this.#dispatchNotesPosted += this.#board.post(seed, post.data.notes, Date.now());
        after = post.data.after;
        if (post.data.trips !== undefined && post.data.trips.length > 0) this.#trips.post(seed, post.data.trips, Date.now());
        tripsAfter = post.data.tripsAfter;
      } else {
        // Only our own isolates call this: a malformed post is a bug, counted; the view is still answered.
        this.#dispatchPostsRefused++;
        after = 0;
      }
    }
    // Parsed before the refresh: a location holding requests at zero refreshes sooner (#ttl).
    const posted = demand === undefined ? undefined : AdmissionDemandPost.safeParse(demand);
    // Counted before the refresh, which tells the leader the location's demand.
    if (posted?.success) this.#shares.post(seed, posted.data.bands, Date.now(), posted.data.flows);
    if (!this.#merged || Date.now() - this.#fetchedAt >= this.#ttl()) {
      this.#refreshing ??= this.#refresh(deployment, shards).finally(() => (this.#refreshing = null));
      await this.#refreshing;
    }
    const merged = this.#merged;
    if (!merged) throw new Error(`relay has no snapshot of "${deployment}" yet`);
    const now = Date.now();
    const view = summaryDelta(boundedView(agedSnapshot(merged, now - this.#fetchedAt), seed, now), decodeDigests(have), VIEW_SUMMARY_BYTES, this.#calls);
    let answer: RoutingSnapshot = view;
    if (after !== undefined) {
      const peers = this.#board.since(after, seed, now);
      if (tripsAfter !== undefined) {
        const { trips, cursor } = this.#trips.since(tripsAfter, seed, now);
        peers.trips = trips;
        peers.tripCursor = cursor;
      }
      answer = { ...view, peers };
    }
    if (posted !== undefined) {
      const post = posted;
      if (post.success) {
        this.#tellHeld(deployment, seed, post.data.held, now);
        // The slots of the replicas taking requests now, in the whole merged snapshot (not the asker's sample).
        let capacity = 0;
        for (const r of merged.replicas) if (r.load.state === "ready") capacity += r.load.max;
        const allotted = this.#shares.allot(seed, capacity, now);
        if (allotted !== undefined) {
          answer.admissionBudget = allotted.max;
          if (allotted.flowCaps) answer.admissionFlowCaps = allotted.flowCaps;
          if (allotted.openFrom !== undefined) answer.admissionOpenFrom = allotted.openFrom;
        }
      } else {
        this.#dispatchPostsRefused++;
      }
    }
    return answer;
  }

  /**
   * How old a merged snapshot may be. While no replica in it is ready (a deployment
   * scaling from zero with requests held, or one whose first replica is starting: the
   * README's own-model walkthrough sends its curl right after the agent's "registered"),
   * the relay asks the shards every RELAY_AT_ZERO_TTL_MS, so the first replica to
   * register is routable within ~0.5 s (this TTL and the isolate's) instead of up to
   * ~1.25 s: at most 4 calls a second per location, only while isolates ask for a
   * deployment that has no ready replica.
   */
  #ttl(): number {
    const merged = this.#merged;
    return !merged || merged.replicas.some((r) => r.load.state === "ready") ? RELAY_TTL_MS : RELAY_AT_ZERO_TTL_MS;
  }

  /**
   * The location's held requests go on to the deployment's autoscaler (its leader routing
   * object) at most once per HELD_DEMAND_INTERVAL_MS while there are any: one call per
   * location, not per isolate (scale from zero, and held demand scaling a full fleet up).
   */
  #tellHeld(deployment: string, seed: number, held: number, now: number): void {
    this.#held.set(String(seed), { held, at: now });
    const total = heldDemand(this.#held, now);
    if (total === 0 || now - this.#heldToldAt < HELD_DEMAND_INTERVAL_MS) return;
    this.#heldToldAt = now;
    this.ctx.waitUntil(tellHeldDemand(this.env, deployment, `relay:${this.ctx.id.toString()}`, total));
  }

  /**
   * An isolate's rate-limit sync for one RateLimiter shard (src/proxy/serve/access.ts
   * sends the same to the shard itself without relays): its uses join the
   * location's, which go on to the shard when a sync is due.
   */
  async syncRates(deployment: string, shard: number, limits: BucketLimits, uses: RateUse[]): Promise<RateRemaining[]> {
    this.#calls++;
    this.#rateSyncs++;
    let ledger = this.#ledgers.get(shard);
    if (!ledger) {
      ledger = new RateRelayLedger();
      this.#ledgers.set(shard, ledger);
    }
    ledger.add(uses);
    if (ledger.due(Date.now(), RELAY_RATE_SYNC_INTERVAL_MS)) {
      const taken = ledger.take();
      this.#rateShardSyncs++;
      try {
        ledger.adopt(await rateLimiterFor(this.env, deployment, shard).sync(limits, taken));
        const synced = new Set(taken.map((u) => u.key));
        ledger.prune((key) => synced.has(key));
      } catch (err) {
        ledger.giveBack(taken);
        console.error(JSON.stringify({ msg: "relay rate limit sync failed", deployment, error: String(err) }));
      }
    }
    return ledger.answer(uses.map((u) => u.key));
  }

  /** The deployment's active API keys (AccessKeys.activeKeys), held for RELAY_KEY_SET_TTL_MS. */
  async activeKeys(deployment: string): Promise<ActiveKey[]> {
    this.#calls++;
    if (this.#keys && Date.now() - this.#keys.at < RELAY_KEY_SET_TTL_MS) return this.#keys.hashes;
    this.#keysRefreshing ??= (async () => {
      const at = Date.now();
      try {
        this.#keySetRefreshes++;
        const hashes = await keysFor(this.env, deployment).activeKeys();
        this.#keys = { hashes, at };
        return hashes;
      } finally {
        this.#keysRefreshing = null;
      }
    })();
    return this.#keysRefreshing;
  }

  /** An admin call changed the key set: the next ask fetches it afresh (this location at once; others within their TTL). */
  forgetKeys(): void {
    this.#calls++;
    this.#keys = null;
  }

  stats(): RelayStats {
    return {
      calls: this.#calls,
      refreshes: this.#refreshes,
      replicas: this.#merged?.replicas.length ?? 0,
      rateSyncs: this.#rateSyncs,
      rateShardSyncs: this.#rateShardSyncs,
      keySetRefreshes: this.#keySetRefreshes,
      summaries: this.#summaries.size,
      summaryBytes: this.#summaries.bytes,
      dispatchNotes: this.#board.size,
      dispatchNotesPosted: this.#dispatchNotesPosted,
      dispatchPostsRefused: this.#dispatchPostsRefused,
    };
  }

  async #refresh(deployment: string, shards: number): Promise<void> {
    this.#refreshes++;
    const startedAt = Date.now();
    let timer: ReturnType<typeof setTimeout> | undefined;
    // The location's admission demand rides on the ask to the leader shard, which answers
    // with the other locations' (src/policy/location-demand.ts): no call of its own.
    const demand = this.#shares.locationDemand(startedAt);
    const tell = demand.bands.length > 0 || this.#toldDemand;
    try {
      const merged = await Promise.race([
        mergedSnapshot(
          this.env,
          deployment,
          shards,
          { seed: this.#seed, max: Math.ceil(RELAY_MAX_REPLICAS / shards) },
          { have: this.#summaries.have(), maxBytes: RELAY_SUMMARY_BYTES },
          tell ? { location: this.ctx.id.toString(), demand } : undefined,
        ),
        new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("routing shards did not answer in time")), SHARD_CALL_TIMEOUT_MS))),
      ]);
      if (tell) this.#toldDemand = demand.bands.length > 0;
      const { admissionElsewhere, ...snapshot } = merged;
      const elsewhere = admissionElsewhere === undefined ? undefined : LocationDemand.safeParse(admissionElsewhere);
      if (elsewhere?.success) this.#shares.elsewhere(elsewhere.data, Date.now());
      else if (elsewhere) console.error(JSON.stringify({ msg: "leader's location demand malformed", deployment }));
      // The shards sent only the summaries this relay lacked: the pool fills in the rest.
      this.#summaries.apply(snapshot.replicas);
      this.#merged = withHeldSummaries(snapshot, this.#summaries);
      // Aged from when the refresh started: the shards' expiries were at most that old.
      this.#fetchedAt = startedAt;
    } catch (err) {
      // Keep answering from the old snapshot (aged further); the caller throws only when there is none.
      console.error(JSON.stringify({ msg: "relay refresh failed", deployment, error: String(err) }));
    } finally {
      if (timer !== undefined) clearTimeout(timer);
    }
  }
}
