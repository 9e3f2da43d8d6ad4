// The "your own model" walkthrough (examples/python-model/README.md, linked from the
// README) run as written, from the root of a fresh copy of the checkout (issue 52):
// its three terminals are three process groups, its commands are the block's own
// lines with only the ports and the printed secret filled in, and the curls' output
// is checked against the comments the block gives. The copy shares node_modules (a
// symlink); pip reads the machine's configured index (PIP_INDEX_URL), as a user's
// pip.conf would.
import { spawn, spawnSync, type ChildProcess } from "node:child_process";
import { cpSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { configuredIndexFlags } from "../../scripts/python-env.ts";
import { freePort, until } from "./stack-fixture.ts";

const ROOT = join(import.meta.dirname, "../..");
const WALKTHROUGH = readFileSync(join(ROOT, "examples/python-model/README.md"), "utf8");

interface Terminal {
  proc: ChildProcess;
  out: string;
  exited: Promise<number | null>;
}

const terminals: Terminal[] = [];
let checkout = "";

afterAll(async () => {
  for (const t of terminals) {
    if (t.proc.exitCode === null && t.proc.signalCode === null) process.kill(-t.proc.pid!, "SIGKILL");
    await t.exited;
  }
  if (checkout) rmSync(checkout, { recursive: true, force: true });
});

/** The block's commands, per terminal ("# 1. …" opens one): continuation lines joined, each with the comment lines that follow it. */
function terminalsOfBlock(): { command: string; after: string[] }[][] {
  const block = /From the repository root, in three terminals:\n\n```sh\n([\s\S]*?)```/.exec(WALKTHROUGH)?.[1];
  if (!block) throw new Error("the walkthrough's block is gone from examples/python-model/README.md");
  const out: { command: string; after: string[] }[][] = [];
  for (const line of block.replace(/\\\n\s*/g, "").split("\n")) {
    if (/^# \d+\./.test(line)) out.push([]);
    else if (line.startsWith("#")) out.at(-1)!.at(-1)!.after.push(line.slice(1).trim());
    else if (line.trim()) out.at(-1)!.push({ command: line.replace(/\s+#\s.*$/, ""), after: [] });
  }
  return out;
}

/** Copies what git would check out (tracked and unignored files, mtimes kept so npm start's dependency check installs nothing). */
function freshCopy(): string {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-readme-model-"));
  const files = spawnSyncLines("git", ["ls-files", "-co", "--exclude-standard"]);
  for (const f of files) {
    try {
      if (!statSync(join(ROOT, f)).isFile()) continue;
    } catch {
      continue; // deleted in the working tree
    }
    mkdirSync(dirname(join(dir, f)), { recursive: true });
    cpSync(join(ROOT, f), join(dir, f), { preserveTimestamps: true });
  }
  symlinkSync(join(ROOT, "node_modules"), join(dir, "node_modules"));
  // ensure-deps.sh runs npm ci when the lockfile is newer than the install: never through this symlink.
  expect(statSync(join(dir, "package-lock.json")).mtimeMs).toBeLessThanOrEqual(statSync(join(ROOT, "node_modules/.package-lock.json")).mtimeMs);
  return dir;
}

function spawnSyncLines(cmd: string, args: string[]): string[] {
  const r = spawnSync(cmd, args, { cwd: ROOT, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`${cmd} ${args.join(" ")} failed`);
  return r.stdout.split("\n").filter(Boolean);
}

/** One terminal: a bash running `script` in its own process group. */
function terminal(script: string, env: NodeJS.ProcessEnv): Terminal {
  const proc = spawn("bash", ["-ec", script], { cwd: checkout, env, stdio: ["ignore", "pipe", "pipe"], detached: true });
  const t: Terminal = { proc, out: "", // "close", not "exit": a child still printing (npm start's "stopped.") holds the pipe after bash has gone.
    exited: new Promise((r) => proc.once("close", (code) => r(code))) };
  proc.stdout!.on("data", (d: Buffer) => (t.out += d.toString()));
  proc.stderr!.on("data", (d: Buffer) => (t.out += d.toString()));
  terminals.push(t);
  return t;
}

const waitOut = (t: Terminal, what: string, pattern: RegExp, timeoutMs: number) =>
  until(what, () => {
    if (t.proc.exitCode !== null) throw new Error(`exited with ${t.proc.exitCode} before ${what}:\n${t.out.slice(-4000)}`);
    return pattern.exec(t.out) ?? undefined;
  }, timeoutMs, () => t.out.slice(-4000));

describe("the README's 'your own model' walkthrough, as written", () => {
  it("a fresh checkout: the edge with the example's deployment, the app behind an agent, and the client's three curls answer as the block says", async () => {
    const [one, two, three] = terminalsOfBlock();
    expect([one?.length, two?.length, three?.length]).toEqual([2, 3, 3]);
    checkout = freshCopy();
    const [edge, agent, app] = [await freePort(), await freePort(), await freePort()];
    const ports = (s: string) => s.replaceAll("8787", String(edge)).replaceAll("9001", String(agent)).replaceAll("8001", String(app));
    // The machine's pip index, as pip.conf would give it (pip alone retries pypi.org for minutes here).
    const index = await configuredIndexFlags();
    const urls = index.filter((_, i) => i % 2 === 1);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      SWITCHYARD_REPLICA_SECRET: "",
      SWITCHYARD_REPLICA_KEY: "",
      ...(urls.length ? { PIP_INDEX_URL: urls[0], PIP_EXTRA_INDEX_URL: urls.slice(1).join(" ") } : {}),
    };

    // 1. the edge: cp, then npm start (on a free port instead of 8787).
    const t1 = terminal(one!.map((c) => ports(c.command.replace(/^npm start$/, "npm start -- --port 8787"))).join("\n"), env);
    const secret = (await waitOut(t1, "npm start's replica secret", /replica secret \([^)]*\): ([0-9a-f]+)/, 120_000))[1]!;
    await waitOut(t1, "the stack to be up", /Ctrl-C stops everything/, 60_000);
    expect(t1.out).toMatch(/\/sentiment\s+→ sentiment \(external\)/);

    // 2. the venv, the key from the printed secret, the agent in front of the app.
    const t2 = terminal(two!.map((c) => ports(c.command.replace("<printed by npm start>", secret))).join("\n"), env);
    await waitOut(t2, "the agent to register", /"event":"registered"/, 180_000);

    // 3. the client's curls, each against the comment under it.
    const curl = async (command: string) => {
      const t = terminal(ports(command), env);
      const code = await t.exited;
      expect(code, t.out).toBe(0);
      return t.out;
    };
    const [predict, explain, direct] = three!;
    // The edge sees a replica within about a second of its "registered" line (the location's
    // relay refreshes its view once a second, as the README says): a curl sent sooner gets
    // 503 no_ready_replica with Retry-After: 1, and a client that honours it sends again.
    let first = JSON.parse(await curl(predict!.command)) as { error?: { code?: string } };
    for (let tries = 1; first.error?.code === "no_ready_replica" && tries < 10; tries++) {
      await new Promise((r) => setTimeout(r, 1_000));
      first = JSON.parse(await curl(predict!.command)) as { error?: { code?: string } };
    }
    expect(first).toEqual(JSON.parse(predict!.after[0]!));
    const streamed = await curl(explain!.command);
    expect(explain!.command).toContain("-sN");
    expect(streamed.trim().split("\n").length, streamed).toBeGreaterThan(1);
    expect(streamed).toContain("great");
    expect(direct!.command).toMatch(/-d '\{\}'\s*$/);
    expect(JSON.parse(await curl(direct!.command))).toMatchObject({ error: expect.anything() });
    const status = (await fetch(`http://127.0.0.1:${agent}/predict`, { method: "POST", body: "{}" })).status;
    expect(status).toBe(401);

    // Ctrl-C on the agent drains it and stops its app; Ctrl-C on npm start stops the stack.
    process.kill(-t2.proc.pid!, "SIGINT");
    await t2.exited;
    expect(t2.out).toContain("drained, exiting");
    // Deregistered: the edge no longer lists it (no wait for it to go stale).
    const admin = /admin secret \([^)]*\): ([0-9a-f]+)/.exec(t1.out)![1]!;
    const state = (await (await fetch(`http://127.0.0.1:${edge}/-/deployments/sentiment`, { headers: { authorization: `Bearer ${admin}` } })).json()) as { snapshot: { replicas: unknown[] } };
    expect(state.snapshot.replicas).toEqual([]);
    process.kill(-t1.proc.pid!, "SIGINT");
    await t1.exited;
    expect(t1.out).toContain("stopped.");
  }, 420_000);
});
