// Telemetry sharded inside workerd: flushes from several isolates land in the
// shard of each isolate id ("telemetry/<k>"), and /-/metrics and the
// dashboard's first frame (pushed by the "global" object) show the sums over
// every shard. Counts are compared as differences from before, so the test does
// not depend on what else flushed in this runtime.
import { env, exports } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { restartTelemetry, telemetryShardFor } from "../../src/state/telemetry.ts";
import { IsolateState } from "../../src/proxy/serve/isolate-state.ts";
import { parsePrometheusText } from "../../src/telemetry/prometheus-parse.ts";
import { sendFlush } from "../../src/state/telemetry.ts";
import { TELEMETRY_SHARDS, telemetryShardOf } from "../../src/telemetry/telemetry-shards.ts";
import type { DashboardFrame, DeploymentDelta, TelemetryFlush } from "../../src/telemetry/types.ts";
import { histogramOf } from "../fixtures/telemetry.ts";

const ADMIN_SECRET = "test-admin-secret";
const DEPLOYMENT = "hello";

/** Isolate i's delta: distinct counts per isolate, so a lost or doubled flush shows in the sums. */
function deltaOf(i: number): DeploymentDelta {
  return {
    deployment: DEPLOYMENT,
    requests: { "2xx": 10 + i, "3xx": 1, "4xx": i % 3, "5xx": i % 2 },
    retries: i,
    rejections: 2 * i,
    ejections: i % 4 === 0 ? 1 : 0,
    duration: histogramOf(0.02 * (i + 1), 0.3),
    ttfb: histogramOf(0.004 * (i + 1)),
  };
}

/** Fixed isolate ids spread over at least 4 shards, two of them sharing one (the shard function is pure, so this is stable). */
function isolateIds(): string[] {
  const ids: string[] = [];
  const shards = new Map<number, number>();
  for (let i = 0; ids.length < 12 || shards.size < 4 || ![...shards.values()].some((n) => n > 1); i++) {
    const id = `workers-test-isolate-${i}`;
    ids.push(id);
    const k = telemetryShardOf(id);
    shards.set(k, (shards.get(k) ?? 0) + 1);
  }
  return ids;
}

async function metrics(): Promise<Map<string, number>> {
  const res = await exports.default.fetch("http://edge/-/metrics", { headers: { authorization: `Bearer ${ADMIN_SECRET}` } });
  expect(res.status).toBe(200);
  const out = new Map<string, number>();
  for (const s of parsePrometheusText(await res.text()).samples) {
    const labels = Object.entries(s.labels)
      .map(([k, v]) => `${k}=${v}`)
      .join(",");
    out.set(labels ? `${s.name}{${labels}}` : s.name, s.value);
  }
  return out;
}

const dep = `deployment=${DEPLOYMENT}`;
const KEYS = {
  "2xx": `switchyard_requests_total{${dep},code=2xx}`,
  "3xx": `switchyard_requests_total{${dep},code=3xx}`,
  "4xx": `switchyard_requests_total{${dep},code=4xx}`,
  "5xx": `switchyard_requests_total{${dep},code=5xx}`,
  retries: `switchyard_retries_total{${dep}}`,
  rejections: `switchyard_replica_rejections_total{${dep}}`,
  ejections: `switchyard_replica_ejections_total{${dep}}`,
  durationCount: `switchyard_request_duration_seconds_count{${dep}}`,
  durationLe50ms: `switchyard_request_duration_seconds_bucket{${dep},le=0.05}`,
  ttfbCount: `switchyard_time_to_first_byte_seconds_count{${dep}}`,
  isolates: "switchyard_proxy_isolates",
} as const;

const diff = (after: Map<string, number>, before: Map<string, number>, key: string) => (after.get(key) ?? Number.NaN) - (before.get(key) ?? 0);

/** A shard's totals for DEPLOYMENT and its live isolates. */
async function shardState(k: number) {
  const r = await telemetryShardFor(env, k).report([DEPLOYMENT], false);
  return { totals: r.totals[0]!, liveIsolates: r.liveIsolates };
}

