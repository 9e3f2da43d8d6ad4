/**
 * Constant-time equality (src/protocol/constant-time.ts) and its use for bearer
 * secrets (src/proxy/serve/access.ts). Timing itself is not measured (that would be flaky);
 * instead the tests prove the structure that makes it constant: every byte of the
 * supplied value is read, whatever and wherever the difference.
 */
// @ts-nocheck

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { timingSafeEqual, timingSafeEqualStrings } from "../../src/protocol/index.ts";
import { bearerMatches } from "../../src/proxy/serve/access.ts";

const bytes = (...b: number[]) => new Uint8Array(b);
/** Fixed seed: the same inputs on every run. */
const params = { seed: 20261130, numRuns: 500 };

describe("timingSafeEqual", () => {
  it("is true for equal bytes", () => {
    expect(timingSafeEqual(bytes(1, 2, 3), bytes(1, 2, 3))).toBe(true);
    expect(timingSafeEqual(bytes(), bytes())).toBe(true);
  });

  it("is false when the content differs, at any position", () => {
    expect(timingSafeEqual(bytes(0, 2, 3), bytes(1, 2, 3))).toBe(false);
    expect(timingSafeEqual(bytes(1, 2, 3), bytes(1, 2, 4))).toBe(false);
    expect(timingSafeEqual(bytes(0x80), bytes(0x00))).toBe(false);
  });

  it("is false when the lengths differ, either way", () => {
    expect(timingSafeEqual(bytes(1, 2), bytes(1, 2, 3))).toBe(false);
    expect(timingSafeEqual(bytes(1, 2, 3), bytes(1, 2))).toBe(false);
    // The cycled comparison must not make a repetition of `b` look equal.
    expect(timingSafeEqual(bytes(1, 1, 1, 1), bytes(1))).toBe(false);
    expect(timingSafeEqual(bytes(1, 2, 1, 2), bytes(1, 2))).toBe(false);
  });

  it("is false when exactly one side is empty", () => {
    expect(timingSafeEqual(bytes(), bytes(1))).toBe(false);
    expect(timingSafeEqual(bytes(1), bytes())).toBe(false);
    expect(timingSafeEqual(bytes(0), bytes())).toBe(false);
  });

  it("reads every byte of the first argument, however early the mismatch (no early return)", () => {
    /** `a`, wrapped so that reads of its elements are counted. */
    const counted = (a: Uint8Array) => {
      const reads = new Set<number>();
      const proxy = new Proxy(a, {
        get(target, prop) {
          if (typeof prop === "string" && /^\d+$/.test(prop)) reads.add(Number(prop));
          return Reflect.get(target, prop);
        },
      });
      return { proxy, reads };
    };
    const secret = bytes(...Array.from({ length: 32 }, (_, i) => i));
    for (const supplied of [
      bytes(...Array.from({ length: 32 }, () => 255)), // differs at byte 0
      bytes(...Array.from({ length: 64 }, () => 255)), // longer than the secret
      bytes(255, 255, 255), // shorter than the secret
      secret.slice(), // equal
    ]) {
      const { proxy, reads } = counted(supplied);
      timingSafeEqual(proxy, secret);
      expect(reads.size).toBe(supplied.length);
    }
  });

  it("agrees with byte-by-byte equality (property)", () => {
    const equal = (a: Uint8Array, b: Uint8Array) => a.length === b.length && a.every((x, i) => x === b[i]);
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 40 }), fc.uint8Array({ maxLength: 40 }), (a, b) => {
        expect(timingSafeEqual(a, b)).toBe(equal(a, b));
        expect(timingSafeEqual(a, a.slice())).toBe(true);
      }),
      params,
    );
  });
});

describe("timingSafeEqualStrings", () => {
  it("is true for equal strings, including empty ones", () => {
    expect(timingSafeEqualStrings("s3cret", "s3cret")).toBe(true);
    expect(timingSafeEqualStrings("", "")).toBe(true);
  });

  it("is false for different content or different lengths, either way", () => {
    expect(timingSafeEqualStrings("s3cret", "s3creT")).toBe(false);
    expect(timingSafeEqualStrings("s3cre", "s3cret")).toBe(false);
    expect(timingSafeEqualStrings("s3crett", "s3cret")).toBe(false);
    expect(timingSafeEqualStrings("", "s3cret")).toBe(false);
    expect(timingSafeEqualStrings("s3cret", "")).toBe(false);
  });

  it("compares non-ASCII text as UTF-8 bytes", () => {
    expect(timingSafeEqualStrings("pässwörd-🔑", "pässwörd-🔑")).toBe(true);
    expect(timingSafeEqualStrings("pässwörd", "passwörd")).toBe(false);
    // Same number of UTF-16 code units, different UTF-8 lengths.
    expect(timingSafeEqualStrings("é", "e")).toBe(false);
    // NFC and NFD spell é differently: different bytes, so different secrets.
    expect(timingSafeEqualStrings("\u00e9", "e\u0301")).toBe(false);
  });

  it("agrees with === (property)", () => {
    fc.assert(
      fc.property(fc.string({ unit: "grapheme", maxLength: 20 }), fc.string({ unit: "grapheme", maxLength: 20 }), (a, b) => {
        expect(timingSafeEqualStrings(a, b)).toBe(a === b);
      }),
      params,
    );
    // Near misses, which independent random strings rarely produce: one character changed or added.
    fc.assert(
      fc.property(fc.string({ minLength: 1, maxLength: 20 }), fc.nat(), fc.string({ minLength: 1, maxLength: 1 }), (a, at, c) => {
        const i = at % a.length;
        const changed = a.slice(0, i) + c + a.slice(i + 1);
        expect(timingSafeEqualStrings(changed, a)).toBe(changed === a);
        expect(timingSafeEqualStrings(a + c, a)).toBe(false);
        expect(timingSafeEqualStrings(a, a + c)).toBe(false);
      }),
      params,
    );
  });
});

describe("bearerMatches", () => {
  it("accepts exactly the secret after 'Bearer '", () => {
    expect(bearerMatches("Bearer s3cret", "s3cret")).toBe(true);
    expect(bearerMatches("Bearer s3cre", "s3cret")).toBe(false);
    expect(bearerMatches("Bearer s3crett", "s3cret")).toBe(false);
    expect(bearerMatches("Bearer S3CRET", "s3cret")).toBe(false);
    expect(bearerMatches("Bearer ", "s3cret")).toBe(false);
  });

  it("refuses when there is no secret configured or no Bearer prefix", () => {
    expect(bearerMatches("Bearer s3cret", undefined)).toBe(false);
    expect(bearerMatches("Bearer ", "")).toBe(false);
    expect(bearerMatches(undefined, "s3cret")).toBe(false);
    expect(bearerMatches(null, "s3cret")).toBe(false);
    expect(bearerMatches("s3cret", "s3cret")).toBe(false);
    expect(bearerMatches("bearer s3cret", "s3cret")).toBe(false);
    expect(bearerMatches("Basic s3cret", "s3cret")).toBe(false);
  });
});
