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
 *
 * It is incremental (`TopLevelScanner`): the body can be scanned chunk by
 * chunk as it arrives, so that a large body costs many short slices of CPU,
 * interleaved with I/O and other requests, rather than one long block at the
 * end. Every piece of state (inside a string, an escape, a UTF-8 sequence, a
 * number, a literal, the BOM) survives any split point, no byte is looked at
 * twice and chunks are never joined. `scanTopLevel` is the same scanner fed
 * one chunk.
 */

export type TopLevelValue =
  /** Escapes resolved. Only wanted members are reported at all. */
  | { type: "string"; value: string }
  /** A string whose raw length (bytes between the quotes) exceeds `maxStringBytes`: checked, not decoded. */
  | { type: "string"; value: undefined; rawBytes: number }
  /** `value`: the number, as JSON.parse reads it (NaN for a text over MAX_NUMBER_CHARS). */
  | { type: "number"; value: number }
  | { type: "true" }
  | { type: "false" }
  | { type: "null" }
  /** `start` and `end`: the object's bytes in the document, `{` to `}` inclusive (end exclusive); nothing of it is kept. */
  | { type: "object"; start: number; end: number }
  /** `length` counts the elements; nothing of them is kept. */
  | { type: "array"; length: number };

export type ScanFailure = "invalid_utf8" | "invalid_json" | "not_an_object" | "too_deep";

export type ScanResult =
  /** The wanted keys that are present. A duplicate key: the last one wins, as in `JSON.parse`. */
  | { ok: true; fields: Map<string, TopLevelValue> }
  /**
   * `invalid_utf8` whenever a fatal TextDecoder would throw, wherever the JSON
   * went wrong first (the reference decodes before it parses). `offset`: the
   * byte where the problem was found, counted from the start of the document.
   */
  | { ok: false; reason: ScanFailure; offset: number };

export type ScanFailureResult = Extract<ScanResult, { ok: false }>;

export interface ScanOptions {
  /** Most containers open at once; one more is `too_deep`. Default 512. */
  maxDepth?: number;
  /** Longest wanted string value (raw bytes between the quotes) that is decoded. Default 4096. */
  maxStringBytes?: number;
}

export const DEFAULT_MAX_DEPTH = 512;
export const DEFAULT_MAX_STRING_BYTES = 4096;

/** Scans `bytes` (a whole JSON text as received) and returns the top-level members named in `wanted`. */
export function scanTopLevel(bytes: Uint8Array, wanted: ReadonlySet<string>, options: ScanOptions = {}): ScanResult {
  const scanner = new TopLevelScanner(wanted, options);
  scanner.push(bytes);
  return scanner.end();
}

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

// What the scanner expects next, between tokens.
const VALUE = 0;
const VALUE_OR_CLOSE_ARRAY = 1; // just after `[`
const KEY_OR_CLOSE_OBJECT = 2; // just after `{`
const KEY = 3; // after `,` in an object
const COLON_NEXT = 4;
const AFTER_VALUE = 5; // at depth 0: the document is complete, only whitespace may follow

// Where the scanner is.
const HEAD = 0; // fewer than 3 bytes seen, all of them a prefix of the BOM
const BETWEEN = 1; // between tokens, `state` says what comes next
const IN_STRING = 2;
const IN_NUMBER = 3;
const IN_LITERAL = 4;
const JSON_FAILED = 5; // a JSON error (or too_deep) is recorded: only UTF-8 is checked from there on
const UTF8_FAILED = 6; // final

// The string being scanned is…
const SKIPPED = 0;
const TOP_KEY = 1; // a top-level key, to compare with the wanted ones
const WANTED_VALUE = 2; // the value of a wanted top-level key

// Within a number: what has been read so far.
const N_MINUS = 0; // `-`
const N_ZERO = 1; // a leading `0` (complete)
const N_INT = 2; // integer digits (complete)
const N_DOT = 3; // `.`
const N_FRAC = 4; // fraction digits (complete)
const N_EXP = 5; // `e`
const N_EXP_SIGN = 6; // `e+`
const N_EXP_DIGITS = 7; // exponent digits (complete)

const BOM = [0xef, 0xbb, 0xbf];
const TRUE = new Uint8Array([0x74, 0x72, 0x75, 0x65]);
const FALSE = new Uint8Array([0x66, 0x61, 0x6c, 0x73, 0x65]);
const NULL = new Uint8Array([0x6e, 0x75, 0x6c, 0x6c]);
const EMPTY = new Uint8Array(0);

