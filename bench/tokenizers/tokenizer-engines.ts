/**
 * Which tokenizer engine could meet issue 34's CPU target (≤ 1 ms per 1,000 prompt
 * tokens): the same family's vocabulary, the same texts, three engines, in Node.
 *   npx tsx bench/tokenizers/tokenizer-engines.ts [--texts 240]
 *
 * - `@huggingface/tokenizers` (pure JS): the library engine (src/prompt/tokenizers/hf-codec.ts,
 *   held to transformers' output by test/unit/hf-tokenizers.test.ts), the reference here.
 * - `@mlc-ai/web-tokenizers`: Hugging Face's own Rust `tokenizers` crate compiled to
 *   WebAssembly (MLC's tokenizers-cpp, as WebLLM uses it), loading the same
 *   tokenizer.json.
 * - `tiktoken` (OpenAI's Rust BPE in WebAssembly), the edge's engine until issue 50
 *   (its merge loop is quadratic in a piece's length), for the families whose
 *   tokenizer.json is byte-level BPE behind one split regex: the vocabulary as ranks,
 *   the split regex, NFC first for qwen3.
 * - the edge's BPE engine (src/prompt/tokenizers/ranked-bpe.ts on the family's BPE
 *   spec, bpe-spec.ts): the split regexes in JavaScript, a heap merge, a piece cache.
 * Ids are compared with the library's over every text; MET needs every one identical.
 *
 * Texts: the message contents of test/fixtures/hf-tokenizers/conversations.ts (the
 * oracle test's corpus: accents, CJK, Arabic, emoji, long messages), each engine timed
 * over the same texts, three rounds of different texts (a round's words are new to
 * the engines' caches only in part, as in traffic). Each text is what the edge
 * tokenizes between a template's special tokens. CPU here is Node's, not workerd's:
 * bench/tokenizers/tokenizers.ts measures the engines as shipped in workerd, and the Node figures here
 * are the bridge between the two.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { loadavg } from "node:os";
import { dirname } from "node:path";
import { parseArgs } from "node:util";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { writeResult } from "../shared/result-file.ts";
import { everyAtMost } from "../shared/bench-targets.ts";
import { judgedText, markdownTable } from "../shared/table.ts";
import { FAMILY_PACKAGES, familyFiles } from "../../src/prompt/tokenizers/index.ts";
import * as tiktokenBindings from "tiktoken/lite/init";
import { bpeSpecOf, type BpeSpec, type TokenizerJsonShape } from "../../src/prompt/tokenizers/bpe-spec.ts";
import { bpeEncoder } from "../../src/prompt/tokenizers/ranked-bpe.ts";
import { chatCases } from "../../test/fixtures/hf-tokenizers/conversations.ts";

const { values } = parseArgs({ options: { texts: { type: "string", default: "240" } } });
const TEXTS = Number(values.texts);
const ROUNDS = 3;
const TARGET_MS_PER_1K = 1;
const require = createRequire(import.meta.url);

interface WasmTokenizer {
  encode(text: string): Int32Array;
}
/**
 * web-tokenizers ships a UMD file in a `"type": "module"` package, which Node loads as
 * neither kind: it is run here as the CommonJS module it is written as.
 */
function webTokenizers(): { fromJSON(json: ArrayBuffer): Promise<WasmTokenizer> } {
  const file = require.resolve("@mlc-ai/web-tokenizers");
  const module = { exports: {} as { Tokenizer: { fromJSON(json: ArrayBuffer): Promise<WasmTokenizer> } } };
  new Function("exports", "module", "require", "__filename", "__dirname", readFileSync(file, "utf8"))(module.exports, module, require, file, dirname(file));
  return module.exports.Tokenizer;
}

/** What the pre-tokenizer is, for a family an engine cannot take (bpeSpecOf says which can). */
function preTokenizers(json: TokenizerJsonShape): string {
  const pre = json.pre_tokenizer;
  const steps = pre?.type === "Sequence" ? (pre.pretokenizers ?? []) : pre ? [pre] : [];
  return `${steps.length} pre-tokenizers (${steps.map((p) => p.type).join(", ")})`;
}

/** Distinct texts per round: the message contents of the oracle test's conversations. */
function rounds(): string[][] {
  return Array.from({ length: ROUNDS }, (_, r) =>
    chatCases(TEXTS, 9_000 + r, { tools: false }).flatMap((c) => c.messages.flatMap((m) => (typeof m.content === "string" && m.content.length > 0 ? [m.content] : []))),
  );
}

function time(encode: (text: string) => ArrayLike<number>, texts: readonly string[]): number {
  const t0 = process.cpuUsage();
  for (const t of texts) encode(t);
  const d = process.cpuUsage(t0);
  return (d.user + d.system) / 1000;
}

interface EngineResult {
  engine: string;
  msPer1k: number[];
  identical: string;
  /** Texts whose ids equal the library's, of those compared (not for the library itself). */
  compared?: { same: number; compared: number };
  note?: string;
}

