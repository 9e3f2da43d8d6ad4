/** One isolate's routing view: snapshots, load headers, in-flight counts. Time is explicit. */
import { describe, it, expect } from "vitest";
import { REPORT_STALE_AFTER_MS, type Load, type ReplicaView, type RoutingSnapshot } from "../../src/protocol/index.ts";
import { CONNECT_FAILURE_COOLDOWN_MS, LIVENESS_FROM_RESPONSE_MS, RoutingView } from "../../src/proxy/serve/view.ts";
import { T0 } from "../fixtures/clock.ts";

function load(over: Partial<Load> = {}): Load {
  return { seq: 1, ongoing: 0, queued: 0, max: 5, state: "ready", ...over };
}

function replica(id: string, over: Partial<Omit<ReplicaView, "load">> & { load?: Partial<Load> } = {}): ReplicaView {
  const { load: l, ...rest } = over;
  return { id, url: `http://${id}.test:8000`, epoch: 1, models: [], loading: [], expiresInMs: 2_000, ...rest, load: load(l) };
}

function snap(...replicas: ReplicaView[]): RoutingSnapshot {
  return { deployment: "hello", replicas };
}

const ids = (v: RoutingView, now: number, exclude?: ReadonlySet<string>) =>
  v
    .candidates(now, exclude)
    .map((e) => e.id)
    .sort();

