/**
 * The replica CLI's onnx flags: validation (exit 2 with a clear message) and the two
 * modes, single model (preloaded) and multiplexed (on demand), run as real processes
 * in --standalone mode.
 */
// @ts-nocheck

import { spawn, type ChildProcess } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterEach, describe, expect, it } from "vitest";
import { parseLoadHeader } from "../../src/protocol/index.ts";
import { synthesizeVowel } from "../../src/models/silero-vad.ts";

const CLI = fileURLToPath(new URL("../../src/replica-entry.ts", import.meta.url));
const children: ChildProcess[] = [];
afterEach(() => {
  for (const c of children.splice(0)) c.kill("SIGKILL");
});

function spawnCli(args: string[]): ChildProcess {
  const child = spawn(process.execPath, ["--import", "tsx", CLI, ...args], { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_SECRET: "" } });
  children.push(child);
  return child;
}

/** Runs the CLI to its exit; returns the code and stderr. */
function runToExit(args: string[]): Promise<{ code: number | null; stderr: string }> {
  const child = spawnCli(args);
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve) => child.once("exit", (code) => resolve({ code, stderr })));
}

/** Starts a standalone replica and resolves with its URL once it listens. */
function startStandalone(args: string[]): Promise<string> {
  const child = spawnCli(["--deployment", "vad", "--standalone", "--port", "0", ...args]);
  let stderr = "";
  child.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
  return new Promise((resolve, reject) => {
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const ev = JSON.parse(line) as { event: string; url: string };
      if (ev.event === "listening") resolve(ev.url);
    });
    child.once("exit", (code) => reject(new Error(`replica exited ${code}: ${stderr}`)));
  });
}

const KNOWN = /known models: silero-vad-v4, silero-vad-v5, silero-vad-v6/;

describe("replica CLI: onnx flag validation", () => {
  const base = ["--deployment", "vad", "--standalone", "--backend", "onnx"];
  const cases: Array<[string, string[], RegExp]> = [
    ["an unknown --model", ["--model", "silero-vad"], KNOWN],
    ["an unknown id in --models", ["--models", "silero-vad-v5,whisper", "--max-models-per-replica", "2"], KNOWN],
    ["neither --model nor --models", [], KNOWN],
    ["--models without --max-models-per-replica", ["--models", "silero-vad-v5"], /needs --max-models-per-replica/],
    ["a bad --max-models-per-replica", ["--models", "silero-vad-v5", "--max-models-per-replica", "0"], /integer from 1/],
    ["a --default-model outside --models", ["--models", "silero-vad-v4", "--max-models-per-replica", "1", "--default-model", "silero-vad-v5"], /not in --models/],
    ["--model with --models", ["--model", "silero-vad-v5", "--models", "silero-vad-v4", "--max-models-per-replica", "1"], /--model serves one model/],
    ["a model listed twice", ["--models", "silero-vad-v4,silero-vad-v4", "--max-models-per-replica", "1"], /listed twice/],
  ];
  for (const [name, args, message] of cases) {
    it(`exits 2 on ${name}`, async () => {
      const { code, stderr } = await runToExit([...base, ...args]);
      expect(code).toBe(2);
      expect(stderr).toMatch(message);
      expect(stderr).toContain("usage: replica");
    }, 30_000);
  }

  it("exits 2 on model flags without --backend onnx", async () => {
    const { code, stderr } = await runToExit(["--deployment", "vad", "--standalone", "--backend", "echo", "--model", "silero-vad-v5"]);
    expect(code).toBe(2);
    expect(stderr).toMatch(/need --backend onnx/);
  }, 30_000);
});

describe("replica CLI: serving models", () => {
  const post = (url: string, headers: Record<string, string>, body: unknown) =>
    fetch(`${url}/vad`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) });
  const health = async (url: string) => (await (await fetch(`${url}/-/healthz`)).json()) as Record<string, unknown>;
  const vowel = { samples: synthesizeVowel(16000) };

  it("--model ID preloads the model and serves it as the default", async () => {
    const url = await startStandalone(["--backend", "onnx", "--model", "silero-vad-v6"]);
    expect(await health(url)).toMatchObject({ models: ["silero-vad-v6"], loading: [], max_models: 1, cache: { loads: 1 } });
    const res = await post(url, {}, vowel);
    expect(res.status).toBe(200);
    expect(res.headers.get("x-switchyard-model")).toBe("silero-vad-v6");
    expect(res.headers.get("x-switchyard-model-cache")).toBe("hit");
    expect(parseLoadHeader(res.headers.get("x-switchyard-load"))).toMatchObject({ models: ["silero-vad-v6"], loading: [] });
    expect(((await res.json()) as { model: string }).model).toBe("silero-vad-v6");
    const other = await post(url, { "x-switchyard-model": "silero-vad-v5" }, vowel);
    expect(other.status).toBe(404);
  }, 60_000);

  it("--models ... --max-models-per-replica N loads on demand, nothing preloaded", async () => {
    const url = await startStandalone(["--backend", "onnx", "--models", "silero-vad-v4,silero-vad-v5,silero-vad-v6", "--max-models-per-replica", "2"]);
    expect(await health(url)).toMatchObject({ models: [], loading: [], max_models: 2, cache: { loads: 0 } });
    const none = await post(url, {}, vowel);
    expect(none.status).toBe(400);
    expect(parseLoadHeader(none.headers.get("x-switchyard-load"))).toMatchObject({ models: [], loading: [] });
    for (const id of ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"]) {
      const res = await post(url, { serve_multiplexed_model_id: id }, vowel);
      expect(res.status).toBe(200);
      expect(res.headers.get("x-switchyard-model-cache")).toBe("miss");
      expect(((await res.json()) as { model: string; speech: boolean }).speech).toBe(true);
    }
    expect(await health(url)).toMatchObject({ models: ["silero-vad-v6", "silero-vad-v5"], loading: [], cache: { loads: 3, evictions: 1 } });
  }, 60_000);

  it("a text replica's load header has no models", async () => {
    const url = await startStandalone(["--backend", "text", "--text", "hi"]);
    const res = await fetch(url);
    expect(await res.text()).toBe("hi");
    expect(res.headers.get("x-switchyard-load")).not.toContain("models=");
    expect(await health(url)).not.toHaveProperty("models");
  }, 30_000);
});
