/**
 * A model family's tokenizer and chat template at work (./hf-family.ts registers
 * them): the tokenizer from its `tokenizer.json` (@huggingface/tokenizers), the chat
 * template from its `tokenizer_config.json` (@huggingface/jinja). Imported only where
 * a family is used, so a Worker whose deployments name none carries neither library.
 */
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { headOf, UnsupportedPrompt, type TokenizeBudget } from "./tokenizer.ts";
import type { FamilyCodec } from "./hf-family.ts";
import { bpeFromText, bpeSpecOf, type BpeSpec, type TokenizerJsonShape } from "./bpe-spec.ts";
import { isMergeBpeText, mergeBpeEncoder, mergeBpeFromText, mergeBpeOf, mergeBpeSpecOf } from "./merge-bpe.ts";
import { bpeEncoder, rememberingEncoder, type EncodeLimits } from "./ranked-bpe.ts";
import { pyStrip, pythonSemantics } from "./jinja-python.ts";

// Python's string semantics in the template engine, as vLLM's jinja2 renders (./jinja-python.ts).
pythonSemantics();

/**
 * A family's files: `tokenizer.json` as text (parsed when the codec is made), or for a
 * family the edge's BPE engine runs its BPE spec's text (`bpe`, made at build time from
 * the tokenizer.json: what a Worker carries), and `tokenizer_config.json` parsed.
 */
