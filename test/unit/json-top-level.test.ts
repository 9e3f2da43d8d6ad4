/** The top-level JSON scanner, against `JSON.parse(TextDecoder fatal)` as the reference. */
import { describe, it, expect } from "vitest";
import fc from "fast-check";
import { scanTopLevel, TopLevelScanner, type ScanOptions, type ScanResult, type TopLevelValue } from "../../src/protocol/json-top-level.ts";

const WANTED: ReadonlySet<string> = new Set(["model", "stream", "user", "messages", "__proto__"]);
const encoder = new TextEncoder();
const BOM = [0xef, 0xbb, 0xbf];

function utf8(text: string): Uint8Array {
  return encoder.encode(text);
}

function scan(text: string | Uint8Array, options?: ScanOptions): ScanResult {
  return scanTopLevel(typeof text === "string" ? utf8(text) : text, WANTED, options);
}

/** The fields of a successful scan, as a plain object for readable expectations. */
function fieldsOf(text: string | Uint8Array, options?: ScanOptions): Record<string, TopLevelValue> {
  const result = scan(text, options);
  if (!result.ok) throw new Error(`expected ok, got ${result.reason} at ${result.offset}`);
  return Object.fromEntries(result.fields);
}

function failureOf(text: string | Uint8Array, options?: ScanOptions): { reason: string; offset: number } {
  const result = scan(text, options);
  if (result.ok) throw new Error("expected a failure, got ok");
  return { reason: result.reason, offset: result.offset };
}

function reasonOf(text: string | Uint8Array, options?: ScanOptions): string {
  const result = scan(text, options);
  return result.ok ? "ok" : result.reason;
}

type Reference =
  | { kind: "invalid_utf8" | "invalid_json" | "not_an_object" }
  | { kind: "ok"; object: Record<string, unknown> };

function reference(bytes: Uint8Array): Reference {
  let text: string;
  try {
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    return { kind: "invalid_utf8" };
  }
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return { kind: "invalid_json" };
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return { kind: "not_an_object" };
  return { kind: "ok", object: value as Record<string, unknown> };
}

/** What the scanner should report for a parsed member value (an object: its type; where it lies is checked against the bytes). */
function describeValue(value: unknown): TopLevelValue | { type: "object" } {
  if (typeof value === "string") return { type: "string", value };
  if (typeof value === "number") return { type: "number", value };
  if (value === true) return { type: "true" };
  if (value === false) return { type: "false" };
  if (value === null) return { type: "null" };
  if (Array.isArray(value)) return { type: "array", length: value.length };
  return { type: "object" };
}

/**
 * Checks the scanner against the reference on `bytes` and returns the scan.
 * `too_deep` has no counterpart in the reference: it is only checked not to
 * hide bad UTF-8. Plain comparisons, one `expect` on a mismatch: thousands of
 * runs stay fast.
 */
function expectAgreement(bytes: Uint8Array, options?: ScanOptions): ScanResult {
  const got = scanTopLevel(bytes, WANTED, options);
  scanned.set(got, bytes);
  const want = reference(bytes);
  const mismatch = disagreement(got, want, options?.maxStringBytes ?? 4096);
  if (mismatch !== undefined) expect({ bytes: [...bytes], text: new TextDecoder().decode(bytes), got, want }).toBe(mismatch);
  return got;
}

/** The bytes a scan was made of (expectAgreement notes them: an object's offsets index them). */
const scanned = new WeakMap<ScanResult, Uint8Array>();
const bytesOf = (r: ScanResult) => scanned.get(r);

function disagreement(got: ScanResult, want: Reference, maxStringBytes: number): string | undefined {
  if (!got.ok && got.reason === "too_deep") return want.kind === "invalid_utf8" ? "too_deep hides invalid_utf8" : undefined;
  if ((got.ok ? "ok" : got.reason) !== want.kind) return "a different outcome";
  if (!got.ok || want.kind !== "ok") return undefined;
  for (const key of got.fields.keys()) if (!WANTED.has(key)) return `unwanted key ${key}`;
  for (const key of WANTED) {
    const field = got.fields.get(key);
    if (!Object.hasOwn(want.object, key)) {
      if (field !== undefined) return `${key} reported but absent`;
      continue;
    }
    const expected = describeValue(want.object[key]);
    if (field?.type === "object") {
      // An object is reported by where it lies: those bytes are the member's value.
      const at = bytesOf(got);
      if (at === undefined || JSON.stringify(JSON.parse(new TextDecoder().decode(at.subarray(field.start, field.end)))) !== JSON.stringify(want.object[key])) return `${key}'s object is not where it is reported`;
    } else if (field?.type === "string" && field.value === undefined) {
      if (expected.type !== "string" || field.rawBytes <= maxStringBytes) return `${key} wrongly left undecoded`;
    } else if (JSON.stringify(field) !== JSON.stringify(expected)) {
      return `${key} reported wrongly`;
    }
  }
  return undefined;
}

function depthOf(value: unknown): number {
  if (typeof value !== "object" || value === null) return 0;
  const children = Array.isArray(value) ? value : Object.values(value);
  return 1 + children.reduce<number>((most, child) => Math.max(most, depthOf(child)), 0);
}

// ---------------------------------------------------------------------------
// Generators

/** Single code units that stress strings: lone surrogates, BOM, separators, escapes. */
const trickyUnit = fc.oneof(
  fc.constantFrom("\ud800", "\udbff", "\udc00", "\udfff", "\ufeff", "\u2028", "\u0000", "\u001f", "\u007f", '"', "\\", "/", "é", "😀"),
  fc.string({ unit: "binary", minLength: 1, maxLength: 1 }),
);

