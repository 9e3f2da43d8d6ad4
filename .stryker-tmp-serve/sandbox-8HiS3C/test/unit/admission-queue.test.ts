/** The held requests' order (src/policy/admission-queue.ts): priority, then fair between flows, then first come. */
// @ts-nocheck

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AdmissionQueue, FLOW_SEPARATOR, clientOf } from "../../src/policy/admission-queue.ts";

const drain = <T>(q: AdmissionQueue<T>) => {
  const out: T[] = [];
  for (let h = q.shift(); h; h = q.shift()) out.push(h.value);
  return out;
};

describe("AdmissionQueue", () => {
  it("admits higher priorities first, whatever the arrival order", () => {
    const q = new AdmissionQueue<string>();
    q.push(0, "a", "standard-1");
    q.push(-1, "a", "sheddable");
    q.push(1, "b", "critical");
    q.push(0, "c", "standard-2");
    expect(drain(q)).toEqual(["critical", "standard-1", "standard-2", "sheddable"]);
    expect(q.size).toBe(0);
    expect(q.shift()).toBeUndefined();
  });

  it("takes turns between flows in a band, first come first served within each", () => {
    const q = new AdmissionQueue<string>();
    for (let i = 1; i <= 4; i++) q.push(0, "heavy", `h${i}`);
    q.push(0, "light", "l1");
    q.push(0, "light", "l2");
    expect(drain(q)).toEqual(["h1", "l1", "h2", "l2", "h3", "h4"]);
  });

  it("weighs flows by cost: a flow of costly requests gets fewer through", () => {
    const q = new AdmissionQueue<string>();
    for (let i = 1; i <= 3; i++) q.push(0, "long", `long${i}`, 4);
    for (let i = 1; i <= 6; i++) q.push(0, "short", `short${i}`, 1);
    // long1 starts at 0 and finishes at 4; short1..4 start at 0..3, so they go before long2 (start 4).
    expect(drain(q).slice(0, 6)).toEqual(["long1", "short1", "short2", "short3", "short4", "long2"]);
  });

  it("corrects a flow's place by the tokens its request actually used: a large budget barely used no longer holds it back", () => {
    const ordered = (usedOfEach?: number) => {
      const q = new AdmissionQueue<string>();
      // "generous" asks 1,000 tokens per request and uses 10; "exact" asks and uses 100.
      for (let i = 1; i <= 3; i++) q.push(0, "generous", `g${i}`, 1000);
      for (let i = 1; i <= 6; i++) q.push(0, "exact", `e${i}`, 100);
      const out = [q.shift()!.value]; // g1 goes (start 0), and ends having used 10
      if (usedOfEach !== undefined) q.correct(0, "generous", usedOfEach - 1000);
      for (let h = q.shift(); h; h = q.shift()) out.push(h.value);
      return out;
    };
    // By the estimate, g2 starts at 1,000: every "exact" request (starts 0..500) goes first.
    expect(ordered()).toEqual(["g1", "e1", "e2", "e3", "e4", "e5", "e6", "g2", "g3"]);
    // Corrected, g2 starts at 10 and g3 at 1,010: g2 goes once e1 (start 0) has.
    expect(ordered(10)).toEqual(["g1", "e1", "g2", "e2", "e3", "e4", "e5", "e6", "g3"]);
  });

  it("moves a flow back by what it used beyond its estimate, never before the band's virtual time", () => {
    const q = new AdmissionQueue<string>();
    q.push(0, "a", "a1", 10);
    q.push(0, "a", "a2", 10);
    q.push(0, "b", "b1", 10);
    q.push(0, "b", "b2", 10);
    expect(q.shift()!.value).toBe("a1");
    q.correct(0, "a", 100); // a1 used 110: a2 (start 10) now starts at 110
    expect(drain(q)).toEqual(["b1", "b2", "a2"]);
    const r = new AdmissionQueue<string>();
    r.push(0, "a", "a1", 10);
    r.push(0, "b", "b1", 10);
    r.correct(0, "a", -1_000_000); // far below: clamped at the virtual time (0), first come among equals
    expect(drain(r)).toEqual(["a1", "b1"]);
    r.correct(0, "a", 5); // nothing waits: no band, nothing to correct
    expect(r.size).toBe(0);
  });

  it("lets a flow that was away start at the band's virtual time, with no banked credit", () => {
    const q = new AdmissionQueue<string>();
    for (let i = 1; i <= 4; i++) q.push(0, "busy", `b${i}`);
    expect([q.shift()!.value, q.shift()!.value, q.shift()!.value]).toEqual(["b1", "b2", "b3"]);
    q.push(0, "late", "l1");
    q.push(0, "late", "l2");
    // l1 starts where the band is (b3's start tag, 2), not at 0: one request ahead of b4 (tag 3), no more.
    // l2 (tag 3) ties with b4 and goes after it: first come.
    expect(drain(q)).toEqual(["l1", "b4", "l2"]);
  });

  it("takes a request out when its client leaves, and its flow keeps its place", () => {
    const q = new AdmissionQueue<string>();
    q.push(0, "a", "a1");
    const gone = q.push(0, "a", "a2");
    q.push(0, "b", "b1");
    expect(q.remove(gone)).toBe(true);
    expect(q.remove(gone)).toBe(false);
    expect(q.peek()!.value).toBe("a1");
    q.push(0, "a", "a3");
    expect(drain(q)).toEqual(["a1", "b1", "a3"]);
  });

  it("never admits a lower band while a higher one waits, and keeps each flow's order (any sequence)", () => {
    const op = fc.oneof(
      fc.record({ kind: fc.constant("push" as const), priority: fc.integer({ min: -2, max: 2 }), flow: fc.constantFrom("a", "b", "c"), cost: fc.integer({ min: 0, max: 5 }) }),
      fc.record({ kind: fc.constant("shift" as const) }),
      fc.record({ kind: fc.constant("remove" as const), pick: fc.nat() }),
    );
    fc.assert(
      fc.property(fc.array(op, { maxLength: 80 }), (ops) => {
        const q = new AdmissionQueue<{ priority: number; flow: string; n: number }>();
        const waiting: ReturnType<typeof q.push>[] = [];
        const lastOut = new Map<string, number>();
        let n = 0;
        for (const o of ops) {
          if (o.kind === "push") waiting.push(q.push(o.priority, o.flow, { priority: o.priority, flow: o.flow, n: n++ }, o.cost));
          else if (o.kind === "remove" && waiting.length > 0) {
            const [h] = waiting.splice(o.pick % waiting.length, 1);
            expect(q.remove(h!)).toBe(true);
          } else if (o.kind === "shift") {
            const h = q.shift();
            if (!h) {
              expect(waiting).toHaveLength(0);
              continue;
            }
            waiting.splice(waiting.indexOf(h), 1);
            expect(Math.max(h.priority, ...waiting.map((w) => w.priority))).toBe(h.priority);
            const key = `${h.priority}/${h.flow}`;
            expect(h.value.n).toBeGreaterThan(lastOut.get(key) ?? -1);
            lastOut.set(key, h.value.n);
          }
          expect(q.size).toBe(waiting.length);
        }
      }),
      { numRuns: 300 },
    );
  });
});

