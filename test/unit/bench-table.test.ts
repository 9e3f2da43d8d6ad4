/** The benches' one markdown table printer (bench/shared/table.ts): the lines it prints, its alignment, and the verdict words. */
import { describe, expect, it } from "vitest";
import { markdownTable, verdict } from "../../bench/shared/table.ts";

describe("markdownTable", () => {
  it("prints the header, the separator, then one line per row", () => {
    expect(
      markdownTable(
        ["arm", "req/s", "p99 ms"],
        [
          ["direct", 1200, "4.10"],
          ["Switchyard", 980, "5.20"],
        ],
      ),
    ).toEqual(["| arm | req/s | p99 ms |", "|---|---:|---:|", "| direct | 1200 | 4.10 |", "| Switchyard | 980 | 5.20 |"]);
  });

  it("aligns the first column left and the rest right by default", () => {
    expect(markdownTable(["a", "b", "c", "d"], [])[1]).toBe("|---|---:|---:|---:|");
  });

  it("takes one letter per column for the alignment", () => {
    expect(markdownTable(["a", "b", "c", "d"], [], "lrlr")[1]).toBe("|---|---:|---|---:|");
    expect(markdownTable(["self %", "function"], [], "rl")[1]).toBe("|---:|---|");
  });

  it("prints numbers with String() and an empty cell as a single space", () => {
    expect(markdownTable(["target", "measured", ""], [["x", 0.5, ""]], "lll")).toEqual(["| target | measured | |", "|---|---|---|", "| x | 0.5 | |"]);
  });

  it("prints only the header and separator for no rows", () => {
    expect(markdownTable(["a", "b"], [])).toEqual(["| a | b |", "|---|---:|"]);
  });

  it("throws on a row whose length differs from the header's", () => {
    expect(() => markdownTable(["a", "b"], [["1", "2"], ["only one"]])).toThrow(/row 1 has 1 cells, the header 2/);
    expect(() => markdownTable(["a", "b"], [["1", "2", "3"]])).toThrow(Error);
  });

  it("throws on an alignment that does not fit the columns", () => {
    expect(() => markdownTable(["a", "b"], [], "l")).toThrow(/align/);
    expect(() => markdownTable(["a", "b"], [], "lc")).toThrow(/align/);
  });
});

describe("verdict", () => {
  it("says MET, MISS, or not judged", () => {
    expect(verdict(true)).toBe("MET");
    expect(verdict(false)).toBe("MISS");
    expect(verdict(null)).toBe("not judged");
    expect(verdict(undefined)).toBe("not judged");
  });
});
