/**
 * Session affinity at the first hop, with a fake in-memory store that has the
 * SessionRouter object's semantics (it uses the same pure decisions) and counts
 * calls, an injected clock, and routing views for the candidates. Binding
 * tokens are the real ones (session-token.ts) under a test key.
 */
// @ts-nocheck

import { afterEach, beforeEach, describe, it, expect, vi } from "vitest";
import { defineDeployment, type Deployment, type DeploymentInput } from "../../src/config/deployment.ts";
import type { Load, ReplicaView } from "../../src/protocol/index.ts";
import { RoutingView, type ReplicaEntry } from "../../src/proxy/serve/view.ts";
import { SATURATION_GRACE_MS, SESSION_CACHE_MAX, SESSION_CACHE_TTL_MS, SESSION_STORE_RETRY_MS, SessionAffinity, type SessionStore } from "../../src/proxy/serve/session-affinity.ts";
import { rebindBinding, resolveBinding, type BindingDecision, type StoredBinding } from "../../src/state/session-binding.ts";
import { deriveSessionTokenKey, readSessionToken, SessionTokens, signSessionToken } from "../../src/proxy/serve/session-token.ts";
import { clock, T0 } from "../fixtures/clock.ts";
import { firstOf } from "../fixtures/wait.ts";


type Clock = ReturnType<typeof clock>;

/** The SessionRouter objects in memory: same decisions, counted calls, switchable failure. */
class FakeStore implements SessionStore {
  readonly bindings = new Map<string, StoredBinding>();
  readonly log: string[] = [];
  resolves = 0;
  rebinds = 0;
  writes = 0;
  failing = false;
  constructor(private readonly clock: Clock) {}

  async resolve(d: Deployment, session: string, proposal: string): Promise<string> {
    this.resolves++;
    this.log.push(`resolve ${session} ${proposal}`);
    if (this.failing) throw new Error("store unreachable");
    return this.#apply(d, session, resolveBinding(this.bindings.get(key(d, session)) ?? null, proposal, this.clock.now(), ttlMs(d)));
  }

  async rebind(d: Deployment, session: string, from: string, to: string): Promise<string> {
    this.rebinds++;
    this.log.push(`rebind ${session} ${from}->${to}`);
    if (this.failing) throw new Error("store unreachable");
    return this.#apply(d, session, rebindBinding(this.bindings.get(key(d, session)) ?? null, from, to, this.clock.now(), ttlMs(d)));
  }

  get calls(): number {
    return this.resolves + this.rebinds;
  }

  bound(d: Deployment, session: string): string | undefined {
    return this.bindings.get(key(d, session))?.replica;
  }

  /** What "another isolate" or an earlier process left in the object. */
  seed(d: Deployment, session: string, replica: string): void {
    this.bindings.set(key(d, session), { replica, expiresAt: this.clock.now() + ttlMs(d) });
  }

  #apply(d: Deployment, session: string, decision: BindingDecision): string {
    if (decision.write) {
      this.writes++;
      this.bindings.set(key(d, session), decision.write);
    }
    return decision.replica;
  }
}

const key = (d: Deployment, session: string) => `${d.name}/${session}`;
const ttlMs = (d: Deployment) => d.sessionAffinity.ttlSeconds * 1000;

const base: DeploymentInput = { name: "chat", routePrefix: "/chat", backend: { kind: "echo" } };
// These tests are about bound sessions, so sessions bind on their first request
// here (bindOnRequest 1); "binding on the second request" below covers the default.
const dep = (sessionAffinity: DeploymentInput["sessionAffinity"] = {}, name = "chat"): Deployment =>
  defineDeployment({ ...base, name, routePrefix: `/${name}`, sessionAffinity: { bindOnRequest: 1, ...sessionAffinity } });

function replica(id: string, ongoing = 0, over: Partial<Load> = {}): ReplicaView {
  return { id, url: `http://${id}.test:8000`, epoch: 1, models: [], loading: [], expiresInMs: 60_000, load: { seq: 1, ongoing, queued: 0, max: 5, state: "ready", ...over } };
}

/** A routing view holding the given replicas (one per isolate in the tests). */
function viewOf(c: Clock, ...replicas: ReplicaView[]): RoutingView {
  const v = new RoutingView();
  v.applySnapshot({ deployment: "chat", replicas }, c.now());
  return v;
}

/** Deterministic policy: least relative load, then id. Counts calls. */
function proposer() {
  const p = {
    calls: 0,
    fn: (among: readonly ReplicaEntry[]): ReplicaEntry | undefined => {
      p.calls++;
      let best: ReplicaEntry | undefined;
      for (const e of among) {
        if (!best || e.load / e.capacity < best.load / best.capacity || (e.load / e.capacity === best.load / best.capacity && e.id < best.id)) best = e;
      }
      return best;
    },
  };
  return p;
}

/** Sets a replica's reported load through a newer load header (as responses do). */
function setLoad(v: RoutingView, id: string, c: Clock, over: Partial<Load>): void {
  const e = v.get(id)!;
  v.applyLoad(id, { ...e.reported, seq: e.reported.seq + 1, ...over }, c.now());
}

/** Lets the saturation grace pass, keeping every replica's load and liveness as they were. */
function afterGrace(v: RoutingView, c: Clock): void {
  c.advance(SATURATION_GRACE_MS);
  for (const e of v.candidates(c.now() - SATURATION_GRACE_MS)) v.applyLoad(e.id, { ...e.reported, seq: e.reported.seq + 1 }, c.now());
}

