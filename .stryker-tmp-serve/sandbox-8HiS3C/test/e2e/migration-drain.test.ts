// @ts-nocheck
// Migration on drain (issue 35): a replica told to drain with a 3 s deadline (a spot
// notice: SIGTERM with --drain-timeout-ms 3000) hands over the streams it cannot finish
// by then, each ended with a `stream_handover` event; the edge continues them on the
// other replicas. 20 greedy streams that need 20 s each all complete, their text the
// model's own uninterrupted greedy text (computed here, in-process, by the same engine).
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { greedyStreams, uninterrupted } from "./greedy-streams.ts";
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
    const expected = await uninterrupted(messages, STREAMS, TOKENS);
    let drained: string | undefined;
    let drainedExit: Promise<number | null> | undefined;
    const results = await greedyStreams(stack.url, messages, STREAMS, TOKENS, (live) => {
      // Once every stream is under way, the busiest replica gets its notice (SIGTERM: drain within 3 s).
      if (drained !== undefined || !live.every((x) => x.chunks >= 3)) return;
      const by = new Map<string, number>();
      for (const x of live) by.set(x.replica, (by.get(x.replica) ?? 0) + 1);
      drained = [...by.entries()].sort((a, b) => b[1] - a[1])[0]![0];
      const victim = stack.replicas.get(drained)!;
      drainedExit = victim.exited;
      process.kill(victim.child.pid!, "SIGTERM");
    });
    expect(drained).toBeDefined();
    // It drained and exited cleanly.
    expect(await drainedExit).toBe(0);
    for (const [i, r] of results.entries()) {
      expect({ i, error: r.error, done: r.done }).toEqual({ i, error: false, done: true });
      expect(r.text).toBe(expected[i]!.text);
      expect(r.usage).toEqual(expected[i]!.usage);
    }
    expect(results.filter((r) => r.replica === drained).length).toBeGreaterThan(0);
    await until("the handovers in the edge's log", () => (stack.logLines.some((l) => l.includes('"msg":"stream migrated"') && l.includes(`"from":"${drained}"`)) ? true : undefined), 10_000);
  }, 120_000);
});