const jsonValue = fc.oneof(
  fc.jsonValue({ maxDepth: 4 }),
  fc.jsonValue({ maxDepth: 3, stringUnit: "binary" }),
  fc.jsonValue({ maxDepth: 3, stringUnit: trickyUnit }),
);

const memberKey = fc.oneof(
  fc.constantFrom("model", "stream", "user", "messages", "__proto__", "Model", "mode", "models", "model ", "a", ""),
  fc.string({ unit: trickyUnit, maxLength: 4 }),
);

/** A top-level object as written, duplicates allowed, or any other JSON value. */
const document = fc.oneof(
  { weight: 4, arbitrary: fc.array(fc.tuple(memberKey, jsonValue), { maxLength: 8 }).map((entries) => ({ entries })) },
  { weight: 1, arbitrary: jsonValue.map((value) => ({ value })) },
);
type Document = { entries: [string, fc.JsonValue][] } | { value: fc.JsonValue };

/** How a document is written: whitespace between tokens and which strings are fully `\u`-escaped. */
const layout = fc.record({
  whitespace: fc.array(fc.stringMatching(/^[ \t\n\r]{0,3}$/), { minLength: 1, maxLength: 8 }),
  escapes: fc.array(fc.constantFrom("none", "lower", "upper"), { minLength: 1, maxLength: 5 }),
  bom: fc.boolean(),
});
type Layout = { whitespace: string[]; escapes: ("none" | "lower" | "upper")[]; bom: boolean };

function write(doc: Document, layout: Layout): Uint8Array {
  let wsAt = 0;
  let escAt = 0;
  const ws = () => layout.whitespace[wsAt++ % layout.whitespace.length]!;
  const str = (s: string) => {
    const mode = layout.escapes[escAt++ % layout.escapes.length]!;
    if (mode === "none") return JSON.stringify(s);
    let out = '"';
    for (let k = 0; k < s.length; k++) {
      const hex = s.charCodeAt(k).toString(16).padStart(4, "0");
      out += "\\u" + (mode === "upper" ? hex.toUpperCase() : hex);
    }
    return out + '"';
  };
  const value = (v: fc.JsonValue): string => {
    if (typeof v === "string") return str(v);
    if (Array.isArray(v)) return `[${ws()}${v.map((x) => value(x) + ws()).join(`,${ws()}`)}]`;
    if (typeof v === "object" && v !== null) return object(Object.entries(v) as [string, fc.JsonValue][]);
    return JSON.stringify(v);
  };
  const object = (entries: [string, fc.JsonValue][]): string =>
    `{${ws()}${entries.map(([k, v]) => `${str(k)}${ws()}:${ws()}${value(v)}${ws()}`).join(`,${ws()}`)}}`;
  const text = ws() + ("entries" in doc ? object(doc.entries) : value(doc.value)) + ws();
  const bytes = utf8(text);
  return layout.bom ? new Uint8Array([...BOM, ...bytes]) : bytes;
}

const interestingByte = fc.constantFrom(
  0x00, 0x09, 0x0a, 0x0b, 0x0c, 0x0d, 0x1f, 0x20, 0x22, 0x2b, 0x2c, 0x2d, 0x2e, 0x2f, 0x30, 0x31, 0x3a, 0x45, 0x5b, 0x5c,
  0x5d, 0x65, 0x66, 0x6e, 0x74, 0x75, 0x7b, 0x7d, 0x7f, 0x80, 0xa0, 0xbf, 0xc0, 0xc1, 0xc2, 0xdf, 0xe0, 0xed, 0xef, 0xf0,
  0xf4, 0xf5, 0xff,
);
const anyByte = fc.oneof(fc.integer({ min: 0, max: 255 }), interestingByte);

const mutation = fc.oneof(
  fc.record({ op: fc.constant("set" as const), at: fc.nat(), byte: anyByte }),
  fc.record({ op: fc.constant("insert" as const), at: fc.nat(), bytes: fc.array(anyByte, { minLength: 1, maxLength: 4 }) }),
  fc.record({ op: fc.constant("delete" as const), at: fc.nat(), count: fc.integer({ min: 1, max: 4 }) }),
  fc.record({ op: fc.constant("truncate" as const), at: fc.nat() }),
);
type Mutation = { op: "set"; at: number; byte: number } | { op: "insert"; at: number; bytes: number[] } | { op: "delete"; at: number; count: number } | { op: "truncate"; at: number };

function mutate(bytes: Uint8Array, mutations: Mutation[]): Uint8Array {
  let out = [...bytes];
  for (const m of mutations) {
    const at = m.at % (out.length + 1);
    if (m.op === "set" && at < out.length) out[at] = m.byte;
    else if (m.op === "insert") out.splice(at, 0, ...m.bytes);
    else if (m.op === "delete") out.splice(at, m.count);
    else if (m.op === "truncate") out = out.slice(0, at);
  }
  return new Uint8Array(out);
}

