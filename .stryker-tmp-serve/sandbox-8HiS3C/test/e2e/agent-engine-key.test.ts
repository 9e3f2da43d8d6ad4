// @ts-nocheck
// An engine behind the replica agent with its own API key, as vLLM runs with
// --api-key: the reference replica (standalone, --api-key-file, vLLM's 401) is the
// engine. The agent registers the key through the signed control plane, the edge
// sends it on every dispatch, the engine refuses anyone else, and the key rotates
// under load without a failed request.
import { spawn, type ChildProcess } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, sleep, startStack, until } from "./stack-fixture.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const AGENT_ID = "chat-keyed-1";
const K1 = "engine-key-one-0123456789";
const K2 = "engine-key-two-9876543210";

let stack: Awaited<ReturnType<typeof startStack>>;
let agent: ChildProcess;
let agentLog = "";
/** until(), with the agent's log when it times out. */
const eventually = <T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000) =>
  until(what, probe, timeoutMs, () => `--- agent log ---\n${agentLog.slice(-4000)}`);
const events: Record<string, unknown>[] = [];
let engineUrl = "";
let enginePid = 0;
let dir = "";



const engineHealth = async () => (await (await fetch(`${engineUrl}/-/healthz`)).json()) as { api_key_requests: number[] };

function chat(): Promise<Response> {
  return fetch(`${stack.url}/chat/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: "hi" }], max_tokens: 2, temperature: 0 }),
  });
}

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), "switchyard-engine-key-"));
  writeFileSync(join(dir, "engine-keys"), `${K1}\n`);
  writeFileSync(join(dir, "agent-key"), `${K1}\n`);
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-agent") });
  const port = await freePort();
  engineUrl = `http://127.0.0.1:${port}`;
  const engineCommand = [process.execPath, "--import", "tsx", CLI, "--backend", "llm", "--model", "tiny-lm", "--standalone", "--deployment", "chat", "--host", "127.0.0.1", "--port", String(port), "--max-ongoing", "8", "--api-key-file", join(dir, "engine-keys")];
  agent = spawn(
    process.execPath,
    ["--import", "tsx", CLI, "agent", "--deployment", "chat", "--edge", stack.url, "--engine-url", engineUrl, "--id", AGENT_ID, "--max-ongoing", "8", "--engine-api-key-file", join(dir, "agent-key"), "--", ...engineCommand],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: await stack.replicaKey("chat"), SWITCHYARD_REPLICA_SECRET: "" } },
  );
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
  await eventually("the replica in routing", async () => ((await chat()).status === 200 ? true : undefined));
}, 180_000);

afterAll(async () => {
  if (agent && agent.exitCode === null) {
    const exited = new Promise((r) => agent.once("exit", r));
    agent.kill("SIGTERM");
    await Promise.race([exited, sleep(15_000)]);
    if (agent.exitCode === null) agent.kill("SIGKILL");
  }
  try {
    if (enginePid) process.kill(enginePid, "SIGKILL");
  } catch {
    // already gone
  }
  await stack?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

describe("an engine with its own API key behind the agent", () => {
  it("refuses callers without the key the way vLLM does; /health and /metrics stay open", async () => {
    const anonymous = await fetch(`${engineUrl}/v1/models`);
    expect(anonymous.status).toBe(401);
    expect(await anonymous.json()).toEqual({ error: "Unauthorized" });
    expect((await fetch(`${engineUrl}/v1/models`, { headers: { authorization: "Bearer wrong" } })).status).toBe(401);
    expect((await fetch(`${engineUrl}/v1/models`, { headers: { authorization: `Bearer ${K1}` } })).status).toBe(200);
    expect((await fetch(`${engineUrl}/health`)).status).toBe(200);
    expect((await fetch(`${engineUrl}/metrics`)).status).toBe(200);
  });

  it("is served through the edge, which sends the key the agent registered; operators see that a key is set, never the key", async () => {
    const before = (await engineHealth()).api_key_requests[0]!;
    const res = await chat();
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-replica")).toBe(AGENT_ID);
    expect((await engineHealth()).api_key_requests[0]).toBeGreaterThan(before);
    const admin = await (await fetch(`${stack.workerdUrl}/-/deployments/chat`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).text();
    expect(admin).not.toContain(K1);
    expect(JSON.parse(admin)).toMatchObject({ snapshot: { replicas: [{ id: AGENT_ID, engine_key: "set" }] } });
  });

  it("rotates the key under load with no failed request: engine takes both, agent registers the new one, engine drops the old", async () => {
    const failures: string[] = [];
    let sent = 0;
    let loading = true;
    const load = Promise.all(
      Array.from({ length: 2 }, async () => {
        while (loading) {
          sent++;
          const res = await chat();
          const body = await res.text();
          if (res.status !== 200) failures.push(`${res.status} ${body.slice(0, 200)}`);
        }
      }),
    );
    // 1. The engine accepts both keys.
    writeFileSync(join(dir, "engine-keys"), `${K1}\n${K2}\n`);
    process.kill(enginePid, "SIGHUP");
    await eventually("the engine to hold two keys", async () => ((await engineHealth()).api_key_requests.length === 2 ? true : undefined));
    // 2. The agent registers the new key; the edge switches to it.
    writeFileSync(join(dir, "agent-key"), `${K2}\n`);
    agent.kill("SIGHUP");
    await eventually("the new key to be registered", () => (events.some((e) => e.event === "engine_key_registered") ? true : undefined));
    await eventually("the edge to send the new key", async () => ((await engineHealth()).api_key_requests[1]! > 0 ? true : undefined));
    // 3. The engine drops the old key; the edge keeps being served.
    writeFileSync(join(dir, "engine-keys"), `${K2}\n`);
    process.kill(enginePid, "SIGHUP");
    await eventually("the engine to hold only the new key", async () => ((await engineHealth()).api_key_requests.length === 1 ? true : undefined));
    const after = sent;
    await eventually("more requests after the old key is gone", () => (sent >= after + 20 ? true : undefined));
    loading = false;
    await load;
    expect(failures).toEqual([]);
    expect((await fetch(`${engineUrl}/v1/models`, { headers: { authorization: `Bearer ${K1}` } })).status).toBe(401);
    console.log(`engine key rotation: ${sent} requests through the edge during it, 0 failed`);
  }, 60_000);
});
