/**
 * Client API keys: their format, hash and Authorization parsing
 * (src/state/api-key-format.ts), and the isolate's key-set cache
 * (src/proxy/serve/access.ts) with a fake key-set source and an injected clock.
 */
// @ts-nocheck

import type { ActiveKey, KeyPriority } from "../../src/state/access-keys.ts";
import { createHash } from "node:crypto";
import { afterEach, beforeEach, describe, it, expect, vi } from "vitest";
import { ApiKeyCache, KEY_SET_TTL_MS, type KeyCheck } from "../../src/proxy/serve/access.ts";
import { bearerToken, hashApiKey, newApiKey } from "../../src/state/api-key-format.ts";
import { clock, T0 } from "../fixtures/clock.ts";

/** REFRESH_FAILURE_BACKOFF_MS in src/proxy/serve/access.ts (not exported). */
const FAILURE_BACKOFF_MS = 1_000;

const sha256 = (s: string) => createHash("sha256").update(s, "utf8").digest("hex");

describe("newApiKey", () => {
  it("is sy- and 43 base64url characters (32 random bytes)", () => {
    const k = newApiKey();
    expect(k).toMatch(/^sy-[A-Za-z0-9_-]{43}$/);
    expect(Buffer.from(k.slice(3), "base64url")).toHaveLength(32);
    // Round-trips: no padding, no + or /.
    expect(Buffer.from(k.slice(3), "base64url").toString("base64url")).toBe(k.slice(3));
  });

  it("1,000 keys are all well-formed and distinct", () => {
    const keys = Array.from({ length: 1_000 }, () => newApiKey());
    for (const k of keys) expect(k).toMatch(/^sy-[A-Za-z0-9_-]{43}$/);
    expect(new Set(keys).size).toBe(1_000);
    // Random bytes: over 32,000 bytes every byte value shows up (not e.g. only ASCII).
    const seen = new Set<number>();
    for (const k of keys) for (const b of Buffer.from(k.slice(3), "base64url")) seen.add(b);
    expect(seen.size).toBe(256);
  });

  it("is a valid bearer token", () => {
    const k = newApiKey();
    expect(bearerToken(`Bearer ${k}`)).toBe(k);
  });
});

