/**
 * The SnapshotRelay Durable Object: one per deployment and location
 * (`<name>@<colo>`; Cloudflare places an object near its first caller). The
 * location's isolates ask it for their routing view instead of asking the
 * routing shards, so each shard sees one call per location every RELAY_TTL_MS,
 * whatever the number of isolates. It keeps the shards' merged snapshot in
 * memory, ages it by the time held (a replica's expiry stays what its shard
 * said), and hands each isolate a bounded view (bounded-view.ts).
 */
import { DurableObject } from "cloudflare:workers";
import type { Env } from "../env.ts";
import type { RoutingSnapshot } from "../protocol/index.ts";
import { agedSnapshot, boundedView } from "./bounded-view.ts";
import { mergedSnapshot } from "./routing-plane.ts";

/** The relay asks the shards again once its merged snapshot is this old. */
export const RELAY_TTL_MS = 750;
/** A refresh that takes longer is given up; the relay answers from what it has. */
const SHARD_CALL_TIMEOUT_MS = 2_000;

export interface RelayStats {
  /** Views handed to isolates. */
  calls: number;
  /** Merged refreshes (each one call per shard). */
  refreshes: number;
  /** Replicas in the merged snapshot. */
  replicas: number;
}

export class SnapshotRelay extends DurableObject<Env> {
  #merged: RoutingSnapshot | null = null;
  #fetchedAt = 0;
  #refreshing: Promise<void> | null = null;
  #calls = 0;
  #refreshes = 0;

  /**
   * The view for the isolate with `seed`. Refreshes first when the merged
   * snapshot is RELAY_TTL_MS old (isolates refresh in the background, so no
   * request waits on this); concurrent callers share one refresh.
   */
  async view(deployment: string, shards: number, seed: number): Promise<RoutingSnapshot> {
    this.#calls++;
    if (!this.#merged || Date.now() - this.#fetchedAt >= RELAY_TTL_MS) {
      this.#refreshing ??= this.#refresh(deployment, shards).finally(() => (this.#refreshing = null));
      await this.#refreshing;
    }
    const merged = this.#merged;
    if (!merged) throw new Error(`relay has no snapshot of "${deployment}" yet`);
    const now = Date.now();
    return boundedView(agedSnapshot(merged, now - this.#fetchedAt), seed, now);
  }

  stats(): RelayStats {
    return { calls: this.#calls, refreshes: this.#refreshes, replicas: this.#merged?.replicas.length ?? 0 };
  }

  async #refresh(deployment: string, shards: number): Promise<void> {
    this.#refreshes++;
    const startedAt = Date.now();
    let timer: ReturnType<typeof setTimeout> | undefined;
    try {
      const merged = await Promise.race([
        mergedSnapshot(this.env, deployment, shards),
        new Promise<never>((_, reject) => (timer = setTimeout(() => reject(new Error("routing shards did not answer in time")), SHARD_CALL_TIMEOUT_MS))),
      ]);
      this.#merged = merged;
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
