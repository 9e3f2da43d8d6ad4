// @ts-nocheck
/// <reference path="./modules.d.ts" />
/**
 * onnxruntime-web inside the edge Worker (workerd), as an OnnxRuntime for the
 * runtime-agnostic model code (src/models/onnx-runtime.ts).
 *
 * Workers may not compile WebAssembly from bytes at run time (no
 * `WebAssembly.compile`/`instantiate(bytes)`: "Wasm code generation disallowed by
 * embedder"), and have no file system or URL to fetch the runtime's `.wasm` from.
 * So:
 *  - the `.wasm` is a module of the Worker (the build makes it a CompiledWasm
 *    module, compiled by the runtime, not by us), imported dynamically by the first
 *    session creation, so an isolate that never runs an edge model never loads it;
 *  - onnxruntime-web is given a placeholder `env.wasm.wasmBinary`, which makes its
 *    Emscripten loader skip fetching and call `WebAssembly.instantiate(bytes, imports)`
 *    with a view of that placeholder; for the duration of the first session
 *    creation, `WebAssembly.instantiate` is wrapped so that exactly this call
 *    instantiates the compiled module instead (every other call passes through);
 *  - one thread (`numThreads = 1`: no worker threads in a Worker) and no proxy worker.
 * The `onnxruntime-web/wasm` entry is the wasm-only build (no WebGPU/WebGL code),
 * with its Emscripten glue bundled in (no dynamic import of a `.mjs`).
 *
 * As in the replica, every ORT call (create, run, release) goes through one queue
 * per isolate: all sessions share one wasm instance, and interleaved runs corrupt
 * each other (see src/models/onnx-session.ts).
 */
import * as ort from "onnxruntime-web/wasm";
import { serialQueue, type OnnxRuntime } from "../models/onnx-runtime.ts";

/** The placeholder handed to onnxruntime-web as the wasm binary; never compiled. */
const placeholder = new ArrayBuffer(8);

const isPlaceholder = (source: unknown): boolean =>
  source === placeholder || (ArrayBuffer.isView(source) && source.buffer === placeholder);

let configured = false;

function configure(): void {
  if (configured) return;
  ort.env.wasm.numThreads = 1;
  ort.env.wasm.proxy = false;
  ort.env.wasm.wasmBinary = placeholder;
  ort.env.logLevel = "error";
  configured = true;
}

/**
 * Runs `task` (a session creation) with `WebAssembly.instantiate` redirected to the
 * compiled module for the placeholder bytes. Tasks run one at a time (the queue), so
 * the wrapper is installed and removed by the same task.
 */
async function withInstantiateRedirect<T>(task: () => Promise<T>): Promise<T> {
  const ortWasm = (await import("onnxruntime-web/ort-wasm-simd-threaded.wasm")).default;
  type Instantiate = (source: unknown, imports?: WebAssembly.Imports) => Promise<unknown>;
  const wasm = WebAssembly as unknown as { instantiate: Instantiate };
  const original = wasm.instantiate;
  wasm.instantiate = async (source, imports) => {
    if (!isPlaceholder(source)) return original.call(WebAssembly, source, imports);
    // Instantiating a compiled Module yields an Instance; the bytes form yields { instance, module }.
    const instance = await original.call(WebAssembly, ortWasm, imports);
    return { instance, module: ortWasm };
  };
  try {
    return await task();
  } finally {
    wasm.instantiate = original;
  }
}

const serialised = serialQueue();

export const workerdOnnxRuntime: OnnxRuntime = {
  Tensor: ort.Tensor,
  createSession: (bytes) =>
    serialised(() => {
      configure();
      return withInstantiateRedirect(() => ort.InferenceSession.create(bytes, { executionProviders: ["wasm"], graphOptimizationLevel: "all" }));
    }),
  run: (session, feeds) => serialised(() => session.run(feeds)),
  release: (session) => serialised(() => session.release()),
};
