/** The Bloom-filter prefix-cache summary a replica reports. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { CacheSummary, SUMMARY_MAX_FILTER_BYTES, buildCacheSummary, type CacheSummaryWire } from "../../src/prefix/cache-summary.ts";
import { mulberry32 } from "../../src/seeded-random.ts";

const tokens = (n: number, seed: number) => {
  const rnd = mulberry32(seed);
  return Array.from({ length: n }, () => Math.floor(rnd() * 97));
};

/** `count` distinct keys: chains of 100 blocks from different seeds. */
function manyKeys(count: number, seed = 1): string[] {
  const out: string[] = [];
  for (let s = seed; out.length < count; s++) out.push(...blockKeys(tokens(1600, s)));
  return out.slice(0, count);
}

describe("buildCacheSummary / CacheSummary", () => {
  it("holds every key it was built from (no false negatives)", () => {
    const keys = manyKeys(2000);
    const s = CacheSummary.parse(buildCacheSummary(keys, 16))!;
    expect(s.keys).toBe(2000);
    for (const k of keys) expect(s.has(k)).toBe(true);
  });

  it("keeps false positives near 1 % while the filter has room", () => {
    const s = CacheSummary.parse(buildCacheSummary(manyKeys(5000), 16))!;
    const others = manyKeys(20_000, 10_000);
    const fp = others.filter((k) => s.has(k)).length / others.length;
    expect(fp).toBeLessThan(0.02);
  });

  it("stays within its byte bound at 10,000 blocks, and keeps the most recent keys when over capacity", () => {
    const keys = manyKeys(20_000);
    const wire = buildCacheSummary(keys, 16);
    expect(atob(wire.bits).length).toBeLessThanOrEqual(SUMMARY_MAX_FILTER_BYTES);
    expect(JSON.stringify(buildCacheSummary(keys.slice(0, 10_000), 16)).length).toBeLessThan(15.5 * 1024);
    const s = CacheSummary.parse(wire)!;
    expect(s.keys).toBeLessThan(20_000);
    for (const k of keys.slice(0, s.keys)) expect(s.has(k)).toBe(true);
  });

  it("matches the longest held prefix of a prompt's keys, and nothing across block sizes", () => {
    const prompt = blockKeys(tokens(800, 3)); // 50 blocks
    const s = CacheSummary.parse(buildCacheSummary(prompt.slice(0, 30), 16))!;
    expect(s.matchedBlocks(prompt, 16)).toBe(30);
    expect(s.matchedBlocks(prompt.slice(0, 10), 16)).toBe(10);
    expect(s.matchedBlocks(prompt, 32)).toBe(0);
    expect(s.matchedBlocks(blockKeys(tokens(800, 4)), 16)).toBeLessThanOrEqual(1);
  });

  it("an empty cache matches nothing", () => {
    const s = CacheSummary.parse(buildCacheSummary([], 16))!;
    expect(s.keys).toBe(0);
    expect(s.matchedBlocks(manyKeys(10), 16)).toBe(0);
  });

  it("refuses malformed wire forms instead of throwing", () => {
    const good = buildCacheSummary(manyKeys(10), 16);
    const bad: CacheSummaryWire[] = [
      { ...good, bits: "%%%" },
      { ...good, bits: btoa("abc") },
      { ...good, k: 0 },
      { ...good, k: 99 },
      { ...good, v: 2 as 1 },
      { ...good, bits: btoa("x".repeat(SUMMARY_MAX_FILTER_BYTES + 8)) },
    ];
    for (const w of bad) expect(CacheSummary.parse(w)).toBeUndefined();
  });
});
