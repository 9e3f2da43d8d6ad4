/**
 * The generated deployments module (scripts/build.ts) carries a model family's files
 * only where a deployment names the family, and tiktoken's WebAssembly only where a
 * named family tokenizes with it (byte-level BPE, read from its tokenizer.json by the
 * codec's own rule), so a Worker keyed by DeepSeek-V3 alone uploads no
 * tiktoken_bg.wasm. A tiktoken family comes as the BPE spec made at build time, not
 * its tokenizer.json, and the codec made from the spec gives the ids the codec made
 * from the JSON gives (test/unit/hf-tokenizers.test.ts holds that one to transformers;
 * test/workers/model-family.test.ts holds the Worker's to transformers too).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { familyBpeFile, familyUsesTiktoken, generateDeploymentsModule } from "../../scripts/build.ts";
import { familyCodec, type TokenizerConfig } from "../../src/prompt/tokenizers/hf-codec.ts";
import { FAMILY_PACKAGES } from "../../src/prompt/tokenizers/index.ts";
import { compiledBpe } from "../../src/prompt/tokenizers/node-files.ts";
import { chatCases } from "../fixtures/hf-tokenizers/conversations.ts";

const require = createRequire(import.meta.url);

const dirs: string[] = [];
afterAll(() => {
  for (const d of dirs) rmSync(d, { recursive: true, force: true });
});

/** The generated module for one deployment keyed by each of `families`. */
async function generated(families: readonly string[]): Promise<string> {
  const dir = mkdtempSync(join(tmpdir(), "switchyard-family-modules-"));
  dirs.push(dir);
  const config = JSON.stringify(resolve(import.meta.dirname, "../../src/config/deployment.ts"));
  for (const f of families) {
    writeFileSync(
      join(dir, `${f}.ts`),
      `import { defineDeployment } from ${config};
export default defineDeployment({ name: ${JSON.stringify(f)}, routePrefix: ${JSON.stringify(`/${f}`)}, backend: { kind: "external" }, policy: { balancer: "prefix_cache", prefix: { tokenizer: ${JSON.stringify(f)} } } });
`,
    );
  }
  return readFileSync(await generateDeploymentsModule(dir, join(dir, "out")), "utf8");
}

describe("the generated module's model-family imports", () => {
  it("knows from each family's tokenizer.json which ones tokenize with tiktoken", () => {
    expect(Object.keys(FAMILY_PACKAGES).sort()).toEqual(["deepseek-v3", "gemma3", "llama3", "mistral-nemo", "qwen3"]);
    expect(Object.keys(FAMILY_PACKAGES).filter(familyUsesTiktoken).sort()).toEqual(["llama3", "mistral-nemo", "qwen3"]);
  }, 120_000); // reads five tokenizer.json files (up to 33 MB): ~3 s idle, 15 s under stress

  it("imports tiktoken's .wasm only for a family that uses it, and passes it to that family's codec only", async () => {
    const library = await generated(["deepseek-v3"]);
    expect(library).not.toMatch(/tiktoken_bg\.wasm|bpeWasm/);
    expect(library).toMatch(/provideFamily\("deepseek-v3", \(\) => familyCodec\(\{ tokenizerJson: f0Json as unknown as string, tokenizerConfig: f0Config \}\)\)/);

    const mixed = await generated(["deepseek-v3", "qwen3"]);
    expect(mixed).toContain(`import bpeWasm from "tiktoken/lite/tiktoken_bg.wasm";`);
    expect(mixed).toMatch(/provideFamily\("deepseek-v3", \(\) => familyCodec\(\{ tokenizerJson: f0Json as unknown as string, tokenizerConfig: f0Config \}\)\)/);
    expect(mixed).toContain(`import f0Json from "${FAMILY_PACKAGES["deepseek-v3"]}/models/tokenizer.json";`);
    // Qwen3 comes as its BPE spec, with tiktoken's module: no tokenizer.json.
    expect(mixed).toMatch(/provideFamily\("qwen3", \(\) => familyCodec\(\{ bpe: f1Bpe, bpeWasm, tokenizerConfig: f1Config \}\)\)/);
    expect(mixed).toMatch(/import f1Bpe from "[^"]*\/families\/qwen3\.bpe\.txt";/);
    expect(mixed).not.toContain(`${FAMILY_PACKAGES.qwen3}/models/tokenizer.json`);

    expect(await generated([])).not.toMatch(/tiktoken_bg\.wasm|bpeWasm|provideFamily/);
  });

  // CPU-bound (two codecs of a 150k-word vocabulary per family, 40+ chats): ~2 s a family
  // idle, 10× that beside a CI run and busy loops, so the bound is generous.
  const wasm = compiledBpe();
  // Plain-text messages (the codec takes them as vLLM hands them to the template).
  const cases = chatCases(80, 34, { tools: false }).filter((c) => c.messages.every((m) => typeof m.content === "string"));
  it.each(["qwen3", "llama3", "mistral-nemo"])("makes %s's codec from the BPE spec give the ids the codec from tokenizer.json gives, at a quarter of the bytes", (family) => {
    expect(cases.length).toBeGreaterThan(40);
    const pkg = FAMILY_PACKAGES[family]!;
    const tokenizerJson = readFileSync(require.resolve(`${pkg}/models/tokenizer.json`), "utf8");
    const tokenizerConfig = JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer_config.json`), "utf8")) as TokenizerConfig;
    const bpe = readFileSync(familyBpeFile(family)!, "utf8");
    expect(bpe.length).toBeLessThan(tokenizerJson.length / 3);
    const fromJson = familyCodec({ tokenizerJson, tokenizerConfig, bpeWasm: wasm });
    const fromSpec = familyCodec({ bpe, tokenizerConfig, bpeWasm: wasm });
    expect([fromJson.engine, fromSpec.engine]).toEqual(["tiktoken", "tiktoken"]);
    for (const c of cases) {
      expect(Array.from(fromSpec.chat(c.messages, undefined, undefined, 1 << 20))).toEqual(Array.from(fromJson.chat(c.messages, undefined, undefined, 1 << 20)));
      const text = String(c.messages.at(-1)!.content);
      expect(Array.from(fromSpec.text(text, 1 << 20))).toEqual(Array.from(fromJson.text(text, 1 << 20)));
    }
    // The spec is the edge's: it keys prompts and never decodes.
    expect(() => fromSpec.decode([1, 2])).toThrow(/tokenizer\.json/);
  }, 300_000);
});
