/**
 * Python's semantics in @huggingface/jinja where chat templates rely on them (issue 55),
 * fixed in one place: the engine's string values and its `trim` filter, patched once
 * when this module is first imported (hf-codec.ts imports it before it makes a
 * Template). vLLM renders templates with Python's jinja2, so a template that calls
 * `content.lstrip('\n')` strips newlines only, not every space (Qwen3's reasoning
 * blocks), `|trim` strips Python's whitespace (U+0085 and U+001C–U+001F, not U+FEFF),
 * `|length` counts code points (Mistral's 9-character tool-call ids), and `==`, `!=`
 * and `in` a list compare by value as Python does: dicts and lists by their contents
 * (Mistral's template compares messages), `1 == "1"` false, `none == undefined` false
 * (JavaScript's loose `==` compared Maps by reference and coerced the rest); a boolean
 * prints as True or False. Values print as Python's str() prints them (`{{ }}`, `~`,
 * `|string`): a float as its repr (`2.0`, `1e-07`), None as None, a list or dict as its
 * repr; `|tojson` is transformers' filter, Python's json.dumps (floats as repr, NaN,
 * keys in their order, sort_keys by code point, indent and separators as Python lays
 * them out). The variables a template is given may hold JSON read as Python reads it
 * (py-json.ts: Maps, PyFloats, bigints): the engine's Environment.set takes them.
 *
 * The engine exports neither its value classes nor a hook, so the patch reaches them
 * through instances the exported Environment makes. The package is pinned
 * (package.json); test/unit/jinja-python.test.ts renders the same templates with
 * Python's jinja2 and fails if an upgrade moves what the patch relies on.
 */
import { Environment, Interpreter } from "@huggingface/jinja";
import { PyFloat } from "./py-json.ts";

/** Python's str.isspace(), one UTF-16 unit at a time (every such character is in the BMP). */
function pySpace(c: number): boolean {
  return (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x20) || c === 0x85 || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) || c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000;
}

/**
 * Python's str.strip / lstrip / rstrip: with no `chars` (or None), Python's whitespace;
 * else every code point in `chars`. Loops, not regexes: a regex anchored at the end
 * backtracks quadratically on a long run inside the string.
 */
export function pyStrip(s: string, chars: string | undefined, side: "both" | "left" | "right" = "both"): string {
  const set = chars === undefined ? undefined : new Set(Array.from(chars, (c) => c.codePointAt(0)!));
  const strips = (cp: number) => (set ? set.has(cp) : cp <= 0xffff && pySpace(cp));
  let start = 0;
  let end = s.length;
  if (side !== "right") {
    while (start < end) {
      const cp = s.codePointAt(start)!;
      if (!strips(cp)) break;
      start += cp > 0xffff ? 2 : 1;
    }
  }
  if (side !== "left") {
    while (end > start) {
      const lo = s.charCodeAt(end - 1);
      // A low surrogate ends a pair: the code point starts one unit earlier.
      const at = lo >= 0xdc00 && lo <= 0xdfff && end - 2 >= start && s.charCodeAt(end - 2) >= 0xd800 && s.charCodeAt(end - 2) <= 0xdbff ? end - 2 : end - 1;
      if (!strips(s.codePointAt(at)!)) break;
      end = at;
    }
  }
  return s.slice(start, end);
}

/** Python's len(str): code points, not UTF-16 units. */
export function pyLength(s: string): number {
  let n = s.length;
  for (let i = 0; i < s.length - 1; i++) {
    const c = s.charCodeAt(i);
    if (c >= 0xd800 && c <= 0xdbff) {
      const d = s.charCodeAt(i + 1);
      if (d >= 0xdc00 && d <= 0xdfff) {
        n--;
        i++;
      }
    }
  }
  return n;
}

