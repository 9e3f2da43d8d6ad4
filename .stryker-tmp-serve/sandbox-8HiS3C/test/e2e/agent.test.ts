// @ts-nocheck
// The replica agent end to end: a real local stack (workerd edge) with an
// external deployment, and `replica agent` owning the reference replica's llm
// backend (standalone: it does not register itself) as its engine child. The
// agent registers the engine's URL, turns its vLLM /metrics into load reports,
// and on SIGTERM drains while a streaming request finishes, deregisters, and
// only then stops the engine.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { alive, freePort, startStack, until } from "./stack-fixture.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const AGENT_ID = "chat-agent-1";

let stack: Awaited<ReturnType<typeof startStack>>;
let agent: ChildProcess;
let agentExit: Promise<number | null>;
let agentLog = "";
/** until(), with the agent's log when it times out. */
const eventually = <T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000) =>
  until(what, probe, timeoutMs, () => `--- agent log ---\n${agentLog.slice(-4000)}`);
const events: Record<string, unknown>[] = [];
let engineUrl = "";
let enginePid = 0;

interface ReplicaState {
  id: string;
  url: string;
  load: { seq: number; ongoing: number; queued: number; max: number; state: string; kv?: number };
  models: string[];
}

/** The deployment's replicas as the routing Durable Object holds them (admin API). */
async function replicas(): Promise<ReplicaState[]> {
  const res = await fetch(`${stack.workerdUrl}/-/deployments/chat`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { snapshot: { replicas: ReplicaState[] } }).snapshot.replicas;
}

async function engineCounts(): Promise<{ admitted: number; ongoing: number }> {
  return (await (await fetch(`${engineUrl}/-/healthz`)).json()) as never;
}

function chat(maxTokens: number, stream: boolean): Promise<Response> {
  return fetch(`${stack.url}/chat/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: "Tell me a story" }], max_tokens: maxTokens, stream, temperature: 0, ignore_eos: true }),
  });
}

/** Reads an SSE chat stream to its end: content chunks, the finish reason, whether [DONE] came. */
async function readStream(res: Response, onFirstChunk?: () => void): Promise<{ chunks: number; finish: string | null; done: boolean }> {
  const reader = res.body!.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const out = { chunks: 0, finish: null as string | null, done: false };
  let first = true;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    buffer += decoder.decode(value, { stream: true });
    let nl: number;
    while ((nl = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, nl).trim();
      buffer = buffer.slice(nl + 2);
      if (!event.startsWith("data: ")) continue;
      const data = event.slice(6);
      if (data === "[DONE]") {
        out.done = true;
        continue;
      }
      const chunk = JSON.parse(data) as { choices: { delta: { content?: string }; finish_reason: string | null }[] };
      const choice = chunk.choices[0]!;
      if (choice.delta.content) {
        out.chunks++;
        if (first) {
          first = false;
          onFirstChunk?.();
        }
      }
      if (choice.finish_reason) out.finish = choice.finish_reason;
    }
  }
  return out;
}

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-agent") });
  const port = await freePort();
  engineUrl = `http://127.0.0.1:${port}`;
  const key = await stack.replicaKey("chat");
  // Not the stack's replica: the agent owns this process, started after `--`.
  const engineCommand = [process.execPath, "--import", "tsx", CLI, "--backend", "llm", "--model", "tiny-lm", "--standalone", "--deployment", "chat", "--host", "127.0.0.1", "--port", String(port), "--max-ongoing", "8", "--decode-ms", "40"];
  agent = spawn(
    process.execPath,
    ["--import", "tsx", CLI, "agent", "--deployment", "chat", "--edge", stack.url, "--engine-url", engineUrl, "--id", AGENT_ID, "--max-ongoing", "8", "--engine-start-timeout-ms", "60000", "--", ...engineCommand],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: key, SWITCHYARD_REPLICA_SECRET: "" } },
  );
  agentExit = new Promise((r) => agent.once("exit", (code) => r(code)));
  agent.stderr!.on("data", (d: Buffer) => (agentLog += d.toString()));
  createInterface({ input: agent.stdout! }).on("line", (l) => {
    try {
      events.push(JSON.parse(l) as Record<string, unknown>);
    } catch {
      // engine output
    }
  });
  await eventually("the agent to register", () => (events.some((e) => e.event === "registered") ? true : undefined), 90_000);
  enginePid = events.find((e) => e.event === "engine_started")!.pid as number;
}, 180_000);

afterAll(async () => {
  if (agent && agent.exitCode === null) agent.kill("SIGKILL");
  if (enginePid && alive(enginePid)) process.kill(enginePid, "SIGKILL");
  await stack?.dispose();
});