const started = loadavg()[0]!;
const corpus = rounds();
const WebTokenizer = webTokenizers();
/** tiktoken in Node, instantiated once; an encoder of a one-regex spec (its ranks as tiktoken reads them: base64 and rank per line). */
const bpeWasm = new (WebAssembly.Module as unknown as new (bytes: Uint8Array) => WebAssembly.Module)(readFileSync(require.resolve("tiktoken/lite/tiktoken_bg.wasm")));
(tiktokenBindings as unknown as { __wbg_set_wasm(e: WebAssembly.Exports): void }).__wbg_set_wasm(new WebAssembly.Instance(bpeWasm, { "./tiktoken_bg.js": tiktokenBindings as unknown as WebAssembly.ModuleImports }).exports);
function tiktokenEncoder(spec: BpeSpec): (text: string) => Uint32Array {
  const ranks = spec.ranks
    .split("\n")
    .flatMap((b64, rank) => (b64 === "" ? [] : [`${b64} ${rank}`]))
    .join("\n");
  const encoder = new tiktokenBindings.Tiktoken(ranks, {}, spec.patterns[0]!);
  return spec.nfc ? (text) => encoder.encode_ordinary(text.normalize("NFC")) : (text) => encoder.encode_ordinary(text);
}
const results: { family: string; tokens: number; engines: EngineResult[] }[] = [];
for (const [family, pkg] of Object.entries(FAMILY_PACKAGES)) {
  // gpt-oss has no tokenizer.json here (a tiktoken encoding): its engine is held to tiktoken in test/unit/gpt-oss.test.ts.
  if (familyFiles(family).kind !== "hf") continue;
  const json = readFileSync(require.resolve(`${pkg}/models/tokenizer.json`));
  const config = JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer_config.json`), "utf8")) as Record<string, unknown>;
  const tj = JSON.parse(json.toString("utf8")) as TokenizerJsonShape;
  const library = new HfTokenizer(tj as never, config as never);
  const hf = (t: string) => library.encode(t, { add_special_tokens: false }).ids;
  const reference = corpus.map((texts) => texts.map(hf));
  const tokens = reference.map((r) => r.reduce((n, ids) => n + ids.length, 0));
  const same = (encode: (t: string) => ArrayLike<number>) => {
    let n = 0;
    let total = 0;
    corpus.forEach((texts, r) =>
      texts.forEach((t, i) => {
        total++;
        const a = encode(t);
        const b = reference[r]![i]!;
        if (a.length === b.length && b.every((x, k) => a[k] === x)) n++;
      }),
    );
    return { identical: `${n} of ${total}`, compared: { same: n, compared: total } };
  };
  const timed = (encode: (t: string) => ArrayLike<number>) => corpus.map((texts, r) => (1000 * time(encode, texts)) / tokens[r]!);
  const engines: EngineResult[] = [{ engine: "@huggingface/tokenizers (JS)", msPer1k: timed(hf), identical: "reference" }];

  const wasm = await WebTokenizer.fromJSON(json.buffer.slice(json.byteOffset, json.byteOffset + json.byteLength) as ArrayBuffer);
  const rust = (t: string) => wasm.encode(t);
  engines.push({ engine: "HF tokenizers (Rust → wasm)", ...same(rust), msPer1k: timed(rust) });

  const spec = bpeSpecOf(tj);
  if (spec === undefined || spec.patterns.length !== 1) engines.push({ engine: "tiktoken (wasm)", msPer1k: [], identical: "–", note: `not the same algorithm: ${preTokenizers(tj)}` });
  else {
    const tiktoken = tiktokenEncoder(spec);
    engines.push({ engine: "tiktoken (wasm)", ...same(tiktoken), msPer1k: timed(tiktoken), ...(spec.nfc && { note: "NFC applied in JS first" }) });
  }
  // The shipped path: the family's BPE spec through the edge's engine (its piece cache warms over the rounds, as in traffic).
  // Gemma 3 (SentencePiece-style) runs on the merges engine instead, whose segments are split at its added tokens by the codec: test/unit/merge-bpe.test.ts holds it to the library, bench/tokenizers/tokenizers.ts times it in workerd.
  if (spec === undefined) engines.push({ engine: "edge BPE engine (JS)", msPer1k: [], identical: "–", note: `not byte-level BPE behind split regexes (${preTokenizers(tj)}): the merges engine's, timed by bench/tokenizers/tokenizers.ts` });
  else {
    const encode = bpeEncoder(spec);
    const edge = (t: string) => encode(t, { maxTokens: Number.MAX_SAFE_INTEGER, budget: { bytes: Number.POSITIVE_INFINITY } });
    engines.push({ engine: "edge BPE engine (JS)", ...same(edge), msPer1k: timed(edge) });
  }
  results.push({ family, tokens: tokens.reduce((a, b) => a + b, 0), engines });
  console.log(`${family}: ${engines.map((e) => (e.msPer1k.length ? `${e.engine} ${e.msPer1k.map((x) => x.toFixed(2)).join(" / ")} ms per 1,000 (identical ${e.identical})` : `${e.engine}: ${e.note}`)).join("; ")}`);
}

/** Every round within the target, and (but for the library itself) ids identical on every text compared. */
const engineTarget = (e: EngineResult) => everyAtMost(e.msPer1k, TARGET_MS_PER_1K, e.identical === "reference" ? undefined : (e.compared ?? { same: 0, compared: 0 }));
console.log(
  `\n${markdownTable(
    ["family", "engine", "CPU ms per 1,000 tokens (3 rounds of new texts)", "ids identical to the library's", `≤ ${TARGET_MS_PER_1K} ms in every round`],
    results.flatMap((r) =>
      r.engines.map((e) => [
        r.family,
        e.engine,
        e.msPer1k.length ? e.msPer1k.map((x) => x.toFixed(2)).join(" / ") : e.note ?? "–",
        e.identical,
        e.msPer1k.length ? judgedText(engineTarget(e)) : "–",
      ]),
    ),
  ).join("\n")}`,
);
console.log(`\nNode ${process.version}, load average ${started.toFixed(2)} at start; ${corpus.map((t) => t.length).join(" / ")} texts per round.`);
console.log(`wrote ${writeResult("tokenizer-engines", { texts: TEXTS, rounds: ROUNDS, loadavgAtStart: started, results }, { quick: false, arms: results.map((r) => ({ arm: r.family, requests: r.tokens, ok: r.tokens })) })}`);
