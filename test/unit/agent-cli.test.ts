/**
 * `replica agent` as a command: flag parsing, and the real process (tsx) owning a
 * child engine (a small Node script speaking vLLM's /metrics) behind a fake edge:
 * SIGTERM drains, deregisters, and only then stops the engine.
 */
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { AGENT_DEFAULTS } from "../../src/agent/agent.ts";
import { parseAgentArgs, UsageError, type AgentArgs, type EngineArgs } from "../../src/agent/cli.ts";
import { spawnEngine } from "../../src/agent/engine-process.ts";
import { waitFor } from "../fixtures/wait.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const KEY = "ab".repeat(32);
const cleanup: (() => void | Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const required = ["--deployment", "llm", "--edge", "http://127.0.0.1:8787", "--engine-url", "http://127.0.0.1:8000"];

function parsed(argv: string[]): AgentArgs {
  const out = parseAgentArgs(argv);
  if (out === "help") throw new Error("unexpected help");
  return out;
}

/** The parse of a one-engine command line. */
function one(argv: string[]): AgentArgs & { engines: [EngineArgs] } {
  const out = parsed(argv);
  expect(out.engines).toHaveLength(1);
  return out as AgentArgs & { engines: [EngineArgs] };
}

describe("parseAgentArgs", () => {
  it("applies the defaults; the engine URL is the advertised one; no engine command", () => {
    const { engines: [{ options }], command } = one(required);
    expect(options).toMatchObject({
      deployment: "llm",
      edgeUrl: "http://127.0.0.1:8787",
      engineUrl: "http://127.0.0.1:8000",
      engine: "auto",
      maxOngoing: 256,
      scrapeIntervalMs: 100,
      changeReportDelayMs: AGENT_DEFAULTS.changeReportDelayMs,
      drainTimeoutMs: 30_000,
      drainGraceMs: AGENT_DEFAULTS.drainGraceMs,
      engineStartTimeoutMs: 600_000,
    });
    expect(options.replicaId).toBe(`llm-agent-${process.pid}`);
    expect(options).not.toHaveProperty("advertiseUrl");
    expect(options).not.toHaveProperty("models");
    expect(command).toEqual([]);
  });

  it("takes every flag, and the engine command after --, flags and all", () => {
    const { engines: [{ options }], command } = one([
      ...required,
      "--engine", "vllm", "--id", "gpu-7", "--advertise-url", "https://gpu-7.example.com", "--max-ongoing", "128",
      "--models", "meta-llama/Llama-3.1-8B-Instruct,qwen", "--scrape-interval-ms", "50", "--report-delay-ms", "20",
      "--drain-timeout-ms", "60000", "--drain-grace-ms", "5000", "--engine-start-timeout-ms", "1000", "--engine-stop-timeout-ms", "2000",
      "--", "vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--enable-lora", "--", "x",
    ]);
    expect(options).toEqual({
      deployment: "llm",
      edgeUrl: "http://127.0.0.1:8787",
      engineUrl: "http://127.0.0.1:8000",
      engine: "vllm",
      replicaId: "gpu-7",
      advertiseUrl: "https://gpu-7.example.com",
      maxOngoing: 128,
      models: ["meta-llama/Llama-3.1-8B-Instruct", "qwen"],
      scrapeIntervalMs: 50,
      changeReportDelayMs: 20,
      drainTimeoutMs: 60_000,
      drainGraceMs: 5_000,
      engineStartTimeoutMs: 1_000,
      engineStopTimeoutMs: 2_000,
    });
    expect(command).toEqual(["vllm", "serve", "meta-llama/Llama-3.1-8B-Instruct", "--enable-lora", "--", "x"]);
  });

  it("declares the engine's continuation forms only when told: none, one, or both", () => {
    expect(one(required).engines[0].options).not.toHaveProperty("continues");
    expect(one([...required, "--engine-continues", "none"]).engines[0].options.continues).toEqual([]);
    expect(one([...required, "--engine-continues", "chat"]).engines[0].options.continues).toEqual(["chat"]);
    expect(one([...required, "--engine-continues", "chat,completion"]).engines[0].options.continues).toEqual(["chat", "completion"]);
  });

  it("answers help", () => {
    expect(parseAgentArgs(["--help"])).toBe("help");
  });

  it("declares where the engine is only when told: --region and --coordinates (issue 57)", () => {
    expect(one(required).engines[0].options).not.toHaveProperty("region");
    expect(one(required).engines[0].options).not.toHaveProperty("coordinates");
    expect(one([...required, "--region", "us-east-1", "--coordinates", "39.04,-77.49"]).engines[0].options).toMatchObject({ region: "us-east-1", coordinates: { lat: 39.04, lon: -77.49 } });
    expect(one([...required, "--coordinates=-33.92,18.42"]).engines[0].options.coordinates).toEqual({ lat: -33.92, lon: 18.42 });
  });

  it("one engine with --node: the node goes with its options (no node batching for one engine)", () => {
    const out = parsed([...required, "--node", "gpu-7", "--id", "gpu-7-a"]);
    expect(out.node).toBe("gpu-7");
    expect(out.engines.map((e) => e.options)).toMatchObject([{ replicaId: "gpu-7-a", node: "gpu-7", engineUrl: "http://127.0.0.1:8000" }]);
  });

  const node = ["--deployment", "llm", "--edge", "http://127.0.0.1:8787", "--node", "gpu-7"];
  const urls = ["--engine-url", "http://127.0.0.1:8000", "--engine-url", "http://127.0.0.1:8001", "--engine-url", "http://127.0.0.1:8002"];

  it("several engines on one node: ids NODE-i by default, shared flags for all, per-engine flags in order", () => {
    const out = parsed([...node, ...urls, "--max-ongoing", "64", "--engine", "vllm"]);
    expect(out.node).toBe("gpu-7");
    expect(out.command).toEqual([]);
    expect(out.engines.map((e) => e.options)).toMatchObject([
      { replicaId: "gpu-7-0", engineUrl: "http://127.0.0.1:8000", node: "gpu-7", maxOngoing: 64, engine: "vllm" },
      { replicaId: "gpu-7-1", engineUrl: "http://127.0.0.1:8001", node: "gpu-7", maxOngoing: 64, engine: "vllm" },
      { replicaId: "gpu-7-2", engineUrl: "http://127.0.0.1:8002", node: "gpu-7", maxOngoing: 64, engine: "vllm" },
    ]);
    for (const e of out.engines) expect(e.options).not.toHaveProperty("advertiseUrl");

    // One agent, one node, one place: its region and coordinates go to every engine.
    const placed = parsed([...node, ...urls, "--region", "fra", "--coordinates", "50.03,8.57"]);
    for (const e of placed.engines) expect(e.options).toMatchObject({ region: "fra", coordinates: { lat: 50.03, lon: 8.57 } });

    const prefixed = parsed([...node, ...urls, "--id", "llm-g7"]);
    expect(prefixed.engines.map((e) => e.options.replicaId)).toEqual(["llm-g7-0", "llm-g7-1", "llm-g7-2"]);

    const each = parsed([
      ...node, ...urls,
      "--id", "a", "--id", "b", "--id", "c",
      "--advertise-url", "https://a.example.com", "--advertise-url", "https://b.example.com", "--advertise-url", "https://c.example.com",
      "--max-ongoing", "8", "--max-ongoing", "16", "--max-ongoing", "32",
      "--models", "m1", "--models", "m2,m3", "--models", "m4",
      "--engine-api-key-file", "/k/a", "--engine-api-key-file", "/k/b", "--engine-api-key-file", "/k/c",
    ]);
    expect(each.engines).toMatchObject([
      { options: { replicaId: "a", advertiseUrl: "https://a.example.com", maxOngoing: 8, models: ["m1"] }, engineKeyFile: "/k/a" },
      { options: { replicaId: "b", advertiseUrl: "https://b.example.com", maxOngoing: 16, models: ["m2", "m3"] }, engineKeyFile: "/k/b" },
      { options: { replicaId: "c", advertiseUrl: "https://c.example.com", maxOngoing: 32, models: ["m4"] }, engineKeyFile: "/k/c" },
    ]);
  });

  const badNode: [string, string[], RegExp][] = [
    ["several engines without --node", [...required, "--engine-url", "http://127.0.0.1:8001"], /several --engine-url need --node/],
    ["an engine command with several engines", [...node, ...urls, "--", "vllm", "serve", "m"], /cannot start the engines: start them yourself/],
    ["two --id for three engines", [...node, ...urls, "--id", "a", "--id", "b"], /--id is given 2 times for 3 engines/],
    ["the same id twice", [...node, ...urls, "--id", "a", "--id", "b", "--id", "a"], /a replica id is given twice/],
    ["one --advertise-url for three engines", [...node, ...urls, "--advertise-url", "https://a.example.com"], /once per --engine-url/],
    ["two --max-ongoing for three engines", [...node, ...urls, "--max-ongoing", "1", "--max-ongoing", "2"], /--max-ongoing is given 2 times for 3 engines/],
    ["the same engine twice", [...node, "--engine-url", "http://127.0.0.1:8000", "--engine-url", "http://127.0.0.1:8000"], /an engine is given twice/],
    ["a bad node id", [...required, "--node", "gpu 7"], /--node "gpu 7" is not a node id/],
    ["two --id for one engine", [...required, "--id", "a", "--id", "b"], /--id is given 2 times for one engine/],
  ];
  for (const [what, argv, msg] of badNode) {
    it(`refuses ${what}`, () => {
      expect(() => parseAgentArgs(argv)).toThrow(UsageError);
      expect(() => parseAgentArgs(argv)).toThrow(msg);
    });
  }

  const bad: [string, string[], RegExp][] = [
    ["no --engine-url", ["--deployment", "llm", "--edge", "http://e"], /--engine-url are required/],
    ["a scrape interval above 100 ms", [...required, "--scrape-interval-ms", "101"], /--scrape-interval-ms must be an integer from 1 to 100/],
    ["an unknown engine", [...required, "--engine", "tgi"], /--engine must be vllm, sglang or auto/],
    ["a bad deployment name", ["--deployment", "LLM", "--edge", "http://e", "--engine-url", "http://x"], /not a deployment name/],
    ["a non-http engine URL", ["--deployment", "llm", "--edge", "http://e", "--engine-url", "unix:/tmp/s"], /--engine-url must be an http/],
    ["a bad model id", [...required, "--models", "a,b c"], /"b c" is not a model id/],
    ["a model twice", [...required, "--models", "a,a"], /listed twice/],
    ["a report delay above 250 ms", [...required, "--report-delay-ms", "300"], /--report-delay-ms/],
    ["an unknown flag", [...required, "--port", "1"], /Unknown option '--port'/],
    ["a stray positional", [...required, "vllm"], /positional/],
    ["an unknown continuation form", [...required, "--engine-continues", "chat,tokens"], /"tokens" is not a continuation form/],
    ["a continuation form twice", [...required, "--engine-continues", "chat,chat"], /a form is listed twice/],
    ["a region with a space", [...required, "--region", "us east"], /--region "us east" is not a region name/],
    ["a region past 64 characters", [...required, "--region", "r".repeat(65)], /--region "r+" is not a region name/],
    ["coordinates without a longitude", [...required, "--coordinates", "50.11"], /--coordinates must be LAT,LON in decimal degrees/],
    ["coordinates that are not numbers", [...required, "--coordinates", "NaN,Infinity"], /--coordinates must be LAT,LON in decimal degrees/],
    ["a latitude out of range", [...required, "--coordinates", "91,0"], /--coordinates: latitude 91 is outside -90..90/],
    ["a longitude out of range", [...required, "--coordinates", "0,-181"], /--coordinates: longitude -181 is outside -180..180/],
    ["a negative latitude without the = form", [...required, "--coordinates", "-33.9,18.4"], /argument is ambiguous/],
  ];
  for (const [what, argv, msg] of bad) {
    it(`refuses ${what}`, () => {
      expect(() => parseAgentArgs(argv)).toThrow(UsageError);
      expect(() => parseAgentArgs(argv)).toThrow(msg);
    });
  }
});

describe("spawnEngine", () => {
  it("SIGTERM stops an engine that honours it; SIGKILL one that does not", async () => {
    const polite = spawnEngine([process.execPath, "-e", "setInterval(() => {}, 1000)"]);
    await new Promise((r) => setTimeout(r, 100));
    polite.terminate();
    expect(await polite.exited).toBe("signal SIGTERM");

    // It notes in a file when its handler is in place and when SIGTERM reached it: the test waits for those events.
    const notes = join(mkdtempSync(join(tmpdir(), "agent-cli-")), "notes");
    const stubborn = spawnEngine([
      process.execPath,
      "-e",
      "const fs = require('node:fs'); const f = process.argv[1]; process.on('SIGTERM', () => fs.appendFileSync(f, 'sigterm\\n')); fs.appendFileSync(f, 'ready\\n'); setInterval(() => {}, 1000)",
      notes,
    ]);
    const noted = () => (existsSync(notes) ? readFileSync(notes, "utf8") : "");
    await waitFor("the engine's SIGTERM handler", () => noted().includes("ready"));
    stubborn.terminate();
    await waitFor("SIGTERM to reach the engine", () => noted().includes("sigterm"));
    // It handled SIGTERM and is still running: exited has not settled.
    const still = await Promise.race([stubborn.exited, Promise.resolve("running")]);
    expect(still).toBe("running");
    stubborn.kill();
    expect(await stubborn.exited).toBe("signal SIGKILL");
  });

  it("says when the command cannot start", async () => {
    const missing = spawnEngine(["/nonexistent/engine-binary"]);
    expect(await missing.exited).toMatch(/could not start: .*ENOENT/);
  });
});

/** A child engine: a vLLM-like /health, /v1/models and /metrics; writes what it saw to a file. */
const ENGINE_SCRIPT = `
const http = require("node:http");
const fs = require("node:fs");
const [port, file] = process.argv.slice(1);
const note = (k, v) => fs.appendFileSync(file, JSON.stringify({ [k]: v }) + "\\n");
note("key", process.env.SWITCHYARD_REPLICA_KEY ?? null);
const server = http.createServer((req, res) => {
  req.resume();
  if (req.url === "/health") return res.end();
  if (req.url === "/v1/models") return res.end(JSON.stringify({ data: [{ id: "tiny" }] }));
  if (req.url === "/metrics") return res.end("vllm:num_requests_running 0\\nvllm:num_requests_waiting 0\\nvllm:kv_cache_usage_perc 0.25\\n");
  res.writeHead(404).end();
});
server.listen(Number(port), "127.0.0.1");
process.on("SIGTERM", () => { note("sigterm", Date.now()); server.close(() => process.exit(0)); });
`;

async function listen(server: Server): Promise<number> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return (server.address() as AddressInfo).port;
}