/** Fragments that often make near-valid JSON when strung together at random, alone or as the value of `model`. */
const fragment = fc.constantFrom(
  "{", "}", "[", "]", ",", ":", '"', '"model"', '"user"', '"x"', '"\\u0041"', '"\\ud800"', "\\", "\\u", "0", "1", "-", ".", "e", "E",
  "+", "00", "12", "true", "false", "null", "tru", " ", "\t", "\n", "\r", "\u000b", "\u00a0", "\ufeff", "é", "😀", "\u0000",
);
const soup = fc.tuple(fc.boolean(), fc.boolean(), fc.array(fragment, { maxLength: 24 })).map(([bom, asMember, parts]) => {
  const text = asMember ? `{"model":${parts.join("")}}` : parts.join("");
  return bom ? new Uint8Array([...BOM, ...utf8(text)]) : utf8(text);
});

// ---------------------------------------------------------------------------

describe("scanTopLevel: OpenAI-like bodies", () => {
  it("reports model, stream and user and skips the rest", () => {
    const body = JSON.stringify({
      model: "llama-3-8b",
      messages: [{ role: "system", content: "be brief" }, { role: "user", content: "hi" }],
      stream: true,
      temperature: 0.7,
      user: "alice",
    });
    expect(fieldsOf(body)).toEqual({
      model: { type: "string", value: "llama-3-8b" },
      messages: { type: "array", length: 2 },
      stream: { type: "true" },
      user: { type: "string", value: "alice" },
    });
  });

  it("finds model after a large messages array", () => {
    const messages = Array.from({ length: 2000 }, (_, k) => ({ role: "user", content: `message ${k} with "quotes" and é` }));
    expect(fieldsOf(JSON.stringify({ messages, stream: false, model: "m" }))).toEqual({
      messages: { type: "array", length: 2000 },
      stream: { type: "false" },
      model: { type: "string", value: "m" },
    });
  });

  it("reports only wanted keys that are present", () => {
    expect(fieldsOf('{"prompt":"x","max_tokens":5}')).toEqual({});
    expect(fieldsOf("{}")).toEqual({});
    expect(fieldsOf(" \t\r\n{ \t\r\n} \t\r\n")).toEqual({});
  });

  it("reports every kind of value by type", () => {
    expect(fieldsOf('{"model":12.5e3,"stream":null,"user":{"a":[1]},"messages":[]}')).toEqual({
      model: { type: "number", value: 12500 },
      stream: { type: "null" },
      user: { type: "object", start: 37, end: 46 },
      messages: { type: "array", length: 0 },
    });
  });

  it("counts only the direct elements of a top-level array", () => {
    expect(fieldsOf('{"messages":[[1,2,3],{"a":[4,5]},"s",7,[]]}')).toEqual({ messages: { type: "array", length: 5 } });
  });

  it("lets the last of duplicate keys win, whatever the types", () => {
    expect(fieldsOf('{"model":"a","model":"b"}')).toEqual({ model: { type: "string", value: "b" } });
    expect(fieldsOf('{"model":[1,2],"model":true}')).toEqual({ model: { type: "true" } });
    expect(fieldsOf('{"model":true,"model":[1,2]}')).toEqual({ model: { type: "array", length: 2 } });
    expect(fieldsOf('{"model":"a","mod\\u0065l":{}}')).toEqual({ model: { type: "object", start: 26, end: 28 } });
  });

  it("compares keys after resolving their escapes", () => {
    expect(fieldsOf('{"mod\\u0065l":"x","\\u0075\\u0073\\u0065\\u0072":"u"}')).toEqual({
      model: { type: "string", value: "x" },
      user: { type: "string", value: "u" },
    });
    expect(fieldsOf('{"Model":"x","model\\u0000":"y"," model":"z"}')).toEqual({});
  });

  it("does not report a wanted key nested below the top level", () => {
    expect(fieldsOf('{"messages":[{"model":"inner"}],"meta":{"model":"deeper","user":"u"}}')).toEqual({
      messages: { type: "array", length: 1 },
    });
  });

  it("skips long keys without mistaking them for wanted ones", () => {
    const long = "model".repeat(100);
    expect(fieldsOf(`{"${long}":"no","${"\\u006d".repeat(60)}":1,"model":"yes"}`)).toEqual({
      model: { type: "string", value: "yes" },
    });
  });

  it("reports a __proto__ member as an ordinary key", () => {
    expect(fieldsOf('{"__proto__":{"model":"x"}}')).toEqual({ ["__proto__"]: { type: "object", start: 13, end: 26 } });
  });
});