/** Python's `==` over the engine's values: numbers (bools are ints) by value, strings exactly, lists and dicts by their contents, None and Undefined only with their own kind. */
function pyEquals(a: Value, b: Value): boolean {
  const numeric = (v: Value) => v.type === "IntegerValue" || v.type === "FloatValue" || v.type === "BooleanValue";
  if (numeric(a) && numeric(b)) return Number(a.value) === Number(b.value);
  if (a.type === "StringValue" || b.type === "StringValue") return a.type === b.type && a.value === b.value;
  if (a.type === "NullValue" || b.type === "NullValue" || a.type === "UndefinedValue" || b.type === "UndefinedValue") return a.type === b.type;
  if (a.type === "ArrayValue" && b.type === "ArrayValue") {
    const x = a.value as Value[];
    const y = b.value as Value[];
    return x.length === y.length && x.every((v, i) => pyEquals(v, y[i]!));
  }
  if (a.type === "ObjectValue" && b.type === "ObjectValue") {
    const x = a.value as Map<string, Value>;
    const y = b.value as Map<string, Value>;
    if (x.size !== y.size) return false;
    for (const [k, v] of x) {
      const w = y.get(k);
      if (w === undefined || !pyEquals(v, w)) return false;
    }
    return true;
  }
  return a.value === b.value;
}

/**
 * Python's repr() of a float (also its str(), and what json.dumps writes for a finite
 * one): the shortest digits that read back (as JavaScript's), laid out as Python does:
 * an exponent when the decimal point is more than 16 places right or 4 left of the
 * digits (`1e+16`, `1e-05`), else positional with at least one decimal (`2.0`).
 */
export function pyFloatRepr(x: number): string {
  if (Number.isNaN(x)) return "nan";
  if (!Number.isFinite(x)) return x > 0 ? "inf" : "-inf";
  if (x === 0) return Object.is(x, -0) ? "-0.0" : "0.0";
  const [mantissa, exponent] = x.toExponential().split("e") as [string, string];
  const negative = mantissa.startsWith("-");
  const digits = mantissa.replace("-", "").replace(".", "");
  const exp = Number(exponent);
  const point = exp + 1; // digits × 10^(point - digits.length)
  let out: string;
  if (point > 16 || point < -3) out = `${digits[0]}${digits.length > 1 ? `.${digits.slice(1)}` : ""}e${exp < 0 ? "-" : "+"}${String(Math.abs(exp)).padStart(2, "0")}`;
  else if (point <= 0) out = `0.${"0".repeat(-point)}${digits}`;
  else if (point >= digits.length) out = `${digits}${"0".repeat(point - digits.length)}.0`;
  else out = `${digits.slice(0, point)}.${digits.slice(point)}`;
  return negative ? `-${out}` : out;
}

// Python's str.isprintable(): every character but those of these general categories (the space excepted).
const UNPRINTABLE = /[\p{Cc}\p{Cf}\p{Cs}\p{Co}\p{Cn}\p{Zl}\p{Zp}\p{Zs}]/u;

/** Python's repr() of a str: single quotes unless it holds one and no double quote; unprintable characters escaped. */
export function pyStrRepr(s: string): string {
  const quote = s.includes("'") && !s.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of s) {
    const c = ch.codePointAt(0)!;
    if (ch === quote || ch === "\\") out += `\\${ch}`;
    else if (ch === "\t") out += "\\t";
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (c === 0x20 || !UNPRINTABLE.test(ch)) out += ch;
    else if (c < 0x100) out += `\\x${c.toString(16).padStart(2, "0")}`;
    else if (c < 0x10000) out += `\\u${c.toString(16).padStart(4, "0")}`;
    else out += `\\U${c.toString(16).padStart(8, "0")}`;
  }
  return out + quote;
}

