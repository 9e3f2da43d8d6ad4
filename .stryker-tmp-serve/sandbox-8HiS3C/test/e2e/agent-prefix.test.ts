// @ts-nocheck
// Prefix-cache summaries end to end: a real local stack (workerd edge, routing
// object, relay), ONE replica agent fronting two engines on a node, each engine's
// KV events subscribed:
//   - engine 0: the reference replica's llm backend with its own vLLM-style KV
//     events publisher (--kv-events-endpoint, --kv-events-replay-endpoint);
//   - engine 1: the reference replica again, its events from a fixture publisher
//     process that replays a vLLM session's bytes (test/fixtures/kv-events/agent-*).
// The agent indexes both caches and sends their summaries in its node reports; the
// routing object keeps them, the relay carries them, and an edge isolate's view
// (GET /-/deployments/chat/view) shows each replica's summary key count.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, startStack, until } from "./stack-fixture.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const PUBLISHER = fileURLToPath(new URL("./fixtures/kv-events-publisher.ts", import.meta.url));
const NODE = "gpu-9";
const IDS = ["chat-g9-0", "chat-g9-1"] as const;

let stack: Awaited<ReturnType<typeof startStack>>;
let agent: ChildProcess;
let publisher: ChildProcess;
let agentLog = "";
const children: ChildProcess[] = [];
const events: Record<string, unknown>[] = [];
const enginePorts: number[] = [];
const kv: { endpoint: string; replay: string }[] = [];

const eventually = <T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 30_000) =>
  until(what, probe, timeoutMs, () => `--- agent log ---\n${agentLog.slice(-4000)}`);

/** Waits for a child's JSON line with `event`. */
function lineOf(child: ChildProcess, event: string, what: string): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`${what} exited (${code}) before "${event}"`)));
    createInterface({ input: child.stdout! }).on("line", (l) => {
      if (!l.includes(`"event":"${event}"`)) return;
      resolve(JSON.parse(l) as Record<string, unknown>);
    });
  });
}

async function startEngine(i: number, kvFlags: string[]): Promise<void> {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", CLI, "--backend", "llm", "--model", "tiny-lm", "--standalone", "--deployment", "chat", "--host", "127.0.0.1", "--port", String(enginePorts[i]), "--max-ongoing", "8", ...kvFlags],
    { stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: "", SWITCHYARD_REPLICA_SECRET: "" } },
  );
  children.push(child);
  await lineOf(child, "listening", `engine ${i}`);
}

interface ViewReplica {
  id: string;
  cacheKeys?: number;
}

/** One isolate's routing view (no object call): what the edge would route with. */
async function view(): Promise<ViewReplica[]> {
  const res = await fetch(`${stack.workerdUrl}/-/deployments/chat/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
  expect(res.status).toBe(200);
  return ((await res.json()) as { replicas: ViewReplica[] }).replicas;
}

const keysIn = async (id: string) => (await view()).find((r) => r.id === id)?.cacheKeys;

async function chat(content: string): Promise<number> {
  const res = await fetch(`${stack.url}/chat/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content }], max_tokens: 2, temperature: 0 }),
  });
  await res.text();
  return res.status;
}

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-agent") });
  for (let i = 0; i < IDS.length; i++) {
    enginePorts.push(await freePort());
    kv.push({ endpoint: `tcp://127.0.0.1:${await freePort()}`, replay: `tcp://127.0.0.1:${await freePort()}` });
  }
  await Promise.all([
    startEngine(0, ["--kv-events-endpoint", kv[0]!.endpoint, "--kv-events-replay-endpoint", kv[0]!.replay]),
    startEngine(1, []),
  ]);
  publisher = spawn(
    process.execPath,
    ["--import", "tsx", PUBLISHER, kv[1]!.endpoint, kv[1]!.replay, ...Array.from({ length: 5 }, (_, i) => `agent-stream-${i}.msgpack`)],
    { stdio: ["pipe", "pipe", "inherit"] },
  );
  children.push(publisher);
  await lineOf(publisher, "published", "the fixture publisher");
  const key = await stack.replicaKey("chat");
  agent = spawn(
    process.execPath,
    [
      "--import", "tsx", CLI, "agent", "--deployment", "chat", "--edge", stack.url, "--node", NODE,
      ...enginePorts.flatMap((p) => ["--engine-url", `http://127.0.0.1:${p}`]),
      ...kv.flatMap((k) => ["--kv-events-endpoint", k.endpoint]),
      ...kv.flatMap((k) => ["--kv-events-replay-endpoint", k.replay]),
      "--id", "chat-g9", "--max-ongoing", "8", "--drain-grace-ms", "200", "--drain-timeout-ms", "3000", "--engine-start-timeout-ms", "60000",
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: key, SWITCHYARD_REPLICA_SECRET: "" } },
  );
  children.push(agent);
  agent.stderr!.on("data", (d: Buffer) => (agentLog += d.toString()));
  createInterface({ input: agent.stdout! }).on("line", (l) => {
    try {
      events.push(JSON.parse(l) as Record<string, unknown>);
    } catch {
      // not an event
    }
  });
  await eventually("both replicas to register", () => (events.filter((e) => e.event === "registered").length === IDS.length ? true : undefined), 90_000);
}, 180_000);

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await stack?.dispose();
});

describe("prefix-cache summaries from engines' KV events to an edge isolate's view", () => {
  it("the session the fixture publisher replays reaches the view as its engine's summary: 6 blocks", async () => {
    expect(await eventually("engine 1's summary in the view", async () => ((await keysIn(IDS[1])) === 6 ? true : undefined))).toBe(true);
    expect(agentLog).toMatch(/replayed 5 batch\(es\) from seq 0/);
  });

  it("the reference replica's own KV events: what it caches for a request shows up in the view", async () => {
    await eventually("engine 0 to report cached blocks", async () => {
      // Distinct prompts of several blocks each, until one lands on engine 0 (the balancer decides).
      expect(await chat(`${"a long shared system prompt that fills blocks ".repeat(6)}${Math.random()}`)).toBe(200);
      const n = await keysIn(IDS[0]);
      return n !== undefined && n > 0 ? n : undefined;
    });
  });

  it("the routing object holds both summaries (memory only) and counts them", async () => {
    const res = await fetch(`${stack.workerdUrl}/-/deployments/chat`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
    const body = (await res.json()) as { router: { summaries: number; summaryReports: number; nodeReports: number } };
    expect(body.router.summaries).toBe(2);
    expect(body.router.summaryReports).toBeGreaterThanOrEqual(2);
    // Summaries go only when they change (and every 10 s): far fewer than the node's reports.
    expect(body.router.summaryReports).toBeLessThan(body.router.nodeReports * 2);
  });

  it("the engine drops its prefix cache (AllBlocksCleared): the view shows an empty summary within a report and a refresh", async () => {
    publisher.stdin!.write("agent-cleared.msgpack\n");
    expect(await eventually("engine 1's empty summary in the view", async () => ((await keysIn(IDS[1])) === 0 ? true : undefined))).toBe(true);
  });

  it("an engine with 32-token blocks: the agent says why and the summary leaves the view", async () => {
    publisher.stdin!.write("agent-block32.msgpack\n");
    await eventually("engine 1's summary to leave the view", async () => ((await keysIn(IDS[1])) === undefined ? true : undefined));
    expect(agentLog).toMatch(/--block-size 16/);
    // Engine 0's is still there.
    expect(await keysIn(IDS[0])).toBeGreaterThan(0);
  });
});
