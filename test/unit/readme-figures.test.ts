// The README's and docs' benchmark figures are rendered from the committed runs in
// bench/published/ (bench/shared/readme-figures.ts): a figure edited by hand, or a run
// published without re-rendering, fails here.
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { FILES, FIGURES, blockNames, range, renderBlocks } from "../../bench/shared/readme-figures.ts";
import { publishedRuns } from "../../bench/shared/published.ts";
import { PUBLISHED_DIR } from "../../bench/shared/result-file.ts";

const root = join(import.meta.dirname, "../..");

describe("figures rendered from bench/published/", () => {
  it.each(FILES)("%s states exactly what its published runs say", (file) => {
    const text = readFileSync(join(root, file), "utf8");
    expect(renderBlocks(text), `${file}: run npx tsx bench/shared/readme-figures.ts`).toBe(text);
  });

  it("the README's benchmark figures are blocks, not prose", () => {
    const names = blockNames(readFileSync(join(root, "README.md"), "utf8"));
    for (const name of ["ray-intro", "seed", "state-cost", "prefix-cache", "streaming", "affinity", "miniflare"]) expect(names).toContain(name);
    const scaling = blockNames(readFileSync(join(root, "docs/scaling.md"), "utf8"));
    for (const name of ["state-cost-calls", "state-cost-cpu", "scaling-sim", "state-plane", "seed-proxies"]) expect(scaling).toContain(name);
  });

  it("every published run is a full run of a committed tree", () => {
    const scenarios = readdirSync(PUBLISHED_DIR);
    expect(scenarios.length).toBeGreaterThan(0);
    for (const name of scenarios) {
      const runs = publishedRuns(name);
      expect(runs.length, name).toBeGreaterThan(0);
      for (const run of runs) {
        expect(run.meta.quick, `${name} ${run.meta.date}`).toBe(false);
        expect(run.meta.dirty, `${name} ${run.meta.date}`).toBe(false);
        expect(run.meta.commit).toMatch(/^[0-9a-f]{7,}$/);
      }
    }
  });

  it("states ranges, not the best run, and says when nothing was published", () => {
    expect(range([3.14, 2.5, 2.9], 1)).toBe("2.5–3.1");
    expect(range([7, 7], 0, " %")).toBe("7 %");
    expect(range([Number.NaN])).toBe("not measured");
    expect(range([-0.08, 0.57], 2)).toBe("−0.08 to 0.57");
    expect(FIGURES.seed!(() => [])).toMatch(/No published run of `bench\/seed\.ts`/);
    expect(() => renderBlocks("<!-- figures:nope -->\nx\n<!-- /figures -->")).toThrow(/unknown figure block "nope"/);
    // An empty block is rendered alone: it never reaches through the text to the next block's end.
    const two = "<!-- figures:nope -->\n<!-- /figures -->\nkept\n<!-- figures:seed -->\nold\n<!-- /figures -->";
    expect(blockNames(two)).toEqual(["nope", "seed"]);
    expect(renderBlocks(two.replace("nope", "seed"), () => [])).toContain("kept");
  });
});
