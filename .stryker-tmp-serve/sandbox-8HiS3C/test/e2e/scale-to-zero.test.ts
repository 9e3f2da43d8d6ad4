// @ts-nocheck
// Scale from zero and back on the real stack with the local actuator (src/local/actuator.ts,
// docs/admission.md): a burst for a deployment with no replica is held at the edge, the
// held requests raise the desired count from 0 at once, the actuator starts replicas, the
// burst is served; idle, the count returns to 0 and the replicas drain and exit 0. Three
// cycles in a row. Each step waits for an event (answers, the stack's replica set), never a time.
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../fixtures/wait.ts";
import type { ReplicaProcess } from "../../src/local/stack.ts";
import { startStack } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
/**
 * Every replica start the actuator began, as it began it. Read after a burst, the stack's
 * own set may lack one still starting (on a busy machine a second replica can register
 * after the burst was served by the first) or one that already drained and left.
 */
const startsByActuator: Promise<ReplicaProcess>[] = [];

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/scale-to-zero"), autoscale: true });
  // The actuator starts replicas through the stack's startReplica: record each start it begins.
  const start = stack.startReplica.bind(stack);
  stack.startReplica = (...args) => {
    const r = start(...args);
    startsByActuator.push(r);
    return r;
  };
});
afterAll(async () => {
  await stack?.dispose();
});

const running = () => [...stack.replicas.values()].filter((r) => r.deployment === "zero");

/** docs/recipes/keda-scaledobject.yaml's trigger: the path KEDA polls (for this test's deployment) and where it reads the value. */
function kedaTrigger(): { path: string; valueLocation: string; targetValue: number } {
  const recipe = readFileSync(join(import.meta.dirname, "../../docs/recipes/keda-scaledobject.yaml"), "utf8");
  const field = (name: string) => new RegExp(`^\\s+${name}: "([^"]+)"`, "m").exec(recipe)?.[1] ?? "";
  return { path: new URL(field("url")).pathname.replace("/deployments/llm/", "/deployments/zero/"), valueLocation: field("valueLocation"), targetValue: Number(field("targetValue")) };
}

async function autoscale(): Promise<{ current: number; desired: number }> {
  const res = await fetch(`${stack.url}/-/deployments/zero/autoscale`, { headers: { authorization: `Bearer ${stack.adminSecret}` } });
  return (await res.json()) as { current: number; desired: number };
}

describe("scale from zero with the local actuator", () => {
  it("starts at zero, serves a burst held for its first replica, and returns to zero, three times", async () => {
    expect(running()).toHaveLength(0);
    expect(await autoscale()).toMatchObject({ current: 0, desired: 0 });
    // At zero the edge is ready: the deployment holds requests until a replica starts (issue 52: it was 503).
    const health = await fetch(`${stack.url}/-/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", scaled_to_zero: ["zero"] });
    const keda = kedaTrigger();
    expect(keda).toEqual({ path: "/-/deployments/zero/autoscale", valueLocation: "desired", targetValue: 1 });
    /** The pods KEDA's metrics-api scaler asks for: 0 while inactive (value ≤ 0), else ceil(value / targetValue). */
    const kedaReplicas = async () => {
      const answer = (await (await fetch(`${stack.url}${keda.path}`, { headers: { authorization: `Bearer ${stack.adminSecret}` } })).json()) as Record<string, unknown>;
      const value = answer[keda.valueLocation];
      expect(typeof value).toBe("number");
      return (value as number) > 0 ? Math.ceil((value as number) / keda.targetValue) : 0;
    };
    expect(await kedaReplicas()).toBe(0);
    for (let cycle = 0; cycle < 3; cycle++) {
      const answers = Promise.all(
        Array.from({ length: 20 }, async (_, i) => {
          const res = await fetch(`${stack.url}/zero/`, { method: "POST", body: `cycle ${cycle} request ${i}` });
          return { status: res.status, body: await res.text(), replica: res.headers.get("x-switchyard-replica") };
        }),
      );
      // The held burst raises the count from 0 at once: KEDA would scale the Deployment up.
      await waitFor("KEDA's recipe to ask for a replica", async () => (await kedaReplicas()) >= 1, 20_000, 50);
      const burst = await answers;
      expect(burst.map((r) => r.status)).toEqual(burst.map(() => 200));
      burst.forEach((r, i) => expect(r.body).toContain(`cycle ${cycle} request ${i}`));
      // The replicas started for this cycle, each once registered.
      const started = await Promise.all(startsByActuator.splice(0));
      expect(started.length).toBeGreaterThanOrEqual(1);
      // Every answer came from a replica the actuator started for this cycle.
      const ids = new Set(started.map((r) => r.id));
      for (const r of burst) expect(ids.has(r.replica!)).toBe(true);
      // Idle: the desired count returns to 0, and each replica drains and exits cleanly.
      const exits = await Promise.all(started.map((r) => r.exited));
      expect(exits).toEqual(started.map(() => 0));
      await waitFor("the deployment back at zero", async () => running().length === 0 && (await autoscale()).current === 0, 30_000, 50);
      expect((await autoscale()).desired).toBe(0);
      expect(await kedaReplicas()).toBe(0);
    }
  });
});