// Shared by every result, hence frozen.
const TRUE_VALUE: TopLevelValue = Object.freeze({ type: "true" });
const FALSE_VALUE: TopLevelValue = Object.freeze({ type: "false" });
const NULL_VALUE: TopLevelValue = Object.freeze({ type: "null" });
/** A wanted number's text is kept up to this many characters; a longer one (no real field's) reads as NaN. */
const MAX_NUMBER_CHARS = 1024;

// `ignoreBOM: true` matters: with the default, a string value that begins
// with U+FEFF would lose it, as each decode() call strips a leading BOM.
// Non-fatal is enough: only bytes already checked are decoded.
const UTF8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/**
 * The incremental scanner: `push` each chunk of the document in order, then
 * `end()` for the result, which is exactly `scanTopLevel` of all the bytes
 * pushed, whatever the split.
 *
 * Early failures: `push` returns a failure only when it is final, and that is
 * only ever `invalid_utf8`: the reference decodes before it parses, so bad
 * UTF-8 anywhere outranks a JSON error found earlier, and the first bad
 * sequence settles the outcome. Once returned, every later `push` returns
 * the same failure without looking at its chunk, and so does `end()`. A JSON
 * error (`invalid_json`, `too_deep`) is only recorded when found: later
 * chunks are still checked for UTF-8, and `end()` reports it, or
 * `invalid_utf8` if bad UTF-8 followed. `not_an_object`, and whatever
 * depends on the document having ended (a truncated document, a number at
 * the very end), also come from `end()`.
 *
 * Memory: a bit per open container (at most `maxDepth`), the fields found,
 * and the raw bytes of a wanted value or top-level key while it spans chunks
 * (at most `maxStringBytes` or six bytes per UTF-16 unit of the longest
 * wanted key). Chunks are not kept: a caller may reuse its buffer.
 */
export class TopLevelScanner {
  private readonly wanted: ReadonlySet<string>;
  private readonly maxDepth: number;
  private readonly maxStringBytes: number;
  /**
   * A key escaped throughout takes 6 bytes (`\uXXXX`) per UTF-16 unit, and a
   * raw character never takes more, so a key longer than this cannot be
   * wanted and is checked without being decoded.
   */
  private readonly maxKeyBytes: number;
  private readonly fields = new Map<string, TopLevelValue>();

  private mode = HEAD;
  /** Bytes pushed so far: the offset in the document of the next chunk's first byte. */
  private offset = 0;
  /** The first bytes, held while they could still be the start of a BOM. */
  private head: number[] = [];
  /** The invalid_utf8 failure, once found. */
  private failure: ScanFailureResult | undefined;
  private result: ScanResult | undefined;

  // Structure.
  private state = VALUE;
  private depth = 0;
  /** One bit per open container, 1 = object; grows up to maxDepth bits. */
  private objects = new Uint8Array(8);
  private topIsObject = false;
  /** Where the top-level value begins. */
  private valueStart = 0;
  /** The wanted top-level key whose value comes next. */
  private key: string | undefined;
  /** The wanted top-level key whose array is open. */
  private arrayKey: string | undefined;
  private arrayLength = 0;
  /** A wanted member whose object is open, and where it began. */
  private objectKey: string | undefined;
  private objectStart = 0;

  // The string being scanned.
  private role = SKIPPED;
  /** For a WANTED_VALUE: its key. */
  private member: string | undefined;
  /** Offset in the document of its first byte after the opening quote. */
  private stringStart = 0;
  /** Whether its raw bytes from earlier chunks are in `held` (not once they exceed the limit). */
  private collecting = false;
  private held = EMPTY;
  private heldLength = 0;
  /** 0: no escape open; 1: after `\`; 2 to 5: after `\u` and 0 to 3 hex digits. */
  private escape = 0;

  // A UTF-8 sequence cut by the end of a chunk, in a string or after a JSON error.
  /** Continuation bytes still to come; 0: none pending. */
  private utf8Need = 0;
  /** The range allowed for the next continuation byte. */
  private utf8Low = 0;
  private utf8High = 0;
  /** Offset in the document of the sequence's lead byte: where a bad sequence is reported. */
  private utf8Lead = 0;