describe("RoutingView.applySnapshot", () => {
  it("adds replicas with load = ongoing + queued and capacity = max", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { ongoing: 2, queued: 1, max: 8 }, models: ["m"] }), replica("b")), T0);
    expect(v.size).toBe(2);
    const a = v.get("a")!;
    expect(a).toMatchObject({ id: "a", url: "http://a.test:8000", load: 3, capacity: 8, inflight: 0, models: ["m"], expiresAt: T0 + 2_000, downUntil: 0 });
    expect(ids(v, T0)).toEqual(["a", "b"]);
  });

  it("removes replicas the snapshot no longer has", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a"), replica("b"), replica("c")), T0);
    v.applySnapshot(snap(replica("b")), T0 + 10);
    expect(v.size).toBe(1);
    expect(v.get("a")).toBeUndefined();
    expect(v.get("c")).toBeUndefined();
    expect(ids(v, T0 + 10)).toEqual(["b"]);
    v.applySnapshot(snap(), T0 + 20);
    expect(v.size).toBe(0);
    expect(v.candidates(T0 + 20)).toEqual([]);
  });

  it("keeps in-flight counts across snapshots (same entry object)", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1, ongoing: 1 } })), T0);
    const a = v.get("a")!;
    v.startDispatch(a, T0);
    v.startDispatch(a, T0);
    // A report made at T0 + 100 (its expiry has not run down at all).
    v.applySnapshot(snap(replica("a", { load: { seq: 2, ongoing: 3, queued: 1 }, expiresInMs: REPORT_STALE_AFTER_MS })), T0 + 100);
    expect(v.get("a")).toBe(a);
    expect(a.inflight).toBe(2);
    // The report (ongoing 3 + queued 1) includes our 2 in-flight dispatches, which
    // were at the replica when it was made: others' 2 plus ours 2, not 4 + 2.
    expect(a.load).toBe(3 + 1 - 2 + 2);
    expect(a.reported.seq).toBe(2);
  });

  it("a snapshot reporting less than our in-flight count does not make the load negative", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1, ongoing: 0 } })), T0);
    const a = v.get("a")!;
    for (let i = 0; i < 3; i++) v.startDispatch(a, T0);
    v.applySnapshot(snap(replica("a", { load: { seq: 2, ongoing: 1 }, expiresInMs: REPORT_STALE_AFTER_MS })), T0 + 100);
    expect(a.load).toBe(3);
  });

  it("a report is reconciled against our dispatches at the replica when it was made, not those in flight now", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1, ongoing: 0, max: 16 } })), T0);
    const a = v.get("a")!;
    // Ten of ours start at T0; eight of them end at T0 + 500; two more start at T0 + 900.
    const marks = Array.from({ length: 10 }, () => v.startDispatch(a, T0));
    for (const m of marks.slice(0, 8)) v.endDispatch(a, m, T0 + 500);
    v.startDispatch(a, T0 + 900);
    v.startDispatch(a, T0 + 900);
    // At T0 + 1,000 a snapshot brings a report made at T0 + 200 (expiry run down by 800 ms):
    // 13 at the replica then, 10 of them ours, so 3 others. Ours now: 2 + 2.
    v.applySnapshot(snap(replica("a", { load: { seq: 2, ongoing: 13, max: 16 }, expiresInMs: REPORT_STALE_AFTER_MS - 800 })), T0 + 1_000);
    expect(a.reportedAt).toBe(T0 + 200);
    expect(a).toMatchObject({ others: 3, inflight: 4, load: 7 });
    // The old rule (report less our in-flight now) said 13 - 4 + 4 = 13: a replica with
    // 7 requests looked nearly full until its next report.
  });

  it("the same report (seq) keeps the later of the times it was seen at", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1, ongoing: 0 } })), T0);
    const a = v.get("a")!;
    const m = v.startDispatch(a, T0);
    v.applyLoad("a", load({ seq: 5, ongoing: 1 }), T0 + 100);
    expect(a).toMatchObject({ reportedAt: T0 + 100, others: 1, load: 2 });
    v.endDispatch(a, m, T0 + 150);
    expect(a.load).toBe(1);
    // The snapshot's copy of seq 5 was reported at T0 - 300: older, ignored.
    v.applySnapshot(snap(replica("a", { load: { seq: 5, ongoing: 1 }, expiresInMs: REPORT_STALE_AFTER_MS - 700 })), T0 + 400);
    expect(a).toMatchObject({ reportedAt: T0 + 100, others: 1, load: 1 });
  });

  it("keeps a newer load than the snapshot's (from a response header)", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1 } })), T0);
    v.applyLoad("a", load({ seq: 10, ongoing: 4 }), T0 + 1);
    v.applySnapshot(snap(replica("a", { load: { seq: 5, ongoing: 0 }, models: ["new"] })), T0 + 2);
    const a = v.get("a")!;
    expect(a.reported.seq).toBe(10);
    expect(a.load).toBe(4);
    // An older snapshot does not undo newer knowledge: its models are ignored too.
    expect(a.models).toEqual([]);
  });

  it("takes a snapshot load with an equal seq", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 3, ongoing: 1 } })), T0);
    v.applySnapshot(snap(replica("a", { load: { seq: 3, ongoing: 2, max: 7 } })), T0 + 1);
    expect(v.get("a")).toMatchObject({ load: 2, capacity: 7 });
  });

  it("never shortens liveness on a snapshot", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { expiresInMs: 2_000 })), T0);
    v.applySnapshot(snap(replica("a", { expiresInMs: 100 })), T0 + 500);
    expect(v.get("a")!.expiresAt).toBe(T0 + 2_000);
    v.applySnapshot(snap(replica("a", { expiresInMs: 2_000 })), T0 + 1_000);
    expect(v.get("a")!.expiresAt).toBe(T0 + 3_000);
  });

  it("replaces the entry (fresh in-flight count, new load) when the url changed", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 9, ongoing: 1 } })), T0);
    const old = v.get("a")!;
    v.startDispatch(old);
    v.markDown("a", T0);
    v.applySnapshot(snap(replica("a", { url: "http://elsewhere:9000", load: { seq: 0, ongoing: 0 } })), T0 + 1);
    const now = v.get("a")!;
    expect(now).not.toBe(old);
    expect(now).toMatchObject({ url: "http://elsewhere:9000", inflight: 0, load: 0, downUntil: 0 });
    expect(now.reported.seq).toBe(0);
    // Finishing the dispatch to the old entry does not touch the new one.
    v.endDispatch(old);
    expect(now.inflight).toBe(0);
    expect(now.load).toBe(0);
  });

  it("keeps a cool-down across snapshots", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a")), T0);
    v.markDown("a", T0);
    v.applySnapshot(snap(replica("a")), T0 + 10);
    expect(ids(v, T0 + 10)).toEqual([]);
  });
});

