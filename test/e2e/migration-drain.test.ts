// Migration on drain (issue 35): a replica told to drain with a 3 s deadline (a spot
// notice: SIGTERM with --drain-timeout-ms 3000) hands over the streams it cannot finish
// by then, each ended with a `stream_handover` event; the edge continues them on the
// other replicas. 20 greedy streams that need 20 s each all complete, their text the
// model's own uninterrupted greedy text (computed here, in-process, by the same engine).
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { LlmEngine } from "../../src/replica/llm/engine.ts";
import { loadTinyLm } from "../../src/replica/llm/load-tiny-lm.ts";
import { tinyLmGenerator } from "../../src/replica/llm/tiny-lm.ts";
import { sseData } from "../fixtures/sse.ts";
import { startStack, until } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
const STREAMS = 20;
const TOKENS = 200;
const messages = (i: number) => [{ role: "user", content: `Describe harbour number ${i} at dawn.` }];

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-migration") });
  for (let i = 1; i <= 3; i++) {
    await stack.startReplica("mig", { id: `mig-${i}`, maxOngoing: 20, drainTimeoutMs: 3_000, backendArgs: ["--backend", "llm", "--model", "tiny-lm", "--decode-ms", "100"] });
  }
  await until("3 ready replicas", async () => ((await stack.deploymentState("mig")).snapshot.replicas.filter((r) => r.load.state === "ready").length === 3 ? true : undefined), 30_000);
}, 300_000);

afterAll(async () => {
  await stack?.dispose();
});

describe("a replica draining with a 3 s deadline", () => {
  it("hands over the streams it cannot finish; the edge continues them: all 20 complete with the uninterrupted greedy text", async () => {
    // The uninterrupted answers, from the engine itself.
    const { model } = await loadTinyLm({ warmupRuns: 0 });
    const engine = new LlmEngine({ model: tinyLmGenerator(model), kvBlocks: 4096 });
    const expected: string[] = [];
    for (let i = 0; i < STREAMS; i++) {
      let text = "";
      for await (const piece of engine.generate({ prompt: engine.model.prompts.chat(messages(i)), maxTokens: TOKENS, sampling: { temperature: 0, topP: 1 }, ignoreEos: true })) text += piece;
      expected.push(text);
    }

    const live: { replica: string; chunks: number }[] = [];
    let drained: string | undefined;
    let drainedExit: Promise<number | null> | undefined;
    const results = await Promise.all(
      Array.from({ length: STREAMS }, async (_, i) => {
        const res = await fetch(`${stack.url}/v1/chat/completions`, {
          method: "POST",
          headers: { "content-type": "application/json" },
          body: JSON.stringify({ model: "tiny-lm", messages: messages(i), max_tokens: TOKENS, temperature: 0, ignore_eos: true, stream: true, stream_options: { include_usage: true } }),
        });
        expect(res.status).toBe(200);
        const s = { replica: res.headers.get("x-switchyard-replica")!, chunks: 0 };
        live.push(s);
        let text = "";
        let error = false;
        let done = false;
        let usage: unknown;
        for await (const data of sseData(res.body!)) {
          if (data === "[DONE]") {
            done = true;
            continue;
          }
          const chunk = JSON.parse(data) as { error?: unknown; choices?: { delta?: { content?: string } }[]; usage?: unknown };
          if (chunk.error) error = true;
          if (chunk.usage) usage = chunk.usage;
          const piece = chunk.choices?.[0]?.delta?.content;
          if (!piece) continue;
          text += piece;
          s.chunks++;
          // Once every stream is under way, the busiest replica gets its notice (SIGTERM: drain within 3 s).
          if (drained === undefined && live.length === STREAMS && live.every((x) => x.chunks >= 3)) {
            const by = new Map<string, number>();
            for (const x of live) by.set(x.replica, (by.get(x.replica) ?? 0) + 1);
            drained = [...by.entries()].sort((a, b) => b[1] - a[1])[0]![0];
            const victim = stack.replicas.get(drained)!;
            drainedExit = victim.exited;
            process.kill(victim.child.pid!, "SIGTERM");
          }
        }
        return { text, error, done, usage, replica: s.replica };
      }),
    );
    expect(drained).toBeDefined();
    // It drained and exited cleanly.
    expect(await drainedExit).toBe(0);
    for (const [i, r] of results.entries()) {
      expect({ i, error: r.error, done: r.done }).toEqual({ i, error: false, done: true });
      expect(r.text).toBe(expected[i]);
      expect(r.usage).toEqual({ prompt_tokens: engine.model.prompts.chat(messages(i)).length, completion_tokens: TOKENS, total_tokens: engine.model.prompts.chat(messages(i)).length + TOKENS });
    }
    expect(results.filter((r) => r.replica === drained).length).toBeGreaterThan(0);
    await until("the handovers in the edge's log", () => (stack.logLines.some((l) => l.includes('"msg":"stream migrated"') && l.includes(`"from":"${drained}"`)) ? true : undefined), 10_000);
  }, 120_000);
});
