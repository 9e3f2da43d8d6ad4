/**
 * bin/switchyard.mjs as a shell runs it: a child process started from another
 * directory, its exit codes, stdout/stderr, signals (metrics --follow ends with
 * exit 0 on SIGINT; `replica` forwards SIGTERM/SIGINT to the replica).
 */
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { copyFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { bundleCli, bundleReplica } from "../../src/local/build.ts";
import { SECRET, startFakeEdge, type FakeEdge } from "./cli-fake-edge.ts";

const BIN = fileURLToPath(new URL("../../bin/switchyard.mjs", import.meta.url));
const ROOT = fileURLToPath(new URL("../..", import.meta.url));

let edge: FakeEdge;
beforeAll(async () => {
  // The bin runs dist/cli.mjs (and its `replica` command dist/replica.mjs): build them from the sources under test.
  await Promise.all([bundleCli(), bundleReplica()]);
  edge = await startFakeEdge();
});
afterAll(async () => {
  await edge?.close();
});

const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) if (c.exitCode === null && c.signalCode === null) c.kill("SIGKILL");
});

interface Exit {
  code: number | null;
  stdout: string;
  stderr: string;
}

function start(args: string[], env: Record<string, string> = {}): { child: ChildProcess; exit: Promise<Exit>; stdout: () => string } {
  const base = { ...process.env };
  delete base.SWITCHYARD_ADMIN_SECRET;
  delete base.SWITCHYARD_EDGE;
  const child = spawn(process.execPath, [BIN, ...args], { cwd: tmpdir(), stdio: ["ignore", "pipe", "pipe"], env: { ...base, NO_COLOR: "", ...env } });
  children.push(child);
  let stdout = "";
  let stderr = "";
  child.stdout!.on("data", (d: Buffer) => (stdout += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  const exit = new Promise<Exit>((resolve) => child.once("close", (code) => resolve({ code, stdout, stderr })));
  return { child, exit, stdout: () => stdout };
}

const runBin = (args: string[], env: Record<string, string> = {}) => start(args, env).exit;

async function until(check: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error("timed out");
    await new Promise((r) => setTimeout(r, 25));
  }
}

describe("bin/switchyard.mjs", () => {
  it("runs the bundle with plain node: no tsx loader, no node_modules", () => {
    // The package as installed, minus its dependencies: bin/, dist/cli.mjs, package.json.
    const dir = mkdtempSync(join(tmpdir(), "switchyard-bin-"));
    try {
      mkdirSync(join(dir, "bin"));
      mkdirSync(join(dir, "dist"));
      copyFileSync(BIN, join(dir, "bin/switchyard.mjs"));
      copyFileSync(join(ROOT, "dist/cli.mjs"), join(dir, "dist/cli.mjs"));
      copyFileSync(join(ROOT, "package.json"), join(dir, "package.json"));
      const env = { ...process.env };
      delete env.NODE_OPTIONS;
      const r = spawnSync(process.execPath, [join(dir, "bin/switchyard.mjs"), "--help"], { cwd: tmpdir(), env, encoding: "utf8" });
      expect(r.stderr).toBe("");
      expect(r.status).toBe(0);
      expect(r.stdout).toMatch(/^usage: switchyard/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("prints help and the version from any directory (exit 0)", async () => {
    const help = await runBin(["--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: switchyard/);
    expect(help.stderr).toBe("");
    const v = await runBin(["--version"]);
    expect(v).toMatchObject({ code: 0, stdout: expect.stringMatching(/^switchyard \d+\.\d+\.\d+\n$/) });
  });

  it("exits 2 with the usage on stderr for an unknown command or a missing admin secret", async () => {
    const bad = await runBin(["nope"]);
    expect(bad.code).toBe(2);
    expect(bad.stdout).toBe("");
    expect(bad.stderr).toMatch(/unknown command "nope"[\s\S]*usage: switchyard/);
    const noSecret = await runBin(["status", "--edge", edge.url]);
    expect(noSecret.code).toBe(2);
    expect(noSecret.stderr).toMatch(/SWITCHYARD_ADMIN_SECRET/);
  });

  it("prints status as a table or JSON; exits 1 when the edge is down", async () => {
    const env = { SWITCHYARD_ADMIN_SECRET: SECRET, SWITCHYARD_EDGE: edge.url };
    const table = await runBin(["status"], env);
    expect(table.code).toBe(0);
    expect(table.stdout).toMatch(/^DEPLOYMENT\s+REPLICA/);
    expect(table.stdout).toMatch(/hello-2/);
    const json = await runBin(["status", "--json"], env);
    expect(JSON.parse(json.stdout).deployments).toHaveLength(2);
    const down = await runBin(["status", "--edge", "http://127.0.0.1:9"], { SWITCHYARD_ADMIN_SECRET: SECRET });
    expect(down.code).toBe(1);
    expect(down.stderr).toMatch(/cannot reach the edge/);
  });

  it("metrics --follow runs until SIGINT and then exits 0", async () => {
    const p = start(["metrics", "--follow", "--interval", "0.2"], { SWITCHYARD_ADMIN_SECRET: SECRET, SWITCHYARD_EDGE: edge.url });
    await until(() => p.stdout().split("\n").length > 4);
    p.child.kill("SIGINT");
    const r = await p.exit;
    expect(r.code).toBe(0);
    expect(r.stdout).toMatch(/^\d{4}-\d\d-\d\dT\S+Z switchyard_requests_total/);
  });

  it("replica: shows the replica's usage, passes its exit code on", async () => {
    const help = await runBin(["replica", "--help"]);
    expect(help.code).toBe(0);
    expect(help.stdout).toMatch(/^usage: replica --deployment NAME/);
    const bad = await runBin(["replica", "--deployment", "hello"]);
    expect(bad.code).toBe(2);
    expect(bad.stderr).toMatch(/--deployment and --backend are required/);
  });

  for (const signal of ["SIGTERM", "SIGINT"] as const) {
    it(`replica: forwards ${signal}, the replica stops and the exit code is its own`, async () => {
      const p = start(["replica", "--deployment", "hello", "--backend", "text", "--text", "yo", "--standalone", "--port", "0"]);
      await until(() => p.stdout().includes('"event":"listening"'));
      const { url } = JSON.parse(p.stdout().trim().split("\n")[0]!) as { url: string };
      expect(await (await fetch(url)).text()).toBe("yo");
      p.child.kill(signal);
      expect((await p.exit).code).toBe(0);
    });
  }
});
