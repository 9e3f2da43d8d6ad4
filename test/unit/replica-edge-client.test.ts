/**
 * The replica's control-plane messages for multiplexing: `max_models` on register,
 * `models` and `loading` on every report, all valid under the protocol's schemas;
 * the `node` field; and the report cadence of a busy replica on a fake clock.
 */
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it, vi } from "vitest";
import { DeregisterMessage, RegisterMessage, ReportMessage } from "../../src/protocol/index.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { EdgeClient, keyRefusedMessage } from "../../src/replica/edge-client.ts";
import { localSecrets } from "../../src/local/stack.ts";
import { NodeReporter } from "../../src/replica/node-reporter.ts";
import { scriptedEdge as scriptedEdgeOn } from "../fixtures/scripted-edge.ts";
import { mkdtempSync, rmSync, statSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  vi.useRealTimers();
  for (const f of cleanup.splice(0)) await f();
});

/** A fake edge that records what replicas send it. */
async function fakeEdge(reportIntervalMs = 60_000) {
  const received: { path: string; body: Record<string, unknown> }[] = [];
  const server: Server = createServer(async (req, res) => {
    let text = "";
    for await (const chunk of req) text += String(chunk);
    received.push({ path: req.url ?? "", body: JSON.parse(text) as Record<string, unknown> });
    res.writeHead(200, { "content-type": "application/json" });
    res.end(JSON.stringify({ ok: true, report_interval_ms: reportIntervalMs }));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, received };
}

function client(edgeUrl: string, admission: AdmissionControl, maxModels?: number, o: { changeReportDelayMs?: number; node?: string } = { changeReportDelayMs: 1 }) {
  const c = new EdgeClient({
    edgeUrl,
    key: "0".repeat(64),
    deployment: "vad",
    replicaId: "vad-1",
    advertiseUrl: "http://127.0.0.1:9",
    admission,
    ...o,
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

describe("EdgeClient and nodes", () => {
  it("names its node in register, report and deregister when it has one", async () => {
    const edge = await fakeEdge();
    const c = client(edge.url, new AdmissionControl(4), undefined, { node: "gpu-7" });
    await c.start();
    await c.deregister();
    const [register, report, deregister] = edge.received;
    expect(register).toMatchObject({ path: "/-/replicas/register", body: { node: "gpu-7" } });
    expect(report).toMatchObject({ path: "/-/replicas/report", body: { node: "gpu-7" } });
    expect(deregister).toMatchObject({ path: "/-/replicas/deregister", body: { node: "gpu-7" } });
    expect(RegisterMessage.safeParse(register!.body).success).toBe(true);
    expect(ReportMessage.safeParse(report!.body).success).toBe(true);
    expect(DeregisterMessage.safeParse(deregister!.body).success).toBe(true);
  });

  it("sends no node field without one", async () => {
    const edge = await fakeEdge();
    const c = client(edge.url, new AdmissionControl(4));
    await c.start();
    await c.deregister();
    for (const m of edge.received) expect(m.body).not.toHaveProperty("node");
  });
});

describe("EdgeClient and where the replica is (issue 57)", () => {
  it("registers its region and coordinates when it has them (the two numbers only), valid under the schema", async () => {
    const edge = await fakeEdge();
    const coordinates = { lat: -33.92, lon: 18.42, alt: 40 };
    const c = new EdgeClient({ edgeUrl: edge.url, key: "0".repeat(64), deployment: "vad", replicaId: "vad-1", advertiseUrl: "http://127.0.0.1:9", admission: new AdmissionControl(4), region: "af-south-1", coordinates });
    cleanup.push(() => c.stop());
    await c.start();
    const register = edge.received.find((m) => m.path === "/-/replicas/register")!.body;
    expect(register).toMatchObject({ region: "af-south-1" });
    expect(register.coordinates).toEqual({ lat: -33.92, lon: 18.42 });
    expect(RegisterMessage.safeParse(register).success).toBe(true);
  });

  it("sends neither without them (older edges refuse the fields)", async () => {
    const edge = await fakeEdge();
    await client(edge.url, new AdmissionControl(4)).start();
    const register = edge.received.find((m) => m.path === "/-/replicas/register")!.body;
    expect(register).not.toHaveProperty("region");
    expect(register).not.toHaveProperty("coordinates");
  });
});

describe("EdgeClient report cadence (fake clock)", () => {
  /**
   * `ms` of fake time in 20 ms steps, the load changing at every step (a request
   * admitted or released, ongoing staying ≥ 1 when `busy`), each step waiting
   * for the report it may have started to be answered.
   */
  async function simulate(c: EdgeClient, admission: AdmissionControl, ms: number, busy: boolean) {
    for (let t = 0; t < ms; t += 20) {
      if (busy) {
        if (admission.ongoing > 1) admission.release();
        else admission.tryAdmit();
      } else {
        // Idle, but changing: a request that comes and goes within the step.
        admission.tryAdmit();
        admission.release();
      }
      await vi.advanceTimersByTimeAsync(20);
      await c.settled();
    }
  }

  it("a busy replica sends about one report a second (changes and heartbeats merged), ~4 while its changes leave it idle", async () => {
    const edge = await fakeEdge(1_000);
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "setInterval", "clearInterval", "Date"] });
    const admission = new AdmissionControl(4);
    const c = client(edge.url, admission, undefined, {});
    await c.start();
    const reports = () => edge.received.filter((m) => m.path === "/-/replicas/report").length;

    // Busy for 10 s: ongoing 1 or 2, changing every 20 ms.
    admission.tryAdmit();
    await c.settled();
    let before = reports();
    await simulate(c, admission, 10_000, true);
    const busy = reports() - before;
    expect(busy).toBeGreaterThanOrEqual(9);
    expect(busy).toBeLessThanOrEqual(11);
    const ts = edge.received.filter((m) => m.path === "/-/replicas/report").slice(-busy).map((m) => m.body.ts as number);
    for (let i = 1; i < ts.length; i++) expect(ts[i]! - ts[i - 1]!).toBeGreaterThanOrEqual(1_000);

    // Idle for 10 s with the same rate of changes: the 250 ms window.
    while (admission.ongoing > 0) admission.release();
    await vi.advanceTimersByTimeAsync(1_000);
    await c.settled();
    before = reports();
    await simulate(c, admission, 10_000, false);
    const idle = reports() - before;
    expect(idle).toBeGreaterThanOrEqual(35);
    expect(idle).toBeLessThanOrEqual(41);

    // Urgent (the drain) goes at once, busy or not.
    admission.tryAdmit();
    before = reports();
    admission.drain();
    await c.settled();
    expect(reports()).toBe(before + 1);
    expect(edge.received.at(-1)!.body).toMatchObject({ state: "draining" });
  });
});

describe("an edge mounted under a prefix", () => {
  it("gets control messages at <prefix>/-/replicas/... (the edge URL's path is kept)", async () => {
    const edge = await fakeEdge();
    const admission = new AdmissionControl(4);
    admission.setModels([], []);
    await client(`${edge.url}/ml/`, admission).start();
    expect(edge.received.map((m) => m.path)).toContain("/ml/-/replicas/register");
  });
});

describe("EdgeClient when the edge refuses its key (issue 52)", () => {
  it("says so once and stops reporting, instead of a failed report every interval", async () => {
    // An edge that took the register, then (its secret changed) refuses every report with 401.
    let reports = 0;
    const server: Server = createServer(async (req, res) => {
      for await (const _ of req);
      if (req.url === "/-/replicas/register") {
        res.writeHead(200, { "content-type": "application/json" });
        return void res.end(JSON.stringify({ ok: true, report_interval_ms: 20 }));
      }
      reports++;
      res.writeHead(401, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code: "unauthorized", message: "unauthorized", type: "authentication_error", details: { reason: "signature does not match" } } }));
    });
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
    const refused: string[] = [];
    const logged: string[] = [];
    const c = new EdgeClient({
      edgeUrl: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
      key: "0".repeat(64),
      deployment: "vad",
      replicaId: "vad-1",
      advertiseUrl: "http://127.0.0.1:9",
      admission: new AdmissionControl(4),
      log: (l) => logged.push(l),
      onKeyRefused: (why) => refused.push(why),
    });
    cleanup.push(() => c.stop());
    await c.start();
    await waitFor(() => refused.length === 1);
    expect(refused[0]).toBe("signature does not match");
    // No report after the refusal, however long it runs on (the interval is 20 ms).
    const after = reports;
    await new Promise((r) => setTimeout(r, 200));
    expect(reports).toBe(after);
    expect(refused).toHaveLength(1);
    expect(logged.filter((l) => l.startsWith("report failed"))).toEqual([]);
    expect(keyRefusedMessage("vad", "signature does not match")).toMatch(/--print-key --deployment vad/);
  });
});

