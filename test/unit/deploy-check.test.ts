// scripts/deploy-check.ts reads the upload size from wrangler's own report line.
import { describe, expect, it } from "vitest";
import { parseTotalUpload } from "../../scripts/deploy-check.ts";

describe("deploy check", () => {
  it("reads wrangler's Total Upload line, coloured or not", () => {
    expect(parseTotalUpload("x\nTotal Upload: 17364.00 KiB / gzip: 5742.44 KiB\ny")).toEqual({ size: 17364 * 1024, gzip: Math.round(5742.44 * 1024) });
    expect(parseTotalUpload("Total Upload: \x1b[32m1065.25 KiB / gzip: 202.50 KiB\x1b[39m")).toEqual({ size: Math.round(1065.25 * 1024), gzip: Math.round(202.5 * 1024) });
    expect(parseTotalUpload("--dry-run: exiting now.")).toBeUndefined();
  });
});
