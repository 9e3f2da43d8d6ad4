/**
 * The replica agent's prefix-cache summaries: `--kv-events-*` flags, and a
 * ReplicaAgent fronting a fake vLLM (its /metrics from a fixture) whose KV events
 * come from a publisher sending vLLM-format batches (test/fixtures/kv-events/agent-*),
 * reporting to a fake edge that validates every report with the protocol's schema.
 */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { ReplicaAgent } from "../../src/agent/agent.ts";
import { parseAgentArgs, UsageError, type AgentArgs } from "../../src/agent/cli.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { CacheSummary } from "../../src/prefix/cache-summary.ts";
import { ReportMessage } from "../../src/protocol/index.ts";
import { FixturePublisher } from "../e2e/fixtures/kv-events-publisher.ts";

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const required = ["--deployment", "llm", "--edge", "http://127.0.0.1:8787", "--engine-url", "http://127.0.0.1:8000"];
function parsed(argv: string[]): AgentArgs {
  const out = parseAgentArgs(argv);
  if (out === "help") throw new Error("unexpected help");
  return out;
}

describe("--kv-events-* flags", () => {
  it("one engine: endpoint, replay endpoint and topic", () => {
    const a = parsed([...required, "--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-events-replay-endpoint", "tcp://127.0.0.1:5558", "--kv-events-topic", "kv"]);
    expect(a.engines[0]!.options.kvEvents).toEqual({ endpoint: "tcp://127.0.0.1:5557", replayEndpoint: "tcp://127.0.0.1:5558", topic: "kv" });
    expect(parsed(required).engines[0]!.options.kvEvents).toBeUndefined();
    expect(parsed([...required, "--kv-events-endpoint", "ipc:///run/vllm/kv"]).engines[0]!.options.kvEvents).toEqual({ endpoint: "ipc:///run/vllm/kv" });
  });

  it("several engines: an endpoint per engine, a topic once for all", () => {
    const a = parsed([
      "--deployment", "llm", "--edge", "http://127.0.0.1:8787", "--node", "gpu-7",
      "--engine-url", "http://127.0.0.1:8000", "--engine-url", "http://127.0.0.1:8001",
      "--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-events-endpoint", "tcp://127.0.0.1:5567",
      "--kv-events-replay-endpoint", "tcp://127.0.0.1:5558", "--kv-events-replay-endpoint", "tcp://127.0.0.1:5568",
      "--kv-events-topic", "kv",
    ]);
    expect(a.engines.map((e) => e.options.kvEvents)).toEqual([
      { endpoint: "tcp://127.0.0.1:5557", replayEndpoint: "tcp://127.0.0.1:5558", topic: "kv" },
      { endpoint: "tcp://127.0.0.1:5567", replayEndpoint: "tcp://127.0.0.1:5568", topic: "kv" },
    ]);
  });

  it("refuses what cannot work", () => {
    const refuses = (argv: string[], msg: RegExp) => expect(() => parseAgentArgs(argv)).toThrow(msg);
    refuses([...required, "--kv-events-endpoint", "http://127.0.0.1:5557"], /not a ZMQ endpoint/);
    refuses([...required, "--kv-events-endpoint", "tcp://*:5557"], /not a ZMQ endpoint/);
    refuses([...required, "--kv-events-replay-endpoint", "tcp://127.0.0.1:5558"], /need --kv-events-endpoint/);
    refuses([...required, "--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-events-endpoint", "tcp://127.0.0.1:5567"], /once per --engine-url/);
    refuses(
      [...required, "--kv-events-endpoint", "tcp://127.0.0.1:5557", "--kv-events-replay-endpoint", "tcp://127.0.0.1:5558", "--kv-events-replay-endpoint", "tcp://127.0.0.1:5559"],
      /once per endpoint/,
    );
    expect(() => parseAgentArgs([...required, "--kv-events-topic", "x"])).toThrow(UsageError);
  });
});