describe("AdmissionQueue with requests in service", () => {
  it("serves the flow with fewer requests in service first, then by start tags, never a lower band first", () => {
    const inService = new Map([["heavy", 5], ["light", 1]]);
    const q = new AdmissionQueue<string>({ client: (c) => inService.get(c) ?? 0, flow: () => 0 });
    q.push(0, "heavy", "h1");
    q.push(0, "heavy", "h2");
    q.push(0, "light", "l1");
    q.push(0, "idle", "i1");
    q.push(-1, "light", "sheddable");
    expect(q.shift()!.value).toBe("i1"); // none in service
    inService.set("idle", 1);
    expect(q.shift()!.value).toBe("l1"); // 1 in service, arrived after the heavy flow's head
    expect(q.shift()!.value).toBe("h1");
    expect(q.shift()!.value).toBe("h2");
    expect(q.shift()!.value).toBe("sheddable");
  });
});

describe("AdmissionQueue: flows a client names (issue 50)", () => {
  const sub = (client: string, name: string) => `${client}${FLOW_SEPARATOR}${name}`;
  const victimShare = (attacker: (i: number) => string, taken = 20) => {
    const q = new AdmissionQueue<string>();
    for (let i = 0; i < 40; i++) {
      q.push(0, sub("victim", "victim"), "v");
      q.push(0, attacker(i), "a");
    }
    let v = 0;
    for (let i = 0; i < taken; i++) if (q.shift()!.value === "v") v++;
    return v / taken;
  };

  it("a client that names a new flow for every request divides its share among them: it does not multiply it", () => {
    expect(victimShare(() => sub("attacker", "one"))).toBe(0.5);
    expect(victimShare((i) => sub("attacker", `random-${i}`))).toBeGreaterThanOrEqual(0.45);
  });

  it("a client that names another's flow gets a flow of its own: the victim's is not entered", () => {
    expect(clientOf(sub("attacker", "victim"))).toBe("attacker");
    expect(victimShare(() => sub("attacker", "victim"))).toBe(0.5);
  });

  it("a client's flows take turns within its share", () => {
    const q = new AdmissionQueue<string>();
    for (let i = 1; i <= 3; i++) q.push(0, sub("gw", "batch"), `b${i}`);
    for (let i = 1; i <= 3; i++) q.push(0, sub("gw", "chat"), `c${i}`);
    expect(drain(q)).toEqual(["b1", "c1", "b2", "c2", "b3", "c3"]);
  });

  it("counts a client's requests held over all its flows", () => {
    const q = new AdmissionQueue<string>();
    q.push(0, sub("gw", "a"), "1");
    q.push(1, sub("gw", "b"), "2");
    q.push(0, "other", "3");
    expect(q.heldOf("gw")).toBe(2);
    expect(q.heldOf("other")).toBe(1);
  });
});
