/**
 * ModelCache: the replica's LRU of loaded models (Ray Serve's @serve.multiplexed).
 * Pure logic with fake models whose loads the tests resolve by hand, then a few checks
 * with the real Silero VAD sessions.
 */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { createModelById, UnknownModelError, type InferenceModel } from "../../src/models/index.ts";
import { ModelCache, type ModelCacheOptions, type ModelLease } from "../../src/models/model-cache.ts";
import type { SileroVadOutput } from "../../src/models/silero-vad.ts";
import { synthesizeVowel } from "../../src/models/silero-vad.ts";
import { mulberry32 } from "../../src/seeded-random.ts";

interface FakeModel extends InferenceModel {
  readonly instance: number;
  released: number;
  /** Leases outstanding when release() was called (must be 0). */
  inUseAtRelease: number | undefined;
}

/** A fake `create`: each call is a pending load the test resolves or rejects. */
function harness(overrides: Partial<ModelCacheOptions> = {}) {
  let instances = 0;
  const pending: { id: string; resolve: () => void; reject: (err: unknown) => void }[] = [];
  const created: FakeModel[] = [];
  const calls: string[] = [];
  let changes = 0;
  const create = (id: string): Promise<InferenceModel> => {
    calls.push(id);
    return new Promise<InferenceModel>((resolve, reject) => {
      pending.push({
        id,
        resolve: () => {
          const model: FakeModel = {
            id,
            instance: ++instances,
            description: `fake ${id}`,
            inputExample: {},
            infer: async (input) => ({ id, input }),
            released: 0,
            inUseAtRelease: undefined,
            release: async () => {
              model.released++;
            },
          };
          created.push(model);
          resolve(model);
        },
        reject,
      });
    });
  };
  const cache = new ModelCache({ maxModels: 2, create, onChange: () => changes++, ...overrides });
  /** Resolves the oldest pending load of `id` and lets the continuations run. */
  const finish = async (id: string) => {
    const i = pending.findIndex((p) => p.id === id);
    if (i < 0) throw new Error(`no pending load of ${id}`);
    pending.splice(i, 1)[0]!.resolve();
    await tick();
  };
  const fail = async (id: string, err: unknown) => {
    const i = pending.findIndex((p) => p.id === id);
    pending.splice(i, 1)[0]!.reject(err);
    await tick();
  };
  /** Acquires and finishes the load if one started. */
  const get = async (id: string): Promise<ModelLease> => {
    const p = cache.acquire(id);
    await tick();
    if (pending.some((x) => x.id === id)) await finish(id);
    return p;
  };
  return { cache, calls, created, pending, finish, fail, get, changes: () => changes, model: (id: string) => created.filter((m) => m.id === id) };
}

const tick = () => new Promise((r) => setTimeout(r, 0));

