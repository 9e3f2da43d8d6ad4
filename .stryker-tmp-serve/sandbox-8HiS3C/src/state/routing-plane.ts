/**
 * The routing state plane of a deployment as the Worker and the relays reach
 * it: its shards, their merged snapshot, and the operations that go to every
 * shard (stats, drain, restart) or to the leader (autoscaling). The pure rules
 * are in routing-shards.ts; this is the I/O around them.
 */
// @ts-nocheck

import type { Deployment } from "../config/deployment.ts";
import { routerFor, type RouterBinding } from "./deployment-router.ts";
import type { LocationDemandAsk, RoutingSnapshot, SummaryAsk } from "../protocol/index.ts";
import type { AutoscaleStatus, RouterStats, ShardSample } from "./deployment-router.ts";
import { mergeSnapshots, shardOfNode } from "./routing-shards.ts";

/** Where a replica's control messages go: the shard owning its node (its id when it names none). */
export function shardOfReplica(d: Deployment, replicaId: string, node: string | undefined): number {
  return shardOfNode(node ?? replicaId, d.routing.shards);
}

/**
 * The deployment's snapshot, merged from every shard (one call per shard).
 * With `sample`, each shard sends at most `sample.max` of its replicas (a
 * bounded view drawn with `sample.seed`); `total` then says how many there are.
 * With `summaries`, each shard sends the prefix-cache summaries the asker lacks,
 * within its share of the byte budget; without, digests only.
 */
export async function mergedSnapshot(
  env: RouterBinding,
  deployment: string,
  shards: number,
  sample?: ShardSample,
  summaries?: SummaryAsk,
  demand?: LocationDemandAsk,
): Promise<RoutingSnapshot> {
  if (shards === 1) return routerFor(env, deployment).snapshot(sample, summaries, demand);
  const share = summaries && { have: summaries.have, maxBytes: Math.floor(summaries.maxBytes / shards) };
  // A location's admission demand goes to the leader (shard 0) only, which answers with the other locations'.
  const parts = await Promise.all(Array.from({ length: shards }, (_, k) => routerFor(env, deployment, k).snapshot(sample, share, k === 0 ? demand : undefined)));
  const merged = mergeSnapshots(deployment, parts);
  const elsewhere = parts[0]!.admissionElsewhere;
  return elsewhere === undefined ? merged : { ...merged, admissionElsewhere: elsewhere };
}

export interface PlaneStats extends RouterStats {
  /** Each shard's own counters, in shard order. */
  shards: RouterStats[];
}

/** The shards' counters, summed, with each shard's own. */
export async function planeStats(env: RouterBinding, d: Deployment): Promise<PlaneStats> {
  const shards = await Promise.all(Array.from({ length: d.routing.shards }, (_, k) => routerFor(env, d.name, k).stats()));
  const sum: PlaneStats = { deployment: d.name, snapshotCalls: 0, reports: 0, nodeReports: 0, registrations: 0, members: 0, fresh: 0, replays: 0, calls: 0, summaries: 0, summaryReports: 0, shards };
  for (const s of shards) {
    sum.snapshotCalls += s.snapshotCalls;
    sum.reports += s.reports;
    sum.nodeReports += s.nodeReports;
    sum.registrations += s.registrations;
    sum.members += s.members;
    sum.fresh += s.fresh;
    sum.replays += s.replays;
    sum.calls += s.calls;
    sum.summaries += s.summaries;
    sum.summaryReports += s.summaryReports;
  }
  return sum;
}

/** Asks the replica to drain, in whichever shard holds it; false when none does. */
export async function requestDrain(env: RouterBinding, d: Deployment, replicaId: string): Promise<boolean> {
  const found = await Promise.all(Array.from({ length: d.routing.shards }, (_, k) => routerFor(env, d.name, k).requestDrain(replicaId)));
  return found.some(Boolean);
}

/** The autoscaling signal, decided by the leader (shard 0) over every shard's load. */
export function autoscaleStatus(env: RouterBinding, d: Deployment): Promise<AutoscaleStatus> {
  return routerFor(env, d.name).autoscale();
}

/** Tells the leader (shard 0) the requests an isolate holds for want of a replica; best effort (a failure is logged, the next tells again). */
export async function tellHeldDemand(env: RouterBinding, deployment: string, isolate: string, held: number): Promise<void> {
  try {
    await routerFor(env, deployment).demand(deployment, isolate, held);
  } catch (err) {
    console.error(JSON.stringify({ msg: "held demand to the autoscaler failed", deployment, error: String(err) }));
  }
}

/** Restarts every shard (memory lost, SQLite kept); the calls themselves fail. */
export async function restartShards(env: RouterBinding, d: Deployment): Promise<void> {
  await Promise.all(Array.from({ length: d.routing.shards }, (_, k) => routerFor(env, d.name, k).restart().catch(() => undefined)));
}
