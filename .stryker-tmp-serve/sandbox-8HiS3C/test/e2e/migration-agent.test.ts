// @ts-nocheck
// Migration on an agent's drain deadline (issue 35, docs/migration.md "Drain deadlines"):
// an engine behind the replica agent in engine mode is dispatched to by the edge
// directly, so it cannot hand its streams over itself. The agent, told to drain with
// a 5 s deadline (SIGTERM with --drain-timeout-ms 5000), announces the deadline in its
// reports (drain_deadline_ms); the edge moves the engine's streams to the other
// replicas before it. Every stream completes with the model's uninterrupted greedy
// text, and every migration off the engine says the deadline moved it (not a broken
// connection when the engine stopped).
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { greedyStreams, uninterrupted } from "./greedy-streams.ts";
import { alive, freePort, startStack, until } from "./stack-fixture.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const AGENT_ID = "am-agent";
const STREAMS = 12;
const TOKENS = 150;
const messages = (i: number) => [{ role: "user", content: `Describe lighthouse keeper number ${i}.` }];

let stack: Awaited<ReturnType<typeof startStack>>;
let agent: ChildProcess;
let agentExit: Promise<number | null>;
let agentLog = "";
let enginePid = 0;

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-agent-migration") });
  for (let i = 1; i <= 2; i++) await stack.startReplica("am", { id: `am-${i}`, maxOngoing: 20, backendArgs: ["--backend", "llm", "--model", "tiny-lm", "--decode-ms", "60"] });
  const port = await freePort();
  // The engine would hand its streams over itself only past a minute: here the edge must move them.
  const engine = [process.execPath, "--import", "tsx", CLI, "--backend", "llm", "--model", "tiny-lm", "--standalone", "--deployment", "am", "--host", "127.0.0.1", "--port", String(port), "--max-ongoing", "20", "--decode-ms", "60", "--drain-timeout-ms", "60000"];
  agent = spawn(
    process.execPath,
    ["--import", "tsx", CLI, "agent", "--deployment", "am", "--edge", stack.url, "--engine-url", `http://127.0.0.1:${port}`, "--id", AGENT_ID, "--max-ongoing", "20", "--drain-timeout-ms", "5000", "--engine-start-timeout-ms", "60000", "--", ...engine],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: await stack.replicaKey("am"), SWITCHYARD_REPLICA_SECRET: "" } },
  );
  agentExit = new Promise((r) => agent.once("exit", (code) => r(code)));
  agent.stderr!.on("data", (d: Buffer) => (agentLog += d.toString()));
  createInterface({ input: agent.stdout! }).on("line", (l) => {
    try {
      const e = JSON.parse(l) as { event?: string; pid?: number };
      if (e.event === "engine_started") enginePid = e.pid!;
    } catch {
      // engine output
    }
  });
  await until("3 ready replicas, the agent's among them", async () => {
    const rs = (await stack.deploymentState("am")).snapshot.replicas.filter((r) => r.load.state === "ready");
    return rs.length === 3 && rs.some((r) => r.id === AGENT_ID) ? true : undefined;
  }, 90_000, () => agentLog.slice(-3000));
}, 180_000);

afterAll(async () => {
  if (agent && agent.exitCode === null) agent.kill("SIGKILL");
  if (enginePid && alive(enginePid)) process.kill(enginePid, "SIGKILL");
  await stack?.dispose();
});

describe("an engine behind the agent, drained with a 5 s deadline", () => {
  it("has its streams moved by the edge before the deadline: all complete with the uninterrupted greedy text", async () => {
    const expected = await uninterrupted(messages, STREAMS, TOKENS);
    let drainedAt: number | undefined;
    const results = await greedyStreams(stack.url, messages, STREAMS, TOKENS, (live) => {
      // Once every stream is under way and some are on the engine, the agent gets its notice.
      if (drainedAt !== undefined || !live.every((x) => x.chunks >= 3) || !live.some((x) => x.replica === AGENT_ID)) return;
      drainedAt = Date.now();
      agent.kill("SIGTERM");
    });
    expect(drainedAt).toBeDefined();
    expect(await agentExit).toBe(0);
    for (const [i, r] of results.entries()) {
      expect({ i, error: r.error, done: r.done }).toEqual({ i, error: false, done: true });
      expect(r.text).toBe(expected[i]!.text);
      expect(r.usage).toEqual(expected[i]!.usage);
    }
    expect(results.filter((r) => r.replica === AGENT_ID).length).toBeGreaterThan(0);
    // The edge moved streams off the engine, and every one that left it left because its
    // deadline came, not because the engine went away. Not every stream on the engine need
    // move: on a busy machine streams start seconds apart, and one far enough along when the
    // notice comes finishes on the engine within the deadline (its text is checked above).
    const migrations = () => stack.logLines.filter((l) => l.includes('"msg":"stream migrated"') && l.includes(`"from":"${AGENT_ID}"`));
    await until("a migration in the edge's log", () => (migrations().length > 0 ? true : undefined), 10_000, () =>
      [`streams by replica: ${results.map((r) => r.replica).join(", ")}`, ...stack.logLines.filter((l) => l.includes("stream migrated") || l.includes(AGENT_ID)).slice(-40)].join("\n"),
    );
    for (const line of migrations()) expect(JSON.parse(line.slice(line.indexOf("{")))).toMatchObject({ ok: true, reason: "drain_deadline" });
  }, 120_000);
});
