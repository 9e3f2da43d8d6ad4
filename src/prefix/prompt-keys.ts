/**
 * A request's prompt block keys, computed at the edge from an OpenAI-style body the
 * way the engine will see the prompt: the chat messages in order through the chat
 * template (/v1/chat/completions), the prompt (/v1/completions), or the Responses
 * input as chat messages (/v1/responses), each through the deployment's prompt
 * tokenizer (src/prompt/tokenizers/), then blockKeys with the multiplexed model as the
 * extra key. A prompt given as token ids is used as it is: those are the engine's own
 * tokens, so they get engine-sized blocks whatever the tokenizer.
 *
 * Bounded: bodies over PROMPT_MAX_BODY_BYTES are not parsed, at most
 * PROMPT_MAX_BLOCKS blocks are hashed, and a family's BPE merges at most
 * PROMPT_TOKENIZE_BUDGET_BYTES of a prompt's text (the rest of a longer prompt cannot
 * change the choice much: it is the same prefix). Undefined when the body has no
 * prompt the replica would accept; the balancer then chooses by load. Pure.
 */
import { z } from "zod";
import { BLOCK_TOKENS, blockKeys, type BlockKey } from "./block-keys.ts";
import { responsesMessages } from "../prompt/responses-messages.ts";
import { jsonOf } from "../protocol/json-top-level.ts";
import { openaiEndpointOf, type OpenAIEndpoint } from "../protocol/paths.ts";
import { promptTokenizer, UnsupportedPrompt, type ChatExtras, type PromptTokenizer, type TokenizeBudget } from "../prompt/tokenizers/index.ts";
import { memberAsPython } from "../prompt/tokenizers/py-json.ts";

/** Blocks hashed at most: 65,536 tokens of 16 (a few ms at most, once per request). */
export const PROMPT_MAX_BLOCKS = 4096;
/** Larger bodies are routed by load alone: parsing them would cost more than their cache is likely to save here. */
export const PROMPT_MAX_BODY_BYTES = 2 * 1024 * 1024;
/**
 * Bytes of one prompt's text a family's BPE merges at most: its CPU bound, whatever
 * the text. src/prompt/tokenizers/ranked-bpe.ts is linear in them (in workerd ≤ ~0.3 µs
 * a byte for prose, one letter or one symbol repeated, emoji or CJK alike:
 * bench/tokenizers/tokenizers.ts), and pieces it has merged before (a conversation's words) are
 * free. A prompt with more is keyed by its head, exactly as far as it goes, and counted
 * (`tokenize_budget`): the head is what the choice turns on.
 */
export const PROMPT_TOKENIZE_BUDGET_BYTES = 64 * 1024;
/**
 * A chat template's work is ~15 µs a message and ~100 ns a byte of tool schemas (the
 * Jinja engine walks them all, before any cut; Node, 2026-12-06): chats with more are
 * keyed by bytes, their first messages only (`render_budget`). An agent's long session
 * and its tools stay within them. The tool calls' arguments in the messages have the
 * tools' bound too: they are parsed and printed back whole (`tojson`), and ~1 MB of
 * nested arrays in one call cost ~0.8 s before it.
 */
export const PROMPT_MAX_MESSAGES = 1024;
export const PROMPT_MAX_TOOLS_BYTES = 64 * 1024;

/** The endpoints whose body carries a prompt. */
export type PromptEndpoint = Exclude<OpenAIEndpoint, "embeddings">;

/**
 * A body as the edge holds it (serve/request.ts HeldBody): its size, and its one
 * JSON.parse, made on first need and shared by every stage that reads it.
 */
export interface PromptBody {
  readonly byteLength: number;
  /** The bytes as received (tools are read again from them as Python reads JSON). */
  readonly bytes: ArrayBuffer | Uint8Array;
  /** The body as JSON; undefined when it is not JSON. */
  json(): unknown;
}

export interface PromptKeysResult {
  keys: BlockKey[];
  blockSize: number;
  /**
   * Why the keys are not the whole prompt's as its engine would make them: the reason the
   * deployment's tokenizer could not render it (the keys are then `bytes`'), or
   * `tokenize_budget` (the keys are the engine's, for the head the budget allowed).
   */
  fallback?: string;
}

