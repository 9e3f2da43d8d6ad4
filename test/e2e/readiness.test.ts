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

  it("/-/livez answers while the stack has no replica ready", async () => {
    stack = new LocalStack({ port: 0, stateDir, functionsDir: join(import.meta.dirname, "fixtures/readiness"), replicas: { hello: 0 } });
    await stack.start();
    expect(await status(`${stack.url}/-/livez`)).toBe(200);
    const health = await fetch(`${stack.url}/-/healthz`);
    expect(health.status).toBe(503);
    expect(await health.json()).toMatchObject({ status: "no_ready_replica", ready_replicas: { hello: 0 }, waiting_for: ["hello"] });
  });
});
