/**
 * When load reports go out (src/replica/report-cadence.ts), on a fake clock: a
 * busy replica's changes wait for the busy window and the heartbeat waits one
 * interval after the last report, so a busy replica sends about one report a
 * second; idle changes go after the short window, urgent ones at once.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from "vitest";
import { BUSY_CHANGE_REPORT_DELAY_MS, CHANGE_REPORT_DELAY_MS, ReportCadence } from "../../src/replica/report-cadence.ts";

beforeEach(() => {
  vi.useFakeTimers({ now: 1_764_511_200_000 });
});
afterEach(() => {
  vi.useRealTimers();
});

/** A cadence whose sends take `rttMs` of (fake) time; `at` records when each started. */
function cadence(o: { busy: () => boolean; rttMs?: number; changeDelayMs?: number }) {
  const at: number[] = [];
  const c = new ReportCadence({
    busy: o.busy,
    ...(o.changeDelayMs !== undefined && { changeDelayMs: o.changeDelayMs }),
    send: () => {
      at.push(Date.now());
      return new Promise<void>((r) => setTimeout(r, o.rttMs ?? 5));
    },
  });
  return { c, at };
}

/** `ms` of fake time with a (non-urgent) load change every `everyMs`. */
async function changing(c: ReportCadence, ms: number, everyMs = 20): Promise<void> {
  for (let t = 0; t < ms; t += everyMs) {
    c.changed(false);
    await vi.advanceTimersByTimeAsync(everyMs);
  }
}

const gaps = (at: number[]) => at.slice(1).map((t, i) => t - at[i]!);

describe("ReportCadence", () => {
  it("a busy replica whose load changes every 20 ms reports about once a second; the same changes while idle, ~4 a second", async () => {
    const busy = cadence({ busy: () => true });
    busy.c.start();
    await changing(busy.c, 10_000);
    // Changes and heartbeats merge: one report per BUSY_CHANGE_REPORT_DELAY_MS.
    expect(busy.at.length).toBeGreaterThanOrEqual(9);
    expect(busy.at.length).toBeLessThanOrEqual(10);
    for (const g of gaps(busy.at)) expect(g).toBeGreaterThanOrEqual(BUSY_CHANGE_REPORT_DELAY_MS);

    // What a busy replica sent before the busy window (its changes waited only
    // CHANGE_REPORT_DELAY_MS; the EdgeClient of then measured 3.9 reports/s), and
    // what an idle replica whose load changes as often still sends.
    const idle = cadence({ busy: () => false });
    idle.c.start();
    await changing(idle.c, 10_000);
    expect(idle.at.length).toBeGreaterThanOrEqual(35);
    expect(idle.at.length).toBeLessThanOrEqual(40);
    for (const g of gaps(idle.at)) expect(g).toBeGreaterThanOrEqual(CHANGE_REPORT_DELAY_MS);
    busy.c.stop();
    idle.c.stop();
  });

  it("heartbeats once an interval after the last report, whatever sent it", async () => {
    const { c, at } = cadence({ busy: () => false });
    c.start();
    const t0 = Date.now();
    await vi.advanceTimersByTimeAsync(2_500);
    expect(at.map((t) => t - t0)).toEqual([1_000, 2_000]);
    // A report at 2.5 s (an idle change after 250 ms here): the next heartbeat is at 3.75 s, not 3 s.
    c.changed(false);
    await vi.advanceTimersByTimeAsync(CHANGE_REPORT_DELAY_MS);
    expect(at.at(-1)! - t0).toBe(2_750);
    await vi.advanceTimersByTimeAsync(999);
    expect(at).toHaveLength(3);
    await vi.advanceTimersByTimeAsync(1);
    expect(at.at(-1)! - t0).toBe(3_750);
    c.stop();
  });

  it("sends urgent changes at once while busy, and going idle after the short window, not the busy one", async () => {
    let busy = true;
    const { c, at } = cadence({ busy: () => busy });
    c.start();
    const t0 = Date.now();
    await vi.advanceTimersByTimeAsync(100);
    c.changed(true);
    await vi.advanceTimersByTimeAsync(0);
    expect(at.map((t) => t - t0)).toEqual([100]);

    // A busy change at 200 ms is due 1 s after the last report (1,100 ms)...
    await vi.advanceTimersByTimeAsync(100);
    c.changed(false);
    // ...but the replica goes idle at 300 ms: that change is due at 550 ms and takes the earlier one with it.
    await vi.advanceTimersByTimeAsync(100);
    busy = false;
    c.changed(false);
    await vi.advanceTimersByTimeAsync(CHANGE_REPORT_DELAY_MS);
    expect(at.map((t) => t - t0)).toEqual([100, 550]);
    c.stop();
  });

  it("coalesces what is asked during a send into one more send, one at a time", async () => {
    const { c, at } = cadence({ busy: () => false, rttMs: 50 });
    c.start();
    const first = c.now();
    void c.now();
    void c.now();
    c.changed(true);
    await vi.advanceTimersByTimeAsync(120);
    await first;
    expect(at).toHaveLength(2);
    expect(at[1]! - at[0]!).toBe(50);
    await c.settled();
    c.stop();
  });

  it("tells becoming busy after the short window (here 0: at once); changes after that wait for the busy window", async () => {
    let busy = false;
    const { c, at } = cadence({ busy: () => busy, changeDelayMs: 0 });
    c.start();
    const t0 = Date.now();
    c.changed(false);
    await vi.advanceTimersByTimeAsync(10);
    // Idle → busy: the first change of the busy period goes like an idle one.
    busy = true;
    c.changed(false);
    await vi.advanceTimersByTimeAsync(10);
    c.changed(false);
    await vi.advanceTimersByTimeAsync(BUSY_CHANGE_REPORT_DELAY_MS);
    expect(at.map((t) => t - t0)).toEqual([0, 10, 10 + BUSY_CHANGE_REPORT_DELAY_MS]);
    c.stop();
  });

  it("sends nothing on its own before start or after stop", async () => {
    const { c, at } = cadence({ busy: () => false });
    c.changed(true);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(at).toEqual([]);
    c.start();
    c.stop();
    c.changed(true);
    await vi.advanceTimersByTimeAsync(5_000);
    expect(at).toEqual([]);
  });
});

