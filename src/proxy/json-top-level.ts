/**
 * Reads a few top-level members of a JSON object straight from its bytes,
 * while checking that the whole document is valid UTF-8 and valid JSON.
 *
 * Why: the OpenAI routes need only `model`, `stream` and `user` to route a
 * request, but bodies run up to 10 MiB, and `JSON.parse` of that costs
 * hundreds of MB of heap and about half a second of CPU. This scanner makes
 * one pass over the bytes, keeps a bit per open container, and builds strings
 * only for the top-level keys it has to compare and the values it was asked
 * for. It accepts exactly what
 * `JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(bytes))` does,
 * except that it refuses nesting deeper than `maxDepth`. No recursion, so deep
 * input cannot overflow the stack. Pure; runs on Workers and Node.
 */

export type TopLevelValue =
  /** Escapes resolved. Only wanted members are reported at all. */
  | { type: "string"; value: string }
  /** A string whose raw length (bytes between the quotes) exceeds `maxStringBytes`: checked, not decoded. */
  | { type: "string"; value: undefined; rawBytes: number }
  | { type: "number" }
  | { type: "true" }
  | { type: "false" }
  | { type: "null" }
  | { type: "object" }
  /** `length` counts the elements; nothing of them is kept. */
  | { type: "array"; length: number };

export type ScanFailure = "invalid_utf8" | "invalid_json" | "not_an_object" | "too_deep";

export type ScanResult =
  /** The wanted keys that are present. A duplicate key: the last one wins, as in `JSON.parse`. */
  | { ok: true; fields: Map<string, TopLevelValue> }
  /**
   * `invalid_utf8` whenever a fatal TextDecoder would throw, wherever the JSON
   * went wrong first (the reference decodes before it parses). `offset`: the
   * byte where the problem was found.
   */
  | { ok: false; reason: ScanFailure; offset: number };

export interface ScanOptions {
  /** Most containers open at once; one more is `too_deep`. Default 512. */
  maxDepth?: number;
  /** Longest wanted string value (raw bytes between the quotes) that is decoded. Default 4096. */
  maxStringBytes?: number;
}

export const DEFAULT_MAX_DEPTH = 512;
export const DEFAULT_MAX_STRING_BYTES = 4096;

const TAB = 0x09;
const LF = 0x0a;
const CR = 0x0d;
const SPACE = 0x20;
const QUOTE = 0x22;
const PLUS = 0x2b;
const COMMA = 0x2c;
const MINUS = 0x2d;
const DOT = 0x2e;
const ZERO = 0x30;
const NINE = 0x39;
const COLON = 0x3a;
const OPEN_ARRAY = 0x5b;
const BACKSLASH = 0x5c;
const CLOSE_ARRAY = 0x5d;
const OPEN_OBJECT = 0x7b;
const CLOSE_OBJECT = 0x7d;
const LOWER_E = 0x65;
const UPPER_E = 0x45;
const LOWER_U = 0x75;

// What the scanner expects next, outside strings and numbers.
const VALUE = 0;
const VALUE_OR_CLOSE_ARRAY = 1; // just after `[`
const KEY_OR_CLOSE_OBJECT = 2; // just after `{`
const KEY = 3; // after `,` in an object
const COLON_NEXT = 4;
const AFTER_VALUE = 5;

const TRUE = new Uint8Array([0x74, 0x72, 0x75, 0x65]);
const FALSE = new Uint8Array([0x66, 0x61, 0x6c, 0x73, 0x65]);
const NULL = new Uint8Array([0x6e, 0x75, 0x6c, 0x6c]);

// Shared by every result, hence frozen.
const TRUE_VALUE: TopLevelValue = Object.freeze({ type: "true" });
const FALSE_VALUE: TopLevelValue = Object.freeze({ type: "false" });
const NULL_VALUE: TopLevelValue = Object.freeze({ type: "null" });
const NUMBER_VALUE: TopLevelValue = Object.freeze({ type: "number" });
const OBJECT_VALUE: TopLevelValue = Object.freeze({ type: "object" });

