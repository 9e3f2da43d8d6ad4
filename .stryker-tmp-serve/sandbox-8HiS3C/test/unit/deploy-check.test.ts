// @ts-nocheck
// scripts/deploy-check.ts reads the upload size from wrangler's own report line.
import { describe, expect, it } from "vitest";
import { parseTotalUpload, staleSizes } from "../../scripts/deploy-check.ts";

describe("deploy check", () => {
  it("reads wrangler's Total Upload line, coloured or not", () => {
    expect(parseTotalUpload("x\nTotal Upload: 17364.00 KiB / gzip: 5742.44 KiB\ny")).toEqual({ size: 17364 * 1024, gzip: Math.round(5742.44 * 1024) });
    expect(parseTotalUpload("Total Upload: \x1b[32m1065.25 KiB / gzip: 202.50 KiB\x1b[39m")).toEqual({ size: Math.round(1065.25 * 1024), gzip: Math.round(202.5 * 1024) });
    expect(parseTotalUpload("--dry-run: exiting now.")).toBeUndefined();
  });

  it("holds the docs' stated upload sizes to the measured ones (5 %)", () => {
    const measured = { default: { size: 1137 * 1024, gzip: 222 * 1024, modules: [] }, edge: { size: 17436 * 1024, gzip: 5763 * 1024, modules: [] } };
    const doc = (text: string) => [{ file: "README.md", text }];
    expect(staleSizes(doc("a <!-- size:default -->1,137 KiB, 222 KiB gzipped<!-- /size --> b <!-- size:edge -->17.0 MiB (5.6 MiB\ngzipped)<!-- /size -->"), measured)).toEqual([]);
    // The figure the README stated before this check: 1.0 MiB for 1,137 KiB is 10 % off.
    expect(staleSizes(doc("<!-- size:default -->1.0 MiB, 0.2 MiB gzipped<!-- /size -->"), measured)).toEqual([
      'README.md: states "1.0 MiB, 0.2 MiB gzipped" (size:default), measured 1,137 KiB (222 KiB gzipped)',
    ]);
    expect(staleSizes(doc("<!-- size:default -->1,137 KiB<!-- /size -->"), measured)[0]).toMatch(/does not state a size and a gzipped size/);
    expect(staleSizes(doc("<!-- size:tiny -->1 KiB, 1 KiB<!-- /size -->"), measured)[0]).toMatch(/is not a measured upload/);
  });
});
