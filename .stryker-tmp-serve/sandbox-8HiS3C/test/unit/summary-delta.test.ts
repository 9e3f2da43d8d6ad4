/**
 * Prefix-cache summaries through the state plane: the routing object keeps each
 * replica's latest (memory only), answers carry only the summaries the asker
 * lacks within a budget, and relays and isolates hold what they were sent
 * (src/state/summary-delta.ts, src/state/membership.ts, src/proxy/serve/view.ts).
 */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { CacheSummary, buildCacheSummary, type CacheSummaryWire } from "../../src/prefix/cache-summary.ts";
import { SUMMARY_MAX_AGE_MS, type ReplicaView, type RoutingSnapshot } from "../../src/protocol/index.ts";
import { T0, registerMessage, reportMessage } from "../fixtures/control-messages.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { Membership } from "../../src/state/membership.ts";
import { mergeSnapshots } from "../../src/state/routing-shards.ts";
import { agedSnapshot, boundedView } from "../../src/state/bounded-view.ts";
import {
  DIGEST_CHARS,
  SummaryPool,
  answerSummaryBytes,
  decodeDigests,
  encodeDigests,
  summaryBytes,
  summaryDelta,
  summaryDigest,
} from "../../src/state/summary-delta.ts";

const promptKeys = (seed: number, blocks = 8) => blockKeys(Array.from({ length: blocks * 16 }, (_, i) => (i * 31 + seed * 7919) % 50_000));
const summaryOf = (seed: number, blocks = 8) => buildCacheSummary(promptKeys(seed, blocks), 16);

const reg = registerMessage;
const rep = (id: string, seq: number, prefix_cache?: CacheSummaryWire | null) => reportMessage(id, seq, prefix_cache !== undefined ? { prefix_cache } : {});

function view(id: string, summary?: CacheSummaryWire, digestOnly = false): ReplicaView {
  return {
    id,
    url: `http://${id}.test:8000`,
    epoch: 1,
    load: { seq: 1, ongoing: 0, queued: 0, max: 8, state: "ready" },
    models: [],
    loading: [],
    expiresInMs: 2_000,
    ...(summary && { cacheDigest: summaryDigest(summary), ...(!digestOnly && { cache: summary }) }),
  };
}
const snap = (...replicas: ReplicaView[]): RoutingSnapshot => ({ deployment: "llm", replicas });

describe("summaryDigest", () => {
  it("is 16 hex digits, the same for the same summary, different for another", () => {
    const d = summaryDigest(summaryOf(1));
    expect(d).toMatch(/^[0-9a-f]{16}$/);
    expect(summaryDigest(summaryOf(1))).toBe(d);
    expect(summaryDigest(summaryOf(2))).not.toBe(d);
    expect(summaryDigest({ ...summaryOf(1), n: 7 })).not.toBe(d);
  });

  it("digests travel concatenated and come back as a set; a malformed tail is ignored", () => {
    const ds = [summaryDigest(summaryOf(1)), summaryDigest(summaryOf(2))];
    const have = encodeDigests(ds);
    expect(have.length).toBe(2 * DIGEST_CHARS);
    expect([...decodeDigests(`${have}abc`)]).toEqual(ds);
    expect(decodeDigests("").size).toBe(0);
  });
});

