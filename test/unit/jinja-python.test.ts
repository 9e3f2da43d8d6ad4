/**
 * Python's string semantics in the template engine (src/prompt/tokenizers/jinja-python.ts,
 * issue 55) against Python's own jinja2, as transformers compiles a chat template
 * (test/fixtures/hf-tokenizers/jinja-oracle.py, in the cached virtualenv of
 * hf-tokenizers.test.ts). Each class the issue found has its named case: strip
 * methods with an argument, Python's whitespace set for `|trim` and the bare methods,
 * and lengths in code points.
 */
import { spawn } from "node:child_process";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { Template } from "@huggingface/jinja";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonEnv } from "../../scripts/python-env.ts";
import { pyLength, pyStrip, pythonSemantics } from "../../src/prompt/tokenizers/jinja-python.ts";

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

describe("the pure parts", () => {
  it("pyStrip and pyLength on lone surrogates and long runs stay linear", () => {
    expect(pyLength("a\ud83d")).toBe(2);
    expect(pyLength("👍")).toBe(1);
    const run = `${" ".repeat(200_000)}x${" ".repeat(200_000)}`;
    expect(pyStrip(run, undefined)).toBe("x");
    expect(pyStrip(run, undefined, "left")).toBe(`x${" ".repeat(200_000)}`);
  });
});