describe("scanTopLevel: strings", () => {
  it("resolves every escape", () => {
    const text = '{"model":"\\"\\\\\\/\\b\\f\\n\\r\\t\\u0041\\u00e9\\uD83D\\uDE00\\u20AC"}';
    expect(fieldsOf(text)).toEqual({ model: { type: "string", value: '"\\/\b\f\n\r\tAé😀€' } });
    expect(fieldsOf(text).model).toEqual({ type: "string", value: (JSON.parse(text) as { model: string }).model });
  });

  it("keeps lone surrogate escapes, as JSON.parse does", () => {
    expect(fieldsOf('{"model":"\\ud800x\\udfff"}')).toEqual({ model: { type: "string", value: "\ud800x\udfff" } });
  });

  it("keeps a U+FEFF at the start of a value", () => {
    expect(fieldsOf('{"model":"\ufeffm"}')).toEqual({ model: { type: "string", value: "\ufeffm" } });
    expect(fieldsOf('{"model":"\\n\ufeffm"}')).toEqual({ model: { type: "string", value: "\n\ufeffm" } });
  });

  it("decodes raw UTF-8 of every length", () => {
    expect(fieldsOf('{"model":"aé€😀\u{10ffff}"}')).toEqual({ model: { type: "string", value: "aé€😀\u{10ffff}" } });
  });

  it("refuses invalid escapes", () => {
    expect(failureOf('{"model":"\\x"}')).toEqual({ reason: "invalid_json", offset: 11 });
    expect(failureOf('{"model":"\\u12"}')).toEqual({ reason: "invalid_json", offset: 14 });
    expect(reasonOf('{"model":"\\u12G4"}')).toBe("invalid_json");
    expect(reasonOf('{"model":"\\U0041"}')).toBe("invalid_json");
    expect(reasonOf('{"model":"\\\'"}')).toBe("invalid_json");
    expect(reasonOf('{"model":"\\')).toBe("invalid_json");
  });

  it("refuses raw control characters inside strings, but not DEL", () => {
    expect(failureOf('{"model":"a\u0001"}')).toEqual({ reason: "invalid_json", offset: 11 });
    expect(reasonOf('{"x":"\t"}')).toBe("invalid_json");
    expect(reasonOf('{"x":"\n"}')).toBe("invalid_json");
    expect(reasonOf('{"x\u001f":1}')).toBe("invalid_json");
    expect(reasonOf('{"x":"\u007f"}')).toBe("ok");
  });

  it("refuses an unterminated string", () => {
    expect(failureOf('{"model":"abc')).toEqual({ reason: "invalid_json", offset: 13 });
  });

  it("reports a value over maxStringBytes by its raw length without decoding it", () => {
    expect(fieldsOf(`{"model":"${"x".repeat(5000)}"}`)).toEqual({ model: { type: "string", value: undefined, rawBytes: 5000 } });
    expect(fieldsOf('{"model":"\\u0041bc"}', { maxStringBytes: 7 })).toEqual({ model: { type: "string", value: undefined, rawBytes: 8 } });
    expect(fieldsOf('{"model":"\\u0041b"}', { maxStringBytes: 7 })).toEqual({ model: { type: "string", value: "Ab" } });
  });

  it("still checks a string it does not decode", () => {
    expect(reasonOf(`{"model":"${"x".repeat(5000)}\\q"}`)).toBe("invalid_json");
    expect(reasonOf(new Uint8Array([...utf8(`{"model":"${"x".repeat(5000)}`), 0xc0, 0x80, ...utf8('"}')]))).toBe("invalid_utf8");
  });
});

describe("scanTopLevel: numbers", () => {
  it("accepts the JSON number grammar", () => {
    for (const n of ["0", "-0", "1e5", "1E+5", "1e-5", "0.5", "-0.0e0", "123456789012345678901234567890", "1e400", "-1.25E-10"]) {
      expect(fieldsOf(`{"model":${n}}`), n).toEqual({ model: { type: "number", value: Number(n) } });
      expect(fieldsOf(`{"model":[${n}]}`), n).toEqual({ model: { type: "array", length: 1 } });
    }
  });

  it("refuses what JSON.parse refuses", () => {
    for (const n of ["01", "-01", "1.", ".5", "+1", "-", "1e", "1e+", "1.e5", "0x10", "Infinity", "NaN", "--1", "1.5.5", "1ee5"]) {
      expect(reasonOf(`{"model":${n}}`), n).toBe("invalid_json");
      expect(reasonOf(n), n).toBe("invalid_json");
    }
  });

  it("reports where a number goes wrong", () => {
    expect(failureOf('{"a":01}')).toEqual({ reason: "invalid_json", offset: 6 });
    expect(failureOf('{"a":1.}')).toEqual({ reason: "invalid_json", offset: 7 });
    expect(failureOf('{"a":-}')).toEqual({ reason: "invalid_json", offset: 6 });
  });
});

describe("scanTopLevel: document structure", () => {
  it("refuses a valid document that is not an object", () => {
    for (const text of ["[]", "[1,{}]", '"model"', "1", "true", "null", " false "]) {
      expect(failureOf(text), text).toEqual({ reason: "not_an_object", offset: text.indexOf(text.trim()) });
    }
  });

  it("refuses broken structure", () => {
    for (const text of [
      "", " ", "{", "}", '{"a"}', '{"a":}', '{"a":1,}', "{,}", '{"a":1 "b":2}', '{"a" 1}', "{a:1}", "{'a':1}", '{"a":[1,]}',
      '{"a":[1 2]}', '{"a":[}', '{"a":{]}', '{"a":1]', '{"a":tru}', '{"a":nul}', '{"a":True}', '{"a":undefined}', "[1]]",
    ]) {
      expect(reasonOf(text), JSON.stringify(text)).toBe("invalid_json");
    }
  });

  it("refuses anything but whitespace after the value", () => {
    expect(failureOf('{"model":"x"} x')).toEqual({ reason: "invalid_json", offset: 14 });
    expect(reasonOf("{}{}")).toBe("invalid_json");
    expect(reasonOf("{}\u0000")).toBe("invalid_json");
    expect(reasonOf("[] 1")).toBe("invalid_json");
  });

  it("treats only space, tab, LF and CR as whitespace", () => {
    expect(reasonOf(' \t\n\r{ "model" \t\n\r: \t\n\r"x" \t\n\r} \t\n\r')).toBe("ok");
    for (const ws of ["\u000b", "\u000c", "\u00a0", "\u2028", "\ufeff", "\u3000"]) {
      expect(reasonOf(`{${ws}}`), JSON.stringify(ws)).toBe("invalid_json");
      expect(reasonOf(`{}${ws}`), JSON.stringify(ws)).toBe("invalid_json");
    }
  });

  it("skips one leading BOM, as TextDecoder does, and refuses a second", () => {
    expect(fieldsOf(new Uint8Array([...BOM, ...utf8('{"model":"x"}')]))).toEqual({ model: { type: "string", value: "x" } });
    expect(reasonOf(new Uint8Array([...BOM, ...BOM, ...utf8("{}")]))).toBe("invalid_json");
    expect(reasonOf(new Uint8Array([0x20, ...BOM, ...utf8("{}")]))).toBe("invalid_json");
    expect(reasonOf(new Uint8Array(BOM))).toBe("invalid_json");
    expect(failureOf(new Uint8Array([...BOM, ...utf8("[]")]))).toEqual({ reason: "not_an_object", offset: 3 });
  });

  it("allows exactly maxDepth levels of nesting", () => {
    const nested = (depth: number) => '{"a":' + "[".repeat(depth - 1) + "]".repeat(depth - 1) + "}";
    expect(reasonOf(nested(512))).toBe("ok");
    expect(failureOf(nested(513))).toEqual({ reason: "too_deep", offset: 5 + 511 });
    expect(reasonOf(nested(3), { maxDepth: 3 })).toBe("ok");
    expect(reasonOf(nested(4), { maxDepth: 3 })).toBe("too_deep");
    expect(reasonOf("{}", { maxDepth: 0 })).toBe("too_deep");
    expect(reasonOf("1", { maxDepth: 0 })).toBe("not_an_object");
  });

  it("refuses very deep input without overflowing the stack", () => {
    const deep = "[".repeat(1_000_000) + "]".repeat(1_000_000);
    expect(reasonOf(deep)).toBe("too_deep");
    expect(reasonOf(deep, { maxDepth: Infinity })).toBe("not_an_object");
    expect(reasonOf('{"a":' + deep + "}", { maxDepth: 2_000_000 })).toBe("ok");
  });
});

