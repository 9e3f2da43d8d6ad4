/**
 * What `scripts/build.ts` (the build's CLI) and the local stack build: the generated
 * .switchyard/deployments.ts (functions/*.ts collected, so a user adds a deployment by
 * adding a file), the edge Worker's bundle for workerd, the reference replica's and the
 * CLI's bundles for Node, and the library. Here, under src/, because the local stack
 * (src/local/stack.ts) bundles the Worker it runs, and src/ imports nothing outside it.
 *
 * SWITCHYARD_FUNCTIONS (folders, comma-separated, relative to the repository; default
 * "functions") collects the deployments of several folders instead, e.g.
 * "functions,examples/edge-inference" for the opt-in edge-inference example;
 * `npm start` reads it too (src/local/stack.ts).
 *
 * Edge models (backend kind "edge", src/edge/): only when some deployment uses
 * one, the generated module also imports the edge runtime (onnxruntime-web) and
 * each such model's weights, so a Worker without edge models carries none of it.
 * The runtime's `.wasm` and the weights are not JavaScript: in the bundle they stay
 * imports of separate modules of the Worker (CompiledWasm and Data), copied next to
 * the bundle and listed in the workerd config (src/local/workerd-config.ts);
 * `wrangler deploy` does the same through wrangler.toml's [[rules]].
 */
