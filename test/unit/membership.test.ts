/** The routing Durable Object's membership decisions, with explicit times. */
import { describe, it, expect } from "vitest";
import type { RegisterMessage, ReportMessage } from "../../src/protocol/index.ts";
import { FORGET_AFTER_MS, Membership, REPORT_INTERVAL_MS, STALE_AFTER_MS } from "../../src/state/membership.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { T0 } from "../fixtures/clock.ts";
import { registerMessage, reportMessage } from "../fixtures/control-messages.ts";

const reg = (id: string, over: Partial<RegisterMessage> = {}): RegisterMessage => registerMessage(id, { deployment: "hello", max_ongoing_requests: 5, ...over });
const rep = (id: string, seq: number, over: Partial<ReportMessage> = {}): ReportMessage => reportMessage(id, seq, { deployment: "hello", ...over });

const snapIds = (m: Membership, now: number) => m.snapshot("hello", now).replicas.map((r) => r.id).sort();

describe("constants", () => {
  it("staleness leaves room for at least two missed reports and stays under 3 s", () => {
    expect(STALE_AFTER_MS).toBeGreaterThan(2 * REPORT_INTERVAL_MS);
    expect(STALE_AFTER_MS).toBeLessThanOrEqual(3_000);
    expect(FORGET_AFTER_MS).toBeGreaterThan(STALE_AFTER_MS);
  });
});

describe("Membership.register", () => {
  it("adds a fresh, ready member with seq -1 and the capacity as max", () => {
    const m = new Membership();
    expect(m.register(reg("a", { max_ongoing_requests: 7 }), T0)).toBe(true);
    const a = m.members.get("a")!;
    expect(a).toMatchObject({ id: "a", url: "http://a.test:8000", maxOngoing: 7, registeredAt: T0, lastReportAt: T0, models: [], loading: [] });
    expect("maxModels" in a).toBe(false);
    expect(a.load).toEqual({ seq: -1, ongoing: 0, queued: 0, max: 7, state: "ready" });
    expect(m.isFresh(a, T0)).toBe(true);
    expect(snapIds(m, T0)).toEqual(["a"]);
  });

  it("returns false (no storage write) for an identical re-registration, which starts a new epoch", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    expect(m.register(reg("a"), T0 + 5_000)).toBe(false);
    // A new registration is a new process: its seq starts over, so proxies must see a new epoch.
    expect(m.members.get("a")).toMatchObject({ registeredAt: T0 + 5_000, lastReportAt: T0 + 5_000 });
  });

  it("returns true when url or capacity changed, and resets registeredAt", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    expect(m.register(reg("a", { url: "http://moved:1" }), T0 + 1)).toBe(true);
    expect(m.members.get("a")!.registeredAt).toBe(T0 + 1);
    expect(m.register(reg("a", { url: "http://moved:1", max_ongoing_requests: 9 }), T0 + 2)).toBe(true);
    expect(m.members.get("a")).toMatchObject({ registeredAt: T0 + 2, maxOngoing: 9 });
  });

  it("carries region and coordinates to the snapshot; a change of either is an identity change (a storage write) (issue 57)", () => {
    const m = new Membership();
    const at = { region: "eu-central", coordinates: { lat: 50.11, lon: 8.68 } };
    expect(m.register(reg("a", at), T0)).toBe(true);
    expect(m.members.get("a")).toMatchObject(at);
    expect(m.snapshot("hello", T0).replicas[0]).toMatchObject(at);
    // On to the proxies' view: its entry, and describe (what the admin view shows).
    const view = new RoutingView();
    view.applySnapshot(m.snapshot("hello", T0), T0);
    expect(view.get("a")).toMatchObject(at);
    expect(view.describe(T0)[0]).toMatchObject(at);
    expect(m.register(reg("a", at), T0 + 1)).toBe(false);
    expect(m.register(reg("a", { ...at, region: "us-east-1" }), T0 + 2)).toBe(true);
    // A register is a new epoch: the view takes the new region.
    view.applySnapshot(m.snapshot("hello", T0 + 2), T0 + 2);
    expect(view.get("a")!.region).toBe("us-east-1");
    expect(m.members.get("a")!.region).toBe("us-east-1");
    expect(m.register(reg("a", { region: "us-east-1", coordinates: { lat: 50.11, lon: 9 } }), T0 + 3)).toBe(true);
    expect(m.register(reg("a", { region: "us-east-1", coordinates: { lat: 51, lon: 9 } }), T0 + 4)).toBe(true);
    expect(m.register(reg("a", { region: "us-east-1", coordinates: { lat: 51, lon: 9 } }), T0 + 5)).toBe(false);
    // Left out at the next register: gone (a new process says where it is, or not).
    expect(m.register(reg("a", { region: "us-east-1" }), T0 + 6)).toBe(true);
    expect("coordinates" in m.members.get("a")!).toBe(false);
    expect(m.register(reg("a"), T0 + 7)).toBe(true);
    const plain = m.snapshot("hello", T0 + 7).replicas[0]!;
    expect("region" in plain || "coordinates" in plain).toBe(false);
  });

  it("re-registration resets seq (a restarted process), the draining state, models and loading", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 500, { state: "draining", models: ["m1"], loading: ["m2"], ongoing: 3 }), T0 + 1);
    m.register(reg("a"), T0 + 2);
    const a = m.members.get("a")!;
    expect(a.load).toEqual({ seq: -1, ongoing: 0, queued: 0, max: 5, state: "ready" });
    // A new process has nothing loaded; proxies must not route model requests to it for models it lost.
    expect(a.models).toEqual([]);
    expect(a.loading).toEqual([]);
    expect(m.snapshot("hello", T0 + 2).replicas[0]).toMatchObject({ models: [], loading: [] });
    // The new process reports from seq 0 and is accepted.
    expect(m.report(rep("a", 0, { ongoing: 1 }), T0 + 3)).toBe("ok");
    expect(a.load.ongoing).toBe(1);
  });
});

