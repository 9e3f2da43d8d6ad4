/**
 * Admission across locations (src/policy/location-demand.ts, AdmissionShares.elsewhere):
 * each relay tells the leader its location's demand with its snapshot ask, the leader
 * answers with the other locations' sum, and each relay shares the deployment's slots
 * as if the other locations were one more isolate. Two locations with the same demand
 * then get half the slots each, where alone each would give out all of them.
 */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { AdmissionShares, ELSEWHERE_TTL_MS, HEADROOM_WINDOW_MS } from "../../src/policy/admission-shares.ts";
import { LOCATION_DEMAND_TTL_MS, LocationDemandBoard, REST_OF_FLOWS } from "../../src/policy/location-demand.ts";
import { LocationDemand, MAX_DEMAND_FLOWS } from "../../src/protocol/index.ts";
import { T0 } from "../fixtures/clock.ts";

const A = "aaaaaaaaaaaaaaaa";
const B = "bbbbbbbbbbbbbbbb";
const D = "dddddddddddddddd";
const key = (i: number) => i.toString(16).padStart(16, "0");

describe("LocationDemandBoard (the leader)", () => {
  it("answers each location with the others' demand per band and per flow, never its own", () => {
    const board = new LocationDemandBoard();
    board.post("fra", { bands: [[0, 12]], flows: [[0, A, 2], [0, D, 10]] }, T0);
    board.post("sjc", { bands: [[1, 1], [0, 5]], flows: [[1, B, 1], [0, D, 5]] }, T0);
    const toFra = board.others("fra", T0);
    expect(toFra.bands).toHaveLength(2);
    expect(toFra.bands).toEqual(expect.arrayContaining([[0, 5], [1, 1]]));
    expect(toFra.flows).toHaveLength(2);
    expect(toFra.flows).toEqual(expect.arrayContaining([[1, B, 1], [0, D, 5]]));
    const toSjc = board.others("sjc", T0);
    expect(toSjc.bands).toEqual([[0, 12]]);
    expect(toSjc.flows).toEqual([[0, D, 10], [0, A, 2]]);
    // A location the board has not heard from gets everyone's.
    expect(board.others("nrt", T0).bands).toEqual(expect.arrayContaining([[0, 17], [1, 1]]));
    expect(LocationDemand.safeParse(board.others("nrt", T0)).success).toBe(true);
  });

  it("replaces a location's post, forgets an empty one and a stale one", () => {
    const board = new LocationDemandBoard();
    board.post("fra", { bands: [[0, 12]], flows: [[0, D, 12]] }, T0);
    board.post("fra", { bands: [[0, 3]], flows: [[0, D, 3]] }, T0 + 1_000);
    expect(board.others("sjc", T0 + 1_000)).toEqual({ bands: [[0, 3]], flows: [[0, D, 3]] });
    board.post("fra", { bands: [], flows: [] }, T0 + 1_100);
    expect(board.others("sjc", T0 + 1_100)).toEqual({ bands: [], flows: [] });
    board.post("fra", { bands: [[0, 3]], flows: [[0, D, 3]] }, T0 + 2_000);
    expect(board.size(T0 + 2_000 + LOCATION_DEMAND_TTL_MS)).toBe(1);
    expect(board.size(T0 + 2_001 + LOCATION_DEMAND_TTL_MS)).toBe(0);
    expect(board.others("sjc", T0 + 2_001 + LOCATION_DEMAND_TTL_MS).bands).toEqual([]);
  });

  it("names at most MAX_DEMAND_FLOWS flows and sums the rest of each band, so each band's flows still sum to its demand", () => {
    const board = new LocationDemandBoard();
    for (let l = 0; l < 10; l++) {
      const flows: [number, string, number][] = Array.from({ length: 40 }, (_, i) => [0, key(l * 40 + i + 1), 1 + (i % 3)]);
      board.post(`loc${l}`, { bands: [[0, flows.reduce((n, f) => n + f[2], 0)]], flows }, T0);
    }
    const out = board.others("elsewhere", T0);
    expect(out.flows.filter(([, f]) => f !== REST_OF_FLOWS)).toHaveLength(MAX_DEMAND_FLOWS);
    expect(out.flows.reduce((n, f) => n + f[2], 0)).toBe(out.bands[0]![1]);
    // The named ones are the largest.
    expect(Math.min(...out.flows.filter(([, f]) => f !== REST_OF_FLOWS).map((f) => f[2]))).toBe(3);
    expect(LocationDemand.safeParse(out).success).toBe(true);
  });
});

