// @ts-nocheck
// /-/healthz is a readiness check, and a restarted local stack never routes to the
// previous run's dead replicas (issue 16 §1). The stack is stopped the way a
// terminal's Ctrl-C can stop it (every process killed at once, so no replica
// deregisters) and started again, three times, on the same state directory; healthz
// is polled from the moment the public port answers.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { LocalStack } from "../../src/local/stack.ts";
import { freePort } from "./stack-fixture.ts";

const stateDir = mkdtempSync(join(tmpdir(), "switchyard-e2e-ready-"));
let stack: LocalStack | undefined;

afterAll(async () => {
  await stack?.kill();
  rmSync(stateDir, { recursive: true, force: true });
});


const status = async (url: string): Promise<number> => {
  try {
    const res = await fetch(url);
    await res.arrayBuffer();
    return res.status;
  } catch {
    return 0; // not listening yet
  }
};

describe("readiness across restarts", () => {
  it("healthz is 200 only once /hello is served, in each of three restarts, and 200 requests sent then all succeed", async () => {
    const port = await freePort();
    const base = `http://127.0.0.1:${port}`;
    const runs: { polls: number; before200: number; violations: string[] }[] = [];
    for (let run = 0; run < 4; run++) {
      stack = new LocalStack({ port, stateDir, functionsDir: join(import.meta.dirname, "fixtures/readiness"), freshState: run === 0 });
      const starting = stack.start();
      let done = false;
      void starting.finally(() => (done = true));
      const violations: string[] = [];
      let polls = 0;
      let before200 = 0;
      // Poll from the start: healthz, then /hello at once; a 200 from healthz while /hello fails is the bug.
      for (;;) {
        const health = await status(`${base}/-/healthz`);
        if (health !== 0) polls++;
        if (health === 200) {
          const hello = await status(`${base}/hello`);
          if (hello !== 200) violations.push(`healthz 200 but /hello ${hello}`);
          break;
        }
        if (health !== 0) before200++;
        if (done && health !== 200 && polls > 400) throw new Error(`healthz never turned 200 (last ${health})`);
        await new Promise((r) => setTimeout(r, 25));
      }
      // As soon as healthz says so: 200 requests, 4 at a time.
      let failed = 0;
      await Promise.all(
        Array.from({ length: 4 }, async () => {
          for (let i = 0; i < 50; i++) if ((await status(`${base}/hello`)) !== 200) failed++;
        }),
      );
      expect(failed, `run ${run}`).toBe(0);
      await starting;
      runs.push({ polls, before200, violations });
      await stack.kill();
      stack = undefined;
    }
    console.log(`readiness: ${runs.map((r, i) => `run ${i}: ${r.before200} polls before 200`).join("; ")}`);
    for (const r of runs) expect(r.violations).toEqual([]);
  }, 180_000);

  it("a stack killed with 6 replicas starts again with its own count: the dead ones it restores are not the autoscaler's starting point (issue 52)", async () => {
    const dir = mkdtempSync(join(tmpdir(), "switchyard-e2e-restart-"));
    const functionsDir = join(import.meta.dirname, "fixtures/restart-autoscale");
    try {
      stack = new LocalStack({ port: 0, stateDir: dir, functionsDir, replicas: { hello: 6 } });
      await stack.start();
      expect((await stack.deploymentState("hello")).snapshot.replicas).toHaveLength(6);
      await stack.kill();
      // The list of the previous run's replicas is lost too (as for replicas started in
      // another terminal): nothing deregisters them, so the routing object restores 6
      // members it has not heard from, and they stay fresh for STALE_AFTER_MS.
      rmSync(join(dir, "replicas.json"));
      stack = new LocalStack({ port: 0, stateDir: dir, functionsDir, autoscale: true });
      await stack.start();
      // Wait for the event that settles the count: no member the stack did not start is left
      // (the dead ones go stale, or one the stack starts takes over a dead one's id).
      const running = stack.replicas;
      let state = await stack.deploymentState("hello");
      while (state.snapshot.replicas.some((r) => !running.has(r.id))) {
        await new Promise((r) => setTimeout(r, 100));
        state = await stack.deploymentState("hello");
      }
      const res = await fetch(`${stack.workerdUrl}/-/deployments/hello/autoscale`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
      // The actuator asked every 250 ms meanwhile; the bug latched 8 (6 dead + 2 new) and started 6 more.
      expect(await res.json()).toMatchObject({ current: 2, desired: 2 });
      expect([...stack.replicas.values()].filter((r) => r.deployment === "hello")).toHaveLength(2);
      await stack.kill();
      stack = undefined;
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it("/-/livez answers while the stack has no replica ready", async () => {
    stack = new LocalStack({ port: 0, stateDir, functionsDir: join(import.meta.dirname, "fixtures/readiness"), replicas: { hello: 0 } });
    await stack.start();
    expect(await status(`${stack.url}/-/livez`)).toBe(200);
    const health = await fetch(`${stack.url}/-/healthz`);
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ status: "no_ready_replica", ready_replicas: { hello: 0 }, waiting_for: ["hello"] });
  });
});