let errorSpy: ReturnType<typeof vi.spyOn>;
beforeEach(() => {
  // Store failures are logged with console.error; keep test output clean.
  errorSpy = vi.spyOn(console, "error").mockImplementation(() => undefined);
});
afterEach(() => {
  errorSpy.mockRestore();
});

describe("constants", () => {
  it("the retry after a store failure is shorter than the cache TTL", () => {
    expect(SESSION_STORE_RETRY_MS).toBeLessThan(SESSION_CACHE_TTL_MS);
    expect(SESSION_CACHE_MAX).toBeGreaterThan(0);
  });
});

describe("SessionAffinity.choose: resolving and caching", () => {
  it("the first request resolves via the store with the policy's proposal, and the binding is stored", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 3), replica("r2", 1), replica("r3", 2));
    const d = dep();
    const p = proposer();
    const chosen = await a.choose(d, "s1", v.candidates(c.now()), p.fn);
    expect(chosen).toBe(v.get("r2"));
    expect(store.log).toEqual(["resolve s1 r2"]);
    expect(store.bound(d, "s1")).toBe("r2");
    expect(store.bindings.get(key(d, "s1"))!.expiresAt).toBe(T0 + 600_000);
    expect(a.storeCalls).toBe(1);
    expect(a.cached).toBe(1);
  });

  it("a binding already in the store wins over the proposal", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const d = dep();
    store.seed(d, "s1", "r3");
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r3", 4));
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r3");
    expect(store.log).toEqual(["resolve s1 r1"]);
    expect(store.writes).toBe(0);
  });

  it("within SESSION_CACHE_TTL_MS the store is not asked again, even when other replicas are less loaded", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 0));
    const d = dep();
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    setLoad(v, "r1", c, { ongoing: 4 });
    for (let n = 0; n < 100; n++) {
      c.advance(Math.floor((SESSION_CACHE_TTL_MS - 1) / 100));
      expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    }
    expect(c.now() - T0).toBeLessThan(SESSION_CACHE_TTL_MS);
    expect(store.calls).toBe(1);
    expect(a.storeCalls).toBe(1);
  });

  it("a cache hit does not even call the policy", async () => {
    const c = clock();
    const a = new SessionAffinity(new FakeStore(c), c.now);
    const v = viewOf(c, replica("r1"), replica("r2"));
    const d = dep();
    const p = proposer();
    await a.choose(d, "s1", v.candidates(c.now()), p.fn);
    const after = p.calls;
    await a.choose(d, "s1", v.candidates(c.now()), p.fn);
    expect(p.calls).toBe(after);
  });

  it("asks the store again once SESSION_CACHE_TTL_MS has passed (keeping the binding)", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    c.advance(SESSION_CACHE_TTL_MS - 1);
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    expect(store.resolves).toBe(1);
    c.advance(1);
    // r2 is now the less loaded; the binding (r1) still holds.
    setLoad(v, "r1", c, { ongoing: 3 });
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect(store.log).toEqual(["resolve s1 r1", "resolve s1 r2"]);
    // The re-resolve kept the binding without writing (less than half the TTL used).
    expect(store.writes).toBe(1);
    expect(store.bound(d, "s1")).toBe("r1");
  });

  it("a binding changed by another isolate wins here within one TTL", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const d = dep();
    const isoA = new SessionAffinity(store, c.now);
    const isoB = new SessionAffinity(store, c.now);
    const viewA = viewOf(c, replica("r1", 0), replica("r2", 1));
    const viewB = viewOf(c, replica("r1", 0), replica("r2", 1));
    expect((await isoA.choose(d, "s1", viewA.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect((await isoB.choose(d, "s1", viewB.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    // Isolate B sees r1 fail and moves the session to r2.
    c.advance(100);
    viewB.markDown("r1", c.now());
    expect((await isoB.choose(d, "s1", viewB.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r2");
    // Isolate A still trusts its cache until the TTL runs out...
    expect((await isoA.choose(d, "s1", viewA.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    // ...then follows the stored binding, even though r1 looks fine and less loaded to it.
    c.advance(SESSION_CACHE_TTL_MS);
    expect((await isoA.choose(d, "s1", viewA.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r2");
  });

  it("returns undefined without calling the store when there is no candidate", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    expect(await a.choose(dep(), "s1", [], proposer().fn)).toBeUndefined();
    expect(store.calls).toBe(0);
    expect(a.storeCalls).toBe(0);
    expect(a.cached).toBe(0);
  });

  it("keeps sessions of different deployments apart", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const one = dep({}, "one");
    const two = dep({}, "two");
    store.seed(one, "s", "r1");
    store.seed(two, "s", "r2");
    const v = viewOf(c, replica("r1"), replica("r2"));
    expect((await a.choose(one, "s", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect((await a.choose(two, "s", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.resolves).toBe(2);
    expect(a.cached).toBe(2);
  });

  it("caches each session separately", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1"), replica("r2"));
    const d = dep();
    store.seed(d, "s2", "r2");
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect((await a.choose(d, "s2", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect((await a.choose(d, "s2", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.resolves).toBe(2);
  });
});

describe("SessionAffinity.choose: moving a session off its replica", () => {
  async function bound(c: Clock, d = dep()) {
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    // r1's last report goes stale after 3 s unless something refreshes it (shorter than the cache TTL).
    const v = viewOf(c, { ...replica("r1", 0), expiresInMs: 3_000 }, replica("r2", 1), replica("r3", 2));
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect(store.bound(d, "s1")).toBe("r1");
    return { store, a, v, d };
  }

  const cases: [string, (v: RoutingView, c: Clock) => void][] = [
    ["cooling down after a connection failure", (v, c) => v.markDown("r1", c.now())],
    ["draining", (v, c) => setLoad(v, "r1", c, { state: "draining" })],
    ["dead (gone from the snapshot)", (v, c) => v.applySnapshot({ deployment: "chat", replicas: [replica("r2", 1), replica("r3", 2)] }, c.now())],
    ["stale (no report or response for too long)", (_v, c) => c.advance(3_000)],
  ];
  for (const [what, breakIt] of cases) {
    it(`rebinds to the proposal when the bound replica is ${what}, and stores it`, async () => {
      const c = clock();
      const { store, a, v, d } = await bound(c);
      c.advance(10);
      breakIt(v, c);
      expect(c.now() - T0).toBeLessThan(SESSION_CACHE_TTL_MS);
      expect(v.candidates(c.now()).map((e) => e.id)).not.toContain("r1");
      const before = store.calls;
      const chosen = await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
      expect(chosen?.id).toBe("r2");
      expect(chosen).toBe(v.get("r2"));
      expect(store.log.slice(before)).toEqual(["rebind s1 r1->r2"]);
      expect(store.bound(d, "s1")).toBe("r2");
      // The new binding is cached: no further store calls within the TTL.
      for (let n = 0; n < 10; n++) expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
      expect(store.calls).toBe(before + 1);
    });
  }

  it("rebinds when the bound replica reaches capacity (rebindAtLoad 1), not before", async () => {
    const c = clock();
    const { store, a, v, d } = await bound(c);
    setLoad(v, "r1", c, { ongoing: 4 });
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect(store.calls).toBe(1);
    setLoad(v, "r1", c, { ongoing: 5 });
    // Full but alive: this request spills to r2, the binding stays (no store call)...
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.log).toEqual(["resolve s1 r1"]);
    expect(store.bound(d, "s1")).toBe("r1");
    // ...until it has been full for the whole grace period: then the session moves.
    afterGrace(v, c);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.log).toEqual(["resolve s1 r1", "rebind s1 r1->r2"]);
    expect(store.bound(d, "s1")).toBe("r2");
  });

  it("counts this isolate's in-flight dispatches in the load", async () => {
    const c = clock();
    const { store, a, v, d } = await bound(c);
    const r1 = v.get("r1")!;
    for (let n = 0; n < 4; n++) v.startDispatch(r1);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    v.startDispatch(r1);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r1");
    afterGrace(v, c);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r2");
  });

  it("rebindAtLoad below 1 moves the session earlier", async () => {
    const c = clock();
    const { store, a, v, d } = await bound(c, dep({ rebindAtLoad: 0.5 }));
    setLoad(v, "r1", c, { ongoing: 2 }); // 2 < 2.5
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    setLoad(v, "r1", c, { ongoing: 3 }); // 3 >= 2.5
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r1");
    afterGrace(v, c);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r2");
  });

  it("rebindAtLoad above 1 lets the session queue on its replica", async () => {
    const c = clock();
    const { store, a, v, d } = await bound(c, dep({ rebindAtLoad: 2 }));
    setLoad(v, "r1", c, { ongoing: 5, queued: 4 }); // 9 < 10
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    setLoad(v, "r1", c, { ongoing: 5, queued: 5 }); // 10 >= 10
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r1");
    afterGrace(v, c);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r2");
  });

  it("proposes among the other replicas only (never the one it moves away from)", async () => {
    const c = clock();
    const { a, v, d } = await bound(c);
    const offered: string[][] = [];
    setLoad(v, "r1", c, { ongoing: 5 });
    await a.choose(d, "s1", v.candidates(c.now()), (among) => {
      offered.push(among.map((e) => e.id).sort());
      return proposer().fn(among);
    });
    expect(offered).toEqual([["r2", "r3"]]);
  });

  it("a stored binding this isolate cannot use (unknown replica) is moved on the first request", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const d = dep();
    store.seed(d, "s1", "elsewhere");
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect(store.log).toEqual(["resolve s1 r1", "rebind s1 elsewhere->r1"]);
    expect(store.bound(d, "s1")).toBe("r1");
  });

  it("concurrent isolates moving the same session converge on one replica (compare-and-set)", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const d = dep();
    const isoA = new SessionAffinity(store, c.now);
    const isoB = new SessionAffinity(store, c.now);
    // The two isolates see different loads, so they propose different replicas.
    const viewA = viewOf(c, replica("r1", 0), replica("r2", 1), replica("r3", 2));
    const viewB = viewOf(c, replica("r1", 0), replica("r2", 3), replica("r3", 2));
    expect((await isoA.choose(d, "s1", viewA.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect((await isoB.choose(d, "s1", viewB.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    // r1 starts draining; both isolates learn it and move the session at the same time.
    setLoad(viewA, "r1", c, { state: "draining" });
    setLoad(viewB, "r1", c, { state: "draining" });
    const [fromA, fromB] = await Promise.all([
      isoA.choose(d, "s1", viewA.candidates(c.now()), proposer().fn),
      isoB.choose(d, "s1", viewB.candidates(c.now()), proposer().fn),
    ]);
    expect(store.log.slice(2)).toEqual(["rebind s1 r1->r2", "rebind s1 r1->r3"]);
    expect(fromA?.id).toBe("r2");
    expect(fromB?.id).toBe("r2");
    expect(fromB).toBe(viewB.get("r2"));
    expect(store.bound(d, "s1")).toBe("r2");
    // Both caches hold the winner.
    expect((await isoB.choose(d, "s1", viewB.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.rebinds).toBe(2);
  });

  it("when the winning binding is unusable here, the request goes to this isolate's proposal", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const d = dep();
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1), replica("r3", 2));
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    // Another isolate moved the session to r3, which is full in this view; r1 is down here.
    store.seed(d, "s1", "r3");
    setLoad(v, "r3", c, { ongoing: 5 });
    v.markDown("r1", c.now());
    const chosen = await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    expect(chosen?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r3");
  });
});

describe("SessionAffinity.choose: saturation (nowhere better to go)", () => {
  it("a full bound replica that is the only candidate keeps the session, without a store call per request", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    setLoad(v, "r1", c, { ongoing: 5 });
    for (let n = 0; n < 20; n++) {
      c.advance(100);
      expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    }
    expect(store.calls).toBe(1);
    expect(store.writes).toBe(1);
    expect(store.bound(d, "s1")).toBe("r1");
  });

  it("when every replica is at the threshold the session stays put instead of flapping (no write per request)", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    setLoad(v, "r1", c, { ongoing: 5 });
    setLoad(v, "r2", c, { ongoing: 6 });
    const seen: string[] = [];
    for (let n = 0; n < 20; n++) {
      c.advance(100);
      seen.push((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))!.id);
    }
    expect(new Set(seen)).toEqual(new Set(["r1"]));
    expect(store.calls).toBe(1);
    expect(store.bound(d, "s1")).toBe("r1");
    // Once another replica has room again, requests spill there at once, and the
    // session moves there (one rebind) when its own replica stayed full for the grace period.
    setLoad(v, "r2", c, { ongoing: 2 });
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.log.slice(1)).toEqual([]);
    afterGrace(v, c);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.log.slice(1)).toEqual(["rebind s1 r1->r2"]);
    expect(store.bound(d, "s1")).toBe("r2");
  });

  it("a full bound replica is still re-resolved once per cache TTL (keeping the binding alive)", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    setLoad(v, "r1", c, { ongoing: 5 });
    c.advance(SESSION_CACHE_TTL_MS);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r1");
    expect(store.log).toEqual(["resolve s1 r1", "resolve s1 r1"]);
  });

  it("a bound replica that is gone still moves, even to a full replica", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    setLoad(v, "r2", c, { ongoing: 5 });
    v.markDown("r1", c.now(), 60_000);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.bound(d, "s1")).toBe("r2");
  });
});

describe("SessionAffinity.choose: store failures", () => {
  it("an unreachable store never fails the request: the proposal is returned", async () => {
    const c = clock();
    const store = new FakeStore(c);
    store.failing = true;
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 2), replica("r2", 0));
    const chosen = await a.choose(dep(), "s1", v.candidates(c.now()), proposer().fn);
    expect(chosen).toBe(v.get("r2"));
    expect(store.resolves).toBe(1);
    expect(errorSpy).toHaveBeenCalled();
    expect(String(errorSpy.mock.calls[0]![0])).toContain("session store call failed");
  });

  it("after a failure the store is not asked again for SESSION_STORE_RETRY_MS, then it is", async () => {
    const c = clock();
    const store = new FakeStore(c);
    store.failing = true;
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 2), replica("r2", 0));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    store.failing = false;
    for (let n = 0; n < 10; n++) {
      c.advance(Math.floor((SESSION_STORE_RETRY_MS - 1) / 10));
      expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    }
    expect(c.now() - T0).toBeLessThan(SESSION_STORE_RETRY_MS);
    expect(store.calls).toBe(1);
    c.advance(SESSION_STORE_RETRY_MS - (c.now() - T0));
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.log).toEqual(["resolve s1 r2", "resolve s1 r2"]);
    expect(store.bound(d, "s1")).toBe("r2");
  });

  it("a failed rebind routes to the proposal and waits SESSION_STORE_RETRY_MS before asking again", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    store.failing = true;
    v.markDown("r1", c.now(), 60_000);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.log).toEqual(["resolve s1 r1", "rebind s1 r1->r2"]);
    store.failing = false;
    c.advance(SESSION_STORE_RETRY_MS - 1);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.calls).toBe(2);
    // The store still says r1 (the rebind never landed); asked again, the session moves for real.
    c.advance(1);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.log.slice(2)).toEqual(["resolve s1 r2", "rebind s1 r1->r2"]);
    expect(store.bound(d, "s1")).toBe("r2");
  });
});

describe("SessionAffinity.served", () => {
  it("moves the binding when another replica served the request (in the background)", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    const bg: Promise<unknown>[] = [];
    a.served(d, "s1", "r2", (p) => bg.push(p));
    expect(bg).toHaveLength(1);
    // The cache follows at once, before the store answers.
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    await Promise.all(bg);
    expect(store.log).toEqual(["resolve s1 r1", "rebind s1 r1->r2"]);
    expect(store.bound(d, "s1")).toBe("r2");
    expect(a.storeCalls).toBe(2);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
    expect(store.calls).toBe(2);
  });

  it("does nothing when the bound replica served it", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1"), replica("r2"));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    const bg: Promise<unknown>[] = [];
    a.served(d, "s1", "r1", (p) => bg.push(p));
    expect(bg).toEqual([]);
    expect(store.calls).toBe(1);
  });

  it("does nothing for a session this isolate has not cached", () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const bg: Promise<unknown>[] = [];
    a.served(dep(), "unknown", "r2", (p) => bg.push(p));
    expect(bg).toEqual([]);
    expect(store.calls).toBe(0);
    expect(a.cached).toBe(0);
  });

  it("if another isolate moved the session meanwhile, the stored binding wins in the cache", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1), replica("r3", 2));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    store.seed(d, "s1", "r3");
    const bg: Promise<unknown>[] = [];
    a.served(d, "s1", "r2", (p) => bg.push(p));
    await Promise.all(bg);
    expect(store.bound(d, "s1")).toBe("r3");
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r3");
  });

  it("a store failure in the background is caught and logged, and the cache keeps the served replica", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    await a.choose(d, "s1", v.candidates(c.now()), proposer().fn);
    store.failing = true;
    const bg: Promise<unknown>[] = [];
    a.served(d, "s1", "r2", (p) => bg.push(p));
    await expect(Promise.all(bg)).resolves.toBeDefined();
    expect(errorSpy).toHaveBeenCalled();
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))?.id).toBe("r2");
  });
});

