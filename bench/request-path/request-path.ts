/**
 * Which edge source files one warm request runs through, by kind. The bench
 * bundles the Worker with every function of the repository's own files (src/,
 * functions/) instrumented to note its file when called (workerd's inspector has
 * no precise coverage: it keeps the Profiler domain to itself), starts the local
 * stack on that bundle, warms each kind up, then asks which files one more
 * request of that kind touched. Prints one line per kind, e.g. `plain: 18 edge
 * files, 8 of them the request path's own`, then the files. The targets (issue
 * 53) are judged on the request path's own files, src/worker.ts and src/proxy/: a
 * plain request ≤ 10 of them (≤ 22 edge files in all), and a streamed /v1 request ≤
 * 12, the plain path plus the features it uses (the route that reads its body,
 * migration). The pure layers below (protocol, policy, telemetry: one job per module,
 * each a seam or a rule) are the path's libraries, counted in the "all" figure only.
 *
 *   npx tsx bench/request-path/request-path.ts [--quick] [--out FILE]
 *
 * Kinds: plain (GET /hello), streamed /v1 (POST /v1/chat/completions with
 * stream: true, through the OpenAI routes) and prefix-routed (POST
 * /llm/v1/completions, the llm deployment's prefix_cache balancer). A file
 * counts when one of its functions ran for each of 5 requests of the kind (the
 * request and the waitUntil work it set off by its end): what ran beside one of
 * them by chance (a replica's report, a background refresh; the local stack's
 * Durable Objects share the isolate) is left out.
 */
import { readFileSync } from "node:fs";
import { relative, resolve } from "node:path";
import { parseArgs } from "node:util";
import { parse } from "acorn";
import { transform, type Plugin } from "esbuild";
import { LocalStack } from "../../src/local/stack.ts";
import { writeResult } from "../shared/result-file.ts";
import { countTarget } from "../shared/bench-targets.ts";
import { judgedText } from "../shared/table.ts";

const { values } = parseArgs({
  options: {
    quick: { type: "boolean", default: false },
    out: { type: "string" },
    warmup: { type: "string", default: "40" },
  },
});
/** Issue 53's targets: the request path's own files per kind, and all edge files of a plain request. */
const TARGETS = { plainOwn: 10, plainAll: 22, streamedOwn: 12 };

interface Kind {
  name: string;
  path: string;
  init: () => RequestInit;
}
const chat = (stream: boolean) => JSON.stringify({ model: "tiny-lm", stream, max_tokens: 4, messages: [{ role: "user", content: "Name three colours of the sea." }] });
const KINDS: Kind[] = [
  { name: "plain", path: "/hello", init: () => ({}) },
  { name: "streamed /v1", path: "/v1/chat/completions", init: () => ({ method: "POST", headers: { "content-type": "application/json" }, body: chat(true) }) },
  {
    name: "prefix-routed",
    path: "/llm/v1/completions",
    init: () => ({ method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify({ model: "tiny-lm", max_tokens: 4, prompt: "The sea is" }) }),
  },
];

/** Requests sampled per kind (see below). */
const SAMPLES = 5;
const ROOT = resolve(import.meta.dirname, "../..");
/** The bench's own route on the instrumented Worker: the files touched since the last ask (and a reset). */
const TOUCHED_PATH = "/__request-path/touched";

interface AstNode {
  type: string;
  start: number;
  end: number;
  body?: AstNode | AstNode[];
  expression?: boolean;
  [key: string]: unknown;
}

/**
 * One source file, compiled as esbuild would and instrumented: every function's
 * body starts by noting the file in a global set (an arrow's expression body is
 * wrapped). Module-level code and field initialisers are not noted: they run
 * when the module loads, not per request.
 */
async function instrument(path: string, file: string): Promise<string> {
  const { code } = await transform(readFileSync(path, "utf8"), { loader: "ts", format: "esm", target: "es2022", sourcefile: path });
  const ast = parse(code, { ecmaVersion: "latest", sourceType: "module" }) as unknown as AstNode;
  const note = `globalThis.__touched.add(${JSON.stringify(file)})`;
  const inserts: { at: number; text: string }[] = [];
  const visit = (node: unknown) => {
    if (Array.isArray(node)) return node.forEach(visit);
    if (!node || typeof node !== "object" || typeof (node as AstNode).type !== "string") return;
    const n = node as AstNode;
    if (n.type === "FunctionDeclaration" || n.type === "FunctionExpression" || n.type === "ArrowFunctionExpression") {
      const body = n.body as AstNode;
      if (body.type === "BlockStatement") inserts.push({ at: body.start + 1, text: `${note};` });
      else inserts.push({ at: body.start, text: `(${note}, ` }, { at: body.end, text: ")" });
    }
    for (const [key, value] of Object.entries(n)) if (key !== "type" && key !== "start" && key !== "end") visit(value);
  };
  visit(ast);
  let out = code;
  for (const i of inserts.sort((a, b) => b.at - a.at)) out = out.slice(0, i.at) + i.text + out.slice(i.at);
  return `globalThis.__touched ??= new Set();\n${out}`;
}