describe("ModelCache: hits, misses and one load per model", () => {
  it("loads on the first acquire (miss), then hits", async () => {
    const h = harness();
    const first = await h.get("a");
    expect(first.hit).toBe(false);
    expect(first.model.id).toBe("a");
    first.release();
    const second = await h.get("a");
    expect(second.hit).toBe(true);
    expect(second.model).toBe(first.model);
    second.release();
    expect(h.calls).toEqual(["a"]);
    expect(h.cache.loaded()).toEqual(["a"]);
    expect(h.cache.loading()).toEqual([]);
    expect(h.cache.stats()).toEqual({ hits: 1, misses: 1, loads: 1, failedLoads: 0, evictions: 0 });
  });

  it("shares one load among concurrent acquires; every one that waited is a miss", async () => {
    const h = harness();
    const leases = [h.cache.acquire("a"), h.cache.acquire("a"), h.cache.acquire("a")];
    await tick();
    expect(h.calls).toEqual(["a"]);
    expect(h.cache.loading()).toEqual(["a"]);
    expect(h.cache.loaded()).toEqual([]);
    // One more acquire while loading also waits.
    leases.push(h.cache.acquire("a"));
    await h.finish("a");
    const got = await Promise.all(leases);
    expect(got.map((l) => l.hit)).toEqual([false, false, false, false]);
    expect(new Set(got.map((l) => l.model)).size).toBe(1);
    expect(h.cache.loading()).toEqual([]);
    expect(h.cache.loaded()).toEqual(["a"]);
    const after = await h.cache.acquire("a");
    expect(after.hit).toBe(true);
    expect(h.cache.stats()).toMatchObject({ hits: 1, misses: 4, loads: 1 });
    for (const l of [...got, after]) l.release();
  });

  it("loads different models in parallel", async () => {
    const h = harness({ maxModels: 3 });
    const a = h.cache.acquire("a");
    const b = h.cache.acquire("b");
    await tick();
    expect(h.calls).toEqual(["a", "b"]);
    expect(h.cache.loading()).toEqual(["b", "a"]); // most recently started first
    await h.finish("b");
    expect(h.cache.loaded()).toEqual(["b"]);
    expect(h.cache.loading()).toEqual(["a"]);
    await h.finish("a");
    expect(h.cache.loaded()).toEqual(["a", "b"]);
    (await a).release();
    (await b).release();
  });

  it("calls onChange when the loaded or loading set changes, not on a mere hit", async () => {
    const h = harness();
    const sets: string[] = [];
    const cache: ModelCache = new ModelCache({
      maxModels: 1,
      create: async (id) => ({ id, description: "", inputExample: {}, infer: async () => null, release: async () => undefined }),
      onChange: () => sets.push(`${cache.loaded().join(",")}|${cache.loading().join(",")}`),
    });
    void h;
    (await cache.acquire("a")).release();
    expect(sets).toEqual(["|a", "a|"]);
    (await cache.acquire("a")).release();
    expect(sets).toEqual(["|a", "a|"]);
    (await cache.acquire("b")).release();
    // a evicted as b's load starts (one change), then b lands.
    expect(sets).toEqual(["|a", "a|", "|b", "b|"]);
  });
});

describe("ModelCache: LRU eviction", () => {
  it("evicts the least recently used model when a load would exceed maxModels", async () => {
    const h = harness({ maxModels: 3 });
    for (const id of ["a", "b", "c"]) (await h.get(id)).release();
    expect(h.cache.loaded()).toEqual(["c", "b", "a"]);
    (await h.get("a")).release(); // a is now the most recent
    expect(h.cache.loaded()).toEqual(["a", "c", "b"]);
    const d = h.cache.acquire("d");
    // b is evicted (and released: nobody uses it) as soon as d's load starts.
    expect(h.cache.loaded()).toEqual(["a", "c"]);
    expect(h.cache.loading()).toEqual(["d"]);
    await tick();
    expect(h.model("b")[0]!.released).toBe(1);
    await h.finish("d");
    (await d).release();
    expect(h.cache.loaded()).toEqual(["d", "a", "c"]);
    expect(h.cache.stats()).toMatchObject({ evictions: 1, loads: 4 });
    // An evicted model is loaded again (a new instance) on its next acquire.
    const b = await h.get("b");
    expect(b.hit).toBe(false);
    expect(b.model).not.toBe(h.model("b")[0]);
    expect(h.cache.loaded()).toEqual(["b", "d", "a"]);
    expect(h.model("c")[0]!.released).toBe(1);
    b.release();
  });

  it("counts loads in progress against the limit", async () => {
    const h = harness({ maxModels: 2 });
    (await h.get("a")).release();
    const b = h.cache.acquire("b");
    expect(h.cache.loaded()).toEqual(["a"]);
    const c = h.cache.acquire("c");
    expect(h.cache.loaded()).toEqual([]); // a made room for c
    expect(h.cache.loading()).toEqual(["c", "b"]);
    await h.finish("b");
    await h.finish("c");
    expect(h.cache.loaded()).toEqual(["c", "b"]);
    (await b).release();
    (await c).release();
  });

  it("with maxModels 1, keeps exactly the last model", async () => {
    const h = harness({ maxModels: 1 });
    for (const id of ["a", "b", "a", "c"]) (await h.get(id)).release();
    await tick();
    expect(h.cache.loaded()).toEqual(["c"]);
    expect(h.calls).toEqual(["a", "b", "a", "c"]);
    expect(h.created.filter((m) => m.released === 1).map((m) => m.id)).toEqual(["a", "b", "a"]);
    expect(h.cache.stats()).toEqual({ hits: 0, misses: 4, loads: 4, failedLoads: 0, evictions: 3 });
  });

  it("never evicts a load in progress: over the limit until the loads land", async () => {
    const h = harness({ maxModels: 1 });
    const a = h.cache.acquire("a");
    const b = h.cache.acquire("b");
    expect(h.cache.loading()).toEqual(["b", "a"]);
    await h.finish("a");
    // a landed while b still loads: a is dropped at once, but its waiter still gets it.
    expect(h.cache.loaded()).toEqual([]);
    const la = await a;
    expect(la.hit).toBe(false);
    expect(await la.model.infer(1)).toEqual({ id: "a", input: 1 });
    expect(h.model("a")[0]!.released).toBe(0);
    la.release();
    await tick();
    expect(h.model("a")[0]!.released).toBe(1);
    await h.finish("b");
    expect(h.cache.loaded()).toEqual(["b"]);
    (await b).release();
  });
});

