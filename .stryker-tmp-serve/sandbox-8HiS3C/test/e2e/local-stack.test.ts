// @ts-nocheck
// The stack `npm start` runs (functions/ as shipped), with the seed's 48 "hi"
// replicas: real workerd, real replica processes, real ONNX inference.
import { execFile, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { waitFor } from "../fixtures/wait.ts";
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
    expect(await (await fetch(`${stack.url}/-/routes`)).json()).toEqual({ "/echo": "echo", "/hello": "hello", "/llm": "llm", "/team": "team", "/vad": "vad" });
    // On a busy machine the 48 hello replicas' first reports arrive over seconds: wait (bounded)
    // until the edge's view holds them all, then check the whole answer.
    let body: { ready_replicas?: Record<string, number> } = {};
    await waitFor(
      "all 48 hello replicas ready in /-/healthz",
      async () => {
        const health = await fetch(`${stack.url}/-/healthz`);
        expect(health.status).toBe(200);
        body = (await health.json()) as typeof body;
        return (body.ready_replicas?.hello ?? 0) >= 48;
      },
      60_000,
      100,
    );
    // A caller without a key sees only the public deployments' counts (team is private).
    expect(body).toMatchObject({ status: "ok", ready_replicas: { hello: 48, vad: 2, echo: 1 }, edge_deployments: [] });
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
    // Bounded by the slowest rate asserted below (40 req/s: 250 s), not by this machine's idle pace:
    // 90 s cut a run at load average 10 after 9,000 clean requests.
    const { stdout } = await exec("ab", ["-n", "10000", "-c", "100", `${stack.url}/hello`], { timeout: 260_000, maxBuffer: 1 << 20 });
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
  }, 280_000);

  it("keeps ab -k (HTTP/1.0 keep-alive) working", async () => {
    const { stdout } = await exec("ab", ["-k", "-n", "2000", "-c", "50", `${stack.url}/hello`], { timeout: 60_000 });
    expect(Number(/Failed requests:\s+(\d+)/.exec(stdout)?.[1])).toBe(0);
    expect(Number(/Complete requests:\s+(\d+)/.exec(stdout)?.[1])).toBe(2000);
  });
});

/**
 * The README's shell commands, run as a newcomer would paste them, against this stack
 * (functions/ as shipped): every `curl` and `npx switchyard` line of every ```sh block,
 * with EDGE, ADMIN and SWITCHYARD_* set and the README's http://127.0.0.1:8787 pointed
 * at the stack. Lines that only document (a `…` placeholder, a command that runs until
 * Ctrl-C, starts a process or deploys, the load tests run above) are left out. Each line
 * must exit 0; a line whose comment says "→ NNN" must answer that status, and "→ hi…"
 * that text. The README cannot drift from the code without this failing.
 */