describe("Membership.report", () => {
  it("answers unknown_replica for a replica that never registered", () => {
    const m = new Membership();
    expect(m.report(rep("ghost", 1), T0)).toBe("unknown_replica");
    expect(m.members.size).toBe(0);
  });

  it("stores load (max from the registration), models and kv", () => {
    const m = new Membership();
    m.register(reg("a", { max_ongoing_requests: 8 }), T0);
    expect(m.report(rep("a", 1, { ongoing: 3, queued: 2, kv_cache_usage: 0.4, models: ["x"] }), T0 + 100)).toBe("ok");
    const a = m.members.get("a")!;
    expect(a.load).toEqual({ seq: 1, ongoing: 3, queued: 2, max: 8, state: "ready", kv: 0.4 });
    expect(a.models).toEqual(["x"]);
    expect(a.lastReportAt).toBe(T0 + 100);
  });

  it("a report without kv drops a previous kv", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 1, { kv_cache_usage: 0.9 }), T0);
    m.report(rep("a", 2), T0);
    expect("kv" in m.members.get("a")!.load).toBe(false);
  });

  it("a heartbeat with the same seq is accepted and keeps the replica fresh", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 4, { ongoing: 2 }), T0);
    let t = T0;
    for (let n = 0; n < 20; n++) {
      t += REPORT_INTERVAL_MS;
      expect(m.report(rep("a", 4, { ongoing: 2 }), t)).toBe("ok");
      expect(snapIds(m, t + STALE_AFTER_MS - 1)).toEqual(["a"]);
    }
  });

  it("a lower seq refreshes liveness but not the load", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 10, { ongoing: 1, models: ["keep"] }), T0);
    expect(m.report(rep("a", 9, { ongoing: 4, state: "draining", models: ["old"] }), T0 + 2_000)).toBe("stale_seq");
    const a = m.members.get("a")!;
    expect(a.lastReportAt).toBe(T0 + 2_000);
    expect(a.load).toMatchObject({ seq: 10, ongoing: 1, state: "ready" });
    expect(a.models).toEqual(["keep"]);
    expect(m.isFresh(a, T0 + 4_000)).toBe(true);
  });

  it("a draining report stays in the snapshot (proxies filter it)", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 1, { state: "draining" }), T0);
    const s = m.snapshot("hello", T0);
    expect(s.replicas.map((r) => [r.id, r.load.state])).toEqual([["a", "draining"]]);
  });
});

describe("Membership.isFresh / snapshot", () => {
  it("is stale exactly STALE_AFTER_MS after the last report", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    const a = m.members.get("a")!;
    expect(m.isFresh(a, T0 + STALE_AFTER_MS - 1)).toBe(true);
    expect(m.isFresh(a, T0 + STALE_AFTER_MS)).toBe(false);
    expect(snapIds(m, T0 + STALE_AFTER_MS - 1)).toEqual(["a"]);
    expect(snapIds(m, T0 + STALE_AFTER_MS)).toEqual([]);
    // Still a member; a report brings it back.
    expect(m.members.has("a")).toBe(true);
    m.report(rep("a", 1), T0 + 10_000);
    expect(snapIds(m, T0 + 10_000)).toEqual(["a"]);
  });

  it("snapshot carries deployment, url, load, models and the time left until stale", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 3, { ongoing: 1, models: ["m"] }), T0 + 1_000);
    expect(m.snapshot("hello", T0 + 1_500)).toEqual({
      deployment: "hello",
      replicas: [{ id: "a", url: "http://a.test:8000", epoch: T0, load: { seq: 3, ongoing: 1, queued: 0, max: 5, state: "ready" }, models: ["m"], loading: [], expiresInMs: STALE_AFTER_MS - 500 }],
    });
  });

  it("snapshot lists only fresh members among many", () => {
    const m = new Membership();
    m.register(reg("old"), T0);
    m.register(reg("new"), T0 + 2_000);
    m.register(reg("gone"), T0);
    m.deregister("gone");
    expect(snapIds(m, T0 + 2_600)).toEqual(["new"]);
    expect(m.snapshot("other", T0).deployment).toBe("other");
  });
});