describe("ModelCache: in-use models", () => {
  it("drops an evicted model in use from the loaded set, but releases it only after its last user", async () => {
    const h = harness({ maxModels: 1 });
    const a1 = await h.get("a");
    const a2 = await h.get("a");
    expect(a2.hit).toBe(true);
    const b = h.cache.acquire("b");
    expect(h.cache.loaded()).toEqual([]);
    await h.finish("b");
    expect(h.cache.loaded()).toEqual(["b"]);
    const a = h.model("a")[0]!;
    expect(a.released).toBe(0);
    a1.release();
    a1.release(); // a lease releases once
    await tick();
    expect(a.released).toBe(0);
    expect(await a2.model.infer("still usable")).toEqual({ id: "a", input: "still usable" });
    a2.release();
    await tick();
    expect(a.released).toBe(1);
    a2.release();
    await tick();
    expect(a.released).toBe(1);
    (await b).release();
  });

  it("takes an evicted model still in use back (a hit) instead of loading a second instance", async () => {
    const h = harness({ maxModels: 1 });
    const a1 = await h.get("a");
    (await h.get("b")).release();
    expect(h.cache.loaded()).toEqual(["b"]);
    const a2 = await h.cache.acquire("a"); // resolves at once: no load
    expect(a2.hit).toBe(true);
    expect(a2.model).toBe(a1.model);
    expect(h.calls).toEqual(["a", "b"]);
    expect(h.cache.loaded()).toEqual(["a"]);
    await tick();
    expect(h.model("b")[0]!.released).toBe(1); // b made room for it
    a1.release();
    a2.release();
    await tick();
    expect(h.model("a")[0]!.released).toBe(0); // loaded again, not released
    expect(h.cache.stats()).toMatchObject({ hits: 1, misses: 2, loads: 2, evictions: 2 });
  });

  it("a failing release does not break the cache", async () => {
    const cache = new ModelCache({
      maxModels: 1,
      create: async (id) => ({ id, description: "", inputExample: {}, infer: async () => id, release: () => Promise.reject(new Error("boom")) }),
    });
    (await cache.acquire("a")).release();
    (await cache.acquire("b")).release();
    await tick();
    expect(cache.loaded()).toEqual(["b"]);
  });
});

