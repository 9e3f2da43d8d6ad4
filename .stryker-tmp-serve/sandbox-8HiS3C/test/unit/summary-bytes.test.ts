/**
 * What prefix-cache summaries cost on the state plane, measured on the code that
 * carries them: routing shards (Membership, bounded samples, summaryDelta), the
 * relay's merge and pool (mergeSnapshots, SummaryPool, withHeldSummaries), and
 * one isolate's RoutingView asking every 250 ms with the digests it holds. Bytes
 * are V8's structured-clone serialization (what a Durable Object RPC carries).
 * Each replica reports the largest summary (a 10,000-block cache: 11 KiB of
 * filter, 15 KiB of base64), the worst case. Printed as a table (docs/scaling.md
 * §6 quotes it) and bounded by assertions.
 */
// @ts-nocheck

import { serialize } from "node:v8";
import { describe, expect, it } from "vitest";
import type { CacheSummaryWire } from "../../src/prefix/cache-summary.ts";
import { MAX_CACHE_SUMMARY_FILTER_BYTES, PROTOCOL_VERSION, type RoutingSnapshot } from "../../src/protocol/index.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { agedSnapshot, boundedView } from "../../src/state/bounded-view.ts";
import { Membership } from "../../src/state/membership.ts";
import { RELAY_MAX_REPLICAS, RELAY_TTL_MS } from "../../src/state/relay-cadence.ts";
import { mergeSnapshots, shardOfNode } from "../../src/state/routing-shards.ts";
import {
  RELAY_MAX_SUMMARY_BYTES,
  RELAY_SUMMARY_BYTES,
  SummaryPool,
  VIEW_SUMMARY_BYTES,
  answerSummaryBytes,
  decodeDigests,
  summaryDelta,
  withHeldSummaries,
} from "../../src/state/summary-delta.ts";
import { RELAYED_SNAPSHOT_TTL_MS } from "../../src/proxy/serve/view.ts";

const T0 = 1_764_600_000_000;

/** A seeded xorshift, for filters that look like full ones (about half their bits set). */
function rng(seed: number): () => number {
  let x = seed | 1;
  return () => {
    x ^= x << 13;
    x ^= x >>> 17;
    x ^= x << 5;
    return x >>> 0;
  };
}

function fullSummary(seed: number): CacheSummaryWire {
  const next = rng(seed * 2654435761);
  const bytes = new Uint8Array(MAX_CACHE_SUMMARY_FILTER_BYTES);
  for (let i = 0; i < bytes.length; i += 4) new DataView(bytes.buffer).setUint32(i, next());
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x2000) s += String.fromCharCode(...bytes.subarray(i, i + 0x2000));
  return { v: 1, k: 6, n: 10_000, block: 16, bits: btoa(s) };
}

const size = (v: unknown) => serialize(v).byteLength;

interface Plane {
  shards: Membership[];
  ids: string[];
  version: number[];
}

function plane(replicas: number, shardCount: number): Plane {
  const shards = Array.from({ length: shardCount }, () => new Membership());
  const ids = Array.from({ length: replicas }, (_, i) => `llm-${i}`);
  const p: Plane = { shards, ids, version: ids.map(() => 0) };
  ids.forEach((id, i) => {
    const m = shards[shardOfNode(id, shardCount)]!;
    m.register({ protocol: PROTOCOL_VERSION, deployment: "llm", replica_id: id, url: `http://10.0.${i >> 8}.${i & 255}:8000`, max_ongoing_requests: 64 }, T0);
  });
  return p;
}

/** Every replica reports (a heartbeat), those in `changed` with a new summary; `withSummaries` false: none ever. */
function reportAll(p: Plane, now: number, changed: ReadonlySet<number>, withSummaries = true): void {
  p.ids.forEach((id, i) => {
    if (changed.has(i)) p.version[i]!++;
    const m = p.shards[shardOfNode(id, p.shards.length)]!;
    m.report(
      {
        protocol: PROTOCOL_VERSION,
        deployment: "llm",
        replica_id: id,
        seq: now - T0,
        ts: now,
        state: "ready",
        ongoing: i % 7,
        queued: 0,
        kv_cache_usage: 0.5,
        models: [],
        loading: [],
        ...(withSummaries && (changed.has(i) || now === T0) && { prefix_cache: fullSummary(i * 1_000 + p.version[i]!) }),
      },
      now,
    );
  });
}

class Relay {
  readonly pool = new SummaryPool<CacheSummaryWire>((w) => w, RELAY_MAX_SUMMARY_BYTES);
  merged: RoutingSnapshot = { deployment: "llm", replicas: [] };
  fetchedAt = 0;
  calls = 0;
  /** Bytes the shards sent the relay, per refresh. */
  inBytes: number[] = [];

  refresh(p: Plane, now: number): void {
    const have = this.pool.have();
    const max = Math.ceil(RELAY_MAX_REPLICAS / p.shards.length);
    const parts = p.shards.map((m, k) =>
      summaryDelta(boundedView(m.snapshot("llm", now), 99, now, max, Math.ceil(max / 4)), decodeDigests(have), Math.floor(RELAY_SUMMARY_BYTES / p.shards.length), this.calls + k),
    );
    this.inBytes.push(parts.reduce((n, part) => n + size(part), 0));
    const merged = mergeSnapshots("llm", parts);
    this.pool.apply(merged.replicas);
    this.merged = withHeldSummaries(merged, this.pool);
    this.fetchedAt = now;
  }

