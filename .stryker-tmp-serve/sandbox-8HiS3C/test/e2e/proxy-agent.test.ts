// @ts-nocheck
// Your own model behind the agent (issue 33): examples/python-model (a FastAPI app with
// a numpy model, its pinned packages from this machine's pip index) behind two agents
// in proxy mode, each owning its own copy of the app, served through the real local
// stack (workerd edge) with the example's own deployment file. Requests are served;
// a direct unsigned request is refused; a full agent refuses before accepting and the
// edge retries elsewhere; a stream passes through and a client's cancel reaches the
// app; SIGKILL and a drain under load lose nothing.
import { spawn, type ChildProcess } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonEnv } from "../../scripts/python-env.ts";
import { alive, freePort, signedFetch, startStack, until } from "./stack-fixture.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const EXAMPLE = fileURLToPath(new URL("../../examples/python-model/", import.meta.url));
const PACKAGES = readFileSync(join(EXAMPLE, "requirements.txt"), "utf8").split("\n").map((l) => l.trim()).filter((l) => l && !l.startsWith("#"));

interface Agent {
  id: string;
  url: string;
  appUrl: string;
  proc: ChildProcess;
  exit: Promise<number | null>;
  appPid: number;
  log: string;
  events: Record<string, unknown>[];
}

let stack: Awaited<ReturnType<typeof startStack>>;
let python = "";
const agents = new Map<string, Agent>();
const logs = () => [...agents.values()].map((a) => `--- ${a.id} ---\n${a.log.slice(-3000)}`).join("\n");
const eventually = <T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 30_000) => until(what, probe, timeoutMs, logs);

/** Starts an agent in proxy mode that owns a copy of the example app; resolves once it has registered. */
async function startAgent(id: string, maxOngoing: number): Promise<Agent> {
  const [port, appPort] = [await freePort(), await freePort()];
  const appUrl = `http://127.0.0.1:${appPort}`;
  const proc = spawn(
    process.execPath,
    ["--import", "tsx", CLI, "agent", "--proxy", "--deployment", "sentiment", "--edge", stack.url, "--app-url", appUrl, "--id", id, "--port", String(port), "--max-ongoing", String(maxOngoing), "--drain-timeout-ms", "20000", "--",
      python, "-m", "uvicorn", "app:app", "--app-dir", EXAMPLE, "--host", "127.0.0.1", "--port", String(appPort)],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: await stack.replicaKey("sentiment"), SWITCHYARD_REPLICA_SECRET: "" } },
  );
  const agent: Agent = { id, url: `http://127.0.0.1:${port}`, appUrl, proc, exit: new Promise((r) => proc.once("exit", (code) => r(code))), appPid: 0, log: "", events: [] };
  agents.set(id, agent);
  proc.stderr!.on("data", (d: Buffer) => (agent.log += d.toString()));
  createInterface({ input: proc.stdout! }).on("line", (l) => {
    agent.log += `${l}\n`;
    try {
      const e = JSON.parse(l) as Record<string, unknown>;
      agent.events.push(e);
      if (e.event === "app_started") agent.appPid = e.pid as number;
    } catch {
      // the app's output
    }
  });
  await eventually(`${id} to register`, () => (agent.events.some((e) => e.event === "registered") ? true : undefined), 90_000);
  return agent;
}

const counts = async (a: Agent) => (await (await fetch(`${a.url}/-/healthz`)).json()) as { admitted: number; rejected: number; ongoing: number };
const appStats = async (a: Agent) => (await (await fetch(`${a.appUrl}/stats`)).json()) as { served: number; streams: number; cancelled: number };
const predict = (text: string, delayMs = 0) =>
  fetch(`${stack.url}/sentiment/predict`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text, delay_ms: delayMs }) });

