/**
 * The edge's engine for a SentencePiece-style BPE (Gemma 3's tokenizer.json): merges
 * applied by their rank over a segment's characters, not over bytes split by a regex
 * as ./ranked-bpe.ts does. It follows Hugging Face's tokenizers (models/bpe/word.rs):
 * each character is a symbol (its token, or its UTF-8 bytes as `<0xXX>` tokens where
 * the vocabulary lacks it, byte fallback); the adjacent pair with the lowest merge rank
 * merges first, the leftmost of equals; a pair whose symbols changed since it was
 * queued is skipped. A space is `▁` first (the normalizer); the pre-tokenizer splits at
 * spaces, which the normalizer has replaced, so the library merges a whole segment (the
 * text between two added tokens, which split first: ./hf-codec.ts). This engine merges
 * it a word at a time where that gives the same ids (mergeBpeEncoder).
 *
 * The spec a Worker carries (mergeBpeText, made at build time) is the vocabulary as a
 * JSON array and the merges in rank order, each as its result's id (coded as the
 * difference from the previous merge's, which is small: the merges come nearly sorted
 * by it) and where the result splits into the pair, in characters. An isolate reads
 * it into typed arrays on the family's first prompt: a table from a pair of ids to the
 * merge's rank and result, and the single characters' ids.
 *
 * test/unit/merge-bpe.test.ts holds it to the Hugging Face library on Gemma 3's own
 * tokenizer.json; test/unit/hf-tokenizers.test.ts holds the codec to transformers.
 */
import { countVocabBytes, fmix, type EncodeLimits } from "./ranked-bpe.ts";

/** What the engine runs: the parts of a tokenizer.json it reads. */
export interface MergeBpeSpec {
  /** Token strings by id. */
  vocab: string[];
  /** Merges in rank order: [left, right] as token strings. */
  merges: [string, string][];
  /** Ids a text prompt starts and ends with. */
  prefix: number[];
  suffix: number[];
  /** The added tokens (every one plain): split out of the raw text first. */
  added: { id: number; content: string; special: boolean }[];
  unkId: number;
}

interface TokenizerJsonMergesShape {
  normalizer?: { type: string; pattern?: { String?: string }; content?: string } | null;
  pre_tokenizer?: { type: string; pattern?: { String?: string }; behavior?: string; invert?: boolean } | null;
  post_processor?: { type: string; single?: ({ SpecialToken: { id: string } } | { Sequence: { id: string } })[]; special_tokens?: Record<string, { ids: number[] }> } | null;
  model?: { type?: string; vocab?: Record<string, number>; merges?: ([string, string] | string)[]; byte_fallback?: boolean; fuse_unk?: boolean; ignore_merges?: boolean; dropout?: number | null; unk_token?: string | null; continuing_subword_prefix?: string | null; end_of_word_suffix?: string | null };
  added_tokens?: { id: number; content: string; special?: boolean; lstrip?: boolean; rstrip?: boolean; single_word?: boolean; normalized?: boolean }[];
}

/**
 * The family as this engine's spec, or undefined for another algorithm: BPE with byte
 * fallback over characters, a space normalized to `▁` and nothing else, a split at
 * spaces (a no-op after that), every added token matched in the raw text.
 */
export function mergeBpeSpecOf(json: TokenizerJsonMergesShape): MergeBpeSpec | undefined {
  const m = json.model;
  if (m?.type !== "BPE" || !m.vocab || !m.merges || !m.byte_fallback || m.ignore_merges || m.dropout || m.continuing_subword_prefix || m.end_of_word_suffix) return undefined;
  const n = json.normalizer;
  if (n?.type !== "Replace" || n.pattern?.String !== " " || n.content !== "▁") return undefined;
  const p = json.pre_tokenizer;
  if (p && !(p.type === "Split" && p.pattern?.String === " " && !p.invert)) return undefined;
  if ((json.added_tokens ?? []).some((t) => t.lstrip || t.rstrip || t.single_word || t.normalized)) return undefined;
  const pp = json.post_processor;
  const prefix: number[] = [];
  const suffix: number[] = [];
  if (pp) {
    if (pp.type !== "TemplateProcessing" || !pp.single) return undefined;
    let seen = false;
    for (const part of pp.single) {
      if ("Sequence" in part) seen = true;
      else (seen ? suffix : prefix).push(...(pp.special_tokens?.[part.SpecialToken.id]?.ids ?? []));
    }
  }
  const vocab: string[] = [];
  for (const [token, id] of Object.entries(m.vocab)) vocab[id] = token;
  if (vocab.length !== Object.keys(m.vocab).length) return undefined;
  const merges = m.merges.map((x) => (typeof x === "string" ? (x.split(" ", 2) as [string, string]) : x));
  const unkId = m.unk_token ? m.vocab[m.unk_token] : undefined;
  if (unkId === undefined) return undefined;
  return { vocab, merges, prefix, suffix, added: (json.added_tokens ?? []).map((t) => ({ id: t.id, content: t.content, special: t.special === true })), unkId };
}

