/**
 * A deployment's routing state spread over N routing objects (shards), each
 * owning a subset of nodes. Pure: the names, which shard owns a node, and how
 * the shards' snapshots merge into the one view proxies route with. The rules
 * of one object (membership, drain, expiry, multiplexing) apply in each shard
 * unchanged, because a replica lives in exactly one shard at a time; the merge
 * only has to handle the moment a replica moves (the shard count changed).
 */
// @ts-nocheck

import type { ReplicaView, RoutingSnapshot } from "../protocol/index.ts";
import { rendezvousWeight } from "../protocol/hashing.ts";


/**
 * The routing object of shard `shard`. Shard 0 keeps the deployment's own name,
 * so a deployment with one shard is the single routing object it always was
 * (same storage), and growing the count keeps shard 0's members in place.
 */
export function routingShardName(deployment: string, shard: number): string {
  return shard === 0 ? deployment : `${deployment}#${shard}`;
}

/**
 * The shard that owns `node` (a replica's node, else its id) among `shards`:
 * rendezvous hashing, so going from N to N+1 shards moves only the nodes the
 * new shard wins (about 1/(N+1) of them). A moved replica's next report reaches
 * a shard that does not know it, is answered unknown_replica, and the replica
 * registers there: no restart, and the old shard lets it expire.
 */
export function shardOfNode(node: string, shards: number): number {
  if (shards <= 1) return 0;
  let best = 0;
  let bestWeight = -1;
  for (let k = 0; k < shards; k++) {
    const w = rendezvousWeight(node, String(k));
    if (w > bestWeight) {
      best = k;
      bestWeight = w;
    }
  }
  return best;
}

/**
 * One deployment's snapshot from its shards' snapshots. A replica appears in
 * two shards only while it moves between them (it registered again in the new
 * one): the newer registration (higher epoch) wins, and between equal epochs
 * the later expiry, so the merge never resurrects what one shard already let go.
 */
export function mergeSnapshots(deployment: string, parts: readonly RoutingSnapshot[]): RoutingSnapshot {
  const sampled = parts.some((p) => p.total !== undefined);
  const total = sampled ? parts.reduce((n, p) => n + (p.total ?? p.replicas.length), 0) : undefined;
  if (parts.length === 1) return { deployment, replicas: parts[0]!.replicas, ...(total !== undefined ? { total } : {}) };
  const byId = new Map<string, ReplicaView>();
  for (const part of parts) {
    for (const r of part.replicas) {
      const held = byId.get(r.id);
      if (!held || newer(r, held)) byId.set(r.id, r);
    }
  }
  return { deployment, replicas: [...byId.values()], ...(total !== undefined ? { total } : {}) };
}

function newer(a: ReplicaView, b: ReplicaView): boolean {
  if (a.epoch !== b.epoch) return a.epoch > b.epoch;
  return a.expiresInMs > b.expiresInMs;
}

/** A shard's own load, as it tells the leader shard (shard 0) for the autoscaling signal. */
export interface ShardLoad {
  /** Fresh, ready replicas in the shard. */
  ready: number;
  /** Their ongoing + queued requests. */
  ongoing: number;
  /** Epoch ms the shard sampled it. */
  at: number;
}

/** The leader samples the deployment's load for the autoscaler at most this often. */
export const AUTOSCALE_SAMPLE_MS = 1_000;
/**
 * Another shard tells the leader its load at most this often: the leader then
 * hears (shards − 1) / 5 calls per second, which leaves a leader of a
 * 70-shard deployment within its budget (docs/scaling.md §4), and the
 * autoscaler's 30 s look-back still has six samples of every shard.
 */
export const SHARD_LOAD_INTERVAL_MS = 5_000;
/** A shard's load older than this no longer counts (the shard went quiet: its replicas have gone stale too). */
export const SHARD_LOAD_STALE_MS = 3 * SHARD_LOAD_INTERVAL_MS;

/**
 * An isolate holding requests for a deployment (src/proxy/serve/admit.ts) tells the
 * leader how many, at most this often while it holds any: demand the replicas cannot
 * report, since it has not reached them (at zero, none exists to report it).
 */
export const HELD_DEMAND_INTERVAL_MS = 1_000;
/** An isolate's held count older than this no longer counts (it stopped holding, or went away). */
export const HELD_DEMAND_STALE_MS = 3 * HELD_DEMAND_INTERVAL_MS;

/** The requests the edge holds now, summed over the isolates whose word is fresh; stale entries are dropped. */
export function heldDemand(byIsolate: Map<string, { held: number; at: number }>, now: number): number {
  let held = 0;
  for (const [isolate, d] of byIsolate) {
    if (now - d.at > HELD_DEMAND_STALE_MS) byIsolate.delete(isolate);
    else held += d.held;
  }
  return held;
}

/**
 * The fleet's load for the autoscaler, on the leader: its own plus every other
 * shard's latest, dropping those older than SHARD_LOAD_STALE_MS.
 */
export function fleetLoad(own: Omit<ShardLoad, "at">, others: Iterable<ShardLoad>, now: number): Omit<ShardLoad, "at"> {
  let { ready, ongoing } = own;
  for (const s of others) {
    if (now - s.at > SHARD_LOAD_STALE_MS) continue;
    ready += s.ready;
    ongoing += s.ongoing;
  }
  return { ready, ongoing };
}
