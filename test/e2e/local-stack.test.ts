// The stack `npm start` runs (functions/ as shipped), with the seed's 48 "hi"
// replicas: real workerd, real replica processes, real ONNX inference.
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startStack } from "./stack-fixture.ts";

const exec = promisify(execFile);
let stack: Awaited<ReturnType<typeof startStack>>;

beforeAll(async () => {
  stack = await startStack({ replicas: { hello: 48, vad: 2, echo: 1 } });
});
afterAll(async () => {
  await stack?.dispose();
});

describe("local stack (functions/ as shipped)", () => {
  it("answers hi through the proxy, naming the replica and the request id", async () => {
    const res = await fetch(`${stack.url}/hello`, { headers: { "x-request-id": "req-123" } });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe("hi");
    expect(res.headers.get("x-request-id")).toBe("req-123");
    expect(res.headers.get("x-switchyard-replica")).toMatch(/^hello-\d+$/);
    const generated = await fetch(`${stack.url}/hello`);
    expect(generated.headers.get("x-request-id")).toMatch(/^[0-9a-f-]{36}$/);
    // Internal protocol headers stay between proxy and replica.
    expect(generated.headers.get("x-switchyard-load")).toBeNull();
  });

  it("spreads requests over the replicas", async () => {
    const seen = new Set<string>();
    await Promise.all(
      Array.from({ length: 300 }, async () => {
        const res = await fetch(`${stack.url}/hello`);
        await res.text();
        seen.add(res.headers.get("x-switchyard-replica")!);
      }),
    );
    expect(seen.size).toBeGreaterThan(10);
  });

  it("serves Ray-style system routes", async () => {
    // functions/ as shipped: the edge-inference deployment is an opt-in example (test/e2e/edge-inference.test.ts).
    expect(await (await fetch(`${stack.url}/-/routes`)).json()).toEqual({ "/echo": "echo", "/hello": "hello", "/llm": "llm", "/vad": "vad" });
    const health = await fetch(`${stack.url}/-/healthz`);
    expect(health.status).toBe(200);
    expect(await health.json()).toMatchObject({ status: "ok", ready_replicas: { hello: 48, vad: 2, echo: 1 }, edge_deployments: [] });
  });

  it("runs real ONNX inference (Silero VAD) with outputs that depend on the input", async () => {
    const example = await (await fetch(`${stack.url}/vad/example`)).json();
    const speech = await fetch(`${stack.url}/vad`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(example) });
    expect(speech.status).toBe(200);
    expect(speech.headers.get("x-switchyard-replica")).toMatch(/^vad-\d+$/);
    const s = (await speech.json()) as { speech: boolean; maxProbability: number; probabilities: number[] };
    expect(s.speech).toBe(true);
    expect(s.maxProbability).toBeGreaterThan(0.5);

    const silence = { samples: new Array(1024).fill(0) };
    const quiet = (await (await fetch(`${stack.url}/vad`, { method: "POST", body: JSON.stringify(silence) })).json()) as typeof s;
    expect(quiet.speech).toBe(false);
    expect(quiet.maxProbability).toBeLessThan(0.2);
    expect(quiet.probabilities).toHaveLength(2);
  });

  it("passes the model's input errors through as JSON 400s", async () => {
    const bad = await fetch(`${stack.url}/vad`, { method: "POST", body: JSON.stringify({ samples: "loud" }) });
    expect(bad.status).toBe(400);
    expect(await bad.json()).toMatchObject({ error: { code: "bad_request" } });
    const notJson = await fetch(`${stack.url}/vad`, { method: "POST", body: "{oops" });
    expect(notJson.status).toBe(400);
    expect(await notJson.json()).toMatchObject({ error: { code: "bad_request" } });
  });

  it("makes no Durable Object call per request in steady state", async () => {
    const before = await stack.deploymentState("hello");
    const started = Date.now();
    let sent = 0;
    await Promise.all(
      Array.from({ length: 20 }, async () => {
        for (let i = 0; i < 100; i++) {
          const res = await fetch(`${stack.workerdUrl}/hello`);
          expect(await res.text()).toBe("hi");
          sent++;
        }
      }),
    );
    const seconds = (Date.now() - started) / 1000;
    const after = await stack.deploymentState("hello");
    const calls = Number(after.router.snapshotCalls) - Number(before.router.snapshotCalls) - 1; // -1: the state query itself
    expect(sent).toBe(2000);
    // One snapshot refresh per isolate per second at most, however many requests.
    expect(calls).toBeLessThanOrEqual(Math.ceil(seconds) + 2);
    console.log(`Durable Object snapshot calls: ${calls} for ${sent} requests in ${seconds.toFixed(1)} s (${((calls / sent) * 1000).toFixed(2)} per 1,000)`);
  });

  it("completes the seed's exact ApacheBench run (48 replicas, -n 10000 -c 100) with 0 failures and no stalls", async () => {
    const { stdout } = await exec("ab", ["-n", "10000", "-c", "100", `${stack.url}/hello`], { timeout: 90_000, maxBuffer: 1 << 20 });
    const num = (label: string) => Number(new RegExp(`${label}:\\s+([\\d.]+)`).exec(stdout)?.[1]);
    expect(num("Complete requests")).toBe(10000);
    expect(num("Failed requests")).toBe(0);
    expect(stdout).not.toMatch(/Non-2xx responses/);
    // A stall holds each connection ~5 s (workerd's idle timeout): every request would
    // take at least that (p50 >= 5,000 ms) and 100 connections would do 20 req/s. Both
    // bounds sit at half of that signature, not at this machine's speed: a loaded
    // machine is slower (151 req/s with other work running), never 5 s per request.
    const p50 = Number(/50%\s+(\d+)/.exec(stdout)?.[1]);
    expect(p50).toBeLessThan(2_500);
    expect(num("Requests per second")).toBeGreaterThan(40);
    console.log(`ab through the proxy: ${num("Requests per second")} req/s, p50 ${/50%\s+(\d+)/.exec(stdout)?.[1]} ms, p99 ${/99%\s+(\d+)/.exec(stdout)?.[1]} ms`);
  });

  it("keeps ab -k (HTTP/1.0 keep-alive) working", async () => {
    const { stdout } = await exec("ab", ["-k", "-n", "2000", "-c", "50", `${stack.url}/hello`], { timeout: 60_000 });
    expect(Number(/Failed requests:\s+(\d+)/.exec(stdout)?.[1])).toBe(0);
    expect(Number(/Complete requests:\s+(\d+)/.exec(stdout)?.[1])).toBe(2000);
  });
});