// Regression (fixed): seq is monotonic per replica *process* (AdmissionControl starts at 0), and
// Membership.register resets it, but the view keeps any higher seq it saw. A replica restarted
// under the same --id and url (drain → deregister → restart → register) whose draining load
// this isolate saw, and whose removal it never saw in a snapshot, stays "draining" here: every
// newer snapshot and load header has a lower seq and is ignored. With one replica the isolate
// answers no_ready_replica until it is evicted (nothing sends it traffic to raise the seq).
describe("replica restarted under the same id and url", () => {
  it("becomes a candidate again once the snapshot shows the new process ready", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("gpu-1", { load: { seq: 5_000 } })), T0);
    v.applyLoad("gpu-1", load({ seq: 5_001, state: "draining" }), T0 + 10);
    // New process: registered again (new epoch), reports from seq 0.
    v.applySnapshot(snap(replica("gpu-1", { epoch: 2, load: { seq: 3, state: "ready" } })), T0 + 3_000);
    expect(ids(v, T0 + 3_000)).toEqual(["gpu-1"]);
  });
});

describe("RoutingView.applyLoad", () => {
  it("replaces the load with a higher or equal seq, adding this isolate's in-flight", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1 } })), T0);
    const a = v.get("a")!;
    v.startDispatch(a);
    v.applyLoad("a", load({ seq: 2, ongoing: 3, queued: 2, max: 9 }), T0);
    expect(a).toMatchObject({ load: 3 + 2 + 1, capacity: 9, inflight: 1 });
    v.applyLoad("a", load({ seq: 2, ongoing: 0, queued: 0, max: 9 }), T0);
    expect(a.load).toBe(1);
  });

  it("ignores a load with a lower seq", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 5, ongoing: 1 } })), T0);
    v.applyLoad("a", load({ seq: 4, ongoing: 4, state: "draining" }), T0);
    const a = v.get("a")!;
    expect(a.reported.seq).toBe(5);
    expect(a.load).toBe(1);
    expect(a.reported.state).toBe("ready");
  });

  it("extends liveness by LIVENESS_FROM_RESPONSE_MS, even for an older seq", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 5 }, expiresInMs: 100 })), T0);
    v.applyLoad("a", load({ seq: 1 }), T0 + 50);
    expect(v.get("a")!.expiresAt).toBe(T0 + 50 + LIVENESS_FROM_RESPONSE_MS);
    expect(ids(v, T0 + 2_000)).toEqual(["a"]);
  });

  it("never shortens liveness", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { expiresInMs: 10_000 })), T0);
    v.applyLoad("a", load({ seq: 2 }), T0);
    expect(v.get("a")!.expiresAt).toBe(T0 + 10_000);
  });

  it("a draining load header takes the replica out of the candidates", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a"), replica("b")), T0);
    v.applyLoad("a", load({ seq: 2, state: "draining" }), T0);
    expect(ids(v, T0)).toEqual(["b"]);
    expect(v.readyCount(T0)).toBe(1);
  });

  it("ignores unknown replicas", () => {
    const v = new RoutingView();
    v.applyLoad("ghost", load(), T0);
    expect(v.size).toBe(0);
    expect(v.get("ghost")).toBeUndefined();
  });
});