describe("ModelCache: failures and unknown ids", () => {
  it("does not cache a failed load: every waiter gets the error, the next acquire retries", async () => {
    const h = harness();
    const errors = [h.cache.acquire("a"), h.cache.acquire("a")].map((p) => p.catch((e: unknown) => e));
    const changes = h.changes();
    await h.fail("a", new Error("disk on fire"));
    for (const err of await Promise.all(errors)) expect(String(err)).toContain("disk on fire");
    expect(h.cache.loading()).toEqual([]);
    expect(h.cache.loaded()).toEqual([]);
    expect(h.changes()).toBe(changes + 1);
    expect(h.cache.stats()).toEqual({ hits: 0, misses: 2, loads: 0, failedLoads: 1, evictions: 0 });
    const again = await h.get("a");
    expect(again.hit).toBe(false);
    expect(h.calls).toEqual(["a", "a"]);
    expect(h.cache.loaded()).toEqual(["a"]);
    again.release();
  });

  it("turns a create that throws synchronously into a rejected acquire", async () => {
    const cache = new ModelCache({
      maxModels: 1,
      create: () => {
        throw new Error("sync");
      },
    });
    await expect(cache.acquire("a")).rejects.toThrow("sync");
    expect(cache.loading()).toEqual([]);
  });

  it("rejects ids outside `allowed` with UnknownModelError without touching the cache", async () => {
    const h = harness({ maxModels: 1, allowed: ["a", "b"] });
    (await h.get("a")).release();
    const stats = h.cache.stats();
    const changes = h.changes();
    for (const id of ["c", "", "A", "constructor"]) {
      const err: unknown = await h.cache.acquire(id).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(UnknownModelError);
      expect((err as UnknownModelError).modelId).toBe(id);
      expect((err as UnknownModelError).known).toEqual(["a", "b"]);
    }
    expect(h.calls).toEqual(["a"]);
    expect(h.cache.loaded()).toEqual(["a"]); // full, yet nothing evicted
    expect(h.cache.stats()).toEqual(stats);
    expect(h.changes()).toBe(changes);
    expect(h.cache.allows("b")).toBe(true);
    expect(h.cache.allows("c")).toBe(false);
  });

  it("passes on UnknownModelError from create, counting no load, miss or failure", async () => {
    const cache = new ModelCache({ maxModels: 2, create: createModelById });
    await expect(cache.acquire("nope")).rejects.toBeInstanceOf(UnknownModelError);
    expect(cache.loading()).toEqual([]);
    expect(cache.loaded()).toEqual([]);
    expect(cache.stats()).toEqual({ hits: 0, misses: 0, loads: 0, failedLoads: 0, evictions: 0 });
    expect(cache.allows("nope")).toBe(true); // no allowed list
  });

  it("validates maxModels", () => {
    const create = () => Promise.reject(new Error("unused"));
    for (const maxModels of [0, -1, 1.5, Number.NaN]) expect(() => new ModelCache({ maxModels, create })).toThrow(RangeError);
  });
});

describe("ModelCache: the report before a load", () => {
  it("announces the load (onChange), then waits for beforeLoad to settle before the model is created", async () => {
    const order: string[] = [];
    let letLoad!: () => void;
    const h = harness({
      onChange: () => order.push("change"),
      beforeLoad: () => {
        order.push("before");
        return new Promise<void>((r) => (letLoad = r));
      },
    });
    const lease = h.cache.acquire("a");
    await tick();
    expect(order).toEqual(["change", "before"]);
    expect(h.cache.loading()).toEqual(["a"]);
    expect(h.calls).toEqual([]);
    letLoad();
    await tick();
    expect(h.calls).toEqual(["a"]);
    await h.finish("a");
    expect((await lease).hit).toBe(false);
  });

  it("a failing beforeLoad does not stop the load", async () => {
    const h = harness({ beforeLoad: () => Promise.reject(new Error("edge unreachable")) });
    const lease = h.cache.acquire("a");
    await tick();
    expect(h.calls).toEqual(["a"]);
    await h.finish("a");
    expect((await lease).model.id).toBe("a");
  });
});

describe("ModelCache: property test", () => {
  it("never releases a model in use, releases each instance at most once, and respects the limit", async () => {
    for (let seed = 1; seed <= 20; seed++) {
      const random = mulberry32(seed);
      const ids = ["a", "b", "c", "d", "e"];
      const maxModels = 1 + Math.floor(random() * 3);
      const leases = new Map<InferenceModel, number>();
      const created: { model: InferenceModel; released: number; violation: boolean }[] = [];
      const cache = new ModelCache({
        maxModels,
        allowed: ids.slice(0, 4),
        create: async (id) => {
          await new Promise((r) => setTimeout(r, Math.floor(random() * 3)));
          if (random() < 0.1) throw new Error("flaky load");
          const rec = { model: undefined as unknown as InferenceModel, released: 0, violation: false };
          rec.model = {
            id,
            description: "",
            inputExample: {},
            infer: async () => id,
            release: async () => {
              rec.released++;
              if ((leases.get(rec.model) ?? 0) > 0) rec.violation = true;
            },
          };
          created.push(rec);
          return rec.model;
        },
        onChange: () => {
          // Only several loads at once may exceed the limit.
          if (cache.loading().length < maxModels) expect(cache.loaded().length + cache.loading().length).toBeLessThanOrEqual(maxModels);
          expect(new Set([...cache.loaded(), ...cache.loading()]).size).toBe(cache.loaded().length + cache.loading().length);
        },
      });
      const held: ModelLease[] = [];
      const ops: Promise<void>[] = [];
      for (let step = 0; step < 200; step++) {
        if (random() < 0.55 || held.length === 0) {
          const id = ids[Math.floor(random() * ids.length)]!;
          ops.push(
            cache.acquire(id).then(
              (lease) => {
                expect(lease.model.id).toBe(id);
                leases.set(lease.model, (leases.get(lease.model) ?? 0) + 1);
                held.push(lease);
              },
              (err: unknown) => {
                if (id === "e") expect(err).toBeInstanceOf(UnknownModelError);
                else expect(String(err)).toContain("flaky load");
              },
            ),
          );
        } else {
          const lease = held.splice(Math.floor(random() * held.length), 1)[0]!;
          leases.set(lease.model, leases.get(lease.model)! - 1);
          lease.release();
        }
        if (random() < 0.3) await new Promise((r) => setTimeout(r, Math.floor(random() * 3)));
      }
      await Promise.all(ops);
      for (const lease of held.splice(0)) {
        leases.set(lease.model, leases.get(lease.model)! - 1);
        lease.release();
      }
      await tick();
      expect(created.some((c) => c.violation)).toBe(false);
      expect(created.every((c) => c.released <= 1)).toBe(true);
      // Whatever is not loaded any more has been released.
      const live = created.filter((c) => c.released === 0).map((c) => c.model.id).sort();
      expect(live).toEqual(cache.loaded().sort());
      expect(cache.loaded().length).toBeLessThanOrEqual(maxModels);
      const s = cache.stats();
      expect(s.loads).toBe(created.length);
      // Every released instance was evicted first (an eviction can be undone by taking the model back).
      expect(s.evictions).toBeGreaterThanOrEqual(created.length - live.length);
      expect(s.hits + s.misses).toBeGreaterThan(0);
    }
  });
});

