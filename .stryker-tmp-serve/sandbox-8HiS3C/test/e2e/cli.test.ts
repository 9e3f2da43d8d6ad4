// @ts-nocheck
// The `switchyard` CLI (bin/switchyard.mjs) against the real local stack.
import { spawn } from "node:child_process";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { fixtureFunctions, startStack } from "./stack-fixture.ts";

const BIN = fileURLToPath(new URL("../../bin/switchyard.mjs", import.meta.url));

let stack: Awaited<ReturnType<typeof startStack>>;

beforeAll(async () => {
  stack = await startStack({ functionsDir: fixtureFunctions, replicas: { hello: 2, stream: 0, tight: 0, secure: 0 } });
});
afterAll(async () => {
  await stack?.dispose();
});

interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Runs the CLI as a shell would (async: the stack's HTTP front lives in this process). */
function cli(args: string[], o: { secret?: string | null } = {}): Promise<Exit> {
  const env: Record<string, string | undefined> = { ...process.env, NO_COLOR: "1" };
  delete env.SWITCHYARD_EDGE;
  if (o.secret === null) delete env.SWITCHYARD_ADMIN_SECRET;
  else env.SWITCHYARD_ADMIN_SECRET = o.secret ?? stack.adminSecret;
  const child = spawn(process.execPath, [BIN, ...args, "--edge", stack.url], { stdio: ["ignore", "pipe", "pipe"], env });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
}

interface StatusDoc {
  edge: string;
  deployments: { name: string; routePrefix: string | null; replicas: { id: string; state: string; ongoing: number; max: number; url: string }[] }[];
}

describe("switchyard CLI on the local stack", () => {
  it("status prints every deployment's replicas as a table and as JSON", async () => {
    const hello = [...stack.replicas.values()].filter((r) => r.deployment === "hello").map((r) => r.id).sort();
    expect(hello).toHaveLength(2);

    const [table, json] = await Promise.all([cli(["status"]), cli(["status", "--json"])]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stderr).toBe("");
    const lines = table.stdout.trimEnd().split("\n");
    expect(lines[0]).toMatch(/^DEPLOYMENT\s+REPLICA\s+STATE\s+LOAD\s+MODELS\s+URL$/);
    for (const id of hello) expect(lines.some((l) => new RegExp(`^hello\\s+${id}\\s+ready\\s+\\d+/\\d+`).test(l)), id).toBe(true);
    // Deployments without replicas get a row too.
    expect(lines.some((l) => /^stream\s+-\s+no replicas/.test(l))).toBe(true);
    expect(table.stdout).not.toMatch(/\x1b/);

    expect(json.code, json.stderr).toBe(0);
    const doc = JSON.parse(json.stdout) as StatusDoc;
    expect(doc.edge).toBe(stack.url);
    const d = doc.deployments.find((x) => x.name === "hello")!;
    expect(d.routePrefix).toBe("/hello");
    expect(d.replicas.map((r) => r.id)).toEqual(hello);
    for (const r of d.replicas) expect(r).toMatchObject({ state: "ready", url: stack.replicas.get(r.id)!.url });
  });

  it("status of one deployment; exits 1 for an unknown one", async () => {
    const one = await cli(["status", "hello", "--json"]);
    expect(one.code, one.stderr).toBe(0);
    expect((JSON.parse(one.stdout) as StatusDoc).deployments.map((d) => d.name)).toEqual(["hello"]);
    const unknown = await cli(["status", "nope"]);
    expect(unknown.code).toBe(1);
    expect(unknown.stderr).toMatch(/no deployment named "nope"/);
  });

  it("exits 2 for an unknown command or no admin secret, 1 for a wrong secret", async () => {
    const [unknown, noSecret, wrong] = await Promise.all([cli(["frobnicate"]), cli(["status"], { secret: null }), cli(["status"], { secret: "not-the-secret" })]);
    expect(unknown.code).toBe(2);
    expect(unknown.stderr).toMatch(/unknown command "frobnicate"[\s\S]*usage: switchyard/);
    expect(noSecret.code).toBe(2);
    expect(noSecret.stderr).toMatch(/SWITCHYARD_ADMIN_SECRET/);
    expect(wrong.code).toBe(1);
    expect(wrong.stdout).toBe("");
    expect(wrong.stderr).toMatch(/401 unauthorized.*admin secret/);
  });

  it("drain --wait drains a replica: it exits and leaves the table", async () => {
    const extra = await stack.startReplica("hello", { id: "hello-cli-drain" });
    const missing = await cli(["drain", "hello", "no-such-replica"]);
    expect(missing.code).toBe(1);

    const drained = await cli(["drain", "hello", extra.id, "--wait", "--timeout", "15", "--json"]);
    expect(drained.code, drained.stderr).toBe(0);
    expect(JSON.parse(drained.stdout)).toMatchObject({ deployment: "hello", replica: extra.id, draining: true, left: true });
    expect(await extra.exited).toBe(0);
    const after = JSON.parse((await cli(["status", "hello", "--json"])).stdout) as StatusDoc;
    expect(after.deployments[0]!.replicas.map((r) => r.id)).not.toContain(extra.id);
  });

  it("metrics prints the exposition and parses it with --json", async () => {
    for (let i = 0; i < 5; i++) await (await fetch(`${stack.url}/hello`)).text();
    const [text, json] = await Promise.all([cli(["metrics"]), cli(["metrics", "--json"])]);
    expect(text.code, text.stderr).toBe(0);
    expect(text.stdout).toMatch(/^[a-z_:]+(\{.*\})? \S+$/m);
    expect(json.code, json.stderr).toBe(0);
    const samples = JSON.parse(json.stdout) as { name: string; labels: Record<string, string>; value: number | string }[];
    expect(samples.length).toBeGreaterThan(0);
    for (const s of samples) expect(typeof s.name).toBe("string");
    const some = await cli(["metrics", "--grep", "hello"]);
    expect(some.code).toBe(0);
    for (const l of some.stdout.trimEnd().split("\n").filter(Boolean)) expect(l).toContain("hello");
  });

  it("autoscale prints current and desired replicas", async () => {
    const [table, json] = await Promise.all([cli(["autoscale", "hello"]), cli(["autoscale", "hello", "--json"])]);
    expect(table.code, table.stderr).toBe(0);
    expect(table.stdout).toMatch(/^DEPLOYMENT\s+CURRENT\s+DESIRED/);
    expect(table.stdout).toMatch(/^hello\s/m);
    expect(json.code, json.stderr).toBe(0);
    const doc = JSON.parse(json.stdout) as { deployments: { deployment: string; current: unknown; desired: unknown }[] };
    expect(doc.deployments[0]).toMatchObject({ deployment: "hello" });
    expect(doc.deployments[0]!.current).toBeDefined();
    expect(doc.deployments[0]!.desired).toBeDefined();
  });
});
