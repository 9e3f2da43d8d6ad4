/**
 * Per-key rate limits in the proxy (src/proxy/serve/access.ts) with a fake
 * RateSync that keeps one global bucket per key, as the RateLimiter object
 * does (src/state/rate-limiter.ts, same pure token-bucket functions), and an
 * injected clock. Background promises are collected and awaited explicitly.
 */
// @ts-nocheck

import { afterEach, beforeEach, describe, it, expect, vi } from "vitest";

import { defineDeployment, type Deployment } from "../../src/config/deployment.ts";
import { fullBucket, refill, type BucketLimits, type TokenBucket } from "../../src/policy/token-bucket.ts";
import { RATE_SYNC_INTERVAL_MS, RateLimits, TOKEN_RATE, type RateDecision, type RateSync } from "../../src/proxy/serve/access.ts";
import { RATE_LIMIT_SHARDS, chargeUse, rateLimitShard, type RateRemaining, type RateUse } from "../../src/policy/rate-limit-sync.ts";
import { clock, T0 } from "../fixtures/clock.ts";


interface SyncCall {
  at: number;
  deployment: string;
  shard: number;
  limits: BucketLimits;
  uses: RateUse[];
}

/** The RateLimiter objects: one global bucket per (deployment, key), on the shared clock. */
class FakeGlobal {
  readonly buckets = new Map<string, TokenBucket>();
  readonly calls: SyncCall[] = [];
  readonly sinces: number[] = [];
  failing = false;

  constructor(private readonly now: () => number) {}

  readonly sync: RateSync = async (deployment, shard, limits, uses) => {
    // Recorded without `since` (checked in its own tests below).
    this.calls.push({ at: this.now(), deployment, shard, limits, uses: uses.map(({ key, used }) => ({ key, used }) as RateUse) });
    this.sinces.push(...uses.map((u) => u.since));
    if (this.failing) throw new Error("RateLimiter unreachable");
    const now = this.now();
    return uses.map((use): RateRemaining => {
      const id = `${deployment}/${use.key}`;
      let b = this.buckets.get(id);
      if (!b) {
        b = fullBucket(limits, Math.min(now, use.since));
        this.buckets.set(id, b);
      }
      return { key: use.key, tokens: chargeUse(b, limits, use, now) };
    });
  };

  /** Global tokens of a key now (refilled). */
  tokens(deployment: string, key: string, limits: BucketLimits): number {
    const b = this.buckets.get(`${deployment}/${key}`);
    if (!b) return limits.burst;
    const c = { ...b };
    refill(c, limits, this.now());
    return c.tokens;
  }
}

function backgroundSink() {
  const promises: Promise<unknown>[] = [];
  return {
    promises,
    fn: (p: Promise<unknown>) => {
      promises.push(p);
    },
    async settle() {
      // Settling may not add more, but loop in case it does.
      for (let n = 0; n !== promises.length; ) {
        n = promises.length;
        await Promise.all(promises);
      }
    },
  };
}

function deployment(name: string, rateLimit?: BucketLimits, extra: { public?: boolean } = {}): Deployment {
  return defineDeployment({
    name,
    routePrefix: `/${name}`,
    backend: { kind: "text", text: "hi" },
    access: { public: extra.public ?? false, ...(rateLimit ? { rateLimit } : {}) },
  });
}

/** A key hash (64 hex digits) whose rateLimitShard is `n % RATE_LIMIT_SHARDS`, distinct per (n, tag). */
function keyHash(n: number, tag = "a"): string {
  return n.toString(16).padStart(8, "0") + tag.repeat(56).slice(0, 56);
}

describe("helpers", () => {
  it("keyHash lands on the intended shard", () => {
    expect(RATE_LIMIT_SHARDS).toBe(16);
    expect(rateLimitShard(keyHash(0))).toBe(0);
    expect(rateLimitShard(keyHash(1))).toBe(1);
    expect(rateLimitShard(keyHash(15))).toBe(15);
    expect(rateLimitShard(keyHash(16))).toBe(0);
    expect(rateLimitShard("ffffffff" + "0".repeat(56))).toBe(0xffffffff % 16);
  });
});

