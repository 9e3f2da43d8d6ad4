// @ts-nocheck
// Client-facing security on the real stack: API keys (hashed, admin-managed),
// per-key rate limits, header and pending-request limits, and JSON errors.
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { fixtureFunctions, forEachRoutingDesign, type TestStack } from "./stack-fixture.ts";

let stack: TestStack;

forEachRoutingDesign(
  { functionsDir: fixtureFunctions, replicas: { hello: 1, stream: 0, tight: 0, secure: 1 } },
  (s) => (stack = s),
  (design) => keyTests(design.routing === undefined),
);

const admin = () => ({ authorization: `Bearer ${stack.adminSecret}`, "content-type": "application/json" });

async function createKey(name: string): Promise<{ id: string; key: string; prefix: string }> {
  const res = await fetch(`${stack.url}/-/deployments/secure/keys`, { method: "POST", headers: admin(), body: JSON.stringify({ name }) });
  expect(res.status).toBe(201);
  return (await res.json()) as never;
}

async function call(key: string | null, path = "/secure?chunks=1", extra: Record<string, string> = {}): Promise<{ status: number; body: string; headers: Headers }> {
  const res = await fetch(`${stack.url}${path}`, { headers: { ...(key ? { authorization: `Bearer ${key}` } : {}), ...extra } });
  return { status: res.status, body: await res.text(), headers: res.headers };
}

function filesUnder(dir: string): string[] {
  return readdirSync(dir).flatMap((f) => {
    const p = join(dir, f);
    return statSync(p).isDirectory() ? filesUnder(p) : [p];
  });
}


