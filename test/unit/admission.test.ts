/** A replica's admission control: capacity, draining, idle, seq and change events. */
import { describe, it, expect } from "vitest";
import { formatLoadHeader, parseLoadHeader } from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";

function watched(max: number, maxQueued = 0) {
  const a = new AdmissionControl(max, maxQueued);
  const events: boolean[] = [];
  a.onChange((urgent) => events.push(urgent));
  return { a, events };
}

/** Whether a promise has settled after the microtask queue has drained. */
async function settled(p: Promise<unknown>): Promise<boolean> {
  let done = false;
  void p.then(() => (done = true));
  await new Promise((r) => setTimeout(r, 0));
  return done;
}

describe("AdmissionControl", () => {
  it("starts ready, empty, at seq 0", () => {
    const a = new AdmissionControl(3);
    expect(a.maxOngoing).toBe(3);
    expect(a.ongoing).toBe(0);
    expect(a.state).toBe("ready");
    expect(a.models).toEqual([]);
    expect(a.load()).toEqual({ seq: 0, ongoing: 0, queued: 0, max: 3, state: "ready" });
  });

  it("admits up to maxOngoing, then rejects with 'capacity'", () => {
    const a = new AdmissionControl(3);
    for (let i = 0; i < 3; i++) expect(a.tryAdmit()).toEqual({ admitted: true });
    expect(a.ongoing).toBe(3);
    expect(a.tryAdmit()).toEqual({ admitted: false, reason: "capacity" });
    expect(a.tryAdmit()).toEqual({ admitted: false, reason: "capacity" });
    expect(a.ongoing).toBe(3);
  });

  it("release frees a slot", () => {
    const a = new AdmissionControl(1);
    expect(a.tryAdmit().admitted).toBe(true);
    expect(a.tryAdmit().admitted).toBe(false);
    a.release();
    expect(a.ongoing).toBe(0);
    expect(a.tryAdmit().admitted).toBe(true);
  });

  it("release at zero does nothing (no negative count, no event)", () => {
    const { a, events } = watched(2);
    a.release();
    expect(a.ongoing).toBe(0);
    expect(a.load().seq).toBe(0);
    expect(events).toEqual([]);
  });

  it("drain rejects with 'draining', even with room, and lets in-flight requests finish", () => {
    const a = new AdmissionControl(5);
    a.tryAdmit();
    a.drain();
    expect(a.state).toBe("draining");
    expect(a.tryAdmit()).toEqual({ admitted: false, reason: "draining" });
    expect(a.ongoing).toBe(1);
    a.release();
    expect(a.ongoing).toBe(0);
    expect(a.tryAdmit()).toEqual({ admitted: false, reason: "draining" });
  });

  it("'draining' wins over 'capacity' when both apply", () => {
    const a = new AdmissionControl(1);
    a.tryAdmit();
    a.drain();
    expect(a.tryAdmit()).toEqual({ admitted: false, reason: "draining" });
  });

  it("seq increases on every change and only on changes", () => {
    const a = new AdmissionControl(2);
    const seqs = [a.load().seq];
    const step = (f: () => void) => {
      f();
      seqs.push(a.load().seq);
    };
    step(() => a.tryAdmit()); // +1
    step(() => a.tryAdmit()); // +1
    step(() => a.tryAdmit()); // rejected: unchanged
    step(() => a.release()); // +1
    step(() => a.setModels(["m"], [])); // +1
    step(() => a.drain()); // +1
    step(() => a.drain()); // already draining: unchanged
    step(() => a.tryAdmit()); // rejected: unchanged
    step(() => a.release()); // +1
    step(() => a.release()); // at zero: unchanged
    expect(seqs).toEqual([0, 1, 2, 2, 3, 4, 5, 5, 5, 6, 6]);
  });

  it("onChange: not urgent for admit/release, urgent for drain and setModels", () => {
    const { a, events } = watched(2);
    a.tryAdmit();
    a.release();
    expect(events).toEqual([false, false]);
    a.setModels(["m1"], ["m2"]);
    expect(events).toEqual([false, false, true]);
    a.drain();
    expect(events).toEqual([false, false, true, true]);
    a.drain();
    a.tryAdmit();
    expect(events).toEqual([false, false, true, true]);
  });

  it("notifies every listener, with seq already updated", () => {
    const a = new AdmissionControl(2);
    const seen: number[][] = [[], []];
    a.onChange(() => seen[0]!.push(a.load().seq));
    a.onChange(() => seen[1]!.push(a.load().seq));
    a.tryAdmit();
    a.drain();
    expect(seen).toEqual([
      [1, 2],
      [1, 2],
    ]);
  });

  it("setModels copies its input", () => {
    const a = new AdmissionControl(1);
    const models = ["a", "b"];
    const loading = ["c"];
    a.setModels(models, loading);
    models.push("x");
    loading.push("y");
    expect(a.models).toEqual(["a", "b"]);
    expect(a.loading).toEqual(["c"]);
  });

  it("load() carries models and loading only once setModels was called", () => {
    const a = new AdmissionControl(2);
    expect(a.loading).toEqual([]);
    expect(a.load()).not.toHaveProperty("models");
    expect(a.load()).not.toHaveProperty("loading");
    expect(formatLoadHeader(a.load())).toBe("seq=0;ongoing=0;queued=0;max=2;state=ready");
    a.setModels([], []);
    expect(a.load()).toEqual({ seq: 1, ongoing: 0, queued: 0, max: 2, state: "ready", models: [], loading: [] });
    expect(formatLoadHeader(a.load())).toBe("seq=1;ongoing=0;queued=0;max=2;state=ready;models=;loading=");
    a.setModels(["m1"], ["m2", "m3"]);
    expect(a.load()).toMatchObject({ seq: 2, models: ["m1"], loading: ["m2", "m3"] });
    expect(formatLoadHeader(a.load())).toBe("seq=2;ongoing=0;queued=0;max=2;state=ready;models=m1;loading=m2,m3");
    expect(parseLoadHeader(formatLoadHeader(a.load()))).toEqual(a.load());
    // The returned load is a snapshot.
    const load = a.load();
    a.setModels(["m1", "m2"], ["m3"]);
    expect(load.models).toEqual(["m1"]);
  });

  it("load(excluding) leaves out requests being finished, never below 0", () => {
    const a = new AdmissionControl(4);
    a.tryAdmit();
    a.tryAdmit();
    expect(a.load().ongoing).toBe(2);
    expect(a.load(1).ongoing).toBe(1);
    expect(a.load(5).ongoing).toBe(0);
    a.drain();
    expect(a.load(1)).toEqual({ seq: 3, ongoing: 1, queued: 0, max: 4, state: "draining" });
  });

  it("idle() resolves at once when nothing is in flight", async () => {
    const a = new AdmissionControl(1);
    expect(await settled(a.idle())).toBe(true);
  });

  it("idle() resolves only when ongoing reaches 0", async () => {
    const a = new AdmissionControl(3);
    a.tryAdmit();
    a.tryAdmit();
    const p1 = a.idle();
    const p2 = a.idle();
    a.release();
    expect(await settled(p1)).toBe(false);
    a.release();
    expect(await settled(p1)).toBe(true);
    expect(await settled(p2)).toBe(true);
    // A later busy period needs a new idle() call.
    a.tryAdmit();
    const p3 = a.idle();
    expect(await settled(p3)).toBe(false);
    a.release();
    expect(await settled(p3)).toBe(true);
  });

  it("idle() works during a drain (graceful shutdown)", async () => {
    const a = new AdmissionControl(2);
    a.tryAdmit();
    a.drain();
    const p = a.idle();
    expect(await settled(p)).toBe(false);
    a.release();
    expect(await settled(p)).toBe(true);
  });
});