/**
 * The spec as one text (what a Worker bundles): a JSON line of the ids and added
 * tokens, a JSON line of the vocabulary, and the merges as base64 of varints: per
 * merge the zigzag difference of its result's id from the previous merge's, and the
 * result's split in characters.
 */
export function mergeBpeText(spec: MergeBpeSpec): string {
  const ids = new Map(spec.vocab.map((t, i) => [t, i]));
  const bytes: number[] = [];
  const varint = (v: number) => {
    while (v >= 0x80) {
      bytes.push((v & 0x7f) | 0x80);
      v >>>= 7;
    }
    bytes.push(v);
  };
  let previous = 0;
  for (const [left, right] of spec.merges) {
    const result = ids.get(left + right);
    if (result === undefined) throw new Error(`merge-bpe: the merge ${JSON.stringify(left)} ${JSON.stringify(right)} makes no token`);
    const d = result - previous;
    varint(d >= 0 ? d * 2 : -d * 2 - 1);
    varint([...left].length);
    previous = result;
  }
  let b64 = "";
  // Chunks of a multiple of 3 bytes: no padding inside the text.
  for (let i = 0; i < bytes.length; i += 0x6000) b64 += btoa(String.fromCharCode(...bytes.slice(i, i + 0x6000)));
  const { vocab, merges: _merges, ...head } = spec;
  return `${JSON.stringify({ kind: "merges", ...head })}\n${JSON.stringify(vocab)}\n${b64}`;
}

/** What an isolate keeps of a spec: typed arrays, read on first use (about 10 MB for Gemma 3's 514,906 merges). */
interface MergeTables {
  /** A single character's id, by code point. */
  single: Map<number, number>;
  /** The characters some token holds right before an inner `▁`: a word boundary is never there (mergeBpeEncoder). */
  glue: Set<number>;
  /** `<0xXX>` by byte (-1: none). */
  byteIds: Int32Array;
  /** Each merge by rank: its pair and its result. */
  left: Int32Array;
  right: Int32Array;
  result: Int32Array;
  /** Open addressing on the pair: rank + 1 (0 empty). */
  table: Int32Array;
  mask: number;
}

/** The spec read as a Worker reads its text (Node: tests, the engine stand-in). */
export const mergeBpeOf = (spec: MergeBpeSpec): ReturnType<typeof mergeBpeFromText> => mergeBpeFromText(mergeBpeText(spec));

/** Whether a spec text is this engine's (mergeBpeText's output). */
export const isMergeBpeText = (text: string): boolean => text.startsWith('{"kind":"merges"');

/** The spec's head (everything but the vocabulary and merges) and the tables, from mergeBpeText's output. */
export function mergeBpeFromText(text: string): { head: Omit<MergeBpeSpec, "vocab" | "merges">; tables: () => MergeTables } {
  const first = text.indexOf("\n");
  const second = text.indexOf("\n", first + 1);
  if (first < 0 || second < 0 || !isMergeBpeText(text)) throw new Error("merge-bpe: not a merges spec's text");
  const { kind: _kind, ...head } = JSON.parse(text.slice(0, first)) as Omit<MergeBpeSpec, "vocab" | "merges"> & { kind: string };
  let tables: MergeTables | undefined;
  return {
    head,
    tables: () => (tables ??= readTables(JSON.parse(text.slice(first + 1, second)) as string[], text.slice(second + 1))),
  };
}

