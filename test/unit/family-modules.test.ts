/**
 * The generated deployments module (scripts/build.ts) carries a model family's files
 * only where a deployment names the family. A family the edge's BPE engine runs
 * (byte-level BPE, read from its tokenizer.json by the codec's own rule) comes as the
 * BPE spec made at build time, not its tokenizer.json, and the codec made from the
 * spec gives the ids the codec made from the JSON gives (test/unit/hf-tokenizers.test.ts
 * holds that one to transformers; test/workers/model-family.test.ts holds the Worker's
 * to transformers too).
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createRequire } from "node:module";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { familyBpeFile, familyUsesBpe, generateDeploymentsModule } from "../../src/local/build.ts";
import { familyCodec, type TokenizerConfig } from "../../src/prompt/tokenizers/hf-codec.ts";
import { FAMILY_PACKAGES } from "../../src/prompt/tokenizers/index.ts";
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
  it("knows from each family's tokenizer.json which ones the BPE engine runs", () => {
    expect(Object.keys(FAMILY_PACKAGES).sort()).toEqual(["deepseek-v3", "gemma3", "gpt-oss", "llama3", "mistral-nemo", "qwen3"]);
    expect(Object.keys(FAMILY_PACKAGES).filter(familyUsesBpe).sort()).toEqual(["deepseek-v3", "gemma3", "gpt-oss", "llama3", "mistral-nemo", "qwen3"]);
  }, 120_000); // reads five tokenizer.json files (up to 33 MB): ~3 s idle, 15 s under stress

  it("imports a BPE family's spec, never its tokenizer.json, and no tokenizer's WebAssembly", async () => {
    const mixed = await generated(["deepseek-v3", "qwen3"]);
    expect(mixed).toMatch(/provideFamily\("deepseek-v3", \(\) => familyCodec\(\{ bpe: f0Bpe, tokenizerConfig: f0Config \}\)\)/);
    expect(mixed).toMatch(/provideFamily\("qwen3", \(\) => familyCodec\(\{ bpe: f1Bpe, tokenizerConfig: f1Config \}\)\)/);
    expect(mixed).toMatch(/import f0Bpe from "[^"]*\/families\/deepseek-v3\.bpe\.txt";/);
    expect(mixed).toMatch(/import f1Bpe from "[^"]*\/families\/qwen3\.bpe\.txt";/);
    expect(mixed).not.toMatch(/tokenizer\.json"|\.wasm"/);

    expect(await generated([])).not.toMatch(/provideFamily/);
  });

  it("imports gpt-oss as its BPE spec (o200k_base's ranks and harmony's special tokens) and the harmony codec: no tokenizer_config.json, no Jinja", async () => {
    const mod = await generated(["gpt-oss"]);
    expect(mod).toMatch(/import f0Bpe from "[^"]*\/families\/gpt-oss\.bpe\.txt";/);
    expect(mod).toMatch(/provideFamily\("gpt-oss", \(\) => harmonyCodec\(\{ bpe: f0Bpe \}\)\);/);
    expect(mod).not.toMatch(/tokenizer_config|hf-codec|familyCodec/);
    const spec = readFileSync(familyBpeFile("gpt-oss")!, "utf8");
    expect(spec.split("\n")).toHaveLength(1 + 199_998);
    expect(spec.length).toBeLessThan(3_000_000);
  });

  // CPU-bound (two codecs of a 150k-word vocabulary per family, 40+ chats): ~2 s a family
  // idle, 10× that beside a CI run and busy loops, so the bound is generous.
  // Plain-text messages (the codec takes them as vLLM hands them to the template).
  const cases = chatCases(80, 34, { tools: false }).filter((c) => c.messages.every((m) => typeof m.content === "string"));
  it.each(["qwen3", "llama3", "mistral-nemo", "deepseek-v3", "gemma3"])("makes %s's codec from the BPE spec give the ids the codec from tokenizer.json gives, at a quarter of the bytes", (family) => {
    expect(cases.length).toBeGreaterThan(40);
    const pkg = FAMILY_PACKAGES[family]!;
    const tokenizerJson = readFileSync(require.resolve(`${pkg}/models/tokenizer.json`), "utf8");
    const tokenizerConfig = JSON.parse(readFileSync(require.resolve(`${pkg}/models/tokenizer_config.json`), "utf8")) as TokenizerConfig;
    const bpe = readFileSync(familyBpeFile(family)!, "utf8");
    expect(bpe.length).toBeLessThan(tokenizerJson.length / 3);
    const fromJson = familyCodec({ tokenizerJson, tokenizerConfig });
    const fromSpec = familyCodec({ bpe, tokenizerConfig });
    expect([fromJson.engine, fromSpec.engine]).toEqual(["bpe", "bpe"]);
    for (const c of cases) {
      expect(Array.from(fromSpec.chat(c.messages, undefined, {}, 1 << 20))).toEqual(Array.from(fromJson.chat(c.messages, undefined, {}, 1 << 20)));
      const text = String(c.messages.at(-1)!.content);
      expect(Array.from(fromSpec.text(text, 1 << 20))).toEqual(Array.from(fromJson.text(text, 1 << 20)));
    }
    // The spec is the edge's: it keys prompts and never decodes.
    expect(() => fromSpec.decode([1, 2])).toThrow(/tokenizer\.json/);
  }, 300_000);
});