/** The tests, run once per routing design (`firstDesign`: the default one, for tests that do not depend on it). */
function keyTests(firstDesign: boolean): void {
  describe("API keys", () => {
    it("refuses calls without a key or with an unknown one, with a JSON 401", async () => {
      for (const key of [null, "sy-not-a-real-key", "x".repeat(600)]) {
        const r = await call(key);
        expect(r.status).toBe(401);
        expect(r.headers.get("www-authenticate")).toMatch(/^Bearer/);
        expect(JSON.parse(r.body)).toMatchObject({ error: { code: "unauthorized", type: "authentication_error" } });
      }
      // Public deployments need none.
      expect((await call(null, "/hello")).status).toBe(200);
    });

    it("creates, lists and revokes keys through the admin API only", async () => {
      const noAdmin = await fetch(`${stack.url}/-/deployments/secure/keys`, { method: "POST", headers: { "content-type": "application/json" }, body: '{"name":"x"}' });
      expect(noAdmin.status).toBe(401);
      const wrongAdmin = await fetch(`${stack.url}/-/deployments/secure/keys`, { headers: { authorization: "Bearer nope" } });
      expect(wrongAdmin.status).toBe(401);

      const created = await createKey("ci");
      expect(created.key).toMatch(/^sy-[A-Za-z0-9_-]{43}$/);
      const ok = await call(created.key);
      expect(ok).toMatchObject({ status: 200, body: "chunk 0\n" });

      const listed = (await (await fetch(`${stack.url}/-/deployments/secure/keys`, { headers: admin() })).json()) as { keys: Record<string, unknown>[] };
      const entry = listed.keys.find((k) => k.id === created.id)!;
      expect(entry).toMatchObject({ name: "ci", prefix: created.key.slice(0, 10), revoked_at: null });
      expect(JSON.stringify(listed)).not.toContain(created.key);
      expect(Object.keys(entry).sort()).toEqual(["created_at", "id", "name", "prefix", "revoked_at"]);

      const revoked = await fetch(`${stack.url}/-/deployments/secure/keys/${created.id}`, { method: "DELETE", headers: admin() });
      expect(revoked.status).toBe(200);
      expect((await call(created.key)).status).toBe(401);
      const again = await fetch(`${stack.url}/-/deployments/secure/keys/${created.id}`, { method: "DELETE", headers: admin() });
      expect(again.status).toBe(404);
    });

    it("stores keys hashed: the plain key is in no file of the Durable Object storage", async () => {
      const { key } = await createKey("storage-check");
      expect((await call(key)).status).toBe(200);
      const blobs = filesUnder(join(stack.stateDir, "do")).map((f) => readFileSync(f));
      expect(blobs.length).toBeGreaterThan(0);
      expect(blobs.some((b) => b.includes(key))).toBe(false);
      const hash = Buffer.from(await crypto.subtle.digest("SHA-256", new TextEncoder().encode(key))).toString("hex");
      // SQLite keeps recent writes in its WAL: the hash is there, the key is not.
      expect(blobs.some((b) => b.includes(hash))).toBe(true);
    });

    it("rejects malformed admin input with JSON errors", async () => {
      const bad = await fetch(`${stack.url}/-/deployments/secure/keys`, { method: "POST", headers: admin(), body: "{nope" });
      expect(bad.status).toBe(400);
      const extra = await fetch(`${stack.url}/-/deployments/secure/keys`, { method: "POST", headers: admin(), body: JSON.stringify({ name: "a", admin: true }) });
      expect(extra.status).toBe(400);
      const unknown = await fetch(`${stack.url}/-/deployments/nope/keys`, { headers: admin() });
      expect(unknown.status).toBe(404);
      const method = await fetch(`${stack.url}/-/deployments/secure/keys`, { method: "PUT", headers: admin() });
      expect(method.status).toBe(405);
      for (const r of [bad, extra, unknown, method]) expect(await r.json()).toHaveProperty("error.code");
    });
  });

  if (firstDesign) {
    describe("limits", () => {
      it("rate-limits a key with 429 and Retry-After, without affecting another key", async () => {
        const [a, b] = [await createKey("rate-a"), await createKey("rate-b")];
        // Burst 10 at 20/s: 40 back-to-back requests (one at a time, so the pending cap
        // of 4 plays no part) leave most of them over the limit.
        const started = Date.now();
        const results: Awaited<ReturnType<typeof call>>[] = [];
        for (let i = 0; i < 40; i++) results.push(await call(a.key));
        const elapsed = (Date.now() - started) / 1000;
        const limited = results.filter((r) => r.status === 429);
        const served = results.filter((r) => r.status === 200).length;
        expect(results.filter((r) => r.status !== 200 && r.status !== 429)).toEqual([]);
        expect(served).toBeGreaterThanOrEqual(10);
        expect(served).toBeLessThanOrEqual(10 + Math.ceil(20 * elapsed) + 1);
        expect(limited.length).toBeGreaterThan(0);
        expect(Number(limited[0]!.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
        expect(JSON.parse(limited[0]!.body)).toMatchObject({ error: { code: "rate_limited", type: "rate_limit_error" } });
        expect((await call(b.key)).status).toBe(200);
        // It refills: after a second the key is served again.
        await new Promise((r) => setTimeout(r, 1_100));
        expect((await call(a.key)).status).toBe(200);
      });

      it("answers oversized headers with 431", async () => {
        const { key } = await createKey("headers");
        const r = await call(key, "/secure?chunks=1", { "x-big": "y".repeat(4096) });
        expect(r.status).toBe(431);
        expect(JSON.parse(r.body)).toMatchObject({ error: { code: "header_too_large" } });
      });

      it("caps requests waiting on replicas per deployment: 503 queue_full with Retry-After beyond it", async () => {
        const { key } = await createKey("queue");
        // Slow answers (1 s before the response head); the cap is 4.
        const results = await Promise.all(Array.from({ length: 8 }, () => call(key, "/secure?delay_ms=1000")));
        const full = results.filter((r) => r.status === 503);
        expect(results.filter((r) => r.status === 200).length).toBe(4);
        expect(full.length).toBe(4);
        expect(full[0]!.headers.get("retry-after")).toBe("1");
        expect(JSON.parse(full[0]!.body)).toMatchObject({ error: { code: "queue_full" } });
      });
    });
  }

}
