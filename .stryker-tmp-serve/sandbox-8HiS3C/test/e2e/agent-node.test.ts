// @ts-nocheck
// One replica agent per node, end to end: a real local stack (workerd edge) with
// an external deployment, two engines on one "node" (the reference replica's llm
// backend, standalone, speaking vLLM's /metrics), and ONE agent fronting both
// (`--node gpu-7 --engine-url A --engine-url B`). Both engines register as
// replicas of their own and serve requests; their load travels in one signed
// node report per interval (the routing object's nodeReports counter grows, and
// its reports counter by two per node report); an engine killed is reported
// draining while the other serves; an admin drain of one replica deregisters it
// alone; SIGTERM drains the rest and the agent exits 0.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { freePort, startStack, until } from "./stack-fixture.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const NODE = "gpu-7";
const IDS = ["chat-g7-0", "chat-g7-1"] as const;

let stack: Awaited<ReturnType<typeof startStack>>;
let agent: ChildProcess;
let agentExit: Promise<number | null>;
let agentLog = "";
const events: Record<string, unknown>[] = [];
const ports: number[] = [];
const engines: (ChildProcess | undefined)[] = [];

const eventually = <T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000) =>
  until(what, probe, timeoutMs, () => `--- agent log ---\n${agentLog.slice(-4000)}`);

/** An engine on the node: the reference replica's llm backend, standalone (it does not register itself). */
async function startEngine(i: number): Promise<void> {
  const child = spawn(
    process.execPath,
    ["--import", "tsx", CLI, "--backend", "llm", "--model", "tiny-lm", "--standalone", "--deployment", "chat", "--host", "127.0.0.1", "--port", String(ports[i]), "--max-ongoing", "8", "--decode-ms", "20"],
    { stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: "", SWITCHYARD_REPLICA_SECRET: "" } },
  );
  engines[i] = child;
  await new Promise<void>((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`engine ${i} exited (${code}) before listening`)));
    createInterface({ input: child.stdout! }).on("line", (l) => {
      if (l.includes('"event":"listening"')) resolve();
    });
  });
}

interface ReplicaState {
  id: string;
  url: string;
  load: { seq: number; ongoing: number; queued: number; max: number; state: string };
}

interface DeploymentState {
  snapshot: { replicas: ReplicaState[] };
  router: { reports: number; nodeReports: number };
}

async function deployment(): Promise<DeploymentState> {
  const res = await fetch(`${stack.workerdUrl}/-/deployments/chat`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
  expect(res.status).toBe(200);
  return (await res.json()) as DeploymentState;
}

const replica = async (id: string) => (await deployment()).snapshot.replicas.find((r) => r.id === id);

/** One chat completion through the edge: its status and the replica that served it. */
async function chat(): Promise<{ status: number; replica: string | null }> {
  const res = await fetch(`${stack.url}/chat/v1/chat/completions`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: "hi" }], max_tokens: 4, temperature: 0 }),
  });
  await res.text();
  return { status: res.status, replica: res.headers.get("x-switchyard-replica") };
}

/** Waits until `n` requests in a row are all served (200) by `id`. */
async function servedOnlyBy(id: string, n = 6): Promise<void> {
  let run = 0;
  await eventually(`${n} requests in a row served by ${id}`, async () => {
    const r = await chat();
    run = r.status === 200 && r.replica === id ? run + 1 : 0;
    return run >= n ? true : undefined;
  });
}

/** Counters sampled from one answer (one routing object: one stats call). */
async function counters(): Promise<{ reports: number; nodeReports: number }> {
  const { router } = await deployment();
  return { reports: router.reports, nodeReports: router.nodeReports };
}

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-agent") });
  for (let i = 0; i < IDS.length; i++) ports.push(await freePort());
  await Promise.all(IDS.map((_, i) => startEngine(i)));
  const key = await stack.replicaKey("chat");
  agent = spawn(
    process.execPath,
    [
      "--import", "tsx", CLI, "agent", "--deployment", "chat", "--edge", stack.url, "--node", NODE,
      ...ports.flatMap((p) => ["--engine-url", `http://127.0.0.1:${p}`]),
      "--id", "chat-g7", "--max-ongoing", "8", "--drain-grace-ms", "500", "--drain-timeout-ms", "5000", "--engine-start-timeout-ms", "60000",
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: key, SWITCHYARD_REPLICA_SECRET: "" } },
  );
  agentExit = new Promise((r) => agent.once("exit", (code) => r(code)));
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
  if (agent && agent.exitCode === null) agent.kill("SIGKILL");
  for (const e of engines) if (e && e.exitCode === null && e.signalCode === null) e.kill("SIGKILL");
  await stack?.dispose();
});

