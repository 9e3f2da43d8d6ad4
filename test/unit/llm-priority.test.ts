/**
 * The reference LLM replica's own scheduler honours a request's priority (issue 32 §4):
 * where requests wait (the prefill lane, the KV cache's waiting queue) a higher priority
 * goes first, first come first served within a priority (src/replica/llm/priority-order.ts);
 * a preemption takes the lowest priority; and the priority is the edge's header on a
 * dispatch, the body's only off one (openai-handler.ts, requestPriority). Orders are
 * read from the order events happen in, never from times.
 */
import { describe, expect, it } from "vitest";
import { Header } from "../../src/protocol/index.ts";
import { LlmEngine, type GenerateRequest } from "../../src/replica/llm/engine.ts";
import { KvCacheScheduler } from "../../src/replica/llm/kv-cache.ts";
import { requestPriority } from "../../src/replica/llm/openai-handler.ts";
import { PrefillLane, PrefillLaneAborted } from "../../src/replica/llm/prefill-lane.ts";
import { enqueueByPriority, preemptionVictim, requeueFirstInPriority } from "../../src/replica/llm/priority-order.ts";
import { tinyLmGenerator } from "../../src/replica/llm/tiny-lm.ts";
import { oneLetterModel } from "../fixtures/one-letter-model.ts";

const CRITICAL = 1;
const STANDARD = 0;
const SHEDDABLE = -1;

const item = (name: string, priority: number) => ({ name, priority });
const names = (q: { name: string }[]) => q.map((x) => x.name);

describe("priority order (pure)", () => {
  it("enqueues behind every item of its priority or higher: higher first, FIFO within a priority", () => {
    const q: { name: string; priority: number }[] = [];
    for (const x of [item("low", SHEDDABLE), item("std-1", STANDARD), item("crit-1", CRITICAL), item("std-2", STANDARD), item("crit-2", CRITICAL), item("low-2", SHEDDABLE)]) enqueueByPriority(q, x);
    expect(names(q)).toEqual(["crit-1", "crit-2", "std-1", "std-2", "low", "low-2"]);
  });

  it("with every priority equal it is plain FIFO", () => {
    const q: { name: string; priority: number }[] = [];
    for (const n of ["a", "b", "c"]) enqueueByPriority(q, item(n, 0));
    expect(names(q)).toEqual(["a", "b", "c"]);
  });

  it("puts a preempted item back first in its priority, behind higher ones", () => {
    const q = [item("crit", CRITICAL), item("std-1", STANDARD), item("low", SHEDDABLE)];
    requeueFirstInPriority(q, item("std-preempted", STANDARD));
    expect(names(q)).toEqual(["crit", "std-preempted", "std-1", "low"]);
    const flat = [item("a", 0)];
    requeueFirstInPriority(flat, item("b", 0));
    expect(names(flat)).toEqual(["b", "a"]); // as the unshift it replaces
  });

  it("preempts the lowest priority, the most recently scheduled of those", () => {
    expect(preemptionVictim([item("low-old", SHEDDABLE), item("std", STANDARD), item("low-new", SHEDDABLE), item("crit", CRITICAL)])?.name).toBe("low-new");
    expect(preemptionVictim([item("a", 0), item("b", 0)])?.name).toBe("b"); // as before: the newest
    expect(preemptionVictim([])).toBeUndefined();
  });
});

describe("PrefillLane", () => {
  it("with the lane busy, queued low, standard, critical: critical runs first, then standard, then low", async () => {
    const lane = new PrefillLane();
    const order: string[] = [];
    const busy = new AbortController();
    // The lane's holder: a long prefill, aborted (freeing the lane) once the others are queued.
    const first = lane.run(60_000, busy.signal).catch((e: unknown) => {
      expect(e).toBeInstanceOf(PrefillLaneAborted);
      order.push("first");
    });
    expect(lane.busy).toBe(true);
    const runs = [
      ["low", SHEDDABLE],
      ["standard", STANDARD],
      ["critical", CRITICAL],
      ["standard-2", STANDARD],
    ].map(([name, priority]) => lane.run(1, undefined, priority as number).then(() => order.push(name as string)));
    expect(lane.queued).toBe(4);
    busy.abort();
    await Promise.all([first, ...runs]);
    expect(order).toEqual(["first", "critical", "standard", "standard-2", "low"]);
  });

  it("a queued prefill that is aborted leaves its place; the others keep their order", async () => {
    const lane = new PrefillLane();
    const busy = new AbortController();
    const first = lane.run(60_000, busy.signal).catch(() => undefined);
    const order: string[] = [];
    const gone = new AbortController();
    const critical = lane.run(1, gone.signal, CRITICAL).catch((e: unknown) => order.push(e instanceof PrefillLaneAborted ? "critical aborted" : "?"));
    const standard = lane.run(1, undefined, STANDARD).then(() => order.push("standard"));
    const low = lane.run(1, undefined, SHEDDABLE).then(() => order.push("low"));
    gone.abort();
    await critical;
    expect(lane.queued).toBe(2);
    busy.abort();
    await Promise.all([first, standard, low]);
    expect(order).toEqual(["critical aborted", "standard", "low"]);
  });
});