/** Python's repr() of an engine value, as str() of a list or dict prints its items. */
function pyRepr(v: Value): string {
  switch (v.type) {
    case "StringValue":
      return pyStrRepr(v.value as string);
    case "FloatValue":
      return pyFloatRepr(v.value as number);
    case "BooleanValue":
      return v.value ? "True" : "False";
    case "NullValue":
    case "UndefinedValue":
      return "None";
    case "ArrayValue":
      return `[${(v.value as Value[]).map(pyRepr).join(", ")}]`;
    case "TupleValue": {
      const items = (v.value as Value[]).map(pyRepr);
      return items.length === 1 ? `(${items[0]},)` : `(${items.join(", ")})`;
    }
    case "ObjectValue":
    case "NamespaceValue":
      return `{${Array.from(v.value as Map<string, Value>, ([k, x]) => `${pyStrRepr(k)}: ${pyRepr(x)}`).join(", ")}}`;
    default:
      return String(v.value);
  }
}

/** Python's str() of an engine value: what `{{ }}`, `~` and `|string` print. */
function pyStr(v: Value): string {
  if (v.type === "StringValue") return v.value as string;
  if (v.type === "UndefinedValue") return "";
  return pyRepr(v);
}

/** json.dumps' options, as transformers' tojson filter passes them. */
interface DumpsOptions {
  ensureAscii: boolean;
  /** Newline and this per level; undefined: one line. */
  indent: string | undefined;
  itemSeparator: string;
  keySeparator: string;
  sortKeys: boolean;
}

/** Python's json.dumps over the engine's values (transformers' tojson). */
function pyDumps(v: Value, o: DumpsOptions, level: number): string {
  switch (v.type) {
    case "NullValue":
      return "null";
    case "BooleanValue":
      return v.value ? "true" : "false";
    case "IntegerValue":
      return String(v.value);
    case "FloatValue": {
      const x = v.value as number;
      return Number.isNaN(x) ? "NaN" : x === Infinity ? "Infinity" : x === -Infinity ? "-Infinity" : pyFloatRepr(x);
    }
    case "StringValue":
      return pyJsonString(v.value as string, o.ensureAscii);
    case "ArrayValue":
    case "TupleValue":
    case "ObjectValue":
    case "NamespaceValue": {
      const isList = v.type === "ArrayValue" || v.type === "TupleValue";
      let items: string[];
      if (isList) items = (v.value as Value[]).map((x) => pyDumps(x, o, level + 1));
      else {
        let entries = Array.from(v.value as Map<string, Value>);
        if (o.sortKeys) entries = entries.sort(([a], [b]) => codePointCompare(a, b));
        items = entries.map(([k, x]) => `${pyJsonString(k, o.ensureAscii)}${o.keySeparator}${pyDumps(x, o, level + 1)}`);
      }
      const [open, close] = isList ? ["[", "]"] : ["{", "}"];
      if (items.length === 0) return open + close;
      if (o.indent === undefined) return open + items.join(o.itemSeparator) + close;
      const inner = `\n${o.indent.repeat(level + 1)}`;
      return `${open}${inner}${items.join(o.itemSeparator + inner)}\n${o.indent.repeat(level)}${close}`;
    }
    default:
      // Python's json.dumps refuses what is not JSON (jinja2's Undefined, a function).
      throw new Error(`Object of type ${v.type} is not JSON serializable`);
  }
}

/** A str as json.dumps writes it: `"`, `\` and control characters escaped; with ensure_ascii, everything outside space..~ too. */
function pyJsonString(s: string, ensureAscii: boolean): string {
  // JSON.stringify writes what Python writes with ensure_ascii=False, but for a lone
  // surrogate (escaped there, written as it is by Python): the native path unless one is in it.
  if (!ensureAscii && (s as string & { isWellFormed(): boolean }).isWellFormed()) return JSON.stringify(s);
  const escape = ensureAscii ? /["\\]|[^\x20-\x7e]/g : /["\\\x00-\x1f]/g;
  return `"${s.replace(escape, (c) => JSON_ESCAPES[c] ?? `\\u${c.charCodeAt(0).toString(16).padStart(4, "0")}`)}"`;
}
const JSON_ESCAPES: Record<string, string> = { '"': '\\"', "\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t", "\b": "\\b", "\f": "\\f" };

