// @ts-nocheck
// Streams that survive their replica (issue 35): 50 concurrent streams (greedy, every
// fourth sampled with a seed) of 200
// tokens on 4 reference LLM replicas; the replica serving the most of them is
// SIGKILLed halfway through. With migration every stream completes, its text byte for
// byte an uninterrupted run's and its usage the same; without it (the deployment's
// path route, which does not migrate) streams break. The Python `openai` client streams
// through a migration too.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { pythonEnv } from "../../scripts/python-env.ts";
import { sseData } from "../fixtures/sse.ts";
import { startStack, until } from "./stack-fixture.ts";

const CLIENT = fileURLToPath(new URL("./fixtures/py-openai/migration.py", import.meta.url));
/** The same pinned client as the OpenAI ecosystem test (one virtualenv for both). */
const PY_OPENAI_VERSION = "2.54.0";

let stack: Awaited<ReturnType<typeof startStack>>;
const STREAMS = 50;
const TOKENS = 200;

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-migration") });
  for (let i = 1; i <= 4; i++) {
    await stack.startReplica("mig", { id: `mig-${i}`, maxOngoing: 20, backendArgs: ["--backend", "llm", "--model", "tiny-lm", "--decode-ms", "40"] });
  }
  await until("4 ready replicas", async () => ((await stack.deploymentState("mig")).snapshot.replicas.filter((r) => r.load.state === "ready").length === 4 ? true : undefined), 30_000);
}, 300_000);

afterAll(async () => {
  await stack?.dispose();
});

interface Streamed {
  replica: string | null;
  text: string;
  chunks: number;
  usage?: { prompt_tokens: number; completion_tokens: number; total_tokens: number };
  ids: Set<string>;
  /** An error event arrived, or the connection was cut. */
  error: boolean;
  done: boolean;
}

/** One streamed chat, read event by event; `onChunk` sees the count of content events so far. */
async function stream(url: string, i: number, onChunk?: (s: Streamed) => void, onHead?: (s: Streamed) => void): Promise<Streamed> {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({
      model: "tiny-lm",
      messages: [{ role: "user", content: `Tell me the story of the lighthouse number ${i}.` }],
      max_tokens: TOKENS,
      // Every fourth stream samples with a seed: the reference replica draws each token from
      // the seed and its position, so a continuation samples on as the uninterrupted run did.
      temperature: i % 4 === 2 ? 0.9 : 0,
      ...(i % 4 === 2 ? { seed: 4_000 + i } : {}),
      ignore_eos: true,
      stream: true,
      stream_options: { include_usage: true },
    }),
  });
  expect(res.status).toBe(200);
  const s: Streamed = { replica: res.headers.get("x-switchyard-replica"), text: "", chunks: 0, ids: new Set(), error: false, done: false };
  onHead?.(s);
  try {
    for await (const data of sseData(res.body!)) {
      if (data === "[DONE]") {
        s.done = true;
        continue;
      }
      const chunk = JSON.parse(data) as { id?: string; error?: unknown; choices?: { delta?: { content?: string } }[]; usage?: Streamed["usage"] };
      if (chunk.error) s.error = true;
      if (chunk.id) s.ids.add(chunk.id);
      const piece = chunk.choices?.[0]?.delta?.content;
      if (piece) {
        s.text += piece;
        s.chunks++;
        onChunk?.(s);
      }
      if (chunk.usage) s.usage = chunk.usage;
    }
  } catch {
    // The connection was cut (a path route passes the replica's stream natively).
    s.error = true;
  }
  return s;
}

const v1 = () => `${stack.url}/v1/chat/completions`;

/** Tokens replica `id` has generated so far, by its own vLLM /metrics. */
async function generated(id: string): Promise<number> {
  const text = await (await fetch(`${stack.replicas.get(id)!.url}/metrics`)).text();
  return Number(/^vllm:generation_tokens_total\{[^}]*\} (\S+)$/m.exec(text)![1]);
}

/**
 * Runs `n` streams at once; once every one has its head, SIGKILLs the busiest replica when
 * it has generated half of its streams' tokens, by its own /metrics: the replica's
 * progress, not the client's reading, which on a busy machine lags behind the edge (a kill
 * timed by the client's reading once came after the edge had received every stream whole).
 * `cut`: its streams the client had not read to their end then (as many as the edge
 * continued, or more).
 */
async function runWithKill(url: string, n: number, offset: number): Promise<{ results: Streamed[]; killed: string; cut: number }> {
  const live: Streamed[] = [];
  const before = new Map<string, number>();
  for (const id of stack.replicas.keys()) before.set(id, await generated(id).catch(() => 0));
  let all!: () => void;
  const started = new Promise<void>((r) => (all = r));
  const running = Promise.all(
    Array.from({ length: n }, (_, i) =>
      stream(url, offset + i, undefined, (s) => {
        live.push(s);
        if (live.length === n) all();
      }),
    ),
  );
  await started;
  const by = new Map<string, Streamed[]>();
  for (const s of live) by.set(s.replica!, [...(by.get(s.replica!) ?? []), s]);
  const [killed, streams] = [...by.entries()].sort((a, b) => b[1].length - a[1].length)[0]!;
  const half = before.get(killed)! + (streams.length * TOKENS) / 2;
  await until(`${killed} halfway`, async () => ((await generated(killed)) >= half ? true : undefined), 60_000);
  process.kill(stack.replicas.get(killed)!.child.pid!, "SIGKILL");
  const cut = streams.filter((s) => s.chunks < TOKENS - 2).length;
  return { results: await running, killed, cut };
}