describe("SessionAffinity cache bound", () => {
  it(`keeps at most SESSION_CACHE_MAX (${SESSION_CACHE_MAX}) bindings, dropping the oldest`, async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1"), replica("r2"));
    const cands = v.candidates(c.now());
    const d = dep();
    const p = proposer().fn;
    for (let i = 0; i <= SESSION_CACHE_MAX; i++) await a.choose(d, `s${i}`, cands, p);
    expect(a.cached).toBe(SESSION_CACHE_MAX);
    expect(store.resolves).toBe(SESSION_CACHE_MAX + 1);
    // The newest is still cached; the oldest was dropped and needs the store again.
    await a.choose(d, `s${SESSION_CACHE_MAX}`, cands, p);
    expect(store.resolves).toBe(SESSION_CACHE_MAX + 1);
    await a.choose(d, "s1", cands, p);
    expect(store.resolves).toBe(SESSION_CACHE_MAX + 1);
    await a.choose(d, "s0", cands, p);
    expect(store.resolves).toBe(SESSION_CACHE_MAX + 2);
    expect(a.cached).toBe(SESSION_CACHE_MAX);
  });
});

describe("SessionAffinity: binding on the second request (the default, bindOnRequest 2)", () => {
  const dep2 = (over: DeploymentInput["sessionAffinity"] = {}) => defineDeployment({ ...base, sessionAffinity: over });

  it("defaults: bind on the 2nd request, 10 new bindings/s and a burst of 100 per client", () => {
    expect(dep2().sessionAffinity).toMatchObject({ bindOnRequest: 2, maxNewBindingsPerSecond: 10, maxNewBindingsBurst: 100 });
  });

  it("a session's first request costs no store call, and isolates with the same replicas place it on the same one", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const d = dep2();
    const isolates = Array.from({ length: 4 }, () => new SessionAffinity(store, c.now));
    const views = isolates.map(() => viewOf(c, replica("r1"), replica("r2"), replica("r3"), replica("r4")));
    for (let s = 0; s < 50; s++) {
      const placed = new Set<string>();
      for (let i = 0; i < isolates.length; i++) placed.add((await isolates[i]!.choose(d, `s${s}`, views[i]!.candidates(c.now()), proposer().fn))!.id);
      expect(placed.size).toBe(1);
    }
    expect(store.calls).toBe(0);
    expect(isolates[0]!.unbound).toBe(50);
  });

  it("placeNew (a prefix balancer's choice) places a new session, then the session sticks whatever placeNew says next", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1"), replica("r2"), replica("r3"), replica("r4"));
    const d = dep2();
    const to = (id: string) => (among: readonly ReplicaEntry[]) => among.find((e) => e.id === id);
    // Rendezvous on the id would place it somewhere; the prompt's choice wins.
    const hashed = (await new SessionAffinity(new FakeStore(c), c.now).choose(d, "chat-7", v.candidates(c.now()), proposer().fn))!.id;
    const target = ["r1", "r2", "r3", "r4"].find((id) => id !== hashed)!;
    expect((await a.choose(d, "chat-7", v.candidates(c.now()), proposer().fn, "", () => [], undefined, to(target)))!.id).toBe(target);
    // The next turn's prompt would go elsewhere: the session stays, and binds where it is.
    const elsewhere = ["r1", "r2", "r3", "r4"].find((id) => id !== target)!;
    expect((await a.choose(d, "chat-7", v.candidates(c.now()), proposer().fn, "", () => [], undefined, to(elsewhere)))!.id).toBe(target);
    expect(store.bound(d, "chat-7")).toBe(target);
    expect((await a.choose(d, "chat-7", v.candidates(c.now()), proposer().fn, "", () => [], undefined, to(elsewhere)))!.id).toBe(target);
  });

  it("placeNew sees only the usable candidates (below the rebind threshold)", async () => {
    const c = clock();
    const a = new SessionAffinity(new FakeStore(c), c.now);
    const v = viewOf(c, replica("r1", 5), replica("r2"));
    const seen: string[][] = [];
    const place = (among: readonly ReplicaEntry[]) => (seen.push(among.map((e) => e.id)), among[0]);
    expect((await a.choose(dep2(), "s", v.candidates(c.now()), proposer().fn, "", () => [], undefined, place))!.id).toBe("r2");
    expect(seen).toEqual([["r2"]]);
  });

  it("ids used once cost nothing in the objects: 1,200 sessions, 0 calls, 0 writes", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1"), replica("r2"));
    for (let s = 0; s < 1200; s++) expect(await a.choose(dep2(), `one-shot-${s}`, v.candidates(c.now()), proposer().fn)).toBeDefined();
    expect(store.calls).toBe(0);
    expect(store.writes).toBe(0);
  });

  it("the second request binds the session where the first went (one resolve, one write), then the binding is cached", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1"), replica("r2"), replica("r3"));
    const d = dep2();
    const first = (await a.choose(d, "chat-42", v.candidates(c.now()), proposer().fn))!.id;
    expect(store.calls).toBe(0);
    expect((await a.choose(d, "chat-42", v.candidates(c.now()), proposer().fn))!.id).toBe(first);
    expect(store.log).toEqual([`resolve chat-42 ${first}`]);
    expect(store.bound(d, "chat-42")).toBe(first);
    expect(store.writes).toBe(1);
    expect((await a.choose(d, "chat-42", v.candidates(c.now()), proposer().fn))!.id).toBe(first);
    expect(store.calls).toBe(1);
    expect(a.unbound).toBe(0);
  });

  it("the hash skips a replica at the rebind threshold, and all isolates skip it alike", async () => {
    const c = clock();
    const d = dep2();
    const a = new SessionAffinity(new FakeStore(c), c.now);
    const v = viewOf(c, replica("r1"), replica("r2"), replica("r3"));
    // Find a session the hash sends to r2, then fill r2.
    const session = await firstOf("session the hash sends to r2", 10_000, async (s) =>
      (await new SessionAffinity(new FakeStore(c), c.now).choose(d, `s${s}`, v.candidates(c.now()), proposer().fn))!.id === "r2" ? `s${s}` : undefined,
    );
    setLoad(v, "r2", c, { ongoing: 5 });
    const elsewhere = (await a.choose(d, session, v.candidates(c.now()), proposer().fn))!.id;
    expect(elsewhere).not.toBe("r2");
    const other = new SessionAffinity(new FakeStore(c), c.now);
    expect((await other.choose(d, session, v.candidates(c.now()), proposer().fn))!.id).toBe(elsewhere);
  });

  it("spreads sessions over the replicas", async () => {
    const c = clock();
    const a = new SessionAffinity(new FakeStore(c), c.now);
    const v = viewOf(c, replica("r1"), replica("r2"), replica("r3"), replica("r4"));
    const counts = new Map<string, number>();
    for (let s = 0; s < 2000; s++) {
      const id = (await a.choose(dep2(), `user-${s}`, v.candidates(c.now()), proposer().fn))!.id;
      counts.set(id, (counts.get(id) ?? 0) + 1);
    }
    expect(counts.size).toBe(4);
    for (const n of counts.values()) expect(n).toBeGreaterThan(2000 * 0.18);
  });

  it("a client's new bindings are bounded per isolate: past the burst, sessions stay unbound (still placed, no store call) until the budget refills", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1"), replica("r2"));
    const d = dep2({ maxNewBindingsPerSecond: 2, maxNewBindingsBurst: 5 });
    for (let s = 0; s < 20; s++) {
      for (let r = 0; r < 2; r++) expect(await a.choose(d, `s${s}`, v.candidates(c.now()), proposer().fn, "key:attacker")).toBeDefined();
    }
    expect(store.writes).toBe(5);
    expect(store.calls).toBe(5);
    // Another client has its own budget.
    await a.choose(d, "friend", v.candidates(c.now()), proposer().fn, "key:friend");
    await a.choose(d, "friend", v.candidates(c.now()), proposer().fn, "key:friend");
    expect(store.bound(d, "friend")).toBeDefined();
    // One second refills two bindings for the first client.
    c.advance(1000);
    for (let s = 100; s < 104; s++) for (let r = 0; r < 2; r++) await a.choose(d, `s${s}`, v.candidates(c.now()), proposer().fn, "key:attacker");
    expect(store.writes).toBe(5 + 1 + 2);
  });

  it("a retry that served an unbound session elsewhere makes its next request start there, without a store call", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1"), replica("r2"));
    const d = dep2({ bindOnRequest: 3 });
    const first = (await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))!.id;
    const other = first === "r1" ? "r2" : "r1";
    a.served(d, "s1", other, () => undefined);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))!.id).toBe(other);
    expect(store.calls).toBe(0);
    // The third request binds it there.
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))!.id).toBe(other);
    expect(store.log).toEqual([`resolve s1 ${other}`]);
  });
});

