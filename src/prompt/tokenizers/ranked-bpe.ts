/**
 * The edge's BPE engine: a family's text as token ids, from its BPE spec
 * (./bpe-spec.ts), with work linear in the text (n log n in one piece) and bounded
 * per prompt.
 *
 * Text is split by the spec's regexes (in JavaScript, as the library does), and each
 * piece is merged by tiktoken's rule: the adjacent pair whose bytes together have the
 * lowest rank first, the leftmost of equals; a piece that is itself a token is that
 * token. tiktoken finds that pair by scanning every part after every merge, so its
 * cost is quadratic in a piece's length: one run of a letter of 192k characters cost
 * workerd 9.8 s, an emoji repeated over 330 KB 25 s, and nothing else ran in the
 * isolate meanwhile (issue 50). Here the candidate pairs wait in a heap, as in Hugging
 * Face's tokenizers: each merge pops one and pushes at most two. Pieces up to
 * CACHED_PIECE_CHARS are kept with their ids, so words seen before cost one lookup.
 *
 * The vocabulary is read from the spec's ranks into typed arrays on the family's first
 * prompt: every token's bytes end to end, and an open-addressing table from a token's
 * hash to its rank. A pair's hash comes from its two tokens' hashes in O(1) (a
 * polynomial hash, h(ab) = h(a)·B^|b| + h(b) mod 2^32), and a hit is checked byte for
 * byte, so a collision costs a comparison, never a wrong id.
 *
 * test/unit/ranked-bpe.test.ts holds the merge to tiktoken's own output;
 * test/unit/hf-tokenizers.test.ts holds the codec built on it to transformers'.
 */
import type { BpeSpec } from "./bpe-spec.ts";
import { ONIG_CLASSES, ONIG_DIFFERS } from "./onig-classes.ts";

/** The vocabulary as typed arrays (about 5 MB for 150k tokens). */
export interface RankedVocab {
  /** Token `r`'s bytes: bytes[start[r] .. start[r + 1]]. */
  readonly bytes: Uint8Array;
  readonly start: Uint32Array;
  /** Polynomial hash of each token's bytes, and B^length (both mod 2^32). */
  readonly hash: Uint32Array;
  readonly pow: Uint32Array;
  /** Open addressing: rank + 1 at fmix(hash) & mask, 0 empty. */
  readonly table: Int32Array;
  /** The rank of each single byte, -1 for none. */
  readonly byteRank: Int32Array;
}

const BASE = 0x01000193;
/** A heap key is rank · 2^23 + position: pieces stay under 2^23 bytes, and the key under 2^53. */
const POSITION_BITS = 2 ** 23;
export const MAX_PIECE_BYTES = POSITION_BITS - 1;

/** MurmurHash3's 32-bit finalizer: a hash table slot from a polynomial hash (both engines' vocabulary tables). */
export function fmix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

const B64 = new Int8Array(128).fill(-1);
for (const [i, c] of [..."ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"].entries()) B64[c.charCodeAt(0)] = i;

/** The vocabulary of a spec's ranks: line r is token r's bytes in base64, empty where rank r has no token. */
export function rankedVocab(ranks: string): RankedVocab {
  let size = 1;
  for (let i = ranks.indexOf("\n"); i >= 0; i = ranks.indexOf("\n", i + 1)) size++;
  const start = new Uint32Array(size + 1);
  const hash = new Uint32Array(size);
  const pow = new Uint32Array(size);
  const byteRank = new Int32Array(256).fill(-1);
  // Base64 is at most 3 bytes per 4 characters.
  const scratch = new Uint8Array(Math.ceil((ranks.length * 3) / 4) + 3);
  let capacity = 1;
  while (capacity < size * 2) capacity *= 2;
  const table = new Int32Array(capacity);
  const mask = capacity - 1;
  let at = 0;
  let r = 0;
  let acc = 0;
  let bits = 0;
  let h = 0;
  let p = 1;
  const end = ranks.length;
  for (let i = 0; i <= end; i++) {
    const c = i < end ? ranks.charCodeAt(i) : 10;
    if (c === 10) {
      const from = start[r]!;
      if (at > from) {
        hash[r] = h;
        pow[r] = p;
        if (at - from === 1) byteRank[scratch[from]!] = r;
        let slot = fmix(h) & mask;
        while (table[slot] !== 0) slot = (slot + 1) & mask;
        table[slot] = r + 1;
      }
      start[++r] = at;
      acc = bits = h = 0;
      p = 1;
      continue;
    }
    if (c === 61 /* = */) continue;
    const v = c < 128 ? B64[c]! : -1;
    if (v < 0) throw new Error(`ranked-bpe: not base64 in the ranks at ${i}`);
    acc = ((acc << 6) | v) & 0xffffff;
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      const b = (acc >> bits) & 0xff;
      scratch[at++] = b;
      h = (Math.imul(h, BASE) + b) >>> 0;
      p = Math.imul(p, BASE) >>> 0;
    }
  }
  const bytes = scratch.slice(0, at);
  vocabBytes += bytes.byteLength + start.byteLength + hash.byteLength + pow.byteLength + table.byteLength + byteRank.byteLength;
  return { bytes, start, hash, pow, table, byteRank };
}

