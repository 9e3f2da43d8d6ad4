/**
 * Choice by predicted time to first token (issue 57): the model's parts
 * (src/policy/latency-model.ts), the `latency` profile and scorer, the `slo` filter,
 * and the protocol's new words (the replica's time on an answer, its prefill queue and
 * rate in the load header and reports, the SLO headers).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import { createBalancer, type BalanceInput, type BalancerCandidate } from "../../src/policy/balancers/index.ts";
import {
  DEFAULT_LATENCY_SETTINGS,
  ReplicaTimings,
  TRIP_RESHARE_MS,
  TRIP_SAMPLES,
  coordinatesOf,
  distanceKm,
  geographyTripMs,
  poolPriors,
  predictTtft,
} from "../../src/policy/latency-model.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { CacheSummary, buildCacheSummary } from "../../src/prefix/cache-summary.ts";
import { PROTOCOL_VERSION, formatLoadHeader, formatReplicaTime, parseLoadHeader, parseReplicaTime, parseSloHeader, ReportMessage } from "../../src/protocol/index.ts";
import { requestSlo } from "../../src/proxy/serve/serve.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { TRIP_BOARD_MAX, TRIP_BOARD_TTL_MS, TripBoard } from "../../src/state/trip-board.ts";
import { mulberry32 } from "../../src/seeded-random.ts";
import { T0 } from "../fixtures/clock.ts";

const FRANKFURT = { lat: 50.11, lon: 8.68 };
const ASHBURN = { lat: 39.04, lon: -77.49 };
const SETTINGS = DEFAULT_LATENCY_SETTINGS;

const timed = (trips: number[]): ReplicaTimings => {
  const t = new ReplicaTimings();
  for (const ms of trips) t.recordTrip(ms, 0);
  return t;
};
const cand = (id: string, over: Partial<BalancerCandidate> = {}): BalancerCandidate => ({ id, load: 0, capacity: 4, models: [], loading: [], ...over });
const input = (over: Partial<BalanceInput> = {}): BalanceInput => ({ random: mulberry32(7), now: T0, ...over });

describe("what an isolate learns of a replica's timing", () => {
  it("takes the trip as the wait for the answer's head less the replica's share, the median of the last samples", () => {
    const t = new ReplicaTimings();
    expect(t.tripMs).toBeUndefined();
    t.recordTrip(130, 100);
    expect(t.tripMs).toBe(30);
    // One slow answer (a busy event loop, a lost packet) moves the median by one sample, not by its size.
    t.recordTrip(2_000, 0);
    t.recordTrip(33, 1);
    expect(t.tripMs).toBe(32);
    // The window is the last TRIP_SAMPLES: a path that got longer is followed within that many answers.
    for (let i = 0; i < TRIP_SAMPLES; i++) t.recordTrip(90, 0);
    expect(t.tripMs).toBe(90);
    expect(t.tripSamples).toBe(TRIP_SAMPLES);
    // A replica claiming more time than the edge waited gives a trip of 0, not a negative one.
    t.recordTrip(10, 50);
    expect(t.tripMs).toBe(90);
  });

  it("keeps a running mean of service times, and refuses nonsense", () => {
    const t = new ReplicaTimings();
    t.recordService(1_000);
    expect(t.serviceMs).toBe(1_000);
    t.recordService(2_000);
    expect(t.serviceMs).toBe(1_200);
    t.recordService(-5);
    t.recordService(NaN);
    expect(t.serviceMs).toBe(1_200);
  });

  it("estimates a trip from geography: ~6,500 km Frankfurt–Ashburn is ~100 ms, the same city the floor", () => {
    expect(distanceKm(FRANKFURT, ASHBURN)).toBeGreaterThan(6_400);
    expect(distanceKm(FRANKFURT, ASHBURN)).toBeLessThan(6_700);
    expect(geographyTripMs(FRANKFURT, ASHBURN)).toBeGreaterThan(90);
    expect(geographyTripMs(FRANKFURT, ASHBURN)).toBeLessThan(110);
    expect(geographyTripMs(FRANKFURT, FRANKFURT)).toBe(2);
  });

  it("reads coordinates as Cloudflare gives them (strings) and refuses what is not a place", () => {
    expect(coordinatesOf("50.11", "8.68")).toEqual(FRANKFURT);
    expect(coordinatesOf(39.04, -77.49)).toEqual(ASHBURN);
    for (const [a, b] of [["", "1"], ["91", "0"], ["0", "181"], ["x", "1"], [undefined, "1"], ["NaN", "1"], ["Infinity", "0"]] as const) expect(coordinatesOf(a, b)).toBeUndefined();
  });
});

describe("the prefill book: what a replica said of its queue, and this isolate's dispatches since", () => {
  it("queues this isolate's dispatches behind the replica's last word, and drops them when it speaks again", () => {
    const t = new ReplicaTimings();
    expect(t.laneWaitMs(T0)).toBeUndefined();
    t.laneSaid(T0, 100);
    expect(t.laneWaitMs(T0 + 40)).toBe(60);
    // Three sent at once, 50 ms of prefill each: the next one waits for all of them.
    for (let i = 0; i < 3; i++) t.book(T0 + 40, 50);
    expect(t.laneWaitMs(T0 + 40)).toBe(60 + 150);
    // The replica's next word counts those it has: the book keeps only dispatches after it.
    t.book(T0 + 70, 50);
    t.laneSaid(T0 + 60, 180);
    expect(t.laneWaitMs(T0 + 60)).toBe(180 + 50);
    // An older word (a report relayed late) changes nothing.
    t.laneSaid(T0 + 10, 0);
    expect(t.laneWaitMs(T0 + 60)).toBe(230);
    // A lane that went idle: a dispatch long after the word waits only for what came after.
    expect(t.laneWaitMs(T0 + 10_000)).toBe(0);
  });

  it("is bounded, and ignores nonsense", () => {
    const t = new ReplicaTimings();
    t.laneSaid(T0, 0);
    for (let i = 0; i < 1_000; i++) t.book(T0 + 1, 10);
    t.book(T0 + 1, -5);
    t.book(T0 + 1, NaN);
    expect(t.laneWaitMs(T0 + 1)).toBe(64 * 10);
  });

  it("keeps a replica that answered nothing new from taking every request an isolate sends at once", () => {
    const b = createBalancer("latency", { loadFactor: 1, prefillWeight: 2, latency: { prefillTokensPerSecond: 1_000, serviceMs: 1_000 } });
    const keyed = { keys: blockKeys(Array.from({ length: 16 * 10 }, (_, i) => i % 50)), blockSize: 16 };
    // 160 tokens at 1,000 a second: 160 ms of prefill each. Near: 5 ms away; mid: 80 ms away.
    const timings = { near: timed([5]), mid: timed([80]) };
    const near = cand("near", { timings: timings.near });
    const mid = cand("mid", { timings: timings.mid });
    timings.near.laneSaid(T0, 0);
    timings.mid.laneSaid(T0, 0);
    const served: string[] = [];
    for (let i = 0; i < 4; i++) {
      const told: number[] = [];
      const chosen = b.pick([near, mid], input({ prompt: keyed, predicted: (p) => void told.push(p.prefill) }))!;
      served.push(chosen.id);
      // What dispatch.ts does with the chosen replica's predicted prefill.
      timings[chosen.id as "near" | "mid"].book(T0, told[0]!);
    }
    // The second request would wait 160 ms near, more than the 75 ms farther trip: it goes mid; then near again.
    expect(served).toEqual(["near", "mid", "near", "mid"]);
  });
});

describe("the predicted time to first token", () => {
  it("is trip + queue + uncached prefill, each from where it is measured", () => {
    const c = cand("a", { timings: timed([40]), reported: { prefillWaitMs: 300, prefillRate: 5_000 }, reportedAt: T0 - 100 });
    const p = predictTtft(c, 1_000, T0, undefined, poolPriors([c], SETTINGS), SETTINGS);
    // The reported wait, less the 100 ms since it was reported; 1,000 tokens at 5,000 a second.
    expect(p).toEqual({ trip: 40, queue: 200, prefill: 200, total: 440 });
  });

  it("prices a full replica's queue by its measured service time over its capacity", () => {
    const t = timed([5]);
    t.recordService(800);
    const full = cand("a", { load: 6, capacity: 4, timings: t });
    // Three ahead beyond the four slots (6 + this one − 4): slots free 800 / 4 ms apart.
    expect(predictTtft(full, 0, T0, undefined, poolPriors([full], SETTINGS), SETTINGS).queue).toBe(600);
    expect(predictTtft(cand("b", { load: 3, capacity: 4 }), 0, T0, undefined, poolPriors([], SETTINGS), SETTINGS).queue).toBe(0);
  });

  it("falls back, for a replica not measured yet, to geography, then to 0: it is tried, and its first answer measures it", () => {
    const near = cand("near", { timings: timed([4]) });
    const far = cand("far", { timings: timed([90]) });
    const mid = cand("mid", { timings: timed([30]) });
    const placed = cand("placed", { coordinates: ASHBURN });
    const unknown = cand("unknown");
    const pool = [near, far, mid, placed, unknown];
    const priors = poolPriors(pool, SETTINGS);
    expect(predictTtft(placed, 0, T0, FRANKFURT, priors, SETTINGS).trip).toBeCloseTo(geographyTripMs(FRANKFURT, ASHBURN));
    expect(predictTtft(unknown, 0, T0, FRANKFURT, priors, SETTINGS).trip).toBe(0);
    // An isolate that does not know where it is tries the placed one too.
    expect(predictTtft(placed, 0, T0, undefined, priors, SETTINGS).trip).toBe(0);
  });

  it("never goes below the trip, and grows with the uncached tokens (any inputs)", () => {
    fc.assert(
      fc.property(
        fc.record({ trip: fc.integer({ min: 0, max: 500 }), wait: fc.integer({ min: 0, max: 10_000 }), rate: fc.integer({ min: 1, max: 100_000 }), load: fc.integer({ min: 0, max: 50 }), age: fc.integer({ min: 0, max: 20_000 }) }),
        fc.integer({ min: 0, max: 100_000 }),
        fc.integer({ min: 0, max: 100_000 }),
        (r, a, b) => {
          const c = cand("x", { load: r.load, timings: timed([r.trip]), reported: { prefillWaitMs: r.wait, prefillRate: r.rate }, reportedAt: T0 - r.age });
          const priors = poolPriors([c], SETTINGS);
          const pa = predictTtft(c, a, T0, undefined, priors, SETTINGS);
          const pb = predictTtft(c, b, T0, undefined, priors, SETTINGS);
          expect(pa.total).toBeGreaterThanOrEqual(r.trip);
          expect(Number.isFinite(pa.total)).toBe(true);
          if (a <= b) expect(pa.total).toBeLessThanOrEqual(pb.total);
        },
      ),
    );
  });
});

describe("the latency profile", () => {
  const keyed = { keys: blockKeys(Array.from({ length: 16 * 64 }, (_, i) => (i * 13) % 101)), blockSize: 16 };
  const holding = (n: number) => ({ cache: CacheSummary.parse(buildCacheSummary(keyed.keys.slice(0, n).reverse(), 16))! });

  it("is registered and configurable, with its prefill rate and objectives", () => {
    const d = defineDeployment({ name: "lat", routePrefix: "/lat", backend: { kind: "text", text: "hi" }, policy: { balancer: "latency", latency: { prefillTokensPerSecond: 2_000, slo: { ttftMs: 500, refuse: true } } } });
    expect(d.policy.balancer).toBe("latency");
    expect(d.policy.latency).toEqual({ prefillTokensPerSecond: 2_000, serviceMs: 1_000, slo: { ttftMs: 500, refuse: true } });
    expect(() => defineDeployment({ name: "lat", routePrefix: "/lat", backend: { kind: "text", text: "hi" }, policy: { latency: { prefillTokensPerSecond: 0 } } })).toThrow(/prefillTokensPerSecond/);
    expect(() => defineDeployment({ name: "lat", routePrefix: "/lat", backend: { kind: "text", text: "hi" }, policy: { latency: { slo: { ttftMs: -1 } } } })).toThrow(/ttftMs/);
  });

  it("goes near when neither holds the prompt, and far when the prefill it saves is longer than the extra trip", () => {
    const b = createBalancer("latency", { loadFactor: 1, prefillWeight: 2, latency: { prefillTokensPerSecond: 10_000, serviceMs: 1_000 } });
    // 1,024 tokens: 102 ms of prefill at 10,000 a second.
    const near = cand("near", { timings: timed([5]) });
    const far = cand("far", { timings: timed([60]), ...holding(64) });
    expect(b.pick([near, far], input({ prompt: keyed }))!.id).toBe("far");
    // 200 ms farther: the prefill saved (102 ms) is not worth it.
    const farther = cand("far", { timings: timed([205]), ...holding(64) });
    expect(b.pick([near, farther], input({ prompt: keyed }))!.id).toBe("near");
    // Without the cached prefix, the near one.
    expect(b.pick([near, cand("far", { timings: timed([60]) })], input({ prompt: keyed }))!.id).toBe("near");
  });

  it("chooses a request without a prompt by trip and queue too (not load_aware's random two)", () => {
    const b = createBalancer("latency", { loadFactor: 1, prefillWeight: 2 });
    const queued = cand("queued", { timings: timed([5]), reported: { prefillWaitMs: 400 }, reportedAt: T0 });
    const far = cand("far", { timings: timed([80]) });
    for (let i = 0; i < 20; i++) expect(b.pick([queued, far], input({ random: mulberry32(i) }))!.id).toBe("far");
  });

  it("tries a replica it has not measured before one it measured far, whatever the view's order", () => {
    const b = createBalancer("latency", { loadFactor: 1, prefillWeight: 2 });
    expect(b.pick([cand("far", { timings: timed([80]) }), cand("new")], input())!.id).toBe("new");
  });

  it("spreads requests over replicas alike in every part, as this isolate's own dispatches fill them", () => {
    const b = createBalancer("latency", { loadFactor: 1, prefillWeight: 2 });
    const fleet = ["a", "b", "c"].map((id) => cand(id, { timings: timed([10]) }));
    const seen = new Set<string>();
    for (let i = 0; i < 3; i++) {
      const chosen = b.pick(fleet, input())!;
      seen.add(chosen.id);
      (chosen as { load: number }).load++;
    }
    expect(seen).toEqual(new Set(["a", "b", "c"]));
  });

  it("tells the chosen replica's prediction and the best among the candidates", () => {
    const b = createBalancer("latency", { loadFactor: 1, prefillWeight: 2 });
    const told: [number, number][] = [];
    b.pick([cand("a", { timings: timed([10]) }), cand("b", { timings: timed([30]) })], input({ predicted: (p, best) => void told.push([p.total, best]) }));
    expect(told).toEqual([[10, 10]]);
  });
});

describe("the slo filter", () => {
  it("keeps the replicas predicted to meet the objective, and passes the pool whole when none would", () => {
    // load_line then slo then cheapest on slots alone: which replicas survive the filter shows in the pick.
    const b = createBalancer({ filters: ["slo"], picker: "cheapest", scorers: { slots: 1 } }, { loadFactor: 1, prefillWeight: 2 });
    const nearBusy = cand("near", { load: 3, timings: timed([5]) });
    const farIdle = cand("far", { load: 0, timings: timed([150]) });
    // Slots alone would take the idle far one; a 100 ms objective leaves only the near one.
    expect(b.pick([nearBusy, farIdle], input())!.id).toBe("far");
    expect(b.pick([nearBusy, farIdle], input({ slo: { ttftMs: 100 } }))!.id).toBe("near");
    // Nobody within 1 ms: the pool is passed whole, and slots choose.
    expect(b.pick([nearBusy, farIdle], input({ slo: { ttftMs: 1 } }))!.id).toBe("far");
  });
});

describe("the slo filter with room to spare", () => {
  it("sends an objective slower hardware meets with room to spare there, and one only fast hardware meets to the fast", () => {
    const b = createBalancer("latency", { loadFactor: 1, prefillWeight: 2, latency: { prefillTokensPerSecond: 10_000, serviceMs: 1_000 } });
    const keyed = { keys: blockKeys(Array.from({ length: 16 * 32 }, (_, i) => i % 50)), blockSize: 16 };
    // 512 tokens: 51 ms on the fast replica (10,000 a second), 256 ms on the slow one (2,000).
    const fast = cand("fast", { timings: timed([5]), reported: { prefillRate: 10_000 }, reportedAt: T0 });
    const slow = cand("slow", { timings: timed([5]), reported: { prefillRate: 2_000 }, reportedAt: T0 });
    expect(b.pick([fast, slow], input({ prompt: keyed }))!.id).toBe("fast");
    expect(b.pick([fast, slow], input({ prompt: keyed, slo: { ttftMs: 200 } }))!.id).toBe("fast");
    expect(b.pick([fast, slow], input({ prompt: keyed, slo: { ttftMs: 2_000 } }))!.id).toBe("slow");
    // A slow replica with a queue past the spare line (half the objective) leaves the loose request to the fast one.
    const queued = cand("slow", { timings: timed([5]), reported: { prefillRate: 2_000, prefillWaitMs: 900 }, reportedAt: T0 });
    expect(b.pick([fast, queued], input({ prompt: keyed, slo: { ttftMs: 2_000 } }))!.id).toBe("fast");
  });
});

describe("the protocol's words for it", () => {
  it("carries the prefill wait and rate in the load header, and refuses them malformed", () => {
    const load = { seq: 3, ongoing: 1, queued: 0, max: 4, state: "ready" as const, prefillWaitMs: 250, prefillRate: 9_000 };
    expect(formatLoadHeader(load)).toBe("seq=3;ongoing=1;queued=0;max=4;state=ready;prefill_wait=250;prefill_rate=9000");
    expect(parseLoadHeader(formatLoadHeader(load))).toEqual(load);
    for (const bad of ["prefill_wait=-1", "prefill_wait=1.5", "prefill_wait=600001", "prefill_rate=0", "prefill_rate=x"]) expect(parseLoadHeader(`seq=1;ongoing=0;queued=0;max=1;state=ready;${bad}`)).toBeNull();
  });

  it("carries them in reports, bounded", () => {
    const base = { protocol: PROTOCOL_VERSION, deployment: "d", replica_id: "r", seq: 1, ts: T0, state: "ready", ongoing: 0, queued: 0 };
    expect(ReportMessage.safeParse({ ...base, prefill_wait_ms: 10, prefill_rate: 5 }).success).toBe(true);
    expect(ReportMessage.safeParse({ ...base, prefill_wait_ms: 600_001 }).success).toBe(false);
    expect(ReportMessage.safeParse({ ...base, prefill_rate: 0 }).success).toBe(false);
  });

  it("reads the replica's time on an answer, and refuses what is not one", () => {
    expect(formatReplicaTime(12.345)).toBe("12.3");
    expect(formatReplicaTime(-3)).toBe("0");
    expect(parseReplicaTime("12.3")).toBe(12.3);
    expect(parseReplicaTime("0")).toBe(0);
    for (const bad of [null, "", "-1", "1e3", "abc", "99999999", "1.23456"]) expect(parseReplicaTime(bad)).toBeUndefined();
  });

  it("reads a request's objectives from its headers, else the deployment's, and refuses malformed ones", () => {
    expect(parseSloHeader(undefined)).toBeUndefined();
    expect(parseSloHeader(" 250 ")).toBe(250);
    for (const bad of ["0", "-5", "1.5", "ms", "3600001", "123456789"]) expect(parseSloHeader(bad)).toBeNull();
    const plain = defineDeployment({ name: "p", routePrefix: "/p", backend: { kind: "text", text: "hi" } });
    const withSlo = defineDeployment({ name: "s", routePrefix: "/s", backend: { kind: "text", text: "hi" }, policy: { latency: { slo: { ttftMs: 800, tpotMs: 50 } } } });
    expect(requestSlo(plain, new Headers())).toBeUndefined();
    expect(requestSlo(plain, new Headers({ "x-slo-ttft-ms": "300" }))).toEqual({ ttftMs: 300 });
    expect(requestSlo(withSlo, new Headers())).toEqual({ ttftMs: 800, tpotMs: 50 });
    expect(requestSlo(withSlo, new Headers({ "x-slo-ttft-ms": "300" }))).toEqual({ ttftMs: 300, tpotMs: 50 });
    expect(requestSlo(withSlo, new Headers({ "x-slo-tpot-ms": "zero" }))).toBeNull();
  });
});

describe("trips shared through the location's relay (a new isolate starts warm)", () => {
  const replica = (id: string) => ({ id, url: `http://${id}.test`, epoch: 1, models: [], loading: [], expiresInMs: 600_000, load: { seq: 1, ongoing: 0, queued: 0, max: 4, state: "ready" as const } });

  it("the board keeps each replica's newest trip, hands an isolate its peers' since its cursor, never its own, and forgets old ones", () => {
    const board = new TripBoard();
    board.post(1, [{ r: "far", ms: 90 }, { r: "near", ms: 3 }], T0);
    const first = board.since(0, 2, T0);
    expect(first.trips).toEqual([{ r: "far", ms: 90 }, { r: "near", ms: 3 }]);
    // Its own come back to no one, and a cursor past everything is nothing new.
    expect(board.since(0, 1, T0).trips).toEqual([]);
    expect(board.since(first.cursor, 2, T0).trips).toEqual([]);
    // A newer trip replaces the older, and is all a peer at the cursor gets.
    board.post(3, [{ r: "far", ms: 85 }], T0 + 10);
    expect(board.since(first.cursor, 2, T0 + 10).trips).toEqual([{ r: "far", ms: 85 }]);
    expect(board.size).toBe(2);
    // A minute later unposted trips are gone; a cursor from before a restart (beyond the sequence) reads from the start.
    expect(board.since(0, 2, T0 + TRIP_BOARD_TTL_MS + 5).trips).toEqual([{ r: "far", ms: 85 }]);
    expect(board.since(10_000, 2, T0 + 11).trips).toEqual([{ r: "far", ms: 85 }]);
  });

  it("the board is bounded in replicas, whatever isolates post", () => {
    const board = new TripBoard();
    for (let i = 0; i < TRIP_BOARD_MAX + 100; i++) board.post(1, [{ r: `r${i}`, ms: 1 }], T0);
    expect(board.size).toBe(TRIP_BOARD_MAX);
    expect(board.since(0, 2, T0, 10).trips.map((t) => t.r)).toEqual(Array.from({ length: 10 }, (_, i) => `r${TRIP_BOARD_MAX + 90 + i}`));
  });

  it("an isolate posts a trip when it is new, moved by a tenth or is half a minute old, and uses a peer's until it has its own", () => {
    const t = new ReplicaTimings();
    expect(t.takeShare(T0)).toBeUndefined();
    t.learnPeer(70);
    expect(t.tripMs).toBe(70);
    expect(t.takeShare(T0)).toBeUndefined(); // a peer's is not posted again
    t.recordTrip(50, 0);
    expect(t.tripMs).toBe(50);
    expect(t.takeShare(T0)).toBe(50);
    t.recordTrip(52, 0); // median of 50, 52: 50
    expect(t.takeShare(T0 + 1)).toBeUndefined();
    t.recordTrip(80, 0);
    t.recordTrip(80, 0); // median 52 < 5 ms moved: not yet
    expect(t.takeShare(T0 + 2)).toBeUndefined();
    t.recordTrip(80, 0); // median 80
    expect(t.takeShare(T0 + 3)).toBe(80);
    expect(t.takeShare(T0 + 3 + TRIP_RESHARE_MS)).toBe(80);
  });

  it("a view posts what its isolate measured and takes its peers' trips from a snapshot, for the replicas it has", () => {
    const v = new RoutingView();
    v.applySnapshot({ deployment: "d", replicas: [replica("a"), replica("b")], peers: { cursor: 1, notes: [], trips: [{ r: "a", ms: 40 }, { r: "gone", ms: 5 }], tripCursor: 2 } }, T0);
    expect(v.get("a")!.timings.tripMs).toBe(40);
    expect(v.get("b")!.timings.tripMs).toBeUndefined();
    expect(v.shareTrips(T0)).toEqual([]);
    v.get("b")!.timings.recordTrip(12.34, 0);
    expect(v.shareTrips(T0)).toEqual([{ r: "b", ms: 12.3 }]);
    expect(v.shareTrips(T0 + 1)).toEqual([]);
    expect(v.describe(T0).find((r) => r.id === "a")).toMatchObject({ tripMs: 40 });
  });
});