// `ignoreBOM: true` matters: with the default, a string value that begins
// with U+FEFF would lose it, as each decode() call strips a leading BOM.
// Non-fatal is enough: only bytes already checked are decoded.
const UTF8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/** Scans `bytes` (a JSON text as received) and returns the top-level members named in `wanted`. */
export function scanTopLevel(bytes: Uint8Array, wanted: ReadonlySet<string>, options: ScanOptions = {}): ScanResult {
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_DEPTH;
  const maxStringBytes = options.maxStringBytes ?? DEFAULT_MAX_STRING_BYTES;
  if (!(maxDepth >= 0)) throw new RangeError(`maxDepth must be >= 0, got ${maxDepth}`);
  if (!(maxStringBytes >= 0)) throw new RangeError(`maxStringBytes must be >= 0, got ${maxStringBytes}`);

  // A key escaped throughout takes 6 bytes (`\uXXXX`) per UTF-16 unit, and a raw
  // character never takes more, so a key longer than this cannot be wanted
  // and is skipped without being decoded.
  let maxKeyBytes = 0;
  for (const key of wanted) maxKeyBytes = Math.max(maxKeyBytes, 6 * key.length);

  const n = bytes.length;
  // One bit per open container, 1 = object. Depth never exceeds the number of bytes.
  const objects = new Uint8Array((Math.min(maxDepth, n) >> 3) + 1);
  const fields = new Map<string, TopLevelValue>();
  let depth = 0;
  let topIsObject = false;
  let key: string | undefined; // the wanted top-level key whose value comes next
  let arrayKey: string | undefined; // the wanted top-level key whose array is open
  let arrayLength = 0;
  let state = VALUE;

  // TextDecoder drops one leading BOM; JSON.parse would refuse it.
  let i = n >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
  let valueStart = i; // where the top-level value begins

  for (;;) {
    while (i < n) {
      const b = bytes[i]!;
      if (b !== SPACE && b !== LF && b !== CR && b !== TAB) break;
      i++;
    }
    if (state === AFTER_VALUE && depth === 0) break;
    if (i >= n) return fail(bytes, "invalid_json", i);
    const b = bytes[i]!;

    let closes = false;
    if (state === AFTER_VALUE) {
      const inObject = isObject(objects, depth - 1);
      if (b === COMMA) {
        i++;
        state = inObject ? KEY : VALUE;
        continue;
      }
      if (b !== (inObject ? CLOSE_OBJECT : CLOSE_ARRAY)) return fail(bytes, "invalid_json", i);
      closes = true;
    } else if (state === KEY_OR_CLOSE_OBJECT && b === CLOSE_OBJECT) closes = true;
    else if (state === VALUE_OR_CLOSE_ARRAY && b === CLOSE_ARRAY) closes = true;
    if (closes) {
      if (depth === 2 && arrayKey !== undefined) {
        fields.set(arrayKey, { type: "array", length: arrayLength });
        arrayKey = undefined;
      }
      depth--;
      state = AFTER_VALUE;
      i++;
      continue;
    }

    if (state === KEY_OR_CLOSE_OBJECT || state === KEY) {
      if (b !== QUOTE) return fail(bytes, "invalid_json", i);
      const end = scanString(bytes, i + 1);
      if (end < 0) return fail(bytes, "invalid_json", ~end);
      if (depth === 1 && end - (i + 1) <= maxKeyBytes) {
        const name = decodeString(bytes, i + 1, end);
        key = wanted.has(name) ? name : undefined;
      }
      i = end + 1;
      state = COLON_NEXT;
      continue;
    }

    if (state === COLON_NEXT) {
      if (b !== COLON) return fail(bytes, "invalid_json", i);
      i++;
      state = VALUE;
      continue;
    }

    // A value starts at i.
    if (depth === 2 && arrayKey !== undefined) arrayLength++;
    if (depth === 0) valueStart = i;
    const member = depth === 1 ? key : undefined;
    key = undefined;
    state = AFTER_VALUE;
    if (b === QUOTE) {
      const end = scanString(bytes, i + 1);
      if (end < 0) return fail(bytes, "invalid_json", ~end);
      if (member !== undefined) {
        const rawBytes = end - (i + 1);
        fields.set(
          member,
          rawBytes > maxStringBytes
            ? { type: "string", value: undefined, rawBytes }
            : { type: "string", value: decodeString(bytes, i + 1, end) },
        );
      }
      i = end + 1;
    } else if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
      if (depth >= maxDepth) return fail(bytes, "too_deep", i);
      const object = b === OPEN_OBJECT;
      if (object) objects[depth >> 3]! |= 1 << (depth & 7);
      else objects[depth >> 3]! &= ~(1 << (depth & 7));
      if (depth === 0) topIsObject = object;
      depth++;
      if (member !== undefined) {
        if (object) fields.set(member, OBJECT_VALUE);
        else {
          arrayKey = member;
          arrayLength = 0;
        }
      }
      state = object ? KEY_OR_CLOSE_OBJECT : VALUE_OR_CLOSE_ARRAY;
      i++;
    } else if (b === MINUS || (b >= ZERO && b <= NINE)) {
      const end = scanNumber(bytes, i);
      if (end < 0) return fail(bytes, "invalid_json", ~end);
      if (member !== undefined) fields.set(member, NUMBER_VALUE);
      i = end;
    } else {
      const literal = b === TRUE[0] ? TRUE : b === FALSE[0] ? FALSE : b === NULL[0] ? NULL : undefined;
      if (literal === undefined) return fail(bytes, "invalid_json", i);
      for (let k = 1; k < literal.length; k++) {
        if (bytes[i + k] !== literal[k]) return fail(bytes, "invalid_json", i + k);
      }
      if (member !== undefined) fields.set(member, literal === TRUE ? TRUE_VALUE : literal === FALSE ? FALSE_VALUE : NULL_VALUE);
      i += literal.length;
    }
  }

  if (i < n) return fail(bytes, "invalid_json", i);
  // Everything has been read by now, so no UTF-8 check is left to do.
  if (!topIsObject) return { ok: false, reason: "not_an_object", offset: valueStart };
  return { ok: true, fields };
}