describe("the README's commands", () => {
  const readme = readFileSync(join(import.meta.dirname, "../../README.md"), "utf8");
  // "Use as a library" runs against a project of its own, not this stack: library-package.test.ts runs it.
  const library = readme.indexOf("## Use as a library");
  const blocks = [...(readme.slice(0, library) + readme.slice(readme.indexOf("\n## ", library + 1))).matchAll(/```sh\n([\s\S]*?)```/g)].map((m) => m[1]!);
  /** Command lines of a block, continuation lines joined; comments and blanks dropped. */
  const commands = (block: string) =>
    block
      .replace(/\\\n\s*/g, " ")
      .split("\n")
      .map((l) => l.trim())
      .filter((l) => l !== "" && !l.startsWith("#"));
  const runnable = (line: string) =>
    /^(curl |npx switchyard |KEY=|[A-Z_]+=\$\()/.test(line) &&
    !line.includes("…") &&
    !/Ctrl-C|npx switchyard replica |example\.workers\.dev|example\.com/.test(line);

  it("the functions/hello.ts the README shows is the file as shipped", () => {
    const shipped = readFileSync(join(import.meta.dirname, "../../functions/hello.ts"), "utf8").trim();
    expect(readme).toContain(shipped);
  });

  it("every curl and switchyard command runs against the stack, answering as its comment says", async () => {
    const work = mkdtempSync(join(tmpdir(), "readme-commands-"));
    const ran: string[] = [];
    try {
      // The CLI's drain example takes a hello replica away: last, after everything that needs them.
      const lines = blocks.flatMap(commands).filter(runnable);
      const drains = lines.filter((l) => l.includes(" drain "));
      for (const line of [...lines.filter((l) => !l.includes(" drain ")), ...drains]) {
        const command = line.replaceAll("http://127.0.0.1:8787", stack.url);
        const [code, rest] = command.split(/\s+#\s+/, 2) as [string, string | undefined];
        const env = { ...process.env, EDGE: stack.url, ADMIN: stack.adminSecret, SWITCHYARD_EDGE: stack.url, SWITCHYARD_ADMIN_SECRET: stack.adminSecret, NO_COLOR: "1" };
        // One shell for the whole README, so assignments (KEY=…) carry to the lines after them.
        ran.push(code);
        const script = [...ran.slice(0, -1).filter((c) => /^[A-Z_]+=/.test(c)), "set -o pipefail", code].join("\n");
        let out: string;
        try {
          // `npx switchyard` runs "in this repository", as the README says; the rest in a scratch folder (key.json).
          const cwd = code.startsWith("npx ") ? join(import.meta.dirname, "../..") : work;
          out = (await exec("bash", ["-c", script], { cwd, env, timeout: 90_000, maxBuffer: 16 * 1024 * 1024 })).stdout;
        } catch (err) {
          throw new Error(`README command failed: ${code}\n${String((err as { stderr?: string }).stderr ?? err)}`);
        }
        const expected = rest ? /→ (\d{3})\b/.exec(rest)?.[1] : undefined;
        if (expected) expect(/^HTTP\/1\.1 (\d{3})/m.exec(out)?.[1], code).toBe(expected);
        const text = rest ? /→ (?:\d{3} )?(hi[a-z, ]*)/.exec(rest)?.[1]?.trim() : undefined;
        if (text) expect(out, code).toContain(text);
      }
      // The walkthroughs ran: the key's answers, the CLI's drain.
      expect(ran.some((c) => c.includes("$EDGE/team -H"))).toBe(true);
      expect(ran.some((c) => c.includes("switchyard drain hello hello-1 --wait"))).toBe(true);
    } finally {
      rmSync(work, { recursive: true, force: true });
    }
  }, 300_000);

  it("the CLI block's reference replica joins the edge, with the key npm start's secret gives and no --edge of its own (issue 52)", async () => {
    const line = blocks.flatMap(commands).find((l) => l.includes("npx switchyard replica --deployment hello"));
    expect(line).toBeDefined();
    const [code] = line!.split(/\s+#\s+/, 1) as [string];
    // The key in place of the README's "…"; the edge is the block's exported SWITCHYARD_EDGE (here the stack's).
    const command = code.replace("SWITCHYARD_REPLICA_KEY=…", `SWITCHYARD_REPLICA_KEY=${await stack.replicaKey("hello")}`).replace(/ --id \S+/, "");
    // Its own process group: npx runs the CLI in a child, and the whole group is ended below.
    const child = spawn("bash", ["-c", `${command} --id readme-cli-replica`], { cwd: join(import.meta.dirname, "../.."), env: { ...process.env, SWITCHYARD_EDGE: stack.url, SWITCHYARD_REPLICA_SECRET: "" }, stdio: ["ignore", "pipe", "pipe"], detached: true });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.stderr.on("data", (d: Buffer) => (out += d.toString()));
    const exited = new Promise((r) => child.once("exit", r));
    try {
      await waitFor("the README's replica to register", () => {
        if (child.exitCode !== null) throw new Error(`the replica exited with ${child.exitCode}`);
        return out.includes('"event":"registered"');
      }, 60_000);
      await waitFor("it in hello's replicas", async () => (await stack.deploymentState("hello")).snapshot.replicas.some((r) => r.id === "readme-cli-replica"), 20_000);
    } catch (err) {
      throw new Error(`${String(err)}; the replica's output:\n${out}`);
    } finally {
      if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, "SIGTERM");
      await exited;
    }
  }, 120_000);
});