describe("PrefillLane: the wait a new prefill would see (Load.prefillWaitMs, issue 57)", () => {
  it("is the rest of the running turn plus every queued turn, and drops as they leave", async () => {
    const lane = new PrefillLane();
    expect(lane.waitMs()).toBe(0);
    const busy = new AbortController();
    const first = lane.run(60_000, busy.signal).catch(() => undefined);
    const now = Date.now();
    // The running turn's rest: at most its 60 s, and (the test takes far less) well over 59 s.
    expect(lane.waitMs(now)).toBeLessThanOrEqual(60_000);
    expect(lane.waitMs(now)).toBeGreaterThan(59_000);
    const gone = new AbortController();
    const queued = lane.run(5_000, gone.signal).catch(() => undefined);
    const other = lane.run(7_000, busy.signal).catch(() => undefined);
    expect(lane.waitMs(now) - lane.waitMs(now + 1_000)).toBe(1_000);
    expect(Math.round(lane.waitMs(now + 60_000))).toBe(12_000);
    gone.abort();
    await queued;
    expect(Math.round(lane.waitMs(now + 60_000))).toBe(7_000);
    busy.abort();
    await Promise.all([first, other]);
    expect(lane.waitMs()).toBe(0);
  });
});

describe("LlmEngine: its prefill rate and wait, as its load reports them", () => {
  it("has no rate before a prefill took lane time, then the uncached tokens per second of lane time", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel()), kvBlocks: 64, prefillTokenUs: 500 });
    expect(engine.prefillRate).toBeUndefined();
    expect(engine.prefillWaitMs).toBe(0);
    const request: GenerateRequest = { prompt: Array.from({ length: 40 }, (_, i) => 2 + (i % 20)), maxTokens: 1, sampling: { temperature: 0, topP: 1 } };
    for await (const _ of engine.generate(request)) void _;
    // 500 µs a token: 2,000 tokens a second.
    expect(engine.prefillRate).toBe(2_000);
  });
});

describe("KvCacheScheduler: waiting for blocks", () => {
  it("with the cache full, queued low, standard, critical, standard: each freed block goes to the highest priority first", async () => {
    const kv = new KvCacheScheduler(1, 16);
    expect(kv.acquire(1, 16)).toBeUndefined(); // holds the only block
    const order: number[] = [];
    const waits = new Map<number, Promise<void>>();
    for (const [id, priority] of [
      [2, SHEDDABLE],
      [3, STANDARD],
      [4, CRITICAL],
      [5, STANDARD],
    ] as const) {
      waits.set(id, kv.acquire(id, 16, undefined, priority)!.then(() => void order.push(id)));
    }
    expect(kv.waiting).toBe(4);
    for (const [holder, next] of [
      [1, 4],
      [4, 3],
      [3, 5],
      [5, 2],
    ] as const) {
      kv.release(holder);
      await waits.get(next);
    }
    expect(order).toEqual([4, 3, 5, 2]);
  });

  it("a critical request at the head is not overtaken by a smaller, lower one that would fit", async () => {
    const kv = new KvCacheScheduler(4, 16);
    kv.acquire(1, 48); // 3 of 4 blocks
    const order: number[] = [];
    const big = kv.acquire(2, 32, undefined, CRITICAL)!.then(() => order.push(2)); // needs 2: waits
    const small = kv.acquire(3, 16, undefined, STANDARD)!.then(() => order.push(3)); // 1 is free, but 2 is ahead
    expect(kv.running).toBe(1);
    kv.release(1);
    await Promise.all([big, small]);
    expect(order).toEqual([2, 3]);
  });

  it("a growing request preempts the lowest priority running one, not the newest", () => {
    const kv = new KvCacheScheduler(4, 16);
    kv.acquire(1, 32, undefined, SHEDDABLE); // 2 blocks, scheduled first
    kv.acquire(2, 32, undefined, CRITICAL); // 2 blocks: full
    // The critical one grows into a third block: the sheddable one is preempted, not itself.
    expect(kv.acquire(2, 33)).toBeUndefined();
    expect(kv.preemptions).toBe(1);
    expect(kv.running).toBe(1);
    expect(kv.waiting).toBe(1);
    expect(kv.usedBlocks).toBe(3);
  });
});

