/**
 * Which tokenizer engine could meet issue 34's CPU target (≤ 1 ms per 1,000 prompt
 * tokens): the same family's vocabulary, the same texts, three engines, in Node.
 *   npx tsx bench/tokenizer-engines.ts [--texts 240]
 *
 * - `@huggingface/tokenizers` (pure JS): what the edge ships (src/prompt/tokenizers/,
 *   held to transformers' output by test/unit/hf-tokenizers.test.ts).
 * - `@mlc-ai/web-tokenizers`: Hugging Face's own Rust `tokenizers` crate compiled to
 *   WebAssembly (MLC's tokenizers-cpp, as WebLLM uses it), loading the same
 *   tokenizer.json.
 * - `tiktoken` (OpenAI's Rust BPE in WebAssembly) given the family's vocabulary as
 *   ranks (each token's bytes, ranked by id) and its split regex: only for families
 *   whose tokenizer.json is byte-level BPE behind one split regex, where that is the
 *   same algorithm (llama3, mistral-nemo; qwen3 with its NFC applied first). Its ids are
 *   compared with the shipped engine's over every text; a family where any differs
 *   is reported so, not timed as a candidate.
 *
 * Texts: the message contents of test/fixtures/hf-tokenizers/conversations.ts (the
 * oracle test's corpus: accents, CJK, Arabic, emoji, long messages), each engine timed
 * over the same texts, three rounds of different texts (a round's words are new to
 * the engines' caches only in part, as in traffic). Each text is what the edge
 * tokenizes between a template's special tokens. CPU here is Node's, not workerd's:
 * bench/tokenizers.ts measures the shipped engine in workerd, and its Node figure here
 * is the bridge between the two.
 */
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { loadavg } from "node:os";
import { dirname } from "node:path";
import { parseArgs } from "node:util";
import { Tokenizer as HfTokenizer } from "@huggingface/tokenizers";
import { Tiktoken } from "tiktoken/lite";
import { writeResult } from "./result-file.ts";
import { markdownTable, verdict } from "./table.ts";
import { FAMILY_PACKAGES, fitsTheEdge } from "../src/prompt/tokenizers/index.ts";
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

interface PreTokenizer {
  type: string;
  pattern?: { Regex?: string };
  pretokenizers?: PreTokenizer[];
}
interface TokenizerJson {
  normalizer: { type: string; normalizers?: unknown[] } | null;
  pre_tokenizer: PreTokenizer;
  model: { type: string; vocab: Record<string, number> };
}

/** GPT-2's byte-level alphabet: the character each byte is written as in a vocabulary. */
function byteLevelDecoder(): Map<string, number> {
  const bytes: number[] = [];
  for (let b = 33; b <= 126; b++) bytes.push(b);
  for (let b = 161; b <= 172; b++) bytes.push(b);
  for (let b = 174; b <= 255; b++) bytes.push(b);
  const chars = [...bytes];
  let extra = 0;
  for (let b = 0; b < 256; b++) if (!bytes.includes(b)) (bytes.push(b), chars.push(256 + extra++));
  return new Map(chars.map((c, i) => [String.fromCharCode(c), bytes[i]!]));
}

/** The family as tiktoken ranks and one split regex, or why it cannot be. */
function asTiktoken(tj: TokenizerJson): { ranks: string; pattern: string; nfc: boolean } | string {
  if (tj.model.type !== "BPE") return `model ${tj.model.type}`;
  const pre = tj.pre_tokenizer.type === "Sequence" ? tj.pre_tokenizer.pretokenizers! : [tj.pre_tokenizer];
  const splits = pre.filter((p) => p.type === "Split");
  if (splits.length !== 1 || !pre.some((p) => p.type === "ByteLevel") || pre.length !== 2) return `${pre.length} pre-tokenizers (${pre.map((p) => p.type).join(", ")})`;
  const n = tj.normalizer;
  if (n !== null && n.type !== "NFC" && !(n.type === "Sequence" && n.normalizers?.length === 0)) return `normalizer ${n.type}`;
  const decode = byteLevelDecoder();
  const lines: string[] = [];
  for (const [token, id] of Object.entries(tj.model.vocab)) lines.push(`${Buffer.from([...token].map((ch) => decode.get(ch)!)).toString("base64")} ${id}`);
  return { ranks: lines.join("\n"), pattern: splits[0]!.pattern!.Regex!, nfc: tj.normalizer?.type === "NFC" };
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
const results: { family: string; tokens: number; engines: EngineResult[] }[] = [];
for (const [family, pkg] of Object.entries(FAMILY_PACKAGES)) {
  if (!fitsTheEdge(family as never)) continue;
  const json = readFileSync(require.resolve(`${pkg}/models/tokenizer.json`));
  const config = JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer_config.json`), "utf8")) as Record<string, unknown>;
  const tj = JSON.parse(json.toString("utf8")) as TokenizerJson;
  const shipped = new HfTokenizer(tj as never, config as never);
  const hf = (t: string) => shipped.encode(t, { add_special_tokens: false }).ids;
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
  const engines: EngineResult[] = [{ engine: "@huggingface/tokenizers (JS, shipped)", msPer1k: timed(hf), identical: "reference" }];

  const wasm = await WebTokenizer.fromJSON(json.buffer.slice(json.byteOffset, json.byteOffset + json.byteLength) as ArrayBuffer);
  const rust = (t: string) => wasm.encode(t);
  engines.push({ engine: "HF tokenizers (Rust → wasm)", identical: same(rust), msPer1k: timed(rust) });

  const tk = asTiktoken(tj);
  if (typeof tk === "string") engines.push({ engine: "tiktoken (wasm)", msPer1k: [], identical: "–", note: `not the same algorithm: ${tk}` });
  else {
    const enc = new Tiktoken(tk.ranks, {}, tk.pattern);
    const tiktoken = tk.nfc ? (t: string) => enc.encode_ordinary(t.normalize("NFC")) : (t: string) => enc.encode_ordinary(t);
    const identical = same(tiktoken);
    engines.push({ engine: "tiktoken (wasm)", identical, msPer1k: timed(tiktoken), ...(tk.nfc && { note: "NFC applied in JS first" }) });
    enc.free();
  }
  results.push({ family, tokens: tokens.reduce((a, b) => a + b, 0), engines });
  console.log(`${family}: ${engines.map((e) => (e.msPer1k.length ? `${e.engine} ${e.msPer1k.map((x) => x.toFixed(2)).join(" / ")} ms per 1,000 (identical ${e.identical})` : `${e.engine}: ${e.note}`)).join("; ")}`);
}

const best = (e: EngineResult) => Math.max(...e.msPer1k);
console.log(
  `\n${markdownTable(
    ["family", "engine", "CPU ms per 1,000 tokens (3 rounds of new texts)", "ids identical to the shipped engine's", `≤ ${TARGET_MS_PER_1K} ms in every round`],
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
