/**
 * The tiny language model's tokenizer: one token per character. Pure (no I/O, no
 * Node APIs), so it runs in Node and in workerd alike: the reference replica encodes
 * prompts with it, and the edge encodes them the same way to compute their prefix
 * block keys (src/prompt/tokenizers/tiny-lm.ts).
 *
 * Vocabulary (V = 97 ids, also written to models/tiny-lm/vocab.json by the builder):
 *   0        "<s>": beginning of text. It pads the two-token context at the start
 *            and is never generated.
 *   1        "\n"
 *   2 .. 96  the printable ASCII characters " " (0x20) to "~" (0x7e), in order.
 *
 * Text is normalised before it is split: "\r" is dropped, tabs and non-breaking
 * spaces become spaces, NFKD folds accents and compatibility forms ("é" → "e",
 * "…" → "..."), a few typographic characters get ASCII stand-ins (dashes, quotes,
 * arrows, ≤ ≥ ×), and anything else becomes "?" (the fallback).
 */
// @ts-nocheck


export const BOS = 0;
export const BOS_TEXT = "<s>";
export const FALLBACK = "?";
/** Printable ASCII, in code point order. */
const PRINTABLE = Array.from({ length: 0x7f - 0x20 }, (_, i) => String.fromCharCode(0x20 + i));
/** Token id → text; id 0 is BOS. */
export const VOCAB: readonly string[] = Object.freeze([BOS_TEXT, "\n", ...PRINTABLE]);
export const VOCAB_SIZE = VOCAB.length;

const ID_OF = new Map<string, number>(VOCAB.map((t, i) => [t, i] as const));
ID_OF.delete(BOS_TEXT); // "<s>" in text is three characters, not the BOS token

/** ASCII stand-ins for characters NFKD leaves non-ASCII (the repo's docs use these). */
const STAND_INS: Readonly<Record<string, string>> = {
  "\t": " ",
  "\u00a0": " ",
  "\u2010": "-",
  "\u2011": "-",
  "\u2012": "-",
  "\u2013": "-",
  "\u2014": "-",
  "\u2015": "-",
  "\u2212": "-",
  "\u2018": "'",
  "\u2019": "'",
  "\u201a": "'",
  "\u201c": '"',
  "\u201d": '"',
  "\u201e": '"',
  "\u00ab": '"',
  "\u00bb": '"',
  "\u2192": "->",
  "\u2190": "<-",
  "\u2194": "<->",
  "\u21d2": "=>",
  "\u2191": "^",
  "\u2193": "v",
  "\u2264": "<=",
  "\u2265": ">=",
  "\u2260": "!=",
  "\u2248": "~",
  "\u00d7": "x",
  "\u00b7": ".",
  "\u2022": "*",
  "\u00b1": "+-",
  "\u00b5": "u",
  "\u03bc": "u",
  "\u2026": "...",
  "\u2044": "/",
  "\u00a7": "S",
  "\u2500": "-",
  "\u2502": "|",
  "\u2514": "+",
  "\u250c": "+",
  "\u2510": "+",
  "\u2518": "+",
  "\u25b6": ">",
  "\u25c0": "<",
  "\u25bc": "v",
  "\u25b2": "^",
};

/** The normalised text: only characters of the vocabulary remain (see the module comment). */
export function normalizeText(text: string): string {
  let out = "";
  for (const ch of text.normalize("NFKD")) {
    if (ch === "\r") continue;
    if (ID_OF.has(ch)) {
      out += ch;
      continue;
    }
    const cp = ch.codePointAt(0)!;
    if (cp >= 0x300 && cp <= 0x36f) continue; // combining marks left by NFKD ("é" → "e" + U+0301)
    out += STAND_INS[ch] ?? FALLBACK;
  }
  return out;
}

/** Token ids of `text` (normalised first); no BOS. */
export function encode(text: string): number[] {
  const ids: number[] = [];
  for (const ch of normalizeText(text)) ids.push(ID_OF.get(ch)!);
  return ids;
}

/** Text of token ids; BOS decodes to nothing. Throws on an id outside the vocabulary. */
export function decode(ids: Iterable<number>): string {
  let out = "";
  for (const id of ids) out += tokenText(id);
  return out;
}

/** Text of one token ("" for BOS). */
export function tokenText(id: number): string {
  if (!Number.isInteger(id) || id < 0 || id >= VOCAB_SIZE) throw new RangeError(`token id ${id} is outside the vocabulary (0..${VOCAB_SIZE - 1})`);
  return id === BOS ? "" : VOCAB[id]!;
}

/** The vocabulary file's content (models/tiny-lm/vocab.json). */
export function vocabJson(): { version: 1; bos: number; fallback: string; tokens: readonly string[] } {
  return { version: 1, bos: BOS, fallback: FALLBACK, tokens: VOCAB };
}
