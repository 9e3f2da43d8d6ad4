/**
 * Python's string semantics in the template engine (src/prompt/tokenizers/jinja-python.ts,
 * issue 55) against Python's own jinja2, as transformers compiles a chat template
 * (test/fixtures/hf-tokenizers/jinja-oracle.py runs transformers' own compile and its
 * tojson filter, in the cached virtualenv of hf-tokenizers.test.ts). Each class the
 * issue found has its named case: strip methods with an argument, Python's whitespace
 * set for `|trim` and the bare methods, lengths in code points, equality, and JSON as
 * Python reads it (py-json.ts) and prints it (floats, integer-like keys, NaN, big ints).
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonEnv } from "../../scripts/python-env.ts";
import { pyFloatRepr, pyLength, pyStrRepr, pyStrip, pythonSemantics } from "../../src/prompt/tokenizers/jinja-python.ts";
import { memberAsPython, pyJsonLoads, PyFloat, PyJsonError, MEMBER_CANDIDATES } from "../../src/prompt/tokenizers/py-json.ts";

const oracleScript = fileURLToPath(new URL("../fixtures/hf-tokenizers/jinja-oracle.py", import.meta.url));
let oracle: { ask(c: object): Promise<{ text?: string; error?: string }>; close(): void };

beforeAll(async () => {
  const python = await pythonEnv("hf-tokenizers", ["transformers==5.18.0", "jinja2==3.1.6"]);
  const child = spawn(python, [oracleScript], { stdio: ["pipe", "pipe", "inherit"] });
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: child.stdout }).on("line", (l) => waiting.shift()?.(l));
  oracle = {
    ask: (c) =>
      new Promise((resolve) => {
        waiting.push((l) => resolve(JSON.parse(l) as { text?: string; error?: string }));
        child.stdin.write(`${JSON.stringify(c)}\n`);
      }),
    close: () => child.stdin.end(),
  };
  pythonSemantics();
}, 600_000);

afterAll(() => oracle?.close());

/** Strings at the edges of each class: Python-only whitespace (U+0085, U+001C–U+001F), JS-only (U+FEFF), surrogate pairs, runs. */
const INPUTS = [
  "",
  "plain",
  "\n\nreasoning\n\n",
  "  spaced \t",
  " \u0085x\u0085 ",
  "\u001fy\u001c",
  "\ufeffz\ufeff",
  "\u3000\u2028w\u00a0",
  "👩‍💻 emoji 👩‍💻",
  "ab\nba",
  "aabxbaa",
  "\n \n",
  "𝒳a𝒳",
];

async function same(template: string, vars: Record<string, unknown>): Promise<void> {
  const py = await oracle.ask({ template, vars });
  expect(py.error, `${template} ${JSON.stringify(vars)}`).toBeUndefined();
  expect(new Template(template).render(vars), `${template} ${JSON.stringify(vars)}`).toBe(py.text);
}

/** The same, with the variables as JSON text: json.loads there, pyJsonLoads here (as a request's tools and tool arguments are read). */
async function sameJson(template: string, varsJson: string): Promise<void> {
  const py = await oracle.ask({ template, vars_json: varsJson });
  expect(py.error, `${template} ${varsJson}`).toBeUndefined();
  const vars = Object.fromEntries(pyJsonLoads(varsJson) as Map<string, unknown>);
  expect(new Template(template).render(vars), `${template} ${varsJson}`).toBe(py.text);
}

/** JSON values whose Python reading JSON.parse loses: a float's kind, exponents, NaN, big ints, integer-like keys' order, repeated keys. */
const JSON_VALUES = [
  "2.0", "2", "-0", "-0.0", "0.1", "1e-7", "1E5", "1e16", "1e15", "123456789012345678.0", "0.0001", "0.00001", "1.5e300", "1e400", "-1e-400",
  "NaN", "Infinity", "-Infinity", "12345678901234567890", "-9007199254740993",
  '{"b": 1, "1": 2, "a": {"10": 1.0, "9": [2.50, "x"]}}', '{"a": 1, "a": 2, "b": 3}', '{"2": "two", "1": "one", "0": "zero"}',
  String.raw`[1.0, true, null, false, "s\u0085", "é😀", "quote\"s and \\ and \n\t\u0001", "it's", "\u2028\ud83d"]`,
  '{"type": "object", "properties": {"temperature": {"type": "number", "minimum": 0.0, "maximum": 2.0, "default": 1.0}, "n": {"type": "integer", "default": 1}}}',
  String.raw`{"é": 1, "a": 2, "😀": 3, "\uffff": 4, "A": 5}`,
  "[]", "{}", '[[], {}, [{}]]', "true", "null", '"text"',
];