describe("RoutingView.candidates and readyCount", () => {
  it("excludes draining replicas", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a"), replica("b", { load: { state: "draining" } })), T0);
    expect(ids(v, T0)).toEqual(["a"]);
    expect(v.readyCount(T0)).toBe(1);
  });

  it("excludes expired replicas (expiry is exclusive)", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { expiresInMs: 1_000 }), replica("b", { expiresInMs: 3_000 })), T0);
    expect(ids(v, T0 + 999)).toEqual(["a", "b"]);
    expect(ids(v, T0 + 1_000)).toEqual(["b"]);
    expect(v.readyCount(T0 + 1_000)).toBe(1);
    expect(ids(v, T0 + 3_000)).toEqual([]);
    expect(v.readyCount(T0 + 3_000)).toBe(0);
    // Still members, just not fresh.
    expect(v.size).toBe(2);
  });

  it("excludes marked-down replicas until the cool-down ends, but readyCount still counts them", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { expiresInMs: 10_000 }), replica("b", { expiresInMs: 10_000 })), T0);
    v.markDown("a", T0);
    expect(ids(v, T0)).toEqual(["b"]);
    expect(ids(v, T0 + CONNECT_FAILURE_COOLDOWN_MS - 1)).toEqual(["b"]);
    expect(ids(v, T0 + CONNECT_FAILURE_COOLDOWN_MS)).toEqual(["a", "b"]);
    expect(v.readyCount(T0)).toBe(2);
  });

  it("markDown takes a custom duration and ignores unknown ids", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { expiresInMs: 10_000 })), T0);
    v.markDown("a", T0, 5_000);
    expect(ids(v, T0 + 4_999)).toEqual([]);
    expect(ids(v, T0 + 5_000)).toEqual(["a"]);
    expect(() => v.markDown("ghost", T0)).not.toThrow();
  });

  it("excludes the ids in `exclude`", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a"), replica("b"), replica("c")), T0);
    expect(ids(v, T0, new Set(["a", "c"]))).toEqual(["b"]);
    expect(ids(v, T0, new Set(["a", "b", "c"]))).toEqual([]);
    expect(ids(v, T0, new Set())).toEqual(["a", "b", "c"]);
    expect(ids(v, T0, new Set(["zzz"]))).toEqual(["a", "b", "c"]);
  });

  it("includes full replicas (the policy decides about headroom)", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { ongoing: 5, queued: 3, max: 5 } })), T0);
    expect(ids(v, T0)).toEqual(["a"]);
    expect(v.get("a")!.load).toBe(8);
  });

  it("readyCount is 0 for an empty view", () => {
    expect(new RoutingView().readyCount(T0)).toBe(0);
  });
});

describe("RoutingView.startDispatch / endDispatch", () => {
  it("adjust in-flight and load together", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { ongoing: 2 } })), T0);
    const a = v.get("a")!;
    v.startDispatch(a);
    expect(a).toMatchObject({ inflight: 1, load: 3 });
    v.startDispatch(a);
    expect(a).toMatchObject({ inflight: 2, load: 4 });
    v.endDispatch(a);
    expect(a).toMatchObject({ inflight: 1, load: 3 });
    v.endDispatch(a);
    expect(a).toMatchObject({ inflight: 0, load: 2 });
  });

  it("endDispatch never goes below zero in-flight", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { ongoing: 2 } })), T0);
    const a = v.get("a")!;
    v.endDispatch(a);
    v.endDispatch(a);
    expect(a).toMatchObject({ inflight: 0, load: 2 });
  });

  it("in-flight survives a load header, which replaces only the reported part", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1, ongoing: 2 } })), T0);
    const a = v.get("a")!;
    v.startDispatch(a);
    v.applyLoad("a", load({ seq: 2, ongoing: 0 }), T0);
    expect(a.load).toBe(1);
    v.endDispatch(a);
    expect(a.load).toBe(0);
  });
});

