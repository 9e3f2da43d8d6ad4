/**
 * Builds the tiny language model (docs/tiny-lm.md): a character-level trigram model
 * counted on models/tiny-lm/corpus.txt, written as an ONNX graph with onnx-proto.
 *
 *   npx tsx scripts/build-tiny-lm.ts                 # corpus.txt → tiny-lm.onnx + vocab.json
 *   npx tsx scripts/build-tiny-lm.ts --out DIR       # write elsewhere (the reproducibility test)
 *   npx tsx scripts/build-tiny-lm.ts --make-corpus   # first rewrite corpus.txt from README.md + docs/*.md
 *
 * Deterministic: the same corpus gives byte-identical files (no timestamps, fixed
 * order, float64 arithmetic in a fixed order, round-to-nearest-even float16).
 *
 * The model. Counts n(a,b,c) of every character trigram in the corpus (read as one
 * token stream that starts with <s> <s>), smoothed additively towards the next
 * lower order (add-k with the lower-order distribution as prior, k·V = ALPHA):
 *   P1(c)     = (n(c) + 1) / (N + V - 1)                                (add-one unigram)
 *   P2(c|b)   = (n(b,c) + ALPHA·P1(c)) / (n(b,·) + ALPHA)
 *   P3(c|a,b) = (n(a,b,c) + ALPHA·P2(c|b)) / (n(a,b,·) + ALPHA)
 * <s> is never a next token: its column holds BOS_LOGPROB.
 *
 * The graph (opset 13):
 *   input   context    int64 [batch, 2]   the two previous token ids (<s> = 0 pads the start)
 *   row = context[:,0]·V + context[:,1]           (Gather, Gather, Mul, Add)
 *   output  logits     float32 [batch, V]  ln P3(·|a,b) = Cast(Gather(table, row))
 *   output  embedding  float32 [1, V-1]    mean over the batch of logits[:, 1:], centred
 *                                          over its V-1 entries, L2-normalised
 *   initializer table  float16 [V·V, V]   (1.8 MB)
 */
// @ts-nocheck

import { mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { parseArgs } from "node:util";
import onnxProto, { type onnx as Onnx } from "onnx-proto";
import { BOS, VOCAB_SIZE, encode, normalizeText, vocabJson } from "../src/prompt/tiny-lm-tokenizer.ts";

const { onnx } = onnxProto;

export const ALPHA = 3;
export const BOS_LOGPROB = -30;
const V = VOCAB_SIZE;
const ROOT = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
export const MODEL_DIR = path.join(ROOT, "models/tiny-lm");

/** corpus.txt from the repo's own prose: README.md then docs/*.md (sorted), normalised, blank line between files. */
export function corpusFromDocs(root = ROOT): string {
  const files = ["README.md", ...readdirSync(path.join(root, "docs")).filter((f) => f.endsWith(".md")).sort().map((f) => `docs/${f}`)];
  return files.map((f) => normalizeText(readFileSync(path.join(root, f), "utf8")).trimEnd() + "\n").join("\n");
}

/** ln P3(c|a,b) for every (a, b, c), row-major [(a·V + b)·V + c], in float64. */
export function trigramLogProbs(corpus: string): Float64Array {
  const ids = [BOS, BOS, ...encode(corpus)];
  const n1 = new Float64Array(V);
  const n2 = new Float64Array(V * V);
  const n3 = new Float64Array(V * V * V);
  for (let i = 2; i < ids.length; i++) {
    const a = ids[i - 2]!;
    const b = ids[i - 1]!;
    const c = ids[i]!;
    n1[c]!++;
    n2[b * V + c]!++;
    n3[(a * V + b) * V + c]!++;
  }
  const total = ids.length - 2;
  const p1 = new Float64Array(V);
  for (let c = 1; c < V; c++) p1[c] = (n1[c]! + 1) / (total + V - 1);
  const p2 = new Float64Array(V * V);
  for (let b = 0; b < V; b++) {
    let sum = 0;
    for (let c = 1; c < V; c++) sum += n2[b * V + c]!;
    for (let c = 1; c < V; c++) p2[b * V + c] = (n2[b * V + c]! + ALPHA * p1[c]!) / (sum + ALPHA);
  }
  const table = new Float64Array(V * V * V);
  for (let a = 0; a < V; a++) {
    for (let b = 0; b < V; b++) {
      const row = (a * V + b) * V;
      let sum = 0;
      for (let c = 1; c < V; c++) sum += n3[row + c]!;
      table[row] = BOS_LOGPROB;
      for (let c = 1; c < V; c++) table[row + c] = Math.log((n3[row + c]! + ALPHA * p2[b * V + c]!) / (sum + ALPHA));
    }
  }
  return table;
}

const f64 = new DataView(new ArrayBuffer(8));

/** IEEE 754 half-precision bits of `x`, rounded to nearest, ties to even. */
export function float16Bits(x: number): number {
  if (Number.isNaN(x)) return 0x7e00;
  const sign = x < 0 || Object.is(x, -0) ? 0x8000 : 0;
  const a = Math.abs(x);
  if (a >= 65520) return sign | 0x7c00; // rounds to infinity
  if (a < 2 ** -24 / 2) return sign; // rounds to zero (ties to even: 2^-25 → 0)
  if (a < 2 ** -14) {
    // subnormal: units of 2^-24
    const m = roundHalfEven(a / 2 ** -24);
    return sign | m; // m may reach 1024 = the smallest normal, whose bits are the same
  }
  f64.setFloat64(0, a);
  const exp = ((f64.getUint32(0) >>> 20) & 0x7ff) - 1023;
  const scaled = a / 2 ** exp; // 1 ≤ scaled < 2
  let mant = roundHalfEven((scaled - 1) * 1024);
  let e = exp;
  if (mant === 1024) {
    mant = 0;
    e++;
  }
  if (e > 15) return sign | 0x7c00;
  return sign | ((e + 15) << 10) | mant;
}

function roundHalfEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

/** The number half-precision `bits` stand for. */
export function float16Value(bits: number): number {
  const sign = bits & 0x8000 ? -1 : 1;
  const e = (bits >>> 10) & 0x1f;
  const m = bits & 0x3ff;
  if (e === 0) return sign * m * 2 ** -24;
  if (e === 31) return m === 0 ? sign * Infinity : NaN;
  return sign * (1 + m / 1024) * 2 ** (e - 15);
}

/** The table as float16 values (what the ONNX graph holds), as float32-exact numbers. */
export function tableAsFloat16(table: Float64Array): Float32Array {
  const out = new Float32Array(table.length);
  for (let i = 0; i < table.length; i++) out[i] = float16Value(float16Bits(table[i]!));
  return out;
}

const T = onnx.TensorProto.DataType;
const A = onnx.AttributeProto.AttributeType;

function int64Scalar(name: string, value: number): Onnx.ITensorProto {
  const raw = new Uint8Array(8);
  new DataView(raw.buffer).setBigInt64(0, BigInt(value), true);
  return { name, dataType: T.INT64, dims: [], rawData: raw };
}

function int64Vector(name: string, values: number[]): Onnx.ITensorProto {
  const raw = new Uint8Array(8 * values.length);
  const view = new DataView(raw.buffer);
  values.forEach((v, i) => view.setBigInt64(8 * i, BigInt(v), true));
  return { name, dataType: T.INT64, dims: [values.length], rawData: raw };
}

function floatScalar(name: string, value: number): Onnx.ITensorProto {
  const raw = new Uint8Array(4);
  new DataView(raw.buffer).setFloat32(0, value, true);
  return { name, dataType: T.FLOAT, dims: [], rawData: raw };
}

function tensorType(elemType: number, dims: (number | string)[]): Onnx.ITypeProto {
  return {
    tensorType: {
      elemType,
      shape: { dim: dims.map((d) => (typeof d === "number" ? { dimValue: d } : { dimParam: d })) },
    },
  };
}

const intAttr = (name: string, i: number): Onnx.IAttributeProto => ({ name, type: A.INT, i });
const intsAttr = (name: string, ints: number[]): Onnx.IAttributeProto => ({ name, type: A.INTS, ints });

/** The ONNX model's bytes for a corpus. */
export function buildTinyLmOnnx(corpus: string): Uint8Array {
  const table = trigramLogProbs(corpus);
  const raw = new Uint8Array(table.length * 2);
  const view = new DataView(raw.buffer);
  for (let i = 0; i < table.length; i++) view.setUint16(2 * i, float16Bits(table[i]!), true);

  const node = (opType: string, inputs: string[], outputs: string[], attribute: Onnx.IAttributeProto[] = []): Onnx.INodeProto => ({
    opType,
    input: inputs,
    output: outputs,
    name: outputs[0]!,
    attribute,
  });
  const graph: Onnx.IGraphProto = {
    name: "tiny_lm",
    docString: "Character trigram language model: logits = ln P(next | two previous tokens); embedding = normalised mean of the rows.",
    initializer: [
      { name: "table", dataType: T.FLOAT16, dims: [V * V, V], rawData: raw },
      int64Scalar("zero", 0),
      int64Scalar("one", 1),
      int64Scalar("vocab_size", V),
      int64Vector("slice_start", [1]),
      int64Vector("slice_end", [V]),
      int64Vector("slice_axis", [1]),
      floatScalar("epsilon", 1e-12),
    ],
    node: [
      node("Gather", ["context", "zero"], ["prev2"], [intAttr("axis", 1)]),
      node("Gather", ["context", "one"], ["prev1"], [intAttr("axis", 1)]),
      node("Mul", ["prev2", "vocab_size"], ["prev2_scaled"]),
      node("Add", ["prev2_scaled", "prev1"], ["row"]),
      node("Gather", ["table", "row"], ["logits_f16"], [intAttr("axis", 0)]),
      node("Cast", ["logits_f16"], ["logits"], [intAttr("to", T.FLOAT)]),
      node("Slice", ["logits", "slice_start", "slice_end", "slice_axis"], ["char_logits"]),
      node("ReduceMean", ["char_logits"], ["mean_row"], [intsAttr("axes", [0]), intAttr("keepdims", 1)]),
      node("ReduceMean", ["mean_row"], ["mean_value"], [intsAttr("axes", [1]), intAttr("keepdims", 1)]),
      node("Sub", ["mean_row", "mean_value"], ["centred"]),
      node("ReduceL2", ["centred"], ["norm"], [intsAttr("axes", [1]), intAttr("keepdims", 1)]),
      node("Max", ["norm", "epsilon"], ["safe_norm"]),
      node("Div", ["centred", "safe_norm"], ["embedding"]),
    ],
    input: [{ name: "context", type: tensorType(T.INT64, ["batch", 2]) }],
    output: [
      { name: "logits", type: tensorType(T.FLOAT, ["batch", V]) },
      { name: "embedding", type: tensorType(T.FLOAT, [1, V - 1]) },
    ],
  };
  const model: Onnx.IModelProto = {
    irVersion: 7,
    opsetImport: [{ domain: "", version: 13 }],
    producerName: "switchyard scripts/build-tiny-lm.ts",
    producerVersion: "1",
    modelVersion: 1,
    docString: "tiny-lm: a character-level trigram language model counted on the Switchyard docs (docs/tiny-lm.md).",
    graph,
    metadataProps: [
      { key: "vocab_size", value: String(V) },
      { key: "alpha", value: String(ALPHA) },
      { key: "corpus_tokens", value: String(encode(corpus).length) },
    ],
  };
  const err = onnx.ModelProto.verify(model);
  if (err) throw new Error(`invalid ONNX model: ${err}`);
  return onnx.ModelProto.encode(model).finish();
}

/** Writes tiny-lm.onnx and vocab.json into `outDir`; returns their paths. */
export function buildTinyLm(corpus: string, outDir: string): { onnxPath: string; vocabPath: string; bytes: number } {
  mkdirSync(outDir, { recursive: true });
  const bytes = buildTinyLmOnnx(corpus);
  const onnxPath = path.join(outDir, "tiny-lm.onnx");
  const vocabPath = path.join(outDir, "vocab.json");
  writeFileSync(onnxPath, bytes);
  writeFileSync(vocabPath, `${JSON.stringify(vocabJson(), null, 2)}\n`);
  return { onnxPath, vocabPath, bytes: bytes.byteLength };
}

function main(): void {
  const { values } = parseArgs({
    options: {
      out: { type: "string", default: MODEL_DIR },
      corpus: { type: "string", default: path.join(MODEL_DIR, "corpus.txt") },
      "make-corpus": { type: "boolean", default: false },
    },
  });
  if (values["make-corpus"]) {
    const text = corpusFromDocs();
    mkdirSync(path.dirname(values.corpus), { recursive: true });
    writeFileSync(values.corpus, text);
    process.stdout.write(`wrote ${values.corpus} (${text.length} characters)\n`);
  }
  const corpus = readFileSync(values.corpus, "utf8");
  const started = performance.now();
  const out = buildTinyLm(corpus, values.out);
  process.stdout.write(`wrote ${out.onnxPath} (${out.bytes} bytes) and ${out.vocabPath} in ${Math.round(performance.now() - started)} ms\n`);
}

if (process.argv[1] && import.meta.url === pathToFileURL(path.resolve(process.argv[1])).href) main();
