/**
 * A model family's tokenizer and chat template at work (./hf-family.ts registers
 * them): the tokenizer from its `tokenizer.json` (@huggingface/tokenizers), the chat
 * template from its `tokenizer_config.json` (@huggingface/jinja). Imported only where
 * a family is used, so a Worker whose deployments name none carries neither library.
 */
import { Template } from "@huggingface/jinja";
import { Tokenizer } from "@huggingface/tokenizers";
import { headOf, UnsupportedPrompt } from "./tokenizer.ts";
import type { FamilyCodec } from "./hf-family.ts";

/** A family's files: `tokenizer.json` as text (parsed when the codec is made) and `tokenizer_config.json` parsed. */
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

const tokenOf = (t: SpecialToken | undefined) => (t === null || t === undefined ? undefined : typeof t === "string" ? t : t.content);

/** The codec of a family's files. */
export function familyCodec({ tokenizerJson, tokenizerConfig: config }: FamilyFiles): FamilyCodec {
  const json = JSON.parse(tokenizerJson) as { added_tokens?: AddedToken[] };
  const tokenizer = new Tokenizer(json, config);
  const source = Array.isArray(config.chat_template) ? config.chat_template.find((t) => t.name === "default")?.template : config.chat_template;
  const template = source === undefined ? undefined : new Template(source);
  const vars: Record<string, unknown> = {};
  for (const k of ["bos_token", "eos_token", "pad_token", "unk_token"] as const) {
    const t = tokenOf(config[k]);
    if (t !== undefined) vars[k] = t;
  }
  // transformers' fast Llama tokenizer adds BOS to a text prompt when add_bos_token is
  // set, whatever tokenizer.json's post-processor says (DeepSeek-V3's says ByteLevel only).
  const bosToken = tokenOf(config.bos_token);
  const eosToken = tokenOf(config.eos_token);
  const bosId = bosToken === undefined ? undefined : json.added_tokens?.find((t) => t.content === bosToken)?.id;
  const bos = config.add_bos_token === true && bosId !== undefined && tokenizer.encode("a", { add_special_tokens: true }).ids[0] !== bosId ? bosId : undefined;
  // A text cut well past maxTokens' worth of characters: BPE never merges across the
  // pre-tokenizer's splits, so the tokens before the cut's last word are the whole
  // text's; at 8 characters per token on average (English is ~4), the cut is far beyond.
  const head = (t: string, maxTokens: number) => headOf(t, maxTokens * 8 + 64);
  const cut = (ids: number[], maxTokens: number) => (ids.length > maxTokens ? ids.slice(0, maxTokens) : ids);
  const segments = segmentEncoder(tokenizer, json.added_tokens ?? []);
  return {
    chat(messages, tools, kwargs, maxTokens) {
      if (!template) throw new UnsupportedPrompt("no_chat_template");
      let text: string;
      try {
        text = template.render({ ...vars, ...kwargs, messages, ...(tools ? { tools } : {}), add_generation_prompt: true });
      } catch {
        // The template refused the chat (roles out of order, ...): the engine answers 400.
        throw new UnsupportedPrompt("template_error");
      }
      return cut(segments(head(text, maxTokens)), maxTokens);
    },
    text(prompt, maxTokens) {
      const ids = tokenizer.encode(head(prompt, maxTokens), { add_special_tokens: true }).ids;
      return cut(bos === undefined ? ids : [bos, ...ids], maxTokens);
    },
    // Read by the engine stand-in only: the edge never builds the vocabulary map.
    get vocabSize() {
      let top = 0;
      for (const id of tokenizer.get_vocab(true).values()) top = Math.max(top, id + 1);
      return top;
    },
    get eosId() {
      return eosToken === undefined ? undefined : tokenizer.token_to_id(eosToken);
    },
    plain: (text) => tokenizer.encode(text, { add_special_tokens: false }).ids,
    decode: (ids) => tokenizer.decode([...ids], { skip_special_tokens: true }),
  };
}

interface AddedToken {
  id: number;
  content: string;
  special?: boolean;
  lstrip?: boolean;
  rstrip?: boolean;
  single_word?: boolean;
  normalized?: boolean;
}

/** Characters of segment text a codec keeps token ids for (about 8 MB of UTF-16 at most, with the ids). */
const SEGMENT_CACHE_CHARS = 1 << 20;

/**
 * Encodes a rendered chat a segment at a time, reusing the ids of segments seen
 * before. The tokenizer splits its input at added tokens before anything else
 * (normalizer, pre-tokenizer, BPE), so the text between two special tokens is
 * tokenized on its own whatever surrounds it: a chat template puts special tokens
 * between messages, so a multi-turn chat's history re-sent with one more turn is
 * mostly segments already seen. Only special tokens with no strip or word rule are
 * split here (the others stay inside a segment, for the tokenizer); the longest
 * match first, as the tokenizer matches. test/unit/hf-tokenizers.test.ts checks the
 * result against transformers.
 */
function segmentEncoder(tokenizer: Tokenizer, added: readonly AddedToken[]): (text: string) => number[] {
  const plain = added.filter((t) => t.special && !t.lstrip && !t.rstrip && !t.single_word && !t.normalized).sort((a, b) => b.content.length - a.content.length);
  const whole = (text: string) => tokenizer.encode(text, { add_special_tokens: false }).ids;
  if (plain.length === 0) return whole;
  const ids = new Map(plain.map((t) => [t.content, t.id]));
  const splitter = new RegExp(`(${plain.map((t) => t.content.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")).join("|")})`);
  const cache = new Map<string, number[]>();
  let cachedChars = 0;
  return (text) => {
    const out: number[] = [];
    for (const [i, piece] of text.split(splitter).entries()) {
      if (piece === "") continue;
      if (i % 2 === 1) {
        out.push(ids.get(piece)!);
        continue;
      }
      let seg = cache.get(piece);
      if (seg) {
        // Most recently used last: the oldest go first when the cache is full.
        cache.delete(piece);
        cache.set(piece, seg);
      } else {
        seg = whole(piece);
        if (piece.length <= SEGMENT_CACHE_CHARS / 4) {
          cache.set(piece, seg);
          cachedChars += piece.length;
          for (const [k] of cache) {
            if (cachedChars <= SEGMENT_CACHE_CHARS) break;
            cache.delete(k);
            cachedChars -= k.length;
          }
        }
      }
      for (const id of seg) out.push(id);
    }
    return out;
  };
}