describe("scanTopLevel: UTF-8", () => {
  const invalid: [string, number[]][] = [
    ["a stray continuation byte", [0x80]],
    ["an overlong 2-byte form", [0xc0, 0xaf]],
    ["an overlong 2-byte lead C1", [0xc1, 0xbf]],
    ["an overlong 3-byte form", [0xe0, 0x80, 0xaf]],
    ["an overlong 4-byte form", [0xf0, 0x80, 0x80, 0xaf]],
    ["a UTF-8 encoded high surrogate", [0xed, 0xa0, 0x80]],
    ["a UTF-8 encoded low surrogate", [0xed, 0xbf, 0xbf]],
    ["a code point above U+10FFFF", [0xf4, 0x90, 0x80, 0x80]],
    ["a lead byte F5", [0xf5, 0x80, 0x80, 0x80]],
    ["a byte FF", [0xff]],
    ["a truncated 2-byte sequence", [0xc3]],
    ["a truncated 3-byte sequence", [0xe2, 0x82]],
    ["a truncated 4-byte sequence", [0xf0, 0x9f, 0x98]],
    ["a lead byte followed by ASCII", [0xe2, 0x41, 0x41]],
  ];

  for (const [what, seq] of invalid) {
    it(`refuses ${what} inside a string`, () => {
      const bytes = new Uint8Array([...utf8('{"model":"a'), ...seq, ...utf8('b"}')]);
      expect(failureOf(bytes)).toEqual({ reason: "invalid_utf8", offset: 11 });
    });
    it(`refuses ${what} outside a string`, () => {
      expect(reasonOf(new Uint8Array([...utf8("{} "), ...seq]))).toBe("invalid_utf8");
    });
  }

  it("accepts the edges of the valid ranges", () => {
    for (const cp of [0x7f, 0x80, 0x7ff, 0x800, 0xd7ff, 0xe000, 0xfffd, 0xfffe, 0xffff, 0x10000, 0x10ffff]) {
      const s = String.fromCodePoint(cp);
      expect(fieldsOf(`{"model":"${s}"}`), cp.toString(16)).toEqual({ model: { type: "string", value: s } });
    }
  });

  it("reports bad UTF-8 even after an earlier JSON error, as the reference decodes first", () => {
    expect(failureOf(new Uint8Array([...utf8('{"a":x, "'), 0xff, ...utf8('"}')]))).toEqual({ reason: "invalid_utf8", offset: 9 });
    const deep = "[".repeat(600);
    expect(failureOf(new Uint8Array([...utf8(deep), 0xc0]))).toEqual({ reason: "invalid_utf8", offset: 600 });
  });

  it("refuses a truncated BOM as bad UTF-8", () => {
    expect(reasonOf(new Uint8Array([0xef, 0xbb]))).toBe("invalid_utf8");
    expect(reasonOf(new Uint8Array([0xef, 0xbb, 0x7b, 0x7d]))).toBe("invalid_utf8");
  });
});

describe("scanTopLevel: a 10 MiB body", { timeout: 30_000 }, () => {
  const message = JSON.stringify({ role: "user", content: "lorem ipsum é€😀 \"quoted\" \\ ".repeat(30) });
  const count = Math.ceil((10 * 1024 * 1024) / (message.length + 1));
  const body = utf8(`{"messages":[${Array(count).fill(message).join(",")}],"stream":true,"model":"big"}`);
  const expected = {
    messages: { type: "array", length: count },
    stream: { type: "true" },
    model: { type: "string", value: "big" },
  };

  it("scans a 10 MiB messages array and finds model at the end", () => {
    expect(body.length).toBeGreaterThan(10 * 1024 * 1024);
    expect(fieldsOf(body)).toEqual(expected);
  });

  it("scans it pushed in 64 KiB chunks, and in chunks of an odd size", () => {
    for (const size of [64 * 1024, 65_537]) {
      const scanner = new TopLevelScanner(WANTED);
      for (let from = 0; from < body.length; from += size) expect(scanner.push(body.subarray(from, from + size))).toBeUndefined();
      const result = scanner.end();
      if (!result.ok) throw new Error(`expected ok, got ${result.reason} at ${result.offset}`);
      expect(Object.fromEntries(result.fields), `chunks of ${size}`).toEqual(expected);
    }
  });
});

