/**
 * OpenAI's harmony format (openai/harmony, src/encoding.rs), the prompt format of
 * gpt-oss: what vLLM renders a gpt-oss conversation with instead of a Jinja template.
 * A conversation renders as segments: formatting tokens (`<|start|>`, `<|channel|>`,
 * `<|message|>`, `<|end|>`, `<|call|>`, `<|constrain|>`) as their ids, and text, each
 * piece of which the encoding tokenizes on its own with no special tokens
 * (tiktoken's encode_ordinary): the role, ` to=recipient`, the channel, each content
 * part. Rendering the same text joined would merge across those seams, so the
 * segments are kept apart until tokenized (./gpt-oss.ts).
 *
 * Pure: no tokenizer here. test/unit/harmony.test.ts renders the conversations of
 * harmony's own tests and compares them with its test-data files byte for byte.
 */
import { PyFloat, type PyJson } from "./py-json.ts";

/** o200k_harmony's special tokens (harmony's public_encodings.rs): named ones, and the reserved 200014-201088. */
export const HARMONY_SPECIAL_TOKENS: readonly (readonly [string, number])[] = [
  ["<|startoftext|>", 199998],
  ["<|endoftext|>", 199999],
  ["<|reserved_200000|>", 200000],
  ["<|reserved_200001|>", 200001],
  ["<|return|>", 200002],
  ["<|constrain|>", 200003],
  ["<|reserved_200004|>", 200004],
  ["<|channel|>", 200005],
  ["<|start|>", 200006],
  ["<|end|>", 200007],
  ["<|message|>", 200008],
  ["<|reserved_200009|>", 200009],
  ["<|reserved_200010|>", 200010],
  ["<|reserved_200011|>", 200011],
  ["<|call|>", 200012],
  ["<|reserved_200013|>", 200013],
  ...Array.from({ length: 201088 - 200014 + 1 }, (_, i) => [`<|reserved_${200014 + i}|>`, 200014 + i] as const),
];

/** The formatting tokens a rendering uses, by id. */
export const HarmonyToken = { start: 200006, end: 200007, message: 200008, channel: 200005, constrain: 200003, call: 200012, return: 200002 } as const;

/** A conversation harmony would not render (its Rust returns an error), or one past this renderer's bounds. */
export class HarmonyRenderError extends Error {
  constructor(
    readonly reason: string,
    message: string,
  ) {
    super(`harmony: ${message}`);
  }
}

/**
 * How deep a tool's schema may nest (objects, arrays, oneOf): past it the rendering is
 * refused. Each level indents the lines below it, so the text grows with the square of
 * the depth (64 KB of nested objects would render to megabytes), and the recursion with
 * the depth itself. Real schemas nest a few levels.
 */
export const MAX_SCHEMA_DEPTH = 16;

/** A rendered conversation: text (tokenized alone, no special tokens) or a formatting token's id. */
export type HarmonySegment = string | number;

export type HarmonyRole = "system" | "developer" | "user" | "assistant" | "tool";
export type ReasoningEffort = "low" | "medium" | "high";

/** A JSON value as it reached the edge: JSON.parse's, or Python's reading of it (py-json.ts: Maps, PyFloat). */
export type JsonLike = PyJson | { readonly [key: string]: JsonLike } | readonly JsonLike[];

export interface HarmonyTool {
  name: string;
  description: string;
  /** A JSON schema; absent: the tool takes no arguments. */
  parameters?: JsonLike;
}

export interface HarmonyToolNamespace {
  name: string;
  description?: string;
  tools: HarmonyTool[];
}

export interface SystemContent {
  type: "system";
  modelIdentity?: string;
  reasoningEffort?: ReasoningEffort;
  /** Namespaces by name (rendered in name order, as harmony's BTreeMap). */
  tools?: HarmonyToolNamespace[];
  conversationStartDate?: string;
  knowledgeCutoff?: string;
  channelConfig?: { validChannels: string[]; channelRequired: boolean };
}

