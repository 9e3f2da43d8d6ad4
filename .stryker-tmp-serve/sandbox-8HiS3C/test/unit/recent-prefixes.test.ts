/** One balancer instance's memory of the prefixes it sent (src/policy/recent-prefixes.ts). */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { RECENT_PREFIX_STRIDE, RECENT_PREFIX_TTL_MS, RecentPrefixes, keptKeys } from "../../src/policy/recent-prefixes.ts";
import { MAX_DISPATCH_NOTE_KEYS } from "../../src/protocol/limits.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

const tokens = (n: number, seed: number) => {
  const rnd = mulberry32(seed);
  return Array.from({ length: n }, () => Math.floor(rnd() * 97));
};

describe("RecentPrefixes", () => {
  const system = tokens(16 * 40, 1);
  const a = blockKeys([...system, ...tokens(16 * 5, 2)]);

  it("holds the whole prompt for the replica it was sent to, and nothing for the others", () => {
    const m = new RecentPrefixes();
    m.record("r1", a, T0);
    expect(m.held(a, T0)).toEqual(new Map([["r1", a.length]]));
    // A longer prompt that extends it (the next turn) holds all of it.
    const next = blockKeys([...system, ...tokens(16 * 5, 2), ...tokens(16 * 9, 3)]);
    expect(next.slice(0, a.length)).toEqual(a);
    expect(m.held(next, T0).get("r1")).toBe(a.length);
  });

  it("drops the records a replica's newer word supersedes (notBefore, per replica), and keeps the later ones", () => {
    const m = new RecentPrefixes();
    m.record("r1", a, T0);
    m.record("r2", a, T0 + 5_000);
    // r1's summary came after its dispatch: the summary says what it holds, not the record.
    expect(m.held(a, T0 + 6_000, new Map([["r1", T0 + 1]]))).toEqual(new Map([["r2", a.length]]));
    // A record made after the cutoff still counts; a cutoff for another replica changes nothing.
    expect(m.held(a, T0 + 6_000, new Map([["r1", T0], ["r2", T0 + 4_000]]))).toEqual(new Map([["r1", a.length], ["r2", a.length]]));
  });

  it("finds a shared prefix within a stride: another question after the same system prompt", () => {
    const m = new RecentPrefixes();
    m.record("r1", a, T0);
    const b = blockKeys([...system, ...tokens(16 * 7, 9)]);
    // 40 shared blocks; the kept stride keys are at 16 and 32 blocks.
    const held = m.held(b, T0).get("r1")!;
    expect(held).toBe(Math.floor(40 / RECENT_PREFIX_STRIDE) * RECENT_PREFIX_STRIDE);
    expect(40 - held).toBeLessThan(RECENT_PREFIX_STRIDE);
  });

  it("keeps, per replica, the deepest prefix each holds", () => {
    const m = new RecentPrefixes();
    m.record("r1", a, T0);
    m.record("r2", a.slice(0, 20), T0);
    expect(m.held(a, T0)).toEqual(new Map([["r1", a.length], ["r2", 20]]));
  });

  it("forgets after the TTL", () => {
    const m = new RecentPrefixes();
    m.record("r1", a, T0);
    expect(m.held(a, T0 + RECENT_PREFIX_TTL_MS - 1).get("r1")).toBe(a.length);
    expect(m.held(a, T0 + RECENT_PREFIX_TTL_MS).size).toBe(0);
    // Expired keys are dropped on the next record.
    m.record("r2", blockKeys(tokens(32, 5)), T0 + RECENT_PREFIX_TTL_MS);
    expect(m.size).toBe(1);
  });

  it("is bounded: the least recently sent prefixes go first", () => {
    const m = new RecentPrefixes(10);
    const prompts = Array.from({ length: 20 }, (_, i) => blockKeys(tokens(16, 100 + i)));
    prompts.forEach((keys, i) => m.record(`r${i}`, keys, T0));
    expect(m.size).toBe(10);
    expect(m.held(prompts[0]!, T0).size).toBe(0);
    expect(m.held(prompts[19]!, T0).get("r19")).toBe(1);
  });

  it("records nothing for a prompt without keys", () => {
    const m = new RecentPrefixes();
    m.record("r1", [], T0);
    expect(m.size).toBe(0);
    expect(m.held([], T0).size).toBe(0);
  });

  it("keeps every stride's key and the last, at most MAX_DISPATCH_NOTE_KEYS of them", () => {
    expect(keptKeys([])).toEqual([]);
    expect(keptKeys(a)).toEqual([a[15], a[31], a[a.length - 1]]);
    const long = blockKeys(tokens(16 * RECENT_PREFIX_STRIDE * 100, 11));
    const kept = keptKeys(long);
    expect(kept).toHaveLength(MAX_DISPATCH_NOTE_KEYS);
    expect(kept[0]).toBe(long[RECENT_PREFIX_STRIDE - 1]);
    expect(kept.at(-1)).toBe(long.at(-1));
  });

  it("learns kept keys (a peer's dispatch) as it learns its own", () => {
    const own = new RecentPrefixes();
    const peer = new RecentPrefixes();
    own.record("r1", a, T0);
    peer.recordKept("r1", keptKeys(a), T0);
    expect(peer.held(a, T0)).toEqual(own.held(a, T0));
  });
});