describe("Membership.restore", () => {
  it("restored members count as heard from at the restart: in snapshots until they would go stale, then only if they report", () => {
    const m = new Membership();
    m.restore({ id: "a", url: "http://a.test:8000", maxOngoing: 4, registeredAt: T0 - 100_000 }, T0);
    m.restore({ id: "dead", url: "http://dead.test:8000", maxOngoing: 4, registeredAt: T0 - 100_000 }, T0);
    const a = m.members.get("a")!;
    expect(a).toMatchObject({ lastReportAt: T0, models: [], loading: [], registeredAt: T0 - 100_000 });
    // Load unknown: seq -1, so any load header or report a proxy already has wins.
    expect(a.load).toEqual({ seq: -1, ongoing: 0, queued: 0, max: 4, state: "ready" });
    expect(m.isFresh(a, T0)).toBe(true);
    expect(snapIds(m, T0 + 1)).toEqual(["a", "dead"]);
    expect(m.report(rep("a", 42, { ongoing: 2 }), T0 + 1_000)).toBe("ok");
    expect(a.load).toMatchObject({ seq: 42, ongoing: 2, max: 4 });
    // The one that never reports drops out like any silent replica.
    expect(snapIds(m, T0 + STALE_AFTER_MS)).toEqual(["a"]);
  });

  it("a restored member keeps its region and coordinates; re-registering them unchanged needs no write", () => {
    const m = new Membership();
    const at = { region: "fra", coordinates: { lat: 50.03, lon: 8.57 } };
    m.restore({ id: "a", url: "http://a.test:8000", maxOngoing: 5, registeredAt: T0 - 1, ...at }, T0);
    expect(m.snapshot("hello", T0).replicas[0]).toMatchObject(at);
    expect(m.register(reg("a", at), T0)).toBe(false);
    expect(m.register(reg("a", { region: "fra" }), T0 + 1)).toBe(true);
  });

  it("a restored member that re-registers with the same identity needs no write, and gets a new epoch", () => {
    const m = new Membership();
    m.restore({ id: "a", url: "http://a.test:8000", maxOngoing: 5, registeredAt: T0 - 1 }, T0);
    expect(m.register(reg("a"), T0)).toBe(false);
    expect(m.members.get("a")!.registeredAt).toBe(T0);
  });

  it("the count is unconfirmed while a restored member is fresh without having reported or registered since", () => {
    const m = new Membership();
    m.register(reg("live"), T0 - 10);
    expect(m.unconfirmed(T0)).toBe(false);
    m.restore({ id: "a", url: "http://a.test:8000", maxOngoing: 4, registeredAt: T0 - 100_000 }, T0);
    m.restore({ id: "b", url: "http://b.test:8000", maxOngoing: 4, registeredAt: T0 - 100_000 }, T0);
    m.restore({ id: "dead", url: "http://dead.test:8000", maxOngoing: 4, registeredAt: T0 - 100_000 }, T0);
    expect(m.unconfirmed(T0)).toBe(true);
    m.report(rep("a", 1), T0 + 500);
    m.register(reg("b"), T0 + 600);
    // "dead" still counts as fresh, and has not been heard from.
    expect(m.unconfirmed(T0 + 700)).toBe(true);
    m.deregister("dead");
    expect(m.unconfirmed(T0 + 700)).toBe(false);
    // One that stays silent settles the count when it goes stale.
    m.restore({ id: "silent", url: "http://s.test:8000", maxOngoing: 4, registeredAt: T0 - 100_000 }, T0 + 1_000);
    expect(m.unconfirmed(T0 + 1_000 + STALE_AFTER_MS - 1)).toBe(true);
    expect(m.unconfirmed(T0 + 1_000 + STALE_AFTER_MS)).toBe(false);
  });
});

describe("Membership.deregister", () => {
  it("removes a member and says whether it existed", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    expect(m.deregister("a")).toBe(true);
    expect(m.deregister("a")).toBe(false);
    expect(m.report(rep("a", 1), T0)).toBe("unknown_replica");
    expect(snapIds(m, T0)).toEqual([]);
  });
});

