// @ts-nocheck
// The package as a newcomer uses it (issue 30 §2): README "Use as a library", step by
// step. `npm pack` builds the tarball; a fresh project installs it with npm, gets the
// README's files, is type-checked by its own `tsc` (against the package's .d.ts, not our
// sources), runs on workerd under `wrangler dev`, and serves the README's curl and an
// OpenAI SDK stream through the packaged reference replica (tiny-lm from the tarball).
//
// The steps are read from the README, so it cannot drift. What the test changes, and why:
// `npm pack` writes into the scratch folder; `npm install` prefers npm's cache and pins
// hono, wrangler and typescript to the versions this repository tests with (the README
// names them); the edge's port 8787 becomes a free one; processes that run until Ctrl-C
// (wrangler dev, the replica) start in the background and are stopped at the end.
import { spawn, execFile, type ChildProcess } from "node:child_process";
import { mkdtempSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import OpenAI from "openai";
import { afterAll, describe, expect, it } from "vitest";
import { freePort } from "./stack-fixture.ts";
import { waitFor } from "../fixtures/wait.ts";

const exec = promisify(execFile);
const repo = join(import.meta.dirname, "../..");
const pkg = JSON.parse(readFileSync(join(repo, "package.json"), "utf8")) as { devDependencies: Record<string, string> };

/** The README's "Use as a library" section, in order: its files and its shell lines. */
type Step = { kind: "file"; path: string; text: string } | { kind: "sh"; line: string; comment: string };
function librarySteps(): Step[] {
  const readme = readFileSync(join(repo, "README.md"), "utf8");
  const start = readme.indexOf("## Use as a library");
  const section = readme.slice(start, readme.indexOf("\n## ", start + 1));
  const steps: Step[] = [];
  for (const m of section.matchAll(/```(\w+)(?: file=(\S+))?\n([\s\S]*?)```/g)) {
    const [, lang, path, body] = m as unknown as [string, string, string | undefined, string];
    if (path) steps.push({ kind: "file", path, text: body });
    else if (lang === "sh") {
      for (const raw of body.replace(/\\\n\s*/g, " ").split("\n")) {
        const [line, comment = ""] = raw.trim().split(/\s+#\s+/, 2) as [string, string | undefined];
        if (line !== "" && !line.startsWith("#")) steps.push({ kind: "sh", line, comment });
      }
    }
  }
  return steps;
}

const children: ChildProcess[] = [];
let scratch: string | undefined;

afterAll(async () => {
  for (const child of children) {
    if (child.exitCode !== null || child.signalCode !== null) continue;
    const exited = new Promise((r) => child.once("exit", r));
    process.kill(-child.pid!, "SIGTERM");
    await Promise.race([exited, new Promise((r) => setTimeout(r, 10_000))]);
    if (child.exitCode === null && child.signalCode === null) process.kill(-child.pid!, "SIGKILL");
  }
  if (scratch) rmSync(scratch, { recursive: true, force: true });
}, 60_000);

describe("README \"Use as a library\", from npm pack to an OpenAI stream", () => {
  it("installs, type-checks, runs on wrangler dev and serves through the packaged replica", async () => {
    const steps = librarySteps();
    expect(steps.filter((s) => s.kind === "file").map((s) => (s as { path: string }).path)).toEqual(["wrangler.toml", ".dev.vars", "tsconfig.json", "src/index.ts"]);
    scratch = mkdtempSync(join(tmpdir(), "switchyard-library-"));
    const port = await freePort();
    const edge = `http://127.0.0.1:${port}`;
    // A child of `npm test` inherits npm's variables (npm_config_local_prefix and the like): the
    // project's npm must not take them for its own.
    const env: NodeJS.ProcessEnv = Object.fromEntries(Object.entries(process.env).filter(([k]) => !/^npm_/i.test(k) && k !== "INIT_CWD"));
    Object.assign(env, { PATH: `${join(repo, "node_modules/.bin")}:${process.env.PATH}`, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false", NO_COLOR: "1", npm_config_update_notifier: "false" });
    let cwd = scratch;
    let tarball = "";
    const log: string[] = [];
    const sh = async (line: string, where = cwd, timeout = 240_000) => {
      log.push(`$ ${line}`);
      try {
        const { stdout } = await exec("bash", ["-c", `set -eo pipefail\n${line}`], { cwd: where, env, timeout, maxBuffer: 64 * 1024 * 1024 });
        return stdout;
      } catch (err) {
        throw new Error(`README step failed: ${line}\n${String((err as { stderr?: string }).stderr ?? err)}`);
      }
    };
    const background = (line: string, ready: RegExp) => {
      log.push(`$ ${line} &`);
      const child = spawn("bash", ["-c", `exec ${line}`], { cwd, env, detached: true, stdio: ["ignore", "pipe", "pipe"] });
      children.push(child);
      let out = "";
      child.stdout!.on("data", (d: Buffer) => (out += d.toString()));
      child.stderr!.on("data", (d: Buffer) => (out += d.toString()));
      return waitFor(`"${line}" to print ${ready}`, () => {
        if (child.exitCode !== null) throw new Error(`${line} exited ${child.exitCode}:\n${out}`);
        return ready.test(out);
      }, 180_000, 50).catch((err: Error) => {
        throw new Error(`${err.message}\n${out}`);
      });
    };

    let curled = false;
    for (const step of steps) {
      if (step.kind === "file") {
        mkdirSync(dirname(join(cwd, step.path)), { recursive: true });
        writeFileSync(join(cwd, step.path), step.text);
        continue;
      }
      let line = step.line.replaceAll("127.0.0.1:8787", `127.0.0.1:${port}`).replace("--port 8787", `--port ${port}`);
      if (line === "npm pack") {
        const out = await sh(`npm pack --pack-destination ${scratch}`, repo);
        tarball = join(scratch, out.trim().split("\n").at(-1)!);
      } else if (line.startsWith("npm install")) {
        // The README pins wrangler (on Node 20 npm would pick an old one): the version this repository tests with.
        for (const [, name, version] of line.matchAll(/ (wrangler)@(\S+)/g)) expect(version, `the README's ${name}`).toBe(pkg.devDependencies[name!]);
        line = line
          .replace(/\S*switchyard-edge-switchyard-[\d.]+\.tgz/, tarball)
          .replace(/ (hono|wrangler|typescript)(?= |$)/g, (_m, name: string) => ` ${name}@${pkg.devDependencies[name]}`);
        await sh(`${line} --prefer-offline --no-audit --no-fund`);
      } else if (line.includes(" cd ")) {
        cwd = (await sh(`${line} >/dev/null && pwd`)).trim();
      } else if (line.startsWith("export ")) {
        const [name, value] = /^export (\w+)=(.*)$/.exec(line)!.slice(1) as [string, string];
        env[name] = (await sh(`printf %s ${value}`)).trim();
        expect(env[name], line).toMatch(/^[0-9a-f]{64}$/);
      } else if (line.startsWith("npx wrangler dev")) {
        await background(line, /Ready on http/);
      } else if (line.startsWith("npx switchyard replica ")) {
        await background(line, /"event":"registered"/);
      } else if (line.startsWith("curl ")) {
        const out = await sh(line);
        // The comment's promise: chat.completion.chunk events, then the stream's end.
        expect(step.comment).toMatch(/data: \[DONE\]/);
        expect(out).toMatch(/^data: \{"id":"chatcmpl-[^\n]*"object":"chat\.completion\.chunk"/m);
        expect(out.trimEnd().endsWith("data: [DONE]")).toBe(true);
        curled = true;
      } else {
        await sh(line);
      }
    }
    expect(log.join("\n")).toMatch(/npx tsc/);
    expect(curled).toBe(true);

    // Typed by the user's tsc against the package's declarations: no .ts of ours in the project.
    expect(readFileSync(join(cwd, "node_modules/@switchyard-edge/switchyard/package.json"), "utf8")).not.toMatch(/"\.\/src\//);
    // The user's own route, next to the mounted edge.
    expect(await (await fetch(`${edge}/`)).text()).toBe("my site");
    // The official SDK, streaming through the user's Worker to the packaged replica.
    const client = new OpenAI({ baseURL: `${edge}/ml/v1`, apiKey: "unused", maxRetries: 0 });
    expect((await client.models.list()).data.map((m) => m.id)).toEqual(["tiny-lm"]);
    const stream = await client.chat.completions.create({ model: "tiny-lm", messages: [{ role: "user", content: "hello" }], stream: true, stream_options: { include_usage: true }, max_tokens: 12, ignore_eos: true } as OpenAI.ChatCompletionCreateParamsStreaming);
    let text = "";
    let finish: string | null = null;
    let tokens: number | undefined;
    for await (const chunk of stream) {
      text += chunk.choices[0]?.delta.content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      tokens = chunk.usage?.completion_tokens ?? tokens;
    }
    expect(text).not.toBe("");
    expect(tokens).toBe(12);
    expect(finish).toBe("length");
  }, 600_000);
});
