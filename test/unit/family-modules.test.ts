/**
 * The generated deployments module (scripts/build.ts) carries a model family's files
 * only where a deployment names the family, and tiktoken's WebAssembly only where a
 * named family tokenizes with it (byte-level BPE, read from its tokenizer.json by the
 * codec's own rule), so a Worker keyed by DeepSeek-V3 alone uploads no
 * tiktoken_bg.wasm.
 */
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { familyUsesTiktoken, generateDeploymentsModule } from "../../scripts/build.ts";
import { FAMILY_PACKAGES } from "../../src/prompt/tokenizers/index.ts";

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
  });

  it("imports tiktoken's .wasm only for a family that uses it, and passes it to that family's codec only", async () => {
    const library = await generated(["deepseek-v3"]);
    expect(library).not.toMatch(/tiktoken_bg\.wasm|bpeWasm/);
    expect(library).toMatch(/provideFamily\("deepseek-v3", \(\) => familyCodec\(\{ tokenizerJson: f0Json as unknown as string, tokenizerConfig: f0Config \}\)\)/);

    const mixed = await generated(["deepseek-v3", "qwen3"]);
    expect(mixed).toContain(`import bpeWasm from "tiktoken/lite/tiktoken_bg.wasm";`);
    expect(mixed).toMatch(/provideFamily\("deepseek-v3", [^\n]*tokenizerConfig: f0Config \}\)\)/);
    expect(mixed).toMatch(/provideFamily\("qwen3", [^\n]*tokenizerConfig: f1Config, bpeWasm \}\)\)/);

    expect(await generated([])).not.toMatch(/tiktoken_bg\.wasm|bpeWasm|provideFamily/);
  });
});