function hashPair(a: number, b: number): number {
  let h = Math.imul(a, 0x9e3779b1) ^ Math.imul(b + 0x7f4a7c15, 0x85ebca6b);
  h ^= h >>> 15;
  return Math.imul(h, 0xc2b2ae35) >>> 0;
}

/**
 * The vocabulary's strings as UTF-16 units end to end, with a hash table from a
 * string's polynomial hash to its id: a merge's halves are found from its result's
 * units (prefix hashes, and the suffix's from them) with no string made, and a hit is
 * checked unit by unit, so a collision costs a comparison, never a wrong id.
 */
class VocabIndex {
  static readonly B = 0x01000193;
  readonly units: Uint16Array;
  readonly start: Uint32Array;
  readonly #hash: Uint32Array;
  readonly #table: Int32Array;
  readonly #mask: number;

  constructor(vocab: readonly string[]) {
    let total = 0;
    for (const t of vocab) total += t.length;
    this.units = new Uint16Array(total);
    this.start = new Uint32Array(vocab.length + 1);
    this.#hash = new Uint32Array(vocab.length);
    let capacity = 1;
    while (capacity < vocab.length * 2) capacity *= 2;
    this.#table = new Int32Array(capacity);
    this.#mask = capacity - 1;
    let at = 0;
    vocab.forEach((t, id) => {
      this.start[id] = at;
      let h = 0;
      for (let i = 0; i < t.length; i++) {
        const u = t.charCodeAt(i);
        this.units[at++] = u;
        h = (Math.imul(h, VocabIndex.B) + u) >>> 0;
      }
      this.#hash[id] = h;
      let slot = fmix(h) & this.#mask;
      while (this.#table[slot] !== 0) slot = (slot + 1) & this.#mask;
      this.#table[slot] = id + 1;
    });
    this.start[vocab.length] = at;
  }

  /** The id of the string units[from, to) with hash `h`, or -1. */
  find(units: Uint16Array, from: number, to: number, h: number): number {
    let slot = fmix(h) & this.#mask;
    for (;;) {
      const e = this.#table[slot]!;
      if (e === 0) return -1;
      const id = e - 1;
      const s = this.start[id]!;
      if (this.#hash[id] === h && this.start[id + 1]! - s === to - from) {
        let same = true;
        for (let i = 0; i < to - from; i++) {
          if (this.units[s + i] !== units[from + i]) {
            same = false;
            break;
          }
        }
        if (same) return id;
      }
      slot = (slot + 1) & this.#mask;
    }
  }
}

function readTables(vocab: string[], merges64: string): MergeTables {
  const index = new VocabIndex(vocab);
  const single = new Map<number, number>();
  const glue = new Set<number>();
  vocab.forEach((t, i) => {
    if (t.length === 1 || (t.length === 2 && t.codePointAt(0)! > 0xffff)) single.set(t.codePointAt(0)!, i);
    for (let at = t.indexOf("\u2581", 1); at > 0; at = t.indexOf("\u2581", at + 1)) {
      const low = t.charCodeAt(at - 1);
      glue.add(t.codePointAt(low >= 0xdc00 && low <= 0xdfff && at >= 2 ? at - 2 : at - 1)!);
    }
  });
  const byteIds = new Int32Array(256).fill(-1);
  const byteOf = new Map<string, number>();
  for (let b = 0; b < 256; b++) byteOf.set(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`, b);
  vocab.forEach((t, i) => {
    const b = t.length === 6 ? byteOf.get(t) : undefined;
    if (b !== undefined) byteIds[b] = i;
  });
  const raw = atob(merges64);
  let count = 0;
  for (let i = 0; i < raw.length; i++) if ((raw.charCodeAt(i) & 0x80) === 0) count++;
  count /= 2;
  let capacity = 1;
  while (capacity < count * 1.5) capacity *= 2;
  const t: MergeTables = { single, glue, byteIds, left: new Int32Array(count), right: new Int32Array(count), result: new Int32Array(count), table: new Int32Array(capacity), mask: capacity - 1 };
  let at = 0;
  // Varints of at most 28 bits (ids and splits): small integers throughout.
  const next = () => {
    let v = 0;
    let shift = 0;
    for (;;) {
      const c = raw.charCodeAt(at++);
      v |= (c & 0x7f) << shift;
      if (c < 0x80) return v;
      shift += 7;
    }
  };
  const { units, start } = index;
  let result = 0;
  for (let r = 0; r < count; r++) {
    const z = next();
    result += (z >>> 1) ^ -(z & 1);
    const split = next();
    const from = start[result]!;
    const to = start[result + 1]!;
    // The cut in units: `split` characters in (a surrogate pair is one).
    let cut = from;
    for (let c = 0; c < split; c++) cut += units[cut]! >= 0xd800 && units[cut]! <= 0xdbff ? 2 : 1;
    let hl = 0;
    for (let i = from; i < cut; i++) hl = (Math.imul(hl, VocabIndex.B) + units[i]!) >>> 0;
    let hr = 0;
    for (let i = cut; i < to; i++) hr = (Math.imul(hr, VocabIndex.B) + units[i]!) >>> 0;
    const a = index.find(units, from, cut, hl);
    const b = index.find(units, cut, to, hr);
    if (a < 0 || b < 0) throw new Error(`merge-bpe: merge ${r} splits ${JSON.stringify(vocab[result])} into no tokens`);
    t.left[r] = a;
    t.right[r] = b;
    t.result[r] = result;
    // A pair given twice keeps its last rank, as the library's map built in rank order does.
    const slot = find(t, a, b);
    t.table[slot >= 0 ? slot : -slot - 1] = r + 1;
  }
  countVocabBytes(byteIds.byteLength + t.left.byteLength + t.right.byteLength + t.result.byteLength + t.table.byteLength);
  return t;
}

/** The slot holding pair (a, b), or -(the empty slot where it would go) - 1. */
function find(t: MergeTables, a: number, b: number): number {
  let slot = hashPair(a, b) & t.mask;
  for (;;) {
    const r = t.table[slot]! - 1;
    if (r < 0) return -slot - 1;
    if (t.left[r] === a && t.right[r] === b) return slot;
    slot = (slot + 1) & t.mask;
  }
}

/** The rank of pair (a, b)'s merge, or -1. */
function rankOf(t: MergeTables, a: number, b: number): number {
  const slot = find(t, a, b);
  return slot < 0 ? -1 : t.table[slot]! - 1;
}

/** Words kept with their ids, at most this many (the oldest go first), each at most WORD_CACHE_CHARS long. */
const WORD_CACHE = 65_536;
const WORD_CACHE_CHARS = 64;

/**
 * The spec's segment encoder: `text` (no added tokens in it) as ids, stopping before a
 * word that would pass the budget (its UTF-8 bytes; a word seen before is free) or
 * once maxTokens are made.
 *
 * A segment is merged a word at a time, a word starting at a `▁` (a space) unless the
 * character before it is one a token holds before an inner `▁` (MergeTables.glue:
 * `▁` itself, for runs of spaces, and `>` for Gemma 3's one token `>▁</`). No token
 * spans such a boundary, so no merge does, and each word merges as it would inside the
 * whole: the ids are the same, and a word seen before costs one lookup. Work is
 * n log n in a word's characters.
 */
export function mergeBpeEncoder(spec: { head: Pick<MergeBpeSpec, "unkId">; tables: () => MergeTables }): (text: string, limits: EncodeLimits) => number[] {
  const utf8 = new TextEncoder();
  const cache = new Map<string, number[]>();
  return (input, { maxTokens, budget }) => {
    const text = input.replaceAll(" ", "▁");
    const t = spec.tables();
    const out: number[] = [];
    let from = 0;
    const word = (to: number): boolean => {
      if (out.length >= maxTokens) return false;
      const w = text.slice(from, to);
      from = to;
      const known = w.length <= WORD_CACHE_CHARS ? cache.get(w) : undefined;
      if (known) {
        for (const id of known) out.push(id);
        return true;
      }
      const cost = utf8.encode(w).length;
      if (cost > budget.bytes) {
        budget.exhausted = true;
        return false;
      }
      budget.bytes -= cost;
      const ids = mergeWord(t, w, spec.head.unkId, utf8);
      if (w.length <= WORD_CACHE_CHARS) {
        if (cache.size >= WORD_CACHE) cache.delete(cache.keys().next().value!);
        cache.set(w, ids);
      }
      for (const id of ids) out.push(id);
      return true;
    };
    for (let i = 1; i < text.length; i++) {
      if (text.charCodeAt(i) !== 0x2581) continue;
      const before = text.codePointAt(text.charCodeAt(i - 1) >= 0xdc00 && text.charCodeAt(i - 1) <= 0xdfff && i >= 2 ? i - 2 : i - 1)!;
      if (t.glue.has(before)) continue;
      if (!word(i)) return out.length > maxTokens ? out.slice(0, maxTokens) : out;
    }
    if (from < text.length) word(text.length);
    return out.length > maxTokens ? out.slice(0, maxTokens) : out;
  };
}

/** One word's ids: its characters (or their bytes, or unk) merged by rank. */
function mergeWord(t: MergeTables, text: string, unkId: number, utf8: TextEncoder): number[] {
  // Symbols: ids, and a doubly linked list over them (removed ones have live 0).
  const ids: number[] = [];
  for (const ch of text) {
    const id = t.single.get(ch.codePointAt(0)!);
    if (id !== undefined) {
      ids.push(id);
      continue;
    }
    const bytes = utf8.encode(ch);
    if (bytes.every((b) => t.byteIds[b]! >= 0)) for (const b of bytes) ids.push(t.byteIds[b]!);
    // fuse_unk: consecutive unknowns are one.
    else if (ids.at(-1) !== unkId) ids.push(unkId);
  }
  const n = ids.length;
  const prev = new Int32Array(n);
  const next = new Int32Array(n);
  const live = new Uint8Array(n).fill(1);
  for (let i = 0; i < n; i++) {
    prev[i] = i - 1;
    next[i] = i + 1 < n ? i + 1 : -1;
  }
  // A min-heap of (rank, position), as one number each: rank · 2^24 + position (positions stay under 2^24 symbols).
  const heap: number[] = [];
  const push = (key: number) => {
    heap.push(key);
    let i = heap.length - 1;
    while (i > 0) {
      const p = (i - 1) >> 1;
      if (heap[p]! <= key) break;
      heap[i] = heap[p]!;
      i = p;
    }
    heap[i] = key;
  };
  const pop = (): number => {
    const top = heap[0]!;
    const last = heap.pop()!;
    if (heap.length > 0) {
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        if (l >= heap.length) break;
        const r = l + 1;
        const c = r < heap.length && heap[r]! < heap[l]! ? r : l;
        if (heap[c]! >= last) break;
        heap[i] = heap[c]!;
        i = c;
      }
      heap[i] = last;
    }
    return top;
  };
  const SHIFT = 2 ** 24;
  if (n >= SHIFT) throw new RangeError("merge-bpe: a word of 2^24 characters or more");
  const queue = (i: number) => {
    const j = next[i]!;
    if (j < 0) return;
    const r = rankOf(t, ids[i]!, ids[j]!);
    if (r >= 0) push(r * SHIFT + i);
  };
  for (let i = 0; i + 1 < n; i++) queue(i);
  while (heap.length > 0) {
    const key = pop();
    const i = key % SHIFT;
    const rank = (key - i) / SHIFT;
    if (!live[i]) continue;
    const j = next[i]!;
    if (j < 0) continue;
    // The pair changed since it was queued (one side merged with another): skipped.
    if (rankOf(t, ids[i]!, ids[j]!) !== rank) continue;
    ids[i] = t.result[rank]!;
    live[j] = 0;
    const k = next[j]!;
    next[i] = k;
    if (k >= 0) prev[k] = i;
    if (prev[i]! >= 0) queue(prev[i]!);
    queue(i);
  }
  const out: number[] = [];
  for (let i = 0; i >= 0 && i < n; i = next[i]!) out.push(ids[i]!);
  return out;
}
