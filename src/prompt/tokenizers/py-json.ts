/**
 * JSON as Python's `json.loads` reads it (issue 55): what vLLM's templates see of a
 * request's tool schemas and tool-call arguments. JavaScript's JSON.parse loses three
 * things a template prints back with `tojson`:
 * - a number's kind: `2.0` and `1e5` are floats in Python (printed `2.0`, `100000.0`),
 *   `2` is an int; an int past 2^53 keeps every digit;
 * - the order of keys: JavaScript puts integer-like keys (`"1"`, `"10"`) first, Python
 *   keeps the order written;
 * - NaN, Infinity and -Infinity, which Python reads and JSON.parse refuses.
 *
 * So an object here is a Map (the order written, a repeated key's last value at its
 * first place, as Python's dict), a float a PyFloat, an int a number or, past 2^53, a
 * bigint. jinja-python.ts turns these into the template engine's values. The parser is
 * linear in its input, its nesting bounded (PY_JSON_MAX_DEPTH).
 */

/** A float as Python holds it: printed with Python's repr (pyFloatRepr), `2.0` not `2`. */
export class PyFloat {
  readonly value: number;
  constructor(value: number) {
    this.value = value;
  }
}

/** What pyJsonLoads returns: JSON's values, with Python's kinds kept. */
export type PyJson = null | boolean | number | bigint | string | PyFloat | PyJson[] | Map<string, PyJson>;

/**
 * Deeper nesting is refused (Python's own decoder stops at its recursion limit, ~1,000;
 * a client's tool arguments never nest this deep, and the parser recurses).
 */
export const PY_JSON_MAX_DEPTH = 512;

export class PyJsonError extends Error {}

