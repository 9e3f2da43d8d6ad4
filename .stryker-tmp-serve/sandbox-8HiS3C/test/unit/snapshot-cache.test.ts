/**
 * Per-isolate snapshot cache: stale-while-revalidate on a TTL, with an injected
 * clock and a counting source. Counting source calls proves that requests do
 * not each call the Durable Object.
 */
// @ts-nocheck

import { afterEach, beforeEach, describe, it, expect, vi } from "vitest";
import type { RoutingSnapshot } from "../../src/protocol/index.ts";
import { LAPSE_MARGIN_MS, LAPSED_REFRESH_WAIT_MS, SNAPSHOT_TTL_MS, SnapshotCache, VIEW_MAX_AGE_MS } from "../../src/proxy/serve/view.ts";
import { clock } from "../fixtures/clock.ts";

function snapshotWith(deployment: string, ids: string[], seq = 1): RoutingSnapshot {
  return {
    deployment,
    replicas: ids.map((id) => ({
      id,
      url: `http://${id}.test:8000`,
      epoch: 1,
      models: [],
      loading: [],
      expiresInMs: 2_500,
      load: { seq, ongoing: 0, queued: 0, max: 5, state: "ready" as const },
    })),
  };
}

/** A source whose answers are controlled by the test, counting calls per deployment. */
function controlledSource() {
  const calls: string[] = [];
  let answer: (d: string) => Promise<RoutingSnapshot> = (d) => Promise.resolve(snapshotWith(d, ["a"]));
  return {
    calls,
    set(fn: (d: string) => Promise<RoutingSnapshot>) {
      answer = fn;
    },
    source: (d: string) => {
      calls.push(d);
      return answer(d);
    },
  };
}


