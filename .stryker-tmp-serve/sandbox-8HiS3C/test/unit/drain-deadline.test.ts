/**
 * Drain deadlines (docs/migration.md, "Drain deadlines"; docs/protocol.md): a replica or
 * agent draining with a deadline reports it (drain_deadline_ms, from the report), the
 * routing object keeps it on its own clock, snapshots carry it as drainsInMs aged like
 * an expiry, and an isolate's view holds the epoch ms its streams must leave by.
 */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { MAX_DRAIN_DEADLINE_MS, ReportMessage, type Load } from "../../src/protocol/index.ts";
import { reportEntry, type LoadSource } from "../../src/replica/edge-control.ts";
import { Membership } from "../../src/state/membership.ts";
import { agedSnapshot } from "../../src/state/bounded-view.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { registerMessage, reportMessage, T0 } from "../fixtures/control-messages.ts";

const source = (state: Load["state"], deadline?: number): LoadSource => ({
  maxOngoing: 4,
  load: () => ({ seq: 3, ongoing: 1, queued: 0, max: 4, state }),
  models: [],
  loading: [],
  onChange: () => undefined,
  drainDeadline: () => deadline,
});

describe("drain deadlines", () => {
  it("are reported only while draining, as milliseconds from the report, within the protocol's bound", () => {
    const at = Date.now() + 30_000;
    const draining = reportEntry("r1", source("draining", at));
    expect(draining.drain_deadline_ms).toBeGreaterThan(29_000);
    expect(draining.drain_deadline_ms).toBeLessThanOrEqual(30_000);
    expect(reportEntry("r1", source("ready", at))).not.toHaveProperty("drain_deadline_ms");
    expect(reportEntry("r1", source("draining"))).not.toHaveProperty("drain_deadline_ms");
    expect(reportEntry("r1", source("draining", Date.now() - 5_000)).drain_deadline_ms).toBe(0);
    const msg = (ms: number) => ({ ...reportMessage("r1", 1, { state: "draining" }), drain_deadline_ms: ms });
    expect(ReportMessage.safeParse(msg(30_000)).success).toBe(true);
    expect(ReportMessage.safeParse(msg(-1)).success).toBe(false);
    expect(ReportMessage.safeParse(msg(MAX_DRAIN_DEADLINE_MS + 1)).success).toBe(false);
  });

  it("are kept by the routing object, aged in snapshots, and held by an isolate's view as the epoch ms", () => {
    const m = new Membership();
    m.register(registerMessage("r1"), T0);
    m.report({ ...reportMessage("r1", 1, { state: "draining" }), drain_deadline_ms: 10_000 }, T0);
    const snap = m.snapshot("llm", T0 + 1_000);
    expect(snap.replicas[0]!.drainsInMs).toBe(9_000);
    // A relay hands it out 0.5 s later: aged as the expiry is.
    const aged = agedSnapshot(snap, 500);
    expect(aged.replicas[0]!.drainsInMs).toBe(8_500);
    const view = new RoutingView();
    view.applySnapshot(aged, T0 + 1_500);
    expect(view.get("r1")!.drainsAt).toBe(T0 + 10_000);
    // A report without one (back to ready, or an older replica) clears it.
    m.report(reportMessage("r1", 2, { state: "ready" }), T0 + 2_000);
    const after = m.snapshot("llm", T0 + 2_000);
    expect(after.replicas[0]).not.toHaveProperty("drainsInMs");
    view.applySnapshot(after, T0 + 2_000);
    expect(view.get("r1")!.drainsAt).toBeUndefined();
  });
});