describe("Membership keeps summaries", () => {
  it("keeps the latest summary of a report in memory and shows it in the snapshot with its digest", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 1, summaryOf(1)), T0);
    const [a] = m.snapshot("llm", T0).replicas;
    expect(a!.cache).toEqual(summaryOf(1));
    expect(a!.cacheDigest).toBe(summaryDigest(summaryOf(1)));
  });

  it("a report without the field leaves it; null drops it; a register drops it", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 1, summaryOf(1)), T0);
    m.report(rep("a", 2), T0 + 1_000);
    expect(m.snapshot("llm", T0 + 1_000).replicas[0]!.cache).toEqual(summaryOf(1));
    m.report(rep("a", 3, null), T0 + 2_000);
    expect("cacheDigest" in m.snapshot("llm", T0 + 2_000).replicas[0]!).toBe(false);
    m.report(rep("a", 4, summaryOf(2)), T0 + 3_000);
    m.register(reg("a"), T0 + 4_000);
    expect("cache" in m.snapshot("llm", T0 + 4_000).replicas[0]!).toBe(false);
  });

  it("a report older than the load held (stale_seq) does not replace the summary", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 5, summaryOf(1)), T0);
    expect(m.report(rep("a", 4, summaryOf(2)), T0 + 100)).toBe("stale_seq");
    expect(m.snapshot("llm", T0 + 100).replicas[0]!.cache).toEqual(summaryOf(1));
  });

  it("a summary not sent again for SUMMARY_MAX_AGE_MS leaves the snapshot; a resend keeps it", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 1, summaryOf(1)), T0);
    for (let t = 1_000; t < SUMMARY_MAX_AGE_MS + 5_000; t += 1_000) m.report(rep("a", 1), T0 + t);
    expect("cache" in m.snapshot("llm", T0 + SUMMARY_MAX_AGE_MS + 4_000).replicas[0]!).toBe(false);
    m.report(rep("a", 1, summaryOf(1)), T0 + SUMMARY_MAX_AGE_MS + 5_000);
    expect(m.snapshot("llm", T0 + SUMMARY_MAX_AGE_MS + 5_000).replicas[0]!.cache).toEqual(summaryOf(1));
  });

  it("snapshots of shards merge with their summaries, and aging and bounded views keep them", () => {
    const a = new Membership();
    const b = new Membership();
    a.register(reg("a"), T0);
    b.register(reg("b"), T0);
    a.report(rep("a", 1, summaryOf(1)), T0);
    b.report(rep("b", 1, summaryOf(2)), T0);
    const merged = mergeSnapshots("llm", [a.snapshot("llm", T0), b.snapshot("llm", T0)]);
    const aged = boundedView(agedSnapshot(merged, 100), 7, T0);
    expect(Object.fromEntries(aged.replicas.map((r) => [r.id, r.cache]))).toEqual({ a: summaryOf(1), b: summaryOf(2) });
  });
});

describe("summaryDelta", () => {
  it("leaves out the summaries the asker holds, keeping every digest", () => {
    const s = snap(view("a", summaryOf(1)), view("b", summaryOf(2)), view("c"));
    const out = summaryDelta(s, new Set([summaryDigest(summaryOf(1))]), 1 << 20);
    expect(out.replicas.map((r) => [r.id, r.cacheDigest !== undefined, r.cache !== undefined])).toEqual([
      ["a", true, false],
      ["b", true, true],
      ["c", false, false],
    ]);
    // The input is not changed.
    expect(s.replicas[0]!.cache).toBeDefined();
  });

  it("carries a summary shared by several replicas once", () => {
    const out = summaryDelta(snap(view("a", summaryOf(1)), view("b", summaryOf(1))), new Set(), 1 << 20);
    expect(out.replicas.filter((r) => r.cache).length).toBe(1);
  });

  it("stays within its byte budget and, from successive rotations, reaches every replica", () => {
    const replicas = Array.from({ length: 10 }, (_, i) => view(`r${i}`, summaryOf(i, 50)));
    const each = summaryBytes(replicas[0]!.cache!);
    const budget = 3 * each;
    const reached = new Set<string>();
    for (let rotation = 0; rotation < 4; rotation++) {
      const out = summaryDelta(snap(...replicas), new Set(), budget, rotation * 3);
      expect(answerSummaryBytes(out)).toBeLessThanOrEqual(budget);
      for (const r of out.replicas) if (r.cache) reached.add(r.id);
    }
    expect(reached.size).toBe(10);
  });

  it("a budget of 0 sends digests only", () => {
    const out = summaryDelta(snap(view("a", summaryOf(1))), new Set(), 0);
    expect(out.replicas[0]!.cacheDigest).toBeDefined();
    expect(out.replicas[0]!.cache).toBeUndefined();
  });
});

