/**
 * Per-isolate cache of routing views, one per deployment. Module scope on
 * purpose: an isolate serves many requests, and the view must outlive each of
 * them. A view older than SNAPSHOT_TTL_MS is refreshed in the background
 * (stale-while-revalidate) so no request waits on the Durable Object except the
 * very first one of an isolate.
 */
import type { RoutingSnapshot } from "../protocol/index.ts";
import { BackgroundRefresh, type Refreshed } from "./background-refresh.ts";
import { RoutingView } from "./routing-view.ts";

export const SNAPSHOT_TTL_MS = 1_000;
/**
 * The TTL of a view that comes from a relay, which holds the shards' snapshot
 * for up to RELAY_TTL_MS (1 s) itself: a load change reaches the isolate within
 * ~1.25 s of its report (~1 s without relays). A relay call is cheap (same
 * location, no storage) and the relay absorbs the rate, so the isolate asks
 * four times a second.
 */
export const RELAYED_SNAPSHOT_TTL_MS = 250;
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
export type SnapshotSource = (deployment: string, have: string) => Promise<RoutingSnapshot>;

export class SnapshotCache {
  readonly #views: BackgroundRefresh<RoutingView, RoutingSnapshot>;

  constructor(source: SnapshotSource, now: () => number = Date.now, ttlFor: (deployment: string) => number = () => SNAPSHOT_TTL_MS) {
    this.#views = new BackgroundRefresh({
      source: (deployment, view) => source(deployment, view.cacheDigests()),
      initial: () => new RoutingView(),
      apply: (view, snapshot, at) => {
        view.applySnapshot(snapshot, at);
        return view;
      },
      ttlMs: ttlFor,
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
