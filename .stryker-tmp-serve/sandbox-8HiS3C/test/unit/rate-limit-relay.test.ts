/** A location's rate-limit ledger in its relay: uses summed over isolates, one shard sync per interval. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { RateRelayLedger } from "../../src/policy/rate-limit-relay.ts";
import { chargeUse } from "../../src/policy/rate-limit-sync.ts";
import { fullBucket } from "../../src/policy/token-bucket.ts";
import { T0 } from "../fixtures/clock.ts";

const limits = { requestsPerSecond: 10, burst: 20 };

describe("RateRelayLedger", () => {
  it("sums several isolates' uses of a key and sends them as one use, from the earliest", () => {
    const l = new RateRelayLedger();
    l.add([{ key: "k", used: 3, since: T0 + 10 }]);
    l.add([{ key: "k", used: 4, since: T0 + 5 }, { key: "j", used: 1, since: T0 + 7 }]);
    expect(l.take().sort((a, b) => a.key.localeCompare(b.key))).toEqual([
      { key: "j", used: 1, since: T0 + 7 },
      { key: "k", used: 7, since: T0 + 5 },
    ]);
    expect(l.take()).toEqual([]);
  });

  it("is due once per interval", () => {
    const l = new RateRelayLedger();
    expect(l.due(T0, 1_000)).toBe(true);
    expect(l.due(T0 + 999, 1_000)).toBe(false);
    expect(l.due(T0 + 1_000, 1_000)).toBe(true);
  });

  it("answers with the global remainder less what the location let through since the sync, and nothing for keys never synced", () => {
    const l = new RateRelayLedger();
    expect(l.answer(["k"])).toEqual([]);
    l.adopt([{ key: "k", tokens: 12 }]);
    l.add([{ key: "k", used: 5, since: T0 }]);
    expect(l.answer(["k", "other"])).toEqual([{ key: "k", tokens: 7 }]);
  });

  it("gives a failed sync's uses back to the next one", () => {
    const l = new RateRelayLedger();
    l.add([{ key: "k", used: 2, since: T0 }]);
    const taken = l.take();
    l.add([{ key: "k", used: 1, since: T0 + 50 }]);
    l.giveBack(taken);
    expect(l.take()).toEqual([{ key: "k", used: 3, since: T0 }]);
  });

  it("holds a key's limit across a location's isolates like direct syncs: 8 isolates × 5 requests over a burst of 20", () => {
    // The shard's bucket, charged as the RateLimiter object does.
    const bucket = fullBucket(limits, T0);
    const l = new RateRelayLedger();
    l.add(Array.from({ length: 8 }, () => ({ key: "k", used: 5, since: T0 })));
    expect(l.due(T0, 1_000)).toBe(true);
    const sent = l.take();
    l.adopt(sent.map((u) => ({ key: u.key, tokens: chargeUse(bucket, limits, u, T0) })));
    // 40 let through against a burst of 20: every isolate now learns the key is 20 in debt.
    expect(l.answer(["k"])).toEqual([{ key: "k", tokens: -20 }]);
  });

  it("forgets keys that were not in the last sync", () => {
    const l = new RateRelayLedger();
    l.adopt([{ key: "old", tokens: 3 }, { key: "new", tokens: 4 }]);
    l.prune((k) => k === "new");
    expect(l.answer(["old", "new"])).toEqual([{ key: "new", tokens: 4 }]);
  });
});
