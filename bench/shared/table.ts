/**
 * The one markdown table printer of the benches, and the one way they word a
 * target's verdict. Every bench prints its results as markdown (pasted into
 * docs and PRs as is), so the tables must look alike: `| a | b |` cells, a
 * `|---|---:|` separator, and MET / MISS / not judged for targets.
 */

/**
 * The lines of a markdown table: header, separator, then one line per row.
 * `align` has one letter per column, "l" (left) or "r" (right); by default the
 * first column (a name) is left and the rest (figures) right, the common case.
 * A row whose length differs from the header's throws: markdown would render
 * it shifted or cut, silently, so it is a bug in the bench, never data.
 */
export function markdownTable(header: readonly string[], rows: readonly (readonly (string | number)[])[], align?: string): string[] {
  const letters = align ?? header.map((_, i) => (i === 0 ? "l" : "r")).join("");
  if (letters.length !== header.length || /[^lr]/.test(letters)) {
    throw new Error(`markdownTable: align "${letters}" must have one "l" or "r" per column (${header.length})`);
  }
  const separator = [...letters].map((a) => (a === "r" ? "---:" : "---"));
  // An empty cell prints as "| |", as the hand-written tables had it.
  const line = (cells: readonly (string | number)[]) => `|${cells.map((c) => (c === "" ? " " : ` ${String(c)} `)).join("|")}|`;
  return [
    line(header),
    `|${separator.join("|")}|`,
    ...rows.map((row, i) => {
      if (row.length !== header.length) {
        throw new Error(`markdownTable: row ${i} has ${row.length} cells, the header ${header.length}: ${line(row)}`);
      }
      return line(row);
    }),
  ];
}

/** A target's verdict; null or undefined when the run could not judge it (an arm missing), said so rather than guessed. */
export function verdict(met: boolean | null | undefined): string {
  if (met === null || met === undefined) return "not judged";
  return met ? "MET" : "MISS";
}

/** A judgement's verdict, with why it was not judged. */
export function judgedText(j: { met: boolean | null; why?: string }): string {
  return j.met === null && j.why ? `not judged: ${j.why}` : verdict(j.met);
}
