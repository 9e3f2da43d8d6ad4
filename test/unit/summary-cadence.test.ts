/** When a replica's prefix-cache summary goes into its reports (src/replica/summary-cadence.ts). Time is explicit. */
import { describe, expect, it } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { buildCacheSummary, type CacheSummaryWire } from "../../src/prefix/cache-summary.ts";
import { SUMMARY_RESEND_MS } from "../../src/protocol/index.ts";
import { SummaryCadence } from "../../src/replica/summary-cadence.ts";

const summaryOf = (seed: number) => buildCacheSummary(blockKeys(Array.from({ length: 64 }, (_, i) => i + seed * 1000)), 16);

function setup() {
  let now = 1_000_000;
  let current: CacheSummaryWire | undefined = summaryOf(1);
  const c = new SummaryCadence(() => current, { now: () => now });
  return {
    c,
    set: (s: CacheSummaryWire | undefined) => (current = s),
    advance: (ms: number) => (now += ms),
  };
}

describe("SummaryCadence", () => {
  it("sends the summary first, then only when it changed", () => {
    const { c, set, advance } = setup();
    const first = c.next();
    expect(first).toEqual(summaryOf(1));
    c.accepted(first);
    advance(1_000);
    expect(c.next()).toBeUndefined();
    set(summaryOf(2));
    const changed = c.next();
    expect(changed).toEqual(summaryOf(2));
    c.accepted(changed);
    expect(c.next()).toBeUndefined();
  });

  it("sends it again until a report carrying it is accepted", () => {
    const { c } = setup();
    expect(c.next()).toBeDefined();
    // No accepted(): the report failed, or came back stale_seq.
    expect(c.next()).toBeDefined();
    expect(c.dueSince).toBe(1_000_000);
  });

  it("resends an unchanged summary every SUMMARY_RESEND_MS, so a restarted routing object learns it", () => {
    const { c, advance } = setup();
    c.accepted(c.next());
    advance(SUMMARY_RESEND_MS - 1);
    expect(c.next()).toBeUndefined();
    advance(1);
    const again = c.next();
    expect(again).toEqual(summaryOf(1));
    c.accepted(again);
    expect(c.next()).toBeUndefined();
  });

  it("says null once when the summary is gone, and nothing after", () => {
    const { c, set } = setup();
    c.accepted(c.next());
    set(undefined);
    expect(c.next()).toBeNull();
    c.accepted(null);
    expect(c.next()).toBeUndefined();
  });

  it("a register clears what the edge holds: the next report carries the summary", () => {
    const { c } = setup();
    c.accepted(c.next());
    expect(c.next()).toBeUndefined();
    c.reset();
    expect(c.next()).toEqual(summaryOf(1));
  });

  it("a provider that throws counts as none, logged once", () => {
    const lines: string[] = [];
    let fail = false;
    const c = new SummaryCadence(
      () => {
        if (fail) throw new Error("engine gone");
        return summaryOf(3);
      },
      { log: (m) => lines.push(m) },
    );
    c.accepted(c.next());
    fail = true;
    expect(c.next()).toBeNull();
    expect(c.next()).toBeNull();
    expect(lines).toHaveLength(1);
  });
});

describe("SummaryCadence, exactly", () => {
  it("a summary that differs in any one field is a new one (sent), the same in all is not", () => {
    const base = summaryOf(5);
    for (const changed of [{ v: 2 }, { k: base.k + 1 }, { n: base.n + 1 }, { block: 32 }, { bits: `A${base.bits.slice(1)}` }]) {
      let current: CacheSummaryWire = base;
      const c = new SummaryCadence(() => current, { now: () => 0 });
      c.accepted(c.next());
      expect(c.next(), "the same").toBeUndefined();
      current = { ...base, ...changed } as CacheSummaryWire;
      expect(c.next(), JSON.stringify(Object.keys(changed))).toEqual(current);
    }
  });

  it("the failure is logged with its reason, once per failing spell; nothing due clears the wait", () => {
    const lines: string[] = [];
    let fail = true;
    let now = 100;
    const c = new SummaryCadence(
      () => {
        if (fail) throw new Error("engine gone");
        return summaryOf(3);
      },
      { log: (m) => lines.push(m), now: () => now },
    );
    // Failing from the first call: logged at once (nothing was held, so nothing is due).
    expect(c.next()).toBeUndefined();
    expect(lines).toEqual(["prefix-cache summary unavailable: Error: engine gone"]);
    expect(c.dueSince).toBeUndefined();
    fail = false;
    expect(c.next()).toEqual(summaryOf(3));
    expect(c.dueSince).toBe(100);
    now = 200;
    c.accepted(summaryOf(3));
    expect(c.next()).toBeUndefined();
    expect(c.dueSince).toBeUndefined();
    // A second spell is logged again.
    fail = true;
    expect(c.next()).toBeNull();
    expect(lines).toHaveLength(2);
  });
});
