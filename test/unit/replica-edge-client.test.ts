/**
 * The replica's control-plane messages for multiplexing: `max_models` on register,
 * `models` and `loading` on every report, all valid under the protocol's schemas.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { RegisterMessage, ReportMessage } from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { EdgeClient } from "../../src/replica/edge-client.ts";

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
});

/** A fake edge that records what replicas send it. */
async function fakeEdge() {
  const received: { path: string; body: Record<string, unknown> }[] = [];
  const server: Server = createServer(async (req, res) => {
    let text = "";
    for await (const chunk of req) text += String(chunk);
    received.push({ path: req.url ?? "", body: JSON.parse(text) as Record<string, unknown> });
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ ok: true, report_interval_ms: 60_000 }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received };
}

function client(edgeUrl: string, admission: AdmissionControl, maxModels?: number) {
  const c = new EdgeClient({
    edgeUrl,
    key: "0".repeat(64),
    deployment: "vad",
    replicaId: "vad-1",
    advertiseUrl: "http://127.0.0.1:9",
    admission,
    changeReportDelayMs: 1,
    ...(maxModels === undefined ? {} : { maxModels }),
  });
  cleanup.push(() => c.stop());
  return c;
}

const waitFor = async (cond: () => boolean) => {
  for (let i = 0; i < 200 && !cond(); i++) await new Promise((r) => setTimeout(r, 5));
  expect(cond()).toBe(true);
};

describe("EdgeClient and multiplexing", () => {
  it("registers with max_models and reports loaded and loading models", async () => {
    const edge = await fakeEdge();
    const admission = new AdmissionControl(4);
    admission.setModels([], []);
    await client(edge.url, admission, 2).start();
    const register = edge.received.find((m) => m.path === "/-/replicas/register")!.body;
    expect(register.max_models).toBe(2);
    expect(RegisterMessage.safeParse(register).success).toBe(true);

    admission.setModels(["silero-vad-v5"], ["silero-vad-v4"]);
    await waitFor(() => edge.received.some((m) => (m.body.loading as string[] | undefined)?.includes("silero-vad-v4")));
    const report = edge.received.filter((m) => m.path === "/-/replicas/report").at(-1)!.body;
    expect(report).toMatchObject({ models: ["silero-vad-v5"], loading: ["silero-vad-v4"] });
    expect(ReportMessage.safeParse(report).success).toBe(true);
  });

  it("leaves max_models out for replicas that do not multiplex, and reports empty lists", async () => {
    const edge = await fakeEdge();
    const admission = new AdmissionControl(4);
    await client(edge.url, admission).start();
    const register = edge.received.find((m) => m.path === "/-/replicas/register")!.body;
    expect(register).not.toHaveProperty("max_models");
    expect(RegisterMessage.safeParse(register).success).toBe(true);
    const report = edge.received.find((m) => m.path === "/-/replicas/report")!.body;
    expect(report).toMatchObject({ models: [], loading: [] });
    expect(ReportMessage.safeParse(report).success).toBe(true);
  });
});