describe("KvCacheScheduler: at most maxRunning (vLLM's max_num_seqs)", () => {
  it("at the bound a higher priority preempts the newest of the lowest running; an equal one waits; the paused one resumes first in its priority", async () => {
    const kv = new KvCacheScheduler(16, 16, { maxRunning: 2 });
    expect(kv.acquire(1, 16, undefined, STANDARD)).toBeUndefined();
    expect(kv.acquire(2, 16, undefined, STANDARD)).toBeUndefined();
    const order: number[] = [];
    const equal = kv.acquire(3, 16, undefined, STANDARD)!.then(() => order.push(3));
    expect(kv.running).toBe(2); // blocks are free, but the batch is full: it waits
    expect(kv.acquire(4, 16, undefined, CRITICAL)).toBeUndefined(); // runs at once
    expect(kv.preemptions).toBe(1);
    expect(kv.running).toBe(2);
    // The paused one (2, the newest standard) waits for a slot when its loop asks again.
    const paused = kv.acquire(2, 17)!.then(() => order.push(2));
    kv.release(1);
    await paused;
    kv.release(4);
    await equal;
    expect(order).toEqual([2, 3]);
    expect(kv.preemptions).toBe(1);
  });

  it("a lower or equal priority never preempts", () => {
    const kv = new KvCacheScheduler(16, 16, { maxRunning: 1 });
    kv.acquire(1, 16, undefined, STANDARD);
    expect(kv.acquire(2, 16, undefined, SHEDDABLE)).toBeInstanceOf(Promise);
    expect(kv.acquire(3, 16, undefined, STANDARD)).toBeInstanceOf(Promise);
    expect(kv.preemptions).toBe(0);
    expect(kv.running).toBe(1);
  });
});

describe("LlmEngine: priority on the prefill lane", () => {
  it("with the lane busy, requests sent low, standard, critical get their first token critical first", async () => {
    // 50 ms of lane per uncached prompt token: the first request's 1,200 tokens hold the lane for a minute,
    // until it is aborted once the others wait; theirs (one token each) then take 50 ms each, in priority order.
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 128, prefillTokenUs: 50_000 });
    const sampling = { temperature: 0, topP: 1 };
    const order: string[] = [];
    const firstToken = async (name: string, prompt: number[], o: { priority?: number; signal?: AbortSignal } = {}) => {
      const gen = engine.generate({ prompt, maxTokens: 2, sampling, ...o });
      const step = await gen.next();
      order.push(step.done ? `${name} ended (${step.value.finishReason})` : name);
      await gen.return(undefined as never);
    };
    const hog = new AbortController();
    const first = firstToken("first", Array.from({ length: 1200 }, (_, i) => 2 + (i % 90)), { signal: hog.signal });
    // Its prefill is on the lane once the microtasks that start it have run.
    await new Promise<void>((r) => setImmediate(r));
    const others = [
      firstToken("low", [3], { priority: SHEDDABLE }),
      firstToken("standard", [4], { priority: STANDARD }),
      firstToken("critical", [5], { priority: CRITICAL }),
    ];
    while (engine.prefillsQueued < 3) await new Promise<void>((r) => setImmediate(r));
    hog.abort();
    await Promise.all([first, ...others]);
    expect(order).toEqual(["first ended (abort)", "critical", "standard", "low"]);
  });
});

describe("LlmEngine: a full batch (maxRunning) and a critical request", () => {
  it("the critical request runs at once while the batch one it preempts pauses, then the batch one finishes whole", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 128, maxRunning: 1 });
    const sampling = { temperature: 0, topP: 1 };
    const events: string[] = [];
    const run = async (name: string, prompt: number[], maxTokens: number, priority: number, onToken?: (n: number) => void) => {
      const gen = engine.generate({ prompt, maxTokens, sampling, priority });
      let n = 0;
      for (;;) {
        const step = await gen.next();
        if (step.done) return step.value;
        events.push(name);
        onToken?.(++n);
      }
    };
    let critical: ReturnType<typeof run> | undefined;
    const batch = run("batch", [3, 4, 5], 40, STANDARD, (n) => {
      if (n === 3) critical = run("critical", [6, 7], 10, CRITICAL);
    });
    const batchResult = await batch;
    const criticalResult = await critical!;
    expect(criticalResult).toMatchObject({ finishReason: "length", completionTokens: 10 });
    expect(batchResult).toMatchObject({ finishReason: "length", completionTokens: 40 });
    // Between the critical request's first and last token the batch one made at most the
    // token it was computing when it was preempted: it waited for the slot.
    const first = events.indexOf("critical");
    const last = events.lastIndexOf("critical");
    expect(first).toBeLessThan(events.lastIndexOf("batch") - 30); // it did not wait for the batch one to end
    expect(events.slice(first, last).filter((e) => e === "batch").length).toBeLessThanOrEqual(1);
    expect(engine.running).toBe(0);
  });
});

describe("requestPriority (the replica's reading of a request)", () => {
  const dispatched = (priority?: string) => ({ [Header.protocol]: "1", ...(priority !== undefined ? { [Header.priority]: priority } : {}) });

  it("on a dispatch: the edge's header, and 0 without one, whatever the body says", () => {
    expect(requestPriority(dispatched("1"), undefined)).toBe(1);
    expect(requestPriority(dispatched("-1"), 5)).toBe(-1);
    // The edge sends nothing for 0: a body's priority (the client's, uncapped) is not taken.
    expect(requestPriority(dispatched(), 1000)).toBe(0);
    expect(requestPriority(dispatched("nonsense"), 3)).toBe(0);
  });

  it("straight from a client (no edge): the body's priority, higher first; none is 0", () => {
    expect(requestPriority({}, 1)).toBe(1);
    expect(requestPriority({}, -1)).toBe(-1);
    expect(requestPriority({}, null)).toBe(0);
    expect(requestPriority({}, undefined)).toBe(0);
  });
});