describe("SessionAffinity: a bound replica that is merely late", () => {
  it("is still tried first when it is among the lapsed replicas, with no store call; gone from both lists, the session moves", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const d = dep();
    const v = viewOf(c, { ...replica("r1"), expiresInMs: 1_000 }, replica("r2"));
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn))!.id).toBe("r1");
    c.advance(1_500);
    // r1's liveness lapsed here, but nothing showed it dead.
    expect(v.candidates(c.now()).map((e) => e.id)).toEqual(["r2"]);
    const late = v.lapsed(c.now());
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn, "", () => late))!.id).toBe("r1");
    expect(store.rebinds).toBe(0);
    // Without it in either list (a snapshot dropped it, or a connection failed), the session moves.
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn, "", () => []))!.id).toBe("r2");
    expect(store.rebinds).toBe(1);
  });
});

describe("SessionAffinity with binding tokens", () => {
  const tokenKey = deriveSessionTokenKey("test-master-secret");
  /** An isolate: affinity over the shared fake store, with real tokens under the test key. */
  function isolate(c: Clock, store: FakeStore) {
    const tokens = new SessionTokens(() => tokenKey, c.now);
    return { a: new SessionAffinity(store, c.now, tokens), tokens };
  }
  /** One request as dispatch makes it: choose (with the client's token), then the response's token. */
  async function turn(a: SessionAffinity, d: Deployment, v: RoutingView, c: Clock, token?: string, session = "s1") {
    const chosen = await a.choose(d, session, v.candidates(c.now()), proposer().fn, "", () => v.lapsed(c.now()), token);
    const next = chosen ? await a.tokenFor(d, session, chosen.id) : undefined;
    return { replica: chosen?.id, token: next };
  }

  it("a client that sends the token back stays on its replica with no store call, long past the cache TTL", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const { a } = isolate(c, store);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    const first = await turn(a, d, v, c);
    expect(first).toMatchObject({ replica: "r1" });
    expect(readSessionToken(first.token!)).toEqual({ replica: "r1", expiresAt: T0 / 1000 + 600 });
    expect(store.calls).toBe(1);
    let token = first.token;
    for (let n = 0; n < 50; n++) {
      c.advance(SESSION_CACHE_TTL_MS);
      // r2 looks better now; the token holds.
      setLoad(v, "r1", c, { ongoing: 3 });
      setLoad(v, "r2", c, { ongoing: 0 });
      const t = await turn(a, d, v, c, token);
      expect(t.replica).toBe("r1");
      token = t.token;
    }
    expect(store.calls).toBe(1);
    expect(a.storeCalls).toBe(1);
    // 250 s in: still the first token (more than half its life left).
    expect(token).toBe(first.token);
  });

  it("with the default bindOnRequest (2), a token client never calls the store: the first request is placed by hash", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const { a } = isolate(c, store);
    const v = viewOf(c, replica("r1"), replica("r2"), replica("r3"));
    const d = defineDeployment({ ...base, sessionAffinity: {} });
    const first = await turn(a, d, v, c);
    expect(readSessionToken(first.token!)?.replica).toBe(first.replica);
    let token = first.token;
    for (let n = 0; n < 10; n++) {
      const t = await turn(a, d, v, c, token);
      expect(t.replica).toBe(first.replica);
      token = t.token;
    }
    expect(store.calls).toBe(0);
  });

  it("a client that ignores the token keeps the lookup path (and still gets tokens)", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const { a } = isolate(c, store);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    for (let n = 0; n < 3; n++) {
      const t = await turn(a, d, v, c);
      expect(t.replica).toBe("r1");
      expect(readSessionToken(t.token!)?.replica).toBe("r1");
      c.advance(SESSION_CACHE_TTL_MS);
    }
    expect(store.log).toEqual(["resolve s1 r1", "resolve s1 r1", "resolve s1 r1"]);
  });

  it("another isolate honours the token with no store call, over a binding it cached from the store", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const isoA = isolate(c, store).a;
    const isoB = isolate(c, store).a;
    const vA = viewOf(c, replica("r1", 0), replica("r2", 1));
    const vB = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    expect((await turn(isoA, d, vA, c)).replica).toBe("r1");
    // Isolate B moves the session to r2 (r1 failed there); its response carries a token for r2.
    vB.markDown("r1", c.now());
    const moved = await turn(isoB, d, vB, c);
    expect(moved.replica).toBe("r2");
    const before = store.calls;
    // Isolate A still has r1 cached and fresh; the token wins.
    expect((await turn(isoA, d, vA, c, moved.token)).replica).toBe("r2");
    expect(store.calls).toBe(before);
  });

  it("a token whose replica is gone moves the session compare-and-set, and the response names the new replica; the new token then costs nothing", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const { a } = isolate(c, store);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1), replica("r3", 2));
    const d = dep();
    const first = await turn(a, d, v, c);
    c.advance(60_000);
    for (const e of v.candidates(c.now() - 60_000)) v.applyLoad(e.id, { ...e.reported, seq: e.reported.seq + 1 }, c.now());
    v.markDown("r1", c.now(), 60_000);
    const moved = await turn(a, d, v, c, first.token);
    expect(moved.replica).toBe("r2");
    expect(store.log).toEqual(["resolve s1 r1", "rebind s1 r1->r2"]);
    expect(store.bound(d, "s1")).toBe("r2");
    expect(readSessionToken(moved.token!)?.replica).toBe("r2");
    for (let n = 0; n < 5; n++) expect((await turn(a, d, v, c, moved.token)).replica).toBe("r2");
    expect(store.calls).toBe(2);
  });

  it("a token for a replica the store already moved elsewhere follows the store (compare-and-set)", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const { a } = isolate(c, store);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1), replica("r3", 2));
    const d = dep();
    const first = await turn(a, d, v, c);
    // Another isolate moved it to r3 meanwhile; here r1 is gone too.
    store.seed(d, "s1", "r3");
    c.advance(SESSION_CACHE_TTL_MS);
    v.markDown("r1", c.now(), 60_000);
    const t = await turn(a, d, v, c, first.token);
    expect(t.replica).toBe("r3");
    expect(readSessionToken(t.token!)?.replica).toBe("r3");
  });

  it("a token whose replica is full spills within the grace period (no store call, the token keeps naming it), then moves", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const { a } = isolate(c, store);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    const first = await turn(a, d, v, c);
    c.advance(SESSION_CACHE_TTL_MS);
    setLoad(v, "r1", c, { ongoing: 5 });
    setLoad(v, "r2", c, { ongoing: 1 });
    const spilled = await turn(a, d, v, c, first.token);
    expect(spilled.replica).toBe("r2");
    expect(spilled.token).toBe(first.token);
    expect(store.calls).toBe(1);
    afterGrace(v, c);
    const moved = await turn(a, d, v, c, spilled.token);
    expect(moved.replica).toBe("r2");
    expect(store.log).toEqual(["resolve s1 r1", "rebind s1 r1->r2"]);
    expect(readSessionToken(moved.token!)?.replica).toBe("r2");
  });

  it("a stale token from before this isolate moved the session does not move it again", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const { a } = isolate(c, store);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    const first = await turn(a, d, v, c);
    v.markDown("r1", c.now(), 60_000);
    expect((await turn(a, d, v, c, first.token)).replica).toBe("r2");
    const calls = store.calls;
    // A request sent concurrently with the old token: r1 is still unusable, this isolate's fresh binding wins.
    expect((await turn(a, d, v, c, first.token)).replica).toBe("r2");
    expect(store.calls).toBe(calls);
  });

  it("a retry served elsewhere after the token's replica failed moves the binding, and the token follows", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const { a } = isolate(c, store);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    const first = await turn(a, d, v, c);
    c.advance(SESSION_CACHE_TTL_MS);
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn, "", () => [], first.token))?.id).toBe("r1");
    // r1 refused the connection; the retry went to r2.
    const bg: Promise<unknown>[] = [];
    a.served(d, "s1", "r2", (p) => bg.push(p));
    const token = await a.tokenFor(d, "s1", "r2");
    expect(readSessionToken(token!)?.replica).toBe("r2");
    await Promise.all(bg);
    expect(store.log).toEqual(["resolve s1 r1", "rebind s1 r1->r2"]);
  });

  const invalid: [string, (d: Deployment, good: string) => Promise<string>][] = [
    ["forged", async () => "st1.WyJyMiIsOTk5OTk5OTk5OV0.AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA"],
    ["garbage", async () => "not a token at all"],
    ["for another session", async (d) => signSessionToken(await tokenKey, d.name, "s2", { replica: "r2", expiresAt: T0 / 1000 + 600 })],
    ["for another deployment", async () => signSessionToken(await tokenKey, "other", "s1", { replica: "r2", expiresAt: T0 / 1000 + 600 })],
    ["expired", async (d) => signSessionToken(await tokenKey, d.name, "s1", { replica: "r2", expiresAt: T0 / 1000 - 1 })],
    ["under another key", async (d) => signSessionToken(await deriveSessionTokenKey("another master"), d.name, "s1", { replica: "r2", expiresAt: T0 / 1000 + 600 })],
  ];
  for (const [what, make] of invalid) {
    it(`a token ${what} is ignored: the request is routed as without one`, async () => {
      const c = clock();
      const store = new FakeStore(c);
      const { a } = isolate(c, store);
      const v = viewOf(c, replica("r1", 0), replica("r2", 1));
      const d = dep();
      const t = await turn(a, d, v, c, await make(d, ""));
      expect(t.replica).toBe("r1");
      expect(store.log).toEqual(["resolve s1 r1"]);
      expect(readSessionToken(t.token!)?.replica).toBe("r1");
    });
  }

  it("without tokens configured, none is minted and a client's token is ignored", async () => {
    const c = clock();
    const store = new FakeStore(c);
    const a = new SessionAffinity(store, c.now);
    const v = viewOf(c, replica("r1", 0), replica("r2", 1));
    const d = dep();
    const token = await signSessionToken(await tokenKey, d.name, "s1", { replica: "r2", expiresAt: T0 / 1000 + 600 });
    expect((await a.choose(d, "s1", v.candidates(c.now()), proposer().fn, "", () => [], token))?.id).toBe("r1");
    expect(await a.tokenFor(d, "s1", "r1")).toBeUndefined();
  });

  it("a token that cannot be minted (no master secret) leaves the response without one, and is logged", async () => {
    const c = clock();
    const a = new SessionAffinity(new FakeStore(c), c.now, new SessionTokens(() => deriveSessionTokenKey(""), c.now));
    expect(await a.tokenFor(dep(), "s1", "r1")).toBeUndefined();
    expect(String(errorSpy.mock.calls.at(-1)?.[0])).toContain("session token not minted");
  });
});
