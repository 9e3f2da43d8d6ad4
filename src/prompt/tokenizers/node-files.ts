/**
 * The families' files in Node (the engine stand-in, the agent, tests and benches), read
 * from the npm packages each registration names, where installed. The Worker gets them
 * from its generated deployments module instead (src/local/build.ts).
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { bpeSpecOfTiktoken, type TiktokenJsonShape } from "./bpe-spec.ts";
import { harmonyCodec } from "./harmony-codec.ts";
import { HARMONY_SPECIAL_TOKENS } from "./harmony.ts";
import { familyCodec, type TokenizerConfig } from "./hf-codec.ts";
import { provideFamily } from "./hf-family.ts";
import { FAMILY_PACKAGES, familyFiles } from "./index.ts";

const require = createRequire(import.meta.url);

/** Provides every registered family whose package resolves here; returns their names. */
export function provideFamilyFilesFromNodeModules(): string[] {
  const provided: string[] = [];
  for (const [name, pkg] of Object.entries(FAMILY_PACKAGES)) {
    const files = familyFiles(name);
    if (files.kind === "tiktoken-harmony") {
      let encoding: string;
      try {
        encoding = require.resolve(`${pkg}/encoders/${files.encoding}.json`);
      } catch {
        continue;
      }
      provideFamily(name, () => harmonyCodec({ bpe: bpeSpecOfTiktoken(JSON.parse(readFileSync(encoding, "utf8")) as TiktokenJsonShape, HARMONY_SPECIAL_TOKENS) }));
      provided.push(name);
      continue;
    }
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
