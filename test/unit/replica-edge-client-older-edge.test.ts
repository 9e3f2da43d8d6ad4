/**
 * The replica's edge client and an older edge that refuses drain deadlines. "An older
 * edge" is the process's belief once learnt (src/replica/edge-control.ts): this file runs
 * in a module graph of its own (vitest.config.ts, MOCKING_UNIT_FILES), so the other
 * unit files, which share one, keep theirs.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { EdgeClient } from "../../src/replica/edge-client.ts";

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
});

/** An edge that refuses a report carrying a drain deadline, as one from before them does, and takes everything else. */
async function olderEdge() {
  const received: { path: string; body: Record<string, unknown> }[] = [];
  const server: Server = createServer(async (req, res) => {
    let text = "";
    for await (const chunk of req) text += String(chunk);
    const path = (req.url ?? "").replace("/-/replicas/", "");
    const body = JSON.parse(text) as Record<string, unknown>;
    received.push({ path, body });
    const refuse = path === "report" && "drain_deadline_ms" in body;
    res.writeHead(refuse ? 400 : 200, { "content-type": "application/json" });
    res.end(
      JSON.stringify(
        refuse
          ? { error: { code: "invalid_message", message: "control message does not match its schema", details: [{ code: "unrecognized_keys", keys: ["drain_deadline_ms"], path: [], message: 'Unrecognized key: "drain_deadline_ms"' }] } }
          : { ok: true, outcome: "ok", report_interval_ms: 60_000 },
      ),
    );
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received };
}

describe("EdgeClient and an older edge", () => {
  it("an edge that refuses drain deadlines gets the report again without one, said once", async () => {
    const edge = await olderEdge();
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
    expect(logs).toEqual(["the edge does not take drain deadlines (an older edge): reporting without them"]);
  });
});
