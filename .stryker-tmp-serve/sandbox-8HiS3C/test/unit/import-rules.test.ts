/**
 * The import rules of src/ (.dependency-cruiser.cjs): no circles, every file in
 * a layer, layers pointing down. dependency-cruiser checks src/ here, in
 * `npm test`; the fixture under test/fixtures/layers/ holds one of each
 * violation, so a rule that stopped firing fails too.
 */
// @ts-nocheck

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

async function violations(cwd: string): Promise<Violation[]> {
  const { stdout } = await promisify(execFile)(DEPCRUISE, ["src", "--config", `${ROOT}.dependency-cruiser.cjs`, "--output-type", "json"], {
    cwd,
    maxBuffer: 64 * 1024 * 1024,
  }).catch((err: { stdout?: string }) => ({ stdout: err.stdout ?? "" }));
  return (JSON.parse(stdout) as { summary: { violations: Violation[] } }).summary.violations;
}

describe("import rules", () => {
  it("src/ has no import circle, no file outside a layer, and no import up the layers", async () => {
    const found = await violations(ROOT);
    expect(found.map((v) => `${v.rule.name}: ${v.from} → ${v.to}${v.cycle ? ` (${v.cycle.map((c) => c.name).join(" → ")})` : ""}`)).toEqual([]);
  }, 60_000);

  it("refuse a circle, an unlayered file and a back-edge (test/fixtures/layers)", async () => {
    const found = await violations(`${ROOT}test/fixtures/layers`);
    expect(new Set(found.map((v) => v.rule.name))).toEqual(new Set(["no-circular", "no-unlayered", "layer-protocol+seeded-random.ts"]));
    expect(found.find((v) => v.rule.name.startsWith("layer-"))).toMatchObject({ from: "src/protocol/wire.ts", to: "src/policy/choice.ts" });
  }, 60_000);
});
