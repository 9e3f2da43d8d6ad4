/**
 * The access stage (src/proxy/serve/access.ts) where test/unit/api-keys.test.ts and
 * rate-limits.test.ts do not reach: a key checked against several deployments at
 * once (the OpenAI routes, before the body names one), the deployments a key may
 * use, each refusal's answer, the admin secret, and a rate sync that fails and is
 * reported again. Issue 51: the folder's mutation score; written against the mutants
 * that survived the other unit tests.
 */
import { describe, expect, it, vi } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import { ApiKeyCache, RateLimits, adminRefusal, bearerMatches, keyRefusal, type RateSync } from "../../src/proxy/serve/access.ts";
import type { RateUse } from "../../src/policy/rate-limit-sync.ts";
import { hashApiKey } from "../../src/state/api-key-format.ts";
import type { ActiveKey } from "../../src/state/access-keys.ts";

const KEY_A = "sy-aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa";
const KEY_B = "sy-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";

/** Key sets per deployment, as the AccessKeys objects answer them; a deployment listed in `down` cannot be reached. */
async function cacheOf(sets: Record<string, string[]>, down: string[] = []) {
  const hashed: Record<string, ActiveKey[]> = {};
  for (const [d, keys] of Object.entries(sets)) hashed[d] = await Promise.all(keys.map(async (k) => ({ hash: await hashApiKey(k) }) as ActiveKey));
  const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
  const cache = new ApiKeyCache(async (d) => {
    if (down.includes(d)) throw new Error("unreachable");
    return hashed[d] ?? [];
  });
  return { cache, restore: () => errors.mockRestore() };
}
const bg = (p: Promise<unknown>) => void p.catch(() => undefined);

describe("a key checked against several deployments (checkAny)", () => {
  it("is ok when any of them lists it, with its hash", async () => {
    const { cache, restore } = await cacheOf({ one: [KEY_A], two: [KEY_B] });
    expect(await cache.checkAny(["one", "two"], `Bearer ${KEY_B}`, bg)).toEqual({ ok: true, keyHash: await hashApiKey(KEY_B) });
    restore();
  });

  it("without a key: unauthorized, asking for one", async () => {
    const { cache, restore } = await cacheOf({ one: [KEY_A] });
    expect(await cache.checkAny(["one"], null, bg)).toEqual({ ok: false, code: "unauthorized", message: "this deployment needs an API key: send Authorization: Bearer <key>" });
    restore();
  });

  it("a key no set lists: unauthorized when every set is known, unavailable while one is not", async () => {
    const { cache, restore } = await cacheOf({ one: [KEY_A], two: [KEY_A] }, ["two"]);
    expect(await cache.checkAny(["one"], `Bearer ${KEY_B}`, bg)).toEqual({ ok: false, code: "unauthorized", message: "API key not valid for this deployment (unknown or revoked)" });
    expect(await cache.checkAny(["one", "two"], `Bearer ${KEY_B}`, bg)).toEqual({ ok: false, code: "auth_unavailable", message: "API keys cannot be checked right now; retry shortly" });
    // A key one known set lists is ok, whatever the other set.
    expect((await cache.checkAny(["one", "two"], `Bearer ${KEY_A}`, bg)).ok).toBe(true);
    restore();
  });
});

describe("the deployments a key may use (usableBy)", () => {
  it("are those whose set lists it; none without a key, for no deployments, or while a set is unknown", async () => {
    const { cache, restore } = await cacheOf({ one: [KEY_A], two: [KEY_A, KEY_B], three: [KEY_B] }, ["four"]);
    expect(await cache.usableBy(["one", "two", "three", "four"], `Bearer ${KEY_A}`, bg)).toEqual(new Set(["one", "two"]));
    expect(await cache.usableBy(["one", "two", "three"], `Bearer ${KEY_B}`, bg)).toEqual(new Set(["two", "three"]));
    expect(await cache.usableBy(["one"], undefined, bg)).toEqual(new Set());
    expect(await cache.usableBy([], `Bearer ${KEY_A}`, bg)).toEqual(new Set());
    restore();
  });
});

describe("the refusals of a key", () => {
  it("unauthorized is 401 with WWW-Authenticate; unavailable is 503 with Retry-After", async () => {
    const unauthorized = keyRefusal({ ok: false, code: "unauthorized", message: "no key" }, "r-1");
    expect(unauthorized.status).toBe(401);
    expect(unauthorized.headers.get("www-authenticate")).toBe('Bearer realm="switchyard"');
    expect(unauthorized.headers.get("retry-after")).toBeNull();
    expect(await unauthorized.json()).toMatchObject({ error: { code: "unauthorized", message: "no key", request_id: "r-1" } });
    const unavailable = keyRefusal({ ok: false, code: "auth_unavailable", message: "later" }, "r-2");
    expect(unavailable.status).toBe(503);
    expect(unavailable.headers.get("retry-after")).toBe("1");
    expect(unavailable.headers.get("www-authenticate")).toBeNull();
    expect(await unavailable.json()).toMatchObject({ error: { code: "auth_unavailable", message: "later", request_id: "r-2" } });
  });

  it("the admin secret: the exact Bearer secret passes; anything else, or no secret configured, is 401", async () => {
    expect(adminRefusal({ SWITCHYARD_ADMIN_SECRET: "s3cret" }, "Bearer s3cret")).toBeNull();
    for (const [secret, header] of [["s3cret", "Bearer s3cre"], ["s3cret", "bearer s3cret"], ["s3cret", "s3cret"], ["s3cret", null], ["", "Bearer "], [undefined, "Bearer undefined"]] as const) {
      const res = adminRefusal({ SWITCHYARD_ADMIN_SECRET: secret as string }, header);
      expect(res?.status, `${secret} ${header}`).toBe(401);
      expect(res!.headers.get("www-authenticate")).toBe("Bearer");
      expect(await res!.json()).toMatchObject({ error: { code: "unauthorized", message: "admin secret missing or wrong" } });
    }
    expect(bearerMatches("Bearer x", "x")).toBe(true);
    expect(bearerMatches("Bearer xy", "x")).toBe(false);
  });
});

describe("a rate sync that fails", () => {
  const deployment = defineDeployment({ name: "rl", routePrefix: "/rl", backend: { kind: "echo" }, access: { public: false, rateLimit: { requestsPerSecond: 1, burst: 100 } } });

  it("gives the uses back, so the next sync reports them from when they began, with those made since", async () => {
    let now = 1_000_000;
    const calls: RateUse[][] = [];
    let failing = true;
    const sync: RateSync = async (_d, _s, limits, uses) => {
      calls.push(uses.map((u) => ({ ...u })));
      if (failing) throw new Error("RateLimiter unreachable");
      return uses.map((u) => ({ key: u.key, tokens: limits.burst - u.used }));
    };
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const limits = new RateLimits(sync, () => now);
    const pending: Promise<unknown>[] = [];
    const take = () => expect(limits.take(deployment, "k1", (p) => pending.push(p)).ok).toBe(true);
    take();
    await Promise.all(pending.splice(0));
    expect(calls).toEqual([[{ key: "k1", used: 1, since: 1_000_000 }]]);
    now += 300;
    take();
    take();
    failing = false;
    now += 1_000;
    take();
    await Promise.all(pending.splice(0));
    // The failed sync's use (since 1,000,000) and the three since, in one report from the first.
    expect(calls[1]).toEqual([{ key: "k1", used: 4, since: 1_000_000 }]);
    expect(errors).toHaveBeenCalled();
    errors.mockRestore();
  });
});
