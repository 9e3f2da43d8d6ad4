// @ts-nocheck
// Precise prefix routing for a real model family, end to end (issue 34): the Python
// `openai` client sends chats through the edge (workerd) to two engine stand-ins
// serving Qwen3 (`--backend llm --model qwen3`: Qwen3's real tokenizer and chat
// template, a block cache, vLLM's KV events and /metrics) behind one replica agent,
// which indexes the engines' KV events and reports what each holds. The edge renders
// and tokenizes each chat as Qwen3 does, so its precise tier sends a chat to the engine
// whose cache holds its prefix, and the engines' own hit counters show it.
import { execFile, spawn, type ChildProcess } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonEnv } from "../../scripts/python-env.ts";
import { promptTokenizer } from "../../src/prompt/tokenizers/index.ts";
import { provideFamilyFilesFromNodeModules } from "../../src/prompt/tokenizers/node-files.ts";
import { freePort, startStack, until } from "./stack-fixture.ts";

const run = promisify(execFile);
const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const CLIENT = fileURLToPath(new URL("./fixtures/py-openai/standin.py", import.meta.url));
/** The same pinned client as the OpenAI ecosystem test (one virtualenv for both). */
const PY_OPENAI_VERSION = "2.54.0";
const ENGINES = ["qwen-g1-0", "qwen-g1-1"] as const;

provideFamilyFilesFromNodeModules();
const qwen3 = promptTokenizer("qwen3");

let stack: Awaited<ReturnType<typeof startStack>>;
let python: string;
let agentLog = "";
const children: ChildProcess[] = [];
const enginePorts: number[] = [];
const kvEndpoints: string[] = [];
const events: Record<string, unknown>[] = [];

function lineOf(child: ChildProcess, event: string, what: string): Promise<void> {
  return new Promise((resolve, reject) => {
    child.once("exit", (code) => reject(new Error(`${what} exited (${code}) before "${event}"`)));
    createInterface({ input: child.stdout! }).on("line", (l) => {
      if (l.includes(`"event":"${event}"`)) resolve();
    });
  });
}

interface Message {
  role: "system" | "user" | "assistant";
  content: string;
}
interface Answer {
  tag: string;
  replica: string | null;
  text: string;
  usage: { prompt_tokens: number; completion_tokens: number };
  finish_reason: string;
}

/** Runs the Python client over `requests` (one process, in order). */
async function pythonChats(requests: { tag: string; messages: Message[]; stream: boolean }[]): Promise<Answer[]> {
  const file = join(stack.stateDir, `requests-${Math.random().toString(36).slice(2)}.json`);
  writeFileSync(file, JSON.stringify(requests));
  const { stdout } = await run(python, [CLIENT, `${stack.url}/v1`, file], { timeout: 120_000 });
  return JSON.parse(stdout) as Answer[];
}

async function engineHits(): Promise<number[]> {
  return Promise.all(
    enginePorts.map(async (p) => {
      const text = await (await fetch(`http://127.0.0.1:${p}/metrics`)).text();
      return Number(/^vllm:prefix_cache_hits_total\{[^}]*\} (\S+)$/m.exec(text)![1]);
    }),
  );
}

/** Keys in each engine's summary, as one edge isolate's routing view has them. */
async function viewKeys(): Promise<Record<string, number>> {
  const res = await fetch(`${stack.workerdUrl}/-/deployments/qwen/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
  const replicas = ((await res.json()) as { replicas: { id: string; cacheKeys?: number }[] }).replicas;
  return Object.fromEntries(replicas.map((r) => [r.id, r.cacheKeys ?? 0]));
}

const GROUPS = 4;
/** A distinct system prompt per group, a few hundred Qwen3 tokens (Unicode and emoji included). */
const system = (g: number) =>
  `You are the support assistant of team ${g} 🚂 (Gruppe ${g}, チーム${g}). ` +
  Array.from({ length: 24 }, (_, i) => `Rule ${g}.${i}: answer questions about routing table ${g * 100 + i} briefly and cite the runbook.`).join(" ");

beforeAll(async () => {
  [python, stack] = await Promise.all([pythonEnv("openai", [`openai==${PY_OPENAI_VERSION}`]), startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-standin") })]);
  for (let i = 0; i < ENGINES.length; i++) {
    enginePorts.push(await freePort());
    kvEndpoints.push(`tcp://127.0.0.1:${await freePort()}`);
  }
  await Promise.all(
    ENGINES.map(async (_, i) => {
      const child = spawn(
        process.execPath,
        ["--import", "tsx", CLI, "--backend", "llm", "--model", "qwen3", "--standalone", "--deployment", "qwen", "--host", "127.0.0.1", "--port", String(enginePorts[i]), "--max-ongoing", "8", "--kv-blocks", "1024", "--kv-events-endpoint", kvEndpoints[i]!],
        { stdio: ["ignore", "pipe", "ignore"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: "", SWITCHYARD_REPLICA_SECRET: "" } },
      );
      children.push(child);
      await lineOf(child, "listening", `engine ${i}`);
    }),
  );
  const agent = spawn(
    process.execPath,
    [
      "--import", "tsx", CLI, "agent", "--deployment", "qwen", "--edge", stack.url, "--node", "g1",
      ...enginePorts.flatMap((p) => ["--engine-url", `http://127.0.0.1:${p}`]),
      ...kvEndpoints.flatMap((k) => ["--kv-events-endpoint", k]),
      "--id", "qwen-g1", "--max-ongoing", "8", "--drain-grace-ms", "200", "--drain-timeout-ms", "3000", "--engine-start-timeout-ms", "60000",
      // The stand-in renders no chat continuation: the edge must not send it one.
      "--engine-continues", "completion",
    ],
    { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: await stack.replicaKey("qwen"), SWITCHYARD_REPLICA_SECRET: "" } },
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
  await until("both engines to register", () => (events.filter((e) => e.event === "registered").length === ENGINES.length ? true : undefined), 90_000, () => agentLog.slice(-3000));
  // Registered is the routing object's word; the edge isolate's own view has them ready a refresh later.
  await until("both engines ready in the edge's view", async () => {
    const res = await fetch(`${stack.workerdUrl}/-/deployments/qwen/view`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
    const replicas = ((await res.json()) as { replicas: { state: string }[] }).replicas;
    return replicas.filter((r) => r.state === "ready").length === ENGINES.length ? true : undefined;
  }, 30_000);
  // The agent declared the engines' continuation form with their registration.
  for (const r of (await stack.deploymentState("qwen")).snapshot.replicas) expect((r as { continues?: string[] }).continues).toEqual(["completion"]);
}, 600_000);

