// @ts-nocheck
// Metrics, logs, the autoscaling signal (with its webhook) and admin drains on
// the real stack.
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { runLoad, sleep, startStack, until } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
let hook: Server;
const hookCalls: { desired: number; current: number; deployment: string }[] = [];
let functionsDir = "";

beforeAll(async () => {
  hook = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      hookCalls.push(JSON.parse(body));
      res.end("ok");
    });
  });
  await new Promise<void>((r) => hook.listen(0, "127.0.0.1", () => r()));
  const port = (hook.address() as { port: number }).port;
  functionsDir = mkdtempSync(join(tmpdir(), "switchyard-obs-functions-"));
  const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));
  writeFileSync(
    join(functionsDir, "hello.ts"),
    `import { defineDeployment } from ${config};
export default defineDeployment({ name: "hello", routePrefix: "/hello", access: { public: true }, backend: { kind: "text", text: "hi" }, localReplicas: 2, policy: { idempotent: true } });
`,
  );
  writeFileSync(
    join(functionsDir, "scaled.ts"),
    `import { defineDeployment } from ${config};
export default defineDeployment({
  name: "scaled", routePrefix: "/scaled", access: { public: true }, backend: { kind: "echo" }, localReplicas: 1, maxOngoingRequests: 32,
  policy: { idempotent: true },
  autoscaling: { minReplicas: 1, maxReplicas: 5, targetOngoingRequests: 1, lookBackPeriodS: 2, upscaleDelayS: 0, downscaleDelayS: 0, webhook: "http://127.0.0.1:${port}/hook" },
});
`,
  );
  writeFileSync(
    join(functionsDir, "quiet.ts"),
    `import { defineDeployment } from ${config};
export default defineDeployment({ name: "quiet", routePrefix: "/quiet", access: { public: true }, backend: { kind: "text", text: "hi" }, localReplicas: 2 });
`,
  );
  // Four edge isolates, each with its own counts and its own flushes (the first behind stack.url).
  stack = await startStack({ functionsDir, edgeIsolates: 4 });
});
afterAll(async () => {
  await stack?.dispose();
  await new Promise<void>((r) => hook?.close(() => r()));
  rmSync(functionsDir, { recursive: true, force: true });
});

const admin = () => ({ authorization: `Bearer ${stack.adminSecret}` });

async function metricValue(line: string): Promise<number | null> {
  const text = await (await fetch(`${stack.url}/-/metrics`, { headers: admin() })).text();
  const found = text.split("\n").find((l) => l.startsWith(`${line} `));
  return found ? Number(found.slice(line.length + 1)) : null;
}