// Thousands of runs each, about a second on an idle machine: the ceiling is
// there for a busy one, nothing here depends on timing.
describe("scanTopLevel agrees with JSON.parse(TextDecoder fatal)", { timeout: 30_000 }, () => {
  it("on generated documents, written with any whitespace and escaping", () => {
    fc.assert(
      fc.property(document, layout, (doc, lay) => {
        const result = expectAgreement(write(doc, lay));
        const isObject = "entries" in doc || (typeof doc.value === "object" && doc.value !== null && !Array.isArray(doc.value));
        expect(result.ok ? "ok" : result.reason).toBe(isObject ? "ok" : "not_an_object");
      }),
      { numRuns: 2000 },
    );
  });

  it("on generated documents with a small maxStringBytes", () => {
    fc.assert(
      fc.property(document, layout, fc.integer({ min: 0, max: 12 }), (doc, lay, maxStringBytes) => {
        expectAgreement(write(doc, lay), { maxStringBytes });
      }),
      { numRuns: 500 },
    );
  });

  it("refuses too_deep exactly when a valid document nests deeper than maxDepth", () => {
    fc.assert(
      fc.property(fc.jsonValue({ maxDepth: 8 }), fc.integer({ min: 0, max: 6 }), (value, maxDepth) => {
        const bytes = utf8(JSON.stringify({ value }));
        const got = expectAgreement(bytes, { maxDepth });
        expect(!got.ok && got.reason === "too_deep").toBe(1 + depthOf(value) > maxDepth);
      }),
      { numRuns: 1000 },
    );
  });

  it("on mutated documents", () => {
    fc.assert(
      fc.property(document, layout, fc.array(mutation, { minLength: 1, maxLength: 4 }), (doc, lay, mutations) => {
        expectAgreement(mutate(write(doc, lay), mutations));
      }),
      { numRuns: 3000 },
    );
  });

  it("on strings of JSON-like fragments", () => {
    fc.assert(
      fc.property(soup, (bytes) => {
        expectAgreement(bytes);
      }),
      { numRuns: 3000 },
    );
  });

  it("on random bytes", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 48 }), (bytes) => {
        expectAgreement(bytes);
      }),
      { numRuns: 2000 },
    );
  });

  it("on random bytes inside a string value", () => {
    fc.assert(
      fc.property(fc.array(anyByte, { maxLength: 16 }), (inner) => {
        expectAgreement(new Uint8Array([...utf8('{"model":"'), ...inner, ...utf8('"}')]));
      }),
      { numRuns: 2000 },
    );
  });
});

// ---------------------------------------------------------------------------
// The incremental scanner: any split of a document gives what the one-shot scan gives.

/** A scan result as a string, fields (in order) and all, for plain comparisons. */
function summary(result: ScanResult): string {
  return result.ok ? JSON.stringify({ ok: true, fields: [...result.fields] }) : JSON.stringify(result);
}

/**
 * Pushes `bytes` cut at `cuts` (offsets, in any order, repeats allowed: empty
 * chunks are pushed too), each chunk a fresh copy that is overwritten right
 * after the push, as a caller reusing its buffer would. Checks the contract
 * of `push` on the way: a failure only once it is final (`invalid_utf8`,
 * what the whole scan gives), then the same object every time after.
 */
function scanInChunks(bytes: Uint8Array, cuts: readonly number[], options?: ScanOptions): ScanResult {
  const scanner = new TopLevelScanner(WANTED, options);
  const ends = [...cuts.map((cut) => Math.min(cut, bytes.length)).sort((a, b) => a - b), bytes.length];
  let early: ScanResult | undefined;
  let from = 0;
  for (const end of ends) {
    const chunk = bytes.slice(from, end);
    const failure = scanner.push(chunk);
    chunk.fill(0x5c);
    if (early !== undefined && failure !== early) expect({ failure, early }).toBe("a different failure from a later push");
    if (early === undefined && failure !== undefined) {
      if (failure.reason !== "invalid_utf8" || failure.offset >= end) expect({ failure, end }).toBe("an early failure that is not final");
      early = failure;
    }
    from = end;
  }
  const result = scanner.end();
  if (early !== undefined && result !== early) expect({ result, early }).toBe("end() differs from the failure push returned");
  if (scanner.end() !== result) expect("end() twice").toBe("the same result");
  return result;
}

/** The incremental scan of `bytes` cut at `cuts` must equal the one-shot scan. One `expect` on a mismatch. */
function expectSameInChunks(bytes: Uint8Array, cuts: readonly number[], options?: ScanOptions): void {
  const want = summary(scanTopLevel(bytes, WANTED, options));
  const got = summary(scanInChunks(bytes, cuts, options));
  if (got !== want) expect({ bytes: [...bytes], cuts, options, got }).toEqual({ bytes: [...bytes], cuts, options, got: want });
}