function isObject(objects: Uint8Array, level: number): boolean {
  return (objects[level >> 3]! & (1 << (level & 7))) !== 0;
}

/**
 * The reference decodes all the bytes before it parses, so bad UTF-8 anywhere
 * outranks a JSON error found earlier. Everything before `offset` has been
 * checked already, and `offset` is always at a character boundary.
 */
function fail(bytes: Uint8Array, reason: "invalid_json" | "too_deep", offset: number): ScanResult {
  const bad = firstInvalidUtf8(bytes, offset);
  return bad < 0 ? { ok: false, reason, offset } : { ok: false, reason: "invalid_utf8", offset: bad };
}

function firstInvalidUtf8(bytes: Uint8Array, from: number): number {
  let i = from;
  while (i < bytes.length) {
    if (bytes[i]! < 0x80) i++;
    else {
      const end = utf8SequenceEnd(bytes, i);
      if (end < 0) return i;
      i = end;
    }
  }
  return -1;
}

/**
 * The index just past the well-formed UTF-8 sequence whose lead byte (>= 0x80)
 * is at `i`, or -1. Well-formed as in Unicode's table 3-7, which is what a
 * fatal TextDecoder checks: no overlongs, no surrogates, nothing above U+10FFFF.
 */
function utf8SequenceEnd(bytes: Uint8Array, i: number): number {
  const b0 = bytes[i]!;
  if (b0 < 0xc2) return -1; // a stray continuation byte, or an overlong 2-byte lead
  if (b0 < 0xe0) return isContinuation(bytes[i + 1]) ? i + 2 : -1;
  if (b0 < 0xf0) {
    const b1 = bytes[i + 1] ?? 0;
    const low = b0 === 0xe0 ? 0xa0 : 0x80; // E0 80..9F would be overlong
    const high = b0 === 0xed ? 0x9f : 0xbf; // ED A0..BF would be a surrogate
    return b1 >= low && b1 <= high && isContinuation(bytes[i + 2]) ? i + 3 : -1;
  }
  if (b0 < 0xf5) {
    const b1 = bytes[i + 1] ?? 0;
    const low = b0 === 0xf0 ? 0x90 : 0x80; // F0 80..8F would be overlong
    const high = b0 === 0xf4 ? 0x8f : 0xbf; // F4 90.. would be above U+10FFFF
    return b1 >= low && b1 <= high && isContinuation(bytes[i + 2]) && isContinuation(bytes[i + 3]) ? i + 4 : -1;
  }
  return -1;
}