import { build, type BuildOptions, type Plugin } from "esbuild";
import { copyFileSync, existsSync, mkdirSync, readdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { basename, dirname, isAbsolute, join, relative, resolve } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { prefixTokenizerName, type Deployment } from "../config/deployment.ts";
import { edgeModel, edgeModelIds } from "../edge/catalog.ts";
import { FAMILY_PACKAGES, familyFiles } from "../prompt/tokenizers/index.ts";
import { HARMONY_SPECIAL_TOKENS } from "../prompt/tokenizers/harmony.ts";
import { bpeSpecOf, bpeSpecOfTiktoken, bpeText, type TiktokenJsonShape, type TokenizerJsonShape } from "../prompt/tokenizers/bpe-spec.ts";
import { mergeBpeSpecOf, mergeBpeText } from "../prompt/tokenizers/merge-bpe.ts";

const root = join(dirname(fileURLToPath(import.meta.url)), "../..");

/** The deployment files of a functions/ folder, sorted (files starting with "_" are helpers). */
export function deploymentFiles(functionsDir: string): string[] {
  return readdirSync(functionsDir)
    .filter((f) => /\.(ts|js|mjs)$/.test(f) && !f.endsWith(".d.ts") && !f.startsWith("_"))
    .sort();
}

/** One folder of deployment files, or several (their deployments together, folder by folder). */
export type FunctionsDirs = string | readonly string[];

/** The folders SWITCHYARD_FUNCTIONS names (comma-separated, relative to the repository), absolute; functions/ when unset. */
export function functionsDirsFromEnv(env: Record<string, string | undefined> = process.env): string[] {
  const dirs = (env.SWITCHYARD_FUNCTIONS ?? "").split(",").map((d) => d.trim()).filter(Boolean);
  return (dirs.length > 0 ? dirs : ["functions"]).map((d) => resolve(root, d));
}

/** The absolute paths of the deployment files of `dirs`, folder by folder, each folder's sorted. */
export function deploymentPaths(dirs: FunctionsDirs): string[] {
  return (typeof dirs === "string" ? [dirs] : dirs).flatMap((dir) => deploymentFiles(dir).map((f) => resolve(dir, f)));
}

/** The models that deployments of backend kind "edge" in `dirs` run, sorted, each once. */
export async function edgeModelsOf(dirs: FunctionsDirs): Promise<string[]> {
  const models = new Set<string>();
  for (const path of deploymentPaths(dirs)) {
    const d = ((await import(pathToFileURL(path).href)) as { default: Deployment }).default;
    if (d?.backend?.kind !== "edge") continue;
    if (!edgeModel(d.backend.model)) {
      throw new Error(`${basename(path)}: the edge runtime cannot run model "${d.backend.model}"; it runs: ${edgeModelIds.join(", ")}`);
    }
    models.add(d.backend.model);
  }
  return [...models].sort();
}

/** The model families (prompt tokenizers with files, src/prompt/tokenizers/) whose prompts deployments in `dirs` key (prefixTokenizerName), sorted, each once. */
export async function familiesOf(dirs: FunctionsDirs): Promise<string[]> {
  const families = new Set<string>();
  for (const path of deploymentPaths(dirs)) {
    const d = ((await import(pathToFileURL(path).href)) as { default: Deployment }).default;
    const name = d?.policy ? prefixTokenizerName(d) : undefined;
    if (name !== undefined && FAMILY_PACKAGES[name] !== undefined) families.add(name);
  }
  return [...families].sort();
}

/**
 * A family's BPE spec (src/prompt/tokenizers/bpe-spec.ts), as the text a Worker bundles
 * in place of its tokenizer.json: the file's path, or undefined for a family the edge's
 * BPE engine does not run (not byte-level BPE behind split regexes). Made once per
 * tokenizer.json under .switchyard/families/ (a marker file records a library family),
 * again when the package or the spec's code is newer.
 */
export function familyBpeFile(family: string): string | undefined {
  const files = familyFiles(family);
  const harmony = files.kind === "tiktoken-harmony";
  const json = createRequire(import.meta.url).resolve(harmony ? `${FAMILY_PACKAGES[family]}/encoders/${files.encoding}.json` : `${FAMILY_PACKAGES[family]}/models/tokenizer.json`);
  const dir = join(root, ".switchyard/families");
  const bpe = join(dir, `${family}.bpe.txt`);
  const library = join(dir, `${family}.library`);
  const sources = [json, ...["bpe-spec.ts", "merge-bpe.ts", ...(harmony ? ["harmony.ts"] : [])].map((f) => join(root, "src/prompt/tokenizers", f))];
  const newest = Math.max(...sources.map((f) => statSync(f).mtimeMs));
  const fresh = (f: string) => existsSync(f) && statSync(f).mtimeMs >= newest;
  if (fresh(bpe)) return bpe;
  if (fresh(library)) return undefined;
  mkdirSync(dir, { recursive: true });
  const parsed: unknown = JSON.parse(readFileSync(json, "utf8"));
  // Byte-level BPE (ranked-bpe.ts), a tiktoken encoding (gpt-oss), or SentencePiece-style BPE (merge-bpe.ts: Gemma 3).
  const ranked = harmony ? bpeSpecOfTiktoken(parsed as TiktokenJsonShape, HARMONY_SPECIAL_TOKENS) : bpeSpecOf(parsed as TokenizerJsonShape);
  const merges = ranked ? undefined : mergeBpeSpecOf(parsed as Parameters<typeof mergeBpeSpecOf>[0]);
  const text = ranked ? bpeText(ranked) : merges ? mergeBpeText(merges) : undefined;
  // Written aside, then renamed into place: builds running at once (test workers) never read half a file.
  const target = text !== undefined ? bpe : library;
  const aside = `${target}.${process.pid}.${Date.now()}.tmp`;
  writeFileSync(aside, text ?? "");
  renameSync(aside, target);
  return text !== undefined ? bpe : undefined;
}

/** Whether the edge's BPE engine runs a family (its tokenizer.json read by bpeSpecOf's rule): it then comes as its BPE spec. */
export const familyUsesBpe = (family: string): boolean => familyBpeFile(family) !== undefined;

/**
 * The lines that give a Worker `families` (src/prompt/tokenizers/hf-family.ts provideFamily):
 * the codec; for a family the BPE engine runs (byte-level BPE), the BPE spec made from its
 * tokenizer.json at build time (familyBpeFile, a Text module); for any other, its
 * tokenizer.json (a Text module, parsed on the family's first prompt). `rel` writes a
 * file's path as the module importing it must.
 */
export function familyModuleLines(families: readonly string[], rel: (path: string) => string): string[] {
  if (families.length === 0) return [];
  const bpeFiles = new Map(families.flatMap((f) => [[f, familyBpeFile(f)] as const]).filter((e): e is readonly [string, string] => e[1] !== undefined));
  // A harmony family (gpt-oss) is its BPE spec and the harmony codec: no tokenizer_config.json, no Jinja.
  const harmony = (f: string) => familyFiles(f).kind === "tiktoken-harmony";
  const hf = families.filter((f) => !harmony(f));
  return [
    "// Model families the deployments name (policy.prefix.tokenizer): see scripts/build.ts familyModuleLines.",
    `import { provideFamily } from "${rel(join(root, "src/prompt/tokenizers/hf-family.ts"))}";`,
    ...(hf.length > 0 ? [`import { familyCodec } from "${rel(join(root, "src/prompt/tokenizers/hf-codec.ts"))}";`] : []),
    ...(hf.length < families.length ? [`import { harmonyCodec } from "${rel(join(root, "src/prompt/tokenizers/harmony-codec.ts"))}";`] : []),
    ...families.flatMap((f, i) => [
      bpeFiles.has(f) ? `import f${i}Bpe from "${rel(bpeFiles.get(f)!)}";` : `import f${i}Json from "${FAMILY_PACKAGES[f]}/models/tokenizer.json";`,
      ...(harmony(f) ? [] : [`import f${i}Config from "${FAMILY_PACKAGES[f]}/models/tokenizer_config.json";`]),
    ]),
    ...families.map((f, i) =>
      harmony(f)
        ? `provideFamily(${JSON.stringify(f)}, () => harmonyCodec({ bpe: f${i}Bpe }));`
        : `provideFamily(${JSON.stringify(f)}, () => familyCodec({ ${bpeFiles.has(f) ? `bpe: f${i}Bpe` : `tokenizerJson: f${i}Json as unknown as string`}, tokenizerConfig: f${i}Config }));`,
    ),
  ];
}

/** Writes a module importing every deployment file in `dirs` (and the edge runtime when used); returns its path. */
export async function generateDeploymentsModule(dirs: FunctionsDirs = functionsDirsFromEnv(), outDir = join(root, ".switchyard")): Promise<string> {
  const files = deploymentPaths(dirs);
  const edge = await edgeModelsOf(dirs);
  const families = await familiesOf(dirs);
  mkdirSync(outDir, { recursive: true });
  const rel = (target: string) => {
    const r = relative(outDir, target).replaceAll("\\", "/");
    return r.startsWith("../") ? r : `./${r}`;
  };
  const lines = [
    `// Generated by scripts/build.ts from ${(typeof dirs === "string" ? [dirs] : dirs).map((d) => `${relative(root, d) || "."}/`).join(", ")}. Do not edit.`,
    ...(edge.length > 0 || families.length > 0 ? [`/// <reference path="${rel(join(root, "src/edge/modules.d.ts"))}" />`] : []),
    `import type { Deployment } from "${rel(join(root, "src/config/deployment.ts"))}";`,
    ...files.map((f, i) => `import d${i} from "${rel(f)}";`),
    ...(edge.length > 0
      ? [
          "// Edge models (backend kind \"edge\"): the runtime, and each model's weights as a Data module",
          "// of the Worker, imported by the model's first request in an isolate.",
          `import { registerEdgeModel } from "${rel(join(root, "src/edge/runtime.ts"))}";`,
        ]
      : []),
    ...familyModuleLines(families, rel),
    `export const deployments: Deployment[] = [${files.map((_, i) => `d${i}`).join(", ")}];`,
    ...edge.map((id) => `registerEdgeModel(${JSON.stringify(id)}, () => import(${JSON.stringify(edgeModel(id)!.weights)}));`),
    "",
  ];
  const out = join(outDir, "deployments.ts");
  writeFileSync(out, lines.join("\n"));
  return out;
}

/** A non-JavaScript module of the Worker: its name in the bundle's imports, its kind, and the file (next to the bundle). */
export interface WorkerModule {
  name: string;
  type: "wasm" | "data";
  path: string;
}

export interface WorkerBundle {
  /** The bundled Worker (its main module). */
  path: string;
  /** The other modules it imports (empty without edge models). */
  modules: WorkerModule[];
}

/**
 * Keeps `*.wasm` (CompiledWasm) and `*.onnx` (Data) imports as imports of separate
 * modules named by the file's name, resolved from the repository (npm specifiers
 * resolve from node_modules wherever the generated module is), and collects them.
 */
export function workerModulesPlugin(found: Map<string, WorkerModule>): Plugin {
  const requireFromRoot = createRequire(join(root, "package.json"));
  return {
    name: "worker-modules",
    setup(b) {
      // A model family's tokenizer.json: a string in the bundle, as wrangler.toml's Text rule makes it.
      b.onResolve({ filter: /\/models\/tokenizer\.json$/ }, (args) => ({ path: requireFromRoot.resolve(args.path), namespace: "tokenizer-text" }));
      b.onLoad({ filter: /.*/, namespace: "tokenizer-text" }, (args) => ({ contents: readFileSync(args.path, "utf8"), loader: "text" }));
      // A family's BPE spec (familyBpeFile): a string too, as wrangler.toml's Text rule for *.bpe.txt makes it.
      b.onResolve({ filter: /\.bpe\.txt$/ }, (args) => ({ path: resolve(args.resolveDir, args.path), namespace: "tokenizer-text" }));
      // Its tokenizer_config.json: JSON, resolved from the repository too (the generated module may live outside it, as a test stack's does).
      b.onResolve({ filter: /\/models\/tokenizer_config\.json$/ }, (args) => (isAbsolute(args.path) || args.path.startsWith(".") ? undefined : { path: requireFromRoot.resolve(args.path) }));
      b.onResolve({ filter: /\.(wasm|onnx)$/ }, (args) => {
        const path = args.path.startsWith(".") || isAbsolute(args.path) ? resolve(args.resolveDir, args.path) : requireFromRoot.resolve(args.path);
        const name = basename(path);
        const other = found.get(name);
        if (other && other.path !== path) return { errors: [{ text: `two Worker modules named ${name}: ${other.path} and ${path}` }] };
        found.set(name, { name, type: path.endsWith(".wasm") ? "wasm" : "data", path });
        return { path: `./${name}`, external: true };
      });
    },
  };
}

/** How a Worker is bundled for workerd (and for a bench's own Worker, bench/tokenizers/tokenizers.ts): ESM, Workers' export conditions. */
export const WORKER_BUILD_OPTIONS = {
  bundle: true,
  format: "esm",
  platform: "neutral",
  target: "es2022",
  conditions: ["workerd", "worker", "browser"],
  mainFields: ["module", "main"],
  external: ["cloudflare:*", "node:*"],
  minify: false,
  sourcemap: false,
  logLevel: "warning",
} as const satisfies BuildOptions;

/** Bundles the edge Worker for workerd with the deployments of `dirs` (default: SWITCHYARD_FUNCTIONS, else functions/); its other modules are copied next to it. */
export async function bundleWorker(outFile = join(root, "dist/worker.js"), dirs?: FunctionsDirs, morePlugins: readonly Plugin[] = []): Promise<WorkerBundle> {
  const generated = await generateDeploymentsModule(dirs, dirs ? dirname(outFile) : undefined);
  const found = new Map<string, WorkerModule>();
  await build({
    entryPoints: [join(root, "src/worker.ts")],
    outfile: outFile,
    // src/worker.ts imports .switchyard/deployments.ts; point it at this build's module.
    plugins: [
      {
        name: "deployments",
        setup(b) {
          b.onResolve({ filter: /\.switchyard\/deployments\.ts$/ }, () => ({ path: generated }));
        },
      },
      workerModulesPlugin(found),
      ...morePlugins,
    ],
    ...WORKER_BUILD_OPTIONS,
    conditions: [...WORKER_BUILD_OPTIONS.conditions],
    mainFields: [...WORKER_BUILD_OPTIONS.mainFields],
    external: [...WORKER_BUILD_OPTIONS.external],
  });
  return { path: outFile, modules: placeWorkerModules(found, outFile) };
}

/** Copies the modules workerModulesPlugin collected next to the bundle `outFile` (the names its imports use); returns them there. */
export function placeWorkerModules(found: ReadonlyMap<string, WorkerModule>, outFile: string): WorkerModule[] {
  return [...found.values()].map((m) => {
    const path = join(dirname(outFile), m.name);
    if (resolve(m.path) !== resolve(path)) copyFileSync(m.path, path);
    return { ...m, path };
  });
}

/** Bundles the reference replica for Node. */
export async function bundleReplica(outFile = join(root, "dist/replica.mjs")): Promise<void> {
  await build({
    entryPoints: [join(root, "src/replica-entry.ts")],
    outfile: outFile,
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node22",
    // onnxruntime-web finds its .wasm next to its own files, and zeromq loads its
    // prebuilt native addon from its own folder: keep both real imports.
    external: ["onnxruntime-web", "zeromq"],
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
    logLevel: "warning",
  });
}

/**
 * Bundles the CLI (src/cli/) for Node: bin/switchyard.mjs runs it with plain
 * `node`, no tsx at run time. Its `replica` command runs dist/replica.mjs, next to it.
 */
export async function bundleCli(outFile = join(root, "dist/cli.mjs")): Promise<void> {
  await build({
    entryPoints: [join(root, "src/cli/main.ts")],
    outfile: outFile,
    bundle: true,
    format: "esm",
    platform: "node",
    target: "node22",
    banner: { js: "import { createRequire as __cr } from 'node:module'; const require = __cr(import.meta.url);" },
    logLevel: "warning",
  });
}

/** The package's entry points (package.json `exports`), bundled into dist/lib/ and declared in dist/types/. */
const LIBRARY_ENTRIES = { index: "src/index.ts", "durable-objects": "src/durable-objects.ts", protocol: "src/protocol/index.ts" } as const;

/**
 * The library as a user's project imports it: compiled JavaScript (ES modules, code
 * shared by the entries in chunks) and TypeScript declarations, so a user's `tsc`
 * and bundler read built files, never our sources under their tsconfig. The
 * dependencies stay imports (the user's npm installs them); so do workerd's
 * built-in modules.
 */
export async function bundleLibrary(outDir = join(root, "dist/lib")): Promise<void> {
  const pkg = createRequire(import.meta.url)(join(root, "package.json")) as { dependencies: Record<string, string>; peerDependencies: Record<string, string> };
  await build({
    entryPoints: Object.fromEntries(Object.entries(LIBRARY_ENTRIES).map(([name, path]) => [name, join(root, path)])),
    outdir: outDir,
    bundle: true,
    splitting: true,
    format: "esm",
    platform: "neutral",
    target: "es2022",
    // hono is a peer: the user's app and the mounted edge app must share one Hono.
    external: [...Object.keys(pkg.dependencies), ...Object.keys(pkg.peerDependencies), "cloudflare:*", "node:*"],
    logLevel: "warning",
  });
  await libraryTypes();
}

/**
 * dist/types/: `tsc -p tsconfig.lib.json`, then every relative import of a declaration
 * file rewritten from ".ts" to ".js" (TypeScript 7 keeps the sources' ".ts" specifiers
 * in declarations; a user's tsconfig resolves ".js" to the ".d.ts" beside it without
 * allowImportingTsExtensions).
 */
async function libraryTypes(): Promise<void> {
  const out = join(root, "dist/types");
  const { execFileSync } = await import("node:child_process");
  const { rmSync, readFileSync } = await import("node:fs");
  rmSync(out, { recursive: true, force: true });
  execFileSync(join(root, "node_modules/.bin/tsc"), ["-p", join(root, "tsconfig.lib.json")], { cwd: root, stdio: "inherit" });
  const walk = (dir: string): string[] => readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(join(dir, e.name)) : e.name.endsWith(".d.ts") ? [join(dir, e.name)] : []));
  for (const file of walk(out)) {
    const text = readFileSync(file, "utf8");
    const rewritten = text.replace(/(from\s+|import\()(["'])(\.{1,2}\/[^"']+)\.ts\2/g, (_m, pre: string, q: string, path: string) => `${pre}${q}${path}.js${q}`);
    if (rewritten !== text) writeFileSync(file, rewritten);
  }
}