describe("AdmissionControl: the queue (max_queued)", () => {
  /** Admits or queues `n` requests, recording the order in which queued ones start. */
  function fill(a: AdmissionControl, n: number, started: number[]) {
    return Array.from({ length: n }, (_, i) => {
      const d = a.admitOrQueue();
      if (d.admitted === "queued") void d.started.then((got) => got && started.push(i));
      return d;
    });
  }

  it("with max_queued 0, admitOrQueue is tryAdmit: reject at maxOngoing", () => {
    const a = new AdmissionControl(1);
    expect(a.maxQueued).toBe(0);
    expect(a.admitOrQueue()).toEqual({ admitted: true });
    expect(a.admitOrQueue()).toEqual({ admitted: false, reason: "capacity" });
    expect(a.queued).toBe(0);
    expect(a.counts).toEqual({ admitted: 1, rejected: 1 });
  });

  it("admits into free slots first, then queues up to max_queued, then rejects with 'capacity'", () => {
    const a = new AdmissionControl(2, 2);
    const ds = fill(a, 5, []);
    expect(ds.map((d) => d.admitted)).toEqual([true, true, "queued", "queued", false]);
    expect(ds[4]).toEqual({ admitted: false, reason: "capacity" });
    expect(a.ongoing).toBe(2);
    expect(a.queued).toBe(2);
    expect(a.load()).toMatchObject({ ongoing: 2, queued: 2, max: 2 });
    expect(formatLoadHeader(a.load())).toBe(`seq=${a.load().seq};ongoing=2;queued=2;max=2;state=ready`);
    // tryAdmit never queues, and does not jump the queue either.
    expect(a.tryAdmit()).toEqual({ admitted: false, reason: "capacity" });
    expect(a.counts).toEqual({ admitted: 2, rejected: 2 });
  });

  it("hands a freed slot to the oldest queued request (FIFO); ongoing stays at max while any wait", async () => {
    const a = new AdmissionControl(1, 3);
    const started: number[] = [];
    fill(a, 4, started);
    expect(a.queued).toBe(3);
    a.release();
    await settled(Promise.resolve());
    expect(started).toEqual([1]);
    expect(a.ongoing).toBe(1);
    expect(a.queued).toBe(2);
    a.release();
    a.release();
    await settled(Promise.resolve());
    expect(started).toEqual([1, 2, 3]);
    expect(a.queued).toBe(0);
    expect(a.counts.admitted).toBe(4);
    // The queue has room again; the slot is still taken by request 3.
    expect(a.admitOrQueue().admitted).toBe("queued");
    a.release();
    a.release();
    expect(a.ongoing).toBe(0);
  });

  it("a request that leaves the queue (client gone) resolves false and gives its place up", async () => {
    const a = new AdmissionControl(1, 2);
    const started: number[] = [];
    const [, q1, q2] = fill(a, 3, started);
    if (q1!.admitted !== "queued" || q2!.admitted !== "queued") throw new Error("not queued");
    const seq = a.load().seq;
    expect(q1!.leave()).toBe(true);
    expect(await q1!.started).toBe(false);
    expect(q1!.leave()).toBe(false); // twice: nothing more
    expect(a.queued).toBe(1);
    expect(a.load().seq).toBe(seq + 1);
    // Its place is free: another request can queue.
    expect(a.admitOrQueue().admitted).toBe("queued");
    a.release();
    await settled(Promise.resolve());
    expect(started).toEqual([2]);
    // Once started, leave() does nothing: the caller releases the slot.
    expect(q2!.leave()).toBe(false);
    expect(await q2!.started).toBe(true);
    expect(a.ongoing).toBe(1);
    expect(a.queued).toBe(1);
  });

  it("draining queues nothing new, but what it queued still runs, and idle() waits for it", async () => {
    const a = new AdmissionControl(1, 2);
    const started: number[] = [];
    fill(a, 3, started);
    a.drain();
    expect(a.admitOrQueue()).toEqual({ admitted: false, reason: "draining" });
    expect(a.load()).toMatchObject({ ongoing: 1, queued: 2, state: "draining" });
    const idle = a.idle();
    a.release();
    a.release();
    expect(await settled(idle)).toBe(false);
    expect(started).toEqual([1, 2]);
    expect(a.queued).toBe(0);
    a.release();
    expect(await settled(idle)).toBe(true);
    expect(a.ongoing).toBe(0);
  });

  it("queueing, leaving and a slot passing on are each one non-urgent change", () => {
    const { a: q, events } = watched(1, 2);
    q.admitOrQueue(); // admitted
    const w = q.admitOrQueue(); // queued
    q.admitOrQueue(); // queued
    q.admitOrQueue(); // rejected: no change
    if (w.admitted === "queued") w.leave();
    q.release(); // passes to the last one
    expect(events).toEqual([false, false, false, false, false]);
    expect(q.load().seq).toBe(5);
  });
});

