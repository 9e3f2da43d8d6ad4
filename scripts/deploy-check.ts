/**
 * Deploy checks (run by `npm test`): bundles the Worker as `wrangler deploy` would
 * upload it (`wrangler deploy --dry-run`), as shipped (functions/) and with the
 * opt-in edge-inference example (examples/edge-inference/), and checks each upload's
 * size against the Workers limits. Exits 1 when a check fails.
 *   tsx scripts/deploy-check.ts [--json]
 *
 * The limits (developers.cloudflare.com/workers/platform/limits/, "Worker size"):
 * since 2026-09-04 one limit on every plan, 64 MiB uncompressed (cloudflare-docs
 * #33241; wrangler's own size report uses the same figure). The compressed limits
 * it replaced, 3 MB gzipped on Workers Free and 10 MB on Workers Paid, are kept
 * here as budgets: the default Worker stays within the former Free figure and the
 * edge-inference one within the former Paid one, so a change that makes either much
 * larger (and slower to start: the startup limit is 1 s) fails here first.
 */
import { spawnSync } from "node:child_process";
import { mkdtempSync, readdirSync, rmSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const MiB = 1024 * 1024;

/** A size limit: what it is, in bytes, uncompressed or gzipped. */
interface Limit {
  label: string;
  bytes: number;
  of: "size" | "gzip";
}

const PLATFORM: Limit = { label: "Workers size limit, every plan (uncompressed)", bytes: 64 * MiB, of: "size" };
const FORMER_FREE: Limit = { label: "budget: former Workers Free limit (3 MB gzipped)", bytes: 3 * MiB, of: "gzip" };
const FORMER_PAID: Limit = { label: "budget: former Workers Paid limit (10 MB gzipped)", bytes: 10 * MiB, of: "gzip" };

interface Variant {
  name: string;
  /** The key of this upload's size where the docs state it: `<!-- size:KEY -->1,137 KiB (222 KiB gzipped)<!-- /size -->`. */
  key: string;
  /** SWITCHYARD_FUNCTIONS for the build step; undefined: functions/ alone. */
  functions?: string;
  limits: Limit[];
  /** Whether the edge runtime (onnxruntime-web's .wasm) must be in the upload, or must not. */
  edgeRuntime: boolean;
  /** Whether a model family's BPE spec (src/prompt/tokenizers/bpe-spec.ts, made at build time) must be in the upload, or must not. */
  family?: boolean;
}

// The default last: the build step leaves .switchyard/deployments.ts as the last dry run generated it.
const VARIANTS: Variant[] = [
  { name: "with edge inference (functions/ + examples/edge-inference/)", key: "edge", functions: "functions,examples/edge-inference", limits: [PLATFORM, FORMER_PAID], edgeRuntime: true },
  // A model family's tokenizer (Qwen3's BPE spec, 2.5 MB, made from its 11 MB tokenizer.json at build time): fits the former Free budget.
  { name: "with a model family (functions/ + examples/model-family/: qwen3)", key: "family", functions: "functions,examples/model-family", limits: [PLATFORM, FORMER_FREE], edgeRuntime: false, family: true },
  // Gemma 3's merges spec (4 MB, from a 33 MB tokenizer.json) and gpt-oss's (o200k_harmony), each alone: each fits the former Free budget.
  { name: "with Gemma 3 (functions/ + examples/model-family-gemma3/)", key: "family-gemma3", functions: "functions,examples/model-family-gemma3", limits: [PLATFORM, FORMER_FREE], edgeRuntime: false, family: true },
  { name: "with gpt-oss (functions/ + examples/model-family-gpt-oss/)", key: "family-gpt-oss", functions: "functions,examples/model-family-gpt-oss", limits: [PLATFORM, FORMER_FREE], edgeRuntime: false, family: true },
  { name: "default (functions/)", key: "default", limits: [PLATFORM, FORMER_FREE], edgeRuntime: false },
];

export interface UploadSize {
  /** Bytes of every module together, as wrangler reports them ("Total Upload"). */
  size: number;
  /** Their gzipped size, as wrangler reports it. */
  gzip: number;
  /** The files `wrangler deploy` would upload (source maps excluded). */
  modules: string[];
}

/** Reads wrangler's "Total Upload: 17364.00 KiB / gzip: 5742.44 KiB" line. */
export function parseTotalUpload(output: string): { size: number; gzip: number } | undefined {
  // eslint-disable-next-line no-control-regex
  const m = /Total Upload: ([\d.]+) KiB \/ gzip: ([\d.]+) KiB/.exec(output.replace(/\x1b\[[0-9;]*m/g, ""));
  return m ? { size: Math.round(Number(m[1]) * 1024), gzip: Math.round(Number(m[2]) * 1024) } : undefined;
}

function dryRun(v: Variant): UploadSize {
  const outdir = mkdtempSync(join(tmpdir(), "switchyard-dry-run-"));
  try {
    const wrangler = join(dirname(createRequire(join(root, "package.json")).resolve("wrangler/package.json")), "bin/wrangler.js");
    const env: NodeJS.ProcessEnv = { ...process.env, WRANGLER_SEND_METRICS: "false", CLOUDFLARE_CF_FETCH_ENABLED: "false" };
    if (v.functions) env.SWITCHYARD_FUNCTIONS = v.functions;
    else delete env.SWITCHYARD_FUNCTIONS;
    const r = spawnSync(process.execPath, [wrangler, "deploy", "--dry-run", "--outdir", outdir], { cwd: root, env, encoding: "utf8", timeout: 180_000 });
    const output = `${r.stdout ?? ""}${r.stderr ?? ""}`;
    if (r.status !== 0) throw new Error(`wrangler deploy --dry-run (${v.name}) exited ${r.status ?? r.signal}:\n${output}`);
    const total = parseTotalUpload(output);
    if (!total) throw new Error(`wrangler deploy --dry-run (${v.name}) printed no "Total Upload" line:\n${output}`);
    const modules = readdirSync(outdir).filter((f) => !f.endsWith(".map") && f !== "README.md").sort();
    return { ...total, modules };
  } finally {
    rmSync(outdir, { recursive: true, force: true });
  }
}

/** Files whose stated upload sizes must match the measured ones. */
const SIZE_DOCS = ["README.md", "docs/edge-inference.md"];
/** How far a stated size may be from the measured one before the docs count as stale. */
const SIZE_TOLERANCE = 0.05;

/**
 * Upload sizes the docs state (marked `<!-- size:KEY -->… KiB|MiB … (… gzipped)<!-- /size -->`)
 * that are more than SIZE_TOLERANCE off the measured ones, or whose key nothing measures:
 * a figure of ours that drifts from what `wrangler deploy` would upload is a defect.
 */
export function staleSizes(docs: { file: string; text: string }[], measured: Record<string, UploadSize>): string[] {
  const stale: string[] = [];
  const bytes = (n: string, unit: string) => Number(n.replace(/,/g, "")) * (unit === "MiB" ? MiB : 1024);
  for (const { file, text } of docs) {
    for (const m of text.matchAll(/<!-- size:(\w+) -->([\s\S]*?)<!-- \/size -->/g)) {
      const [, key, stated] = m as unknown as [string, string, string];
      const got = measured[key];
      const sizes = [...stated.matchAll(/([\d,.]+) (KiB|MiB)/g)].map((x) => bytes(x[1]!, x[2]!));
      if (!got || sizes.length !== 2) {
        stale.push(`${file}: "${stated}" (size:${key}) ${got ? "does not state a size and a gzipped size" : "is not a measured upload"}`);
        continue;
      }
      const off = (a: number, b: number) => Math.abs(a - b) / b > SIZE_TOLERANCE;
      if (off(sizes[0]!, got.size) || off(sizes[1]!, got.gzip)) stale.push(`${file}: states "${stated.replace(/\s+/g, " ")}" (size:${key}), measured ${kib(got.size)} (${kib(got.gzip)} gzipped)`);
    }
  }
  return stale;
}

const kib = (b: number) => `${(b / 1024).toLocaleString("en-US", { maximumFractionDigits: 0 })} KiB`;

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  const failures: string[] = [];
  const results: Record<string, UploadSize> = {};
  console.log("deploy checks (wrangler deploy --dry-run):");
  for (const v of VARIANTS) {
    const u = dryRun(v);
    results[v.key] = u;
    console.log(`  ${v.name}: ${kib(u.size)}, gzip ${kib(u.gzip)} — ${u.modules.map((m) => m.replace(/^[0-9a-f]{40}-/, "")).join(", ")}`);
    const hasRuntime = u.modules.some((m) => /ort-wasm[^/]*\.wasm$/.test(m));
    if (hasRuntime !== v.edgeRuntime) failures.push(`${v.name}: the edge runtime's .wasm is ${hasRuntime ? "in" : "missing from"} the upload`);
    // The BPE engine is JavaScript (src/prompt/tokenizers/ranked-bpe.ts): no tokenizer's WebAssembly rides along.
    if (u.modules.some((m) => m.endsWith("tiktoken_bg.wasm"))) failures.push(`${v.name}: tiktoken's .wasm is in the upload`);
    // A family comes as its BPE spec made at build time (scripts/build.ts familyBpeFile), not its tokenizer.json.
    const hasSpec = u.modules.some((m) => m.endsWith(".bpe.txt"));
    if (hasSpec !== (v.family ?? false)) failures.push(`${v.name}: a family's BPE spec (.bpe.txt) is ${hasSpec ? "in" : "missing from"} the upload`);
    if (v.family && u.modules.some((m) => m.endsWith("tokenizer.json"))) failures.push(`${v.name}: a tokenizer.json rides along beside the BPE spec`);
    for (const l of v.limits) {
      const got = u[l.of];
      const ok = got <= l.bytes;
      console.log(`    ${ok ? "ok  " : "FAIL"} ${l.of === "gzip" ? "gzip" : "size"} ${kib(got)} ≤ ${kib(l.bytes)} (${l.label}): ${((got / l.bytes) * 100).toFixed(0)} %`);
      if (!ok) failures.push(`${v.name}: ${l.of} ${kib(got)} over ${kib(l.bytes)} (${l.label})`);
    }
  }
  const { readFileSync } = await import("node:fs");
  failures.push(...staleSizes(SIZE_DOCS.map((file) => ({ file, text: readFileSync(join(root, file), "utf8") })), results));
  if (process.argv.includes("--json")) console.log(JSON.stringify(results));
  if (failures.length > 0) {
    console.error(`deploy checks failed:\n  ${failures.join("\n  ")}`);
    process.exit(1);
  }
}