async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as AddressInfo).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

function spawnAgent(args: string[], env: NodeJS.ProcessEnv = { SWITCHYARD_REPLICA_KEY: KEY }) {
  const child: ChildProcess = spawn(process.execPath, ["--import", "tsx", CLI, "agent", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, SWITCHYARD_REPLICA_SECRET: "", ...env },
  });
  cleanup.push(() => void child.kill("SIGKILL"));
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  const events: Record<string, unknown>[] = [];
  createInterface({ input: child.stdout! }).on("line", (l) => {
    try {
      events.push(JSON.parse(l) as Record<string, unknown>);
    } catch {
      // engine output
    }
  });
  const exited = new Promise<number | null>((r) => child.once("exit", (code) => r(code)));
  return { child, events, exited, stderr: () => stderr };
}

describe("replica agent (process)", () => {
  it("exits 2 without a replica key, and on a bad flag", async () => {
    const noKey = spawnAgent(required, { SWITCHYARD_REPLICA_KEY: "" });
    expect(await noKey.exited).toBe(2);
    expect(noKey.stderr()).toMatch(/SWITCHYARD_REPLICA_KEY is not set/);
    const badFlag = spawnAgent([...required, "--scrape-interval-ms", "500"]);
    expect(await badFlag.exited).toBe(2);
    expect(badFlag.stderr()).toMatch(/--scrape-interval-ms must be an integer from 1 to 100[\s\S]*usage: switchyard agent/);
  });

  it("owns its engine: registers it, and on SIGTERM drains, deregisters, then stops the engine and exits 0", async () => {
    const received: { path: string; body: Record<string, unknown>; at: number }[] = [];
    const edge = createServer(async (req, res) => {
      let text = "";
      for await (const chunk of req) text += String(chunk);
      received.push({ path: req.url ?? "", body: JSON.parse(text) as Record<string, unknown>, at: Date.now() });
      res.writeHead(200, { "content-type": "application/json" }).end(JSON.stringify({ ok: true, report_interval_ms: 1_000 }));
    });
    const edgePort = await listen(edge);
    const enginePort = await freePort();
    const dir = mkdtempSync(join(tmpdir(), "agent-cli-"));
    cleanup.push(() => rmSync(dir, { recursive: true, force: true }));
    const notes = join(dir, "engine.jsonl");
    const agent = spawnAgent([
      "--deployment", "llm", "--edge", `http://127.0.0.1:${edgePort}`, "--engine-url", `http://127.0.0.1:${enginePort}`,
      "--id", "llm-a", "--max-ongoing", "16", "--drain-grace-ms", "200", "--engine-start-timeout-ms", "20000",
      "--", process.execPath, "-e", ENGINE_SCRIPT, String(enginePort), notes,
    ]);
    const deadline = Date.now() + 30_000;
    while (!agent.events.some((e) => e.event === "registered")) {
      if (Date.now() > deadline || agent.child.exitCode !== null) throw new Error(`agent did not register:\n${agent.stderr()}`);
      await new Promise((r) => setTimeout(r, 20));
    }
    expect(agent.events[0]).toMatchObject({ event: "engine_started", replica_id: "llm-a" });
    expect(received[0]).toMatchObject({ path: "/-/replicas/register", body: { url: `http://127.0.0.1:${enginePort}`, max_ongoing_requests: 16 } });
    expect(received.find((m) => m.path === "/-/replicas/report")!.body).toMatchObject({ state: "ready", ongoing: 0, kv_cache_usage: 0.25, models: ["tiny"] });

    agent.child.kill("SIGTERM");
    expect(await agent.exited).toBe(0);
    const draining = received.find((m) => m.body.state === "draining")!;
    const deregister = received.find((m) => m.path === "/-/replicas/deregister")!;
    const lines = readFileSync(notes, "utf8").trim().split("\n").map((l) => JSON.parse(l) as Record<string, unknown>);
    const sigterm = lines.find((l) => "sigterm" in l)!.sigterm as number;
    expect(draining.at).toBeLessThanOrEqual(deregister.at);
    expect(deregister.at).toBeLessThanOrEqual(sigterm);
    // The engine never sees the deployment's replica key.
    expect(lines.find((l) => "key" in l)!.key).toBeNull();
    expect(agent.events.at(-1)).toEqual({ event: "exited", replica_id: "llm-a", code: 0 });
    expect(agent.stderr()).toMatch(/SIGTERM: draining[\s\S]*deregistered[\s\S]*stopping the engine \(SIGTERM\)[\s\S]*engine exited \(code 0\)/);
  }, 60_000);
});
