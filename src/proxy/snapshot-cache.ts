/**
 * Per-isolate cache of routing views, one per deployment. Module scope on
 * purpose: an isolate serves many requests, and the view must outlive each of
 * them. A view older than SNAPSHOT_TTL_MS is refreshed in the background
 * (stale-while-revalidate) so no request waits on the Durable Object except the
 * very first one of an isolate.
 */
import type { RoutingSnapshot } from "../protocol/index.ts";
import { RoutingView } from "./routing-view.ts";

export const SNAPSHOT_TTL_MS = 1_000;
/** After a failed refresh, wait this long before asking again. */
const REFRESH_FAILURE_BACKOFF_MS = 250;

interface Cached {
  view: RoutingView;
  /** Epoch ms of the last successful refresh (0: never). */
  fetchedAt: number;
  /** Epoch ms before which no new refresh starts. */
  nextRefreshAt: number;
  refreshing: Promise<void> | null;
}

export type SnapshotSource = (deployment: string) => Promise<RoutingSnapshot>;

export class SnapshotCache {
  readonly #entries = new Map<string, Cached>();
  readonly #source: SnapshotSource;
  readonly #now: () => number;
  /** Durable Object calls made by this cache (observability and tests). */
  refreshes = 0;

  constructor(source: SnapshotSource, now: () => number = Date.now) {
    this.#source = source;
    this.#now = now;
  }

  /**
   * Returns the deployment's view. Waits for the Durable Object only when the
   * isolate has no view yet; otherwise a due refresh runs in the background and
   * is handed to `background` (ctx.waitUntil).
   */
  async view(deployment: string, background: (p: Promise<unknown>) => void): Promise<RoutingView> {
    let c = this.#entries.get(deployment);
    if (!c) {
      c = { view: new RoutingView(), fetchedAt: 0, nextRefreshAt: 0, refreshing: null };
      this.#entries.set(deployment, c);
    }
    const now = this.#now();
    if (c.fetchedAt === 0) {
      // No view yet: wait for one, unless the last attempt just failed.
      if (c.refreshing) await c.refreshing;
      else if (now >= c.nextRefreshAt) await this.#refresh(deployment, c);
      return c.view;
    }
    if (c.view.readyCount(now) === 0) {
      // Nothing to route to (e.g. the view expired while the deployment was idle):
      // a fresher snapshot is worth waiting for, whether this request starts the
      // refresh or another one already did.
      if (c.refreshing) await c.refreshing;
      else if (now >= c.nextRefreshAt) await this.#refresh(deployment, c);
      return c.view;
    }
    if (!c.refreshing && now >= c.nextRefreshAt) background(this.#refresh(deployment, c));
    return c.view;
  }

  #refresh(deployment: string, c: Cached): Promise<void> {
    this.refreshes++;
    const p = this.#source(deployment)
      .then((snapshot) => {
        const now = this.#now();
        c.view.applySnapshot(snapshot, now);
        c.fetchedAt = now;
        c.nextRefreshAt = now + SNAPSHOT_TTL_MS;
      })
      .catch((err: unknown) => {
        // Keep serving from the old view (the Durable Object may be restarting).
        c.nextRefreshAt = this.#now() + REFRESH_FAILURE_BACKOFF_MS;
        console.error(JSON.stringify({ msg: "snapshot refresh failed", deployment, error: String(err) }));
      })
      .finally(() => {
        c.refreshing = null;
      });
    c.refreshing = p;
    return p;
  }
}