describe("one agent per node, several engines", () => {
  it("registers each engine as its own replica on the node: both in routing, ready, at their own URLs", async () => {
    const rs = await eventually("both replicas in the snapshot", async () => {
      const { snapshot } = await deployment();
      return snapshot.replicas.length === IDS.length ? snapshot.replicas : undefined;
    });
    expect(rs.map((r) => [r.id, r.url, r.load.state, r.load.max]).sort()).toEqual(IDS.map((id, i) => [id, `http://127.0.0.1:${ports[i]}`, "ready", 8]));
    for (const id of IDS) expect(events).toContainEqual({ event: "registered", replica_id: id, url: expect.any(String), deployment: "chat", node: NODE });
  });

  it("serves requests on both engines", async () => {
    const seen = new Map<string, number>();
    await eventually("requests served by both replicas", async () => {
      const batch = await Promise.all(Array.from({ length: 8 }, () => chat()));
      for (const r of batch) {
        expect(r.status).toBe(200);
        seen.set(r.replica!, (seen.get(r.replica!) ?? 0) + 1);
      }
      return IDS.every((id) => seen.has(id)) ? true : undefined;
    });
    expect([...seen.keys()].sort()).toEqual([...IDS]);
  });

  it("reports both in one node report: nodeReports grows, reports by two per node report", async () => {
    const before = await counters();
    const after = await eventually("three more node reports", async () => {
      const c = await counters();
      return c.nodeReports >= before.nodeReports + 3 ? c : undefined;
    });
    expect(after.reports - before.reports).toBe(2 * (after.nodeReports - before.nodeReports));
    expect(agentLog).toMatch(/one node report for all/);
  });

  it("an engine killed: its replica is reported draining, the other serves; back, it is ready again", async () => {
    engines[1]!.kill("SIGKILL");
    await eventually("the killed engine's replica to be draining", async () => ((await replica(IDS[1]))?.load.state === "draining" ? true : undefined));
    expect((await replica(IDS[0]))?.load.state).toBe("ready");
    await servedOnlyBy(IDS[0]);

    await startEngine(1);
    await eventually("the engine's replica to be ready again", async () => ((await replica(IDS[1]))?.load.state === "ready" ? true : undefined));
    await eventually("a request served by the engine again", async () => ((await chat()).replica === IDS[1] ? true : undefined));
  });

  it("an admin drain of one replica: it alone drains and deregisters, the other serves and goes on reporting alone", async () => {
    const res = await fetch(`${stack.workerdUrl}/-/deployments/chat/replicas/${IDS[0]}/drain`, {
      method: "POST",
      headers: { authorization: `Bearer ${stack.adminSecret}` },
    });
    expect(res.status).toBe(200);
    await eventually("the drained replica to leave", () => (events.some((e) => e.event === "left" && e.replica_id === IDS[0]) ? true : undefined));
    expect(events).toContainEqual({ event: "left", replica_id: IDS[0], code: 0 });
    const { snapshot } = await deployment();
    expect(snapshot.replicas.map((r) => r.id)).toEqual([IDS[1]]);
    expect(agent.exitCode).toBeNull();
    await servedOnlyBy(IDS[1]);

    const before = await counters();
    const after = await eventually("two more node reports", async () => {
      const c = await counters();
      return c.nodeReports >= before.nodeReports + 2 ? c : undefined;
    });
    expect(after.reports - before.reports).toBe(after.nodeReports - before.nodeReports);
  });

  it("SIGTERM: the rest drains and deregisters; the agent exits 0", async () => {
    agent.kill("SIGTERM");
    expect(await agentExit).toBe(0);
    expect((await deployment()).snapshot.replicas).toEqual([]);
    expect(events.at(-1)).toEqual({ event: "exited", node: NODE, code: 0 });
    // The engines run on their own: the agent does not stop them.
    expect(engines.every((e) => e!.exitCode === null)).toBe(true);
  }, 60_000);
});