const NUMBER = /-?(?:0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?/y;
// A string's run up to a quote, a backslash or a control character (which Python's strict decoder refuses).
const RUN = /[^"\\\u0000-\u001f]*/y;
const ESCAPES: Record<string, string> = { '"': '"', "\\": "\\", "/": "/", b: "\b", f: "\f", n: "\n", r: "\r", t: "\t" };

/** Python's json.loads(text): the whole text one value, whitespace around it allowed. */
export function pyJsonLoads(text: string): PyJson {
  const { value, end } = pyJsonValueAt(text, 0);
  if (skipSpace(text, end) !== text.length) throw new PyJsonError(`extra data at ${end}`);
  return value;
}

/**
 * One JSON value starting at `start` (after whitespace), and where it ends; a value
 * longer than `maxChars` is refused once the parser passes that length.
 */
export function pyJsonValueAt(text: string, start: number, maxChars = Infinity): { value: PyJson; end: number } {
  let i = start;
  const limit = start + maxChars;
  const value = (depth: number): PyJson => {
    if (depth > PY_JSON_MAX_DEPTH) throw new PyJsonError("nested too deep");
    if (i > limit) throw new PyJsonError("longer than allowed");
    i = skipSpace(text, i);
    const c = text.charCodeAt(i);
    if (c === 0x22) return string();
    if (c === 0x7b) {
      i++;
      const out = new Map<string, PyJson>();
      i = skipSpace(text, i);
      if (text.charCodeAt(i) === 0x7d) {
        i++;
        return out;
      }
      for (;;) {
        i = skipSpace(text, i);
        if (text.charCodeAt(i) !== 0x22) throw new PyJsonError(`expected a key at ${i}`);
        const key = string();
        i = skipSpace(text, i);
        if (text.charCodeAt(i) !== 0x3a) throw new PyJsonError(`expected ':' at ${i}`);
        i++;
        out.set(key, value(depth + 1));
        i = skipSpace(text, i);
        const d = text.charCodeAt(i++);
        if (d === 0x7d) return out;
        if (d !== 0x2c) throw new PyJsonError(`expected ',' or '}' at ${i - 1}`);
      }
    }
    if (c === 0x5b) {
      i++;
      const out: PyJson[] = [];
      i = skipSpace(text, i);
      if (text.charCodeAt(i) === 0x5d) {
        i++;
        return out;
      }
      for (;;) {
        out.push(value(depth + 1));
        i = skipSpace(text, i);
        const d = text.charCodeAt(i++);
        if (d === 0x5d) return out;
        if (d !== 0x2c) throw new PyJsonError(`expected ',' or ']' at ${i - 1}`);
      }
    }
    const word = c === 0x6e ? "null" : c === 0x74 ? "true" : c === 0x66 ? "false" : c === 0x4e ? "NaN" : c === 0x49 ? "Infinity" : c === 0x2d && text.charCodeAt(i + 1) === 0x49 ? "-Infinity" : undefined;
    if (word !== undefined) {
      if (!text.startsWith(word, i)) throw new PyJsonError(`unexpected input at ${i}`);
      i += word.length;
      return WORDS[word]!;
    }
    NUMBER.lastIndex = i;
    const m = NUMBER.exec(text);
    if (!m) throw new PyJsonError(`unexpected input at ${i}`);
    i += m[0].length;
    if (m[1] !== undefined || m[2] !== undefined) return new PyFloat(Number(m[0]));
    const n = Number(m[0]);
    return Number.isSafeInteger(n) ? n : BigInt(m[0]);
  };
  // A string from its opening quote: each run without escapes matched whole (natively).
  const string = (): string => {
    let out = "";
    i++;
    for (;;) {
      RUN.lastIndex = i;
      const run = RUN.exec(text)![0];
      out += run;
      i += run.length;
      if (i > limit) throw new PyJsonError("longer than allowed");
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i++;
        return out;
      }
      if (c !== 0x5c) throw new PyJsonError(Number.isNaN(c) ? "unterminated string" : `control character in a string at ${i}`);
      const e = text[i + 1];
      if (e === "u") {
        const hex = text.slice(i + 2, i + 6);
        if (!/^[0-9a-fA-F]{4}$/.test(hex)) throw new PyJsonError(`bad \\u escape at ${i}`);
        out += String.fromCharCode(parseInt(hex, 16));
        i += 6;
      } else {
        const r = e === undefined ? undefined : ESCAPES[e];
        if (r === undefined) throw new PyJsonError(`bad escape at ${i}`);
        out += r;
        i += 2;
      }
    }
  };
  const v = value(0);
  return { value: v, end: i };
}

const WORDS: Record<string, PyJson> = { null: null, true: true, false: false, NaN: new PyFloat(NaN), Infinity: new PyFloat(Infinity), "-Infinity": new PyFloat(-Infinity) };

function skipSpace(text: string, i: number): number {
  for (;;) {
    const c = text.charCodeAt(i);
    if (c !== 0x20 && c !== 0x0a && c !== 0x0d && c !== 0x09) return i;
    i++;
  }
}

/** Whether JSON.parse read the same text as `parsed` (what differs is only what JSON.parse loses). */
export function readAlike(v: PyJson, parsed: unknown): boolean {
  if (v instanceof PyFloat) return parsed === v.value;
  if (typeof v === "bigint") return parsed === Number(v);
  if (Array.isArray(v)) return Array.isArray(parsed) && parsed.length === v.length && v.every((x, i) => readAlike(x, parsed[i]));
  if (v instanceof Map) {
    if (typeof parsed !== "object" || parsed === null || Array.isArray(parsed)) return false;
    const o = parsed as Record<string, unknown>;
    if (Object.keys(o).length !== v.size) return false;
    for (const [k, x] of v) if (!Object.hasOwn(o, k) || !readAlike(x, o[k])) return false;
    return true;
  }
  return parsed === v;
}

/**
 * The top-level member `key` of a JSON object text, read as Python reads it, given the
 * value JSON.parse read for it (`parsed`): the text is searched for `"key":` and the
 * value after the one whose reading is `parsed` is returned. Undefined when none is
 * found within the bound: at most MEMBER_CANDIDATES places tried, each parse at most
 * `maxChars` long (a body can hold the key nested many times over). Its cost is the
 * native search and those parses, never a parse of the whole body.
 */
export function memberAsPython(text: string, key: string, parsed: unknown, maxChars: number): PyJson | undefined {
  const needle = JSON.stringify(key);
  let tries = 0;
  // The last one first: a member written twice is read by both parsers as its last.
  for (let at = text.lastIndexOf(needle); at >= 0 && tries < MEMBER_CANDIDATES; at = at === 0 ? -1 : text.lastIndexOf(needle, at - 1)) {
    // Inside a string a quote is escaped; an unescaped `"key"` is a string token of the JSON.
    let slashes = 0;
    while (at - slashes - 1 >= 0 && text.charCodeAt(at - slashes - 1) === 0x5c) slashes++;
    if (slashes % 2 === 1) continue;
    const colon = skipSpace(text, at + needle.length);
    if (text.charCodeAt(colon) !== 0x3a) continue;
    tries++;
    try {
      const { value } = pyJsonValueAt(text, colon + 1, maxChars);
      if (readAlike(value, parsed)) return value;
    } catch (err) {
      if (!(err instanceof PyJsonError)) throw err;
    }
  }
  return undefined;
}

/** How many places memberAsPython tries before it gives up. */
export const MEMBER_CANDIDATES = 8;

/** A member of an object as JSON.parse reads it, or of a Map as pyJsonLoads does (a body's tools read as Python reads them); undefined for anything else. */
export function member(o: unknown, key: string): unknown {
  if (o instanceof Map) return o.get(key) as unknown;
  return typeof o === "object" && o !== null && !Array.isArray(o) ? (o as Record<string, unknown>)[key] : undefined;
}
