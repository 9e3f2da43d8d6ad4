/**
 * The replica agent against a fake engine (loopback HTTP server serving /health,
 * /v1/models and /metrics in vLLM's and SGLang's exposition format) and a fake
 * edge that records the control messages: metrics → load reports, engine
 * detection, start-up, scrape failures and the drain sequence.
 */
import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { EngineLoadSource, KV_REPORT_STEP, ReplicaAgent, type AgentOptions, type EngineProcess } from "../../src/agent/agent.ts";
import { maxLoraAdapters, type EngineLoad } from "../../src/agent/engine-metrics.ts";
import { RegisterMessage, ReportMessage } from "../../src/protocol/index.ts";

const fixture = (name: string): string => readFileSync(new URL(`../fixtures/engine-metrics/${name}`, import.meta.url), "utf8");
const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
const BASE = "meta-llama/Llama-3.1-8B-Instruct";

const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

async function listen(server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  server.closeIdleConnections?.();
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** vLLM-style metrics text with the given figures. */
function vllmText(running: number, waiting: number, kv?: number, lora?: { running: string; waiting: string; max: number }): string {
  const lines = [
    "# HELP vllm:num_requests_running Number of requests in model execution batches.",
    "# TYPE vllm:num_requests_running gauge",
    `vllm:num_requests_running{engine="0",model_name="${BASE}"} ${running}`,
    "# TYPE vllm:num_requests_waiting gauge",
    `vllm:num_requests_waiting{engine="0",model_name="${BASE}"} ${waiting}`,
  ];
  if (kv !== undefined) lines.push("# TYPE vllm:kv_cache_usage_perc gauge", `vllm:kv_cache_usage_perc{engine="0",model_name="${BASE}"} ${kv}`);
  if (lora) {
    lines.push(
      "# TYPE vllm:lora_requests_info gauge",
      `vllm:lora_requests_info{max_lora="${lora.max}",running_lora_adapters="${lora.running}",waiting_lora_adapters="${lora.waiting}"} 1.7e+09`,
    );
  }
  return lines.join("\n") + "\n";
}

/** A fake OpenAI-compatible engine: what it answers is changed by the test. */
async function fakeEngine(metrics: string) {
  const state = {
    metrics,
    metricsStatus: 200,
    health: 200 as number | "none",
    models: { object: "list", data: [{ id: BASE, object: "model" }, { id: "sql-lora", object: "model", parent: BASE }] } as unknown,
    scrapes: 0,
    /** When each failed scrape was answered (Date.now()). */
    failedAt: [] as number[],
  };
  const server = createServer((req, res) => {
    req.resume();
    const json = (status: number, body: unknown) => {
      res.writeHead(status, { "content-type": "application/json" });
      res.end(JSON.stringify(body));
    };
    if (req.url === "/health") {
      if (state.health === "none") return json(404, { detail: "Not Found" });
      res.writeHead(state.health);
      return res.end();
    }
    if (req.url === "/v1/models") return json(200, state.models);
    if (req.url === "/metrics") {
      state.scrapes++;
      if (state.metricsStatus !== 200) state.failedAt.push(Date.now());
      res.writeHead(state.metricsStatus, { "content-type": "text/plain; version=0.0.4" });
      return res.end(state.metrics);
    }
    json(404, { detail: "Not Found" });
  });
  return { url: await listen(server), state };
}

interface Received {
  path: string;
  body: Record<string, unknown>;
  at: number;
}

/** A fake edge: records control messages; `drain` makes report answers ask for a drain. */
async function fakeEdge() {
  const received: Received[] = [];
  const state = { drain: false };
  const server = createServer(async (req, res) => {
    let text = "";
    for await (const chunk of req) text += String(chunk);
    received.push({ path: req.url ?? "", body: JSON.parse(text) as Record<string, unknown>, at: Date.now() });
    res.writeHead(200, { "content-type": "application/json" });
    const drain = state.drain && req.url === "/-/replicas/report";
    res.end(JSON.stringify({ ok: true, report_interval_ms: 60_000, ...(drain && { drain: true }) }));
  });
  const url = await listen(server);
  return {
    url,
    state,
    received,
    reports: () => received.filter((m) => m.path === "/-/replicas/report").map((m) => m.body),
    register: () => received.find((m) => m.path === "/-/replicas/register"),
    deregister: () => received.find((m) => m.path === "/-/replicas/deregister"),
  };
}

/** An engine process the test controls: records when it was told to stop. */
function fakeProcess(o: { ignoreTerm?: boolean } = {}) {
  let exit!: (how: string) => void;
  const exited = new Promise<string>((r) => (exit = r));
  const p = {
    terminatedAt: 0,
    killedAt: 0,
    exit,
    exited,
    terminate() {
      p.terminatedAt = Date.now();
      if (!o.ignoreTerm) setTimeout(() => exit("signal SIGTERM"), 5);
    },
    kill() {
      p.killedAt = Date.now();
      setTimeout(() => exit("signal SIGKILL"), 5);
    },
  };
  return p satisfies EngineProcess;
}

function startAgent(edgeUrl: string, engineUrl: string, o: Partial<AgentOptions> = {}) {
  const logs: string[] = [];
  const agent = new ReplicaAgent({
    deployment: "llm",
    edgeUrl,
    key: "0".repeat(64),
    replicaId: "llm-agent-1",
    engineUrl,
    maxOngoing: 64,
    scrapeIntervalMs: 10,
    changeReportDelayMs: 5,
    unhealthyAfterMs: 200,
    drainGraceMs: 0,
    // Short, so a test's cleanup does not wait long on a busy fake engine.
    drainTimeoutMs: 500,
    engineStartTimeoutMs: 5_000,
    engineStopTimeoutMs: 1_000,
    log: (m) => logs.push(m),
    ...o,
  });
  let code: number | undefined;
  const done = agent.run().then((c) => (code = c));
  cleanup.push(async () => {
    if (code === undefined) {
      void agent.shutdown("test cleanup");
      await done;
    }
  });
  return { agent, logs, done, code: () => code };
}

async function until(cond: () => boolean, what: string, timeoutMs = 20_000): Promise<void> {
  const end = Date.now() + timeoutMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await sleep(5);
  }
}

