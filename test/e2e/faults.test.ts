// Replica faults under concurrent load, with real processes: SIGKILL and a
// SIGTERM drain (streams included).
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixtureFunctions, runLoad, sleep, startStack } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;

beforeAll(async () => {
  stack = await startStack({ functionsDir: fixtureFunctions });
});
afterAll(async () => {
  await stack?.dispose();
});

async function waitUntilGone(deployment: string, replicaId: string, timeoutMs: number): Promise<number> {
  const started = Date.now();
  while (Date.now() - started < timeoutMs) {
    const state = await stack.deploymentState(deployment);
    if (!state.snapshot.replicas.some((r) => r.id === replicaId)) return Date.now() - started;
    await sleep(50);
  }
  return Infinity;
}

describe("replica killed with SIGKILL", () => {
  it("leaves routing within 3 s and no request fails", async () => {
    const victim = [...stack.replicas.values()].find((r) => r.deployment === "hello")!;
    const load = runLoad(`${stack.url}/hello`, { concurrency: 8, durationMs: 4_000, expectBody: "hi" });
    await sleep(1_000);
    victim.child.kill("SIGKILL");
    const goneAfter = await waitUntilGone("hello", victim.id, 5_000);
    const result = await load;
    console.log(`SIGKILL: ${result.sent} sent, ${result.failed.length} failed; left the routing snapshot after ${goneAfter} ms`);
    expect(goneAfter).toBeLessThanOrEqual(3_000);
    expect(result.failed).toEqual([]);
    expect(result.ok).toBeGreaterThan(100);
    await victim.exited;
  });
});

describe("replica drained with SIGTERM", () => {
  it("finishes in-flight streams, takes no new work, deregisters, and no request fails", async () => {
    const replicas = [...stack.replicas.values()].filter((r) => r.deployment === "stream");
    expect(replicas.length).toBe(2);
    const victim = replicas[0]!;
    // Long streams on both replicas (2 s each) and a steady stream of short requests.
    const streams = Array.from({ length: 6 }, () =>
      fetch(`${stack.url}/stream?chunks=10&interval_ms=200`).then(async (r) => ({ status: r.status, replica: r.headers.get("x-switchyard-replica"), body: await r.text() })),
    );
    const short = runLoad(`${stack.url}/stream?chunks=1`, { concurrency: 4, durationMs: 3_500, expectBody: "chunk 0\n" });
    await sleep(500);
    victim.child.kill("SIGTERM");
    const exitCode = await victim.exited;
    const results = await Promise.all(streams);
    const shortResult = await short;
    console.log(`SIGTERM drain: ${results.length} streams, ${shortResult.sent} short requests, ${shortResult.failed.length} failed`);
    expect(exitCode).toBe(0);
    const full = Array.from({ length: 10 }, (_, i) => `chunk ${i}\n`).join("");
    for (const r of results) {
      expect(r.status).toBe(200);
      expect(r.body).toBe(full);
    }
    // Some of the streams were on the drained replica and still completed.
    expect(results.some((r) => r.replica === victim.id)).toBe(true);
    expect(shortResult.failed).toEqual([]);
    const state = await stack.deploymentState("stream");
    expect(state.snapshot.replicas.map((r) => r.id)).not.toContain(victim.id);
  });
});
