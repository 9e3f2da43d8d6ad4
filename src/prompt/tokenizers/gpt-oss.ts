/**
 * gpt-oss (OpenAI's open-weight models): its prompt as vLLM makes it, a harmony
 * conversation (./gpt-oss-chat.ts, ./harmony.ts) tokenized with o200k_harmony: the
 * o200k_base ranks (the `tiktoken` package's encoders/o200k_base.json, byte for byte
 * the file harmony loads: test/unit/gpt-oss.test.ts checks its SHA-256) and harmony's
 * special tokens. The codec (./harmony-codec.ts) is provided where the family is used,
 * as a Hugging Face family's is (./hf-family.ts).
 */
import { BLOCK_TOKENS } from "../../protocol/limits.ts";
import { familyCodecOf } from "./hf-family.ts";
import { definePromptTokenizer } from "./tokenizer.ts";

export const gptOss = definePromptTokenizer({
  name: "gpt-oss",
  blockSize: BLOCK_TOKENS,
  package: "tiktoken",
  files: { kind: "tiktoken-harmony", encoding: "o200k_base" },
  chat: (messages, maxTokens, extras, budget) =>
    familyCodecOf("gpt-oss").chat(messages as unknown as Record<string, unknown>[], extras?.tools ? [...extras.tools] : undefined, extras ?? {}, maxTokens, budget),
  text: (prompt, maxTokens, budget) => familyCodecOf("gpt-oss").text(prompt, maxTokens, budget),
});