let vocabBytes = 0;
/** Bytes of the typed arrays the vocabularies read in this runtime hold (beside the V8 heap: ArrayBuffers are external memory), both engines'. */
export function bpeMemoryBytes(): number {
  return vocabBytes;
}

/** Counts typed arrays another engine (./merge-bpe.ts) read a vocabulary into, in bpeMemoryBytes. */
export function countVocabBytes(bytes: number): void {
  vocabBytes += bytes;
}

/** The rank of the bytes piece[from, to), whose hash is h, or -1. */
function rankOf(v: RankedVocab, h: number, piece: Uint8Array, from: number, to: number): number {
  const { table, hash, start, bytes } = v;
  const mask = table.length - 1;
  const n = to - from;
  for (let slot = fmix(h) & mask; ; slot = (slot + 1) & mask) {
    const e = table[slot]!;
    if (e === 0) return -1;
    const r = e - 1;
    if (hash[r] !== h) continue;
    const s = start[r]!;
    if (start[r + 1]! - s !== n) continue;
    let i = 0;
    while (i < n && bytes[s + i] === piece[from + i]) i++;
    if (i === n) return r;
  }
}

/** Arrays a merge works in: reused for pieces up to SCRATCH_BYTES, made for longer ones (and dropped with them). */
const SCRATCH_BYTES = 4096;
interface Work {
  tok: Int32Array;
  next: Int32Array;
  prev: Int32Array;
  heap: Float64Array;
}
const makeWork = (n: number): Work => ({ tok: new Int32Array(n), next: new Int32Array(n), prev: new Int32Array(n), heap: new Float64Array(Math.max(16, n)) });
let shared: Work | undefined;

/**
 * The ranks tiktoken gives the piece `piece` (UTF-8 bytes, at most MAX_PIECE_BYTES), in
 * O(n log n), pushed onto `out`. Throws where a byte has no rank (not a byte-level vocabulary).
 */
