/** randomUuid (serve/request.ts): version 4 UUIDs from random bytes drawn in batches. */
// @ts-nocheck

import { describe, expect, it, vi } from "vitest";
import { randomUuid } from "../../src/proxy/serve/request.ts";

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/;

describe("randomUuid", () => {
  it("makes version 4 UUIDs, all different, across several draws", () => {
    const ids = new Set<string>();
    for (let i = 0; i < 5_000; i++) {
      const id = randomUuid();
      expect(id).toMatch(UUID);
      ids.add(id);
    }
    expect(ids.size).toBe(5_000);
  });

  it("draws random bytes once per 256 ids", () => {
    const draw = vi.spyOn(crypto, "getRandomValues");
    for (let i = 0; i < 1_024; i++) randomUuid();
    expect(draw.mock.calls.length).toBeGreaterThanOrEqual(4);
    expect(draw.mock.calls.length).toBeLessThanOrEqual(5);
    draw.mockRestore();
  });

  it("uses every random bit but the six fixed ones (version and variant)", () => {
    // Over many ids, each free hex digit takes all 16 values; the version digit is 4, the variant digit 8-b.
    const seen = Array.from({ length: 36 }, () => new Set<string>());
    for (let i = 0; i < 4_000; i++) [...randomUuid()].forEach((c, j) => seen[j]!.add(c));
    seen.forEach((chars, j) => {
      if ([8, 13, 18, 23].includes(j)) expect([...chars]).toEqual(["-"]);
      else if (j === 14) expect([...chars]).toEqual(["4"]);
      else if (j === 19) expect([...chars].sort()).toEqual(["8", "9", "a", "b"]);
      else expect(chars.size, `digit ${j}`).toBe(16);
    });
  });
});