export interface DeveloperContent {
  type: "developer";
  instructions?: string;
  tools?: HarmonyToolNamespace[];
}

export type HarmonyContent = { type: "text"; text: string } | SystemContent | DeveloperContent;

export interface HarmonyMessage {
  role: HarmonyRole;
  /** The author's name (a tool message's is the tool, e.g. "functions.get_weather"). */
  name?: string;
  recipient?: string;
  channel?: string;
  contentType?: string;
  content: HarmonyContent[];
}

/** SystemContent::default(): what harmony's and vLLM's system messages start from. */
export function defaultSystemContent(): SystemContent {
  return {
    type: "system",
    modelIdentity: "You are ChatGPT, a large language model trained by OpenAI.",
    reasoningEffort: "medium",
    knowledgeCutoff: "2024-06",
    channelConfig: { validChannels: ["analysis", "commentary", "final"], channelRequired: true },
  };
}

/**
 * The conversation as harmony's render_conversation_for_completion renders it, then
 * `<|start|>` and the next role. With `autoDropAnalysis` (harmony's default config),
 * when the last assistant message is on the final channel, analysis messages before
 * the first final one are left out.
 */
export function renderForCompletion(messages: readonly HarmonyMessage[], nextRole: HarmonyRole = "assistant", autoDropAnalysis = true): HarmonySegment[] {
  const out: HarmonySegment[] = [];
  renderConversation(messages, out, autoDropAnalysis);
  out.push(HarmonyToken.start, nextRole);
  return out;
}

/** The conversation's messages (render_conversation_into). */
export function renderConversation(messages: readonly HarmonyMessage[], out: HarmonySegment[], autoDropAnalysis: boolean): void {
  const hasFunctionTools = messages.some((m) => m.content.some((c) => c.type === "developer" && (c.tools?.find((ns) => ns.name === "functions")?.tools.length ?? 0) > 0));
  const lastAssistant = messages.findLast((m) => m.role === "assistant");
  const drop = autoDropAnalysis && lastAssistant?.channel === "final";
  const firstFinal = messages.findIndex((m) => m.channel === "final");
  messages.forEach((m, i) => {
    if (drop && firstFinal >= 0 && i < firstFinal && m.channel === "analysis") return;
    renderMessage(m, out, hasFunctionTools);
  });
}

function renderMessage(m: HarmonyMessage, out: HarmonySegment[], hasFunctionTools: boolean): void {
  out.push(HarmonyToken.start);
  if (m.role === "tool") {
    if (m.name === undefined) throw new HarmonyRenderError("tool_without_name", "a tool message needs its tool's name");
    out.push(m.name);
  } else {
    out.push(m.role);
    if (m.name !== undefined) out.push(`:${m.name}`);
  }
  if (m.recipient !== undefined && m.recipient !== "all") out.push(` to=${m.recipient}`);
  if (m.channel !== undefined) out.push(HarmonyToken.channel, m.channel);
  if (m.contentType !== undefined) {
    if (m.contentType.startsWith("<|constrain|>")) {
      const rest = m.contentType.slice("<|constrain|>".length);
      out.push(" ", HarmonyToken.constrain);
      if (rest !== "") out.push(rest);
    } else out.push(` ${m.contentType}`);
  }
  out.push(HarmonyToken.message);
  for (const c of m.content) {
    if (c.type === "text") out.push(c.text);
    else if (c.type === "system") {
      if (m.role !== "system") throw new HarmonyRenderError("misplaced_content", "system content outside a system message");
      out.push(systemText(c, hasFunctionTools));
    } else {
      if (m.role !== "developer") throw new HarmonyRenderError("misplaced_content", "developer content outside a developer message");
      out.push(developerText(c));
    }
  }
  out.push(m.role === "assistant" && m.recipient !== undefined ? HarmonyToken.call : HarmonyToken.end);
}