describe("a stream whose replica dies mid-answer", () => {
  const reference = new Map<number, Streamed>();

  it("uninterrupted: 50 streams of 200 tokens, greedy or seeded", async () => {
    const results = await Promise.all(Array.from({ length: STREAMS }, (_, i) => stream(v1(), i)));
    for (const [i, s] of results.entries()) {
      expect(s.done && !s.error).toBe(true);
      expect(s.chunks).toBe(TOKENS);
      reference.set(i, s);
    }
  }, 120_000);

  it("with migration: the busiest replica SIGKILLed halfway, every stream completes as one stream, its text and usage an uninterrupted run's", async () => {
    const { results, killed, cut } = await runWithKill(v1(), STREAMS, 0);
    expect(killed).toMatch(/^mig-\d$/);
    expect(cut).toBeGreaterThan(0);
    for (const [i, s] of results.entries()) {
      expect({ i, error: s.error, done: s.done }).toEqual({ i, error: false, done: true });
      expect(s.text).toBe(reference.get(i)!.text);
      expect(s.usage).toEqual(reference.get(i)!.usage);
      // One id for the whole answer, however many replicas wrote it.
      expect(s.ids.size).toBe(1);
    }
    // The edge logged each continuation, all from the killed replica. (As many as `cut` or fewer: a client
    // that read behind its stream counts a stream cut that the edge had already received whole.)
    const migrated = () => stack.logLines.filter((l) => l.includes('"msg":"stream migrated"'));
    await until("the migrations in the log", () => (migrated().length > 0 ? true : undefined), 10_000, () => `cut ${cut}, killed ${killed}`);
    for (const line of migrated()) expect(line).toContain(`"from":"${killed}"`);
    expect(migrated().length).toBeLessThanOrEqual(cut);
  }, 180_000);

  it("the Python openai client streams through a migration and sees no error", async () => {
    const python = await pythonEnv("openai", [`openai==${PY_OPENAI_VERSION}`]);
    const prompt = "Tell me the story of the lighthouse number 7.";
    const child = spawn(python, [CLIENT, `${stack.url}/v1`, prompt], { stdio: ["ignore", "pipe", "inherit"] });
    const lines: Record<string, unknown>[] = [];
    let victim: string | undefined;
    const end = new Promise<Record<string, unknown>>((resolve, reject) => {
      child.once("exit", (code) => reject(new Error(`the client exited (${code}) before its end`)));
      createInterface({ input: child.stdout! }).on("line", (l) => {
        const e = JSON.parse(l) as Record<string, unknown>;
        lines.push(e);
        if (e.event === "half") {
          victim = String(lines.find((x) => x.event === "head")!.replica);
          process.kill(stack.replicas.get(victim)!.child.pid!, "SIGKILL");
        }
        if (e.event === "end") resolve(e);
      });
    });
    const result = await end;
    expect(victim).toMatch(/^mig-\d$/);
    expect(result.error).toBeNull();
    // Lighthouse 7 was stream 7 of the uninterrupted run: the same greedy text and usage.
    expect(result.text).toBe(reference.get(7)!.text);
    expect(result.usage).toMatchObject(reference.get(7)!.usage!);
  }, 120_000);

  it("without migration (the path route): the killed replica's streams break", async () => {
    // The first kill's replica out of the registry first (a path route cannot replay its streamed body elsewhere).
    await until("2 replicas left", async () => ((await stack.deploymentState("mig")).snapshot.replicas.filter((r) => r.load.state === "ready").length === 2 ? true : undefined), 30_000);
    const { results, killed } = await runWithKill(`${stack.url}/mig/v1/chat/completions`, 8, 100);
    const broken = results.filter((s) => s.error);
    expect(broken.length).toBeGreaterThan(0);
    expect(broken.every((s) => s.replica === killed)).toBe(true);
    for (const s of broken) expect(s.chunks).toBeLessThan(TOKENS);
  }, 180_000);

  it("a replica that stops sending (SIGSTOP) stalls its stream past migrationStallMs: the stream goes on elsewhere", async () => {
    for (const id of ["mig-5", "mig-6"]) await stack.startReplica("mig", { id, maxOngoing: 20, backendArgs: ["--backend", "llm", "--model", "tiny-lm", "--decode-ms", "40"] });
    await until("2 more ready replicas", async () => ((await stack.deploymentState("mig")).snapshot.replicas.filter((r) => r.load.state === "ready" && /^mig-[56]$/.test(r.id)).length === 2 ? true : undefined), 30_000);
    let stopped: number | undefined;
    let stoppedId: string | undefined;
    const s = await stream(v1(), 3, (x) => {
      if (stopped === undefined && x.chunks === 50) {
        stoppedId = x.replica!;
        stopped = stack.replicas.get(stoppedId)!.child.pid!;
        process.kill(stopped, "SIGSTOP");
      }
    });
    if (stopped !== undefined) process.kill(stopped, "SIGKILL");
    expect(stoppedId).toBeDefined();
    expect({ error: s.error, done: s.done }).toEqual({ error: false, done: true });
    expect(s.text).toBe(reference.get(3)!.text);
    expect(s.usage).toEqual(reference.get(3)!.usage);
    await until("the stall's migration in the log", () => (stack.logLines.some((l) => l.includes('"msg":"stream migrated"') && l.includes(`"from":"${stoppedId}"`)) ? true : undefined), 10_000);
  }, 120_000);
});