describe("the local stack's secrets (issue 52)", () => {
  it("are kept with its state across restarts, owner-only, and new only when rotated", () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-secrets-"));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const first = localSecrets(join(dir, "local"));
    expect(first.replicaSecret).toMatch(/^[0-9a-f]{32}$/);
    expect(localSecrets(join(dir, "local"))).toEqual(first);
    expect(statSync(join(dir, "local/secrets.json")).mode & 0o777).toBe(0o600);
    const rotated = localSecrets(join(dir, "local"), true);
    expect(rotated.replicaSecret).not.toBe(first.replicaSecret);
    expect(localSecrets(join(dir, "local"))).toEqual(rotated);
    // A damaged file is replaced, not trusted.
    writeFileSync(join(dir, "local/secrets.json"), '{"replicaSecret":"x"}');
    expect(localSecrets(join(dir, "local")).replicaSecret).toMatch(/^[0-9a-f]{32}$/);
  });
});

/** The scripted edge (test/fixtures/scripted-edge.ts), closed after the test. */
const scriptedEdge = (answer?: Parameters<typeof scriptedEdgeOn>[1]) => scriptedEdgeOn((close) => cleanup.push(close), answer);

function scriptedClient(edgeUrl: string, o: Partial<ConstructorParameters<typeof EdgeClient>[0]> = {}) {
  const logs: string[] = [];
  const admission = new AdmissionControl(4);
  const c = new EdgeClient({ edgeUrl, key: "0".repeat(64), deployment: "vad", replicaId: "vad-1", advertiseUrl: "http://127.0.0.1:9", admission, log: (m) => logs.push(m), ...o } as ConstructorParameters<typeof EdgeClient>[0]);
  cleanup.push(() => c.stop());
  return { c, logs, admission };
}

