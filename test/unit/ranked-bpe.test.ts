/**
 * The edge's BPE engine (src/prompt/tokenizers/ranked-bpe.ts) against tiktoken, whose
 * merge rule it follows (OpenAI's Rust crate in WebAssembly, the engine before issue
 * 50: a third-party oracle here), on random pieces of every BPE family; its cost on the
 * attacks of issue 50 (one piece of 192k characters, 330 KB of one emoji, random CJK),
 * as a ratio of CPU in one run (linear: 8× the text costs about 8×, where tiktoken's
 * loop cost 64×); and the per-prompt budget, which stops at a piece and keeps the
 * ids exact as far as they go. test/unit/hf-tokenizers.test.ts holds the whole codec,
 * the attacks included, to transformers' output.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { describe, expect, it } from "vitest";
import { mulberry32 } from "../../src/seeded-random.ts";
import { bpeSpecOf, type BpeSpec, type TokenizerJsonShape } from "../../src/prompt/tokenizers/bpe-spec.ts";
import { bpeEncoder, mergePiece, rankedVocab } from "../../src/prompt/tokenizers/ranked-bpe.ts";
import { FAMILY_PACKAGES } from "../../src/prompt/tokenizers/index.ts";
import { tiktokenBindings } from "../fixtures/tiktoken.ts";

const require = createRequire(import.meta.url);
const BPE_FAMILIES = ["qwen3", "llama3", "mistral-nemo", "deepseek-v3"] as const;
const specs = new Map<string, BpeSpec>();
const specOf = (family: string): BpeSpec => {
  let spec = specs.get(family);
  if (!spec) {
    const json = JSON.parse(readFileSync(require.resolve(`${FAMILY_PACKAGES[family]}/models/tokenizer.json`), "utf8")) as TokenizerJsonShape;
    spec = bpeSpecOf(json)!;
    specs.set(family, spec);
  }
  return spec;
};

/** tiktoken on the spec's ranks (its own format: base64 and rank per line), one piece at a time (a pattern that matches all). */
function tiktokenWhole(spec: BpeSpec): (bytes: Uint8Array) => number[] {
  const ranks = spec.ranks
    .split("\n")
    .flatMap((b64, rank) => (b64 === "" ? [] : [`${b64} ${rank}`]))
    .join("\n");
  const encoder = new (tiktokenBindings().Tiktoken)(ranks, {}, "[\\s\\S]+");
  const text = new TextDecoder();
  return (bytes) => Array.from(encoder.encode_ordinary(text.decode(bytes)));
}

/** Units that merge a lot: repeated letters, common fragments, multi-byte characters, ZWJ sequences, combining marks. */
const UNITS = ["a", "a", "aa", "e", "th", "ing", " ", "=", "-", "\n", "\t", "0", "é", "e\u0301", "中", "文", "👩‍💻", "🏳️‍🌈", "Ω", "ß", "\u00a0", "ー", "한"];

describe("merging one piece", () => {
  it.each(BPE_FAMILIES)("gives tiktoken's ids for 2,000 random pieces of %s's vocabulary", (family) => {
    const spec = specOf(family);
    const vocab = rankedVocab(spec.ranks);
    const theirs = tiktokenWhole(spec);
    const next = mulberry32(50);
    const utf8 = new TextEncoder();
    for (let i = 0; i < 2000; i++) {
      let s = "";
      // Mostly short, some past a few hundred bytes (where tiktoken's loop is still fast enough to be the oracle).
      const units = 1 + Math.floor(next() ** 3 * 300);
      for (let k = 0; k < units; k++) s += UNITS[Math.floor(next() * UNITS.length)];
      const bytes = utf8.encode(s);
      const mine: number[] = [];
      mergePiece(vocab, bytes, mine);
      expect(mine, JSON.stringify(s)).toEqual(theirs(bytes));
    }
  }, 120_000);

  it("costs about 8× for 8× the piece, on each of issue 50's attacks (tiktoken's loop: about 64×)", () => {
    const vocab = rankedVocab(specOf("qwen3").ranks);
    const utf8 = new TextEncoder();
    const cjk = (n: number, next = mulberry32(3)) => Array.from({ length: n }, () => String.fromCodePoint(0x4e00 + Math.floor(next() * 20_000))).join("");
    const attacks = { letter: (n: number) => "a".repeat(n), emoji: (n: number) => "👩‍💻".repeat(n / 5), cjk };
    for (const [name, make] of Object.entries(attacks)) {
      const cpu = (n: number) => {
        const bytes = utf8.encode(make(n));
        let best = Number.POSITIVE_INFINITY;
        // The least of three: CPU time, not wall time, so other processes on the machine do not count.
        for (let round = 0; round < 3; round++) {
          const t0 = process.cpuUsage();
          mergePiece(vocab, bytes, []);
          const d = process.cpuUsage(t0);
          best = Math.min(best, d.user + d.system);
        }
        return best;
      };
      cpu(3_000);
      const ratio = cpu(192_000) / cpu(24_000);
      expect(ratio, name).toBeLessThan(24);
    }
  }, 120_000);
});

describe("the encoder's budget", () => {
  const encode = bpeEncoder(specOf("qwen3"));
  const prose = "The replica agent reports its load every second; the edge reads it. ".repeat(400);
  const unlimited = () => ({ maxTokens: 1e9, budget: { bytes: Number.POSITIVE_INFINITY } });

  it("spends the bytes it merges, and nothing on pieces it has merged before", () => {
    const fresh = bpeEncoder(specOf("llama3"));
    const budget: { bytes: number; exhausted?: boolean } = { bytes: 1e6 };
    fresh("alpha beta gamma é", { maxTokens: 1e9, budget });
    expect(budget.bytes).toBe(1e6 - new TextEncoder().encode("alpha beta gamma é").length);
    fresh("alpha beta gamma é", { maxTokens: 1e9, budget });
    expect(budget.bytes).toBe(1e6 - new TextEncoder().encode("alpha beta gamma é").length);
    expect(budget.exhausted).toBeUndefined();
  });

  it("stops at the piece that would pass it, with the ids of the text before it: a prefix of the whole text's ids", () => {
    const whole = encode(`${prose}${"a".repeat(50_000)} and after`, unlimited());
    const budget: { bytes: number; exhausted?: boolean } = { bytes: prose.length + 1000 };
    const head = encode(`${prose}${"a".repeat(50_000)} and after`, { maxTokens: 1e9, budget });
    expect(budget.exhausted).toBe(true);
    expect(head.length).toBeGreaterThan(0);
    expect(head).toEqual(whole.slice(0, head.length));
    // The long run is one piece (with the space before it): none of it is merged, and everything before it is.
    expect(head).toEqual(encode(prose.slice(0, -1), unlimited()));
  });

  it("stops once maxTokens are made, with a prefix of the whole text's ids", () => {
    const whole = encode(prose, unlimited());
    const head = encode(prose, { maxTokens: 100, budget: { bytes: Number.POSITIVE_INFINITY } });
    expect(head.length).toBeGreaterThanOrEqual(100);
    expect(head).toEqual(whole.slice(0, head.length));
  });
});