describe("load reports from engine metrics", () => {
  it("vLLM: registers the engine's URL with max_models (base + max_lora); reports running, waiting, KV usage, base models and LoRA adapters", async () => {
    const engine = await fakeEngine(fixture("vllm.txt"));
    const edge = await fakeEdge();
    const { agent } = startAgent(edge.url, engine.url);
    await until(() => edge.reports().length > 0, "the first report");
    const register = edge.register()!.body;
    expect(register).toEqual({ protocol: 1, deployment: "llm", replica_id: "llm-agent-1", url: engine.url, max_ongoing_requests: 64, max_models: 5 });
    expect(RegisterMessage.safeParse(register).success).toBe(true);
    const report = edge.reports()[0]!;
    expect(report).toMatchObject({ state: "ready", ongoing: 8, queued: 3, kv_cache_usage: 0.4213, models: [BASE, "sql-lora", "summarise-lora"], loading: [] });
    expect(ReportMessage.safeParse(report).success).toBe(true);
    expect(agent.engine).toBe("vllm");
    await until(() => agent.phase === "serving", "the serving phase");
  });

  it("SGLang: reports running and queued requests and token usage; no max_models without LoRA info", async () => {
    const engine = await fakeEngine(fixture("sglang.txt"));
    const edge = await fakeEdge();
    const { agent } = startAgent(edge.url, engine.url, { models: ["llama-8b"], advertiseUrl: "http://10.0.0.7:30000" });
    await until(() => edge.reports().length > 0, "the first report");
    const register = edge.register()!.body;
    expect(register).toEqual({ protocol: 1, deployment: "llm", replica_id: "llm-agent-1", url: "http://10.0.0.7:30000", max_ongoing_requests: 64 });
    const report = edge.reports()[0]!;
    expect(report).toMatchObject({ state: "ready", ongoing: 20, queued: 6, kv_cache_usage: 0.31, models: ["llama-8b"] });
    expect(ReportMessage.safeParse(report).success).toBe(true);
    expect(agent.engine).toBe("sglang");
  });

  it("legacy vLLM: KV usage from vllm:gpu_cache_usage_perc when kv_cache_usage_perc is absent", async () => {
    const engine = await fakeEngine(fixture("vllm-legacy.txt"));
    const edge = await fakeEdge();
    startAgent(edge.url, engine.url);
    await until(() => edge.reports().length > 0, "the first report");
    expect(edge.reports()[0]).toMatchObject({ ongoing: 7, queued: 4, kv_cache_usage: 0.625, models: [BASE] });
    expect(edge.register()!.body).not.toHaveProperty("max_models");
  });

  it("reports a load change within a scrape and a coalescing window, with a higher seq", async () => {
    const engine = await fakeEngine(vllmText(0, 0, 0.1));
    const edge = await fakeEdge();
    startAgent(edge.url, engine.url, { scrapeIntervalMs: 100, changeReportDelayMs: 50 });
    await until(() => edge.reports().length > 0, "the first report");
    const first = edge.reports()[0]!;
    expect(first).toMatchObject({ ongoing: 0, queued: 0, kv_cache_usage: 0.1 });
    engine.state.metrics = vllmText(5, 2, 0.6);
    // The edge's heartbeat is 60 s (fakeEdge): a report of the change now is a change report, not a heartbeat.
    await until(() => edge.reports().some((r) => r.ongoing === 5), "a report of the change");
    const seen = edge.received.find((m) => m.path === "/-/replicas/report" && m.body.ongoing === 5)!;
    expect(seen.body).toMatchObject({ queued: 2, kv_cache_usage: 0.6 });
    expect(seen.body.seq as number).toBeGreaterThan(first.seq as number);
  });

  it("does not report KV-cache moves below the step on their own, but reports adapter changes at once", async () => {
    const engine = await fakeEngine(vllmText(1, 0, 0.4));
    const edge = await fakeEdge();
    startAgent(edge.url, engine.url);
    await until(() => edge.reports().length > 0, "the first report");
    engine.state.metrics = vllmText(1, 0, 0.4 + KV_REPORT_STEP / 2);
    await sleep(150);
    expect(edge.reports()).toHaveLength(1);
    engine.state.metrics = vllmText(1, 0, 0.4 + KV_REPORT_STEP / 2, { running: "sql-lora", waiting: "new-lora", max: 2 });
    await until(() => edge.reports().length > 1, "a report of the adapters");
    // The KV value is the latest one, carried by the report the adapters triggered.
    expect(edge.reports()[1]).toMatchObject({ models: [BASE, "new-lora", "sql-lora"], kv_cache_usage: 0.4 + KV_REPORT_STEP / 2 });
  });
});