  private numberState = N_MINUS;
  /** The wanted member whose number is being read, and its text so far. */
  private numberMember: string | undefined;
  private numberText = "";
  private literal = TRUE;
  private literalIndex = 0;

  private jsonReason: "invalid_json" | "too_deep" = "invalid_json";
  private jsonOffset = 0;

  constructor(wanted: ReadonlySet<string>, options: ScanOptions = {}) {
    const maxDepth = options.maxDepth ?? DEFAULT_MAX_DEPTH;
    const maxStringBytes = options.maxStringBytes ?? DEFAULT_MAX_STRING_BYTES;
    if (!(maxDepth >= 0)) throw new RangeError(`maxDepth must be >= 0, got ${maxDepth}`);
    if (!(maxStringBytes >= 0)) throw new RangeError(`maxStringBytes must be >= 0, got ${maxStringBytes}`);
    this.wanted = wanted;
    this.maxDepth = maxDepth;
    this.maxStringBytes = maxStringBytes;
    let maxKeyBytes = 0;
    for (const key of wanted) maxKeyBytes = Math.max(maxKeyBytes, 6 * key.length);
    this.maxKeyBytes = maxKeyBytes;
  }

  /**
   * Scans the next bytes of the document. Returns the failure if it is
   * already final (only ever `invalid_utf8`, see the class comment), else
   * undefined. Throws after `end()`.
   */
  push(chunk: Uint8Array): ScanFailureResult | undefined {
    if (this.result !== undefined) throw new Error("TopLevelScanner: push() after end()");
    if (this.failure === undefined && chunk.length > 0) {
      if (this.mode === HEAD) this.pushHead(chunk);
      else this.scan(chunk);
    }
    return this.failure;
  }

  /** The document has ended: the result of `scanTopLevel` over all the bytes pushed. The same object on every call. */
  end(): ScanResult {
    if (this.result === undefined) {
      if (this.mode === HEAD) {
        // Fewer than 3 bytes in all: no BOM.
        this.mode = BETWEEN;
        if (this.head.length > 0) this.scan(Uint8Array.from(this.head));
      }
      this.result = this.finish();
    }
    return this.result;
  }

  private finish(): ScanResult {
    if (this.failure !== undefined) return this.failure;
    // A UTF-8 sequence cut short by the end of the document.
    if (this.utf8Need !== 0) return { ok: false, reason: "invalid_utf8", offset: this.utf8Lead };
    const mode = this.mode;
    if (mode === JSON_FAILED) return { ok: false, reason: this.jsonReason, offset: this.jsonOffset };
    if (mode === IN_NUMBER) {
      const s = this.numberState;
      if (s !== N_ZERO && s !== N_INT && s !== N_FRAC && s !== N_EXP_DIGITS) return this.truncated();
      // The number is complete; `state` is already AFTER_VALUE.
      if (this.numberMember !== undefined) this.endNumber();
    } else if (mode !== BETWEEN) return this.truncated();
    if (this.state !== AFTER_VALUE || this.depth !== 0) return this.truncated();
    if (!this.topIsObject) return { ok: false, reason: "not_an_object", offset: this.valueStart };
    return { ok: true, fields: this.fields };
  }

  private truncated(): ScanResult {
    return { ok: false, reason: "invalid_json", offset: this.offset };
  }

  /** Holds the first bytes until it is clear whether the document starts with a BOM, which TextDecoder drops (and JSON.parse would refuse). */
  private pushHead(chunk: Uint8Array): void {
    const head = this.head;
    let k = 0; // bytes of chunk that go on matching the BOM
    while (head.length + k < 3 && k < chunk.length && chunk[k] === BOM[head.length + k]) k++;
    if (head.length + k === 3) {
      this.head = [];
      this.mode = BETWEEN;
      this.offset = 3;
      if (k < chunk.length) this.scan(chunk.subarray(k));
    } else if (k === chunk.length) {
      for (let j = 0; j < k; j++) head.push(chunk[j]!);
    } else {
      this.head = [];
      this.mode = BETWEEN;
      if (head.length > 0) this.scan(Uint8Array.from(head));
      if (this.failure === undefined) this.scan(chunk);
    }
  }

