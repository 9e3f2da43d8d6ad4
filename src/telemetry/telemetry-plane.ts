/**
 * The Telemetry shards as the Worker and the dashboard's object reach them: a
 * flush goes to its isolate's shard, and a scrape or a dashboard frame asks
 * every shard once and merges (telemetry-shards.ts has the pure rules).
 */
import { telemetryShardFor, type Env } from "../env.ts";
import { TELEMETRY_SHARDS, mergeReports, telemetryShardOf, type ShardReport } from "./telemetry-shards.ts";
import type { TelemetryFlush } from "./types.ts";

/** Sends an isolate's flush to its shard (the same shard every time for that isolate). */
export function sendFlush(env: Env, flush: TelemetryFlush): Promise<void> {
  return telemetryShardFor(env, telemetryShardOf(flush.isolate)).ingest(flush);
}

/**
 * The fleet's telemetry for `deployments`: every shard's totals (and windows,
 * when asked) summed. A shard that does not answer fails the whole read: a
 * scrape missing a shard would show counters going down, which Prometheus
 * takes for a reset; a failed scrape is only a gap.
 */
export async function fleetTelemetry(env: Env, deployments: string[], withWindows: boolean): Promise<ShardReport> {
  const reports = await Promise.all(Array.from({ length: TELEMETRY_SHARDS }, (_, k) => telemetryShardFor(env, k).report(deployments, withWindows)));
  return mergeReports(deployments, reports);
}

/** Restarts every shard (their in-memory state goes; their persisted totals come back when they load again). */
export async function restartTelemetry(env: Env): Promise<void> {
  await Promise.all(
    Array.from({ length: TELEMETRY_SHARDS }, (_, k) =>
      telemetryShardFor(env, k)
        .restart()
        // The abort rejects the call that caused it: the object is gone, which is what was asked.
        .catch(() => undefined),
    ),
  );
}