/** Up to 19 cuts, anywhere (fitted to the document by the caller), and for a short document, sometimes a byte a chunk. */
const cuts = fc.oneof(
  { weight: 4, arbitrary: fc.array(fc.nat(), { maxLength: 19 }).map((at) => ({ at, bytewise: false })) },
  { weight: 1, arbitrary: fc.constant({ at: [] as number[], bytewise: true }) },
);

function cutsFor(bytes: Uint8Array, split: { at: number[]; bytewise: boolean }): number[] {
  if (split.bytewise && bytes.length <= 256) return Array.from({ length: bytes.length }, (_, k) => k);
  return split.at.map((at) => at % (bytes.length + 1));
}

// As above: thousands of runs, a few seconds at most; the ceiling is for a busy machine.
describe("TopLevelScanner: any split gives the one-shot result", { timeout: 60_000 }, () => {
  it("on generated documents", () => {
    fc.assert(
      fc.property(document, layout, cuts, (doc, lay, split) => {
        const bytes = write(doc, lay);
        expectSameInChunks(bytes, cutsFor(bytes, split));
      }),
      { numRuns: 2000 },
    );
  });

  it("on generated documents with a small maxStringBytes or maxDepth", () => {
    fc.assert(
      fc.property(document, layout, cuts, fc.integer({ min: 0, max: 12 }), fc.integer({ min: 0, max: 5 }), (doc, lay, split, maxStringBytes, maxDepth) => {
        const bytes = write(doc, lay);
        expectSameInChunks(bytes, cutsFor(bytes, split), { maxStringBytes });
        expectSameInChunks(bytes, cutsFor(bytes, split), { maxDepth });
      }),
      { numRuns: 1000 },
    );
  });

  it("on mutated documents", () => {
    fc.assert(
      fc.property(document, layout, fc.array(mutation, { minLength: 1, maxLength: 4 }), cuts, (doc, lay, mutations, split) => {
        const bytes = mutate(write(doc, lay), mutations);
        expectSameInChunks(bytes, cutsFor(bytes, split));
      }),
      { numRuns: 2000 },
    );
  });

  it("on strings of JSON-like fragments", () => {
    fc.assert(
      fc.property(soup, cuts, (bytes, split) => {
        expectSameInChunks(bytes, cutsFor(bytes, split));
      }),
      { numRuns: 2000 },
    );
  });

  it("on random bytes, alone and inside a string value", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 48 }), fc.array(anyByte, { maxLength: 16 }), cuts, (bytes, inner, split) => {
        expectSameInChunks(bytes, cutsFor(bytes, split));
        const member = new Uint8Array([...utf8('{"model":"'), ...inner, ...utf8('"}')]);
        expectSameInChunks(member, cutsFor(member, split), { maxStringBytes: 6 });
      }),
      { numRuns: 1500 },
    );
  });
});

describe("TopLevelScanner: every split point of tricky documents", () => {
  const long = "model".repeat(20);
  const tricky: (string | number[])[] = [
    '{"model":"a\\u00e9\\uD83D\\uDE00b\\u20AC","user":"\\"\\\\\\/\\b\\f\\n\\r\\t"}',
    '{"model":"\\ud800x\\udfff","stream":"\\uDBFF\\uDFFF"}',
    '{"mod\\u0065l":"x","\\u0075\\u0073\\u0065\\u0072":"u","stream":true}',
    `{"${long}":"no","${"\\u006d".repeat(8)}":1,"model":"yes","user":"${"y".repeat(40)}"}`,
    '{"model":"aé€😀\u{10ffff}","user":"😀é","stream":"\u{10000}\u07ff\u0800"}',
    '{"model":"\ufeffm","user":"\\n\ufeff"}',
    [...BOM, ...utf8('{"model":"x","stream":false}')],
    [...BOM, ...utf8("[]")],
    [...BOM, ...BOM, ...utf8("{}")],
    [0x20, ...BOM, ...utf8("{}")],
    BOM,
    [0xef, 0xbb],
    [0xef, 0xbb, 0x7b, 0x7d],
    [0xef, 0xbb, 0xbe],
    '{"a":123,"b":1.5,"c":1e+5,"d":-0.0E-0,"e":12E-3,"model":-12,"stream":0}',
    '{"messages":[0,-0,1.25,9e9,-1E+2,[1,[2]],{"a":[3]},"s",true,null],"model":[],"user":{}}',
    '{"model":true,"stream":false,"user":null,"messages":[true,false,null]}',
    " \t\r\n{ \t\r\n\"model\" \t\r\n: \t\r\n\"x\" \t\r\n, \"stream\" : 1 \t\r\n} \t\r\n",
    "123",
    " -1.5e3 ",
    "0",
    "[1,{}]",
    '"model"',
    "true",
    "",
    "{",
    '{"a":1.',
    '{"a":-',
    '{"a":1e',
    '{"a":1e+',
    '{"a":01}',
    '{"a":1.e5}',
    '{"a":tru}',
    '{"a":nul',
    '{"a":True}',
    '{"model":"\\u12G4"}',
    '{"model":"\\u12',
    '{"model":"\\x"}',
    '{"model":"\\',
    '{"model":"abc',
    '{"a":1,}',
    '{"a":1} x',
    '{"model":"x"}{}',
    '{"a":"\u0001"}',
    '{"a":[[[[1]]]]}',
    [...utf8('{"model":"a'), 0xc3, ...utf8('"}')],
    [...utf8('{"model":"a'), 0xe2, 0x82, ...utf8('"}')],
    [...utf8('{"model":"a'), 0xf0, 0x9f, 0x98, ...utf8('"}')],
    [...utf8('{"model":"a'), 0xed, 0xa0, 0x80, ...utf8('"}')],
    [...utf8('{"model":"a'), 0xf4, 0x90, 0x80, 0x80, ...utf8('"}')],
    [...utf8('{"model":"a'), 0xe0, 0x80, 0xaf, ...utf8('"}')],
    [...utf8('{"model":"a'), 0xc0, 0xaf, ...utf8('"}')],
    [...utf8('{"a":x, "'), 0xff, ...utf8('"}')],
    [...utf8('{"a":x, "é€😀"'), 0xe2, 0x82],
    [...utf8("{} "), 0xf0, 0x9f, 0x98, 0x80],
    [...utf8("{} "), 0xf0, 0x9f, 0x98],
    [...utf8('{"a":[[[[1'), 0xc3, 0xa9, 0xc0],
    [...utf8('{"model":"'), 0xc3],
  ];
  const bytesOf = (doc: string | number[]) => (typeof doc === "string" ? utf8(doc) : new Uint8Array(doc));
  const optionSets: (ScanOptions | undefined)[] = [undefined, { maxStringBytes: 3 }, { maxDepth: 3 }];

  it("gives the one-shot result cut at any one point, and a byte a chunk", () => {
    for (const doc of tricky) {
      const bytes = bytesOf(doc);
      for (const options of optionSets) {
        for (let cut = 0; cut <= bytes.length; cut++) expectSameInChunks(bytes, [cut], options);
        expectSameInChunks(bytes, Array.from({ length: bytes.length }, (_, k) => k), options);
      }
    }
  });

  it("gives the one-shot result cut at any two points", () => {
    for (const doc of tricky) {
      const bytes = bytesOf(doc);
      if (bytes.length > 80) continue;
      for (let a = 0; a <= bytes.length; a++) for (let b = a; b <= bytes.length; b++) expectSameInChunks(bytes, [a, b]);
    }
  });

  it("agrees with the reference on the tricky documents", () => {
    for (const doc of tricky) expectAgreement(bytesOf(doc));
  });
});

