/**
 * How a replica talks to the edge's control plane (src/replica/edge-control.ts): what
 * a report entry carries, when a load counts as busy, the signed POST's URL and headers,
 * and which refusals mean an older edge. The drain-deadline belief is process-wide and
 * is tested in replica-edge-client-older-edge.test.ts (the isolated unit project).
 */
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { NonceCounter, importReplicaKey, type Load } from "../../src/protocol/index.ts";
import { EdgeError, isBusy, postControl, refusesSummaries, reportEntry, type LoadSource } from "../../src/replica/edge-control.ts";

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
});

const source = (load: Partial<Load>, o: Partial<LoadSource> = {}): LoadSource => ({
  maxOngoing: 4,
  load: () => ({ seq: 3, ongoing: 0, queued: 0, state: "ready", ...load }) as Load,
  models: ["m"],
  loading: [],
  onChange: () => undefined,
  ...o,
});

describe("reportEntry and isBusy", () => {
  it("carries kv, prefix_cache and drain_deadline_ms only when there is one", () => {
    const bare = reportEntry("r-1", source({}));
    expect(Object.keys(bare).sort()).toEqual(["loading", "models", "ongoing", "queued", "replica_id", "seq", "state", "ts"]);
    expect(bare).toMatchObject({ replica_id: "r-1", seq: 3, state: "ready", models: ["m"] });
    const summary = { v: 1 as const, k: 7, n: 1, block: 16, bits: "AAAA" };
    expect(reportEntry("r-1", source({ kv: 0.5 }), summary)).toMatchObject({ kv_cache_usage: 0.5, prefix_cache: summary });
    expect(reportEntry("r-1", source({}), null)).toMatchObject({ prefix_cache: null });
    // Draining without a deadline source, and with one: its time left, clamped to [0, MAX_DRAIN_DEADLINE_MS].
    expect(reportEntry("r-1", source({ state: "draining" }))).not.toHaveProperty("drain_deadline_ms");
    const left = reportEntry("r-1", source({ state: "draining" }, { drainDeadline: () => Date.now() + 5_000 })).drain_deadline_ms!;
    expect(left).toBeGreaterThan(4_000);
    expect(left).toBeLessThanOrEqual(5_000);
    expect(reportEntry("r-1", source({ state: "draining" }, { drainDeadline: () => Date.now() - 5_000 })).drain_deadline_ms).toBe(0);
    // Not draining: no deadline, whatever the source says.
    expect(reportEntry("r-1", source({}, { drainDeadline: () => Date.now() + 5_000 }))).not.toHaveProperty("drain_deadline_ms");
  });

  it("busy: anything running or waiting", () => {
    expect([isBusy(source({})), isBusy(source({ ongoing: 1 })), isBusy(source({ queued: 1 })), isBusy(source({ ongoing: 1, queued: 2 }))]).toEqual([false, true, true, true]);
  });
});

describe("postControl and the edge's refusals", () => {
  async function edge(status = 200) {
    const seen: { url: string; type: string | undefined; body: string }[] = [];
    const server = createServer(async (req, res) => {
      let body = "";
      for await (const c of req) body += String(c);
      seen.push({ url: req.url ?? "", type: req.headers["content-type"], body });
      res.writeHead(status, { "content-type": "application/json" }).end(status === 200 ? '{"ok":true}' : `{"error":"${"x".repeat(400)}"}`);
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
    return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen };
  }

  it("appends the path to the edge URL, any trailing slashes dropped, mounted prefix kept; JSON with its type", async () => {
    const e = await edge();
    const key = await importReplicaKey("ab".repeat(32));
    const nonces = new NonceCounter();
    for (const base of [e.url, `${e.url}/`, `${e.url}///`]) await postControl(base, key, nonces, "/-/replicas/report", { a: 1 });
    await postControl(`${e.url}/ml//`, key, nonces, "/-/replicas/report", { a: 1 });
    expect(e.seen.map((s) => s.url)).toEqual(["/-/replicas/report", "/-/replicas/report", "/-/replicas/report", "/ml/-/replicas/report"]);
    expect(e.seen.every((s) => s.type === "application/json" && s.body === '{"a":1}')).toBe(true);
  });

  it("a non-2xx answer throws EdgeError with its status and the first 300 characters of its body", async () => {
    const e = await edge(400);
    const err = await postControl(e.url, await importReplicaKey("ab".repeat(32)), new NonceCounter(), "/-/replicas/report", {}).catch((x: unknown) => x);
    expect(err).toBeInstanceOf(EdgeError);
    expect((err as EdgeError).status).toBe(400);
    expect((err as EdgeError).message).toBe(`edge answered 400: ${`{"error":"${"x".repeat(400)}"}`.slice(0, 300)}`);
  });

  it("refusesSummaries: a 400 naming prefix_cache, nothing else", () => {
    const named = '{"error":{"details":[{"keys":["prefix_cache"]}]}}';
    expect(refusesSummaries(new EdgeError(400, named))).toBe(true);
    expect(refusesSummaries(new EdgeError(500, named))).toBe(false);
    expect(refusesSummaries(new EdgeError(400, '{"error":{"details":[{"keys":["ts"]}]}}'))).toBe(false);
    expect(refusesSummaries(new EdgeError(400, "prefix_cache"))).toBe(false);
    expect(refusesSummaries(new Error(named))).toBe(false);
  });
});