describe("engine detection", () => {
  it("refuses metrics of another engine than --engine: never registers, exits 1 at the start timeout", async () => {
    const engine = await fakeEngine(fixture("sglang.txt"));
    const edge = await fakeEdge();
    const { done, logs } = startAgent(edge.url, engine.url, { engine: "vllm", engineStartTimeoutMs: 300 });
    expect(await done).toBe(1);
    expect(edge.received).toEqual([]);
    expect(logs.join("\n")).toMatch(/expected vllm metrics, found sglang metrics/);
  });

  it("takes the engine named by --engine when its metrics match", async () => {
    const engine = await fakeEngine(fixture("sglang.txt"));
    const edge = await fakeEdge();
    const { agent } = startAgent(edge.url, engine.url, { engine: "sglang" });
    await until(() => edge.reports().length > 0, "the first report");
    expect(agent.engine).toBe("sglang");
  });

  it("auto: refuses metrics with neither engine's names", async () => {
    const engine = await fakeEngine("# TYPE up gauge\nup 1\n");
    const edge = await fakeEdge();
    const { done, logs } = startAgent(edge.url, engine.url, { engineStartTimeoutMs: 200 });
    expect(await done).toBe(1);
    expect(edge.received).toEqual([]);
    expect(logs.join("\n")).toMatch(/unrecognised metrics/);
  });
});