/** Python's ordering of str: by code point (JavaScript's `<` compares UTF-16 units). */
function codePointCompare(a: string, b: string): number {
  const x = Array.from(a, (c) => c.codePointAt(0)!);
  const y = Array.from(b, (c) => c.codePointAt(0)!);
  for (let i = 0; i < Math.min(x.length, y.length); i++) if (x[i] !== y[i]) return x[i]! - y[i]!;
  return x.length - y.length;
}

/** A runtime value of the engine, as far as the patch reads it. */
interface Value {
  type: string;
  value: unknown;
  __bool__(): { value: unknown };
}
type ValueClass = new (value: unknown) => Value;
type Builtins = Map<string, Value>;

let patched = false;

/** Applies the patch (once; later calls do nothing). */
export function pythonSemantics(): void {
  if (patched) return;
  patched = true;
  // The engine's value classes, from values it makes of a sample (it exports none of them).
  const probe = new Environment();
  probe.set("v", { s: "x", i: 1, f: 1.5, b: true, n: null, a: [], o: {} });
  const made = (probe.lookupVariable("v") as unknown as Value).value as Map<string, Value>;
  const sample = made.get("s") as Value & { builtins: Builtins };
  const proto = Object.getPrototypeOf(sample) as object;
  const own = Object.getOwnPropertyDescriptor(proto, "builtins");
  const upper = sample.builtins.get("upper");
  const length = sample.builtins.get("length");
  if (sample.type !== "StringValue" || !own?.get || !upper || length?.type !== "IntegerValue") {
    throw new Error("@huggingface/jinja changed: its string values are not as jinja-python.ts patches them");
  }
  const StringValue = sample.constructor as ValueClass;
  const FunctionValue = upper.constructor as ValueClass;
  const IntegerValue = length.constructor as ValueClass;
  const getBuiltins = own.get;
  const patchedMaps = new WeakSet<Builtins>();
  /** A strip method: its optional argument a string (the characters) or None. */
  const stripper = (text: string, side: "both" | "left" | "right") =>
    new FunctionValue((args: Value[]) => {
      const a = args[0];
      if (a !== undefined && a.type !== "NullValue" && a.type !== "UndefinedValue" && a.type !== "StringValue") throw new Error("strip arg must be None or str");
      return new StringValue(pyStrip(text, a?.type === "StringValue" ? (a.value as string) : undefined, side));
    });
  Object.defineProperty(proto, "builtins", {
    configurable: true,
    get(this: Value) {
      const map = getBuiltins.call(this) as Builtins;
      if (!patchedMaps.has(map)) {
        patchedMaps.add(map);
        const text = this.value as string;
        map.set("strip", stripper(text, "both"));
        map.set("lstrip", stripper(text, "left"));
        map.set("rstrip", stripper(text, "right"));
        map.set("length", new IntegerValue(pyLength(text)));
      }
      return map;
    },
  });
  const classOf = (k: string) => made.get(k)!.constructor as ValueClass;
  const [FloatValue, BooleanValue, NullValue, ArrayValue, ObjectValue] = ["f", "b", "n", "a", "o"].map(classOf) as [ValueClass, ValueClass, ValueClass, ValueClass, ValueClass];
  const UndefinedValue = probe.lookupVariable("missing").constructor as ValueClass;
  if (made.get("i")?.constructor !== IntegerValue || made.get("f")?.type !== "FloatValue" || made.get("o")?.type !== "ObjectValue" || typeof made.get("o")!.__bool__ !== "function") {
    throw new Error("@huggingface/jinja changed: its values are not as jinja-python.ts reads them");
  }

  // What a template is given: JSON read as Python reads it (py-json.ts: a Map keeps the
  // order of its keys, a PyFloat stays a float, an int past 2^53 is a bigint), else as the engine would.
  const toRuntime = (input: unknown): Value => {
    if (input instanceof PyFloat) return new FloatValue(input.value);
    if (input instanceof Map) return new ObjectValue(new Map(Array.from(input, ([k, v]) => [String(k), toRuntime(v)])));
    if (Array.isArray(input)) return new ArrayValue(input.map(toRuntime));
    switch (typeof input) {
      case "number":
        return Number.isInteger(input) ? new IntegerValue(input) : new FloatValue(input);
      case "bigint":
        return new IntegerValue(input);
      case "string":
        return new StringValue(input);
      case "boolean":
        return new BooleanValue(input);
      case "undefined":
        return new UndefinedValue(undefined);
      case "function":
        return new FunctionValue((args: Value[]) => toRuntime((input as (...a: unknown[]) => unknown)(...args.map((x) => x.value)) ?? null));
      case "object":
        if (input === null) return new NullValue(null);
        return new ObjectValue(new Map(Object.entries(input).map(([k, v]) => [k, toRuntime(v)])));
      default:
        throw new Error(`Cannot convert to runtime value: ${String(input)}`);
    }
  };
  const environment = Environment.prototype as unknown as { set(name: string, value: unknown): unknown; declareVariable(name: string, value: Value): unknown };
  environment.set = function (this: typeof environment, name, value) {
    return this.declareVariable(name, toRuntime(value));
  };

  // Printed as Python's str() prints them: a float as its repr (`2.0`, `1e-07`), None, a list or dict as its repr.
  const printAs = (cls: ValueClass, print: (v: Value) => string) =>
    Object.defineProperty(cls.prototype as object, "toString", {
      configurable: true,
      value(this: Value) {
        return print(this);
      },
    });
  printAs(FloatValue, (v) => pyFloatRepr(v.value as number));
  for (const cls of [NullValue, ArrayValue, ObjectValue]) printAs(cls, pyStr);

  const interpreter = Interpreter.prototype as unknown as {
    applyFilter(operand: Value, filter: FilterNode, env: unknown): Value;
    evaluate(node: unknown, env: unknown): Value;
    evaluateArguments(args: unknown[], env: unknown): [Value[], Map<string, Value>];
    evaluateBinaryExpression(node: BinaryNode, env: unknown): Value;
    renderBlock(statements: { type: string }[], env: unknown): string;
    renderIf(node: unknown, env: unknown): string;
    renderFor(node: unknown, env: unknown): string;
    executeSet(node: unknown, env: unknown): void;
  };
  // `{{ none }}` prints None, as jinja2 does (the engine printed nothing); Undefined prints nothing in both.
  interpreter.renderBlock = function (this: typeof interpreter, statements, env) {
    let out = "";
    for (const statement of statements) {
      if (statement.type === "StringLiteral") out += (statement as unknown as { value: string }).value;
      else if (statement.type === "If") out += this.renderIf(statement, env);
      else if (statement.type === "For") out += this.renderFor(statement, env);
      else if (statement.type === "Set") this.executeSet(statement, env);
      else if (statement.type !== "Comment") {
        const v = this.evaluate(statement, env);
        if (v.type !== "UndefinedValue") out += v.toString();
      }
    }
    return out;
  };

  // `|trim`: jinja2's do_trim is str.strip(chars), Python's whitespace by default. `|string`:
  // Python's str(). `|tojson`: transformers' filter, json.dumps(x, ensure_ascii=False,
  // indent=None, separators=None, sort_keys=False) with those arguments by position or name.
  const applyFilter = interpreter.applyFilter;
  interpreter.applyFilter = function (this: typeof interpreter, operand, filter, environment) {
    if (filter.type === "Identifier" && filter.value === "trim" && operand.type === "StringValue") return new StringValue(pyStrip(operand.value as string, undefined));
    if (filter.type === "Identifier" && filter.value === "string") return new StringValue(pyStr(operand));
    if (filter.type === "Identifier" && filter.value === "tojson") return new StringValue(pyDumps(operand, dumpsOptions([], new Map()), 0));
    if (filter.type === "CallExpression" && filter.callee?.type === "Identifier" && filter.callee.value === "tojson") {
      const [args, kwargs] = this.evaluateArguments(filter.args ?? [], environment);
      return new StringValue(pyDumps(operand, dumpsOptions(args, kwargs), 0));
    }
    return applyFilter.call(this, operand, filter, environment);
  };
  // `==`, `!=`, and `in` / `not in` a list: Python's equality (pyEquals). The operands are
  // evaluated once; any other `in` goes to the engine with those values.
  // A boolean printed is Python's: True, False.
  Object.defineProperty(Object.getPrototypeOf(new BooleanValue(true)) as object, "toString", {
    configurable: true,
    value(this: Value) {
      return this.value ? "True" : "False";
    },
  });
  const binary = interpreter.evaluateBinaryExpression;
  interpreter.evaluateBinaryExpression = function (this: typeof interpreter, node, environment) {
    const op = node.operator.value;
    if (op !== "==" && op !== "!=" && op !== "in" && op !== "not in" && op !== "~") return binary.call(this, node, environment);
    const left = this.evaluate(node.left, environment);
    const right = this.evaluate(node.right, environment);
    // `~` joins Python's str() of each side (True, None, 2.0; Undefined as nothing).
    if (op === "~") return new StringValue(pyStr(left) + pyStr(right));
    if (op === "==" || op === "!=") return new BooleanValue(pyEquals(left, right) === (op === "=="));
    if (right.type === "ArrayValue") {
      const member = (right.value as Value[]).some((v) => pyEquals(left, v));
      return new BooleanValue(member === (op === "in"));
    }
    // The engine's own `in` on the values already evaluated (a string, a dict's keys, undefined).
    const evaluate = this.evaluate;
    this.evaluate = (n, env) => (n === node.left ? left : n === node.right ? right : evaluate.call(this, n, env));
    try {
      return binary.call(this, node, environment);
    } finally {
      delete (this as { evaluate?: unknown }).evaluate;
    }
  };
}

