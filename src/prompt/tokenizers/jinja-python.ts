/**
 * Python's semantics in @huggingface/jinja where chat templates rely on them (issue 55),
 * fixed in one place: the engine's string values and its `trim` filter, patched once
 * when this module is first imported (hf-codec.ts imports it before it makes a
 * Template). vLLM renders templates with Python's jinja2, so a template that calls
 * `content.lstrip('\n')` strips newlines only, not every space (Qwen3's reasoning
 * blocks), `|trim` strips Python's whitespace (U+0085 and U+001C–U+001F, not U+FEFF),
 * and `|length` counts code points (Mistral's 9-character tool-call ids).
 *
 * The engine exports neither its value classes nor a hook, so the patch reaches them
 * through instances the exported Environment makes. The package is pinned
 * (package.json); test/unit/jinja-python.test.ts renders the same templates with
 * Python's jinja2 and fails if an upgrade moves what the patch relies on.
 */
import { Environment, Interpreter } from "@huggingface/jinja";

/** Python's str.isspace(), one UTF-16 unit at a time (every such character is in the BMP). */
export function pySpace(c: number): boolean {
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
  const interpreter = Interpreter.prototype as unknown as { applyFilter(operand: Value, filter: { type: string; value?: unknown }, env: unknown): Value };
  const applyFilter = interpreter.applyFilter;
  interpreter.applyFilter = function (this: unknown, operand, filter, environment) {
    if (filter.type === "Identifier" && filter.value === "trim" && operand.type === "StringValue") return new StringValue(pyStrip(operand.value as string, undefined));
    return applyFilter.call(this, operand, filter, environment);
  };
}