describe("hashApiKey", () => {
  it("is the hex SHA-256 of the key (as node:crypto computes it)", async () => {
    for (const k of ["", "abc", "sy-x", newApiKey(), newApiKey(), "ünïcødé ✓", "a".repeat(10_000)]) {
      expect(await hashApiKey(k)).toBe(sha256(k));
    }
  });

  it("matches the known vectors", async () => {
    expect(await hashApiKey("")).toBe("e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    expect(await hashApiKey("abc")).toBe("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  });

  it("is 64 lowercase hex digits, with leading zeros kept", async () => {
    for (let i = 0; i < 200; i++) {
      const h = await hashApiKey(`k${i}`);
      expect(h).toMatch(/^[0-9a-f]{64}$/);
    }
  });
});

describe("bearerToken", () => {
  it("takes the token after Bearer", () => {
    expect(bearerToken("Bearer sy-abc")).toBe("sy-abc");
    expect(bearerToken("Bearer x")).toBe("x");
  });

  it("the scheme is case-insensitive", () => {
    for (const scheme of ["bearer", "BEARER", "BeArEr", "bEARER"]) expect(bearerToken(`${scheme} tok`)).toBe("tok");
  });

  it("accepts spaces and tabs between scheme and token, and after the token", () => {
    expect(bearerToken("Bearer   tok")).toBe("tok");
    expect(bearerToken("Bearer\ttok")).toBe("tok");
    expect(bearerToken("Bearer \t tok")).toBe("tok");
    expect(bearerToken("Bearer tok   ")).toBe("tok");
    expect(bearerToken("Bearer tok\t")).toBe("tok");
  });

  it("accepts every visible ASCII character in the token", () => {
    let all = "";
    for (let c = 0x21; c <= 0x7e; c++) all += String.fromCharCode(c);
    expect(bearerToken(`Bearer ${all}`)).toBe(all);
  });

  it("rejects a missing or empty header", () => {
    expect(bearerToken(null)).toBeNull();
    expect(bearerToken(undefined)).toBeNull();
    expect(bearerToken("")).toBeNull();
  });

  it("rejects an empty token", () => {
    expect(bearerToken("Bearer")).toBeNull();
    expect(bearerToken("Bearer ")).toBeNull();
    expect(bearerToken("Bearer \t ")).toBeNull();
  });

  it("rejects other schemes and a missing separator", () => {
    expect(bearerToken("Basic dXNlcjpwYXNz")).toBeNull();
    expect(bearerToken("Token tok")).toBeNull();
    expect(bearerToken("Bearertok")).toBeNull();
    expect(bearerToken("Bearer-tok")).toBeNull();
    expect(bearerToken("tok")).toBeNull();
    expect(bearerToken(" Bearer tok")).toBeNull();
    expect(bearerToken("X-Bearer tok")).toBeNull();
  });

  it("rejects two tokens", () => {
    expect(bearerToken("Bearer a b")).toBeNull();
    expect(bearerToken("Bearer a\tb")).toBeNull();
  });

  it("rejects control characters, DEL and non-ASCII", () => {
    for (const bad of ["\x00", "\x01", "\x1f", "\n", "\r", "\x7f", "é", "\u2028", "\uFEFF"]) {
      expect(bearerToken(`Bearer tok${bad}en`), JSON.stringify(bad)).toBeNull();
    }
    expect(bearerToken("Bearer tok\r\n")).toBeNull();
    expect(bearerToken("Bearer tok\nX-Evil: 1")).toBeNull();
  });

  it("accepts up to 512 characters and rejects longer tokens", () => {
    expect(bearerToken(`Bearer ${"a".repeat(512)}`)).toBe("a".repeat(512));
    expect(bearerToken(`Bearer ${"a".repeat(513)}`)).toBeNull();
    expect(bearerToken(`Bearer ${"a".repeat(100_000)}`)).toBeNull();
  });
});

// ---------------------------------------------------------------------------
// ApiKeyCache


interface Deferred {
  promise: Promise<void>;
  resolve: () => void;
}
function deferred(): Deferred {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * The AccessKeys objects as the cache sees them: the active key hashes per
 * deployment. `gate` holds calls (the list is read when the call is made, as an
 * RPC would); `failing` makes them reject.
 */
class FakeSource {
  readonly hashes = new Map<string, Set<string>>();
  /** Priority classes by key hash. */
  readonly priorities = new Map<string, KeyPriority>();
  readonly calls: string[] = [];
  failing = false;
  gate: Deferred | null = null;

  readonly source = async (deployment: string): Promise<ActiveKey[]> => {
    this.calls.push(deployment);
    const failing = this.failing;
    const list = [...(this.hashes.get(deployment) ?? [])].map((hash) => ({ hash, ...(this.priorities.has(hash) ? { priority: this.priorities.get(hash)! } : {}) }));
    if (this.gate) await this.gate.promise;
    if (failing) throw new Error("AccessKeys unreachable");
    return list;
  };

  async add(deployment: string, key: string, priority?: KeyPriority): Promise<void> {
    if (!this.hashes.has(deployment)) this.hashes.set(deployment, new Set());
    const hash = await hashApiKey(key);
    this.hashes.get(deployment)!.add(hash);
    if (priority) this.priorities.set(hash, priority);
  }

  async revoke(deployment: string, key: string): Promise<void> {
    this.hashes.get(deployment)?.delete(await hashApiKey(key));
  }
}

/** Collects what the cache hands to ctx.waitUntil. */
function backgroundSink() {
  const promises: Promise<unknown>[] = [];
  return {
    promises,
    fn: (p: Promise<unknown>) => {
      promises.push(p);
    },
    async settle() {
      await Promise.all(promises);
    },
  };
}

const KEY = "sy-" + "A".repeat(43);
const OTHER = "sy-" + "B".repeat(43);
const bearer = (k: string) => `Bearer ${k}`;
const okFor = (k: string): KeyCheck => ({ ok: true, keyHash: sha256(k) });

describe("ApiKeyCache", () => {
  let src: FakeSource;
  let clk: ReturnType<typeof clock>;
  let bg: ReturnType<typeof backgroundSink>;
  let cache: ApiKeyCache;
  let errors: ReturnType<typeof vi.spyOn>;

  beforeEach(async () => {
    src = new FakeSource();
    await src.add("chat", KEY);
    clk = clock();
    bg = backgroundSink();
    cache = new ApiKeyCache(src.source, clk.now);
    errors = vi.spyOn(console, "error").mockImplementation(() => {});
  });

  afterEach(() => {
    errors.mockRestore();
  });

  const check = (auth: string | null | undefined, deployment = "chat") => cache.check(deployment, auth, bg.fn);

  it("answers a key's priority class with it, and none for a key without one", async () => {
    await src.add("chat", "sk-sy-critical-key-000000000000000000", { default: 1, max: 1 });
    expect(await check("Bearer sk-sy-critical-key-000000000000000000")).toEqual({ ok: true, keyHash: sha256("sk-sy-critical-key-000000000000000000"), priority: { default: 1, max: 1 } });
    expect(await check(`Bearer ${KEY}`)).toEqual(okFor(KEY));
  });

  describe("without a usable Authorization header", () => {
    it("answers unauthorized without calling the source", async () => {
      for (const h of [null, undefined, "", "Basic Zm9vOmJhcg==", "Bearer", "Bearer  ", "bearer a b", `Bearer ${"x".repeat(513)}`, "Bearer tok\x00"]) {
        const r = await check(h);
        expect(r.ok, String(h)).toBe(false);
        if (!r.ok) {
          expect(r.code).toBe("unauthorized");
          expect(r.message).toMatch(/Bearer/);
        }
      }
      expect(src.calls).toEqual([]);
      expect(cache.refreshes).toBe(0);
      expect(bg.promises).toEqual([]);
    });
  });

  describe("with a key set", () => {
    it("a listed key is ok, with its hash", async () => {
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
      expect(src.calls).toEqual(["chat"]);
      expect(cache.refreshes).toBe(1);
    });

    it("scheme case and whitespace do not matter", async () => {
      expect(await check(`bearer\t${KEY}  `)).toEqual(okFor(KEY));
    });

    it("an unknown key is unauthorized", async () => {
      const r = await check(bearer(OTHER));
      expect(r).toMatchObject({ ok: false, code: "unauthorized" });
      expect(src.calls).toHaveLength(1);
    });

    it("a key of another deployment is unauthorized", async () => {
      await src.add("search", OTHER);
      expect(await check(bearer(OTHER), "chat")).toMatchObject({ ok: false, code: "unauthorized" });
      expect(await check(bearer(OTHER), "search")).toEqual(okFor(OTHER));
      expect(await check(bearer(KEY), "search")).toMatchObject({ ok: false, code: "unauthorized" });
      // One source call per deployment.
      expect([...src.calls].sort()).toEqual(["chat", "search"]);
    });

    it("the first check awaits the source (a key added before it is seen at once)", async () => {
      src.gate = deferred();
      let done = false;
      const p = check(bearer(KEY)).then((r) => {
        done = true;
        return r;
      });
      await Promise.resolve();
      await new Promise((r) => setImmediate(r));
      expect(done).toBe(false);
      expect(src.calls).toHaveLength(1);
      src.gate.resolve();
      expect(await p).toEqual(okFor(KEY));
      // It was not handed to the background: the request waited for it.
      expect(bg.promises).toEqual([]);
    });

    it("concurrent first checks share one source call", async () => {
      src.gate = deferred();
      const ps = [check(bearer(KEY)), check(bearer(KEY)), check(bearer(OTHER)), check(bearer(KEY), "chat")];
      await new Promise((r) => setImmediate(r));
      expect(src.calls).toEqual(["chat"]);
      src.gate.resolve();
      const rs = await Promise.all(ps);
      expect(rs[0]).toEqual(okFor(KEY));
      expect(rs[1]).toEqual(okFor(KEY));
      expect(rs[2]).toMatchObject({ ok: false, code: "unauthorized" });
      expect(rs[3]).toEqual(okFor(KEY));
      expect(src.calls).toEqual(["chat"]);
      expect(cache.refreshes).toBe(1);
    });

    it("makes no source call within KEY_SET_TTL_MS", async () => {
      await check(bearer(KEY));
      for (let i = 0; i < 100; i++) {
        clk.advance(i < 99 ? 100 : 99); // ends at T0 + TTL - 1
        expect(await check(bearer(i % 2 ? KEY : OTHER))).toMatchObject({ ok: i % 2 === 1 });
      }
      expect(src.calls).toHaveLength(1);
      expect(bg.promises).toEqual([]);
      expect(KEY_SET_TTL_MS).toBe(10_000);
    });

    it("after the TTL refreshes in the background, using the old set meanwhile", async () => {
      await check(bearer(KEY));
      await src.revoke("chat", KEY);
      await src.add("chat", OTHER);
      src.gate = deferred();
      clk.advance(KEY_SET_TTL_MS);
      // Answered from the old set at once; the refresh went to `background`.
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
      expect(bg.promises).toHaveLength(1);
      expect(src.calls).toHaveLength(2);
      // While it is in flight: still the old set, and no second refresh.
      clk.advance(5_000);
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
      expect(await check(bearer(OTHER))).toMatchObject({ ok: false, code: "unauthorized" });
      expect(bg.promises).toHaveLength(1);
      expect(src.calls).toHaveLength(2);
      src.gate.resolve();
      await bg.settle();
      // The revoked key stops working; the new one works.
      expect(await check(bearer(KEY))).toMatchObject({ ok: false, code: "unauthorized" });
      expect(await check(bearer(OTHER))).toEqual(okFor(OTHER));
      expect(src.calls).toHaveLength(2);
    });

    it("the next TTL counts from when the refreshed set arrived", async () => {
      await check(bearer(KEY));
      src.gate = deferred();
      clk.advance(KEY_SET_TTL_MS);
      await check(bearer(KEY));
      clk.advance(3_000);
      src.gate.resolve();
      await bg.settle();
      src.gate = null;
      // Arrived at T0 + TTL + 3 s: the next refresh is due at T0 + 2 TTL + 3 s.
      clk.advance(KEY_SET_TTL_MS - 1);
      await check(bearer(KEY));
      expect(src.calls).toHaveLength(2);
      clk.advance(1);
      await check(bearer(KEY));
      expect(src.calls).toHaveLength(3);
      expect(bg.promises).toHaveLength(2);
    });

    it("a revoked key keeps working until the refresh, then stops (within one TTL)", async () => {
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
      await src.revoke("chat", KEY);
      clk.advance(KEY_SET_TTL_MS - 1);
      expect((await check(bearer(KEY))).ok).toBe(true);
      clk.advance(1);
      await check(bearer(KEY)); // triggers the refresh
      await bg.settle();
      expect(await check(bearer(KEY))).toMatchObject({ ok: false, code: "unauthorized" });
    });

    it("invalidate() makes the next check await a fresh set", async () => {
      await check(bearer(KEY));
      await src.revoke("chat", KEY);
      await src.add("chat", OTHER);
      cache.invalidate("chat");
      expect(await check(bearer(KEY))).toMatchObject({ ok: false, code: "unauthorized" });
      expect(await check(bearer(OTHER))).toEqual(okFor(OTHER));
      expect(src.calls).toHaveLength(2);
      expect(bg.promises).toEqual([]);
    });

    it("invalidate() touches only that deployment", async () => {
      await src.add("search", OTHER);
      await check(bearer(KEY), "chat");
      await check(bearer(OTHER), "search");
      cache.invalidate("search");
      await check(bearer(KEY), "chat");
      await check(bearer(OTHER), "search");
      expect(src.calls).toEqual(["chat", "search", "search"]);
      // invalidating an unknown deployment is harmless
      expect(() => cache.invalidate("nope")).not.toThrow();
    });

    it("a stale refresh that lands after invalidate() does not bring a revoked key back", async () => {
      await check(bearer(KEY));
      // A background refresh reads the list while KEY is still active, and is slow.
      src.gate = deferred();
      const slow = src.gate;
      clk.advance(KEY_SET_TTL_MS);
      await check(bearer(KEY));
      expect(bg.promises).toHaveLength(1);
      // This isolate revokes KEY and invalidates; the fresh set is read at once.
      src.gate = null;
      await src.revoke("chat", KEY);
      cache.invalidate("chat");
      expect(await check(bearer(KEY))).toMatchObject({ ok: false, code: "unauthorized" });
      // The stale answer (with KEY) arrives now.
      slow.resolve();
      await bg.settle();
      expect(await check(bearer(KEY))).toMatchObject({ ok: false, code: "unauthorized" });
    });
  });

  describe("when the source fails", () => {
    it("before any set: fails closed with auth_unavailable", async () => {
      src.failing = true;
      const r = await check(bearer(KEY));
      expect(r).toMatchObject({ ok: false, code: "auth_unavailable" });
      expect(src.calls).toHaveLength(1);
      expect(errors).toHaveBeenCalled();
      expect(String(errors.mock.calls[0]![0])).toMatch(/api key refresh failed/);
    });

    it("concurrent first checks share the failing call and all fail closed", async () => {
      src.failing = true;
      src.gate = deferred();
      const ps = [check(bearer(KEY)), check(bearer(KEY)), check(bearer(OTHER))];
      await new Promise((r) => setImmediate(r));
      src.gate.resolve();
      for (const r of await Promise.all(ps)) expect(r).toMatchObject({ ok: false, code: "auth_unavailable" });
      expect(src.calls).toHaveLength(1);
    });

    it("backs off instead of calling on every request, then recovers", async () => {
      src.failing = true;
      await check(bearer(KEY));
      expect(src.calls).toHaveLength(1);
      // A burst of requests during the back-off: no calls, all fail closed.
      for (let i = 0; i < 50; i++) {
        clk.advance(i === 0 ? 0 : 20); // up to T0 + 980
        expect(await check(bearer(KEY))).toMatchObject({ ok: false, code: "auth_unavailable" });
      }
      clk.advance(FAILURE_BACKOFF_MS - 1 - 980);
      expect(await check(bearer(KEY))).toMatchObject({ ok: false, code: "auth_unavailable" });
      expect(src.calls).toHaveLength(1);
      // Still failing after the back-off: one more call, and another back-off.
      clk.advance(1);
      expect(await check(bearer(KEY))).toMatchObject({ ok: false, code: "auth_unavailable" });
      expect(src.calls).toHaveLength(2);
      for (let i = 0; i < 10; i++) await check(bearer(KEY));
      expect(src.calls).toHaveLength(2);
      // The object is back: the first check after the back-off awaits it and gets in.
      src.failing = false;
      clk.advance(FAILURE_BACKOFF_MS);
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
      expect(src.calls).toHaveLength(3);
      // ... and the normal TTL applies again.
      clk.advance(KEY_SET_TTL_MS - 1);
      await check(bearer(KEY));
      expect(src.calls).toHaveLength(3);
      expect(bg.promises).toEqual([]);
    });

    it("after a set existed: keeps the old set, backs off, recovers", async () => {
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
      await src.add("chat", OTHER);
      src.failing = true;
      clk.advance(KEY_SET_TTL_MS);
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
      expect(bg.promises).toHaveLength(1);
      // The background promise never rejects (it goes to waitUntil).
      await expect(bg.promises[0]).resolves.toBeUndefined();
      expect(errors).toHaveBeenCalledTimes(1);
      // Old set kept: KEY still in, OTHER (added meanwhile) not yet.
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
      expect(await check(bearer(OTHER))).toMatchObject({ ok: false, code: "unauthorized" });
      // Backs off: no refresh on every request.
      clk.advance(FAILURE_BACKOFF_MS - 1);
      for (let i = 0; i < 10; i++) await check(bearer(KEY));
      expect(src.calls).toHaveLength(2);
      expect(bg.promises).toHaveLength(1);
      // Retries after the back-off, in the background, and recovers.
      src.failing = false;
      clk.advance(1);
      expect(await check(bearer(OTHER))).toMatchObject({ ok: false, code: "unauthorized" });
      expect(bg.promises).toHaveLength(2);
      expect(src.calls).toHaveLength(3);
      await bg.settle();
      expect(await check(bearer(OTHER))).toEqual(okFor(OTHER));
      expect(await check(bearer(KEY))).toEqual(okFor(KEY));
    });

    it("refreshes counts the source calls", async () => {
      src.failing = true;
      await check(bearer(KEY));
      clk.advance(FAILURE_BACKOFF_MS);
      src.failing = false;
      await check(bearer(KEY));
      clk.advance(KEY_SET_TTL_MS);
      await check(bearer(KEY));
      await bg.settle();
      expect(cache.refreshes).toBe(3);
      expect(src.calls).toHaveLength(3);
    });
  });
});
