/**
 * A family's tokenizer.json as the BPE spec the edge runs (./ranked-bpe.ts): the
 * vocabulary as each token's bytes by rank, the pre-tokenizer's split regexes, NFC or
 * not, the ids a text prompt starts and ends with, and the added tokens. Only for a
 * tokenizer.json that describes exactly that algorithm: byte-level BPE with no
 * dropout, prefixes or byte fallback, behind one or more isolating split regexes
 * applied in turn, at most NFC before them, every added token plain (Llama 3, Qwen3,
 * Mistral Nemo, DeepSeek-V3). test/unit/hf-tokenizers.test.ts holds the codec built
 * on it to transformers' output.
 *
 * A Worker carries the spec, not the tokenizer.json: src/local/build.ts derives it at
 * build time (bpeSpecOf, then bpeText) and bundles that text, a quarter of the JSON's
 * size, so an isolate's first prompt reads typed arrays from it and never parses the
 * JSON.
 */

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

/** What the engine runs. */
export interface BpeSpec {
  /** The vocabulary: line r is token r's bytes in base64 (an empty line for a rank with no token). */
  ranks: string;
  /** The split regexes, applied in turn (each isolates its matches within the pieces of the one before). */
  patterns: string[];
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

/** A spec from bpeText's output (the ranks stay one slice of the text, read into typed arrays by ./ranked-bpe.ts). */
export function bpeFromText(text: string): BpeSpec {
  const eol = text.indexOf("\n");
  if (eol < 0) throw new Error("bpe-spec: not a BPE spec's text");
  const head = JSON.parse(text.slice(0, eol)) as Omit<BpeSpec, "ranks">;
  if (!Array.isArray(head.patterns)) throw new Error("bpe-spec: a spec from before patterns (rebuild it)");
  return { ...head, ranks: text.slice(eol + 1) };
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

/** The family as the engine's BPE spec, or undefined where its tokenizer.json describes another algorithm (the codec then uses @huggingface/tokenizers). */
export function bpeSpecOf(json: TokenizerJsonShape): BpeSpec | undefined {
  const model = json.model;
  if (model?.type !== "BPE" || !model.vocab || model.byte_fallback || model.dropout || model.continuing_subword_prefix || model.end_of_word_suffix) return undefined;
  const n = json.normalizer;
  if (n && n.type !== "NFC" && !(n.type === "Sequence" && n.normalizers?.length === 0)) return undefined;
  const pre = json.pre_tokenizer;
  const steps = pre?.type === "Sequence" ? (pre.pretokenizers ?? []) : pre ? [pre] : [];
  const splits = steps.slice(0, -1);
  const byteLevel = steps.at(-1);
  if (splits.length === 0 || splits.some((s) => s.type !== "Split" || s.behavior !== "Isolated" || s.invert || !s.pattern?.Regex)) return undefined;
  if (byteLevel?.type !== "ByteLevel" || byteLevel.use_regex || byteLevel.add_prefix_space) return undefined;
  // A `normalized` added token is matched in the normalized text: the same text where there is no normalizer (DeepSeek-V3's is an empty Sequence).
  const identity = !n || n.type === "Sequence";
  if ((json.added_tokens ?? []).some((t) => t.lstrip || t.rstrip || t.single_word || (t.normalized && !identity))) return undefined;
  const template = singleTemplate(json.post_processor);
  if (!template) return undefined;
  const decode = byteLevelDecoder();
  const added = (json.added_tokens ?? []).map((t) => ({ id: t.id, content: t.content, special: t.special === true }));
  const addedContent = new Set(added.map((t) => t.content));
  const lines: string[] = [];
  for (const [token, id] of Object.entries(model.vocab)) {
    if (!Number.isInteger(id) || id < 0 || lines[id] !== undefined) return undefined;
    const bytes: number[] = [];
    for (const ch of token) {
      const b = decode.get(ch);
      if (b === undefined) break;
      bytes.push(b);
    }
    if (bytes.length === token.length) lines[id] = base64(bytes);
    // An added token in the vocabulary that is no byte-level text (DeepSeek-V3's first three) is split out before BPE: no bytes of its own.
    else if (addedContent.has(token)) lines[id] = "";
    else return undefined;
  }
  return { ranks: Array.from(lines, (l) => l ?? "").join("\n"), patterns: splits.map((s) => s.pattern!.Regex!), nfc: n?.type === "NFC", ...template, added };
}

/** A tiktoken encoding as the `tiktoken` npm package ships it (encoders/<name>.json). */
export interface TiktokenJsonShape {
  pat_str: string;
  /** Lines of "<name> <first rank> <base64> <base64> ...": each token's bytes, ranks counting up from the first. */
  bpe_ranks: string;
}

/**
 * A tiktoken encoding as the engine's BPE spec, with `specials` (content, id) as added
 * tokens: OpenAI's encodings are byte-level BPE behind one split regex, no normalizer,
 * nothing added around a text, which is this spec's shape exactly.
 */
export function bpeSpecOfTiktoken(json: TiktokenJsonShape, specials: readonly (readonly [string, number])[]): BpeSpec {
  const lines: string[] = [];
  for (const line of json.bpe_ranks.split("\n")) {
    if (line === "") continue;
    const words = line.split(" ");
    let rank = Number(words[1]);
    if (!Number.isInteger(rank) || rank < 0) throw new Error(`bpe-spec: a tiktoken ranks line without its first rank: ${line.slice(0, 40)}`);
    for (const b64 of words.slice(2)) lines[rank++] = b64;
  }
  return {
    ranks: Array.from(lines, (l) => l ?? "").join("\n"),
    patterns: [json.pat_str],
    nfc: false,
    prefix: [],
    suffix: [],
    added: specials.map(([content, id]) => ({ id, content, special: true })),
  };
}