export interface FamilyFiles {
  tokenizerJson?: string;
  /** bpe-spec.ts bpeText of the family's tokenizer.json, in place of the JSON. */
  bpe?: string;
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

/** Token ids. */
type Ids = Uint32Array | number[];

const tokenOf = (t: SpecialToken | undefined) => (t === null || t === undefined ? undefined : typeof t === "string" ? t : t.content);

/** The codec of a family's files. */
export function familyCodec({ tokenizerJson, bpe: bpeText, tokenizerConfig: config }: FamilyFiles): FamilyCodec {
  const prebuilt = bpeText === undefined ? undefined : isMergeBpeText(bpeText) ? mergesEngine(mergeBpeFromText(bpeText)) : rankedEngine(bpeFromText(bpeText));
  let json = prebuilt || tokenizerJson === undefined ? undefined : (JSON.parse(tokenizerJson) as TokenizerJsonShape & { added_tokens?: AddedToken[] });
  const bpe = prebuilt ?? (json && engineOfJson(json));
  if (!bpe && !json) throw new Error("familyCodec: no tokenizer.json and no BPE spec");
  const added: readonly AddedToken[] = bpe ? bpe.added : (json!.added_tokens ?? []);
  // The library's tokenizer, made when first needed: at once for a family the BPE engine does
  // not run; for one it runs, only for the stand-in's decoding (the parsed JSON is dropped, the
  // module's string kept). A Worker carries no tokenizer.json for such a family: it never decodes.
  let made: Tokenizer | undefined;
  const tokenizer = () => {
    if (made) return made;
    if (tokenizerJson === undefined) throw new Error("familyCodec: decoding needs the family's tokenizer.json (the engine stand-in's, in Node)");
    return (made = new Tokenizer(json ?? JSON.parse(tokenizerJson), config));
  };
  const source = Array.isArray(config.chat_template) ? config.chat_template.find((t) => t.name === "default")?.template : config.chat_template;
  const template = source === undefined ? undefined : new Template(source);
  // transformers continues a final message only through a template that reads `content`.
  const continues = source?.includes("content") === true;
  const vars: Record<string, unknown> = {};
  for (const k of ["bos_token", "eos_token", "pad_token", "unk_token"] as const) {
    const t = tokenOf(config[k]);
    if (t !== undefined) vars[k] = t;
  }
  const bosToken = tokenOf(config.bos_token);
  const eosToken = tokenOf(config.eos_token);
  const bosId = bosToken === undefined ? undefined : added.find((t) => t.content === bosToken)?.id;
  // transformers' fast tokenizer adds BOS to a text prompt when add_bos_token is set, whatever
  // tokenizer.json's post-processor says (DeepSeek-V3's says ByteLevel only): BOS when the
  // engine's own text prompt would start with `first` instead.
  const bosBefore = (first: number | undefined) => (config.add_bos_token === true && bosId !== undefined && first !== bosId ? [bosId] : []);
  // A text cut well past maxTokens' worth of characters: BPE never merges across the
  // pre-tokenizer's splits, so the tokens before the cut's last word are the whole
  // text's; at 8 characters per token on average (English is ~4), the cut is far beyond.
  const head = (t: string, maxTokens: number) => headOf(t, maxTokens * 8 + 64);
  const cut = (ids: Ids, maxTokens: number) => (ids.length > maxTokens ? ids.slice(0, maxTokens) : ids);
  let segments: (text: string, limits: EncodeLimits) => Ids;
  let text: (prompt: string, limits: EncodeLimits) => Ids;
  if (bpe) {
    // Every added token is split out first (the library matches them all in its input, special
    // or not, before anything else: bpeSpecOf takes no family with a strip or word rule), and
    // the text between goes to the BPE engine; a text prompt gets the post-processor's ids around it.
    segments = segmentEncoder(bpe.encoder(), added);
    const prefix = [...bosBefore(bpe.prefix[0]), ...bpe.prefix];
    text = (prompt, limits) => {
      const ids = segments(prompt, { ...limits, maxTokens: Math.max(0, limits.maxTokens - prefix.length) });
      // A prompt cut short has no end: the suffix would follow text the prompt goes on with.
      const suffix = limits.budget.exhausted || prefix.length + ids.length >= limits.maxTokens ? [] : bpe.suffix;
      return joined([prefix, ids, suffix], prefix.length + ids.length + suffix.length);
    };
  } else {
    // The library's work cannot be metered inside one call: its input is cut at the budget
    // instead, a UTF-16 unit for a byte. No registered family takes this path since Gemma 3
    // has the merges engine: it is for a family's tokenizer.json that neither engine takes.
    const library = tokenizer();
    const within = (t: string, { budget }: EncodeLimits) => {
      if (t.length <= budget.bytes) {
        budget.bytes -= t.length;
        return t;
      }
      budget.exhausted = true;
      const h = headOf(t, budget.bytes);
      budget.bytes = 0;
      return h;
    };
    segments = segmentEncoder((t, limits) => library.encode(within(t, limits), { add_special_tokens: false }).ids, added.filter((t) => t.special));
    const bos = bosBefore(library.encode("a", { add_special_tokens: true }).ids[0]);
    text = (prompt, limits) => {
      const ids = library.encode(within(prompt, limits), { add_special_tokens: true }).ids;
      return bos.length === 0 ? ids : [...bos, ...ids];
    };
  }
  json = undefined;
  const limitsOf = (maxTokens: number, budget: TokenizeBudget | undefined): EncodeLimits => ({ maxTokens, budget: budget ?? { bytes: Number.POSITIVE_INFINITY } });
  return {
    engine: bpe ? "bpe" : "tokenizers",
    chat(messages, tools, flags, maxTokens, budget) {
      if (!template) throw new UnsupportedPrompt("no_chat_template");
      // vLLM refuses a request with both flags (400); its chat_template_kwargs then override
      // them (it updates the template's arguments with them), and transformers refuses both again.
      const requestedAgp = flags.addGenerationPrompt ?? true;
      const requestedCont = flags.continueFinalMessage === true;
      if (requestedAgp && requestedCont) throw new UnsupportedPrompt("continue_with_generation_prompt");
      const { add_generation_prompt: agpKw, continue_final_message: contKw, ...kwargs } = flags.kwargs ?? {};
      if ((agpKw !== undefined && typeof agpKw !== "boolean") || (contKw !== undefined && typeof contKw !== "boolean")) throw new UnsupportedPrompt("render_flags");
      const agp = agpKw ?? requestedAgp;
      const cont = contKw ?? requestedCont;
      if (agp && cont) throw new UnsupportedPrompt("continue_with_generation_prompt");
      let chat = messages;
      let final: string | undefined;
      if (cont) {
        // transformers' way (5.x): the final message's text gets a tag, the chat is rendered, and
        // the text is cut where the tag is (the template may have trimmed the tag's space).
        const last = messages.at(-1);
        if (!last || typeof last.content !== "string" || !continues) throw new UnsupportedPrompt("template_error");
        final = last.content;
        chat = [...messages.slice(0, -1), { ...last, content: final + CONTINUE_TAG }];
      }
      let rendered: string;
      try {
        rendered = template.render({ ...vars, ...kwargs, messages: chat, ...(tools ? { tools } : {}), add_generation_prompt: agp });
      } catch {
        // The template refused the chat (roles out of order, ...): the engine answers 400.
        throw new UnsupportedPrompt("template_error");
      }
      if (final !== undefined) {
        const at = rendered.lastIndexOf(CONTINUE_TAG_WORD);
        if (at < 0 || !rendered.includes(pyStrip(final, undefined))) throw new UnsupportedPrompt("template_error");
        rendered = rendered.startsWith(CONTINUE_TAG, at) ? rendered.slice(0, at) : pyStrip(rendered.slice(0, at), undefined, "right");
      }
      return cut(segments(head(rendered, maxTokens), limitsOf(maxTokens, budget)), maxTokens);
    },
    text: (prompt, maxTokens, budget) => cut(text(head(prompt, maxTokens), limitsOf(maxTokens, budget)), maxTokens),
    // Read by the engine stand-in only: the edge never builds the vocabulary map.
    get vocabSize() {
      let top = 0;
      for (const id of tokenizer().get_vocab(true).values()) top = Math.max(top, id + 1);
      return top;
    },
    get eosId() {
      return eosToken === undefined ? undefined : tokenizer().token_to_id(eosToken);
    },
    plain: (t) => tokenizer().encode(t, { add_special_tokens: false }).ids,
    decode: (ids) => tokenizer().decode([...ids], { skip_special_tokens: true }),
  };
}

/** What a codec needs of an edge engine: its added tokens, the ids around a text prompt, and the encoder of the text between added tokens. */
interface EngineSpec {
  added: BpeSpec["added"];
  prefix: number[];
  suffix: number[];
  encoder(): (text: string, limits: EncodeLimits) => Ids;
}

/** Byte-level BPE behind split regexes (./ranked-bpe.ts): Qwen3, Llama 3, Mistral Nemo, DeepSeek-V3. */
const rankedEngine = (s: BpeSpec): EngineSpec => ({ added: s.added, prefix: s.prefix, suffix: s.suffix, encoder: () => bpeEncoder(s) });

/** SentencePiece-style BPE over characters with byte fallback (./merge-bpe.ts): Gemma 3. */
const mergesEngine = (m: ReturnType<typeof mergeBpeFromText>): EngineSpec => ({ added: m.head.added, prefix: m.head.prefix, suffix: m.head.suffix, encoder: () => mergeBpeEncoder(m) });

/** The edge engine a tokenizer.json describes, if either takes it. */
function engineOfJson(json: TokenizerJsonShape): EngineSpec | undefined {
  const ranked = bpeSpecOf(json);
  if (ranked) return rankedEngine(ranked);
  const merges = mergeBpeSpecOf(json as Parameters<typeof mergeBpeSpecOf>[0]);
  return merges ? mergesEngine(mergeBpeOf(merges)) : undefined;
}

/** What transformers appends to the message it continues, to find where the message ends in the rendered chat. */
const CONTINUE_TAG = "CONTINUE_FINAL_MESSAGE_TAG ";
/** The tag without its space (a template may trim it), as transformers looks for it. */
const CONTINUE_TAG_WORD = CONTINUE_TAG.trimEnd();

interface AddedToken {
  id: number;
  content: string;
  special?: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
  single_word?: boolean;
  normalized?: boolean;
}

/**
 * Encodes a rendered chat a segment at a time, reusing the ids of segments seen
 * before (rememberingEncoder). The tokenizer splits its input at added tokens before
 * anything else (normalizer, pre-tokenizer, BPE), so the text between two added
 * tokens is tokenized on its own whatever surrounds it: a chat template puts special
 * tokens between messages, so a multi-turn chat's history re-sent with one more turn
 * is mostly segments already seen, and costs none of the budget. Only `split`'s
 * tokens with no strip or word rule are split here (the others stay inside a segment,
 * for `whole`); the longest match first, as the tokenizer matches. Stops where
 * `whole` stopped short (the budget spent, or maxTokens made).
 * test/unit/hf-tokenizers.test.ts checks the result against transformers.
 */
function segmentEncoder(whole: (text: string, limits: EncodeLimits) => Ids, split: readonly AddedToken[]): (text: string, limits: EncodeLimits) => Ids {
  const plain = split.filter((t) => !t.lstrip && !t.rstrip && !t.single_word && !t.normalized).sort((a, b) => b.content.length - a.content.length);
  if (plain.length === 0) return whole;
  const ids = new Map(plain.map((t) => [t.content, Uint32Array.of(t.id)]));
  const splitter = new RegExp(`(${plain.map((t) => t.content.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`);
  const encode = rememberingEncoder(whole);
  return (text, limits) => {
    // The pieces' ids, copied once into one array (no per-token pushes: an 8,000-token prompt is a few dozen pieces).
    const parts: Ids[] = [];
    let length = 0;
    for (const [i, piece] of text.split(splitter).entries()) {
      if (piece === "") continue;
      if (length >= limits.maxTokens || limits.budget.exhausted) break;
      // Odd pieces are the added tokens the split matched.
      const seg = i % 2 === 1 ? ids.get(piece)! : encode(piece, { ...limits, maxTokens: limits.maxTokens - length });
      parts.push(seg);
      length += seg.length;
    }
    return joined(parts, length);
  };
}

/** `parts` end to end in one array of `length` ids. */
function joined(parts: readonly Ids[], length: number): Uint32Array {
  const out = new Uint32Array(length);
  let at = 0;
  for (const p of parts) {
    out.set(p, at);
    at += p.length;
  }
  return out;
}
