/**
 * The families' files in Node (the engine stand-in, the agent, tests and benches), read
 * from the npm packages each registration names, where installed. The Worker gets them
 * from its generated deployments module instead (src/local/build.ts).
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { familyCodec, type TokenizerConfig } from "./hf-codec.ts";
import { provideFamily } from "./hf-family.ts";
import { FAMILY_PACKAGES } from "./index.ts";

const require = createRequire(import.meta.url);

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
      familyCodec({ tokenizerJson: readFileSync(json, "utf8"), tokenizerConfig: JSON.parse(readFileSync(config, "utf8")) as TokenizerConfig }),
    );
    provided.push(name);
  }
  return provided;
}