  /** Scans one chunk, the next bytes of the document, resuming wherever the last one stopped. */
  private scan(bytes: Uint8Array): void {
    const base = this.offset;
    const n = bytes.length;
    this.offset = base + n;
    let i = 0;
    if (this.mode !== BETWEEN) {
      // Finish what the last chunk cut short.
      const mode = this.mode;
      if (mode === IN_STRING) i = this.inString(bytes, 0, 0, base);
      else if (mode === IN_NUMBER) i = this.inNumber(bytes, 0, base);
      else if (mode === IN_LITERAL) i = this.inLiteral(bytes, 0, base);
      if (this.mode !== BETWEEN) {
        if (this.mode === JSON_FAILED) this.utf8Only(bytes, i, base);
        return;
      }
    }

    // Between tokens. The hot state lives in locals here, and goes back to
    // the fields before anything that reads or writes them and at the end.
    const wanted = this.wanted;
    const fields = this.fields;
    const maxKeyBytes = this.maxKeyBytes;
    let objects = this.objects;
    let state = this.state;
    let depth = this.depth;
    let key = this.key;
    let arrayKey = this.arrayKey;
    let arrayLength = this.arrayLength;
    let objectKey = this.objectKey;

    for (;;) {
      let b = 0;
      while (i < n) {
        b = bytes[i]!;
        if (b !== SPACE && b !== LF && b !== CR && b !== TAB) break;
        i++;
      }
      if (i >= n) break;

      let closes = false;
      if (state === AFTER_VALUE) {
        if (depth === 0) {
          i = this.jsonFail("invalid_json", i, base); // only whitespace may follow the document
          break;
        }
        const inObject = isObject(objects, depth - 1);
        if (b === COMMA) {
          i++;
          state = inObject ? KEY : VALUE;
          continue;
        }
        if (b !== (inObject ? CLOSE_OBJECT : CLOSE_ARRAY)) {
          i = this.jsonFail("invalid_json", i, base);
          break;
        }
        closes = true;
      } else if (state === KEY_OR_CLOSE_OBJECT && b === CLOSE_OBJECT) closes = true;
      else if (state === VALUE_OR_CLOSE_ARRAY && b === CLOSE_ARRAY) closes = true;
      if (closes) {
        if (depth === 2 && arrayKey !== undefined) {
          fields.set(arrayKey, { type: "array", length: arrayLength });
          arrayKey = undefined;
        }
        if (depth === 2 && objectKey !== undefined) {
          fields.set(objectKey, { type: "object", start: this.objectStart, end: base + i + 1 });
          objectKey = undefined;
        }
        depth--;
        state = AFTER_VALUE;
        i++;
        continue;
      }

      if (state === KEY_OR_CLOSE_OBJECT || state === KEY) {
        if (b !== QUOTE) {
          i = this.jsonFail("invalid_json", i, base);
          break;
        }
        state = COLON_NEXT;
        const stop = stringRun(bytes, i + 1);
        if (stop >= 0) {
          if (depth === 1 && stop - (i + 1) <= maxKeyBytes) {
            const name = decodeString(bytes, i + 1, stop);
            key = wanted.has(name) ? name : undefined;
          }
          i = stop + 1;
          continue;
        }
        // An escape or a character the end of the chunk may cut, or a problem.
        this.key = key;
        i = this.inString(bytes, ~stop, this.beginString(depth === 1 ? TOP_KEY : SKIPPED, undefined, i + 1, base), base);
        key = this.key;
        if (this.mode !== BETWEEN) break;
        continue;
      }

      if (state === COLON_NEXT) {
        if (b !== COLON) {
          i = this.jsonFail("invalid_json", i, base);
          break;
        }
        i++;
        state = VALUE;
        continue;
      }

      // A value starts at i.
      if (depth === 2 && arrayKey !== undefined) arrayLength++;
      if (depth === 0) this.valueStart = base + i;
      const member = depth === 1 ? key : undefined;
      key = undefined;
      state = AFTER_VALUE;
      if (b === QUOTE) {
        const stop = stringRun(bytes, i + 1);
        if (stop >= 0) {
          if (member !== undefined) fields.set(member, stringValue(bytes, i + 1, stop, this.maxStringBytes));
          i = stop + 1;
          continue;
        }
        i = this.inString(bytes, ~stop, this.beginString(member === undefined ? SKIPPED : WANTED_VALUE, member, i + 1, base), base);
        if (this.mode !== BETWEEN) break;
        continue;
      }
      if (b === OPEN_OBJECT || b === OPEN_ARRAY) {
        if (depth >= this.maxDepth) {
          i = this.jsonFail("too_deep", i, base);
          break;
        }
        const object = b === OPEN_OBJECT;
        if (depth >> 3 >= objects.length) {
          const grown = new Uint8Array(objects.length * 2);
          grown.set(objects);
          objects = grown;
        }
        if (object) objects[depth >> 3]! |= 1 << (depth & 7);
        else objects[depth >> 3]! &= ~(1 << (depth & 7));
        if (depth === 0) this.topIsObject = object;
        depth++;
        if (member !== undefined) {
          if (object) {
            objectKey = member;
            this.objectStart = base + i;
          } else {
            arrayKey = member;
            arrayLength = 0;
          }
        }
        state = object ? KEY_OR_CLOSE_OBJECT : VALUE_OR_CLOSE_ARRAY;
        i++;
        continue;
      }
      if (b === MINUS || (b >= ZERO && b <= NINE)) {
        // Reported once it ends (endNumber): if it turns out bad, so does the document.
        this.numberMember = member;
        this.numberText = String.fromCharCode(b);
        this.numberState = b === MINUS ? N_MINUS : b === ZERO ? N_ZERO : N_INT;
        this.mode = IN_NUMBER;
        i = this.inNumber(bytes, i + 1, base);
        if (this.mode !== BETWEEN) break;
        continue;
      }
      const literal = b === TRUE[0] ? TRUE : b === FALSE[0] ? FALSE : b === NULL[0] ? NULL : undefined;
      if (literal === undefined) {
        i = this.jsonFail("invalid_json", i, base);
        break;
      }
      if (member !== undefined) fields.set(member, literal === TRUE ? TRUE_VALUE : literal === FALSE ? FALSE_VALUE : NULL_VALUE);
      this.literal = literal;
      this.literalIndex = 1;
      this.mode = IN_LITERAL;
      i = this.inLiteral(bytes, i + 1, base);
      if (this.mode !== BETWEEN) break;
    }

    this.objects = objects;
    this.state = state;
    this.depth = depth;
    this.key = key;
    this.arrayKey = arrayKey;
    this.arrayLength = arrayLength;
    this.objectKey = objectKey;
    if (this.mode === JSON_FAILED) this.utf8Only(bytes, i, base);
  }

