/**
 * Plain aligned tables for a terminal: columns separated by two spaces, no
 * trailing spaces, colour (ANSI) only when asked for (stdout is a TTY).
 */
// @ts-nocheck


export type Colour = "green" | "yellow" | "red" | "dim" | "bold";

export type Cell = string | { text: string; colour?: Colour };

const ANSI: Record<Colour, [string, string]> = {
  green: ["\x1b[32m", "\x1b[39m"],
  yellow: ["\x1b[33m", "\x1b[39m"],
  red: ["\x1b[31m", "\x1b[39m"],
  dim: ["\x1b[2m", "\x1b[22m"],
  bold: ["\x1b[1m", "\x1b[22m"],
};

export interface TableOptions {
  colour?: boolean;
  /** Columns aligned right (numbers), by index. */
  alignRight?: readonly number[];
}

const textOf = (c: Cell) => (typeof c === "string" ? c : c.text);

/** Display width; control characters never reach here (cells are sanitized). */
const width = (s: string) => [...s].length;

/** Replaces control characters (a hostile edge must not drive the terminal). */
export function sanitize(s: string): string {
  // eslint-disable-next-line no-control-regex
  return s.replace(/[\x00-\x1f\x7f-\x9f]/g, "?");
}

export function renderTable(headers: readonly string[], rows: readonly (readonly Cell[])[], options: TableOptions = {}): string {
  const colour = options.colour ?? false;
  const right = new Set(options.alignRight ?? []);
  const all: Cell[][] = [headers.map((h) => ({ text: h, colour: "bold" as const })), ...rows.map((r) => [...r])];
  const widths = headers.map((_, i) => Math.max(...all.map((r) => width(sanitize(textOf(r[i] ?? ""))))));
  const lines = all.map((row) => {
    const cells = headers.map((_, i) => {
      const cell = row[i] ?? "";
      const text = sanitize(textOf(cell));
      const pad = " ".repeat(widths[i]! - width(text));
      const last = i === headers.length - 1;
      const padded = right.has(i) ? pad + text : last ? text : text + pad;
      const c = typeof cell === "string" ? undefined : cell.colour;
      if (!colour || !c) return padded;
      // Colour the text only, so padding stays plain and alignment holds.
      const [on, off] = ANSI[c];
      return padded.replace(text, `${on}${text}${off}`);
    });
    return cells.join("  ").replace(/ +$/, "");
  });
  return `${lines.join("\n")}\n`;
}