function systemText(s: SystemContent, hasFunctionTools: boolean): string {
  const sections: string[] = [];
  const top = [
    ...(s.modelIdentity !== undefined ? [s.modelIdentity] : []),
    ...(s.knowledgeCutoff !== undefined ? [`Knowledge cutoff: ${s.knowledgeCutoff}`] : []),
    ...(s.conversationStartDate !== undefined ? [`Current date: ${s.conversationStartDate}`] : []),
  ];
  if (top.length > 0) sections.push(top.join("\n"));
  if (s.reasoningEffort !== undefined) sections.push(`Reasoning: ${s.reasoningEffort}`);
  if (s.tools && s.tools.length > 0) sections.push(toolsSection(s.tools));
  const channels = s.channelConfig;
  if (channels && channels.validChannels.length > 0) {
    let header = `# Valid channels: ${channels.validChannels.join(", ")}.`;
    if (channels.channelRequired) header += " Channel must be included for every message.";
    if (hasFunctionTools) header += "\nCalls to these tools must go to the commentary channel: 'functions'.";
    sections.push(header);
  }
  return sections.join("\n\n");
}

function developerText(d: DeveloperContent): string {
  const sections: string[] = [];
  if (d.instructions !== undefined) sections.push("# Instructions", d.instructions);
  if (d.tools && d.tools.length > 0) sections.push(toolsSection(d.tools));
  return sections.join("\n\n");
}

/** Rust's str::lines: split at \n (a \r before it dropped), no empty last line. */
function lines(text: string): string[] {
  if (text === "") return [];
  const out = text.split("\n").map((l) => (l.endsWith("\r") ? l.slice(0, -1) : l));
  if (text.endsWith("\n")) out.pop();
  return out;
}

function toolsSection(namespaces: readonly HarmonyToolNamespace[]): string {
  const sections = ["# Tools"];
  // A BTreeMap by name: byte order of the names, one namespace per name (the last given).
  const byName = new Map<string, HarmonyToolNamespace>();
  for (const ns of namespaces) byName.set(ns.name, ns);
  const sorted = [...byName.values()].sort((a, b) => compareUtf8(a.name, b.name));
  for (const ns of sorted) {
    const part = [`## ${ns.name}\n`];
    if (ns.description !== undefined) for (const line of lines(ns.description)) part.push(ns.tools.length > 0 ? `// ${line}` : line);
    if (ns.tools.length > 0) {
      part.push(`namespace ${ns.name} {\n`);
      for (const tool of ns.tools) {
        for (const line of lines(tool.description)) part.push(`// ${line}`);
        part.push(tool.parameters !== undefined && tool.parameters !== null ? `type ${tool.name} = (_: ${schemaToTypescript(tool.parameters, "")}) => any;\n` : `type ${tool.name} = () => any;\n`);
      }
      part.push(`} // namespace ${ns.name}`);
    }
    sections.push(part.join("\n"));
  }
  return sections.join("\n\n");
}

function compareUtf8(a: string, b: string): number {
  const x = new TextEncoder().encode(a);
  const y = new TextEncoder().encode(b);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
}

// JSON values as serde_json's Value sees them: an object's members in the order written (harmony builds serde_json with preserve_order).

function get(v: JsonLike | undefined, key: string): JsonLike | undefined {
  if (v instanceof Map) return v.get(key);
  if (typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof PyFloat)) return Object.hasOwn(v, key) ? (v as Record<string, JsonLike>)[key] : undefined;
  return undefined;
}

function entries(v: JsonLike | undefined): [string, JsonLike][] | undefined {
  if (v instanceof Map) return [...v.entries()];
  if (typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof PyFloat)) return Object.entries(v as Record<string, JsonLike>);
  return undefined;
}

const str = (v: JsonLike | undefined): string | undefined => (typeof v === "string" ? v : undefined);
const arr = (v: JsonLike | undefined): readonly JsonLike[] | undefined => (Array.isArray(v) ? (v as readonly JsonLike[]) : undefined);
const isEnum = (s: JsonLike | undefined) => (arr(get(s, "enum"))?.length ?? 0) > 0;
const nullable = (s: JsonLike | undefined) => get(s, "nullable") === true;