afterAll(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
  await stack?.dispose();
});

describe("the Python openai client through the edge to engine stand-ins serving Qwen3", () => {
  const firsts = Array.from({ length: GROUPS }, (_, g) => ({ tag: `g${g}-a1`, stream: false, messages: [{ role: "system", content: system(g) }, { role: "user", content: `Which table do I start with, team ${g}?` }] as Message[] }));
  const served = new Map<number, string>();
  const answers = new Map<number, string>();

  it("answers each group's first chat; the prompt is Qwen3's rendering, token for token", async () => {
    const out = await pythonChats(firsts);
    for (const [g, a] of out.entries()) {
      expect(a.replica, a.tag).toMatch(/^qwen-g1-[01]$/);
      expect(a.finish_reason).toMatch(/^(stop|length)$/);
      expect(a.text.length).toBeGreaterThan(0);
      // The engine counted the prompt the edge's Qwen3 registration renders (and transformers, test/unit/hf-tokenizers.test.ts).
      expect(a.usage.prompt_tokens).toBe(qwen3.chat(firsts[g]!.messages, 1 << 20).length);
      served.set(g, a.replica!);
      answers.set(g, a.text);
    }
  });

  it("the engines' KV events reach the edge through the agent: each engine's summary holds its chats' blocks", async () => {
    const want: Record<string, number> = {};
    for (const [g, id] of served) want[id] = (want[id] ?? 0) + Math.floor(qwen3.chat(firsts[g]!.messages, 1 << 20).length / 16);
    await until(
      "the summaries in the view",
      async () => {
        const keys = await viewKeys();
        return Object.entries(want).every(([id, n]) => (keys[id] ?? 0) >= n) ? keys : undefined;
      },
      30_000,
      () => agentLog.slice(-3000),
    );
  });

  it("sends each group's next chats, a follow-up turn and a new user's, to the engine holding the group's prefix: the engines count the hits", async () => {
    const before = await engineHits();
    const next = Array.from({ length: GROUPS }, (_, g) => [
      { tag: `g${g}-a2`, stream: true, messages: [...firsts[g]!.messages, { role: "assistant", content: answers.get(g)! }, { role: "user", content: "And after that one?" }] as Message[] },
      { tag: `g${g}-b1`, stream: false, messages: [{ role: "system", content: system(g) }, { role: "user", content: `I am new here. What does team ${g} do?` }] as Message[] },
    ]).flat();
    const out = await pythonChats(next);
    let shared = 0;
    for (const [i, a] of out.entries()) {
      const g = Math.floor(i / 2);
      expect(a.replica, a.tag).toBe(served.get(g));
      const ids = qwen3.chat(next[i]!.messages, 1 << 20);
      expect(a.usage.prompt_tokens, a.tag).toBe(ids.length);
      // At least the blocks this chat shares with the group's first one are found cached.
      const first = qwen3.chat(firsts[g]!.messages, 1 << 20);
      let common = 0;
      while (common < Math.min(ids.length, first.length) && ids[common] === first[common]) common++;
      shared += 16 * Math.floor(common / 16);
    }
    const after = await engineHits();
    const hits = after.reduce((s, h, i) => s + h - before[i]!, 0);
    expect(shared).toBeGreaterThan(GROUPS * 2 * 16 * 10);
    expect(hits).toBeGreaterThanOrEqual(shared);
  });
});