async function listen(server: Server): Promise<string> {
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(() => new Promise<void>((r) => server.close(() => r())));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

/** vLLM's /metrics (the fixture) and /health. */
async function fakeVllm(): Promise<string> {
  const metrics = readFileSync(new URL("../fixtures/engine-metrics/vllm.txt", import.meta.url), "utf8");
  return listen(
    createServer((req, res) => {
      req.resume();
      if (req.url === "/metrics") {
        res.writeHead(200, { "content-type": "text/plain; version=0.0.4" });
        return res.end(metrics);
      }
      res.writeHead(req.url === "/health" ? 200 : 404);
      res.end();
    }),
  );
}

/** A fake edge: every report must validate; registers and reports recorded. */
async function fakeEdge() {
  const reports: ReportMessage[] = [];
  const invalid: unknown[] = [];
  const url = await listen(
    createServer(async (req, res) => {
      let text = "";
      for await (const chunk of req) text += String(chunk);
      if (req.url === "/-/replicas/report") {
        const m = ReportMessage.safeParse(JSON.parse(text));
        if (m.success) reports.push(m.data);
        else invalid.push(m.error.issues);
      }
      res.writeHead(200, { "content-type": "application/json" });
      res.end(JSON.stringify({ ok: true, outcome: "ok", report_interval_ms: 50 }));
    }),
  );
  return { url, reports, invalid };
}

async function until(what: string, cond: () => boolean, limitMs = 10_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

const meaning = JSON.parse(readFileSync(new URL("../fixtures/kv-events/agent-stream.json", import.meta.url), "utf8")) as {
  prompts: Record<string, { tokens: number[]; lora: string | null }>;
};
const keysOf = (p: string) => blockKeys(meaning.prompts[p]!.tokens, { extra: meaning.prompts[p]!.lora ?? "" });

describe("ReplicaAgent with the engine's KV events", () => {
  // The batch positional ([ts, events, rank], vLLM's EventBatch with array_like) and as a map
  // (an EventBatch without array_like): the same full session, through the agent, either way.
  for (const [shape, file] of [
    ["positional batches", (i: number) => `agent-stream-${i}.msgpack`],
    ["map-shaped batches", (i: number) => `agent-stream-map-${i}.msgpack`],
  ] as const) {
    it(`indexes what the engine published before it started (replayed), reports the summary once, then only on a change; no summary for 32-token blocks (${shape})`, async () => {
      const pub = new FixturePublisher();
      const where = await pub.bind();
      cleanup.push(() => pub.close());
      for (let i = 0; i < 5; i++) await pub.publish(FixturePublisher.file(file(i)));
      const engine = await fakeVllm();
      const edge = await fakeEdge();
      const logs: string[] = [];
      const agent = new ReplicaAgent({
        deployment: "llm",
        edgeUrl: edge.url,
        key: "0".repeat(64),
        replicaId: "llm-agent-kv",
        engineUrl: engine,
        models: ["meta-llama/Llama-3.1-8B-Instruct"],
        scrapeIntervalMs: 10,
        drainGraceMs: 0,
        drainTimeoutMs: 200,
        engineStartTimeoutMs: 5_000,
        kvEvents: where,
        log: (m) => logs.push(m),
      });
      const done = agent.run();
      cleanup.push(async () => {
        void agent.shutdown("test cleanup");
        await done;
      });
      // The agent catches up from seq 0 once a live batch shows it the stream: publish until it has.
      for (let tries = 0; (agent.prefixIndex?.size ?? 0) < 6; tries++) {
        if (agent.prefixIndex) await pub.publish(FixturePublisher.file(file(4)));
        await new Promise((r) => setTimeout(r, 20));
        expect(tries, logs.join("\n")).toBeLessThan(250);
      }
      // The five batches published before the agent started come only by replay; the index can reach
      // its 6 blocks from the first three, so wait for the rest (on a busy machine they came later).
      await until("the 5 batches from before the start replayed", () => agent.kvEventStats!.replayed >= 5);
      await until("a report with the summary of 6 blocks", () => edge.reports.some((r) => r.prefix_cache?.n === 6));
      const withSummary = edge.reports.find((r) => r.prefix_cache?.n === 6)!;
      const s = CacheSummary.parse(withSummary.prefix_cache!)!;
      expect(s.matchedBlocks(keysOf("A"), 16)).toBe(4);
      expect(s.matchedBlocks(keysOf("L"), 16)).toBe(2);
      // Heartbeats every 50 ms: the unchanged summary rides on none of the next ones.
      const after = edge.reports.length;
      await until("three more reports", () => edge.reports.length >= after + 3);
      expect(edge.reports.slice(after + 1).every((r) => r.prefix_cache === undefined)).toBe(true);
      // The engine drops its prefix cache: the next report says so (a summary of nothing).
      await pub.publish(FixturePublisher.file("agent-cleared.msgpack"));
      await until("a report with an empty summary", () => edge.reports.some((r) => r.prefix_cache?.n === 0));
      // 32-token blocks: the agent stops reporting a summary (null), and says why.
      await pub.publish(FixturePublisher.file("agent-block32.msgpack"));
      await until("a report dropping the summary", () => edge.reports.some((r) => r.prefix_cache === null));
      expect(logs.some((l) => /--block-size 16/.test(l))).toBe(true);
      expect(edge.invalid).toEqual([]);
    });
  }
});
