// @ts-nocheck
// The cached virtualenv: a package set that installed once is found again without pip,
// and asking for another set does not find (or remove) it.
import { mkdirSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { createHash } from "node:crypto";
import { afterAll, describe, expect, it } from "vitest";
import { cachedPythonEnv } from "../../scripts/python-env.ts";

const root = join(import.meta.dirname, "../..");
const name = `test-${process.pid}`;
const dir = join(root, ".switchyard", `py-${name}`);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe("cachedPythonEnv", () => {
  it("finds the set the marker names, and only that set", () => {
    expect(cachedPythonEnv(name, ["a==1"])).toBeUndefined();
    mkdirSync(join(dir, "bin"), { recursive: true });
    writeFileSync(join(dir, "bin/python"), "");
    writeFileSync(join(dir, "switchyard-packages"), createHash("sha256").update(["b==2", "c"].join("\n")).digest("hex").slice(0, 16));
    expect(cachedPythonEnv(name, ["b==2", "c"])).toBe(join(dir, "bin/python"));
    expect(cachedPythonEnv(name, ["a==1"])).toBeUndefined();
    // Asking leaves the environment in place for the set that made it.
    expect(cachedPythonEnv(name, ["b==2", "c"])).toBe(join(dir, "bin/python"));
  });
});