describe("ReportCadence, exactly", () => {
  it("intervalMs: read back; a new one re-arms the heartbeat from the last send; zero, negative, NaN or the same are ignored", async () => {
    const { c, at } = cadence({ busy: () => false });
    expect(c.intervalMs).toBe(1_000);
    c.start();
    const t0 = Date.now();
    for (const bad of [0, -5, Number.NaN, 1_000]) c.intervalMs = bad;
    expect(c.intervalMs).toBe(1_000);
    await vi.advanceTimersByTimeAsync(300);
    c.intervalMs = 400;
    expect(c.intervalMs).toBe(400);
    await vi.advanceTimersByTimeAsync(100);
    expect(at).toEqual([t0 + 400]);
    c.stop();
  });

  it("start twice is one heartbeat; counts what it sends; a failed send goes to onError and the cadence goes on", async () => {
    const errors: unknown[] = [];
    let n = 0;
    const c = new ReportCadence({
      busy: () => false,
      send: async () => {
        if (++n === 1) throw new Error("edge down");
      },
      onError: (e) => errors.push(e),
    });
    c.start();
    c.start();
    await vi.advanceTimersByTimeAsync(1_000);
    expect([c.sent, errors.length]).toEqual([1, 1]);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(c.sent).toBe(2);
    c.stop();
    // Without onError a failure is swallowed, not thrown.
    const quiet = new ReportCadence({ busy: () => false, send: () => Promise.reject(new Error("x")) });
    await expect(quiet.now()).resolves.toBeUndefined();
  });

  it("an idle change goes after changeDelayMs, counted from the change", async () => {
    const { c, at } = cadence({ busy: () => false, changeDelayMs: 100 });
    c.start();
    await vi.advanceTimersByTimeAsync(50);
    const t = Date.now();
    c.changed(false);
    await vi.advanceTimersByTimeAsync(99);
    expect(at).toEqual([]);
    await vi.advanceTimersByTimeAsync(1);
    expect(at).toEqual([t + 100]);
    c.stop();
  });
});