describe("EdgeClient: registering", () => {
  it("retries a register the edge does not take, waiting 100 ms, then 200 ms, and reports once registered", async () => {
    let refusals = 2;
    const edge = await scriptedEdge((path) => (path === "register" && refusals-- > 0 ? [503, { error: { code: "unavailable" } }] : undefined));
    const { c, logs } = scriptedClient(edge.url);
    expect(c.registered).toBe(false);
    await c.start();
    expect(c.registered).toBe(true);
    expect(edge.paths()).toEqual(["register", "register", "register", "report"]);
    expect(logs).toHaveLength(2);
    expect(logs[0]).toMatch(/^register failed \(Error: edge answered 503: .*unavailable.*\); retrying in 100 ms$/);
    expect(logs[1]).toMatch(/; retrying in 200 ms$/);
  });

  it("stopped while retrying: start returns and nothing more is sent", async () => {
    const edge = await scriptedEdge(() => [503, {}]);
    const { c, logs } = scriptedClient(edge.url);
    const started = c.start();
    await vi.waitFor(() => expect(logs).toHaveLength(1), { timeout: 30_000 });
    c.stop();
    await started;
    const sent = edge.received.length;
    expect(c.registered).toBe(false);
    await c.report();
    expect(edge.received).toHaveLength(sent);
  });

  it("a register refused for its key is not retried: onKeyRefused hears why, once", async () => {
    const bodies = [
      [{ error: { code: "unauthorized", message: "bad signature", details: { reason: "signature does not match" } } }, "signature does not match"],
      [{ error: { code: "unauthorized", message: "bad signature" } }, "bad signature"],
      ["not json at all", "not json at all"],
    ] as const;
    for (const [body, why] of bodies) {
      const edge = await scriptedEdge(() => [401, body]);
      const refused: string[] = [];
      const { c, logs } = scriptedClient(edge.url, { onKeyRefused: (w) => refused.push(w) });
      await c.start();
      expect(refused).toEqual([why]);
      expect(edge.paths()).toEqual(["register"]);
      expect(logs).toEqual([]);
      expect(c.registered).toBe(false);
    }
  });

  it("without onKeyRefused, a 401 is retried like any failure", async () => {
    let refusals = 1;
    const edge = await scriptedEdge((path) => (path === "register" && refusals-- > 0 ? [401, {}] : undefined));
    const { c, logs } = scriptedClient(edge.url);
    await c.start();
    expect(edge.paths()).toEqual(["register", "register", "report"]);
    expect(logs[0]).toMatch(/^register failed \(Error: edge answered 401/);
  });

  it("a report the edge answers 409 (it forgot the replica) registers again, then reports", async () => {
    let forgot = 1;
    const edge = await scriptedEdge((path) => (path === "report" && edge.paths().length > 2 && forgot-- > 0 ? [409, { error: { code: "unknown_replica" } }] : undefined));
    const { c } = scriptedClient(edge.url);
    await c.start();
    await c.report();
    expect(edge.paths()).toEqual(["register", "report", "report", "register", "report"]);
  });

  it("refuses a node that is not its node reporter's", () => {
    const reporter = new NodeReporter({ edgeUrl: "http://127.0.0.1:9", key: "0".repeat(64), deployment: "vad", node: "gpu-a" });
    expect(() => scriptedClient("http://127.0.0.1:9", { nodeReporter: reporter, node: "gpu-b" })).toThrow('node "gpu-b" is not the node reporter\'s ("gpu-a")');
    expect(() => scriptedClient("http://127.0.0.1:9", { nodeReporter: reporter, node: "gpu-a" })).not.toThrow();
  });
});

describe("EdgeClient: a new engine key (rotation)", () => {
  it("registers again with it through the report queue; the same key again sends nothing; a key set before registering goes with the first register", async () => {
    const edge = await scriptedEdge();
    const { c } = scriptedClient(edge.url);
    await c.setEngineKey("k0"); // not registered yet: nothing sent
    expect(edge.received).toEqual([]);
    await c.start();
    expect(edge.received[0]!.body.engine_key).toBe("k0");
    await c.setEngineKey("k1");
    expect(edge.paths()).toEqual(["register", "report", "register", "report"]);
    expect(edge.received[2]!.body.engine_key).toBe("k1");
    await c.setEngineKey("k1");
    expect(edge.received).toHaveLength(4);
    await c.setEngineKey(undefined);
    expect(edge.paths().slice(4)).toEqual(["register", "report"]);
    expect(edge.received[4]!.body).not.toHaveProperty("engine_key");
    c.stop();
    await c.setEngineKey("k2");
    expect(edge.received).toHaveLength(6);
  });

  it("a register with the new key that fails goes again with the next report", async () => {
    let fail = false;
    const edge = await scriptedEdge((path) => (path === "register" && fail ? ((fail = false), [503, {}]) : undefined));
    const { c, logs } = scriptedClient(edge.url);
    await c.start();
    fail = true;
    await c.setEngineKey("k1");
    expect(logs).toEqual([expect.stringMatching(/^register with the new engine key failed: Error: edge answered 503/)]);
    await c.report();
    expect(edge.paths()).toEqual(["register", "report", "register", "register", "report"]);
    expect(edge.received[3]!.body.engine_key).toBe("k1");
    await c.report();
    expect(edge.paths().at(-1)).toBe("report");
  });

  it("with a node reporter: registers again, then the node reports at once", async () => {
    const edge = await scriptedEdge();
    const reporter = new NodeReporter({ edgeUrl: edge.url, key: "0".repeat(64), deployment: "vad", node: "gpu-a" });
    cleanup.push(() => reporter.stop());
    const { c } = scriptedClient(edge.url, { nodeReporter: reporter });
    await c.start();
    await reporter.settled();
    const before = edge.received.length;
    await c.setEngineKey("k1");
    expect(edge.paths().slice(before)).toEqual(["register", "report-node"]);
    expect(edge.received[before]!.body).toMatchObject({ engine_key: "k1", node: "gpu-a" });
  });
});

describe("EdgeClient: what the edge answers to reports", () => {
  const wire = (bits: string) => ({ v: 1 as const, k: 7, n: 1, block: 16, bits });
  const reports = (edge: { received: { path: string; body: Record<string, unknown> }[] }) => edge.received.filter((m) => m.path === "report").map((m) => m.body);

  it("a summary counts as held only when the report's outcome is ok; stale_seq sends it again", async () => {
    let outcome = "stale_seq";
    const edge = await scriptedEdge((path) => (path === "report" ? [200, { ok: true, outcome }] : undefined));
    const { c } = scriptedClient(edge.url, { cacheSummary: () => wire("AAAA") });
    await c.start();
    await c.report();
    outcome = "ok";
    await c.report();
    await c.report();
    expect(reports(edge).map((r) => (r.prefix_cache as { bits?: string } | undefined)?.bits ?? "-")).toEqual(["AAAA", "AAAA", "AAAA", "-"]);
  });

  it("an older edge that refuses summaries: said once, the same report again without one, and none after", async () => {
    const edge = await scriptedEdge((path, body) => (path === "report" && "prefix_cache" in body ? [400, { error: { code: "invalid_message", details: [{ keys: ["prefix_cache"] }] } }] : undefined));
    const { c, logs } = scriptedClient(edge.url, { cacheSummary: () => wire("AAAA") });
    await c.start();
    await c.report();
    expect(reports(edge).map((r) => "prefix_cache" in r)).toEqual([true, false, false]);
    expect(logs).toEqual(["the edge does not take prefix-cache summaries (an older edge): reporting without them"]);
  });

  it("a 400 for anything else is a failed report, logged; summaries stay on", async () => {
    // The register's own report is taken; the next is refused.
    const edge = await scriptedEdge((path) => (path === "report" && reports(edge).length > 1 ? [400, { error: { code: "invalid_message", details: [{ keys: ["ts"] }] } }] : undefined));
    // A summary that changes every time: each report carries one.
    let n = 0;
    const { c, logs } = scriptedClient(edge.url, { cacheSummary: () => wire(`A${n++}`) });
    await c.start();
    await c.report();
    await c.report();
    expect(reports(edge).map((r) => "prefix_cache" in r)).toEqual([true, true, true]);
    expect(logs.filter((l) => l.startsWith("report failed: Error: edge answered 400"))).toHaveLength(2);
  });

  it("drain asked in two answers: onDrainRequested once", async () => {
    const edge = await scriptedEdge((path) => (path === "report" ? [200, { ok: true, outcome: "ok", drain: true }] : undefined));
    const drains: number[] = [];
    const { c } = scriptedClient(edge.url, { onDrainRequested: () => drains.push(1) });
    await c.start();
    await c.report();
    await c.report();
    expect(drains).toEqual([1]);
    // Without a callback, a drain answer is harmless.
    const other = scriptedClient(edge.url);
    await other.c.start();
    await other.c.report();
  });

  it("a report refused for its key: onKeyRefused hears why once, and reports stop (asked-for ones too)", async () => {
    const edge = await scriptedEdge((path) => (path === "report" ? [401, { error: { code: "unauthorized", details: { reason: "replayed" } } }] : undefined));
    const refused: string[] = [];
    const { c, logs } = scriptedClient(edge.url, { onKeyRefused: (w) => refused.push(w) });
    await c.start();
    await c.report();
    await c.report();
    expect(refused).toEqual(["replayed"]);
    expect(reports(edge)).toHaveLength(1);
    expect(logs).toEqual([]);
  });

  it("the heartbeat follows the register's report_interval_ms; 0 leaves it as it was (fake clock)", async () => {
    for (const [interval, expected] of [[200, 5], [0, 1]] as const) {
      vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout", "Date"] });
      const edge = await scriptedEdge((path) => (path === "register" ? [200, { ok: true, report_interval_ms: interval }] : undefined));
      const { c } = scriptedClient(edge.url);
      await c.start();
      const before = reports(edge).length;
      for (let t = 0; t < 1_000; t += 50) {
        await vi.advanceTimersByTimeAsync(50);
        await c.settled();
      }
      expect(reports(edge).length - before, `report_interval_ms ${interval}`).toBe(expected);
      c.stop();
      vi.useRealTimers();
    }
  });
});
