/**
 * Per-isolate cache of routing views, one per deployment. Module scope on
 * purpose: an isolate serves many requests, and the view must outlive each of
 * them. A view older than SNAPSHOT_TTL_MS is refreshed in the background
 * (stale-while-revalidate) so no request waits on the Durable Object except the
 * very first one of an isolate.
 */
import type { RoutingSnapshot } from "../protocol/index.ts";
import { BackgroundRefresh } from "./background-refresh.ts";
import { RoutingView } from "./routing-view.ts";

export const SNAPSHOT_TTL_MS = 1_000;
/** After a failed refresh, wait this long before asking again. */
const REFRESH_FAILURE_BACKOFF_MS = 250;

export type SnapshotSource = (deployment: string) => Promise<RoutingSnapshot>;

export class SnapshotCache {
  readonly #views: BackgroundRefresh<RoutingView, RoutingSnapshot>;

  constructor(source: SnapshotSource, now: () => number = Date.now) {
    this.#views = new BackgroundRefresh({
      source,
      initial: () => new RoutingView(),
      apply: (view, snapshot, at) => {
        view.applySnapshot(snapshot, at);
        return view;
      },
      ttlMs: SNAPSHOT_TTL_MS,
      failureBackoffMs: REFRESH_FAILURE_BACKOFF_MS,
      what: "snapshot",
      now,
    });
  }

  /** Durable Object calls made by this cache (observability and tests). */
  get refreshes(): number {
    return this.#views.refreshes;
  }

  /**
   * Returns the deployment's view. Waits for the Durable Object only when the
   * isolate has no view yet, when the view has nothing to route to, or when it
   * is past its TTL and a replica's liveness ran out in it (a view left idle
   * expires live replicas too: routing around them would send a multiplexed
   * model or a session to a replica without its state, which costs far more than
   * one Durable Object call). A wait joins a refresh another request started.
   * Otherwise a due refresh runs in the background, handed to `background`
   * (ctx.waitUntil). Snapshots list only live replicas, so a dead one costs at
   * most one wait per TTL.
   */
  view(deployment: string, background: (p: Promise<unknown>) => void): Promise<RoutingView> {
    return this.#views.get(
      deployment,
      background,
      (s, now) => s.fetchedAt === 0 || s.value.readyCount(now) === 0 || (now - s.fetchedAt >= SNAPSHOT_TTL_MS && s.value.hasLapsed(now)),
    );
  }
}
