/**
 * `bytes`: a tokenizer for any model, for the hash tier. The prompt's UTF-8 bytes,
 * 64 to a block (about 16 tokens of English text), chats rendered as `<role>:
 * <text>\n` lines (tiny-lm's template). Every isolate computes the same keys, so
 * `prefix_hash` meets prompts sharing a prefix on one replica whatever the model; the
 * keys cannot match an engine's reported blocks (its tokens differ), so under
 * `prefix_cache` only the isolate's memory of its own dispatches counts
 * (docs/prefix-routing.md).
 */
// @ts-nocheck

import { chatPrompt } from "../tiny-lm-chat-template.ts";
import { definePromptTokenizer, headOf } from "./tokenizer.ts";

const encoder = new TextEncoder();
// Code units ≤ UTF-8 bytes, so maxTokens code units give at least maxTokens bytes.
const text = (t: string, maxTokens: number) => encoder.encode(headOf(t, maxTokens)).subarray(0, maxTokens);

export const bytes = definePromptTokenizer({
  name: "bytes",
  blockSize: 64,
  chat: (messages, maxTokens) => text(chatPrompt(messages), maxTokens),
  text,
});