describe("AdmissionShares across locations (a relay)", () => {
  it("sums its isolates' posts into its location's demand, the largest flows named", () => {
    const s = new AdmissionShares("eeeeeeeeeeeeeeee");
    s.post(1, [[0, 6]], T0, [[0, A, 1], [0, D, 5]]);
    s.post(2, [[0, 7]], T0, [[0, D, 7]]);
    s.post(3, [[1, 2]], T0); // an isolate that sent no flows: its band's demand goes under the relay's own key
    const d = s.locationDemand(T0);
    expect(d.bands).toEqual(expect.arrayContaining([[0, 13], [1, 2]]));
    expect(d.flows).toEqual(expect.arrayContaining([[0, D, 12], [0, A, 1], [1, "eeeeeeeeeeeeeeee", 2]]));
    expect(LocationDemand.safeParse(d).success).toBe(true);
  });

  it("shares the deployment's slots with the other locations: two like locations get half each", () => {
    // Each location: 2 isolates, flows a (2 clients) and d (10 clients); the deployment has 8 slots.
    const board = new LocationDemandBoard();
    const relays = ["fra", "sjc"].map(() => new AdmissionShares());
    for (const s of relays) {
      s.post(1, [[0, 6]], T0, [[0, A, 1], [0, D, 5]]);
      s.post(2, [[0, 6]], T0, [[0, A, 1], [0, D, 5]]);
    }
    // Alone, each relay gives its isolates all 8 slots: 16 in all.
    const alone = relays.map((s) => [1, 2].reduce((n, i) => n + s.allot(i, 8, T0)!.max, 0));
    expect(alone).toEqual([8, 8]);
    // One refresh each: post, hear the other.
    ["fra", "sjc"].forEach((loc, k) => board.post(loc, relays[k]!.locationDemand(T0), T0));
    ["fra", "sjc"].forEach((loc, k) => relays[k]!.elsewhere(board.others(loc, T0), T0));
    const agreed = relays.map((s) => [1, 2].map((i) => s.allot(i, 8, T0)!));
    // Level over the deployment: a's 4 fit (2 per location), d gets 8 − 4 = 4, 2 per location, 1 per isolate.
    for (const loc of agreed) for (const a of loc) expect(a.flowCaps).toEqual({ [D]: 1 });
    expect(agreed.flat().reduce((n, a) => n + a.max, 0)).toBe(8);
  });

  it("gives a location the slots another leaves, and forgets the others' demand when no fresh answer comes", () => {
    const board = new LocationDemandBoard();
    const fra = new AdmissionShares();
    const sjc = new AdmissionShares();
    fra.post(1, [[0, 20]], T0, [[0, D, 20]]);
    sjc.post(1, [[0, 2]], T0, [[0, B, 2]]);
    board.post("fra", fra.locationDemand(T0), T0);
    board.post("sjc", sjc.locationDemand(T0), T0);
    fra.elsewhere(board.others("fra", T0), T0);
    sjc.elsewhere(board.others("sjc", T0), T0);
    // sjc's b asks 2 of 8: it keeps them; fra's d gets the other 6.
    expect(fra.allot(1, 8, T0)).toMatchObject({ max: 6, flowCaps: { [D]: 6 } });
    expect(sjc.allot(1, 8, T0)).toMatchObject({ max: 2, flowCaps: {} });
    // No answer for ELSEWHERE_TTL_MS: fra goes back to sharing the slots among its own
    // (once b's peak, kept for headroom, has aged out too).
    const later = T0 + Math.max(ELSEWHERE_TTL_MS + 1, 2 * HEADROOM_WINDOW_MS + 1);
    fra.post(1, [[0, 20]], later, [[0, D, 20]]);
    expect(fra.allot(1, 8, later)).toMatchObject({ max: 8 });
  });

  it("serves the higher band first across locations", () => {
    const board = new LocationDemandBoard();
    const fra = new AdmissionShares();
    const sjc = new AdmissionShares();
    fra.post(1, [[0, 30]], T0, [[0, D, 30]]); // a batch flood in fra
    sjc.post(1, [[1, 3]], T0, [[1, A, 3]]); // interactive traffic in sjc
    board.post("fra", fra.locationDemand(T0), T0);
    board.post("sjc", sjc.locationDemand(T0), T0);
    fra.elsewhere(board.others("fra", T0), T0);
    expect(fra.allot(1, 8, T0)).toMatchObject({ max: 5, openFrom: 1 });
  });
});
