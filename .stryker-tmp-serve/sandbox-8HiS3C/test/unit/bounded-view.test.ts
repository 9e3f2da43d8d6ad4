/** What a relay hands one isolate: the merged snapshot aged by the time held, and bounded. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import type { ReplicaView, RoutingSnapshot } from "../../src/protocol/index.ts";
import { VIEW_MAX_HOLDERS, VIEW_MAX_REPLICAS, VIEW_ROTATE_MS, agedSnapshot, boundedView } from "../../src/state/bounded-view.ts";
import { T0 } from "../fixtures/clock.ts";

function view(id: string, over: Partial<ReplicaView> = {}): ReplicaView {
  return { id, url: `http://${id}.test`, epoch: T0, load: { seq: 1, ongoing: 0, queued: 0, max: 4, state: "ready" }, models: [], loading: [], expiresInMs: 2_000, ...over };
}
function fleet(n: number, holders = 0): RoutingSnapshot {
  return {
    deployment: "llm",
    replicas: Array.from({ length: n }, (_, i) => view(`r${i}`, i < holders ? { models: [`m${i % 7}`] } : {})),
  };
}
const ids = (s: RoutingSnapshot) => new Set(s.replicas.map((r) => r.id));

describe("agedSnapshot", () => {
  it("shortens every expiry by the age and drops the replicas that expired meanwhile", () => {
    const s = { deployment: "llm", replicas: [view("a", { expiresInMs: 2_000 }), view("b", { expiresInMs: 300 }), view("c", { expiresInMs: 301 })] };
    const aged = agedSnapshot(s, 300);
    expect(aged.replicas.map((r) => [r.id, r.expiresInMs])).toEqual([
      ["a", 1_700],
      ["c", 1],
    ]);
    expect(s.replicas[0]!.expiresInMs).toBe(2_000);
    expect(agedSnapshot(s, 0)).toBe(s);
  });
});

describe("boundedView", () => {
  it("hands over the whole snapshot up to the bound", () => {
    const s = fleet(VIEW_MAX_REPLICAS);
    expect(boundedView(s, 1, T0)).toBe(s);
  });

  it("samples a larger fleet down to the bound and says how large the fleet is", () => {
    const v = boundedView(fleet(10_000), 1, T0);
    expect(v.replicas).toHaveLength(VIEW_MAX_REPLICAS);
    expect(ids(v).size).toBe(VIEW_MAX_REPLICAS);
    expect(v.total).toBe(10_000);
  });

  it("gives different isolates different samples, which together cover the fleet", () => {
    const s = fleet(4_000);
    const seen = new Set<string>();
    const a = ids(boundedView(s, 1, T0));
    const b = ids(boundedView(s, 2, T0));
    let common = 0;
    for (const id of a) if (b.has(id)) common++;
    // Independent samples of 1,024 out of 4,000 share about a quarter of their members.
    expect(common).toBeLessThan(VIEW_MAX_REPLICAS * 0.4);
    for (let seed = 0; seed < 40; seed++) for (const id of ids(boundedView(s, seed, T0))) seen.add(id);
    expect(seen.size).toBe(4_000);
  });

  it("is stable for one isolate within a rotation slot and changes in the next", () => {
    const s = fleet(3_000);
    const slot = Math.floor(T0 / VIEW_ROTATE_MS) * VIEW_ROTATE_MS;
    expect(ids(boundedView(s, 9, slot))).toEqual(ids(boundedView(s, 9, slot + VIEW_ROTATE_MS - 1)));
    expect(ids(boundedView(s, 9, slot))).not.toEqual(ids(boundedView(s, 9, slot + VIEW_ROTATE_MS)));
  });

  it("keeps every model holder while they fit in their share, so multiplexed models find their replicas", () => {
    const v = boundedView(fleet(5_000, 200), 3, T0);
    for (let i = 0; i < 200; i++) expect(ids(v).has(`r${i}`)).toBe(true);
    expect(v.replicas).toHaveLength(VIEW_MAX_REPLICAS);
  });

  it("caps holders at their share when there are more, and fills with holders when plain replicas run short", () => {
    const many = boundedView(fleet(5_000, 3_000), 3, T0);
    expect(many.replicas.filter((r) => r.models.length > 0)).toHaveLength(VIEW_MAX_HOLDERS);
    expect(many.replicas).toHaveLength(VIEW_MAX_REPLICAS);
    const mostlyHolders = boundedView(fleet(2_000, 1_900), 3, T0);
    expect(mostlyHolders.replicas.filter((r) => r.models.length === 0)).toHaveLength(100);
    expect(mostlyHolders.replicas).toHaveLength(VIEW_MAX_REPLICAS);
  });
});