describe("the template engine with Python's semantics, against jinja2", () => {
  it("str.strip / lstrip / rstrip with characters strip only those (Qwen3's reasoning: .lstrip('\\n'))", async () => {
    for (const s of INPUTS) {
      for (const t of ["{{ s.lstrip('\\n') }}", "{{ s.rstrip('\\n') }}", "{{ s.strip('\\n') }}", "{{ s.strip('ab') }}", "{{ s.strip('𝒳') }}", "{{ s.split('ba')[-1].lstrip('\\n') }}"]) await same(t, { s });
    }
  });

  it("str.strip / lstrip / rstrip with no argument (or None) strip Python's whitespace", async () => {
    for (const s of INPUTS) for (const t of ["{{ s.strip() }}", "{{ s.lstrip() }}", "{{ s.rstrip() }}", "{{ s.strip(none) }}"]) await same(t, { s });
  });

  it("|trim strips Python's whitespace (U+0085 and U+001C–U+001F, not U+FEFF)", async () => {
    for (const s of INPUTS) await same("[{{ s|trim }}]", { s });
  });

  it("|length counts code points (a 9-character id with an emoji is 9, not 10: Mistral's tool-call ids)", async () => {
    for (const s of [...INPUTS, "abcdefgh👍", "a\ud83d"]) await same("{{ s|length }}{% if s|length != 9 %}!{% endif %}", { s });
  });
});

describe("equality as Python's, against jinja2", () => {
  it("== and != compare dicts and lists by their contents, and do not coerce (Mistral's template compares messages)", async () => {
    const pairs: [unknown, unknown][] = [
      [{ role: "user", content: "hi" }, { role: "user", content: "hi" }],
      [{ role: "user", content: "hi" }, { content: "hi", role: "user" }],
      [{ role: "user", content: "hi" }, { role: "user", content: "ho" }],
      [[1, 2], [1, 2]],
      [[1, [2, { a: 3 }]], [1, [2, { a: 3 }]]],
      [[1, 2], [2, 1]],
      [1, "1"],
      [0, false],
      [1, true],
      ["", 0],
      [1, 1.5],
      [2, 2.0],
      [null, null],
      ["a", "a"],
      [{}, []],
    ];
    for (const [a, b] of pairs) await same("{{ a == b }} {{ a != b }} {% if a == b %}same{% endif %}", { a, b });
    // A boolean prints as Python's.
    await same("{{ t }} {{ f }} {{ 1 == 1 }}", { t: true, f: false });
    // Undefined equals only Undefined (JavaScript's loose == made it equal to None).
    await same("{{ zzz == none }} {{ zzz == yyy }} {{ none == none }}", {});
  });

  it("`in` a list finds a dict or a list by value, as Python's list.__contains__ does", async () => {
    const messages = [{ role: "user", content: "hi" }, { role: "assistant", content: "yo" }];
    await same("{{ m in messages }} {{ m not in messages }}", { m: { role: "assistant", content: "yo" }, messages });
    await same("{{ m in messages }}", { m: { role: "assistant", content: "no" }, messages });
    await same("{{ 1 in xs }} {{ '1' in xs }} {{ [1] in ys }}", { xs: [1, 2], ys: [[1], [2]] });
    // Other `in`s are the engine's own, on values evaluated once.
    await same("{{ 'el' in s }} {{ 'k' in d }} {{ 'z' in d }}", { s: "hello", d: { k: 1 } });
  });
});

describe("JSON as Python reads and prints it, against transformers' tojson", () => {
  it("floats stay floats (2.0, 1e-07, 1e+16), NaN and Infinity are read and written, big ints keep their digits, keys keep their order", async () => {
    for (const x of JSON_VALUES) {
      await sameJson("{{ x|tojson }}", `{"x": ${x}}`);
      await sameJson("{{ x|tojson(indent=4) }}|{{ x|tojson(indent=0) }}|{{ x|tojson(indent='\t') }}", `{"x": ${x}}`);
      await sameJson("{{ x|tojson(sort_keys=true) }}|{{ x|tojson(ensure_ascii=true) }}|{{ x|tojson(separators=(',', ':')) }}|{{ x|tojson(true, 2) }}", `{"x": ${x}}`);
    }
  });

  it("a value printed, joined with ~ or made a string is Python's str(): 2.0, None, True, a dict's repr", async () => {
    for (const x of JSON_VALUES) await sameJson("{{ x }}|{{ x ~ '' }}|{{ 'v=' ~ x }}|{{ x|string }}", `{"x": ${x}}`);
    await same("{{ none }}|{{ none ~ 1 }}|{{ t ~ f }}|{{ zzz ~ 'a' }}|{{ zzz }}|{{ (1, 'a') }}", { t: true, f: false });
  });

  it("a tool's schema and a tool call's arguments as a template prints them (Qwen3's and Llama 3's tojson)", async () => {
    const tool = '{"type": "function", "function": {"name": "get", "description": null, "parameters": {"type": "object", "properties": {"t": {"type": "number", "default": 1.0, "minimum": 1e-7}, "10": {"enum": [1, 2.0]}, "9": {}}}}}';
    const args = '{"x": 2.0, "y": NaN, "ids": [12345678901234567890], "3": "c", "1": "a"}';
    await sameJson("{% for t in tools %}{{ t|tojson }}\n{{ t.function.description }}\n{{ t|tojson(indent=4) }}{% endfor %}{{ args|tojson }}{% for k, v in args.items() %}{{ k }}={{ v }};{% endfor %}", `{"tools": [${tool}], "args": ${args}}`);
  });
});

