/**
 * A request's prompt block keys, computed at the edge from an OpenAI-style body the
 * way the engine will see the prompt: the chat messages in order through the chat
 * template (/v1/chat/completions), the prompt (/v1/completions), or the Responses
 * input as chat messages (/v1/responses), each through the deployment's prompt
 * tokenizer (src/prompt/tokenizers/), then blockKeys with the multiplexed model as the
 * extra key. A prompt given as token ids is used as it is: those are the engine's own
 * tokens, so they get engine-sized blocks whatever the tokenizer.
 *
 * Bounded: bodies over PROMPT_MAX_BODY_BYTES are not parsed, and at most
 * PROMPT_MAX_BLOCKS blocks are hashed (the rest of a longer prompt cannot change the
 * choice much: it is the same prefix). Undefined when the body has no prompt the
 * replica would accept; the balancer then chooses by load. Pure.
 */
import { z } from "zod";
import { BLOCK_TOKENS, blockKeys, type BlockKey } from "./block-keys.ts";
import { responsesMessages } from "../prompt/responses-messages.ts";
import { OpenAIPath } from "../protocol/paths.ts";
import { promptTokenizer, UnsupportedPrompt, type ChatExtras, type PromptTokenizer } from "../prompt/tokenizers/index.ts";

/** Blocks hashed at most: 65,536 tokens of 16 (a few ms at most, once per request). */
export const PROMPT_MAX_BLOCKS = 4096;
/** Larger bodies are routed by load alone: parsing them would cost more than their cache is likely to save here. */
export const PROMPT_MAX_BODY_BYTES = 2 * 1024 * 1024;

/** The endpoints whose body carries a prompt. */
export type PromptEndpoint = "chat" | "completions" | "responses";

export interface PromptKeysResult {
  keys: BlockKey[];
  blockSize: number;
  /** Why the deployment's tokenizer could not render this prompt as its engine would, when the keys are `bytes`' instead. */
  fallback?: string;
}

export interface PromptKeyOptions {
  tokenizer: PromptTokenizer;
  /** The multiplexed model (adapter) the request names, "" for none: folded into every key. */
  extra: string;
  maxBlocks?: number;
}

/** The prompt endpoint a request path ends in (`/v1/chat/completions`, `/llm/v1/completions`, ...), if any. */
export function promptEndpointOf(path: string): PromptEndpoint | undefined {
  if (path.endsWith(OpenAIPath.chat)) return "chat";
  if (path.endsWith(OpenAIPath.completions)) return "completions";
  if (path.endsWith(OpenAIPath.responses)) return "responses";
  return undefined;
}

// Lenient where the replica is strict: a field the replica refuses makes no difference
// to routing (the replica answers 400 wherever it lands), but every field that shapes
// the prompt is read exactly as the replica reads it.
const part = z.looseObject({ text: z.string().optional() });
const chatBody = z.looseObject({
  messages: z.array(z.looseObject({ role: z.string(), content: z.union([z.string(), z.array(part), z.null()]).optional() })).min(1),
  tools: z.array(z.unknown()).optional(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).optional(),
});
const ids = z.array(z.number().int());
const completionBody = z.looseObject({ prompt: z.union([z.string(), z.array(z.string()).length(1), ids, z.array(ids).length(1)]) });
const responsesBody = z.looseObject({
  instructions: z.string().nullish(),
  input: z.union([
    z.string(),
    z.array(z.looseObject({ role: z.enum(["system", "developer", "user", "assistant"]), content: z.union([z.string(), z.array(z.looseObject({ text: z.string() }))]) })).min(1),
  ]),
});

const decoder = new TextDecoder();

/** The prompt keys of `body` (bytes as received) for `endpoint`, or undefined when it has no usable prompt. */
export function promptKeys(body: Uint8Array, endpoint: PromptEndpoint, options: PromptKeyOptions): PromptKeysResult | undefined {
  if (body.byteLength === 0 || body.byteLength > PROMPT_MAX_BODY_BYTES) return undefined;
  let json: unknown;
  try {
    json = JSON.parse(decoder.decode(body));
  } catch {
    return undefined;
  }
  const { extra } = options;
  const maxBlocks = options.maxBlocks ?? PROMPT_MAX_BLOCKS;
  const keysOf = (tokens: ArrayLike<number>, blockSize: number): PromptKeysResult => ({ keys: blockKeys(tokens, { extra, blockSize, maxBlocks }), blockSize });
  // The deployment's tokenizer, or bytes where it cannot render the body as its engine would.
  const tokenize = (how: (t: PromptTokenizer, maxTokens: number) => ArrayLike<number>): PromptKeysResult => {
    try {
      return keysOf(how(options.tokenizer, maxBlocks * options.tokenizer.blockSize), options.tokenizer.blockSize);
    } catch (err) {
      if (!(err instanceof UnsupportedPrompt)) throw err;
      const bytes = promptTokenizer("bytes");
      return { ...keysOf(how(bytes, maxBlocks * bytes.blockSize), bytes.blockSize), fallback: err.reason };
    }
  };
  switch (endpoint) {
    case "chat": {
      const chat = chatBody.safeParse(json);
      if (!chat.success) return undefined;
      const { messages, tools, chat_template_kwargs: kwargs } = chat.data;
      const extras: ChatExtras = { ...(tools ? { tools } : {}), ...(kwargs ? { kwargs } : {}) };
      return tokenize((t, max) => t.chat(messages, max, extras));
    }
    case "completions": {
      const completion = completionBody.safeParse(json);
      if (!completion.success) return undefined;
      const p = completion.data.prompt;
      const one = Array.isArray(p) && p.length === 1 && typeof p[0] !== "number" ? p[0]! : p;
      return typeof one === "string" ? tokenize((t, max) => t.text(one, max)) : keysOf(one as number[], BLOCK_TOKENS);
    }
    case "responses": {
      const responses = responsesBody.safeParse(json);
      return responses.success ? tokenize((t, max) => t.chat(responsesMessages(responses.data), max)) : undefined;
    }
  }
}