  /** Enters a string whose contents start at `bytes[i]`; returns `i`. */
  private beginString(role: number, member: string | undefined, i: number, base: number): number {
    this.mode = IN_STRING;
    this.role = role;
    this.member = member;
    this.stringStart = base + i;
    this.collecting = role !== SKIPPED;
    this.heldLength = 0;
    return i;
  }

  /**
   * Inside a string, from `bytes[i]`, at a character `stringRun` left, or
   * where the last chunk left off; this chunk's part of the string began at
   * `from`. Checks it up to its closing quote or the end of the chunk, and
   * when it closes, reports it if it is a top-level key or a wanted value.
   * Returns where it stopped.
   */
  private inString(bytes: Uint8Array, i: number, from: number, base: number): number {
    const n = bytes.length;
    for (;;) {
      // A byte at a time: what the end of a chunk may cut, and problems.
      if (this.utf8Need !== 0) {
        if (i >= n) break;
        if (!this.utf8Continue(bytes[i]!)) return this.utf8Fail(this.utf8Lead);
        i++;
        continue;
      }
      if (this.escape !== 0) {
        if (i >= n) break;
        const e = bytes[i]!;
        if (this.escape === 1) {
          if (e === LOWER_U) this.escape = 2;
          else if (isShortEscape(e)) this.escape = 0;
          else return this.jsonFail("invalid_json", i, base);
        } else {
          if (!isHexDigit(e)) return this.jsonFail("invalid_json", i, base);
          this.escape = this.escape === 5 ? 0 : this.escape + 1;
        }
        i++;
        continue;
      }
      if (i >= n) break;
      const b = bytes[i]!;
      if (b === BACKSLASH) {
        this.escape = 1;
        i++;
        continue;
      }
      if (b >= 0x80) {
        if (!this.utf8Begin(b, base + i)) return this.utf8Fail(base + i);
        i++;
        continue;
      }
      if (b < 0x20) return this.jsonFail("invalid_json", i, base); // a raw control character
      // `"` or printable ASCII: the fast path, as far as it goes.
      const stop = stringRun(bytes, i);
      if (stop >= 0) {
        this.endString(bytes, from, stop, base);
        return stop + 1;
      }
      i = ~stop;
    }
    // The chunk ends inside the string.
    if (this.collecting) this.hold(bytes, from, n);
    return n;
  }