function isContinuation(b: number | undefined): boolean {
  return b !== undefined && (b & 0xc0) === 0x80;
}

/**
 * Checks the string whose contents start at `i` (just past the opening
 * quote). Returns the index of the closing quote, or `~offset` of the first
 * problem (bad escape, raw control character, bad UTF-8, no closing quote).
 */
function scanString(bytes: Uint8Array, i: number): number {
  const n = bytes.length;
  while (i < n) {
    // The hot loop of a large body: runs of ordinary printable ASCII.
    while (i < n && PLAIN[bytes[i]!] === 1) i++;
    if (i >= n) break;
    const b = bytes[i]!;
    if (b === QUOTE) return i;
    if (b === BACKSLASH) {
      const e = bytes[i + 1];
      if (e === LOWER_U) {
        for (let k = 2; k < 6; k++) if (!isHexDigit(bytes[i + k])) return ~(i + k);
        i += 6;
      } else if (e === QUOTE || e === BACKSLASH || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74) {
        i += 2; // \" \\ \/ \b \f \n \r \t
      } else return ~(i + 1);
    } else if (b < 0x20) return ~i;
    else if (b < 0x80) i++;
    else {
      const end = utf8SequenceEnd(bytes, i);
      if (end < 0) return ~i;
      i = end;
    }
  }
  return ~n;
}

/** 1 for the bytes a string may hold as they are: printable ASCII but `"` and `\\`. */
const PLAIN = new Uint8Array(256);
for (let b = 0x20; b < 0x80; b++) PLAIN[b] = b === QUOTE || b === BACKSLASH ? 0 : 1;

function isHexDigit(b: number | undefined): boolean {
  if (b === undefined) return false;
  return (b >= ZERO && b <= NINE) || ((b | 0x20) >= 0x61 && (b | 0x20) <= 0x66);
}

function hexValue(b: number): number {
  return b <= NINE ? b - ZERO : (b | 0x20) - 0x61 + 10;
}

/** Returns the index just past the number starting at `i`, or `~offset` of the first problem. */
function scanNumber(bytes: Uint8Array, i: number): number {
  if (bytes[i] === MINUS) i++;
  const first = bytes[i];
  if (first === ZERO) i++;
  else if (first !== undefined && first > ZERO && first <= NINE) i = skipDigits(bytes, i + 1);
  else return ~i;
  if (bytes[i] === DOT) {
    const end = skipDigits(bytes, i + 1);
    if (end === i + 1) return ~end;
    i = end;
  }
  if (bytes[i] === LOWER_E || bytes[i] === UPPER_E) {
    i++;
    if (bytes[i] === PLUS || bytes[i] === MINUS) i++;
    const end = skipDigits(bytes, i);
    if (end === i) return ~end;
    i = end;
  }
  return i;
}

function skipDigits(bytes: Uint8Array, i: number): number {
  while (i < bytes.length && bytes[i]! >= ZERO && bytes[i]! <= NINE) i++;
  return i;
}

/** Decodes the contents of a string already checked by `scanString`. */
function decodeString(bytes: Uint8Array, start: number, end: number): string {
  let out = "";
  let run = start; // start of the current run of bytes without escapes
  let i = start;
  while (i < end) {
    if (bytes[i] !== BACKSLASH) {
      i++;
      continue;
    }
    if (i > run) out += UTF8.decode(bytes.subarray(run, i));
    const e = bytes[i + 1]!;
    if (e === LOWER_U) {
      // Lone surrogates stay lone, and a pair written as two escapes joins up
      // when concatenated, just as in JSON.parse.
      out += String.fromCharCode(
        (hexValue(bytes[i + 2]!) << 12) | (hexValue(bytes[i + 3]!) << 8) | (hexValue(bytes[i + 4]!) << 4) | hexValue(bytes[i + 5]!),
      );
      i += 6;
    } else {
      out += ESCAPED[e] ?? "";
      i += 2;
    }
    run = i;
  }
  if (end > run) out += UTF8.decode(bytes.subarray(run, end));
  return out;
}

const ESCAPED: Record<number, string> = {
  [QUOTE]: '"',
  [BACKSLASH]: "\\",
  0x2f: "/",
  0x62: "\b",
  0x66: "\f",
  0x6e: "\n",
  0x72: "\r",
  0x74: "\t",
};