export function mergePiece(v: RankedVocab, piece: Uint8Array, out: number[]): void {
  const n = piece.length;
  if (n > MAX_PIECE_BYTES) throw new RangeError(`ranked-bpe: a piece of ${n} bytes (at most ${MAX_PIECE_BYTES})`);
  if (n === 0) return;
  const { hash, pow, start, byteRank } = v;
  if (n === 1) {
    out.push(byteRank[piece[0]!]!);
    return;
  }
  // tiktoken takes a piece that is itself a token as that token, before any merging.
  let whole = 0;
  for (let i = 0; i < n; i++) whole = (Math.imul(whole, BASE) + piece[i]!) >>> 0;
  const itself = rankOf(v, whole, piece, 0, n);
  if (itself >= 0) {
    out.push(itself);
    return;
  }
  const work = n <= SCRATCH_BYTES ? (shared ??= makeWork(SCRATCH_BYTES)) : makeWork(n);
  // Parts as a linked list over positions: tok[i] is the rank of the part starting at i (-1: merged into the one before), next[i] where the next starts.
  const { tok, next, prev } = work;
  for (let i = 0; i < n; i++) {
    const r = byteRank[piece[i]!]!;
    if (r < 0) throw new Error(`ranked-bpe: byte ${piece[i]} has no rank`);
    tok[i] = r;
    next[i] = i + 1;
    prev[i] = i - 1;
  }
  // A min-heap of rank · 2^23 + position: the lowest rank, then the leftmost.
  let heap = work.heap;
  let size = 0;
  const push = (key: number) => {
    if (size === heap.length) {
      const grown = new Float64Array(heap.length * 2);
      grown.set(heap);
      heap = grown;
      if (work === shared) shared.heap = grown;
    }
    let i = size++;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (heap[parent]! <= key) break;
      heap[i] = heap[parent]!;
      i = parent;
    }
    heap[i] = key;
  };
  // Moves `key` down from slot i to where it belongs.
  const siftDown = (i: number, key: number) => {
    for (;;) {
      let child = 2 * i + 1;
      if (child >= size) break;
      if (child + 1 < size && heap[child + 1]! < heap[child]!) child++;
      if (heap[child]! >= key) break;
      heap[i] = heap[child]!;
      i = child;
    }
    heap[i] = key;
  };
  const pop = () => {
    const top = heap[0]!;
    siftDown(0, heap[--size]!);
    return top;
  };
  const pairRank = (a: number, b: number, at: number, end: number) => rankOf(v, (Math.imul(hash[a]!, pow[b]!) + hash[b]!) >>> 0, piece, at, end);
  // The first pairs in place, then made a heap bottom-up (Floyd: O(n)).
  for (let i = 0; i + 1 < n; i++) {
    const r = pairRank(tok[i]!, tok[i + 1]!, i, i + 2);
    if (r >= 0) heap[size++] = r * POSITION_BITS + i;
  }
  for (let i = (size >> 1) - 1; i >= 0; i--) siftDown(i, heap[i]!);
  while (size > 0) {
    const key = pop();
    const r = Math.floor(key / POSITION_BITS);
    const i = key - r * POSITION_BITS;
    if (tok[i]! < 0) continue;
    const j = next[i]!;
    if (j >= n) continue;
    const k = next[j]!;
    // Stale: the pair at i no longer spans this token's bytes.
    if (k - i !== start[r + 1]! - start[r]!) continue;
    tok[i] = r;
    tok[j] = -1;
    next[i] = k;
    if (k < n) prev[k] = i;
    const left = prev[i]!;
    if (left >= 0) {
      const lr = pairRank(tok[left]!, r, left, k);
      if (lr >= 0) push(lr * POSITION_BITS + left);
    }
    if (k < n) {
      const rr = pairRank(r, tok[k]!, i, next[k]!);
      if (rr >= 0) push(rr * POSITION_BITS + i);
    }
  }
  for (let i = 0; i < n; i = next[i]!) out.push(tok[i]!);
}

/**
 * A regex of a tokenizer.json as JavaScript runs it. Its Unicode classes (`\p{L}`,
 * `\s`, ...) are spelt out as the code points they match in the Rust library
 * (onigClasses): the runtime's own tables are of another Unicode version (V8's know
 * letters the library's do not) and its `\s` is not Oniguruma's (U+FEFF in, U+0085
 * out). Its case-insensitive groups of plain letters, `(?i:'s|'t)`, are spelt out as
 * `'[sSſ]|'[tT]` (what Oniguruma's case folding matches for them): V8 13.6 with such
 * a modifier group before a class of this size matched `'LLe` as one piece where
 * `'LL` is the group's (the property test in hf-tokenizers.test.ts found it), and V8
 * before 12.5 has no modifier groups at all.
 */
export function jsRegex(pattern: string, classes: "library" | "runtime" = "library"): RegExp {
  const spelt = (classes === "library" ? onigClasses(pattern) : pattern).replace(/\(\?i:([^()[\]\\]*)\)/g, (_, body: string) => `(?:${body.replace(/[a-z]/gi, (c) => `[${c.toLowerCase()}${c.toUpperCase()}${FOLDS_TO[c.toLowerCase()] ?? ""}]`)})`);
  return new RegExp(spelt, "gu");
}

/**
 * Whether `text` holds a code point where this runtime's classes and the library's
 * disagree (ONIG_DIFFERS, written with Node 24's Unicode 17). A text with none splits
 * alike under the runtime's own classes, which V8 matches faster than the spelt-out
 * ranges (1.2× on the engine's whole work), so the library's regexes are used only for a
 * text that holds one. A native scan for the BMP ones and the high surrogates of the
 * astral ones first (most text has neither); then a walk with a table and, for a
 * surrogate pair, a search of the astral ranges.
 */
function differs(text: string): boolean {
  const d = (differsTable ??= differsTables());
  if (!d.maybe.test(text)) return false;
  for (let i = 0; i < text.length; i++) {
    const k = d.bmp[text.charCodeAt(i)];
    if (k === 1) return true;
    if (k === 2) {
      const cp = text.codePointAt(i)!;
      let lo = 0;
      let hi = d.astral.length - 1;
      while (lo <= hi) {
        const mid = (lo + hi) >> 1;
        if (cp < d.astral[mid]![0]) hi = mid - 1;
        else if (cp > d.astral[mid]![1]) lo = mid + 1;
        else return true;
      }
      i++;
    }
  }
  return false;
}