describe("chargeUse (the global bucket's side of a sync)", () => {
  const limits = { requestsPerSecond: 1, burst: 10 };

  it("charges uses at the time they happened, before the bucket refills to now", () => {
    // A full burst used at T0, reported 5 s later: 5 tokens have come back since.
    const b = fullBucket(limits, T0);
    expect(chargeUse(b, limits, { key: "k", used: 10, since: T0 }, T0 + 5_000)).toBe(5);
    // Charged at sync time instead, the bucket would refill to full first and be empty now.
    const atSync = fullBucket(limits, T0);
    refill(atSync, limits, T0 + 5_000);
    atSync.tokens -= 10;
    expect(atSync.tokens).toBe(0);
  });

  it("a pause between two bursts gives the second a full burst, whenever the sync comes", () => {
    const b = fullBucket(limits, T0);
    // Burst 1 at T0, synced at T0 + 1 s: 1 token back.
    expect(chargeUse(b, limits, { key: "k", used: 10, since: T0 }, T0 + 1_000)).toBe(1);
    // Ten seconds of pause, then burst 2 at T0 + 20 s, synced at T0 + 20.5 s: it was all there when used.
    expect(chargeUse(b, limits, { key: "k", used: 10, since: T0 + 20_000 }, T0 + 20_500)).toBe(0.5);
  });
});

