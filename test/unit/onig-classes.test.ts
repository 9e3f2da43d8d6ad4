/**
 * The Unicode classes the edge's BPE engine spells out (src/prompt/tokenizers/onig-classes.ts,
 * written by scripts/unicode-classes.ts) are still what Hugging Face's Rust tokenizers
 * match, asked of the library in the tokenizer tests' virtualenv (issue 55); and the
 * regex rewrite puts them where the class was.
 */
import { describe, expect, it } from "vitest";
import { libraryClasses, packRanges, runtimeDiffers } from "../../scripts/unicode-classes.ts";
import { ONIG_CLASSES, ONIG_DIFFERS } from "../../src/prompt/tokenizers/onig-classes.ts";
import { jsRegex, onigClasses } from "../../src/prompt/tokenizers/ranked-bpe.ts";

describe("the Unicode classes of the split regexes", () => {
  it("are, class by class, the code points the Rust library matches", async () => {
    const lib = await libraryClasses();
    expect(Object.keys(ONIG_CLASSES).sort()).toEqual(Object.keys(lib.classes).sort());
    for (const [name, ranges] of Object.entries(lib.classes)) expect(ONIG_CLASSES[name], name).toBe(packRanges(ranges));
    // And where this runtime disagrees with them is what the engine checks a text for before it uses the runtime's own classes.
    expect(ONIG_DIFFERS).toBe(packRanges(runtimeDiffers(lib.classes)));
  }, 600_000);

  it("differ from this runtime's own where the Unicode versions do (so the table is what decides)", () => {
    const letters = jsRegex("\\p{L}");
    // U+323B0 is a letter in Unicode 17 (V8 here), not in the library's tables; U+0085 is
    // Oniguruma's whitespace, not JavaScript's; U+FEFF the other way round.
    expect(/\p{L}/u.test("\u{323B0}")).toBe(true);
    expect(letters.test("\u{323B0}")).toBe(false);
    expect(jsRegex("\\s").test("\u0085")).toBe(true);
    expect(/\s/u.test("\u0085")).toBe(false);
    expect(jsRegex("\\s").test("\ufeff")).toBe(false);
    expect(jsRegex("\\S").test("\ufeff")).toBe(true);
  });

  it("are spelt inside brackets as ranges and outside as a class of their own, escapes kept", () => {
    const spelt = onigClasses("[^\\r\\n\\p{N}]?\\p{N}+|\\s+(?!\\S)|[\\[\\]\\\\]");
    expect(spelt.startsWith("[^\\r\\n\\u{30}-\\u{39}")).toBe(true);
    expect(spelt).toContain("]?[\\u{30}-\\u{39}");
    expect(spelt).toContain("(?![^\\u{9}-\\u{d},\\u{20}".replace(",", ""));
    expect(spelt.endsWith("|[\\[\\]\\\\]")).toBe(true);
    expect(() => onigClasses("[^\\S]")).toThrow(/negated/);
    expect(() => onigClasses("\\p{Greek}")).toThrow(/no table/);
  });

  it("spell case-insensitive groups out as Oniguruma folds them, and keep the group's match before a large class", () => {
    const re = jsRegex("(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+");
    const pieces = (t: string) => Array.from(t.matchAll(re), (m) => m[0]);
    // V8 with the modifier group kept matched "'LLe" whole (found by the property test).
    expect(pieces("I'LLe")).toEqual(["I", "'LL", "e"]);
    expect(pieces("x'\u017fy")).toEqual(["x", "'\u017f", "y"]);
    expect(pieces("x'Dy")).toEqual(["x", "'D", "y"]);
  });
});