/** tojson's arguments after the value, by position or name, as json.dumps reads them. */
function dumpsOptions(args: Value[], kwargs: Map<string, Value>): DumpsOptions {
  const arg = (i: number, name: string) => kwargs.get(name) ?? args[i];
  // The engine's own truth of a value is Python's (an empty list or dict is false).
  const truthy = (v: Value | undefined) => v !== undefined && v.__bool__().value === true;
  const indentArg = arg(1, "indent");
  const indent = indentArg === undefined || indentArg.type === "NullValue" ? undefined : indentArg.type === "StringValue" ? (indentArg.value as string) : " ".repeat(Math.max(0, Number(indentArg.value)));
  const separators = arg(2, "separators");
  const pair = separators && (separators.type === "ArrayValue" || separators.type === "TupleValue") ? (separators.value as Value[]) : undefined;
  if (pair && (pair.length !== 2 || pair.some((p) => p.type !== "StringValue"))) throw new Error("separators must be two strings");
  return {
    ensureAscii: truthy(arg(0, "ensure_ascii")),
    indent,
    itemSeparator: pair ? (pair[0]!.value as string) : indent === undefined ? ", " : ",",
    keySeparator: pair ? (pair[1]!.value as string) : ": ",
    sortKeys: truthy(arg(3, "sort_keys")),
  };
}

/** A filter node of the engine: a name, or a call of one. */
interface FilterNode {
  type: string;
  value?: unknown;
  callee?: { type: string; value?: unknown };
  args?: unknown[];
}

/** The engine's binary expression node, as far as the patch reads it. */
interface BinaryNode {
  operator: { value: string };
  left: unknown;
  right: unknown;
}
