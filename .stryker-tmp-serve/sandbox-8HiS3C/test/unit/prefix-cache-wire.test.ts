/** The `prefix_cache` field of reports and node report entries: its schema, its bounds, and what a report with one weighs. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { buildCacheSummary, type CacheSummaryWire } from "../../src/prefix/cache-summary.ts";
import {
  MAX_CACHE_SUMMARY_BITS_CHARS,
  MAX_CACHE_SUMMARY_KEYS,
  MAX_NODE_REPLICAS,
  MAX_NODE_REPORT_BYTES,
  MAX_NODE_REPORT_SUMMARY_BYTES,
  MAX_REPORT_WITH_SUMMARY_BYTES,
  NodeReportMessage,
  PROTOCOL_VERSION,
  PrefixCacheSummary,
  ReportMessage,
  SUMMARY_MAX_AGE_MS,
  SUMMARY_RESEND_MS,
  type NodeReportEntry,
} from "../../src/protocol/index.ts";
import { nodeReportBatches, summaryFields } from "../../src/replica/node-reporter.ts";

/** `blocks` distinct cached blocks: the keys of one long prompt per 100 blocks. */
function keysOf(blocks: number, salt = 0): string[] {
  const out: string[] = [];
  for (let p = 0; out.length < blocks; p++) {
    const tokens = Array.from({ length: 100 * 16 }, (_, i) => (i * 7 + p * 131 + salt * 9973) % 50_000);
    out.push(...blockKeys(tokens).slice(0, blocks - out.length));
  }
  return out;
}

const report = (prefix_cache?: CacheSummaryWire | null) => ({
  protocol: PROTOCOL_VERSION,
  deployment: "llm",
  replica_id: "llm-gpu-7-3",
  seq: 1_764_511_200_123,
  ts: 1_764_511_200_123,
  state: "ready",
  ongoing: 17,
  queued: 3,
  kv_cache_usage: 0.8125,
  models: ["Qwen/Qwen3-8B"],
  loading: [],
  node: "gpu-7",
  ...(prefix_cache !== undefined && { prefix_cache }),
});

const bytes = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).byteLength;

describe("prefix_cache limits", () => {
  it("bound what the summary builder makes: the largest filter's base64 and its key cap", () => {
    const full = buildCacheSummary(keysOf(20_000), 16);
    expect(full.bits.length).toBe(MAX_CACHE_SUMMARY_BITS_CHARS);
    expect(full.n).toBe(MAX_CACHE_SUMMARY_KEYS);
    expect(SUMMARY_MAX_AGE_MS).toBeGreaterThan(3 * SUMMARY_RESEND_MS);
  });

  it("a report carrying the summary of 10,000 cached blocks stays within 16 KiB, and validates", () => {
    const summary = buildCacheSummary(keysOf(10_000), 16);
    const msg = report(summary);
    const size = bytes(msg);
    expect(size).toBeLessThanOrEqual(MAX_REPORT_WITH_SUMMARY_BYTES);
    expect(MAX_REPORT_WITH_SUMMARY_BYTES).toBe(16 * 1024);
    console.log(`report with a 10,000-block summary: ${size} bytes (summary ${summary.bits.length} base64 chars, n ${summary.n}, k ${summary.k})`);
    const parsed = ReportMessage.parse(msg);
    expect(parsed.prefix_cache).toEqual(summary);
  });

  it("takes null (no summary any more) and no field (unchanged)", () => {
    expect(ReportMessage.parse(report(null)).prefix_cache).toBeNull();
    expect("prefix_cache" in ReportMessage.parse(report())).toBe(false);
  });

  it("refuses a summary beyond its bounds or malformed", () => {
    const ok = buildCacheSummary(keysOf(100), 16);
    const refuses = (s: unknown) => expect(ReportMessage.safeParse({ ...report(), prefix_cache: s }).success).toBe(false);
    refuses({ ...ok, v: 2 });
    refuses({ ...ok, k: 0 });
    refuses({ ...ok, k: 17 });
    refuses({ ...ok, n: MAX_CACHE_SUMMARY_KEYS + 1 });
    refuses({ ...ok, block: 0 });
    refuses({ ...ok, extra: 1 });
    refuses({ ...ok, bits: "not base64!" });
    // 12 KiB: over the largest filter.
    refuses({ ...ok, bits: btoa("\0".repeat(12 * 1024)) });
    // 12 bytes: not a multiple of 8.
    refuses({ ...ok, bits: btoa("\0".repeat(12)) });
    refuses({ ...ok, bits: "" });
    expect(PrefixCacheSummary.safeParse(ok).success).toBe(true);
    expect(PrefixCacheSummary.safeParse({ ...ok, bits: btoa("\0".repeat(8)) }).success).toBe(true);
  });

  it("rides in node report entries too", () => {
    const summary = buildCacheSummary(keysOf(50), 16);
    const { protocol: _p, deployment: _d, node: _n, ...entry } = report(summary);
    const msg = { protocol: PROTOCOL_VERSION, deployment: "llm", node: "gpu-7", reports: [entry, { ...entry, replica_id: "llm-gpu-7-4", prefix_cache: null }] };
    const parsed = NodeReportMessage.parse(msg);
    expect(parsed.reports[0]!.prefix_cache).toEqual(summary);
    expect(parsed.reports[1]!.prefix_cache).toBeNull();
  });

  it("a node of 64 replicas whose caches all changed still sends one node report within MAX_NODE_REPORT_BYTES; the rest follow", () => {
    const summaries = Array.from({ length: MAX_NODE_REPLICAS }, (_, i) => buildCacheSummary(keysOf(10_000, i), 16));
    const { protocol: _p, deployment: _d, node: _n, ...base } = report();
    let pending = summaries.map((field, i) => ({ field: field as CacheSummaryWire | undefined, since: 1_000 + i }));
    const rounds: number[] = [];
    for (let round = 0; pending.some((p) => p.field !== undefined); round++) {
      const fields = summaryFields(pending);
      const entries: NodeReportEntry[] = fields.map((f, i) => ({ ...base, replica_id: `gpu-7-${i}`, ...(f !== undefined && { prefix_cache: f }) }) as NodeReportEntry);
      const batches = nodeReportBatches("llm", "gpu-7", entries);
      expect(batches).toHaveLength(1);
      expect(bytes(batches[0]!.message)).toBeLessThanOrEqual(MAX_NODE_REPORT_BYTES);
      expect(NodeReportMessage.safeParse(batches[0]!.message).success).toBe(true);
      const sent = fields.filter((f) => f !== undefined).length;
      expect(sent).toBeGreaterThan(0);
      rounds.push(sent);
      // What went is accepted; the rest stay due, and go first next time.
      pending = pending.map((p, i) => (fields[i] !== undefined ? { field: undefined, since: undefined } : p)) as typeof pending;
      expect(round).toBeLessThan(10);
    }
    console.log(`64 changed 10,000-block summaries: node reports carry ${rounds.join(" + ")} (budget ${MAX_NODE_REPORT_SUMMARY_BYTES} bytes)`);
    expect(rounds.reduce((a, b) => a + b, 0)).toBe(MAX_NODE_REPLICAS);
    expect(rounds.length).toBeLessThanOrEqual(6);
  });
});
