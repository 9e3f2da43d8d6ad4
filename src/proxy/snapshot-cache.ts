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
   * isolate has no view yet, or when the view has nothing to route to (e.g. it
   * expired while the deployment was idle: a fresher snapshot is worth waiting
   * for, whether this request starts the refresh or another one already did).
   * Otherwise a due refresh runs in the background, handed to `background`
   * (ctx.waitUntil).
   */
  view(deployment: string, background: (p: Promise<unknown>) => void): Promise<RoutingView> {
    return this.#views.get(deployment, background, (s, now) => s.fetchedAt === 0 || s.value.readyCount(now) === 0);
  }
}