describe("engine start-up", () => {
  it("registers only once GET /health answers 200", async () => {
    const engine = await fakeEngine(vllmText(0, 0));
    engine.state.health = 503;
    const edge = await fakeEdge();
    startAgent(edge.url, engine.url);
    await sleep(400);
    expect(edge.received).toEqual([]);
    const healthyAt = Date.now();
    engine.state.health = 200;
    await until(() => edge.register() !== undefined, "the register");
    expect(edge.register()!.at).toBeGreaterThanOrEqual(healthyAt);
  });

  it("declares the engine's region and coordinates at register when given, and nothing of them otherwise (issue 57)", async () => {
    const engine = await fakeEngine(vllmText(0, 0));
    const placed = await fakeEdge();
    startAgent(placed.url, engine.url, { region: "eu-central", coordinates: { lat: 50.11, lon: 8.68 } });
    await until(() => placed.register() !== undefined, "the register");
    expect(placed.register()!.body).toMatchObject({ region: "eu-central", coordinates: { lat: 50.11, lon: 8.68 } });
    expect(RegisterMessage.safeParse(placed.register()!.body).success).toBe(true);
    const plain = await fakeEdge();
    startAgent(plain.url, engine.url, { replicaId: "llm-agent-2" });
    await until(() => plain.register() !== undefined, "the register");
    expect(plain.register()!.body).not.toHaveProperty("region");
    expect(plain.register()!.body).not.toHaveProperty("coordinates");
  });

  it("falls back to GET /v1/models when the engine has no /health", async () => {
    const engine = await fakeEngine(vllmText(0, 0));
    engine.state.health = "none";
    const edge = await fakeEdge();
    startAgent(edge.url, engine.url);
    await until(() => edge.register() !== undefined, "the register");
  });

  it("exits 1 without registering when the engine is not up in time", async () => {
    const edge = await fakeEdge();
    const { done, logs } = startAgent(edge.url, "http://127.0.0.1:9", { engineStartTimeoutMs: 300 });
    expect(await done).toBe(1);
    expect(edge.received).toEqual([]);
    expect(logs.join("\n")).toMatch(/was not up within 300 ms/);
  });

  it("a signal while waiting for the engine: no register, the engine process stopped, exit 0", async () => {
    const engine = await fakeEngine(vllmText(0, 0));
    engine.state.health = 503;
    const edge = await fakeEdge();
    const proc = fakeProcess();
    const { agent, done } = startAgent(edge.url, engine.url, { engineProcess: proc });
    await sleep(100);
    void agent.shutdown("SIGTERM");
    expect(await done).toBe(0);
    expect(edge.received).toEqual([]);
    expect(proc.terminatedAt).toBeGreaterThan(0);
  });
});

describe("scrape failures", () => {
  it("reports draining after ~1 window of failed scrapes, and ready again when metrics are back", async () => {
    const engine = await fakeEngine(vllmText(2, 0));
    const edge = await fakeEdge();
    const { logs } = startAgent(edge.url, engine.url);
    await until(() => edge.reports().length > 0, "the first report");
    engine.state.metricsStatus = 500;
    await until(() => edge.reports().some((r) => r.state === "draining"), "a draining report");
    const draining = edge.received.find((m) => m.body.state === "draining")!;
    // Not at the first failed scrape: only once the window (200 ms here) of failures has
    // passed, so more than one failed scrape came before it (counted at the engine: order,
    // not a wall-clock gap, which a busy machine shrank to 178 ms from a start taken early).
    expect(engine.state.failedAt.filter((t) => t <= draining.at).length).toBeGreaterThanOrEqual(2);
    expect(edge.deregister()).toBeUndefined();
    engine.state.metricsStatus = 200;
    await until(() => edge.reports().at(-1)!.state === "ready", "a ready report");
    expect(logs.join("\n")).toMatch(/GET \/metrics answered 500/);
  });

  it("treats unusable metrics text like a failed scrape", async () => {
    const engine = await fakeEngine(vllmText(2, 0));
    const edge = await fakeEdge();
    startAgent(edge.url, engine.url);
    await until(() => edge.reports().length > 0, "the first report");
    engine.state.metrics = "<html>502 Bad Gateway</html>\n";
    await until(() => edge.reports().some((r) => r.state === "draining"), "a draining report");
  });

  it("rides out a blip shorter than the window", async () => {
    const engine = await fakeEngine(vllmText(2, 0));
    const edge = await fakeEdge();
    // A long window, and a blip of a few failed scrapes counted at the engine (events, not sleeps).
    startAgent(edge.url, engine.url, { unhealthyAfterMs: 5_000 });
    await until(() => edge.reports().length > 0, "the first report");
    const before = engine.state.scrapes;
    engine.state.metricsStatus = 503;
    await until(() => engine.state.scrapes >= before + 3, "three failed scrapes");
    engine.state.metricsStatus = 200;
    const restored = engine.state.scrapes;
    await until(() => engine.state.scrapes >= restored + 10, "ten good scrapes after the blip");
    expect(edge.reports().every((r) => r.state === "ready")).toBe(true);
  });
});