describe("SummaryPool", () => {
  it("parses a summary once per new digest, and tells the hop before what it holds", () => {
    const pool = new SummaryPool((w) => CacheSummary.parse(w));
    pool.apply([view("a", summaryOf(1)), view("b", summaryOf(2))]);
    expect(pool.parses).toBe(2);
    expect(decodeDigests(pool.have())).toEqual(new Set([summaryDigest(summaryOf(1)), summaryDigest(summaryOf(2))]));
    // Unchanged: digests only, nothing parsed.
    pool.apply([view("a", summaryOf(1), true), view("b", summaryOf(2), true)]);
    expect(pool.parses).toBe(2);
    expect(pool.get("a")!.value.has(promptKeys(1)[3]!)).toBe(true);
  });

  it("keeps the old summary while a new digest comes without its summary (over budget), takes it when it comes", () => {
    const pool = new SummaryPool((w) => CacheSummary.parse(w));
    pool.apply([view("a", summaryOf(1))]);
    pool.apply([view("a", summaryOf(2), true)]);
    expect(pool.get("a")!.digest).toBe(summaryDigest(summaryOf(1)));
    expect(decodeDigests(pool.have()).has(summaryDigest(summaryOf(2)))).toBe(false);
    pool.apply([view("a", summaryOf(2))]);
    expect(pool.get("a")!.digest).toBe(summaryDigest(summaryOf(2)));
  });

  it("forgets a replica that reports none, or is no longer in the answer", () => {
    const pool = new SummaryPool((w) => CacheSummary.parse(w));
    pool.apply([view("a", summaryOf(1)), view("b", summaryOf(2))]);
    pool.apply([view("a")]);
    expect(pool.size).toBe(0);
  });

  it("shares a digest between replicas: the one carrying it is parsed, the other finds it", () => {
    const pool = new SummaryPool((w) => CacheSummary.parse(w));
    pool.apply([view("b", summaryOf(1), true), view("a", summaryOf(1))]);
    expect(pool.parses).toBe(1);
    expect(pool.get("b")!.value).toBe(pool.get("a")!.value);
  });

  it("a summary that does not parse is not held", () => {
    const pool = new SummaryPool((w) => CacheSummary.parse(w));
    pool.apply([view("a", { ...summaryOf(1), k: 99 })]);
    expect(pool.size).toBe(0);
  });

  it("within its byte bound, declines new replicas' summaries but tells them as held (so they are not sent again)", () => {
    const each = summaryBytes(summaryOf(1));
    const pool = new SummaryPool<CacheSummaryWire>((w) => w, 2 * each);
    pool.apply([view("a", summaryOf(1)), view("b", summaryOf(2)), view("c", summaryOf(3))]);
    expect(pool.size).toBe(2);
    expect(pool.bytes).toBeLessThanOrEqual(2 * each);
    expect(decodeDigests(pool.have()).size).toBe(3);
  });
});

describe("RoutingView fills ReplicaEntry.cache", () => {
  it("parses a summary only when its digest changed, keeps it on unchanged snapshots, drops it when the replica reports none", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(view("a", summaryOf(1)), view("b")), T0);
    expect(v.get("a")!.cache!.matchedBlocks(promptKeys(1), 16)).toBe(8);
    expect(v.get("b")!.cache).toBeUndefined();
    expect(v.summaryParses).toBe(1);
    const have = decodeDigests(v.cacheDigests());
    // What a relay answers now: digest only.
    for (let i = 1; i <= 4; i++) v.applySnapshot(summaryDelta(snap(view("a", summaryOf(1)), view("b")), have, 1 << 20), T0 + i * 250);
    expect(v.summaryParses).toBe(1);
    expect(v.get("a")!.cache).toBeDefined();
    v.applySnapshot(snap(view("a", summaryOf(2))), T0 + 2_000);
    expect(v.summaryParses).toBe(2);
    expect(v.get("a")!.cache!.matchedBlocks(promptKeys(2), 16)).toBe(8);
    v.applySnapshot(snap(view("a")), T0 + 2_250);
    expect(v.get("a")!.cache).toBeUndefined();
    expect(v.describe(T0 + 2_250)[0]!.cacheKeys).toBeUndefined();
  });

  it("describe() shows each replica's summary key count", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(view("a", summaryOf(1, 20))), T0);
    expect(v.describe(T0)[0]!.cacheKeys).toBe(20);
  });
});