describe("sharded telemetry", () => {
  it("each isolate's flushes reach its own shard, and /-/metrics sums every shard", async () => {
    const ids = isolateIds();
    const byShard = new Map<number, number[]>();
    ids.forEach((id, i) => byShard.set(telemetryShardOf(id), [...(byShard.get(telemetryShardOf(id)) ?? []), i]));
    const shardsBefore = await Promise.all(Array.from({ length: TELEMETRY_SHARDS }, (_, k) => shardState(k)));
    const before = await metrics();

    // Two flushes per isolate, as an isolate sends one every 2 s.
    const flushOf = (i: number, sentAt: number): TelemetryFlush => ({ isolate: ids[i]!, sentAt, deltas: [deltaOf(i)] });
    await Promise.all(ids.map((_, i) => sendFlush(env, flushOf(i, 1))));
    await Promise.all(ids.map((_, i) => sendFlush(env, flushOf(i, 2))));

    // Every shard holds exactly its own isolates' counts (and nothing lands in the others).
    for (let k = 0; k < TELEMETRY_SHARDS; k++) {
      const mine = byShard.get(k) ?? [];
      const now = await shardState(k);
      const was = shardsBefore[k]!;
      expect(now.totals.requests["2xx"] - was.totals.requests["2xx"]).toBe(mine.reduce((n, i) => n + 2 * (10 + i), 0));
      expect(now.totals.retries - was.totals.retries).toBe(mine.reduce((n, i) => n + 2 * i, 0));
      expect(now.liveIsolates).toBeGreaterThanOrEqual(mine.length);
    }
    expect(byShard.size).toBeGreaterThanOrEqual(4);

    const after = await metrics();
    const sum = (f: (i: number) => number) => ids.reduce((n, _, i) => n + 2 * f(i), 0);
    expect(diff(after, before, KEYS["2xx"])).toBe(sum((i) => 10 + i));
    expect(diff(after, before, KEYS["3xx"])).toBe(sum(() => 1));
    expect(diff(after, before, KEYS["4xx"])).toBe(sum((i) => i % 3));
    expect(diff(after, before, KEYS["5xx"])).toBe(sum((i) => i % 2));
    expect(diff(after, before, KEYS.retries)).toBe(sum((i) => i));
    expect(diff(after, before, KEYS.rejections)).toBe(sum((i) => 2 * i));
    expect(diff(after, before, KEYS.ejections)).toBe(sum((i) => (i % 4 === 0 ? 1 : 0)));
    // Histograms merge bucket by bucket: 2 durations per flush, those ≤ 50 ms are 0.02·(i+1) for i ≤ 1.
    expect(diff(after, before, KEYS.durationCount)).toBe(sum(() => 2));
    expect(diff(after, before, KEYS.durationLe50ms)).toBe(2 * 2);
    expect(diff(after, before, KEYS.ttfbCount)).toBe(sum(() => 1));
    // Live isolates are summed over the shards: these isolates are new, each counted once.
    expect(diff(after, before, KEYS.isolates)).toBe(ids.length);
  });

  it("keeps a shard's totals across its restart: they are saved with each flush (issue 51)", async () => {
    const id = "workers-test-restart-isolate";
    const k = telemetryShardOf(id);
    const was = await shardState(k);
    await sendFlush(env, { isolate: id, sentAt: 1, deltas: [deltaOf(5)] });
    expect((await shardState(k)).totals.requests["2xx"] - was.totals.requests["2xx"]).toBe(15);
    // The shard's in-memory life ends; what it had saved comes back when it loads again.
    await restartTelemetry(env);
    const after = await shardState(k);
    expect(after.totals.requests["2xx"] - was.totals.requests["2xx"]).toBe(15);
    expect(after.totals.retries - was.totals.retries).toBe(5);
  });

  it("an IsolateState flushes to the shard of its isolate id", async () => {
    const state = new IsolateState(env);
    const k = telemetryShardOf(state.metrics.isolate);
    const was = await shardState(k);
    const before = await metrics();
    state.metrics.recordResponse(DEPLOYMENT, { status: 302, attempts: 3, rejections: 1, ejections: 0, ttfbMs: 5 });
    state.metrics.recordResponse(DEPLOYMENT, { status: 302, attempts: 1, rejections: 0, ejections: 1, ttfbMs: 5 });
    const background: Promise<unknown>[] = [];
    state.flushMetrics((p) => background.push(p));
    expect(background).toHaveLength(1);
    await Promise.all(background);

    const now = await shardState(k);
    expect(now.totals.requests["3xx"] - was.totals.requests["3xx"]).toBe(2);
    expect(now.totals.retries - was.totals.retries).toBe(2);
    const after = await metrics();
    expect(diff(after, before, KEYS["3xx"])).toBe(2);
    expect(diff(after, before, KEYS.retries)).toBe(2);
    expect(diff(after, before, KEYS.rejections)).toBe(1);
    expect(diff(after, before, KEYS.ejections)).toBe(1);
    expect(diff(after, before, KEYS.isolates)).toBe(1);
  });

  it("the dashboard's frame (from the global object) shows every shard's totals and windows summed", async () => {
    const ids = isolateIds();
    const authProtocol = `auth.${btoa(ADMIN_SECRET).replaceAll("+", "-").replaceAll("/", "_").replaceAll("=", "")}`;
    const open = async (): Promise<DashboardFrame> => {
      const res = await exports.default.fetch("http://edge/-/dashboard/live", {
        headers: { upgrade: "websocket", "sec-websocket-protocol": `${authProtocol}, switchyard.v1` },
      });
      expect(res.status).toBe(101);
      const ws = res.webSocket!;
      const first = new Promise<DashboardFrame>((resolve) => ws.addEventListener("message", (e) => resolve(JSON.parse(String(e.data))), { once: true }));
      ws.accept();
      const frame = await first;
      ws.close(1000, "done");
      return frame;
    };
    const of = (f: DashboardFrame) => f.deployments.find((d) => d.name === DEPLOYMENT)!;

    const before = of(await open());
    await Promise.all(ids.map((id, i) => sendFlush(env, { isolate: id, sentAt: 3, deltas: [deltaOf(i)] })));
    const after = of(await open());

    expect(after.totals.requests["2xx"] - before.totals.requests["2xx"]).toBe(ids.reduce((n, _, i) => n + 10 + i, 0));
    expect(after.totals.rejections - before.totals.rejections).toBe(ids.reduce((n, _, i) => n + 2 * i, 0));
    expect(after.totals.duration.count - before.totals.duration.count).toBe(2 * ids.length);
    // Each flush counts in the window of its arrival. Every window it can have landed in is in the later
    // frame's series (5 minutes long), so the series grew by exactly what was flushed, summed over shards.
    expect(after.series).toHaveLength(before.series.length);
    const from = after.series[0]!.t;
    const count = (s: typeof after.series, per: (p: (typeof after.series)[number]) => number) =>
      Math.round(s.filter((p) => p.t >= from).reduce((n, p) => n + per(p) * 5, 0));
    const requests = ids.reduce((n, _, i) => n + 10 + i + 1 + (i % 3) + (i % 2), 0);
    const errors = ids.reduce((n, _, i) => n + (i % 2), 0);
    expect(count(after.series, (p) => p.requestsPerSecond) - count(before.series, (p) => p.requestsPerSecond)).toBe(requests);
    expect(count(after.series, (p) => p.errorsPerSecond) - count(before.series, (p) => p.errorsPerSecond)).toBe(errors);
    // Percentiles come from the merged window histograms: some window with traffic has them.
    expect(after.series.some((p) => p.p50Ms !== null && p.p99Ms !== null && p.p99Ms >= p.p50Ms)).toBe(true);
  });
});