/** A default's comment text: a string quoted unless the schema is an enum; anything else as serde_json prints it. */
function defaultText(d: JsonLike, schema: JsonLike, quoteEnums = false): string {
  if (typeof d === "string") return !isEnum(schema) || quoteEnums ? `"${d}"` : d;
  return serdeJson(d);
}

/** json_schema_to_typescript, case by case as harmony writes it. */
export function schemaToTypescript(schema: JsonLike, indent: string, depth = 0): string {
  if (depth > MAX_SCHEMA_DEPTH) throw new HarmonyRenderError("tool_schema_depth", `a tool schema nests deeper than ${MAX_SCHEMA_DEPTH} levels`);
  const oneOf = get(schema, "oneOf");
  const variants = arr(oneOf);
  if (variants) {
    let out = "";
    variants.forEach((variant, i) => {
      out += i === 0 ? `\n${indent} | ` : `\n${indent} | `;
      let type = schemaToTypescript(variant, `${indent}   `, depth + 1);
      if (nullable(variant) && !type.includes("null")) type += " | null";
      out += type;
      const trailing: string[] = [];
      const desc = str(get(variant, "description"));
      if (desc !== undefined) trailing.push(desc);
      const d = get(variant, "default");
      // Here harmony quotes a string default unless its schema is an enum, and prints an enum's string default as JSON (quoted too).
      if (d !== undefined) trailing.push(`default: ${typeof d === "string" && !isEnum(variant) ? `"${d}"` : serdeJson(d)}`);
      if (trailing.length > 0) out += ` // ${trailing.join(" ")}`;
    });
    return out;
  }
  const typeValue = get(schema, "type");
  const types = arr(typeValue);
  if (types) {
    const names = types.flatMap((t) => (typeof t === "string" ? [t === "integer" ? "number" : t] : []));
    if (names.length > 0) return names.join(" | ");
  }
  const type = str(typeValue);
  if (type === undefined) return "any";
  switch (type) {
    case "object":
      return objectToTypescript(schema, indent, depth);
    case "string": {
      const values = arr(get(schema, "enum"))?.flatMap((v) => (typeof v === "string" ? [`"${v}"`] : []));
      return values && values.length > 0 ? values.join(" | ") : "string";
    }
    case "number":
    case "integer":
      return "number";
    case "boolean":
      return "boolean";
    case "array": {
      const items = get(schema, "items");
      return items !== undefined ? `${schemaToTypescript(items, indent, depth + 1)}[]` : "Array<any>";
    }
    default:
      return "any";
  }
}

function objectToTypescript(schema: JsonLike, indent: string, depth: number): string {
  let out = "";
  const desc = str(get(schema, "description"));
  if (desc !== undefined) out += `${indent}// ${desc}\n`;
  out += "{\n";
  const props = entries(get(schema, "properties"));
  if (props) {
    const required = new Set((arr(get(schema, "required")) ?? []).flatMap((r) => (typeof r === "string" ? [r] : [])));
    for (const [key, val] of props) {
      const optional = required.has(key) ? "" : "?";
      const title = str(get(val, "title"));
      if (title !== undefined) out += `${indent}// ${title}\n${indent}//\n`;
      const oneOf = get(val, "oneOf");
      const propDesc = str(get(val, "description"));
      if (oneOf === undefined && propDesc !== undefined) out += `${indent}// ${propDesc}\n`;
      const examples = arr(get(val, "examples"));
      if (examples && examples.length > 0) {
        out += `${indent}// Examples:\n`;
        for (const ex of examples) if (typeof ex === "string") out += `${indent}// - "${ex}"\n`;
      }
      const variants = arr(oneOf);
      if (variants) {
        const firstDesc = str(get(variants[0], "description"));
        const skipPropDesc = propDesc !== undefined && variants.length > 0 && firstDesc === propDesc;
        let descAbove = false;
        if (!skipPropDesc && propDesc !== undefined) {
          out += `${indent}// ${propDesc}\n`;
          descAbove = true;
        }
        const d = get(val, "default");
        if (d !== undefined) out += `${indent}// default: ${defaultText(d, val)}\n`;
        out += `${indent}${key}${optional}:\n`;
        variants.forEach((variant, i) => {
          out += `${indent} | `;
          let type = schemaToTypescript(variant, `${indent}   `, depth + 1);
          if (nullable(variant) && !type.includes("null")) type += " | null";
          out += type;
          const trailing: string[] = [];
          const vd = str(get(variant, "description"));
          if (!(i === 0 && descAbove) && vd !== undefined && vd !== propDesc) trailing.push(vd);
          const vdef = get(variant, "default");
          if (vdef !== undefined) trailing.push(`default: ${defaultText(vdef, variant)}`);
          if (trailing.length > 0) out += ` // ${trailing.join(" ")}`;
          out += "\n";
        });
        out += `${indent},\n`;
        continue;
      }
      out += `${indent}${key}${optional}: `;
      let type = schemaToTypescript(val, `${indent}    `, depth + 1);
      if (nullable(val) && !type.includes("null")) type += " | null";
      out += `${type},`;
      const d = get(val, "default");
      if (d !== undefined) out += ` // default: ${defaultText(d, val)}`;
      out += "\n";
    }
  }
  return `${out}${indent}}`;
}