let differsTable: ReturnType<typeof differsTables> | undefined;

function differsTables(): { maybe: RegExp; bmp: Uint8Array; astral: [number, number][] } {
  const bmp = new Uint8Array(0x10000);
  const astral: [number, number][] = [];
  for (const [a, b] of unpackRanges(ONIG_DIFFERS)) {
    if (b <= 0xffff) bmp.fill(1, a, b + 1);
    else {
      astral.push([a, b]);
      // The high surrogate of every 1,024-code-point block the range touches.
      for (let c = a; c <= b; c += 0x400 - ((c - 0x10000) & 0x3ff)) bmp[0xd800 + ((c - 0x10000) >> 10)] = 2;
    }
  }
  // The native pre-scan's class: every unit the table marks, BMP code point or high surrogate.
  let cls = "";
  for (let c = 0; c < 0x10000; ) {
    if (bmp[c] === 0) {
      c++;
      continue;
    }
    let e = c;
    while (e + 1 < 0x10000 && bmp[e + 1] !== 0) e++;
    const u = (x: number) => `\\u${x.toString(16).padStart(4, "0")}`;
    cls += c === e ? u(c) : `${u(c)}-${u(e)}`;
    c = e + 1;
  }
  return { maybe: new RegExp(`[${cls}]`), bmp, astral };
}

/** Ranges as onig-classes.ts stores them (hex, `first-last` or `one`, comma-separated) as [first, last] pairs. */
export function unpackRanges(packed: string): [number, number][] {
  return packed.split(",").map((r) => {
    const [a, b = a] = r.split("-").map((h) => parseInt(h, 16)) as [number, number?];
    return [a, b];
  });
}

/** The letters other than its two cases that Unicode case folding folds to an ASCII letter. */
const FOLDS_TO: Readonly<Record<string, string>> = { s: "\u017f", k: "\u212a" };

/**
 * `pattern` with each `\p{X}`, `\P{X}`, `\s` and `\S` replaced by the code points the
 * Rust library's class matches (ONIG_CLASSES): inside a bracket class the ranges join
 * it; outside, they become one (negated for `\P` and `\S`). A negated class inside
 * brackets cannot be spelt so, and no family has one: such a pattern is refused.
 */
export function onigClasses(pattern: string): string {
  let out = "";
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i]!;
    if (c === "\\") {
      const e = pattern[i + 1] ?? "";
      let name: string | undefined;
      let negated = false;
      let length = 2;
      if (e === "p" || e === "P") {
        const close = pattern.indexOf("}", i);
        if (pattern[i + 2] !== "{" || close < 0) throw new Error(`a regex class the edge cannot read at ${i}: ${pattern}`);
        name = pattern.slice(i + 3, close);
        negated = e === "P";
        length = close + 1 - i;
      } else if (e === "s" || e === "S") {
        name = "s";
        negated = e === "S";
      }
      if (name === undefined) {
        out += pattern.slice(i, i + 2);
        i++;
        continue;
      }
      const ranges = ONIG_CLASSES[name];
      if (ranges === undefined) throw new Error(`no table of the Unicode class ${name} (scripts/unicode-classes.ts)`);
      const spelt = unpackRanges(ranges)
        .map(([a, b]) => (a === b ? `\\u{${a.toString(16)}}` : `\\u{${a.toString(16)}}-\\u{${b.toString(16)}}`))
        .join("");
      if (inClass && negated) throw new Error(`a negated class inside brackets: ${pattern}`);
      out += inClass ? spelt : `[${negated ? "^" : ""}${spelt}]`;
      i += length - 1;
      continue;
    }
    if (c === "[" && !inClass) inClass = true;
    else if (c === "]" && inClass) inClass = false;
    out += c;
  }
  return out;
}

/** Pieces up to this many UTF-16 code units are kept with their ids (words, numbers, punctuation). */
export const CACHED_PIECE_CHARS = 64;
/** Pieces kept at most (about 4 MB of strings and ids). */
const CACHED_PIECES = 65_536;