describe("AdmissionControl by priority (an engine that preempts)", () => {
  it("admits past max while fewer than max of the request's priority or higher are in flight, up to twice max", () => {
    const a = new AdmissionControl(2);
    a.enablePriorityPreemption();
    expect(a.tryAdmit(0).admitted).toBe(true);
    expect(a.tryAdmit(0).admitted).toBe(true);
    expect(a.tryAdmit(0)).toEqual({ admitted: false, reason: "capacity" }); // two of priority ≥ 0 already
    expect(a.tryAdmit(-1)).toEqual({ admitted: false, reason: "capacity" });
    expect(a.tryAdmit(1).admitted).toBe(true); // past max: a standard one is paused for it
    expect(a.tryAdmit(1).admitted).toBe(true);
    expect(a.ongoing).toBe(4);
    expect(a.tryAdmit(2)).toEqual({ admitted: false, reason: "capacity" }); // twice max in all
    expect(a.load()).toMatchObject({ ongoing: 4, max: 2 });
    // The releases say whose slot freed: two critical ones end, and a critical one fits again.
    a.release(1);
    a.release(1);
    expect(a.tryAdmit(0)).toEqual({ admitted: false, reason: "capacity" });
    expect(a.tryAdmit(1).admitted).toBe(true);
  });

  it("without an engine that preempts, max holds whatever the priority", () => {
    const a = new AdmissionControl(1);
    expect(a.tryAdmit(0).admitted).toBe(true);
    expect(a.tryAdmit(1000)).toEqual({ admitted: false, reason: "capacity" });
  });

  it("a queued request takes a freed slot only once the requests in flight are under max", async () => {
    const a = new AdmissionControl(1, 4);
    a.enablePriorityPreemption();
    expect(a.admitOrQueue(0)).toEqual({ admitted: true });
    expect(a.admitOrQueue(1)).toEqual({ admitted: true }); // past a standard one
    const q = a.admitOrQueue(0);
    expect(q.admitted).toBe("queued");
    if (q.admitted !== "queued") return;
    a.release(1); // back to max: nothing frees for the queue yet
    expect(await settled(q.started)).toBe(false);
    a.release(0);
    expect(await q.started).toBe(true);
    expect(a.ongoing).toBe(1);
  });
});