describe("the pure parts", () => {
  it("pyFloatRepr lays out the shortest digits as Python's repr", () => {
    const cases: [number, string][] = [[2, "2.0"], [1e-7, "1e-07"], [1e16, "1e+16"], [1e15, "1000000000000000.0"], [0.0001, "0.0001"], [0.00001, "1e-05"], [-0, "-0.0"], [1.5e300, "1.5e+300"], [123.456, "123.456"], [NaN, "nan"], [-Infinity, "-inf"], [5e-324, "5e-324"]];
    for (const [x, repr] of cases) expect(pyFloatRepr(x)).toBe(repr);
    expect(pyStrRepr("it's")).toBe(`"it's"`);
    expect(pyStrRepr(`'"`)).toBe(String.raw`'\'"'`);
    expect(pyStrRepr("\u0000\u0085\u2028😀\ud800")).toBe(String.raw`'\x00\x85\u2028😀\ud800'`);
  });

  it("pyJsonLoads keeps what Python keeps and refuses what Python refuses", () => {
    const v = pyJsonLoads('{"b": 1, "1": 2.0, "b": 3, "n": NaN, "big": 12345678901234567890}') as Map<string, unknown>;
    expect([...v.keys()]).toEqual(["b", "1", "n", "big"]);
    expect(v.get("b")).toBe(3);
    expect(v.get("1")).toEqual(new PyFloat(2));
    expect(v.get("big")).toBe(12345678901234567890n);
    for (const bad of ['{"a": 1,}', "[1 2]", String.raw`"\u00zz"`, '"a\u0001b"', "01", "1.", ".5", "+1", "nan", '{"a" 1}', "[", '"abc', "1 2", "tru"]) {
      expect(() => pyJsonLoads(bad), bad).toThrow(PyJsonError);
    }
    // Nesting is bounded, and a string of many escapes is read in linear time.
    expect(() => pyJsonLoads("[".repeat(100_000))).toThrow(PyJsonError);
    expect((pyJsonLoads(`"${"\\n".repeat(200_000)}"`) as string).length).toBe(200_000);
  });

  it("memberAsPython finds the body's own member, not one escaped in a string or nested elsewhere, within its bound", () => {
    const parsed = [{ a: 2 }];
    const text = `{"messages": [{"role": "user", "content": "say \\"tools\\": [1]", "x": {"tools": [{"a": 3}]}}], "tools": [{"a": 2.0}]}`;
    expect(memberAsPython(text, "tools", parsed, 1_000)).toEqual([new Map([["a", new PyFloat(2)]])]);
    expect(memberAsPython(text, "tools", [{ a: 4 }], 1_000)).toBeUndefined();
    // A body with the key nested many times over: at most MEMBER_CANDIDATES places are parsed, each within the bound.
    const nested = `{"m": ${'{"tools": '.repeat(50_000)}1${"}".repeat(50_000)}, "tools": [1]}`;
    expect(memberAsPython(nested, "tools", [1], 100)).toEqual([1]);
    expect(memberAsPython(nested, "tools", [2], 100)).toBeUndefined();
    expect(MEMBER_CANDIDATES).toBeLessThanOrEqual(8);
  });

  it("pyStrip and pyLength on lone surrogates and long runs stay linear", () => {
    expect(pyLength("a\ud83d")).toBe(2);
    expect(pyLength("👍")).toBe(1);
    const run = `${" ".repeat(200_000)}x${" ".repeat(200_000)}`;
    expect(pyStrip(run, undefined)).toBe("x");
    expect(pyStrip(run, undefined, "left")).toBe(`x${" ".repeat(200_000)}`);
  });
});
