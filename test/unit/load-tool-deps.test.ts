/**
 * bench/shared/load-tool-deps.ts decides what a benchmark installs before it starts: a
 * fresh machine without wrk got every wrk row empty ("wrk exited ENOENT").
 * Checked against fake PATHs (temp directories with or without executables).
 */
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, describe, expect, it } from "vitest";
import { DEBIAN_PACKAGE, findOnPath, planLoadTools, SBIN_DIRS, withSbinDirs } from "../../bench/shared/load-tool-deps.ts";

const dir = mkdtempSync(join(tmpdir(), "sy-load-tools-"));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
function bin(sub: string, names: string[], mode = 0o755): string {
  const d = join(dir, sub);
  mkdirSync(d, { recursive: true });
  for (const n of names) {
    writeFileSync(join(d, n), "#!/bin/sh\n");
    chmodSync(join(d, n), mode);
  }
  return d;
}
const withAb = bin("ab-only", ["ab", "nginx"]);
const withWrk = bin("wrk", ["wrk"]);
const notExec = bin("not-exec", ["wrk"], 0o644);
const root = { isRoot: true, hasAptGet: true };

describe("findOnPath", () => {
  it("finds an executable in any PATH directory, skips non-executable files and empty entries", () => {
    expect(findOnPath("wrk", `${withAb}::${withWrk}`)).toBe(join(withWrk, "wrk"));
    expect(findOnPath("wrk", notExec)).toBeUndefined();
    expect(findOnPath("wrk", undefined)).toBeUndefined();
  });
});

describe("planLoadTools", () => {
  it("installs nothing when every tool is on PATH", () => {
    expect(planLoadTools(["wrk", "ab"], { path: `${withAb}:${withWrk}`, ...root })).toEqual({ missing: [], apt: [] });
  });
  it("a PATH without wrk: as root with apt-get, installs Debian's wrk package", () => {
    expect(planLoadTools(["wrk", "ab"], { path: withAb, ...root })).toEqual({ missing: ["wrk"], apt: ["wrk"] });
  });
  it("maps ab to apache2-utils and installs each package once", () => {
    expect(planLoadTools(["wrk", "ab"], { path: "", ...root })).toEqual({ missing: ["wrk", "ab"], apt: ["wrk", "apache2-utils"] });
  });
  it("a non-executable wrk counts as missing", () => {
    expect(planLoadTools(["wrk"], { path: notExec, ...root }).apt).toEqual(["wrk"]);
  });
  it("fails clearly, naming the command, when it is not root or has no apt-get", () => {
    const notRoot = planLoadTools(["wrk"], { path: withAb, isRoot: false, hasAptGet: true });
    expect(notRoot.apt).toEqual([]);
    expect(notRoot.error).toMatch(/wrk not found on PATH.*sudo apt-get install wrk.*not root/);
    expect(planLoadTools(["wrk"], { path: withAb, isRoot: true, hasAptGet: false }).error).toMatch(/apt-get is not available/);
  });
  it("installs Debian's haproxy package for the seed's HAProxy arm", () => {
    expect(DEBIAN_PACKAGE.haproxy).toBe("haproxy");
    expect(planLoadTools(["haproxy"], { path: withAb, ...root })).toEqual({ missing: ["haproxy"], apt: ["haproxy"] });
  });
  it("refuses a tool it has no package for", () => {
    expect(planLoadTools(["hey"], { path: withAb, ...root }).error).toMatch(/no known package for hey/);
  });
});

describe("withSbinDirs", () => {
  it("appends the sbin directories a PATH lacks, after its own, once each", () => {
    expect(withSbinDirs("/usr/bin:/bin")).toBe(["/usr/bin", "/bin", ...SBIN_DIRS].join(":"));
    expect(withSbinDirs("/usr/sbin:/usr/bin").split(":").filter((d) => d === "/usr/sbin")).toHaveLength(1);
    expect(withSbinDirs(undefined)).toBe(SBIN_DIRS.join(":"));
  });
  it("finds a daemon installed in sbin when PATH has only bin directories", () => {
    const sbin = bin("sbin", ["haproxy"]);
    expect(findOnPath("haproxy", withAb)).toBeUndefined();
    expect(findOnPath("haproxy", `${withAb}:${sbin}`)).toBe(join(sbin, "haproxy"));
  });
});