/** What one prompt may spend: UTF-8 bytes merged (pieces found in the cache are free), and tokens made. */
export interface EncodeLimits {
  maxTokens: number;
  /** Bytes of text that may be merged; spent as pieces are. */
  budget: { bytes: number; exhausted?: boolean };
}

/**
 * The spec's text encoder: `text` (no added tokens in it) as ids, in order, stopping
 * before the first piece that would pass the budget (`exhausted` is then set) or once
 * `maxTokens` are made. What it returns is then the ids of a prefix of the text that
 * ends where a piece does: a prefix of the whole text's ids, never a different id.
 */
export function bpeEncoder(spec: BpeSpec): (text: string, limits: EncodeLimits) => number[] {
  let vocab: RankedVocab | undefined;
  // The library's classes spelt out only once a text needs them (differs): most never does.
  let library: RegExp[] | undefined;
  const runtime = spec.patterns.map((p) => jsRegex(p, "runtime"));
  const cache = new Map<string, number | number[]>();
  const utf8 = new TextEncoder();
  let bytes = new Uint8Array(3 * CACHED_PIECE_CHARS);
  return (input, { maxTokens, budget }) => {
    const text = spec.nfc ? input.normalize("NFC") : input;
    const regexes = differs(text) ? (library ??= spec.patterns.map((p) => jsRegex(p))) : runtime;
    vocab ??= rankedVocab(spec.ranks);
    const v = vocab;
    const out: number[] = [];
    // Each piece in order: false stops the walk.
    const piece = (p: string): boolean => {
      if (out.length >= maxTokens) return false;
      const known = p.length <= CACHED_PIECE_CHARS ? cache.get(p) : undefined;
      if (known !== undefined) {
        if (typeof known === "number") out.push(known);
        else for (const id of known) out.push(id);
        return true;
      }
      if (bytes.length < 3 * p.length) bytes = new Uint8Array(3 * p.length);
      const { written } = utf8.encodeInto(p, bytes);
      if (written > budget.bytes) {
        budget.exhausted = true;
        return false;
      }
      budget.bytes -= written;
      const from = out.length;
      mergePiece(v, bytes.subarray(0, written), out);
      if (p.length <= CACHED_PIECE_CHARS) {
        if (cache.size >= CACHED_PIECES) cache.delete(cache.keys().next().value!);
        cache.set(p, out.length - from === 1 ? out[from]! : out.slice(from));
      }
      return true;
    };
    // The regexes in turn, each isolating its matches (and the gaps between them) within the pieces of the one before.
    const split = (t: string, level: number): boolean => {
      if (level === regexes.length) return piece(t);
      const re = regexes[level]!;
      re.lastIndex = 0;
      let at = 0;
      for (let m = re.exec(t); m !== null; m = re.exec(t)) {
        if (m[0].length === 0) {
          re.lastIndex++;
          continue;
        }
        if (m.index > at && !split(t.slice(at, m.index), level + 1)) return false;
        if (!split(m[0], level + 1)) return false;
        at = m.index + m[0].length;
      }
      return at >= t.length || split(t.slice(at), level + 1);
    };
    split(text, 0);
    return out;
  };
}

/** Characters of text a remembering encoder keeps token ids for (about 8 MB of UTF-16 at most, with the ids). */
const REMEMBERED_CHARS = 1 << 20;

/**
 * `whole` with the ids of texts it encoded before kept, the most recently used last
 * and the oldest dropped past REMEMBERED_CHARS: a chat's segments (the text between a
 * template's special tokens, or harmony's pieces) recur turn after turn, and a
 * remembered one costs no budget. A text cut short (the budget spent, or maxTokens
 * made) is not its whole ids, and is not kept.
 */
export function rememberingEncoder<I extends ArrayLike<number>>(whole: (text: string, limits: EncodeLimits) => I): (text: string, limits: EncodeLimits) => I {
  const cache = new Map<string, I>();
  let cachedChars = 0;
  return (text, limits) => {
    const cached = cache.get(text);
    if (cached) {
      cache.delete(text);
      cache.set(text, cached);
      return cached;
    }
    const ids = whole(text, limits);
    if (text.length <= REMEMBERED_CHARS / 4 && !limits.budget.exhausted && ids.length < limits.maxTokens) {
      cache.set(text, ids);
      cachedChars += text.length;
      for (const [k] of cache) {
        if (cachedChars <= REMEMBERED_CHARS) break;
        cache.delete(k);
        cachedChars -= k.length;
      }
    }
    return ids;
  };
}