describe("RateLimits", () => {
  let clk: ReturnType<typeof clock>;
  let global: FakeGlobal;
  let bg: ReturnType<typeof backgroundSink>;
  let errors: ReturnType<typeof vi.spyOn>;

  beforeEach(() => {
    clk = clock();
    global = new FakeGlobal(clk.now);
    bg = backgroundSink();
    errors = vi.spyOn(console, "error").mockImplementation(() => {});
  });

  afterEach(() => {
    errors.mockRestore();
  });

  /** Takes `n` times now (settling the background after each); returns the decisions. */
  async function takeN(rl: RateLimits, d: Deployment, key: string, n: number): Promise<RateDecision[]> {
    const out: RateDecision[] = [];
    for (let i = 0; i < n; i++) {
      out.push(rl.take(d, key, bg.fn));
      await bg.settle();
    }
    return out;
  }
  const okCount = (ds: RateDecision[]) => ds.filter((d) => d.ok).length;

  it("a deployment without rateLimit always admits and never syncs", async () => {
    const rl = new RateLimits(global.sync, clk.now);
    for (const d of [deployment("open"), deployment("pub", undefined, { public: true })]) {
      for (let i = 0; i < 1_000; i++) expect(rl.take(d, keyHash(i), bg.fn)).toEqual({ ok: true });
    }
    expect(bg.promises).toEqual([]);
    expect(global.calls).toEqual([]);
    expect(rl.syncs).toBe(0);
  });

  it("admits a burst, then answers 429 with a whole-second Retry-After", async () => {
    const d = deployment("chat", { requestsPerSecond: 2, burst: 5 });
    const rl = new RateLimits(global.sync, clk.now);
    const ds = await takeN(rl, d, keyHash(1), 8);
    expect(ds.slice(0, 5)).toEqual(Array(5).fill({ ok: true }));
    // 0 tokens at 2/s: 500 ms, rounded up to 1 s.
    expect(ds.slice(5)).toEqual(Array(3).fill({ ok: false, retryAfterSeconds: 1 }));
  });

  it("retryAfterSeconds is the token wait rounded up, and at least 1", async () => {
    const cases: [BucketLimits, number][] = [
      [{ requestsPerSecond: 1_000, burst: 1 }, 1], // 1 ms → 1 s
      [{ requestsPerSecond: 1, burst: 1 }, 1], // 1,000 ms exactly
      [{ requestsPerSecond: 0.5, burst: 1 }, 2],
      [{ requestsPerSecond: 0.3, burst: 2 }, 4], // 3,334 ms → 4 s
      [{ requestsPerSecond: 0.1, burst: 3 }, 10],
    ];
    for (const [i, [limits, want]] of cases.entries()) {
      const d = deployment(`chat-${i}`, limits);
      const rl = new RateLimits(global.sync, clk.now);
      const key = keyHash(i, "b");
      const ds = await takeN(rl, d, key, limits.burst + 1);
      expect(okCount(ds), JSON.stringify(limits)).toBe(limits.burst);
      expect(ds.at(-1), JSON.stringify(limits)).toEqual({ ok: false, retryAfterSeconds: want });
    }
  });

  it("waiting Retry-After is enough", async () => {
    const d = deployment("chat", { requestsPerSecond: 0.3, burst: 2 });
    const rl = new RateLimits(global.sync, clk.now);
    const ds = await takeN(rl, d, keyHash(3), 3);
    const r = ds[2]!;
    expect(r.ok).toBe(false);
    if (r.ok) return;
    clk.advance(r.retryAfterSeconds * 1000 - 1_000);
    expect(rl.take(d, keyHash(3), bg.fn).ok).toBe(false);
    clk.advance(1_000);
    expect(rl.take(d, keyHash(3), bg.fn)).toEqual({ ok: true });
  });

  it("refills at requestsPerSecond; rejected requests do not spend tokens", async () => {
    const d = deployment("chat", { requestsPerSecond: 2, burst: 5 });
    const rl = new RateLimits(global.sync, clk.now);
    const k = keyHash(1);
    await takeN(rl, d, k, 5);
    // Hammering while empty does not push the wait further out.
    for (let i = 0; i < 20; i++) expect(rl.take(d, k, bg.fn).ok).toBe(false);
    await bg.settle();
    clk.advance(499);
    expect(rl.take(d, k, bg.fn).ok).toBe(false);
    clk.advance(1);
    expect(rl.take(d, k, bg.fn)).toEqual({ ok: true });
    expect(rl.take(d, k, bg.fn)).toEqual({ ok: false, retryAfterSeconds: 1 });
    await bg.settle();
  });

  it("one isolate alone: never more than burst + rate × time, and the rate in steady state", async () => {
    const limits = { requestsPerSecond: 10, burst: 20 };
    const d = deployment("chat", limits);
    const rl = new RateLimits(global.sync, clk.now);
    const k = keyHash(7);
    const perSecond = Array<number>(10).fill(0);
    for (let t = 0; t < 10_000; t += 5) {
      if (rl.take(d, k, bg.fn).ok) perSecond[Math.floor(t / 1_000)]!++;
      await bg.settle();
      clk.advance(5);
    }
    const total = perSecond.reduce((a, b) => a + b, 0);
    expect(total).toBeLessThanOrEqual(20 + 100);
    // The first second: the burst and that second's refill.
    expect(perSecond[0]).toBeGreaterThanOrEqual(20 + 9);
    expect(perSecond[0]).toBeLessThanOrEqual(20 + 10);
    // Steady state: the rate, give or take one.
    for (const n of perSecond.slice(2)) {
      expect(n).toBeGreaterThanOrEqual(9);
      expect(n).toBeLessThanOrEqual(11);
    }
  });

  it("keys are limited independently", async () => {
    const d = deployment("chat", { requestsPerSecond: 1, burst: 3 });
    const rl = new RateLimits(global.sync, clk.now);
    expect(okCount(await takeN(rl, d, keyHash(1), 5))).toBe(3);
    expect(okCount(await takeN(rl, d, keyHash(2), 5))).toBe(3);
    expect(okCount(await takeN(rl, d, keyHash(17), 5))).toBe(3); // same shard as keyHash(1)
  });

  it("the same key is limited separately per deployment", async () => {
    const a = deployment("alpha", { requestsPerSecond: 1, burst: 3 });
    const b = deployment("beta", { requestsPerSecond: 1, burst: 3 });
    const rl = new RateLimits(global.sync, clk.now);
    expect(okCount(await takeN(rl, a, keyHash(1), 5))).toBe(3);
    expect(okCount(await takeN(rl, b, keyHash(1), 5))).toBe(3);
  });

  describe("across isolates", () => {
    it("after a sync an isolate adopts the global remainder", async () => {
      const limits = { requestsPerSecond: 1, burst: 10 };
      const d = deployment("chat", limits);
      const k = keyHash(4);
      const a = new RateLimits(global.sync, clk.now);
      const b = new RateLimits(global.sync, clk.now);
      // A spends 6 (its first take syncs at once: global 9, then 5 unreported).
      expect(okCount(await takeN(a, d, k, 6))).toBe(6);
      expect(global.tokens("chat", k, limits)).toBe(9);
      // B's first take syncs: global 8; B adopts min(its own 9, 8).
      expect(b.take(d, k, bg.fn)).toEqual({ ok: true });
      await bg.settle();
      expect(global.tokens("chat", k, limits)).toBe(8);
      // One second on, A's take reports its 5 + 1 more: global 8 + 1 - 6 = 3.
      clk.advance(1_000);
      expect(a.take(d, k, bg.fn)).toEqual({ ok: true });
      await bg.settle();
      expect(global.tokens("chat", k, limits)).toBe(3);
      // B's take reports 1: global 2, and B now has 2 left, not the 8 its own bucket would allow.
      expect(b.take(d, k, bg.fn)).toEqual({ ok: true });
      await bg.settle();
      expect(global.tokens("chat", k, limits)).toBe(2);
      const rest = await takeN(b, d, k, 10);
      expect(okCount(rest)).toBe(2);
      expect(rest[2]).toEqual({ ok: false, retryAfterSeconds: 1 });
    });

    it("a negative global remainder makes the isolate wait longer than one token", async () => {
      const limits = { requestsPerSecond: 1, burst: 10 };
      const d = deployment("chat", limits);
      const k = keyHash(4);
      const a = new RateLimits(global.sync, clk.now);
      const b = new RateLimits(global.sync, clk.now);
      // Both spend their whole local burst in the same interval.
      expect(okCount(await takeN(a, d, k, 10))).toBe(10);
      expect(okCount(await takeN(b, d, k, 10))).toBe(9); // adopted global 8 after its first take
      clk.advance(1_000);
      expect(a.take(d, k, bg.fn)).toEqual({ ok: true }); // reports 10: global 8 + 1 - 10 = -1
      await bg.settle();
      expect(b.take(d, k, bg.fn)).toEqual({ ok: true }); // reports 9: global -10
      await bg.settle();
      expect(global.tokens("chat", k, limits)).toBe(-10);
      // B adopted -10: 11 s until one token.
      expect(b.take(d, k, bg.fn)).toEqual({ ok: false, retryAfterSeconds: 11 });
      // A adopted -1: 2 s.
      expect(a.take(d, k, bg.fn)).toEqual({ ok: false, retryAfterSeconds: 2 });
    });

    it("two isolates together admit about the global limit (overshoot bounded by one sync interval each)", async () => {
      const limits = { requestsPerSecond: 10, burst: 10 };
      const d = deployment("chat", limits);
      const k = keyHash(9);
      const isolates = [new RateLimits(global.sync, clk.now), new RateLimits(global.sync, clk.now)];
      const seconds = 20;
      const admitted = [0, 0];
      const perSecond: number[] = [];
      // Each isolate gets a request every 10 ms (100/s each, 20× the limit together).
      for (let t = 0; t < seconds * 1_000; t += 5) {
        const i = (t / 5) % 2;
        if (isolates[i]!.take(d, k, bg.fn).ok) {
          admitted[i]!++;
          const s = Math.floor(t / 1_000);
          perSecond[s] = (perSecond[s] ?? 0) + 1;
        }
        await bg.settle();
        clk.advance(5);
      }
      const total = admitted[0]! + admitted[1]!;
      const globalLimit = limits.burst + limits.requestsPerSecond * seconds; // 210
      // What one sync interval of traffic can be per isolate: its local bucket's worth.
      const perIsolateInterval = limits.burst + (limits.requestsPerSecond * RATE_SYNC_INTERVAL_MS) / 1000;
      expect(total).toBeLessThanOrEqual(globalLimit + isolates.length * perIsolateInterval);
      // (Two unsynchronised isolates would admit 2 × 210.)
      // And the limit is usable: the key gets at least its global allowance minus one interval.
      expect(total).toBeGreaterThanOrEqual(globalLimit - perIsolateInterval);
      // Both isolates serve the key (neither is starved by the other's reports).
      expect(admitted[0]).toBeGreaterThan(seconds * 2);
      expect(admitted[1]).toBeGreaterThan(seconds * 2);
      // Steady state (after the first seconds): about the rate, not twice it.
      const steady = Array.from({ length: seconds - 5 }, (_, i) => perSecond[5 + i] ?? 0);
      const steadyAvg = steady.reduce((a, b) => a + b, 0) / steady.length;
      expect(steadyAvg).toBeLessThanOrEqual(limits.requestsPerSecond * 1.5);
      expect(steadyAvg).toBeGreaterThanOrEqual(limits.requestsPerSecond * 0.8);
      // The global bucket knows everything they let through.
      const reported = global.calls.flatMap((c) => c.uses).reduce((a, u) => a + u.used, 0);
      expect(total - reported).toBeLessThanOrEqual(isolates.length * perIsolateInterval);
    });
  });

  describe("sync cadence", () => {
    it("the first take of a deployment syncs at once, reporting that take", async () => {
      const d = deployment("chat", { requestsPerSecond: 1, burst: 5 });
      const rl = new RateLimits(global.sync, clk.now);
      rl.take(d, keyHash(2), bg.fn);
      expect(bg.promises).toHaveLength(1);
      await bg.settle();
      expect(global.calls).toEqual([{ at: T0, deployment: "chat", shard: 2, limits: { requestsPerSecond: 1, burst: 5 }, uses: [{ key: keyHash(2), used: 1 }] }]);
      expect(rl.syncs).toBe(1);
    });

    it("syncs at most once per RATE_SYNC_INTERVAL_MS per deployment", async () => {
      const d = deployment("chat", { requestsPerSecond: 1_000, burst: 1_000 });
      const rl = new RateLimits(global.sync, clk.now);
      // 3 keys on one shard, a request every 7 ms for 5 s.
      for (let t = 0; t < 5_000; t += 7) {
        rl.take(d, keyHash([0, 16, 32][t % 3]!), bg.fn);
        await bg.settle();
        clk.advance(7);
      }
      const ats = global.calls.map((c) => c.at - T0);
      expect(RATE_SYNC_INTERVAL_MS).toBe(1_000);
      expect(ats.length).toBe(5);
      for (let i = 1; i < ats.length; i++) expect(ats[i]! - ats[i - 1]!).toBeGreaterThanOrEqual(RATE_SYNC_INTERVAL_MS);
      // ... and no later than the first take after the interval.
      for (let i = 1; i < ats.length; i++) expect(ats[i]! - ats[i - 1]!).toBeLessThan(RATE_SYNC_INTERVAL_MS + 7);
      expect(bg.promises).toHaveLength(5);
      expect(rl.syncs).toBe(5);
    });

    it("no take, no sync: nothing happens on its own", async () => {
      const d = deployment("chat", { requestsPerSecond: 1, burst: 5 });
      const rl = new RateLimits(global.sync, clk.now);
      rl.take(d, keyHash(1), bg.fn);
      await bg.settle();
      clk.advance(60_000);
      await bg.settle();
      expect(global.calls).toHaveLength(1);
    });

    it("deployments have their own schedules", async () => {
      const a = deployment("alpha", { requestsPerSecond: 100, burst: 100 });
      const b = deployment("beta", { requestsPerSecond: 100, burst: 100 });
      const rl = new RateLimits(global.sync, clk.now);
      rl.take(a, keyHash(1), bg.fn);
      clk.advance(500);
      rl.take(b, keyHash(1), bg.fn);
      rl.take(a, keyHash(1), bg.fn); // alpha synced 500 ms ago: no sync
      clk.advance(500);
      rl.take(a, keyHash(1), bg.fn); // alpha: 1,000 ms → sync
      rl.take(b, keyHash(1), bg.fn); // beta: 500 ms → no sync
      await bg.settle();
      expect(global.calls.map((c) => [c.deployment, c.at - T0])).toEqual([
        ["alpha", 0],
        ["beta", 500],
        ["alpha", 1_000],
      ]);
      // alpha's second sync reports the 2 takes since its first.
      expect(global.calls[2]!.uses).toEqual([{ key: keyHash(1), used: 2 }]);
    });

    it("a rejected take does not count as used but still lets a due sync go", async () => {
      const d = deployment("chat", { requestsPerSecond: 1, burst: 2 });
      const rl = new RateLimits(global.sync, clk.now);
      const k = keyHash(5);
      rl.take(d, k, bg.fn);
      rl.take(d, k, bg.fn);
      rl.take(d, k, bg.fn); // rejected
      await bg.settle();
      clk.advance(RATE_SYNC_INTERVAL_MS - 1); // 0.999 tokens: still rejected
      clk.advance(1);
      expect(rl.take(d, k, bg.fn)).toEqual({ ok: true });
      await bg.settle();
      expect(global.calls.map((c) => c.uses)).toEqual([[{ key: k, used: 1 }], [{ key: k, used: 2 }]]);
    });
  });

  describe("sharding", () => {
    it("groups keys by rateLimitShard into one call per shard", async () => {
      const d = deployment("chat", { requestsPerSecond: 100, burst: 100 });
      const rl = new RateLimits(global.sync, clk.now);
      const keys = { a0: keyHash(0), b0: keyHash(16, "b"), c1: keyHash(1), d15: keyHash(15), e15: keyHash(31, "e") };
      // First take syncs alone; the others accumulate.
      rl.take(d, keys.a0, bg.fn);
      await bg.settle();
      expect(global.calls).toHaveLength(1);
      for (const [name, k] of Object.entries(keys)) for (let i = 0; i < name.charCodeAt(0) - 96; i++) rl.take(d, k, bg.fn);
      await bg.settle();
      expect(global.calls).toHaveLength(1);
      clk.advance(RATE_SYNC_INTERVAL_MS);
      rl.take(d, keys.c1, bg.fn);
      await bg.settle();
      const round = global.calls.slice(1);
      expect(round).toHaveLength(3);
      expect(rl.syncs).toBe(4);
      const byShard = new Map(round.map((c) => [c.shard, c.uses.map((u) => [u.key, u.used]).sort()]));
      expect([...byShard.keys()].sort((x, y) => x - y)).toEqual([0, 1, 15]);
      expect(byShard.get(0)).toEqual([[keys.a0, 1], [keys.b0, 2]].sort());
      expect(byShard.get(1)).toEqual([[keys.c1, 3 + 1]]);
      expect(byShard.get(15)).toEqual([[keys.d15, 4], [keys.e15, 5]].sort());
      for (const c of round) for (const u of c.uses) expect(rateLimitShard(u.key)).toBe(c.shard);
      for (const c of round) expect(c.deployment).toBe("chat");
    });

    it("each shard's answer is applied even when another shard's call fails", async () => {
      const limits = { requestsPerSecond: 1, burst: 10 };
      const d = deployment("chat", limits);
      const k0 = keyHash(0);
      const k1 = keyHash(1);
      // Another isolate has used up both keys globally.
      const other = new RateLimits(global.sync, clk.now);
      await takeN(other, d, k0, 10);
      await takeN(other, d, k1, 10);
      clk.advance(RATE_SYNC_INTERVAL_MS);
      await takeN(other, d, k0, 1);
      // Our isolate: shard 1's object is down.
      const failing: RateSync = (dep, shard, l, uses) => (shard === 1 ? Promise.reject(new Error("down")) : global.sync(dep, shard, l, uses));
      const rl = new RateLimits(failing, clk.now);
      rl.take(d, k0, bg.fn);
      rl.take(d, k1, bg.fn);
      await bg.settle();
      clk.advance(RATE_SYNC_INTERVAL_MS);
      rl.take(d, k0, bg.fn);
      await bg.settle();
      // k0 adopted the global (spent) remainder; k1 kept its local bucket.
      expect(okCount(await takeN(rl, d, k0, 5))).toBe(0);
      // (9 after its one take, + 1 refilled over the interval.)
      expect(okCount(await takeN(rl, d, k1, 20))).toBe(10);
      expect(errors).toHaveBeenCalled();
    });
  });

  describe("sync failures", () => {
    it("keep local limits in force and never reject the background promise", async () => {
      global.failing = true;
      const limits = { requestsPerSecond: 2, burst: 5 };
      const d = deployment("chat", limits);
      const rl = new RateLimits(global.sync, clk.now);
      const k = keyHash(6);
      const ds = await takeN(rl, d, k, 8);
      expect(okCount(ds)).toBe(5);
      expect(ds[5]).toEqual({ ok: false, retryAfterSeconds: 1 });
      for (const p of bg.promises) await expect(p).resolves.toBeUndefined();
      expect(errors).toHaveBeenCalledTimes(1);
      expect(String(errors.mock.calls[0]![0])).toMatch(/rate limit sync failed/);
      // Local refill still works; the schedule is kept (one attempt per interval, not per request).
      clk.advance(500);
      expect(rl.take(d, k, bg.fn)).toEqual({ ok: true });
      await bg.settle();
      expect(global.calls).toHaveLength(1);
      clk.advance(500);
      rl.take(d, k, bg.fn);
      await bg.settle();
      expect(global.calls).toHaveLength(2);
    });

    it("recover on the next sync: the isolate adopts the global remainder again", async () => {
      const limits = { requestsPerSecond: 1, burst: 10 };
      const d = deployment("chat", limits);
      const k = keyHash(8);
      const other = new RateLimits(global.sync, clk.now);
      await takeN(other, d, k, 10); // its first take reported 1 (global 9); 9 more unreported
      clk.advance(RATE_SYNC_INTERVAL_MS);
      await takeN(other, d, k, 1); // reports 10: global 9 + 1 - 10 = 0
      expect(global.tokens("chat", k, limits)).toBe(0);
      global.failing = true;
      const rl = new RateLimits(global.sync, clk.now);
      expect(rl.take(d, k, bg.fn)).toEqual({ ok: true }); // local view, sync fails
      await bg.settle();
      global.failing = false;
      clk.advance(RATE_SYNC_INTERVAL_MS);
      expect(rl.take(d, k, bg.fn)).toEqual({ ok: true }); // local still has tokens; this sync adopts the global
      await bg.settle();
      expect(rl.take(d, k, bg.fn).ok).toBe(false);
    });
  });

  describe("key state", () => {
    it("a key used since the last sync is kept and its use reported at the next one", async () => {
      const d = deployment("chat", { requestsPerSecond: 0.1, burst: 3 });
      const rl = new RateLimits(global.sync, clk.now);
      const k = keyHash(3);
      const k2 = keyHash(4);
      await takeN(rl, d, k, 3);
      clk.advance(RATE_SYNC_INTERVAL_MS);
      rl.take(d, k2, bg.fn); // the sync: k used 2 since the first one
      await bg.settle();
      expect(global.calls[1]!.uses).toContainEqual({ key: k, used: 2 });
      // Its (empty) bucket is still there: no fresh burst.
      expect(rl.take(d, k, bg.fn).ok).toBe(false);
    });

    it("a key spent to empty is not forgotten by a sync (no fresh burst after it)", async () => {
      const limits = { requestsPerSecond: 0.1, burst: 3 };
      const d = deployment("chat", limits);
      const rl = new RateLimits(global.sync, clk.now);
      const k = keyHash(3);
      expect(okCount(await takeN(rl, d, k, 5))).toBe(3);
      for (let i = 0; i < 3; i++) {
        clk.advance(RATE_SYNC_INTERVAL_MS);
        rl.take(d, keyHash(100 + i), bg.fn);
        await bg.settle();
      }
      expect(rl.take(d, k, bg.fn).ok).toBe(false);
    });
  });
});

