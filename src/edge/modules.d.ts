// Non-JavaScript modules of the edge Worker (src/local/build.ts and wrangler.toml's
// [[rules]] make them modules; workerd hands them over already loaded).

/** A `.wasm` file: a WebAssembly.Module compiled by the runtime when the Worker loads (CompiledWasm). */
declare module "*.wasm" {
  const module: WebAssembly.Module;
  export default module;
}

/** An ONNX model file: its bytes (a Data module). */
declare module "*.onnx" {
  const bytes: ArrayBuffer;
  export default bytes;
}