describe("drain", () => {
  it("announces draining at once, waits for running + waiting = 0, deregisters, and only then stops the engine", async () => {
    const engine = await fakeEngine(vllmText(1, 1));
    const edge = await fakeEdge();
    const proc = fakeProcess();
    const { agent, done, logs } = startAgent(edge.url, engine.url, { engineProcess: proc, drainTimeoutMs: 5_000, unhealthyAfterMs: 60_000 });
    await until(() => edge.reports().length > 0, "the first report");
    // Every scrape fails from here until the announcement, so no scrape can be what announces it.
    engine.state.metricsStatus = 500;
    const failing = engine.state.scrapes;
    await until(() => engine.state.scrapes > failing + 1, "a failed scrape");
    void agent.shutdown("SIGTERM");
    await until(() => edge.reports().some((r) => r.state === "draining"), "a draining report");
    // Urgent: the shutdown itself announced it.
    engine.state.metricsStatus = 200;
    // Busy engine: nothing else happens.
    await sleep(300);
    expect(edge.deregister()).toBeUndefined();
    expect(proc.terminatedAt).toBe(0);
    expect(agent.phase).toBe("draining");
    engine.state.metrics = vllmText(0, 1);
    await sleep(100);
    expect(edge.deregister()).toBeUndefined();
    const idleAt = Date.now();
    engine.state.metrics = vllmText(0, 0);
    expect(await done).toBe(0);
    const deregister = edge.deregister()!;
    expect(deregister.at).toBeGreaterThanOrEqual(idleAt);
    expect(deregister.body).toEqual({ protocol: 1, deployment: "llm", replica_id: "llm-agent-1" });
    expect(proc.terminatedAt).toBeGreaterThanOrEqual(deregister.at);
    expect(proc.killedAt).toBe(0);
    // Every report after the announcement says draining.
    const afterAnnounce = edge.reports().slice(edge.reports().findIndex((r) => r.state === "draining"));
    expect(afterAnnounce.every((r) => r.state === "draining")).toBe(true);
    expect(logs.join("\n")).toMatch(/SIGTERM: draining[\s\S]*announced draining[\s\S]*engine idle[\s\S]*deregistered[\s\S]*stopping the engine[\s\S]*engine exited/);
    expect(agent.phase).toBe("done");
  });

  it("keeps an idle engine up for the grace time proxies need to see the drain", async () => {
    const engine = await fakeEngine(vllmText(0, 0));
    const edge = await fakeEdge();
    const { agent, done } = startAgent(edge.url, engine.url, { drainGraceMs: 400 });
    await until(() => edge.reports().length > 0, "the first report");
    const signalledAt = Date.now();
    void agent.shutdown("SIGINT");
    expect(await done).toBe(0);
    expect(edge.deregister()!.at - signalledAt).toBeGreaterThanOrEqual(390);
  });

  it("leaves at the drain timeout when the engine stays busy", async () => {
    const engine = await fakeEngine(vllmText(3, 0));
    const edge = await fakeEdge();
    const proc = fakeProcess();
    const { agent, done, logs } = startAgent(edge.url, engine.url, { engineProcess: proc, drainTimeoutMs: 300 });
    await until(() => edge.reports().length > 0, "the first report");
    const signalledAt = Date.now();
    void agent.shutdown("SIGTERM");
    expect(await done).toBe(0);
    expect(edge.deregister()!.at - signalledAt).toBeGreaterThanOrEqual(290);
    expect(proc.terminatedAt).toBeGreaterThanOrEqual(edge.deregister()!.at);
    expect(logs.join("\n")).toMatch(/drain timeout \(300 ms\) with running 3, waiting 0/);
  });

  it("drains when the edge asks (admin API drain in a report's answer)", async () => {
    const engine = await fakeEngine(vllmText(0, 0));
    const edge = await fakeEdge();
    const proc = fakeProcess();
    const { done, logs } = startAgent(edge.url, engine.url, { engineProcess: proc });
    await until(() => edge.reports().length > 0, "the first report");
    edge.state.drain = true;
    engine.state.metrics = vllmText(1, 0); // a change, so a report goes out and gets the answer
    await until(() => edge.reports().some((r) => r.state === "draining"), "a draining report");
    engine.state.metrics = vllmText(0, 0);
    expect(await done).toBe(0);
    expect(edge.reports().some((r) => r.state === "draining")).toBe(true);
    expect(proc.terminatedAt).toBeGreaterThanOrEqual(edge.deregister()!.at);
    expect(logs.join("\n")).toMatch(/drain requested by the edge/);
  });

  it("the engine process exiting on its own: reports draining, deregisters, exits 1", async () => {
    const engine = await fakeEngine(vllmText(2, 0));
    const edge = await fakeEdge();
    const proc = fakeProcess();
    const { done, logs } = startAgent(edge.url, engine.url, { engineProcess: proc });
    await until(() => edge.reports().length > 0, "the first report");
    proc.exit("code 137");
    expect(await done).toBe(1);
    const draining = edge.received.find((m) => m.body.state === "draining")!;
    expect(draining.at).toBeLessThanOrEqual(edge.deregister()!.at);
    expect(proc.terminatedAt).toBe(0);
    expect(logs.join("\n")).toMatch(/engine process exited on its own \(code 137\)/);
  });

  it("SIGKILLs an engine that does not stop within the stop timeout", async () => {
    const engine = await fakeEngine(vllmText(0, 0));
    const edge = await fakeEdge();
    const proc = fakeProcess({ ignoreTerm: true });
    const { agent, done } = startAgent(edge.url, engine.url, { engineProcess: proc, engineStopTimeoutMs: 200 });
    await until(() => edge.reports().length > 0, "the first report");
    void agent.shutdown("SIGTERM");
    expect(await done).toBe(0);
    expect(proc.killedAt - proc.terminatedAt).toBeGreaterThanOrEqual(190);
  });

  it("a second signal does not start a second drain", async () => {
    const engine = await fakeEngine(vllmText(0, 0));
    const edge = await fakeEdge();
    const { agent, done, logs } = startAgent(edge.url, engine.url);
    await until(() => edge.reports().length > 0, "the first report");
    const first = agent.shutdown("SIGTERM");
    const second = agent.shutdown("SIGINT");
    expect(second).toBe(first);
    expect(await done).toBe(0);
    expect(edge.received.filter((m) => m.path === "/-/replicas/deregister")).toHaveLength(1);
    expect(logs.join("\n")).toMatch(/SIGINT \(already leaving\)/);
  });
});