describe("RoutingView: models and loading (multiplexing)", () => {
  it("a new entry takes models and loading from the snapshot", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { models: ["x"], loading: ["y"] })), T0);
    expect(v.get("a")).toMatchObject({ models: ["x"], loading: ["y"] });
  });

  it("applyLoad updates models and loading when the header carries them", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1 }, models: ["x"], loading: ["y"] })), T0);
    v.applyLoad("a", load({ seq: 2, models: ["x", "y"], loading: ["z"] }), T0);
    expect(v.get("a")).toMatchObject({ models: ["x", "y"], loading: ["z"] });
  });

  it("applyLoad with empty lists empties them (an empty value is information)", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1 }, models: ["x"], loading: ["y"] })), T0);
    v.applyLoad("a", load({ seq: 2, models: [], loading: [] }), T0);
    expect(v.get("a")).toMatchObject({ models: [], loading: [] });
  });

  it("applyLoad without the fields keeps what the view knows", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1 }, models: ["x"], loading: ["y"] })), T0);
    v.applyLoad("a", load({ seq: 2, ongoing: 3 }), T0);
    expect(v.get("a")).toMatchObject({ models: ["x"], loading: ["y"], load: 3 });
    // Only one of them present: only that one changes.
    v.applyLoad("a", load({ seq: 3, models: ["x", "y"] }), T0);
    expect(v.get("a")).toMatchObject({ models: ["x", "y"], loading: ["y"] });
    v.applyLoad("a", load({ seq: 4, loading: [] }), T0);
    expect(v.get("a")).toMatchObject({ models: ["x", "y"], loading: [] });
  });

  it("applyLoad with an older seq changes neither models nor loading", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 5 }, models: ["x"], loading: ["y"] })), T0);
    v.applyLoad("a", load({ seq: 4, models: ["old"], loading: ["old"] }), T0);
    expect(v.get("a")).toMatchObject({ models: ["x"], loading: ["y"] });
  });

  it("applySnapshot with seq >= the known seq replaces models and loading", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 3 }, models: ["x"], loading: ["y"] })), T0);
    v.applySnapshot(snap(replica("a", { load: { seq: 3 }, models: ["x", "y"], loading: [] })), T0 + 1);
    expect(v.get("a")).toMatchObject({ models: ["x", "y"], loading: [] });
    v.applySnapshot(snap(replica("a", { load: { seq: 4 }, models: ["z"], loading: ["w"] })), T0 + 2);
    expect(v.get("a")).toMatchObject({ models: ["z"], loading: ["w"] });
  });

  it("applySnapshot with an older seq than a load header keeps the header's models and loading", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1 } })), T0);
    v.applyLoad("a", load({ seq: 9, models: ["fresh"], loading: ["coming"] }), T0 + 1);
    v.applySnapshot(snap(replica("a", { load: { seq: 8 }, models: ["stale"], loading: [] })), T0 + 2);
    expect(v.get("a")).toMatchObject({ models: ["fresh"], loading: ["coming"] });
    // ...and liveness stays the later of the header's and the snapshot's.
    expect(v.get("a")!.expiresAt).toBe(Math.max(T0 + 1 + LIVENESS_FROM_RESPONSE_MS, T0 + 2 + 2_000));
  });

  it("a new epoch takes the snapshot's models and loading whatever the seq", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 100 }, models: ["x"], loading: ["y"] })), T0);
    v.applySnapshot(snap(replica("a", { epoch: 2, load: { seq: 0 }, models: [], loading: [] })), T0 + 1);
    expect(v.get("a")).toMatchObject({ models: [], loading: [] });
  });

  it("noteModelDispatch marks a model the replica does not hold as loading there", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { models: ["x"] })), T0);
    const a = v.get("a")!;
    v.noteModelDispatch(a, "m1");
    expect(a.loading).toEqual(["m1"]);
    expect(a.models).toEqual(["x"]);
    v.noteModelDispatch(a, "m2");
    expect(a.loading).toEqual(["m1", "m2"]);
  });

  it("noteModelDispatch changes nothing when the replica holds or loads the model", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { models: ["x"], loading: ["y"] })), T0);
    const a = v.get("a")!;
    const before = { models: a.models, loading: a.loading };
    v.noteModelDispatch(a, "x");
    v.noteModelDispatch(a, "y");
    expect(a.models).toBe(before.models);
    expect(a.loading).toBe(before.loading);
    expect(a.loading).toEqual(["y"]);
    // Repeated dispatches of the same new model add it once.
    v.noteModelDispatch(a, "z");
    v.noteModelDispatch(a, "z");
    expect(a.loading).toEqual(["y", "z"]);
  });

  it("noteModelDispatch does not mutate the snapshot's arrays (shared with other readers)", () => {
    const v = new RoutingView();
    const s = snap(replica("a", { models: ["x"], loading: ["y"] }));
    v.applySnapshot(s, T0);
    v.noteModelDispatch(v.get("a")!, "m1");
    expect(s.replicas[0]!.loading).toEqual(["y"]);
    expect(s.replicas[0]!.models).toEqual(["x"]);
    expect(v.get("a")!.loading).toEqual(["y", "m1"]);
  });

  it("the replica's next load header replaces the noted loading", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { load: { seq: 1 } })), T0);
    const a = v.get("a")!;
    v.noteModelDispatch(a, "m1");
    v.applyLoad("a", load({ seq: 2, models: ["m1"], loading: [] }), T0);
    expect(a).toMatchObject({ models: ["m1"], loading: [] });
    // A header without the fields (non-multiplexing replica) keeps the note.
    v.noteModelDispatch(a, "m2");
    v.applyLoad("a", load({ seq: 3 }), T0);
    expect(a.loading).toEqual(["m2"]);
  });
});

