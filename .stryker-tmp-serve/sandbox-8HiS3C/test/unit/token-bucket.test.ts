/** Token buckets (src/policy/token-bucket.ts). Pure; time is explicit. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import fc from "fast-check";
import { fullBucket, refill, takeToken, type BucketLimits, type TokenBucket } from "../../src/policy/token-bucket.ts";
import { T0 } from "../fixtures/clock.ts";

const L: BucketLimits = { requestsPerSecond: 2, burst: 5 };

const copy = (b: TokenBucket): TokenBucket => ({ ...b });

describe("fullBucket", () => {
  it("holds `burst` tokens, stamped now", () => {
    expect(fullBucket(L, T0)).toEqual({ tokens: 5, at: T0 });
    expect(fullBucket({ requestsPerSecond: 0.5, burst: 1 }, 42)).toEqual({ tokens: 1, at: 42 });
  });
});

describe("refill", () => {
  it("adds requestsPerSecond tokens per second, pro rata", () => {
    const b: TokenBucket = { tokens: 0, at: T0 };
    refill(b, L, T0 + 250);
    expect(b).toEqual({ tokens: 0.5, at: T0 + 250 });
    refill(b, L, T0 + 500);
    expect(b).toEqual({ tokens: 1, at: T0 + 500 });
    refill(b, L, T0 + 2_000);
    expect(b).toEqual({ tokens: 4, at: T0 + 2_000 });
  });

  it("splitting the time into steps adds the same as one step", () => {
    const one: TokenBucket = { tokens: 0, at: T0 };
    const many: TokenBucket = { tokens: 0, at: T0 };
    refill(one, L, T0 + 1_500);
    for (let t = T0 + 100; t <= T0 + 1_500; t += 100) refill(many, L, t);
    expect(many.tokens).toBeCloseTo(one.tokens, 9);
    expect(one.tokens).toBe(3);
  });

  it("caps at burst", () => {
    const b: TokenBucket = { tokens: 4, at: T0 };
    refill(b, L, T0 + 10_000);
    expect(b).toEqual({ tokens: 5, at: T0 + 10_000 });
    // A full bucket stays full however long it waits.
    refill(b, L, T0 + 10_000_000);
    expect(b.tokens).toBe(5);
  });

  it("caps at burst when already above it (limits lowered)", () => {
    const b: TokenBucket = { tokens: 50, at: T0 };
    refill(b, L, T0 + 1);
    expect(b.tokens).toBe(5);
  });

  it("refills negative tokens at the same rate", () => {
    const b: TokenBucket = { tokens: -3, at: T0 };
    refill(b, L, T0 + 1_000);
    expect(b.tokens).toBe(-1);
    refill(b, L, T0 + 2_000);
    expect(b.tokens).toBe(1);
  });

  it("handles fractional rates", () => {
    const b: TokenBucket = { tokens: 0, at: T0 };
    refill(b, { requestsPerSecond: 0.25, burst: 3 }, T0 + 6_000);
    expect(b.tokens).toBe(1.5);
  });

  it("does nothing at the same instant", () => {
    const b: TokenBucket = { tokens: 1.5, at: T0 };
    refill(b, L, T0);
    expect(b).toEqual({ tokens: 1.5, at: T0 });
  });

  it("time going backwards adds no tokens and keeps the stamp", () => {
    const b: TokenBucket = { tokens: 1, at: T0 };
    refill(b, L, T0 - 5_000);
    expect(b).toEqual({ tokens: 1, at: T0 });
    // Back to normal: only time after the stamp counts (no credit for the jump).
    refill(b, L, T0 + 500);
    expect(b).toEqual({ tokens: 2, at: T0 + 500 });
  });
});

describe("takeToken", () => {
  it("gives `burst` tokens at once, then refuses", () => {
    const b = fullBucket(L, T0);
    for (let i = 0; i < 5; i++) expect(takeToken(b, L, T0)).toEqual({ ok: true });
    expect(b.tokens).toBe(0);
    expect(takeToken(b, L, T0)).toEqual({ ok: false, retryAfterMs: 500 });
  });

  it("a refused take spends nothing", () => {
    const b: TokenBucket = { tokens: 0.5, at: T0 };
    for (let i = 0; i < 100; i++) takeToken(b, L, T0);
    expect(b.tokens).toBe(0.5);
    expect(takeToken(b, L, T0)).toEqual({ ok: false, retryAfterMs: 250 });
    expect(takeToken(b, L, T0 + 250)).toEqual({ ok: true });
    expect(b.tokens).toBe(0);
  });

  it("needs a whole token (a fraction short is not enough)", () => {
    const limits = { requestsPerSecond: 1, burst: 5 };
    const b: TokenBucket = { tokens: 0.9375, at: T0 };
    expect(takeToken(b, limits, T0)).toEqual({ ok: false, retryAfterMs: 63 }); // 62.5 ms, rounded up
    expect(takeToken(b, limits, T0 + 62)).toEqual({ ok: false, retryAfterMs: 1 });
    expect(takeToken(b, limits, T0 + 63)).toEqual({ ok: true });
  });

  it("refills before taking", () => {
    const b: TokenBucket = { tokens: 0, at: T0 };
    expect(takeToken(b, L, T0 + 499).ok).toBe(false);
    expect(takeToken(b, L, T0 + 500)).toEqual({ ok: true });
    expect(b).toEqual({ tokens: 0, at: T0 + 500 });
  });

  it("retryAfterMs is exact and rounded up", () => {
    const cases: [BucketLimits, number, number][] = [
      [{ requestsPerSecond: 4, burst: 1 }, 0, 250],
      [{ requestsPerSecond: 4, burst: 1 }, 0.5, 125],
      [{ requestsPerSecond: 3, burst: 1 }, 0, 334], // 333.33…
      [{ requestsPerSecond: 1, burst: 1 }, 0, 1_000],
      [{ requestsPerSecond: 0.5, burst: 1 }, 0, 2_000],
      [{ requestsPerSecond: 1_000, burst: 1 }, 0, 1],
      [{ requestsPerSecond: 3_000, burst: 1 }, 0, 1], // 0.33 ms → 1
      [{ requestsPerSecond: 2, burst: 5 }, -3, 2_000],
      [{ requestsPerSecond: 1, burst: 10 }, -10, 11_000],
    ];
    for (const [limits, tokens, want] of cases) {
      expect(takeToken({ tokens, at: T0 }, limits, T0), JSON.stringify({ limits, tokens })).toEqual({ ok: false, retryAfterMs: want });
    }
  });

  it("negative tokens (others spent them) wait until the bucket is back to one", () => {
    const limits = { requestsPerSecond: 1, burst: 5 };
    const b: TokenBucket = { tokens: -2, at: T0 };
    const first = takeToken(b, limits, T0);
    expect(first).toEqual({ ok: false, retryAfterMs: 3_000 });
    expect(takeToken(b, limits, T0 + 2_999).ok).toBe(false);
    expect(takeToken(b, limits, T0 + 3_000)).toEqual({ ok: true });
    expect(takeToken(b, limits, T0 + 3_000)).toEqual({ ok: false, retryAfterMs: 1_000 });
  });

  it("time going backwards grants nothing", () => {
    const b: TokenBucket = { tokens: 0, at: T0 };
    const r = takeToken(b, L, T0 - 60_000);
    expect(r).toEqual({ ok: false, retryAfterMs: 500 });
    expect(b).toEqual({ tokens: 0, at: T0 });
  });

  it("sustains requestsPerSecond after the burst", () => {
    const limits = { requestsPerSecond: 10, burst: 20 };
    const b = fullBucket(limits, T0);
    let ok = 0;
    // 1,000 attempts a second for 10 s.
    for (let t = T0; t < T0 + 10_000; t++) if (takeToken(b, limits, t).ok) ok++;
    // burst + rate × (9.999 s) tokens, within one.
    expect(ok).toBeGreaterThanOrEqual(20 + 99);
    expect(ok).toBeLessThanOrEqual(20 + 100);
  });

  it("waiting retryAfterMs is enough and not longer than needed (property)", () => {
    fc.assert(
      fc.property(
        fc.double({ min: 0.01, max: 10_000, noNaN: true, noDefaultInfinity: true }),
        fc.integer({ min: 1, max: 1_000 }),
        fc.double({ min: -1_000, max: 0.9999, noNaN: true, noDefaultInfinity: true }),
        fc.integer({ min: 0, max: 2_000_000_000_000 }),
        (rps, burst, tokens, now) => {
          const limits = { requestsPerSecond: rps, burst };
          const start: TokenBucket = { tokens: Math.min(tokens, burst - 0.0001), at: now };
          const r = takeToken(copy(start), limits, now);
          if (r.ok) return false;
          if (!(r.retryAfterMs >= 1) || !Number.isInteger(r.retryAfterMs)) return false;
          if (!takeToken(copy(start), limits, now + r.retryAfterMs).ok) return false;
          // Not longer than needed: the exact wait, rounded up to a whole ms.
          const exact = ((1 - start.tokens) / rps) * 1000;
          return r.retryAfterMs >= exact - 1e-6 && r.retryAfterMs < Math.max(1, exact) + 1 + 1e-6;
        },
      ),
      { seed: 20260702, numRuns: 5_000 },
    );
  });

  it("never lets more than burst + rate × elapsed through (property)", () => {
    fc.assert(
      fc.property(
        fc.double({ min: 0.1, max: 100, noNaN: true, noDefaultInfinity: true }),
        fc.integer({ min: 1, max: 50 }),
        fc.array(fc.integer({ min: -50, max: 500 }), { minLength: 1, maxLength: 300 }),
        (rps, burst, steps) => {
          const limits = { requestsPerSecond: rps, burst };
          const b = fullBucket(limits, T0);
          let t = T0;
          let latest = T0;
          let ok = 0;
          for (const dt of steps) {
            t += dt; // may step back
            latest = Math.max(latest, t);
            if (takeToken(b, limits, t).ok) ok++;
          }
          return ok <= burst + ((latest - T0) / 1000) * rps + 1e-9;
        },
      ),
      { seed: 7, numRuns: 2_000 },
    );
  });
});