describe("RateLimits: regressions", () => {
  const limits = { requestsPerSecond: 2, burst: 5 };
  const d = defineDeployment({ name: "chat", routePrefix: "/chat", backend: { kind: "external" }, access: { rateLimit: limits } });
  const key = "00000001" + "a".repeat(56);

  async function takes(rl: RateLimits, n: number, bg: Promise<unknown>[]): Promise<number> {
    let ok = 0;
    for (let i = 0; i < n; i++) if (rl.take(d, key, (p) => bg.push(p)).ok) ok++;
    await Promise.all(bg.splice(0));
    return ok;
  }

  it("a client that pauses between bursts gets a full burst again (uses are charged when they happened)", async () => {
    const c = clock();
    const global = new FakeGlobal(c.now);
    const rl = new RateLimits(global.sync, c.now);
    const bg: Promise<unknown>[] = [];
    expect(await takes(rl, 5, bg)).toBe(5);
    // Each burst after a pause: its first take sends the previous burst's uses, and the rest of the
    // burst is decided after the global count came back (so a global bucket that charged the old
    // uses at sync time, after refilling, would cut this burst short).
    for (let pause = 0; pause < 2; pause++) {
      c.advance(60_000);
      expect(await takes(rl, 1, bg)).toBe(1);
      expect(await takes(rl, 4, bg)).toBe(4);
    }
  });

  it("takes off what this isolate let through while its sync was in flight when it adopts the global count", async () => {
    const c = clock();
    const global = new FakeGlobal(c.now);
    // A sync held until the test lets it answer.
    let answer!: () => void;
    const held: RateSync = async (...args) => {
      await new Promise<void>((r) => (answer = r));
      return global.sync(...args);
    };
    // Other isolates have used 2 of the key's 5 tokens, and reported them.
    await global.sync("chat", rateLimitShard(key), limits, [{ key, used: 2, since: T0 }]);
    // This isolate's first take syncs at once (held); two more go through on its local bucket meanwhile.
    const rl = new RateLimits(held, c.now);
    const pending: Promise<unknown>[] = [];
    expect(rl.take(d, key, (p) => pending.push(p)).ok).toBe(true);
    expect(rl.take(d, key, (p) => pending.push(p)).ok).toBe(true);
    expect(rl.take(d, key, (p) => pending.push(p)).ok).toBe(true);
    answer();
    await Promise.all(pending);
    // The global bucket had 3 for the synced take: 2 now, and the two taken meanwhile are owed, so none
    // is left. Adopting the global count without them would let two more through.
    expect(rl.take(d, key, () => undefined).ok).toBe(false);
  });

  it("reports when the unsynced uses began", async () => {
    const c = clock();
    const global = new FakeGlobal(c.now);
    const rl = new RateLimits(global.sync, c.now);
    const bg: Promise<unknown>[] = [];
    await takes(rl, 1, bg); // syncs at once
    c.advance(300);
    await takes(rl, 2, bg); // not synced yet
    c.advance(2_000);
    await takes(rl, 1, bg); // syncs: the 3 uses since T0+300
    expect(global.sinces).toEqual([T0, T0 + 300]);
  });

  it("drops keys that went idle once their bucket is full again", async () => {
    const c = clock();
    const global = new FakeGlobal(c.now);
    const rl = new RateLimits(global.sync, c.now);
    const other = "00000002" + "b".repeat(56);
    const bg: Promise<unknown>[] = [];
    rl.take(d, key, (p) => bg.push(p));
    await Promise.all(bg.splice(0));
    c.advance(60_000);
    rl.take(d, other, (p) => bg.push(p));
    await Promise.all(bg.splice(0));
    c.advance(60_000);
    rl.take(d, other, (p) => bg.push(p));
    await Promise.all(bg.splice(0));
    expect(global.calls.at(-1)!.uses.map((u) => u.key)).toEqual([other]);
  });
});


