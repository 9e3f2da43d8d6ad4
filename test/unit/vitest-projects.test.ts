// The unit project shares one module graph between files (isolate: false), so a file that
// replaces a module with vi.mock must run in the isolated unit-mocks project instead; so
// must one that changes a module's process-wide state, which says so in its header
// ("a module graph of its own").
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";

const root = join(import.meta.dirname, "../..");
const config = readFileSync(join(root, "vitest.config.ts"), "utf8");
const listed = [...(/MOCKING_UNIT_FILES = \[([^\]]*)\]/.exec(config)?.[1] ?? "").matchAll(/"([^"]+)"/g)].map((m) => m[1]);

describe("vitest projects", () => {
  it("every unit file that calls vi.mock, or says it needs a module graph of its own, is in the isolated project, and only those", () => {
    const mocking = readdirSync(join(root, "test/unit"))
      .filter((f) => f.endsWith(".test.ts") && f !== "vitest-projects.test.ts")
      .filter((f) => {
        const text = readFileSync(join(root, "test/unit", f), "utf8");
        return /\bvi\.(mock|doMock)\(/.test(text) || /a module graph of its own/.test(text);
      })
      .map((f) => `test/unit/${f}`)
      .sort();
    expect(listed.sort()).toEqual(mocking);
  });
});
