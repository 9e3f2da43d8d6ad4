/**
 * `tiny-lm`: the reference replica's model, tokenized exactly as the replica does
 * (src/prompt/tiny-lm-tokenizer.ts, one token per character after normalisation; the
 * chat template of src/prompt/tiny-lm-chat-template.ts), so the keys match its
 * reported cache.
 */
import { chatPrompt, continuationPrompt } from "../tiny-lm-chat-template.ts";
import { encode } from "../tiny-lm-tokenizer.ts";
import { BLOCK_TOKENS } from "../../protocol/limits.ts";
import { definePromptTokenizer, headOf } from "./tokenizer.ts";

// The tokens of a text's first n characters are a prefix of the text's tokens (each character maps on its own), so
// cutting there bounds the work and changes no key; dropped characters (\r, accents) may only leave fewer blocks.
const text = (t: string, maxTokens: number) => encode(headOf(t, maxTokens));

export const tinyLm = definePromptTokenizer({
  name: "tiny-lm",
  blockSize: BLOCK_TOKENS,
  // A continuation (continue_final_message) as the replica renders it: the last message left open.
  chat: (messages, maxTokens, extras) => text(extras?.continueFinalMessage ? continuationPrompt(messages) : chatPrompt(messages), maxTokens),
  text,
});