describe("EngineLoadSource", () => {
  const e = (over: Partial<EngineLoad> = {}): EngineLoad => ({ engine: "vllm", running: 0, waiting: 0, loraAdapters: [], ...over });

  it("maps running → ongoing, waiting → queued, --max-ongoing → max, KV usage → kv", () => {
    const s = new EngineLoadSource(32, 1_000);
    s.update(e({ running: 4, waiting: 9, kvCacheUsage: 0.5 }));
    expect(s.load()).toEqual({ seq: 1_001, ongoing: 4, queued: 9, max: 32, state: "ready", kv: 0.5 });
  });

  it("turns two scrapes' prefill counters into the engine's rate and the wait a new request has behind the queue", () => {
    const s = new EngineLoadSource(8);
    s.update(e({ waiting: 3, prefill: { computedTokens: 10_000, seconds: 2, requests: 10 } }));
    // One scrape is no difference: nothing said yet.
    expect(s.load()).not.toHaveProperty("prefillRate");
    expect(s.load()).not.toHaveProperty("prefillWaitMs");
    s.update(e({ waiting: 3, prefill: { computedTokens: 16_000, seconds: 2.5, requests: 12 } }));
    // 6,000 tokens in 0.5 s of prefill over 2 requests (250 ms each); 3 waiting ahead.
    expect(s.load()).toMatchObject({ prefillRate: 12_000, prefillWaitMs: 750 });
    // An interval with no prefill ended keeps what the last one said; the wait follows the queue.
    s.update(e({ waiting: 1, prefill: { computedTokens: 16_000, seconds: 2.5, requests: 12 } }));
    expect(s.load()).toMatchObject({ prefillRate: 12_000, prefillWaitMs: 250 });
    // A restarted engine's counters start over: that scrape is the new base, not a negative rate.
    s.update(e({ waiting: 1, prefill: { computedTokens: 100, seconds: 0.1, requests: 1 } }));
    expect(s.load()).toMatchObject({ prefillRate: 12_000, prefillWaitMs: 250 });
    s.update(e({ waiting: 2, prefill: { computedTokens: 1_100, seconds: 0.6, requests: 2 } }));
    expect(s.load()).toMatchObject({ prefillRate: 2_000, prefillWaitMs: 1_000 });
  });

  it("notifies load changes as not urgent, state and model changes as urgent, nothing for no change", () => {
    const s = new EngineLoadSource(8);
    const seen: boolean[] = [];
    s.onChange((u) => seen.push(u));
    s.setBaseModels(["base"]);
    s.update(e({ running: 1 }));
    s.update(e({ running: 1 }));
    s.update(e({ running: 1, loraAdapters: ["a"] }));
    s.setUnhealthy(true);
    expect(s.state).toBe("draining");
    s.setUnhealthy(false);
    s.setDraining();
    s.setDraining();
    s.setUnhealthy(false);
    expect(seen).toEqual([false, true, true, true, true]);
    expect(s.state).toBe("draining");
    expect(s.models).toEqual(["base", "a"]);
  });

  it("counts a KV-cache move as a change only from the step on, measured from the last change", () => {
    const s = new EngineLoadSource(8);
    let n = 0;
    s.onChange(() => n++);
    s.update(e({ kvCacheUsage: 0.1 }));
    s.update(e({ kvCacheUsage: 0.12 }));
    s.update(e({ kvCacheUsage: 0.14 }));
    expect(n).toBe(1);
    expect(s.load().kv).toBe(0.14);
    s.update(e({ kvCacheUsage: 0.1 + KV_REPORT_STEP }));
    expect(n).toBe(2);
    s.update(e({}));
    expect(n).toBe(3);
    expect(s.load()).not.toHaveProperty("kv");
  });

  it("leaves out adapter names a report cannot carry, and says so once", () => {
    const logs: string[] = [];
    const s = new EngineLoadSource(8, 0, (m) => logs.push(m));
    s.setBaseModels(["base"]);
    s.update(e({ loraAdapters: ["good-lora", "bad lora", "-x"] }));
    s.update(e({ loraAdapters: ["good-lora", "bad lora", "-x"] }));
    expect(s.models).toEqual(["base", "good-lora"]);
    expect(logs).toHaveLength(2);
    expect(ReportMessage.safeParse({ protocol: 1, deployment: "d", replica_id: "r", seq: 1, ts: 1, state: "ready", ongoing: 0, queued: 0, models: s.models }).success).toBe(true);
  });

  it("starts its seq at the given clock, above an engine's own load-header seqs", () => {
    const s = new EngineLoadSource(8, 1_764_511_200_000);
    expect(s.load().seq).toBe(1_764_511_200_000);
  });
});

describe("maxLoraAdapters", () => {
  it("reads max_lora of the latest lora_requests_info series", () => {
    expect(maxLoraAdapters(fixture("vllm.txt"))).toBe(4);
    expect(maxLoraAdapters(fixture("sglang.txt"))).toBeUndefined();
    expect(maxLoraAdapters(fixture("vllm-legacy.txt"))).toBeUndefined();
    expect(maxLoraAdapters("<html>\n")).toBeUndefined();
  });
});