  view(seed: number, have: string, now: number): RoutingSnapshot {
    this.calls++;
    return summaryDelta(boundedView(agedSnapshot(this.merged, now - this.fetchedAt), seed, now), decodeDigests(have), VIEW_SUMMARY_BYTES, this.calls);
  }
}

interface Row {
  replicas: number;
  noSummaries: number;
  naive: number;
  first: number;
  fillRefreshes: number;
  steady: number;
  churn: number;
  ask: number;
  relayIn: number;
  parses: number;
}

/** One deployment of `n` replicas behind a relay, one isolate refreshing every 250 ms for `seconds` of each phase. */
function measure(n: number): Row {
  const shardCount = n >= 1_000 ? 3 : 1;
  const p = plane(n, shardCount);
  let now = T0;
  reportAll(p, now, new Set());
  const relay = new Relay();
  const view = new RoutingView();
  const refreshes: number[] = [];
  const tick = () => {
    if (now - relay.fetchedAt >= RELAY_TTL_MS) relay.refresh(p, now);
    const have = view.cacheDigests();
    const answer = relay.view(7, have, now);
    refreshes.push(size(answer));
    expect(answerSummaryBytes(answer)).toBeLessThanOrEqual(VIEW_SUMMARY_BYTES);
    view.applySnapshot(answer, now);
    now += RELAYED_SNAPSHOT_TTL_MS;
    if ((now - T0) % 1_000 === 0) reportAll(p, now, new Set());
    return have.length;
  };

  // The same fleet without summaries, for the base, and what sending every summary every time would weigh.
  const bare = plane(n, shardCount);
  reportAll(bare, T0, new Set(), false);
  const bareRelay = new Relay();
  bareRelay.refresh(bare, T0);
  const noSummaries = size(bareRelay.view(7, "", T0));
  const naive = size(mergeSnapshots("llm", p.shards.map((m) => m.snapshot("llm", now))));

  // Fill: from an empty view until it holds every replica's summary.
  tick();
  const first = refreshes[0]!;
  let fillRefreshes = 1;
  while ([...Array(n).keys()].some((i) => view.get(`llm-${i}`)?.cache === undefined)) {
    tick();
    fillRefreshes++;
    expect(fillRefreshes).toBeLessThan(400);
  }
  // Steady: nothing changes for 5 s.
  const steadyFrom = refreshes.length;
  let ask = 0;
  for (let i = 0; i < 20; i++) ask = Math.max(ask, tick());
  const steady = Math.max(...refreshes.slice(steadyFrom));
  // Churn: a tenth of the replicas' caches change every second, for 10 s.
  const churnFrom = refreshes.length;
  const parsesBefore = view.summaryParses;
  const tenth = Math.max(1, Math.round(n / 10));
  for (let s = 0; s < 10; s++) {
    const changed = new Set(Array.from({ length: tenth }, (_, j) => (s * tenth + j) % n));
    reportAll(p, now, changed);
    for (let i = 0; i < 4; i++) tick();
  }
  const churnRefreshes = refreshes.slice(churnFrom);
  const churn = churnRefreshes.reduce((a, b) => a + b, 0) / churnRefreshes.length;
  return {
    replicas: n,
    noSummaries,
    naive,
    first,
    fillRefreshes,
    steady,
    churn,
    ask,
    relayIn: Math.max(...relay.inBytes.slice(-10)),
    parses: view.summaryParses - parsesBefore,
  };
}

const kb = (b: number) => `${(b / 1024).toFixed(1)} KiB`;

describe("summary bytes per isolate refresh (relay → isolate, every 250 ms)", () => {
  const rows: Row[] = [];

  it.each([4, 100, 1_000])("%i replicas with full summaries", (n) => {
    const r = measure(n);
    rows.push(r);
    // Unchanged summaries are not sent again: a steady refresh weighs the bare view plus ~30 bytes of digest per replica.
    expect(r.steady).toBeLessThanOrEqual(r.noSummaries + 40 * n + 256);
    // Never more than the budget's worth of summaries in one refresh.
    expect(r.first).toBeLessThanOrEqual(r.noSummaries + VIEW_SUMMARY_BYTES + 40 * n + 4_096);
    expect(r.churn).toBeLessThanOrEqual(r.noSummaries + VIEW_SUMMARY_BYTES + 40 * n + 4_096);
    // The isolate's ask: 16 bytes per summary it holds.
    expect(r.ask).toBe(16 * n);
    // Parsed once per change it received: a tenth of the fleet each second for 10 s.
    expect(r.parses).toBeLessThanOrEqual(n * 1 + 10 * Math.max(1, Math.round(n / 10)));
    // The relay is sent what it lacks: at most its refresh budget (plus the digests and the bare snapshot).
    expect(r.relayIn).toBeLessThanOrEqual(r.noSummaries + RELAY_SUMMARY_BYTES + 64 * n + 8_192);
    if (n === 1_000) expect(r.naive).toBeGreaterThan(14 * 1024 * 1024);
  });

  it("prints the table", () => {
    const lines = [
      "| replicas | view, no summaries | every summary every time | first refresh | refreshes to fill | steady refresh | 10 %/s churn, mean | isolate's ask | relay in, per refresh |",
      "|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
      ...rows.map(
        (r) =>
          `| ${r.replicas} | ${kb(r.noSummaries)} | ${kb(r.naive)} | ${kb(r.first)} | ${r.fillRefreshes} | ${kb(r.steady)} | ${kb(r.churn)} | ${kb(r.ask)} | ${kb(r.relayIn)} |`,
      ),
    ];
    console.log(lines.join("\n"));
    expect(rows).toHaveLength(3);
  });
});
