/**
 * tiktoken's BPE (OpenAI's Rust crate, in WebAssembly) for the families whose
 * tokenizer.json describes that same algorithm: byte-level BPE behind one split
 * regex, at most Unicode NFC before it, every added token plain. On those (Llama 3,
 * Qwen3, Mistral Nemo) it gives the ids @huggingface/tokenizers gives for about a
 * third of the CPU (bench/tokenizer-engines.ts), and the codec built on it needs no
 * parsed `Tokenizer` at all, so an isolate holds the vocabulary once, inside the
 * WebAssembly instance. test/unit/hf-tokenizers.test.ts holds the codec using it to
 * transformers' output, as it holds the others.
 *
 * The WebAssembly module is handed in compiled: Workers compile a module only from
 * the Worker's own modules (CompiledWasm), never from bytes; Node compiles the
 * package's file (node-files.ts).
 *
 * A Worker carries the spec, not the tokenizer.json: scripts/build.ts derives it at
 * build time (bpeSpecOf, then bpeText) and bundles that text, a quarter of the JSON's
 * size, so an isolate's first prompt skips parsing the JSON and ranking its
 * vocabulary (bpeFromText reads it back without parsing the ranks).
 */
import * as bindings from "tiktoken/lite/init";

interface PreTokenizer {
  type: string;
  pattern?: { Regex?: string; String?: string };
  behavior?: string;
  invert?: boolean;
  add_prefix_space?: boolean;
  use_regex?: boolean;
  pretokenizers?: PreTokenizer[];
}

interface PostProcessor {
  type: string;
  single?: ({ SpecialToken: { id: string } } | { Sequence: { id: string } })[];
  special_tokens?: Record<string, { ids: number[] }>;
  processors?: PostProcessor[];
}

/** The parts of a tokenizer.json this reads. */
export interface TokenizerJsonShape {
  normalizer?: { type: string; normalizers?: unknown[] } | null;
  pre_tokenizer?: PreTokenizer | null;
  post_processor?: PostProcessor | null;
  model?: { type?: string; vocab?: Record<string, number>; byte_fallback?: boolean; dropout?: number | null; continuing_subword_prefix?: string | null; end_of_word_suffix?: string | null };
  added_tokens?: { id: number; content: string; special?: boolean; lstrip?: boolean; rstrip?: boolean; single_word?: boolean; normalized?: boolean }[];
}

/** What tiktoken is given, and what the codec does around it. */
export interface BpeSpec {
  /** The vocabulary as tiktoken's ranks: each token's bytes in base64, its id. */
  ranks: string;
  /** The split regex. */
  pattern: string;
  /** Unicode NFC before splitting (Qwen's normalizer). */
  nfc: boolean;
  /** Ids a text prompt starts and ends with (the post-processor's single-sequence template). */
  prefix: number[];
  suffix: number[];
  /** The added tokens (every one plain): split out of the text first, each its own id. */
  added: { id: number; content: string; special: boolean }[];
}

/** The spec as one text: a JSON line of everything but the ranks, then the ranks (what a Worker bundles). */
export function bpeText(spec: BpeSpec): string {
  const { ranks, ...rest } = spec;
  return `${JSON.stringify(rest)}\n${ranks}`;
}

/** A spec from bpeText's output (the ranks stay one slice of the text: nothing parses them in JavaScript). */
export function bpeFromText(text: string): BpeSpec {
  const eol = text.indexOf("\n");
  if (eol < 0) throw new Error("tiktoken-bpe: not a BPE spec's text");
  return { ...(JSON.parse(text.slice(0, eol)) as Omit<BpeSpec, "ranks">), ranks: text.slice(eol + 1) };
}

/** GPT-2's byte-level alphabet: the character each byte is written as in a vocabulary. */
function byteLevelDecoder(): Map<string, number> {
  const bytes: number[] = [];
  for (let b = 33; b <= 126; b++) bytes.push(b);
  for (let b = 161; b <= 172; b++) bytes.push(b);
  for (let b = 174; b <= 255; b++) bytes.push(b);
  const chars = [...bytes];
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    if (bytes.includes(b)) continue;
    bytes.push(b);
    chars.push(256 + extra++);
  }
  return new Map(chars.map((c, i) => [String.fromCharCode(c), bytes[i]!]));
}

function base64(bytes: number[]): string {
  return btoa(String.fromCharCode(...bytes));
}