describe("RateLimits for tokens (access.tokenLimit)", () => {
  const tokenDeployment = (name: string, tokensPerMinute: number, burst?: number) =>
    defineDeployment({ name, routePrefix: `/${name}`, backend: { kind: "text", text: "hi" }, access: { tokenLimit: { tokensPerMinute, ...(burst ? { burst } : {}) } } });

  it("lets requests go while the key's bucket is above zero, charges answers after them, and refuses once it is spent", async () => {
    const clk = clock();
    const global = new FakeGlobal(clk.now);
    const bg = backgroundSink();
    const tl = new RateLimits(global.sync, clk.now, TOKEN_RATE);
    const d = tokenDeployment("chat", 600); // 10 tokens/s, a burst of 600
    const key = keyHash(3);
    expect(tl.check(d, key, bg.fn)).toEqual({ ok: true });
    tl.charge(d, key, 500, bg.fn);
    expect(tl.check(d, key, bg.fn)).toEqual({ ok: true }); // 100 left
    // The answer that overshoots is charged in full: the bucket goes below zero.
    tl.charge(d, key, 250, bg.fn);
    expect(tl.check(d, key, bg.fn)).toEqual({ ok: false, retryAfterSeconds: 16 }); // (1 + 150) / 10 per s
    clk.advance(15_000);
    expect(tl.check(d, key, bg.fn).ok).toBe(false);
    clk.advance(1_000);
    expect(tl.check(d, key, bg.fn)).toEqual({ ok: true });
    await bg.settle();
    // Its syncs go to shards of their own, with its own limits: never mixed with request limits.
    expect(global.calls.length).toBeGreaterThan(0);
    for (const c of global.calls) {
      expect(c.shard).toBe(RATE_LIMIT_SHARDS + 3);
      expect(c.limits).toEqual({ requestsPerSecond: 10, burst: 600 });
    }
  });

  it("holds across isolates: what one charged, another learns at its next sync", async () => {
    const clk = clock();
    const global = new FakeGlobal(clk.now);
    const bg = backgroundSink();
    const [a, b] = [new RateLimits(global.sync, clk.now, TOKEN_RATE), new RateLimits(global.sync, clk.now, TOKEN_RATE)];
    const d = tokenDeployment("chat", 60, 1_000); // 1 token/s
    const key = keyHash(5);
    a.check(d, key, bg.fn);
    b.check(d, key, bg.fn);
    await bg.settle();
    a.charge(d, key, 2_000, bg.fn);
    clk.advance(RATE_SYNC_INTERVAL_MS);
    a.check(d, key, bg.fn); // a's sync reports its 2,000
    await bg.settle();
    expect(b.check(d, key, bg.fn)).toEqual({ ok: true }); // b has not synced since
    await bg.settle();
    clk.advance(RATE_SYNC_INTERVAL_MS);
    b.check(d, key, bg.fn); // b syncs, adopts the global remainder
    await bg.settle();
    expect(b.check(d, key, bg.fn).ok).toBe(false);
  });

  it("is off without tokenLimit: always ok, nothing charged or synced", async () => {
    const clk = clock();
    const global = new FakeGlobal(clk.now);
    const bg = backgroundSink();
    const tl = new RateLimits(global.sync, clk.now, TOKEN_RATE);
    const d = deployment("open", { requestsPerSecond: 1, burst: 1 });
    tl.charge(d, keyHash(1), 1e9, bg.fn);
    expect(tl.check(d, keyHash(1), bg.fn)).toEqual({ ok: true });
    expect(bg.promises).toEqual([]);
  });
});
