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
 * prints as True or False.
 *
 * The engine exports neither its value classes nor a hook, so the patch reaches them
 * through instances the exported Environment makes. The package is pinned
 * (package.json); test/unit/jinja-python.test.ts renders the same templates with
 * Python's jinja2 and fails if an upgrade moves what the patch relies on.
 */
import { Environment, Interpreter } from "@huggingface/jinja";

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

/** A runtime value of the engine, as far as the patch reads it. */
interface Value {
  type: string;
  value: unknown;
}
type ValueClass = new (value: unknown) => Value;
type Builtins = Map<string, Value>;

let patched = false;

/** Applies the patch (once; later calls do nothing). */
export function pythonSemantics(): void {
  if (patched) return;
  patched = true;
  const env = new Environment();
  env.set("s", "x");
  const sample = env.lookupVariable("s") as unknown as Value & { builtins: Builtins };
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
  // `|trim`: jinja2's do_trim is str.strip(chars), Python's whitespace by default.
  const interpreter = Interpreter.prototype as unknown as {
    applyFilter(operand: Value, filter: { type: string; value?: unknown }, env: unknown): Value;
    evaluate(node: unknown, env: unknown): Value;
    evaluateBinaryExpression(node: BinaryNode, env: unknown): Value;
  };
  const applyFilter = interpreter.applyFilter;
  interpreter.applyFilter = function (this: unknown, operand, filter, environment) {
    if (filter.type === "Identifier" && filter.value === "trim" && operand.type === "StringValue") return new StringValue(pyStrip(operand.value as string, undefined));
    return applyFilter.call(this, operand, filter, environment);
  };
  // `==`, `!=`, and `in` / `not in` a list: Python's equality (pyEquals). The operands are
  // evaluated once; any other `in` goes to the engine with those values.
  const BooleanValue = (sample.builtins.get("startswith") as unknown as { value: (args: Value[]) => Value }).value([sample]).constructor as ValueClass;
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
    if (op !== "==" && op !== "!=" && op !== "in" && op !== "not in") return binary.call(this, node, environment);
    const left = this.evaluate(node.left, environment);
    const right = this.evaluate(node.right, environment);
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

/** The engine's binary expression node, as far as the patch reads it. */
interface BinaryNode {
  operator: { value: string };
  left: unknown;
  right: unknown;
}