describe("the liveness rule for holders: a late report is not a death", () => {
  const lapsedIds = (v: RoutingView, now: number, exclude?: ReadonlySet<string>) =>
    v
      .lapsed(now, exclude)
      .map((e) => e.id)
      .sort();

  it("a replica whose liveness lapsed in this view is not a candidate, but it is lapsed, not gone", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("a", { expiresInMs: 1_000 }), replica("b", { expiresInMs: 3_000 })), T0);
    expect(lapsedIds(v, T0 + 999)).toEqual([]);
    expect(ids(v, T0 + 1_000)).toEqual(["b"]);
    expect(lapsedIds(v, T0 + 1_000)).toEqual(["a"]);
  });

  it("evidence abandons it: a refused or lost connection, an ejection, a drain, a snapshot without it", () => {
    const cfg = { ejectAfterFailures: 1, ejectBaseMs: 5_000 };
    const v = new RoutingView();
    v.applySnapshot(
      snap(replica("down", { expiresInMs: 100 }), replica("ejected", { expiresInMs: 100 }), replica("draining", { expiresInMs: 100, load: { state: "draining" } }), replica("late", { expiresInMs: 100 }), replica("gone", { expiresInMs: 100 })),
      T0,
    );
    v.markDown("down", T0);
    v.recordFailure(v.get("ejected")!, T0, cfg);
    expect(lapsedIds(v, T0 + 200)).toEqual(["gone", "late"]);
    // The routing object dropped "gone" (its report passed the hard expiry).
    v.applySnapshot(snap(replica("down", { expiresInMs: 100 }), replica("ejected", { expiresInMs: 100 }), replica("late", { expiresInMs: -100 })), T0 + 200);
    expect(lapsedIds(v, T0 + 200)).toEqual(["late"]);
    expect(lapsedIds(v, T0 + 200, new Set(["late"]))).toEqual([]);
  });

  it("candidatesHolding adds the lapsed replicas that hold what the request needs, and only those", () => {
    const v = new RoutingView();
    v.applySnapshot(snap(replica("holder", { expiresInMs: 500, models: ["m"] }), replica("loader", { expiresInMs: 500, loading: ["m"] }), replica("other", { expiresInMs: 500, models: ["x"] }), replica("fresh", { expiresInMs: 5_000 })), T0);
    const holds = (e: { models: string[]; loading: string[] }) => e.models.includes("m") || e.loading.includes("m");
    expect(v.candidatesHolding(T0 + 1_000, undefined, holds).map((e) => e.id).sort()).toEqual(["fresh", "holder", "loader"]);
    expect(v.candidatesHolding(T0, undefined, holds).map((e) => e.id).sort()).toEqual(["fresh", "holder", "loader", "other"]);
    expect(v.candidatesHolding(T0 + 1_000, new Set(["holder"]), holds).map((e) => e.id).sort()).toEqual(["fresh", "loader"]);
  });
});
