/** Chained prefix block keys: what the edge, the replica and the agent must agree on. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { BLOCK_TOKENS, bigIntToKey, blockKey, blockKeys, extraLanes, keyLanes, keyToBigInt } from "../../src/prefix/block-keys.ts";
import { mulberry32 } from "../../src/seeded-random.ts";

const tokens = (n: number, seed = 1) => {
  const rnd = mulberry32(seed);
  return Array.from({ length: n }, () => Math.floor(rnd() * 97));
};

describe("blockKeys", () => {
  it("names only full blocks, as vLLM does", () => {
    expect(blockKeys(tokens(15))).toEqual([]);
    expect(blockKeys(tokens(16))).toHaveLength(1);
    expect(blockKeys(tokens(47))).toHaveLength(2);
  });

  it("gives 16 hex digits per key", () => {
    for (const k of blockKeys(tokens(160))) expect(k).toMatch(/^[0-9a-f]{16}$/);
  });

  it("chains: a shared prefix shares its keys, and one changed token changes every later key", () => {
    const a = tokens(64);
    const b = [...a];
    b[20] = (b[20]! + 1) % 97;
    const ka = blockKeys(a);
    const kb = blockKeys(b);
    expect(kb[0]).toBe(ka[0]);
    for (let i = 1; i < 4; i++) expect(kb[i]).not.toBe(ka[i]);
    // A prompt that extends another keeps its keys: a multi-turn conversation hits its own history.
    expect(blockKeys([...a, ...tokens(40, 9)]).slice(0, 4)).toEqual(ka);
  });

  it("depends on position in the chain, not only on the block's own tokens", () => {
    const block = tokens(16);
    const twice = blockKeys([...block, ...block]);
    expect(twice[0]).not.toBe(twice[1]);
  });

  it("folds the extra keys (adapter) into every block", () => {
    const t = tokens(48);
    const base = blockKeys(t);
    const lora = blockKeys(t, { extra: "sql-lora" });
    for (let i = 0; i < 3; i++) expect(lora[i]).not.toBe(base[i]);
    expect(blockKeys(t, { extra: "" })).toEqual(base);
  });

  it("is blockKey applied along the chain, and honours blockSize and maxBlocks", () => {
    const t = tokens(64);
    const extra = extraLanes("m");
    const k0 = blockKey(undefined, t, 0, extra);
    const k1 = blockKey(k0, t, BLOCK_TOKENS, extra);
    expect(blockKeys(t, { extra: "m" }).slice(0, 2)).toEqual([k0, k1]);
    expect(blockKeys(t, { blockSize: 8 })).toHaveLength(8);
    expect(blockKeys(t, { maxBlocks: 2 })).toHaveLength(2);
  });

  it("spreads keys: no collisions over 100,000 random blocks", () => {
    const seen = new Set<string>();
    const extra = extraLanes("");
    const rnd = mulberry32(7);
    const block = new Array<number>(16);
    for (let i = 0; i < 100_000; i++) {
      for (let j = 0; j < 16; j++) block[j] = Math.floor(rnd() * 97);
      seen.add(blockKey(undefined, block, 0, extra));
    }
    expect(seen.size).toBe(100_000);
  });

  it("round-trips keys through vLLM's 64-bit integer block hashes", () => {
    for (const k of blockKeys(tokens(160))) {
      const n = keyToBigInt(k);
      expect(n).toBeLessThan(2n ** 64n);
      expect(bigIntToKey(n)).toBe(k);
    }
    expect(bigIntToKey(-1n)).toBe("ffffffffffffffff");
  });

  it("refuses a parent that is not a key, and keyLanes rejects malformed keys", () => {
    expect(() => blockKey("nope", tokens(16), 0, extraLanes(""))).toThrow(RangeError);
    expect(keyLanes("123")).toBeUndefined();
    expect(keyLanes("zzzzzzzzzzzzzzzz")).toBeUndefined();
    expect(keyLanes("00000001ffffffff")).toEqual([1, 0xffffffff]);
  });
});
