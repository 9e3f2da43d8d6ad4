// @ts-nocheck
// The tokenizer moved to src/prompt/tiny-lm-tokenizer.ts so the edge can tokenize prompts exactly as this replica does (prefix routing).
export * from "../../prompt/tiny-lm-tokenizer.ts";