/** The deployment's replicas as its routing object holds them (admin API). */
async function replicas(): Promise<{ id: string; load: { ongoing: number; state: string } }[]> {
  const res = await fetch(`${stack.url}/-/deployments/sentiment`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
  return ((await res.json()) as { snapshot: { replicas: { id: string; load: { ongoing: number; state: string } }[] } }).snapshot.replicas;
}

describe("the example's deployment file", () => {
  it("is served as the README copies it into a functions folder (cp, byte for byte), with no relative import to break there", () => {
    const copy = readFileSync(join(import.meta.dirname, "fixtures/functions-proxy-agent/sentiment.ts"), "utf8");
    expect(copy).toBe(readFileSync(join(EXAMPLE, "sentiment.ts"), "utf8"));
    expect(copy).not.toMatch(/from "\.\.?\//);
  });
});

beforeAll(async () => {
  [python, stack] = await Promise.all([pythonEnv("model-server", PACKAGES), startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-proxy-agent") })]);
  await Promise.all([startAgent("sentiment-a", 1), startAgent("sentiment-b", 4)]);
  await eventually("both agents in the deployment", async () => ((await replicas()).filter((r) => r.load.state === "ready").length === 2 ? true : undefined));
}, 600_000);

afterAll(async () => {
  for (const a of agents.values()) {
    if (a.proc.exitCode === null) a.proc.kill("SIGKILL");
    if (a.appPid && alive(a.appPid)) process.kill(-a.appPid, "SIGKILL");
  }
  await stack?.dispose();
});

describe("a Python model server behind the agent in proxy mode", () => {
  it("serves the app's real model through the edge, its errors passed on as JSON", async () => {
    const good = await predict("I love it, great value");
    expect(good.status).toBe(200);
    expect(["sentiment-a", "sentiment-b"]).toContain(good.headers.get("x-switchyard-replica"));
    expect(await good.json()).toMatchObject({ model: "sentiment-bow-logreg", label: "positive" });
    const bad = await predict("terrible, it broke and I want a refund");
    expect(await bad.json()).toMatchObject({ label: "negative" });
    // The app's own validation error (FastAPI's 422), whole.
    const invalid = await fetch(`${stack.url}/sentiment/predict`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text: 5 }) });
    expect(invalid.status).toBe(422);
    expect(((await invalid.json()) as { detail: unknown[] }).detail.length).toBeGreaterThan(0);
  });

  it("refuses a direct request that the edge did not sign: 401", async () => {
    const a = agents.get("sentiment-b")!;
    const before = await appStats(a);
    const res = await fetch(`${a.url}/predict`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text: "hi" }) });
    expect(res.status).toBe(401);
    expect(await res.json()).toMatchObject({ error: { code: "unauthorized" } });
    expect((await appStats(a)).served).toBe(before.served); // the app never saw it
  });

  it("a full agent refuses before accepting, and the edge retries on the other one: nothing fails", async () => {
    const a = agents.get("sentiment-a")!; // one slot
    let refusedByA = 0;
    // Fill a behind the edge's back, so the edge's view still thinks it free until a's next
    // report; a round that never asked a inside that window is run again.
    for (let round = 0; round < 5 && refusedByA === 0; round++) {
      await eventually("a idle in the edge's view", async () => ((await replicas()).find((r) => r.id === a.id)?.load.ongoing === 0 ? true : undefined));
      const cancel = new AbortController();
      const hog = signedFetch(stack, "sentiment", a.id)(`${a.url}/predict`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text: "hold", delay_ms: 60_000 }), signal: cancel.signal })
        .then((r) => r.text())
        .catch(() => "cancelled");
      await eventually("the hog running on a", async () => ((await counts(a)).ongoing === 1 ? true : undefined));
      const before = await counts(a);
      const results = await Promise.all(Array.from({ length: 12 }, (_, i) => predict(`great value ${i}`).then(async (r) => ({ status: r.status, by: r.headers.get("x-switchyard-replica"), body: await r.text() }))));
      for (const r of results) expect(r.status, r.body).toBe(200);
      expect(new Set(results.map((r) => r.by))).toEqual(new Set(["sentiment-b"]));
      refusedByA += (await counts(a)).rejected - before.rejected;
      cancel.abort();
      await hog;
      await eventually("a idle again", async () => ((await counts(a)).ongoing === 0 ? true : undefined));
    }
    expect(refusedByA).toBeGreaterThanOrEqual(1);
  });

  it("streams the app's answer through as it comes, and a client's cancel reaches the app", async () => {
    const explain = (text: string, intervalMs: number, signal?: AbortSignal) =>
      fetch(`${stack.url}/sentiment/explain`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ text, interval_ms: intervalMs }), ...(signal && { signal }) });
    // Whole: one event per word, the prediction, [DONE].
    const whole = await (await explain("really good value", 0)).text();
    const events = whole.split("\n\n").filter((e) => e.startsWith("data: ")).map((e) => e.slice(6));
    expect(events.map((e) => (e === "[DONE]" ? e : Object.keys(JSON.parse(e) as object)[0]))).toEqual(["word", "word", "word", "label", "[DONE]"]);
    // Progressive: the first word arrives while the app is still streaming (it has not served the stream yet).
    const statsBefore = await Promise.all([...agents.values()].map(appStats));
    const cancel = new AbortController();
    const res = await explain("one two three four five six seven eight nine ten eleven twelve", 300, cancel.signal);
    expect(res.status).toBe(200);
    const reader = res.body!.getReader();
    const first = new TextDecoder().decode((await reader.read()).value);
    expect(first).toContain('"word": "one"');
    const servedNow = (await Promise.all([...agents.values()].map(appStats))).reduce((n, s) => n + s.served, 0);
    expect(servedNow).toBe(statsBefore.reduce((n, s) => n + s.served, 0));
    // The client leaves: the app's stream is cancelled (it counts it), not run to its end.
    cancel.abort();
    await eventually("the app to see the cancel", async () => {
      const now = await Promise.all([...agents.values()].map(appStats));
      return now.reduce((n, s) => n + s.cancelled, 0) > statsBefore.reduce((n, s) => n + s.cancelled, 0) ? true : undefined;
    });
  });

  it("SIGKILL of an agent under load: every request served (retried on the other); then a drain under load: 0 failed, the app stopped after it, exit 0", async () => {
    // Load: 24 requests of ~300 ms, 6 at a time.
    const load = async (n: number) => {
      const statuses: number[] = [];
      let next = 0;
      await Promise.all(
        Array.from({ length: 6 }, async () => {
          while (next < n) {
            next++;
            const r = await predict("fast delivery and great value", 300);
            await r.text();
            statuses.push(r.status);
          }
        }),
      );
      return statuses;
    };
    const b = agents.get("sentiment-b")!;
    const running = load(24);
    await eventually("b serving", async () => ((await counts(b)).ongoing >= 1 ? true : undefined));
    b.proc.kill("SIGKILL");
    const killed = await running;
    expect(killed.filter((s) => s !== 200)).toEqual([]);
    expect(killed).toHaveLength(24);
    // The app b owned outlives a SIGKILLed agent (its own process group); the edge forgets b when its reports stop.
    if (b.appPid && alive(b.appPid)) process.kill(-b.appPid, "SIGKILL");

    // A new agent takes b's place; then a drains under load.
    const c = await startAgent("sentiment-c", 4);
    await eventually("c ready at the edge", async () => ((await replicas()).some((r) => r.id === c.id && r.load.state === "ready") ? true : undefined));
    const a = agents.get("sentiment-a")!;
    const draining = load(24);
    await eventually("a serving", async () => ((await counts(a)).ongoing >= 1 ? true : undefined));
    a.proc.kill("SIGTERM");
    const drained = await draining;
    expect(drained.filter((s) => s !== 200)).toEqual([]);
    expect(await a.exit).toBe(0);
    expect(a.log).toContain("drained");
    // The agent stopped its app once drained.
    await eventually("a's app to exit", () => (alive(a.appPid) ? undefined : true));
    expect((await replicas()).map((r) => r.id)).not.toContain(a.id);
  });
});