describe("AdmissionControl: what it reports and what it counts", () => {
  it("a queued request that takes a slot counts at its priority: the next one of that priority is not let past max", async () => {
    const a = new AdmissionControl(1, 1);
    a.enablePriorityPreemption();
    expect(a.admitOrQueue(0)).toEqual({ admitted: true });
    const q = a.admitOrQueue(0);
    if (q.admitted !== "queued") throw new Error("not queued");
    a.release(0);
    expect(await q.started).toBe(true);
    // One of priority 0 holds the slot now: another priority-0 request waits or is refused, never preempts it.
    expect(a.tryAdmit(0)).toEqual({ admitted: false, reason: "capacity" });
    expect(a.tryAdmit(1).admitted).toBe(true);
  });

  it("says its drain deadline while draining", () => {
    const a = new AdmissionControl(1);
    expect(a.drainDeadline()).toBeUndefined();
    a.drain(1_234_567);
    expect(a.drainDeadline()).toBe(1_234_567);
  });

  it("reports the engine's KV use when its source says one, and none when it says none", () => {
    const a = new AdmissionControl(1);
    expect(a.load()).not.toHaveProperty("kv");
    let kv: number | undefined = 0.25;
    a.setKvSource(() => kv);
    expect(a.load().kv).toBe(0.25);
    kv = undefined;
    expect(a.load()).not.toHaveProperty("kv");
  });

  it("an app's own queue: a change in what it holds beyond ours is news, the same count or one within ours is not; it counts against a dispatch's load limit", () => {
    const { a, events } = watched(4);
    a.tryAdmit();
    events.length = 0;
    a.setExternalQueue(1); // within our one in flight: nothing beyond it
    a.setExternalQueue(1);
    expect(events).toEqual([]);
    a.setExternalQueue(3); // two beyond ours
    expect(events).toEqual([false]);
    a.setExternalQueue(3);
    expect(events).toHaveLength(1);
    // ongoing 1 + queued 0 + 2 held by the app for others = 3: over a limit of 2, within one of 3.
    expect(a.tryAdmit(0, 2)).toEqual({ admitted: false, reason: "over_limit" });
    expect(a.tryAdmit(0, 3)).toEqual({ admitted: true });
  });
});