/** A JSON value as serde_json's Display writes it: compact, members in order, floats as ryu prints them. */
export function serdeJson(v: JsonLike): string {
  if (v === null) return "null";
  if (typeof v === "boolean") return v ? "true" : "false";
  if (typeof v === "bigint") return v.toString();
  if (typeof v === "number") return Number.isInteger(v) && Math.abs(v) < 2 ** 64 ? (Object.is(v, -0) ? "-0.0" : BigInt(v).toString()) : ryu(v);
  if (v instanceof PyFloat) return ryu(v.value);
  if (typeof v === "string") return serdeString(v);
  if (Array.isArray(v)) return `[${(v as readonly JsonLike[]).map(serdeJson).join(",")}]`;
  return `{${entries(v)!.map(([k, x]) => `${serdeString(k)}:${serdeJson(x)}`).join(",")}}`;
}

/** A string as serde_json escapes it: quote, backslash and control characters only (\b \f \n \r \t, the rest \u00XX). */
function serdeString(s: string): string {
  let out = '"';
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === '"') out += '\\"';
    else if (ch === "\\") out += "\\\\";
    else if (c === 8) out += "\\b";
    else if (c === 12) out += "\\f";
    else if (c === 10) out += "\\n";
    else if (c === 13) out += "\\r";
    else if (c === 9) out += "\\t";
    else if (c < 0x20) out += `\\u${c.toString(16).padStart(4, "0")}`;
    else out += ch;
  }
  return `${out}"`;
}

/**
 * A finite float as the ryu crate formats it (what serde_json prints): the shortest
 * digits that read back the same (JavaScript finds the same ones), written as an
 * integer with ".0" up to 16 digits, a decimal down to 0.00001, else "d.ddde±x"
 * without a "+". serde_json writes NaN and infinities as null.
 */
export function ryu(x: number): string {
  if (!Number.isFinite(x)) return "null";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const sign = x < 0 ? "-" : "";
  const [mantissa, exp] = Math.abs(x).toExponential().split("e") as [string, string];
  const digits = mantissa.replace(".", "");
  const e = Number(exp);
  // kk: where the decimal point falls after the digits' first one (value = 0.d1d2... × 10^kk).
  const length = digits.length;
  const kk = e + 1;
  if (length <= kk && kk <= 16) return `${sign}${digits}${"0".repeat(kk - length)}.0`;
  if (0 < kk && kk <= 16) return `${sign}${digits.slice(0, kk)}.${digits.slice(kk)}`;
  if (-5 < kk && kk <= 0) return `${sign}0.${"0".repeat(-kk)}${digits}`;
  return `${sign}${length === 1 ? digits : `${digits[0]}.${digits.slice(1)}`}e${e}`;
}
