/**
 * Loads tiny-lm (tiny-lm.ts) in Node: its files from models/tiny-lm in the repository,
 * its session on the replica's onnxruntime-web (src/models/onnx-session.ts).
 */
// @ts-nocheck

import { existsSync } from "node:fs";
import { readFile } from "node:fs/promises";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { nodeOnnxRuntime } from "../../models/onnx-session.ts";
import { createTinyLm, warmUpTinyLm, type TinyLm } from "./tiny-lm.ts";
import { VOCAB } from "./tokenizer.ts";

export { TINY_LM_ID } from "./tiny-lm.ts";

/**
 * models/tiny-lm in the repository: found by walking up from this module, which runs from
 * src/replica/llm/ (tsx, vitest) or bundled into dist/replica.mjs (the local stack).
 */
export function tinyLmDir(): string {
  let dir = path.dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 8; i++) {
    const candidate = path.join(dir, "models", "tiny-lm");
    if (existsSync(path.join(candidate, "tiny-lm.onnx"))) return candidate;
    const parent = path.dirname(dir);
    if (parent === dir) break;
    dir = parent;
  }
  throw new Error(`tiny-lm: models/tiny-lm/tiny-lm.onnx not found above ${fileURLToPath(import.meta.url)} (build it with \`npx tsx scripts/build-tiny-lm.ts\`)`);
}

export interface LoadedTinyLm {
  model: TinyLm;
  /** Time to create the ONNX session, ms. */
  sessionMs: number;
  /** Time of the warm-up runs, ms. */
  warmupMs: number;
}

/** Loads tiny-lm (checking vocab.json against the tokenizer) and warms it up (`warmupRuns`, default 2000). */
export async function loadTinyLm(options: { dir?: string; warmupRuns?: number } = {}): Promise<LoadedTinyLm> {
  const dir = options.dir ?? tinyLmDir();
  const vocab = JSON.parse(await readFile(path.join(dir, "vocab.json"), "utf8")) as { tokens?: unknown };
  if (!Array.isArray(vocab.tokens) || vocab.tokens.length !== VOCAB.length || vocab.tokens.some((t, i) => t !== VOCAB[i])) {
    throw new Error("tiny-lm: vocab.json does not match the tokenizer (rebuild with `npx tsx scripts/build-tiny-lm.ts`)");
  }
  const bytes = new Uint8Array(await readFile(path.join(dir, "tiny-lm.onnx")));
  const started = performance.now();
  const model = await createTinyLm(nodeOnnxRuntime, bytes);
  const sessionMs = performance.now() - started;
  const warmStarted = performance.now();
  await warmUpTinyLm(model, options.warmupRuns ?? 2000, () => new Promise((r) => setImmediate(r)));
  return { model, sessionMs, warmupMs: performance.now() - warmStarted };
}