describe("ModelCache with the real Silero VAD models", () => {
  const allowed = ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"];
  const infer = async (lease: ModelLease, samples: number[]) => (await lease.model.infer({ samples })) as SileroVadOutput;

  it("loads, serves, evicts (releasing the ORT session) and reloads the versions", async () => {
    const cache = new ModelCache({ maxModels: 2, create: createModelById, allowed });
    const speech = synthesizeVowel(16000);
    const v4 = await cache.acquire("silero-vad-v4");
    expect(v4.hit).toBe(false);
    expect((await infer(v4, speech)).model).toBe("silero-vad-v4");
    v4.release();
    const v5 = await cache.acquire("silero-vad-v5");
    expect((await infer(v5, speech)).speech).toBe(true);
    v5.release();
    expect(cache.loaded()).toEqual(["silero-vad-v5", "silero-vad-v4"]);
    const v6 = await cache.acquire("silero-vad-v6");
    expect(cache.loaded()).toEqual(["silero-vad-v6", "silero-vad-v5"]);
    // v4 was least recently used: evicted, and its session freed.
    await expect(v4.model.infer({ samples: speech })).rejects.toThrow(/released/);
    expect((await infer(v6, speech)).model).toBe("silero-vad-v6");
    v6.release();
    const again = await cache.acquire("silero-vad-v4");
    expect(again.hit).toBe(false);
    expect(again.model).not.toBe(v4.model);
    expect((await infer(again, speech)).speech).toBe(true);
    again.release();
    expect(cache.stats()).toEqual({ hits: 0, misses: 4, loads: 4, failedLoads: 0, evictions: 2 });
    await expect(cache.acquire("silero-vad")).rejects.toBeInstanceOf(UnknownModelError);
  });

  it("shares one real load among concurrent requests and keeps an in-use model alive past eviction", async () => {
    const cache = new ModelCache({ maxModels: 1, create: createModelById, allowed });
    const [a, b] = await Promise.all([cache.acquire("silero-vad-v6"), cache.acquire("silero-vad-v6")]);
    expect(a.model).toBe(b.model);
    expect(cache.stats().loads).toBe(1);
    a.release();
    // b still holds v6 while v5 takes its place.
    const v5 = await cache.acquire("silero-vad-v5");
    expect(cache.loaded()).toEqual(["silero-vad-v5"]);
    const [out6, out5] = await Promise.all([infer(b, synthesizeVowel(8000)), infer(v5, synthesizeVowel(8000))]);
    expect(out6.model).toBe("silero-vad-v6");
    expect(out5.model).toBe("silero-vad-v5");
    b.release();
    await new Promise((r) => setTimeout(r, 10));
    await expect(b.model.infer({ samples: synthesizeVowel(512) })).rejects.toThrow(/released/);
    v5.release();
  });
});