describe("Prometheus metrics", () => {
  it("needs the admin secret", async () => {
    expect((await fetch(`${stack.url}/-/metrics`)).status).toBe(401);
  });

  it("counts the last requests before a quiet spell, and keeps every count when the Telemetry objects go: 1,000 over 4 isolates, exactly", async () => {
    const line = 'switchyard_requests_total{deployment="quiet",code="2xx"}';
    expect((await metricValue(line)) ?? 0).toBe(0);
    const N = 1_000;
    let sent = 0;
    await Promise.all(
      Array.from({ length: 8 }, async (_, w) => {
        while (sent < N) {
          const i = sent++;
          const res = await fetch(`${stack.edgeUrls[(i + w) % 4]}/quiet`);
          expect(await res.text()).toBe("hi");
        }
      }),
    );
    // No request after these: each isolate sends its last counts when its flush is due, by itself.
    await until("every isolate's last counts", async () => ((await metricValue(line)) === N ? true : undefined), 20_000);
    // The Telemetry objects go (restarted: an idle object is evicted from memory the same way), and come back with their totals.
    const restart = await fetch(`${stack.workerdUrl}/-/metrics/restart`, { method: "POST", headers: admin() });
    expect(restart.status).toBe(200);
    expect(await metricValue(line)).toBe(N);
    // And after a quiet spell past the runtime's own eviction of idle objects (~10 s here), still exactly N.
    await sleep(15_000);
    expect(await metricValue(line)).toBe(N);
    expect(await metricValue('switchyard_time_to_first_byte_seconds_count{deployment="quiet"}')).toBe(N);
  }, 120_000);

  it("counts every proxied request once, summed from the isolate's background flushes", async () => {
    const before = (await metricValue('switchyard_requests_total{deployment="hello",code="2xx"}')) ?? 0;
    const result = await runLoad(`${stack.url}/hello`, { concurrency: 4, durationMs: 1_000, expectBody: "hi" });
    expect(result.failed).toEqual([]);
    // Flushes go out at most every 2 s, triggered by requests.
    await sleep(2_100);
    await (await fetch(`${stack.url}/hello`)).text();
    const expected = before + result.ok + 1;
    let seen: number | null = null;
    for (let i = 0; i < 50 && seen !== expected; i++) {
      await sleep(100);
      seen = await metricValue('switchyard_requests_total{deployment="hello",code="2xx"}');
    }
    expect(seen).toBe(expected);
    expect(await metricValue('switchyard_replicas{deployment="hello",state="ready"}')).toBe(2);
    const count = await metricValue('switchyard_time_to_first_byte_seconds_count{deployment="hello"}');
    expect(count).toBe(expected);
    expect(await metricValue('switchyard_time_to_first_byte_seconds_bucket{deployment="hello",le="+Inf"}')).toBe(expected);
  });

  it("writes one JSON log line per request with id, deployment, replica, status and timings", async () => {
    const res = await fetch(`${stack.url}/hello`, { headers: { "x-request-id": "log-check-1" } });
    await res.text();
    let line: Record<string, unknown> | undefined;
    for (let i = 0; i < 30 && !line; i++) {
      await sleep(50);
      const raw = stack.logLines.find((l) => l.includes('"request_id":"log-check-1"'));
      if (raw) line = JSON.parse(raw.slice(raw.indexOf("{")));
    }
    expect(line).toMatchObject({ msg: "request", request_id: "log-check-1", deployment: "hello", status: 200, replica: res.headers.get("x-switchyard-replica"), attempts: 1 });
    expect(typeof line!.ttfb_ms).toBe("number");
  });
});

describe("autoscaling signal", () => {
  it("asks for more replicas under load, as JSON, as a metric and through the webhook", async () => {
    const idle = (await (await fetch(`${stack.url}/-/deployments/scaled/autoscale`, { headers: admin() })).json()) as { desired: number; enabled: boolean };
    expect(idle).toMatchObject({ enabled: true, desired: 1 });
    // 6 requests in flight on one replica, target 1 per replica: the fleet should grow to the max of 5.
    const load = runLoad(`${stack.url}/scaled?delay_ms=300`, { concurrency: 6, durationMs: 7_000 });
    let desired = 0;
    for (let i = 0; i < 70 && desired < 5; i++) {
      await sleep(100);
      desired = ((await (await fetch(`${stack.url}/-/deployments/scaled/autoscale`, { headers: admin() })).json()) as { desired: number }).desired;
    }
    const result = await load;
    expect(result.failed).toEqual([]);
    expect(desired).toBe(5);
    expect(await metricValue('switchyard_desired_replicas{deployment="scaled"}')).toBeGreaterThanOrEqual(1);
    // The routing object's alarm (every 5 s) told the webhook.
    for (let i = 0; i < 60 && !hookCalls.some((c) => c.desired > 1); i++) await sleep(100);
    expect(hookCalls.find((c) => c.desired > 1)).toMatchObject({ deployment: "scaled", current: 1 });
  });
});

describe("admin drain", () => {
  it("drains a replica on request: it finishes its work, leaves, exits 0, and no request fails", async () => {
    const victim = [...stack.replicas.values()].find((r) => r.deployment === "hello")!;
    const load = runLoad(`${stack.url}/hello`, { concurrency: 4, durationMs: 3_000, expectBody: "hi" });
    await sleep(500);
    const res = await fetch(`${stack.url}/-/deployments/hello/replicas/${victim.id}/drain`, { method: "POST", headers: admin() });
    expect(res.status).toBe(200);
    expect(await victim.exited).toBe(0);
    const result = await load;
    expect(result.failed).toEqual([]);
    const state = await stack.deploymentState("hello");
    expect(state.snapshot.replicas.map((r) => r.id)).not.toContain(victim.id);
    const missing = await fetch(`${stack.url}/-/deployments/hello/replicas/nobody/drain`, { method: "POST", headers: admin() });
    expect(missing.status).toBe(404);
  });
});