  /** The string closes at `bytes[end]`; its part in this chunk began at `from`. */
  private endString(bytes: Uint8Array, from: number, end: number, base: number): void {
    this.mode = BETWEEN;
    const role = this.role;
    if (role === SKIPPED) return;
    const rawBytes = base + end - this.stringStart;
    let source = bytes;
    let start = from;
    if (this.stringStart < base && this.collecting) {
      // Begun in an earlier chunk: decode it from the bytes held.
      this.hold(bytes, from, end);
      source = this.held;
      start = 0;
      end = this.heldLength;
    }
    if (role === TOP_KEY) {
      let key: string | undefined;
      if (rawBytes <= this.maxKeyBytes) {
        const name = decodeString(source, start, end);
        if (this.wanted.has(name)) key = name;
      }
      this.key = key;
    } else this.fields.set(this.member!, stringValue(source, start, end, this.maxStringBytes, rawBytes));
    if (this.held.length > 65536) this.held = EMPTY;
  }

  /** Keeps `bytes[from..to)` of the string being collected, or stops collecting once it is too long to be decoded. */
  private hold(bytes: Uint8Array, from: number, to: number): void {
    const total = this.heldLength + (to - from);
    const limit = this.role === TOP_KEY ? this.maxKeyBytes : this.maxStringBytes;
    if (total > limit) {
      this.collecting = false;
      this.heldLength = 0;
      return;
    }
    if (total > this.held.length) {
      const grown = new Uint8Array(Math.min(limit, Math.max(total, 2 * this.held.length, 64)));
      grown.set(this.held.subarray(0, this.heldLength));
      this.held = grown;
    }
    this.held.set(bytes.subarray(from, to), this.heldLength);
    this.heldLength = total;
  }

  private inNumber(bytes: Uint8Array, from: number, base: number): number {
    const i = this.numberBytes(bytes, from, base);
    if (this.numberMember !== undefined && this.mode !== JSON_FAILED) {
      // A wanted member's number: its text, kept short, and its value once it has ended.
      if (this.numberText.length <= MAX_NUMBER_CHARS) this.numberText += String.fromCharCode(...bytes.subarray(from, Math.min(i, from + MAX_NUMBER_CHARS + 1)));
      if (this.mode === BETWEEN) this.endNumber();
    }
    return i;
  }

  /** Records the finished number of a wanted member. */
  private endNumber(): void {
    const text = this.numberText;
    this.fields.set(this.numberMember!, { type: "number", value: text.length > MAX_NUMBER_CHARS ? NaN : Number(text) });
    this.numberMember = undefined;
  }

  private numberBytes(bytes: Uint8Array, i: number, base: number): number {
    const n = bytes.length;
    let s = this.numberState;
    for (; i < n; i++) {
      const b = bytes[i]!;
      const digit = b >= ZERO && b <= NINE;
      if (s === N_INT || s === N_FRAC || s === N_EXP_DIGITS) {
        if (digit) continue;
        if (s !== N_EXP_DIGITS && (b === LOWER_E || b === UPPER_E)) s = N_EXP;
        else if (s === N_INT && b === DOT) s = N_DOT;
        else break;
      } else if (s === N_ZERO) {
        if (b === DOT) s = N_DOT;
        else if (b === LOWER_E || b === UPPER_E) s = N_EXP;
        else break;
      } else if (s === N_MINUS) {
        if (!digit) return this.jsonFail("invalid_json", i, base);
        s = b === ZERO ? N_ZERO : N_INT;
      } else if (s === N_DOT) {
        if (!digit) return this.jsonFail("invalid_json", i, base);
        s = N_FRAC;
      } else if (s === N_EXP) {
        if (digit) s = N_EXP_DIGITS;
        else if (b === PLUS || b === MINUS) s = N_EXP_SIGN;
        else return this.jsonFail("invalid_json", i, base);
      } else {
        // N_EXP_SIGN
        if (!digit) return this.jsonFail("invalid_json", i, base);
        s = N_EXP_DIGITS;
      }
    }
    if (i < n) this.mode = BETWEEN; // the number ended before bytes[i], which is left for the structure
    else this.numberState = s;
    return i;
  }