export interface PromptKeyOptions {
  tokenizer: PromptTokenizer;
  /** The multiplexed model (adapter) the request names, "" for none: folded into every key. */
  extra: string;
  maxBlocks?: number;
  /** PROMPT_TOKENIZE_BUDGET_BYTES unless given. */
  budgetBytes?: number;
  /** The date the engines start conversations on (gpt-oss: policy.prefix.startDate); today's in UTC unless given. */
  startDate?: string;
}

/** The prompt endpoint a request path ends in (`/v1/chat/completions`, `/llm/v1/completions`, ...), if any. */
export function promptEndpointOf(path: string): PromptEndpoint | undefined {
  const endpoint = openaiEndpointOf(path);
  return endpoint === "embeddings" ? undefined : endpoint;
}

// Lenient where the replica is strict: a field the replica refuses makes no difference
// to routing (the replica answers 400 wherever it lands), but every field that shapes
// the prompt is read exactly as the replica reads it.
const part = z.looseObject({ text: z.string().optional() });
const chatBody = z.looseObject({
  messages: z.array(z.looseObject({ role: z.string(), content: z.union([z.string(), z.array(part), z.null()]).optional() })).min(1),
  tools: z.array(z.unknown()).optional(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).optional(),
  add_generation_prompt: z.boolean().nullish(),
  continue_final_message: z.boolean().nullish(),
  reasoning_effort: z.unknown().optional(),
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

const BYTES_BLOCK = promptTokenizer("bytes").blockSize;

/**
 * The prompt keys of `body` (bytes as received, or the edge's held body, whose parse is
 * shared) for `endpoint`, or undefined when it has no usable prompt.
 */
export function promptKeys(body: Uint8Array | PromptBody, endpoint: PromptEndpoint, options: PromptKeyOptions): PromptKeysResult | undefined {
  if (body.byteLength === 0 || body.byteLength > PROMPT_MAX_BODY_BYTES) return undefined;
  let json = body instanceof Uint8Array ? jsonOf(body) : body.json();
  if (json === undefined) return undefined;
  const { extra } = options;
  const maxBlocks = options.maxBlocks ?? PROMPT_MAX_BLOCKS;
  const keysOf = (tokens: ArrayLike<number>, blockSize: number): PromptKeysResult => ({ keys: blockKeys(tokens, { extra, blockSize, maxBlocks }), blockSize });
  // The deployment's tokenizer, or bytes where it cannot render the body as its engine would.
  const tokenize = (how: (t: PromptTokenizer, maxTokens: number, budget: TokenizeBudget) => ArrayLike<number>): PromptKeysResult => {
    const budget: TokenizeBudget = { bytes: options.budgetBytes ?? PROMPT_TOKENIZE_BUDGET_BYTES };
    try {
      const keys = keysOf(how(options.tokenizer, maxBlocks * options.tokenizer.blockSize, budget), options.tokenizer.blockSize);
      return budget.exhausted ? { ...keys, fallback: "tokenize_budget" } : keys;
    } catch (err) {
      // A tokenizer's failure never fails the request: its prompt is keyed by bytes, the reason counted
      // ("tokenizer_error" for what is not a refusal: a bug, or a bound this module did not foresee).
      const bytes = promptTokenizer("bytes");
      return { ...keysOf(how(bytes, maxBlocks * bytes.blockSize, budget), bytes.blockSize), fallback: err instanceof UnsupportedPrompt ? err.reason : "tokenizer_error" };
    }
  };
  switch (endpoint) {
    case "chat": {
      const raw = json as { messages?: unknown; tools?: unknown } | null;
      // Past the template's bound, only the first messages are read (and checked), for bytes keys.
      const over =
        (typeof raw === "object" && raw !== null && Array.isArray(raw.messages) && (raw.messages.length > PROMPT_MAX_MESSAGES || toolArgumentsLength(raw.messages) > PROMPT_MAX_TOOLS_BYTES)) ||
        (Array.isArray(raw?.tools) && JSON.stringify(raw.tools).length > PROMPT_MAX_TOOLS_BYTES);
      const chat = chatBody.safeParse(over ? { messages: (raw!.messages as unknown[]).slice(0, PROMPT_MAX_MESSAGES) } : json);
      if (!chat.success) return undefined;
      const { messages, tools, chat_template_kwargs: kwargs, add_generation_prompt: agp, continue_final_message: cont, reasoning_effort: effort } = chat.data;
      if (over) return { ...keysOf(promptTokenizer("bytes").chat(messages, maxBlocks * BYTES_BLOCK), BYTES_BLOCK), fallback: "render_budget" };
      const extras: ChatExtras = { ...(tools ? { tools: toolsAsPython(body instanceof Uint8Array ? body : body.bytes, tools) } : {}), ...(kwargs ? { kwargs } : {}) };
      // vLLM's flags that change the rendering (a migrated stream's continuation sets both: docs/migration.md).
      if (agp === false) extras.addGenerationPrompt = false;
      if (cont === true) extras.continueFinalMessage = true;
      // gpt-oss's system message says these (harmony: src/prompt/tokenizers/gpt-oss-chat.ts); templates ignore them.
      if (effort !== undefined) extras.reasoningEffort = effort;
      if (options.startDate !== undefined) extras.startDate = options.startDate;
      return tokenize((t, max, budget) => t.chat(messages, max, extras, budget));
    }
    case "completions": {
      // Token ids past the blocks hashed are not read (nor checked one by one).
      const prompt = (json as { prompt?: unknown } | null)?.prompt;
      const maxIds = maxBlocks * BLOCK_TOKENS;
      if (Array.isArray(prompt) && prompt.length > maxIds && typeof prompt[0] === "number") json = { prompt: prompt.slice(0, maxIds) };
      else if (Array.isArray(prompt) && prompt.length === 1 && Array.isArray(prompt[0]) && prompt[0].length > maxIds) json = { prompt: [prompt[0].slice(0, maxIds)] };
      const completion = completionBody.safeParse(json);
      if (!completion.success) return undefined;
      const p = completion.data.prompt;
      const one = Array.isArray(p) && p.length === 1 && typeof p[0] !== "number" ? p[0]! : p;
      return typeof one === "string" ? tokenize((t, max, budget) => t.text(one, max, budget)) : keysOf(one as number[], BLOCK_TOKENS);
    }
    case "responses": {
      const { input, instructions } = (json ?? {}) as { input?: unknown; instructions?: unknown };
      if (Array.isArray(input) && input.length > PROMPT_MAX_MESSAGES) {
        const head = responsesBody.safeParse({ instructions, input: input.slice(0, PROMPT_MAX_MESSAGES) });
        return head.success ? { ...keysOf(promptTokenizer("bytes").chat(responsesMessages(head.data), maxBlocks * BYTES_BLOCK), BYTES_BLOCK), fallback: "render_budget" } : undefined;
      }
      const responses = responsesBody.safeParse(json);
      return responses.success ? tokenize((t, max, budget) => t.chat(responsesMessages(responses.data), max, undefined, budget)) : undefined;
    }
  }
}

const utf8 = new TextDecoder();

/**
 * A chat's tools as vLLM's Python reads them from the body's text (py-json.ts): JSON.parse
 * made `2.0` an int and put integer-like keys first, and a template prints both back with
 * `tojson`. Only for bodies with tools, whose JSON is at most PROMPT_MAX_TOOLS_BYTES: the
 * text is searched for the member, and only the member is parsed again. Where it cannot
 * be found within that bound, the tools as JSON.parse read them. The edge and the
 * reference replica read tools with this one function.
 */
export function toolsAsPython(body: string | ArrayBuffer | Uint8Array, tools: unknown[]): readonly unknown[] {
  if (tools.length === 0) return tools;
  const exact = memberAsPython(typeof body === "string" ? body : utf8.decode(body), "tools", tools, 2 * PROMPT_MAX_TOOLS_BYTES);
  return Array.isArray(exact) ? exact : tools;
}

/** The length of the tool calls' arguments in `messages` (text as sent; an object as JSON), stopping once past the bound. */
function toolArgumentsLength(messages: readonly unknown[]): number {
  let n = 0;
  for (const m of messages) {
    const calls = (m as { tool_calls?: unknown } | null)?.tool_calls;
    if (!Array.isArray(calls)) continue;
    for (const c of calls) {
      const args = (c as { function?: { arguments?: unknown } } | null)?.function?.arguments;
      n += typeof args === "string" ? args.length : args === undefined || args === null ? 0 : JSON.stringify(args).length;
      if (n > PROMPT_MAX_TOOLS_BYTES) return n;
    }
  }
  return n;
}