describe("replica agent in front of an engine", () => {
  it("registers the engine's own URL: the replica appears in the deployment, ready", async () => {
    const [r] = await eventually("the replica in the snapshot", async () => {
      const rs = await replicas();
      return rs.length > 0 ? rs : undefined;
    });
    expect(r).toMatchObject({ id: AGENT_ID, url: engineUrl, models: ["tiny-lm"], load: { state: "ready", max: 8, ongoing: 0, queued: 0 } });
    expect(typeof r!.load.kv).toBe("number");
    const health = (await (await fetch(`${stack.url}/-/healthz`)).json()) as unknown;
    expect(JSON.stringify(health)).toContain("chat");
  });

  it("a request through the edge reaches the engine, with no hop through the agent", async () => {
    const before = await engineCounts();
    const res = await chat(4, false);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-replica")).toBe(AGENT_ID);
    const body = (await res.json()) as { object: string; choices: { message: { content: string } }[] };
    expect(body.object).toBe("chat.completion");
    expect(body.choices[0]!.message.content.length).toBeGreaterThan(0);
    expect((await engineCounts()).admitted).toBe(before.admitted + 1);
  });

  it("shows the engine's load from /metrics at the edge while a slow stream runs", async () => {
    const res = await chat(60, true);
    expect(res.status).toBe(200);
    const reading = readStream(res);
    const loaded = await eventually("a report of the running request", async () => {
      const r = (await replicas()).find((x) => x.id === AGENT_ID);
      return r && r.load.ongoing >= 1 ? r : undefined;
    });
    expect(loaded.load.state).toBe("ready");
    expect(loaded.load.kv).toBeGreaterThan(0);
    const out = await reading;
    expect(out).toEqual({ chunks: 60, finish: "length", done: true });
    await eventually("the load to go back to 0", async () => {
      const r = (await replicas()).find((x) => x.id === AGENT_ID);
      return r && r.load.ongoing === 0 ? r : undefined;
    });
  });

  it("SIGTERM: the in-flight stream completes, new requests are not routed to the engine, the agent deregisters, then the engine exits; exit 0", async () => {
    // ~100 tokens at ≥ 40 ms each: still streaming well after the drain's grace time. A 503 with
    // Retry-After before the drain (a report late on a busy machine lets the entry lapse for a moment)
    // is retried as a client would; this test is about what happens once the stream runs.
    const refusedFirst: string[] = [];
    const res = await eventually("a streamed chat to start", async () => {
      const r = await chat(100, true);
      if (r.status === 200) return r;
      refusedFirst.push(`${r.status} ${await r.text()}`);
      return r.status === 503 && r.headers.get("retry-after") ? undefined : r;
    });
    expect(res.status, refusedFirst.join("\n")).toBe(200);
    if (refusedFirst.length) console.log(`SIGTERM test: retried ${refusedFirst.length} refusal(s) before the stream: ${refusedFirst[0]}`);
    let firstChunk!: () => void;
    const started = new Promise<void>((r) => (firstChunk = r));
    const reading = readStream(res, firstChunk);
    await started;
    agent.kill("SIGTERM");

    // The drain is announced at once and shows at the edge.
    await eventually("the replica to be draining", async () => {
      const r = (await replicas()).find((x) => x.id === AGENT_ID);
      return r?.load.state === "draining" ? r : undefined;
    }, 5_000);
    // Proxies stop routing to it once their view is refreshed (≤ 1 s); the engine still runs.
    const refused = await eventually("a request refused for want of a ready replica", async () => {
      const r = await chat(2, false);
      const body = await r.text();
      return r.status === 503 ? body : undefined;
    }, 5_000);
    expect(refused).toMatch(/no_ready_replica/);
    const admitted = (await engineCounts()).admitted;
    for (let i = 0; i < 3; i++) expect((await chat(2, false)).status).toBe(503);
    expect((await engineCounts()).admitted).toBe(admitted);
    expect(alive(enginePid)).toBe(true);

    // The stream that was in flight completes fully.
    const out = await reading;
    expect(out).toEqual({ chunks: 100, finish: "length", done: true });

    expect(await agentExit).toBe(0);
    expect(alive(enginePid)).toBe(false);
    expect(await replicas()).toEqual([]);
    // Deregistered first, engine stopped after.
    expect(agentLog).toMatch(/SIGTERM: draining[\s\S]*announced draining[\s\S]*engine idle[\s\S]*deregistered[\s\S]*stopping the engine \(SIGTERM\)[\s\S]*engine exited \(code 0\)/);
    expect(events.at(-1)).toEqual({ event: "exited", replica_id: AGENT_ID, code: 0 });
  }, 60_000);
});