/**
 * The esbuild plugin that builds the instrumented Worker: the repository's own
 * files (src/, functions/) instrumented, and src/worker.ts wrapped so that
 * TOUCHED_PATH answers the set of files touched since the last ask.
 */
function touchPlugin(): Plugin {
  const entry = resolve(ROOT, "src/worker.ts");
  return {
    name: "request-path-touch",
    setup(b) {
      b.onLoad({ filter: /\.ts$/ }, async (args) => {
        const file = relative(ROOT, args.path);
        if (!file.startsWith("src/") && !file.startsWith("functions/")) return undefined;
        if (args.path === entry && args.suffix !== "?instrumented") {
          const real = JSON.stringify(`${entry}?instrumented`);
          return {
            loader: "js",
            resolveDir: ROOT,
            contents: `export * from ${real};
import worker from ${real};
export default {
  async fetch(request, env, ctx) {
    if (new URL(request.url).pathname === ${JSON.stringify(TOUCHED_PATH)}) {
      const files = [...(globalThis.__touched ?? [])].sort();
      globalThis.__touched = new Set();
      return Response.json(files);
    }
    return worker.fetch(request, env, ctx);
  },
};`,
          };
        }
        return { loader: "js", resolveDir: resolve(args.path, ".."), contents: await instrument(args.path, file) };
      });
      b.onResolve({ filter: /\?instrumented$/ }, (args) => ({ path: args.path.replace(/\?instrumented$/, ""), suffix: "?instrumented" }));
    },
  };
}

const stack = new LocalStack({ port: 0, replicas: { hello: 1, llm: 1 }, stateDir: ".switchyard/request-path", freshState: true, log: () => undefined, bundlePlugins: [touchPlugin()] });
process.on("exit", () => stack.killAll());
await stack.start();
const results: { kind: string; edgeFiles: string[] }[] = [];
try {
  const send = async (k: Kind) => {
    const res = await fetch(`${stack.workerdUrl}${k.path}`, k.init());
    await res.arrayBuffer();
    if (!res.ok) throw new Error(`${k.name}: ${k.path} answered ${res.status}`);
  };
  const touched = async () => (await (await fetch(`${stack.workerdUrl}${TOUCHED_PATH}`)).json()) as string[];
  for (const k of KINDS) {
    for (let i = 0; i < Number(values.warmup); i++) await send(k);
    // The files every one of SAMPLES requests touched: the request's own path, without what ran
    // beside it in the isolate by chance (a replica's report arriving, a background refresh).
    let every: Set<string> | undefined;
    for (let i = 0; i < SAMPLES; i++) {
      await touched();
      await send(k);
      const files = new Set(await touched());
      every = every ? new Set([...every].filter((f) => files.has(f))) : files;
    }
    results.push({ kind: k.name, edgeFiles: [...every!].sort() });
  }
} finally {
  await stack.stop();
}

/** The request path's own files: the Worker's entry and src/proxy/ (the layers below are libraries to it, as hono's files are). */
const ownFiles = (files: string[]) => files.filter((f) => f === "src/worker.ts" || f.startsWith("src/proxy/"));
for (const r of results) console.log(`${r.kind}: ${r.edgeFiles.length} edge files, ${ownFiles(r.edgeFiles).length} of them the request path's own (src/worker.ts, src/proxy/)`);
for (const r of results) console.log(`\n${r.kind}:\n${r.edgeFiles.map((f) => `  ${f}`).join("\n")}`);
const plain = results.find((r) => r.kind === "plain")!;
const streamed = results.find((r) => r.kind === "streamed /v1")!;
// 0 files means the walk saw nothing (bench-targets.ts): not judged, never MET.
const targets = [
  { name: `plain request ≤ ${TARGETS.plainOwn} request-path files`, ...countTarget(ownFiles(plain.edgeFiles).length, TARGETS.plainOwn) },
  { name: `plain request ≤ ${TARGETS.plainAll} edge files in all`, ...countTarget(plain.edgeFiles.length, TARGETS.plainAll) },
  { name: `streamed /v1 request ≤ ${TARGETS.streamedOwn} request-path files`, ...countTarget(ownFiles(streamed.edgeFiles).length, TARGETS.streamedOwn) },
];
console.log("");
for (const t of targets) console.log(`${t.name}: ${t.value} (${judgedText(t)})`);
const path = writeResult(
  "request-path",
  { targets: TARGETS, kinds: results.map((r) => ({ ...r, requestPathFiles: ownFiles(r.edgeFiles).length })), judged: targets.map((t) => ({ name: t.name, value: t.value, met: t.met })) },
  { quick: values.quick, ...(values.out ? { out: values.out } : {}) },
);
console.log(`results: ${path}`);
process.exit(0);
