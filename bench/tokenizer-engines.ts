/**
 * Which tokenizer engine could meet issue 34's CPU target (≤ 1 ms per 1,000 prompt
 * tokens): the same family's vocabulary, the same texts, three engines, in Node.
 *   npx tsx bench/tokenizer-engines.ts [--texts 240]
 *
 * - `@huggingface/tokenizers` (pure JS): the library engine (src/prompt/tokenizers/hf-codec.ts,
 *   held to transformers' output by test/unit/hf-tokenizers.test.ts), the reference here.
 * - `@mlc-ai/web-tokenizers`: Hugging Face's own Rust `tokenizers` crate compiled to
 *   WebAssembly (MLC's tokenizers-cpp, as WebLLM uses it), loading the same
 *   tokenizer.json.
 * - `tiktoken` (OpenAI's Rust BPE in WebAssembly) as the edge runs it for the families
 *   whose tokenizer.json is byte-level BPE behind one split regex
 *   (src/prompt/tokenizers/tiktoken-bpe.ts: the vocabulary as ranks, the split regex,
 *   NFC first for qwen3). Its ids are compared with the library's over every text;
 *   MET needs every one identical.
 *
 * Texts: the message contents of test/fixtures/hf-tokenizers/conversations.ts (the
 * oracle test's corpus: accents, CJK, Arabic, emoji, long messages), each engine timed
 * over the same texts, three rounds of different texts (a round's words are new to
 * the engines' caches only in part, as in traffic). Each text is what the edge
 * tokenizes between a template's special tokens. CPU here is Node's, not workerd's:
 * bench/tokenizers.ts measures the engines as shipped in workerd, and the Node figures here
 * are the bridge between the two.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { loadavg } from "node:os";
import { dirname } from "node:path";
import { parseArgs } from "node:util";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { writeResult } from "./result-file.ts";
import { markdownTable, verdict } from "./table.ts";
import { FAMILY_PACKAGES, fitsTheEdge } from "../src/prompt/tokenizers/index.ts";
import { bpeSpecOf, tiktokenEncoder, type TokenizerJsonShape } from "../src/prompt/tokenizers/tiktoken-bpe.ts";
import { chatCases } from "../test/fixtures/hf-tokenizers/conversations.ts";

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

/** What the pre-tokenizer is, for a family tiktoken cannot take (bpeSpecOf says which can). */
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
  note?: string;
}

const started = loadavg()[0]!;
const corpus = rounds();
const WebTokenizer = webTokenizers();
/** tiktoken's module as Node compiles it for the codec (src/prompt/tokenizers/node-files.ts). */
const bpeWasm = new (WebAssembly.Module as unknown as new (bytes: Uint8Array) => WebAssembly.Module)(readFileSync(require.resolve("tiktoken/lite/tiktoken_bg.wasm")));
const results: { family: string; tokens: number; engines: EngineResult[] }[] = [];
for (const [family, pkg] of Object.entries(FAMILY_PACKAGES)) {
  if (!fitsTheEdge(family as never)) continue;
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
    return `${n} of ${total}`;
  };
  const timed = (encode: (t: string) => ArrayLike<number>) => corpus.map((texts, r) => (1000 * time(encode, texts)) / tokens[r]!);
  const engines: EngineResult[] = [{ engine: "@huggingface/tokenizers (JS)", msPer1k: timed(hf), identical: "reference" }];

  const wasm = await WebTokenizer.fromJSON(json.buffer.slice(json.byteOffset, json.byteOffset + json.byteLength) as ArrayBuffer);
  const rust = (t: string) => wasm.encode(t);
  engines.push({ engine: "HF tokenizers (Rust → wasm)", identical: same(rust), msPer1k: timed(rust) });

  // The shipped path (src/prompt/tokenizers/tiktoken-bpe.ts): the family's ranks, and tiktoken on the compiled module.
  const spec = bpeSpecOf(tj);
  if (spec === undefined) engines.push({ engine: "tiktoken (wasm)", msPer1k: [], identical: "–", note: `not the same algorithm: ${preTokenizers(tj)}` });
  else {
    const tiktoken = tiktokenEncoder(spec, bpeWasm);
    engines.push({ engine: "tiktoken (wasm)", identical: same(tiktoken), msPer1k: timed(tiktoken), ...(spec.nfc && { note: "NFC applied in JS first" }) });
  }
  results.push({ family, tokens: tokens.reduce((a, b) => a + b, 0), engines });
  console.log(`${family}: ${engines.map((e) => (e.msPer1k.length ? `${e.engine} ${e.msPer1k.map((x) => x.toFixed(2)).join(" / ")} ms per 1,000 (identical ${e.identical})` : `${e.engine}: ${e.note}`)).join("; ")}`);
}

const best = (e: EngineResult) => Math.max(...e.msPer1k);
console.log(
  `\n${markdownTable(
    ["family", "engine", "CPU ms per 1,000 tokens (3 rounds of new texts)", "ids identical to the library's", `≤ ${TARGET_MS_PER_1K} ms in every round`],
    results.flatMap((r) =>
      r.engines.map((e) => [
        r.family,
        e.engine,
        e.msPer1k.length ? e.msPer1k.map((x) => x.toFixed(2)).join(" / ") : e.note ?? "–",
        e.identical,
        e.msPer1k.length ? verdict(best(e) <= TARGET_MS_PER_1K && (e.identical === "reference" || e.identical.split(" of ")[0] === e.identical.split(" of ")[1])) : "–",
      ]),
    ),
  ).join("\n")}`,
);
console.log(`\nNode ${process.version}, load average ${started.toFixed(2)} at start; ${corpus.map((t) => t.length).join(" / ")} texts per round.`);
console.log(`wrote ${writeResult("tokenizer-engines", { texts: TEXTS, rounds: ROUNDS, loadavgAtStart: started, results }, { quick: false, arms: results.map((r) => ({ arm: r.family, requests: r.tokens, ok: r.tokens })) })}`);