function deferred<T>() {
  let resolve!: (v: T) => void;
  let reject!: (e: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

let errorSpy: ReturnType<typeof vi.spyOn>;
beforeEach(() => {
  // Failed refreshes are logged with console.error; keep test output clean.
  errorSpy = vi.spyOn(console, "error").mockImplementation(() => undefined);
});
afterEach(() => {
  errorSpy.mockRestore();
});

describe("SnapshotCache", () => {
  it("awaits the source on the first call", async () => {
    const src = controlledSource();
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    const bg: Promise<unknown>[] = [];
    const view = await cache.view("hello", (p) => bg.push(p));
    expect(src.calls).toEqual(["hello"]);
    expect(view.readyCount(c.now())).toBe(1);
    expect(view.get("a")).toBeDefined();
    expect(bg).toEqual([]);
    expect(cache.refreshes).toBe(1);
  });

  it("concurrent first calls share one source call", async () => {
    const src = controlledSource();
    const d = deferred<RoutingSnapshot>();
    src.set(() => d.promise);
    const cache = new SnapshotCache(src.source, clock().now);
    const pending = Array.from({ length: 50 }, () => cache.view("hello", () => undefined));
    d.resolve(snapshotWith("hello", ["a", "b"]));
    const views = await Promise.all(pending);
    expect(src.calls.length).toBe(1);
    for (const v of views) expect(v).toBe(views[0]);
    expect(views[0]!.size).toBe(2);
  });

  it("makes no source call within the TTL: 10,000 views → exactly 1 call", async () => {
    const src = controlledSource();
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    const bg: Promise<unknown>[] = [];
    const first = await cache.view("hello", (p) => bg.push(p));
    for (let n = 0; n < 10_000; n++) {
      if (n % 1_000 === 0 && n > 0) c.advance(99); // 9 × 99 ms < TTL
      const v = await cache.view("hello", (p) => bg.push(p));
      expect(v).toBe(first);
    }
    expect(src.calls.length).toBe(1);
    expect(cache.refreshes).toBe(1);
    expect(bg).toEqual([]);
  });

  it("after the TTL, refreshes in the background and returns the stale view at once", async () => {
    const src = controlledSource();
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    const view = await cache.view("hello", () => undefined);

    const d = deferred<RoutingSnapshot>();
    src.set(() => d.promise);
    c.advance(SNAPSHOT_TTL_MS);
    const bg: Promise<unknown>[] = [];
    const stale = await cache.view("hello", (p) => bg.push(p));
    expect(stale).toBe(view);
    expect(bg.length).toBe(1);
    expect(src.calls.length).toBe(2);
    // Still the old content: the refresh has not completed.
    expect(stale.get("a")).toBeDefined();
    expect(stale.get("b")).toBeUndefined();

    // While the refresh runs, further calls neither start another nor wait.
    for (let n = 0; n < 100; n++) expect(await cache.view("hello", (p) => bg.push(p))).toBe(view);
    expect(src.calls.length).toBe(2);
    expect(bg.length).toBe(1);

    d.resolve(snapshotWith("hello", ["a", "b"], 2));
    await bg[0];
    expect(view.get("b")).toBeDefined();

    // The TTL restarts from the refresh's completion.
    c.advance(SNAPSHOT_TTL_MS - 1);
    await cache.view("hello", (p) => bg.push(p));
    expect(src.calls.length).toBe(2);
    c.advance(1);
    await cache.view("hello", (p) => bg.push(p));
    expect(src.calls.length).toBe(3);
    expect(bg.length).toBe(2);
    await bg[1];
  });

  it("with no ready replica, a due refresh is awaited instead of backgrounded", async () => {
    const src = controlledSource();
    src.set((d) => Promise.resolve(snapshotWith(d, [])));
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    const view = await cache.view("hello", () => undefined);
    expect(view.readyCount(c.now())).toBe(0);

    // Within the TTL an empty view is still served from cache.
    c.advance(SNAPSHOT_TTL_MS - 1);
    await cache.view("hello", () => undefined);
    expect(src.calls.length).toBe(1);

    src.set((d) => Promise.resolve(snapshotWith(d, ["a"])));
    c.advance(1);
    const bg: Promise<unknown>[] = [];
    const v = await cache.view("hello", (p) => bg.push(p));
    expect(bg).toEqual([]);
    expect(src.calls.length).toBe(2);
    // Awaited: the new replica is already there.
    expect(v.readyCount(c.now())).toBe(1);
  });

  it("a view whose replicas all expired counts as empty, so the refresh is awaited", async () => {
    const src = controlledSource();
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    await cache.view("hello", () => undefined);
    c.advance(10_000); // past the 2,500 ms expiry and the TTL
    const bg: Promise<unknown>[] = [];
    const v = await cache.view("hello", (p) => bg.push(p));
    expect(bg).toEqual([]);
    expect(src.calls.length).toBe(2);
    expect(v.readyCount(c.now())).toBe(1);
  });

  it("concurrent requests on an expired view all wait for the one refresh (none routes on the dead view)", async () => {
    const src = controlledSource();
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    await cache.view("hello", () => undefined);
    c.advance(10_000); // the deployment was idle: every replica in the view expired
    const pending = deferred<RoutingSnapshot>();
    src.set(() => pending.promise);
    const seen: number[] = [];
    const views = Array.from({ length: 5 }, () => cache.view("hello", () => undefined).then((v) => seen.push(v.readyCount(c.now()))));
    await Promise.resolve();
    expect(seen).toEqual([]); // nobody returned the expired view
    pending.resolve(snapshotWith("hello", ["a", "b"]));
    await Promise.all(views);
    expect(seen).toEqual([2, 2, 2, 2, 2]);
    expect(src.calls.length).toBe(2);
  });

  it("a view left idle past its TTL with one replica lapsed waits for the refresh (the replica may be alive)", async () => {
    // Regression: a multiplexing replica busy loading nothing for 2.7 s looked dead in an idle
    // view, and its model's next request was routed to a replica without the model.
    const src = controlledSource();
    const c = clock();
    const withExpiry = (d: string, expiry: Record<string, number>): RoutingSnapshot => {
      const s = snapshotWith(d, Object.keys(expiry));
      for (const r of s.replicas) r.expiresInMs = expiry[r.id]!;
      return s;
    };
    src.set((d) => Promise.resolve(withExpiry(d, { a: 600, b: 2_500 })));
    const cache = new SnapshotCache(src.source, c.now);
    await cache.view("hello", () => undefined);

    // Within the TTL a lapsed replica is not worth a wait: the view is as fresh as it gets.
    c.advance(700);
    const bg: Promise<unknown>[] = [];
    let v = await cache.view("hello", (p) => bg.push(p));
    expect(v.readyCount(c.now())).toBe(1);
    expect(src.calls.length).toBe(1);

    // Past the TTL with a lapsed: the refresh (handed to waitUntil) is awaited, and a
    // (which kept reporting) routes again.
    src.set((d) => Promise.resolve(withExpiry(d, { a: 2_400, b: 2_400 })));
    c.advance(SNAPSHOT_TTL_MS);
    v = await cache.view("hello", (p) => bg.push(p));
    expect(bg.length).toBe(1);
    expect(src.calls.length).toBe(2);
    expect(v.readyCount(c.now())).toBe(2);
  });

  it("a dead replica costs one awaited refresh: the snapshot drops it, and later refreshes are not awaited", async () => {
    const src = controlledSource();
    const c = clock();
    src.set((d) => Promise.resolve(snapshotWith(d, ["a", "b"])));
    const cache = new SnapshotCache(src.source, c.now);
    const view = await cache.view("hello", () => undefined);
    view.get("b")!.expiresAt = c.now() + 100; // b stopped reporting long ago
    src.set((d) => Promise.resolve(snapshotWith(d, ["a"])));
    c.advance(SNAPSHOT_TTL_MS);
    await cache.view("hello", () => undefined);
    expect(view.get("b")).toBeUndefined();
    // Next due refresh: nothing lapsed, so the request returns before the source answers.
    const pending = deferred<RoutingSnapshot>();
    src.set(() => pending.promise);
    c.advance(SNAPSHOT_TTL_MS);
    const bg: Promise<unknown>[] = [];
    expect(await cache.view("hello", (p) => bg.push(p))).toBe(view);
    expect(bg.length).toBe(1);
    pending.resolve(snapshotWith("hello", ["a"], 2));
    await bg[0];
  });

  it("waits for a hung Durable Object at most LAPSED_REFRESH_WAIT_MS from the refresh's start, then routes on the old view", async () => {
    const src = controlledSource();
    const c = clock();
    src.set((d) => Promise.resolve(snapshotWith(d, ["a", "b"])));
    const cache = new SnapshotCache(src.source, c.now);
    const view = await cache.view("hello", () => undefined);
    view.get("b")!.expiresAt = c.now() + 100;
    src.set(() => new Promise<RoutingSnapshot>(() => undefined)); // never answers
    c.advance(SNAPSHOT_TTL_MS);
    const started = performance.now();
    expect(await cache.view("hello", () => undefined)).toBe(view);
    const waited = performance.now() - started;
    expect(waited).toBeGreaterThanOrEqual(LAPSED_REFRESH_WAIT_MS - 5);
    expect(view.readyCount(c.now())).toBe(1);
    // Once the refresh is older than the bound, requests no longer wait for it.
    c.advance(LAPSED_REFRESH_WAIT_MS);
    const race = await Promise.race([cache.view("hello", () => undefined).then(() => "returned"), new Promise((r) => setTimeout(() => r("waited"), LAPSED_REFRESH_WAIT_MS / 2))]);
    expect(race).toBe("returned");
    expect(src.calls.length).toBe(2);
  });

  it("a failing background refresh keeps the old view and backs off before retrying", async () => {
    const src = controlledSource();
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    const view = await cache.view("hello", () => undefined);

    src.set(() => Promise.reject(new Error("object restarting")));
    c.advance(SNAPSHOT_TTL_MS);
    const bg: Promise<unknown>[] = [];
    expect(await cache.view("hello", (p) => bg.push(p))).toBe(view);
    expect(bg.length).toBe(1);
    // The handed-over promise does not reject (waitUntil must not see an error).
    await expect(bg[0]).resolves.toBeUndefined();
    expect(view.get("a")).toBeDefined();
    expect(errorSpy).toHaveBeenCalledTimes(1);

    // Backoff: the next attempt waits 250 ms after the failure, not a full TTL.
    await cache.view("hello", (p) => bg.push(p));
    expect(src.calls.length).toBe(2);
    c.advance(249);
    await cache.view("hello", (p) => bg.push(p));
    expect(src.calls.length).toBe(2);
    src.set((d) => Promise.resolve(snapshotWith(d, ["a", "c"], 2)));
    c.advance(1);
    await cache.view("hello", (p) => bg.push(p));
    expect(src.calls.length).toBe(3);
    await bg[1];
    expect(view.get("c")).toBeDefined();
  });

  it("a failing first call resolves with an empty view instead of throwing", async () => {
    const src = controlledSource();
    src.set(() => Promise.reject(new Error("down")));
    const cache = new SnapshotCache(src.source, clock().now);
    const v = await cache.view("hello", () => undefined);
    expect(v.size).toBe(0);
    expect(src.calls.length).toBe(1);
  });

  // Regression (fixed): after a failed *first* refresh fetchedAt stays 0, so view() skips the
  // REFRESH_FAILURE_BACKOFF_MS check and calls the source again on every request while
  // the Durable Object is down (only concurrent calls share one).
  it("backs off after a failed first refresh too", async () => {
    const src = controlledSource();
    src.set(() => Promise.reject(new Error("down")));
    const cache = new SnapshotCache(src.source, clock().now);
    for (let n = 0; n < 10; n++) await cache.view("hello", () => undefined);
    expect(src.calls.length).toBe(1);
  });

  it("recovers after a failed first refresh, then holds the TTL", async () => {
    const src = controlledSource();
    src.set(() => Promise.reject(new Error("down")));
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    expect((await cache.view("hello", () => undefined)).size).toBe(0);
    src.set((d) => Promise.resolve(snapshotWith(d, ["a"])));
    c.advance(250);
    const v = await cache.view("hello", () => undefined);
    expect(v.readyCount(c.now())).toBe(1);
    const calls = src.calls.length;
    for (let n = 0; n < 10; n++) await cache.view("hello", () => undefined);
    expect(src.calls.length).toBe(calls);
  });

  it("keeps one view per deployment, each with its own source calls", async () => {
    const src = controlledSource();
    src.set((d) => Promise.resolve(snapshotWith(d, d === "a-dep" ? ["a1"] : ["b1", "b2"])));
    const cache = new SnapshotCache(src.source, clock().now);
    const va = await cache.view("a-dep", () => undefined);
    const vb = await cache.view("b-dep", () => undefined);
    expect(va).not.toBe(vb);
    expect(va.size).toBe(1);
    expect(vb.size).toBe(2);
    for (let n = 0; n < 100; n++) {
      await cache.view("a-dep", () => undefined);
      await cache.view("b-dep", () => undefined);
    }
    expect(src.calls.sort()).toEqual(["a-dep", "b-dep"]);
  });

  it("applies a refreshed snapshot to the same view object (in-flight counts survive)", async () => {
    const src = controlledSource();
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now);
    const view = await cache.view("hello", () => undefined);
    const a = view.get("a")!;
    view.startDispatch(a);
    src.set((d) => Promise.resolve(snapshotWith(d, ["a"], 5)));
    c.advance(SNAPSHOT_TTL_MS);
    const bg: Promise<unknown>[] = [];
    await cache.view("hello", (p) => bg.push(p));
    await Promise.all(bg);
    expect(view.get("a")).toBe(a);
    expect(a.inflight).toBe(1);
    expect(a.reported.seq).toBe(5);
  });
});

describe("SnapshotCache's pace (routing.refreshEveryRequests)", () => {
  const TTL = 250;
  /** A source whose replicas stay live for `liveMs` from each answer. */
  function paced(everyRequests: number, liveMs = 60_000, busy = () => false) {
    const src = controlledSource();
    src.set((d) => Promise.resolve({ ...snapshotWith(d, ["a", "b"]), replicas: snapshotWith(d, ["a", "b"]).replicas.map((r) => ({ ...r, expiresInMs: liveMs })) }));
    const c = clock();
    const cache = new SnapshotCache(src.source, c.now, () => ({ ttlMs: TTL, everyRequests }), busy);
    /** One request `gapMs` after the last; resolves once any refresh it started has landed. */
    const request = async (gapMs: number) => {
      c.advance(gapMs);
      const bg: Promise<unknown>[] = [];
      await cache.view("d", (p) => bg.push(p));
      await Promise.all(bg);
    };
    return { src, c, cache, request };
  }

  it("past the TTL, refreshes once every N requests, not at every request", async () => {
    const { src, request } = paced(20);
    await request(0);
    // 10 req/s for 10 s: the view's age never reaches VIEW_MAX_AGE_MS between refreshes (20 × 100 ms).
    for (let i = 0; i < 100; i++) await request(100);
    // 1 + one per 20 requests (each 2 s, past the TTL).
    expect(src.calls.length).toBe(1 + 5);
  });

  it("never sooner than the TTL, however many requests come", async () => {
    const { src, request } = paced(20);
    await request(0);
    for (let i = 0; i < 1_000; i++) await request(1); // 1,000 req/s for 1 s
    // 1 + one per 250 ms (20 requests take 20 ms, the TTL is the bound).
    expect(src.calls.length).toBeGreaterThanOrEqual(1 + 3);
    expect(src.calls.length).toBeLessThanOrEqual(1 + 4);
  });

  it("refreshes a view older than VIEW_MAX_AGE_MS at the next request, however few came", async () => {
    const { src, request } = paced(20);
    await request(0);
    await request(VIEW_MAX_AGE_MS - 1);
    expect(src.calls.length).toBe(1);
    await request(1);
    expect(src.calls.length).toBe(2);
  });

  it("refreshes before a replica in the view would lapse, not after", async () => {
    // Replicas live 1.5 s from each answer: refreshed within LAPSE_MARGIN_MS of that.
    const { src, cache, c, request } = paced(1_000, 1_500);
    await request(0);
    await request(1_500 - LAPSE_MARGIN_MS - 1);
    expect(src.calls.length).toBe(1);
    await request(1);
    expect(src.calls.length).toBe(2);
    // The refreshed view has both replicas live: no request found one lapsed.
    expect((await cache.view("d", () => undefined)).readyCount(c.now())).toBe(2);
  });

  it("a load header that keeps a replica live puts its lapse off", async () => {
    const { src, cache, c, request } = paced(1_000, 1_500);
    await request(0);
    const view = await cache.view("d", () => undefined);
    // Both replicas answer a request (live LIVENESS_FROM_RESPONSE_MS from then) before the margin.
    c.advance(1_000);
    for (const id of ["a", "b"]) view.applyLoad(id, { seq: 2, ongoing: 0, queued: 0, max: 5, state: "ready" }, c.now());
    // Past the snapshot's lapse, well before the answers' (3.5 s): no refresh.
    await request(1_400 - 1_000);
    expect(src.calls.length).toBe(1);
    expect(view.readyCount(c.now())).toBe(2);
  });

  it("refreshes at the TTL while admission is busy (held requests, a budget)", async () => {
    let busy = false;
    const { src, request } = paced(20, 60_000, () => busy);
    await request(0);
    await request(TTL);
    expect(src.calls.length).toBe(1);
    busy = true;
    await request(1);
    expect(src.calls.length).toBe(2);
    await request(TTL);
    expect(src.calls.length).toBe(3);
  });

  it("N = 1 is the TTL alone: a refresh at the first request past it", async () => {
    const { src, request } = paced(1);
    await request(0);
    for (let i = 0; i < 10; i++) await request(TTL);
    expect(src.calls.length).toBe(11);
  });
});