  private inLiteral(bytes: Uint8Array, i: number, base: number): number {
    const n = bytes.length;
    const literal = this.literal;
    let k = this.literalIndex;
    for (; k < literal.length; k++, i++) {
      if (i >= n) {
        this.literalIndex = k;
        return n;
      }
      if (bytes[i] !== literal[k]) return this.jsonFail("invalid_json", i, base);
    }
    this.mode = BETWEEN;
    return i;
  }

  /**
   * Records a JSON error at `bytes[i]`. The reference decodes before it
   * parses, so from here on only UTF-8 is checked, starting with `bytes[i]`
   * itself: everything before it has been checked, and it is always at a
   * character boundary.
   */
  private jsonFail(reason: "invalid_json" | "too_deep", i: number, base: number): number {
    this.mode = JSON_FAILED;
    this.jsonReason = reason;
    this.jsonOffset = base + i;
    return i;
  }

  private utf8Fail(offset: number): number {
    this.mode = UTF8_FAILED;
    this.failure = { ok: false, reason: "invalid_utf8", offset };
    return 0; // scan() stops on the mode
  }

  /** After a JSON error: checks only UTF-8. */
  private utf8Only(bytes: Uint8Array, i: number, base: number): number {
    const n = bytes.length;
    while (i < n) {
      if (this.utf8Need !== 0) {
        if (!this.utf8Continue(bytes[i]!)) return this.utf8Fail(this.utf8Lead);
        i++;
        continue;
      }
      while (i < n && bytes[i]! < 0x80) i++;
      if (i >= n) break;
      if (i + 4 <= n) {
        const end = utf8SequenceEnd(bytes, i);
        if (end < 0) return this.utf8Fail(base + i);
        i = end;
      } else {
        if (!this.utf8Begin(bytes[i]!, base + i)) return this.utf8Fail(base + i);
        i++;
      }
    }
    return n;
  }

  /**
   * One continuation byte of a sequence begun by utf8Begin (one cut by a chunk's end:
   * the cold path): false if `b` is outside the range its place allows.
   */
  private utf8Continue(b: number): boolean {
    if (b < this.utf8Low || b > this.utf8High) return false;
    this.utf8Need--;
    this.utf8Low = 0x80;
    this.utf8High = 0xbf;
    return true;
  }

  /**
   * Starts a UTF-8 sequence whose lead byte `b` (>= 0x80) is too near the end
   * of its chunk for `utf8SequenceEnd` (or that it refused): its continuation
   * bytes are then checked one at a time, across chunks. False if `b` cannot
   * lead a sequence. The ranges are those of `utf8SequenceEnd`.
   */
  private utf8Begin(b: number, lead: number): boolean {
    if (b < 0xc2 || b >= 0xf5) return false;
    if (b < 0xe0) {
      this.utf8Need = 1;
      this.utf8Low = 0x80;
      this.utf8High = 0xbf;
    } else if (b < 0xf0) {
      this.utf8Need = 2;
      this.utf8Low = b === 0xe0 ? 0xa0 : 0x80;
      this.utf8High = b === 0xed ? 0x9f : 0xbf;
    } else {
      this.utf8Need = 3;
      this.utf8Low = b === 0xf0 ? 0x90 : 0x80;
      this.utf8High = b === 0xf4 ? 0x8f : 0xbf;
    }
    this.utf8Lead = lead;
    return true;
  }
}

function isObject(objects: Uint8Array, level: number): boolean {
  return (objects[level >> 3]! & (1 << (level & 7))) !== 0;
}

/**
 * The fast path through a string, from `i` inside it: the index of its
 * closing quote, or `~i` of the first character it leaves to the caller: an
 * escape or UTF-8 sequence that may run past the end of `bytes` (or a bad
 * one), a raw control character, or the end of `bytes`.
 */
