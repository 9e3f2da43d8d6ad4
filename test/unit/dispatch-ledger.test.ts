/**
 * The routing view's in-flight ledger (src/proxy/serve/view.ts DispatchLedger): booking,
 * release, what it says of a past moment, and its bounds; and the view's load built on
 * it, which never goes negative and converges to what the replica reports.
 */
import { describe, expect, it } from "vitest";
import fc from "fast-check";
import { DispatchLedger, LEDGER_HISTORY_MS, LEDGER_MAX_ENDED, RoutingView } from "../../src/proxy/serve/view.ts";
import { REPORT_STALE_AFTER_MS, type Load, type RoutingSnapshot } from "../../src/protocol/index.ts";
import { T0 } from "../fixtures/clock.ts";

describe("DispatchLedger", () => {
  it("books a start and releases it at its end", () => {
    const l = new DispatchLedger();
    l.start(T0);
    l.start(T0 + 10);
    expect(l.inflight).toBe(2);
    expect(l.end(T0, T0 + 20)).toBe(true);
    expect(l.inflight).toBe(1);
    expect(l.end(T0 + 10, T0 + 30)).toBe(true);
    expect(l.inflight).toBe(0);
    // A release with nothing in flight changes nothing.
    expect(l.end(T0, T0 + 40)).toBe(false);
    expect(l.inflight).toBe(0);
  });

  it("answers how many were in flight at a past moment, ended ones included", () => {
    const l = new DispatchLedger();
    l.start(T0); // ends at T0 + 100
    l.start(T0 + 50); // ends at T0 + 300
    l.start(T0 + 200); // still running
    l.end(T0, T0 + 100);
    l.end(T0 + 50, T0 + 300);
    expect(l.aliveAt(T0 - 1)).toBe(0);
    expect(l.aliveAt(T0)).toBe(1);
    expect(l.aliveAt(T0 + 60)).toBe(2);
    // An end at exactly the moment: no longer there.
    expect(l.aliveAt(T0 + 100)).toBe(1);
    expect(l.aliveAt(T0 + 250)).toBe(2);
    expect(l.aliveAt(T0 + 300)).toBe(1);
    expect(l.aliveAt(T0 + 10_000)).toBe(1);
  });

  it("ends the dispatch it is told of, not another started at another time", () => {
    const l = new DispatchLedger();
    l.start(T0);
    l.start(T0 + 500);
    l.end(T0 + 500, T0 + 600);
    // The one of T0 is still in flight at T0 + 550; the one of T0 + 500 was too, until T0 + 600.
    expect(l.aliveAt(T0 + 550)).toBe(2);
    expect(l.aliveAt(T0 + 700)).toBe(1);
    expect(l.aliveAt(T0 + 100)).toBe(1);
  });

  it("forgets ended dispatches past its history, and past its bound the oldest first", () => {
    const l = new DispatchLedger();
    l.start(T0);
    l.end(T0, T0 + 10);
    expect(l.aliveAt(T0 + 5)).toBe(1);
    // An end LEDGER_HISTORY_MS later trims the first.
    l.start(T0 + 20);
    l.end(T0 + 20, T0 + 20 + LEDGER_HISTORY_MS);
    expect(l.aliveAt(T0 + 5)).toBe(0);
    const m = new DispatchLedger();
    for (let i = 0; i < LEDGER_MAX_ENDED + 10; i++) {
      m.start(T0 + i);
      m.end(T0 + i, T0 + i + 1);
    }
    // Each lived [T0 + i, T0 + i + 1): the first ten are forgotten, the rest remembered.
    expect(m.aliveAt(T0 + 5)).toBe(0);
    expect(m.aliveAt(T0 + 10)).toBe(1);
    expect(m.aliveAt(T0 + LEDGER_MAX_ENDED + 9)).toBe(1);
  });

  it("a release that never comes leaks nothing beyond the dispatch itself: the replica's next report reconciles", () => {
    // A dispatch whose end is never told stays in flight here; the report made after it
    // started counts it (the replica has it), so the load is the report, not report + 1.
    const v = new RoutingView();
    v.applySnapshot(snapshot(load({ seq: 1, ongoing: 0 })), T0);
    const a = v.get("a")!;
    v.startDispatch(a, T0);
    v.applyLoad("a", load({ seq: 2, ongoing: 5 }), T0 + 1_000);
    // The header excludes the answered request (ours): 5 others + it = 6 at the replica; ours in flight: 1.
    expect(a.load).toBe(6);
  });
});

const load = (over: Partial<Load>): Load => ({ seq: 1, ongoing: 0, queued: 0, max: 16, state: "ready", ...over });
const snapshot = (l: Load, ageMs = 0): RoutingSnapshot => ({
  deployment: "d",
  replicas: [{ id: "a", url: "http://a.test", epoch: 1, models: [], loading: [], expiresInMs: REPORT_STALE_AFTER_MS - ageMs, load: l }],
});

describe("RoutingView load from the ledger (property)", () => {
  // A fleet of one replica fed only by this isolate: its true load at any moment is our
  // dispatches in flight at it. Reports of it arrive late (snapshots) or fresh (headers),
  // in any order; the view's load is never negative, and right after any report of the
  // true load it is exactly the true load now.
  type Op = { kind: "start" } | { kind: "end"; pick: number } | { kind: "tick"; ms: number } | { kind: "snapshot"; ageMs: number } | { kind: "header" };
  const op: fc.Arbitrary<Op> = fc.oneof(
    fc.constant<Op>({ kind: "start" }),
    fc.nat(50).map<Op>((pick) => ({ kind: "end", pick })),
    fc.integer({ min: 1, max: 400 }).map<Op>((ms) => ({ kind: "tick", ms })),
    fc.integer({ min: 0, max: REPORT_STALE_AFTER_MS }).map<Op>((ageMs) => ({ kind: "snapshot", ageMs })),
    fc.constant<Op>({ kind: "header" }),
  );

  it("never goes negative and equals the true load after each report", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 120 }), (ops) => {
        const v = new RoutingView();
        let now = T0;
        let seq = 1;
        v.applySnapshot(snapshot(load({ seq })), now);
        const a = v.get("a")!;
        const running: number[] = [];
        // [start, end) of every dispatch: the truth at any past moment.
        const lives: { s: number; e: number }[] = [];
        const trueAt = (t: number) => lives.filter((l) => l.s <= t && t < l.e).length + running.filter((s) => s <= t).length;
        for (const o of ops) {
          if (o.kind === "start") running.push(v.startDispatch(a, now));
          else if (o.kind === "end" && running.length > 0) {
            const [s] = running.splice(o.pick % running.length, 1);
            v.endDispatch(a, s!, now);
            lives.push({ s: s!, e: now });
          } else if (o.kind === "tick") now += o.ms;
          else if (o.kind === "snapshot" && now - o.ageMs >= T0) {
            const at = now - o.ageMs;
            v.applySnapshot(snapshot(load({ seq: ++seq, ongoing: trueAt(at) }), o.ageMs), now);
            // The seq is new, so it applies whatever its age; the load is then exactly the truth now.
            expect(a.load).toBe(running.length);
          } else if (o.kind === "header" && running.length > 0) {
            // An answer to one of ours: its header excludes that one.
            v.applyLoad("a", load({ seq: ++seq, ongoing: running.length - 1 }), now);
            expect(a.load).toBe(running.length);
          }
          expect(a.load).toBeGreaterThanOrEqual(0);
          expect(a.inflight).toBe(running.length);
        }
      }),
      { numRuns: 1_000 },
    );
  });
});