describe("TopLevelScanner: the contract of push and end", () => {
  it("returns invalid_utf8 from push as soon as it is certain, and keeps returning it", () => {
    const scanner = new TopLevelScanner(WANTED);
    expect(scanner.push(utf8('{"model":"a'))).toBeUndefined();
    expect(scanner.push(new Uint8Array([0xe2]))).toBeUndefined(); // could still be a good sequence
    const failure = scanner.push(new Uint8Array([0x82, 0x41]));
    expect(failure).toEqual({ ok: false, reason: "invalid_utf8", offset: 11 });
    expect(scanner.push(utf8('"}'))).toBe(failure);
    expect(scanner.end()).toBe(failure);
  });

  it("leaves a JSON error to end(), as bad UTF-8 later would outrank it", () => {
    const scanner = new TopLevelScanner(WANTED);
    expect(scanner.push(utf8('{"a":x, "é'))).toBeUndefined();
    expect(scanner.push(utf8('"}'))).toBeUndefined();
    expect(scanner.end()).toEqual({ ok: false, reason: "invalid_json", offset: 5 });

    const later = new TopLevelScanner(WANTED);
    expect(later.push(utf8('{"a":x, "'))).toBeUndefined();
    expect(later.push(new Uint8Array([0xf0, 0x9f]))).toBeUndefined();
    expect(later.push(new Uint8Array([0x98, 0x22]))).toEqual({ ok: false, reason: "invalid_utf8", offset: 9 });
    expect(later.end()).toEqual({ ok: false, reason: "invalid_utf8", offset: 9 });
  });

  it("reports a document cut short, a number at the very end and a UTF-8 sequence cut by the end at end()", () => {
    const end = (...chunks: string[]) => {
      const scanner = new TopLevelScanner(WANTED);
      for (const chunk of chunks) expect(scanner.push(utf8(chunk))).toBeUndefined();
      return scanner.end();
    };
    expect(end('{"model":"x"', "}")).toMatchObject({ ok: true });
    expect(end('{"model":"x"')).toEqual({ ok: false, reason: "invalid_json", offset: 12 });
    expect(end('{"model":1', "2")).toEqual({ ok: false, reason: "invalid_json", offset: 11 });
    expect(end("1", "2")).toEqual({ ok: false, reason: "not_an_object", offset: 0 });
    expect(end("1.", "5e", "+")).toEqual({ ok: false, reason: "invalid_json", offset: 5 });
    const cut = new TopLevelScanner(WANTED);
    expect(cut.push(new Uint8Array([...utf8('{"model":"'), 0xf0, 0x9f, 0x98]))).toBeUndefined();
    expect(cut.end()).toEqual({ ok: false, reason: "invalid_utf8", offset: 10 });
  });

  it("refuses a push after end()", () => {
    const scanner = new TopLevelScanner(WANTED);
    scanner.push(utf8("{}"));
    expect(scanner.end()).toMatchObject({ ok: true });
    expect(() => scanner.push(utf8(" "))).toThrow(/after end/);
  });

  it("checks its options when constructed", () => {
    expect(() => new TopLevelScanner(WANTED, { maxDepth: -1 })).toThrow(RangeError);
    expect(() => new TopLevelScanner(WANTED, { maxStringBytes: Number.NaN })).toThrow(RangeError);
  });
});