describe("Membership.forgettable", () => {
  it("lists members silent for FORGET_AFTER_MS or longer", () => {
    const m = new Membership();
    m.register(reg("quiet"), T0);
    m.register(reg("chatty"), T0);
    m.report(rep("chatty", 1), T0 + 30_000);
    expect(m.forgettable(T0 + FORGET_AFTER_MS - 1, T0)).toEqual([]);
    expect(m.forgettable(T0 + FORGET_AFTER_MS, T0)).toEqual(["quiet"]);
    expect(m.forgettable(T0 + 30_000 + FORGET_AFTER_MS, T0).sort()).toEqual(["chatty", "quiet"]);
  });

  it("counts restored members that never reported from the restart", () => {
    const m = new Membership();
    const restartedAt = T0 + 10_000;
    m.restore({ id: "r", url: "http://r.test:1", maxOngoing: 1, registeredAt: T0 - 1_000_000 }, restartedAt);
    expect(m.forgettable(restartedAt + FORGET_AFTER_MS - 1, restartedAt)).toEqual([]);
    expect(m.forgettable(restartedAt + FORGET_AFTER_MS, restartedAt)).toEqual(["r"]);
    m.report(rep("r", 0), restartedAt + 1_000);
    expect(m.forgettable(restartedAt + FORGET_AFTER_MS, restartedAt)).toEqual([]);
  });

  it("does not remove anything itself", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.forgettable(T0 + 10 * FORGET_AFTER_MS, T0);
    expect(m.members.has("a")).toBe(true);
  });
});

describe("Membership: multiplexing (models, loading, max_models)", () => {
  it("stores max_models from the registration as maxModels", () => {
    const m = new Membership();
    m.register(reg("a", { max_models: 4 }), T0);
    expect(m.members.get("a")!.maxModels).toBe(4);
  });

  it("takes maxModels from the latest registration (a new process may announce another, or none)", () => {
    const m = new Membership();
    m.register(reg("a", { max_models: 4 }), T0);
    m.register(reg("a", { max_models: 2 }), T0 + 1);
    expect(m.members.get("a")!.maxModels).toBe(2);
    m.register(reg("a"), T0 + 2);
    expect(m.members.get("a")!.maxModels).toBeUndefined();
  });

  it("max_models alone does not count as an identity change (no storage write)", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    expect(m.register(reg("a", { max_models: 8 }), T0 + 1)).toBe(false);
  });

  it("a report replaces models and loading, and the snapshot shows both", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    expect(m.report(rep("a", 1, { models: ["x"], loading: ["y", "z"] }), T0 + 10)).toBe("ok");
    expect(m.members.get("a")).toMatchObject({ models: ["x"], loading: ["y", "z"] });
    expect(m.snapshot("hello", T0 + 10).replicas[0]).toMatchObject({ id: "a", models: ["x"], loading: ["y", "z"] });
    // The load finished: y is loaded now, z was given up.
    m.report(rep("a", 2, { models: ["x", "y"], loading: [] }), T0 + 20);
    expect(m.snapshot("hello", T0 + 20).replicas[0]).toMatchObject({ models: ["x", "y"], loading: [] });
  });

  it("a report with a heartbeat seq (equal) also replaces models and loading", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 3, { loading: ["y"] }), T0);
    expect(m.report(rep("a", 3, { models: ["y"] }), T0 + 1)).toBe("ok");
    expect(m.members.get("a")).toMatchObject({ models: ["y"], loading: [] });
  });

  it("a stale report changes neither models nor loading", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.report(rep("a", 10, { models: ["keep"], loading: ["keep-loading"] }), T0);
    expect(m.report(rep("a", 9, { models: ["old"], loading: ["old-loading"] }), T0 + 1)).toBe("stale_seq");
    expect(m.members.get("a")).toMatchObject({ models: ["keep"], loading: ["keep-loading"] });
    expect(m.snapshot("hello", T0 + 1).replicas[0]).toMatchObject({ models: ["keep"], loading: ["keep-loading"] });
  });

  it("replicas keep their own lists (no sharing between members)", () => {
    const m = new Membership();
    m.register(reg("a"), T0);
    m.register(reg("b"), T0);
    m.report(rep("a", 1, { models: ["x"], loading: ["y"] }), T0);
    const b = m.members.get("b")!;
    expect(b.models).toEqual([]);
    expect(b.loading).toEqual([]);
  });

  it("the snapshot does not expose maxModels", () => {
    const m = new Membership();
    m.register(reg("a", { max_models: 3 }), T0);
    const view = m.snapshot("hello", T0).replicas[0]!;
    expect(Object.keys(view).sort()).toEqual(["epoch", "expiresInMs", "id", "load", "loading", "models", "url"]);
  });
});