/** The single-sequence template's ids before and after the text, or undefined for a post-processor this does not know. */
function singleTemplate(pp: PostProcessor | null | undefined): { prefix: number[]; suffix: number[] } | undefined {
  if (!pp || pp.type === "ByteLevel") return { prefix: [], suffix: [] };
  if (pp.type === "Sequence") {
    let found = { prefix: [] as number[], suffix: [] as number[] };
    for (const p of pp.processors ?? []) {
      const t = singleTemplate(p);
      if (!t) return undefined;
      if (t.prefix.length > 0 || t.suffix.length > 0) found = t;
    }
    return found;
  }
  if (pp.type !== "TemplateProcessing" || !pp.single) return undefined;
  const prefix: number[] = [];
  const suffix: number[] = [];
  let seen = false;
  for (const part of pp.single) {
    if ("Sequence" in part) {
      seen = true;
      continue;
    }
    const ids = pp.special_tokens?.[part.SpecialToken.id]?.ids;
    if (!ids) return undefined;
    (seen ? suffix : prefix).push(...ids);
  }
  return seen ? { prefix, suffix } : undefined;
}

/** The family as tiktoken's BPE, or undefined where that is not the same algorithm (the codec then uses @huggingface/tokenizers). */
export function bpeSpecOf(json: TokenizerJsonShape): BpeSpec | undefined {
  const model = json.model;
  if (model?.type !== "BPE" || !model.vocab || model.byte_fallback || model.dropout || model.continuing_subword_prefix || model.end_of_word_suffix) return undefined;
  const n = json.normalizer;
  if (n && n.type !== "NFC" && !(n.type === "Sequence" && n.normalizers?.length === 0)) return undefined;
  const pre = json.pre_tokenizer;
  const steps = pre?.type === "Sequence" ? (pre.pretokenizers ?? []) : pre ? [pre] : [];
  const [split, byteLevel] = steps;
  if (steps.length !== 2 || split?.type !== "Split" || split.behavior !== "Isolated" || split.invert || !split.pattern?.Regex) return undefined;
  if (byteLevel?.type !== "ByteLevel" || byteLevel.use_regex || byteLevel.add_prefix_space) return undefined;
  if ((json.added_tokens ?? []).some((t) => t.lstrip || t.rstrip || t.single_word || t.normalized)) return undefined;
  const template = singleTemplate(json.post_processor);
  if (!template) return undefined;
  const decode = byteLevelDecoder();
  const lines: string[] = [];
  for (const [token, id] of Object.entries(model.vocab)) {
    const bytes: number[] = [];
    for (const ch of token) {
      const b = decode.get(ch);
      if (b === undefined) return undefined;
      bytes.push(b);
    }
    lines.push(`${base64(bytes)} ${id}`);
  }
  const added = (json.added_tokens ?? []).map((t) => ({ id: t.id, content: t.content, special: t.special === true }));
  return { ranks: lines.join("\n"), pattern: split.pattern.Regex, nfc: n?.type === "NFC", ...template, added };
}

let instantiated: WebAssembly.Module | undefined;
let memory: WebAssembly.Memory | undefined;

/** Bytes of tiktoken's WebAssembly memory in this runtime (every family's ranks): what an isolate holds beside its V8 heap. */
export function bpeMemoryBytes(): number {
  return memory?.buffer.byteLength ?? 0;
}

/** tiktoken's bindings on `wasm`, instantiated once per runtime (synchronously: a family's codec is made on its first prompt). */
function bind(wasm: WebAssembly.Module): typeof bindings {
  if (instantiated === undefined) {
    const instance = new WebAssembly.Instance(wasm, { "./tiktoken_bg.js": bindings as unknown as WebAssembly.ModuleImports });
    (bindings as unknown as { __wbg_set_wasm(exports: WebAssembly.Exports): void }).__wbg_set_wasm(instance.exports);
    memory = instance.exports.memory as WebAssembly.Memory;
    instantiated = wasm;
  } else if (instantiated !== wasm) throw new Error("tiktoken: instantiated from another module already");
  return bindings;
}

/** Text (no added tokens in it) as ids, by tiktoken's BPE. */
export function tiktokenEncoder(spec: BpeSpec, wasm: WebAssembly.Module): (text: string) => Uint32Array {
  const encoder = new (bind(wasm).Tiktoken)(spec.ranks, {}, spec.pattern);
  return spec.nfc ? (text) => encoder.encode_ordinary(text.normalize("NFC")) : (text) => encoder.encode_ordinary(text);
}