function stringRun(bytes: Uint8Array, i: number): number {
  const n = bytes.length;
  for (;;) {
    // The hot loop of a large body: runs of ordinary printable ASCII, four
    // bytes a step (about a third faster than one).
    while (i + 4 <= n) {
      if (PLAIN[bytes[i]!] !== 1) break;
      if (PLAIN[bytes[i + 1]!] !== 1) {
        i += 1;
        break;
      }
      if (PLAIN[bytes[i + 2]!] !== 1) {
        i += 2;
        break;
      }
      if (PLAIN[bytes[i + 3]!] !== 1) {
        i += 3;
        break;
      }
      i += 4;
    }
    while (i < n && PLAIN[bytes[i]!] === 1) i++;
    if (i >= n) return ~i;
    const b = bytes[i]!;
    if (b === QUOTE) return i;
    if (b === BACKSLASH) {
      if (i + 6 > n) return ~i;
      const e = bytes[i + 1]!;
      if (e === LOWER_U) {
        if (!isHexDigit(bytes[i + 2]) || !isHexDigit(bytes[i + 3]) || !isHexDigit(bytes[i + 4]) || !isHexDigit(bytes[i + 5])) return ~i;
        i += 6;
      } else if (isShortEscape(e)) i += 2;
      else return ~i;
    } else if (b < 0x80 || i + 4 > n) return ~i;
    else {
      // A run of UTF-8 sequences (most of a text in many languages).
      do {
        const end = utf8SequenceEnd(bytes, i);
        if (end < 0) return ~i;
        i = end;
      } while (i + 4 <= n && bytes[i]! >= 0x80);
    }
  }
}

/** `\"` `\\` `\/` `\b` `\f` `\n` `\r` `\t`: the escapes but `\u`. */
function isShortEscape(e: number): boolean {
  return e === QUOTE || e === BACKSLASH || e === 0x2f || e === 0x62 || e === 0x66 || e === 0x6e || e === 0x72 || e === 0x74;
}

/**
 * The index just past the well-formed UTF-8 sequence whose lead byte (>= 0x80)
 * is at `i`, or -1. Well-formed as in Unicode's table 3-7, which is what a
 * fatal TextDecoder checks: no overlongs, no surrogates, nothing above U+10FFFF.
 * Needs the 4 bytes from `i` to be in `bytes` (a byte past the end reads as bad).
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

/** A wanted string value, whose raw bytes are `bytes[start..end)`, checked. */
function stringValue(bytes: Uint8Array, start: number, end: number, maxStringBytes: number, rawBytes = end - start): TopLevelValue {
  return rawBytes > maxStringBytes ? { type: "string", value: undefined, rawBytes } : { type: "string", value: decodeString(bytes, start, end) };
}

/** Decodes the contents of a string, all of it in `bytes[start..end)` and already checked. */
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

const isJsonSpace = (b: number) => b === 0x20 || b === 0x0a || b === 0x0d || b === 0x09;

/**
 * `body` with `"name":json` added as the object's last member, every other byte as it
 * was (no parse, no re-serialisation: numbers, escapes and key order untouched; the
 * body digest is taken after). A member of the same name earlier in the body is
 * overridden rather than removed: the last of duplicate names wins in Python's `json`
 * (which vLLM's FastAPI server parses bodies with; its documentation says so) and in
 * JSON.parse. Null when `body` does not end with an object's `}`.
 */
export function withLastMember(body: ArrayBuffer, name: string, json: string): ArrayBuffer | null {
  const bytes = new Uint8Array(body);
  let close = bytes.length - 1;
  while (close >= 0 && isJsonSpace(bytes[close]!)) close--;
  if (close < 0 || bytes[close] !== 0x7d) return null;
  let before = close - 1;
  while (before >= 0 && isJsonSpace(bytes[before]!)) before--;
  // `{}`: the member is the first, with no comma before it.
  const member = new TextEncoder().encode(`${bytes[before] === 0x7b ? "" : ","}${JSON.stringify(name)}:${json}`);
  const out = new Uint8Array(bytes.length + member.length);
  out.set(bytes.subarray(0, close), 0);
  out.set(member, close);
  out.set(bytes.subarray(close), close + member.length);
  return out.buffer;
}

const utf8 = new TextDecoder();

/** A whole body as JSON (one JSON.parse of its UTF-8), or undefined when it is not JSON. */
export function jsonOf(bytes: ArrayBuffer | Uint8Array): unknown {
  try {
    return JSON.parse(utf8.decode(bytes));
  } catch {
    return undefined;
  }
}
