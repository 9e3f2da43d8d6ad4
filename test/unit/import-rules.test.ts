/**
 * The import rules of the repository (.dependency-cruiser.cjs): no circles, every file
 * of src/ in a layer, layers pointing down, src/ importing nothing from scripts/, bench/,
 * test/ or functions/. dependency-cruiser checks all of them here, in `npm test`; the
 * fixture under test/fixtures/layers/ holds one of each violation, so a rule that
 * stopped firing fails too.
 */
import { execFile } from "node:child_process";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { describe, expect, it } from "vitest";

const ROOT = fileURLToPath(new URL("../..", import.meta.url));
const DEPCRUISE = `${ROOT}node_modules/.bin/depcruise`;

interface Violation {
  rule: { name: string };
  from: string;
  to: string;
  cycle?: { name: string }[];
}

async function violations(cwd: string, dirs: string[]): Promise<Violation[]> {
  const { stdout } = await promisify(execFile)(DEPCRUISE, [...dirs, "--config", `${ROOT}.dependency-cruiser.cjs`, "--output-type", "json"], {
    cwd,
    maxBuffer: 64 * 1024 * 1024,
  }).catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? "" }));
  return (JSON.parse(stdout) as { summary: { violations: Violation[] } }).summary.violations;
}

describe("import rules", () => {
  it("the repository has no import circle, src/ no file outside a layer, no import up the layers and none from outside src/", async () => {
    const found = await violations(ROOT, ["src", "scripts", "bench", "functions", "test/fixtures"]);
    expect(found.map((v) => `${v.rule.name}: ${v.from} → ${v.to}${v.cycle ? ` (${v.cycle.map((c) => c.name).join(" → ")})` : ""}`)).toEqual([]);
  }, 60_000);

  it("refuse a circle, unlayered files (importing something, imported, alone), a back-edge and an import from bench/ (test/fixtures/layers)", async () => {
    const found = await violations(`${ROOT}test/fixtures/layers`, ["src", "bench"]);
    expect(new Set(found.map((v) => v.rule.name))).toEqual(
      new Set(["no-circular", "no-unlayered", "no-unlayered-imported", "no-unlayered-orphan", "src-self-contained", "layer-protocol+seeded-random.ts+types"]),
    );
    expect(found.find((v) => v.rule.name === "no-unlayered-orphan")).toMatchObject({ from: "src/lonely.d.ts" });
    expect(found.find((v) => v.rule.name.startsWith("layer-"))).toMatchObject({ from: "src/protocol/wire.ts", to: "src/policy/choice.ts" });
  }, 60_000);
});
