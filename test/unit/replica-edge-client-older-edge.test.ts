/**
 * The replica's edge client and an older edge that refuses drain deadlines. "An older
 * edge" is the process's belief once learnt (src/replica/edge-control.ts): this file runs
 * in a module graph of its own (vitest.config.ts, MOCKING_UNIT_FILES), so the other
 * unit files, which share one, keep theirs.
 */
import { afterEach, describe, expect, it } from "vitest";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { EdgeClient } from "../../src/replica/edge-client.ts";
import { EdgeError, refusedReportField, reportEntry } from "../../src/replica/edge-control.ts";
import { scriptedEdge } from "../fixtures/scripted-edge.ts";

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
});

describe("refusedReportField: nothing but the refusal that names the field teaches it", () => {
  // First in this file: the process has learnt nothing yet (the test after this one teaches it).
  it("another error, another status or another field leaves the belief alone: reports still carry the deadline", () => {
    const field = '{"error":{"details":[{"keys":["drain_deadline_ms"]}]}}';
    const source = new AdmissionControl(1);
    source.drain(Date.now() + 60_000);
    expect(reportEntry("r", source)).toHaveProperty("drain_deadline_ms");
    for (const other of [new Error(field), new EdgeError(500, field), new EdgeError(400, '{"error":{"details":[{"keys":["ts"]}]}}')]) expect(refusedReportField(other)).toBeUndefined();
    expect(reportEntry("r", source)).toHaveProperty("drain_deadline_ms");
  });
});

describe("EdgeClient and an older edge", () => {
  it("an edge that refuses drain deadlines gets the report again without one, said once", async () => {
    // An edge from before drain deadlines: a report carrying one is refused, as its schema refuses an unknown key.
    const edge = await scriptedEdge(
      (close) => cleanup.push(close),
      (path, body) =>
        path === "report" && "drain_deadline_ms" in body
          ? [400, { error: { code: "invalid_message", message: "control message does not match its schema", details: [{ code: "unrecognized_keys", keys: ["drain_deadline_ms"], path: [], message: 'Unrecognized key: "drain_deadline_ms"' }] } }]
          : undefined,
    );
    const logs: string[] = [];
    const admission = new AdmissionControl(4);
    const c = new EdgeClient({ edgeUrl: edge.url, key: "0".repeat(64), deployment: "vad", replicaId: "vad-1", advertiseUrl: "http://127.0.0.1:9", admission, log: (m) => logs.push(m) });
    cleanup.push(() => c.stop());
    await c.start();
    admission.drain(Date.now() + 60_000);
    await c.report();
    await c.settled();
    const reports = edge.received.filter((m) => m.path === "report").map((m) => m.body);
    // One report carried the deadline and was refused; the same report went again without it, and so does every later one.
    const refused = reports.findIndex((r) => "drain_deadline_ms" in r);
    expect(refused).toBeGreaterThan(0);
    expect(reports.slice(refused + 1).length).toBeGreaterThanOrEqual(2);
    for (const r of reports.slice(refused + 1)) {
      expect(r).toMatchObject({ state: "draining" });
      expect(r).not.toHaveProperty("drain_deadline_ms");
    }
    expect(logs).toEqual(["the edge does not take drain_deadline_ms (an older edge): reporting without it"]);
    // Learnt once: the same refusal again is not news.
    expect(refusedReportField(new EdgeError(400, '"drain_deadline_ms"'))).toBeUndefined();
  });
});

describe("an older edge that refuses the prefill queue's fields (issue 57)", () => {
  it("learns each field it refuses on its own: the refused one leaves the reports, the others stay", () => {
    const source = new AdmissionControl(2);
    source.setPrefillSource(() => ({ waitMs: 120, rate: 9_000 }));
    expect(reportEntry("r", source)).toMatchObject({ prefill_wait_ms: 120, prefill_rate: 9_000 });
    expect(refusedReportField(new EdgeError(400, '{"error":{"details":[{"keys":["prefill_wait_ms"]}]}}'))).toBe("prefill_wait_ms");
    const entry = reportEntry("r", source);
    expect(entry).not.toHaveProperty("prefill_wait_ms");
    expect(entry).toHaveProperty("prefill_rate", 9_000);
    expect(refusedReportField(new EdgeError(400, '"prefill_rate"'))).toBe("prefill_rate");
    expect(reportEntry("r", source)).not.toHaveProperty("prefill_rate");
  });
});
