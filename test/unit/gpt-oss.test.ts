/**
 * gpt-oss at the edge (src/prompt/tokenizers/gpt-oss.ts): o200k_harmony's tokens
 * against OpenAI's tiktoken (WebAssembly, a third-party oracle) and harmony's own
 * vectors, and vLLM's chat rendering.
 *
 * - The ranks: the `tiktoken` package's o200k_base.json rebuilt as a .tiktoken file
 *   has the SHA-256 harmony checks its download against (public_encodings.rs).
 * - Every harmony test conversation (test/fixtures/harmony/conversations.ts): its ids,
 *   each text piece encoded alone, equal tiktoken's for the test-data text with every
 *   special token allowed, as harmony's Rust tests assert of their own rendering.
 * - vLLM's chat to harmony (gpt-oss-chat.ts) on eight requests that exercise each of
 *   its rules (test/fixtures/harmony/vllm-chat-vectors.json: made by a second,
 *   independent implementation of the same reading of vLLM 0.26's harmony_utils, in
 *   Python, tokenized by tiktoken; not a vLLM server's output, which cannot run here).
 * - Random text: the BPE engine against tiktoken's encode_ordinary with o200k's regex;
 *   and 300 adversarial chat bodies (test/fixtures/hf-tokenizers/adversarial-chats.ts)
 *   rendered here, their ids against tiktoken's for the rendered text.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { mulberry32 } from "../../src/seeded-random.ts";
import { bpeSpecOfTiktoken, type TiktokenJsonShape } from "../../src/prompt/tokenizers/bpe-spec.ts";
import { harmonyCodec, utcDate } from "../../src/prompt/tokenizers/harmony-codec.ts";
import { HARMONY_SPECIAL_TOKENS, MAX_SCHEMA_DEPTH, renderConversation, renderForCompletion, type HarmonySegment } from "../../src/prompt/tokenizers/harmony.ts";
import { provideFamily } from "../../src/prompt/tokenizers/hf-family.ts";
import { promptTokenizer, UnsupportedPrompt } from "../../src/prompt/tokenizers/index.ts";
import { PROMPT_MAX_BLOCKS, promptKeys, toolsAsPython } from "../../src/prefix/prompt-keys.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { HARMONY_TEST_CONVERSATIONS, asText, harmonyVector } from "../fixtures/harmony/conversations.ts";
import { adversarialChatBody } from "../fixtures/hf-tokenizers/adversarial-chats.ts";
import { gptOssConversation } from "../../src/prompt/tokenizers/gpt-oss-chat.ts";
import fc from "fast-check";
import { tiktokenBindings } from "../fixtures/tiktoken.ts";

const require = createRequire(import.meta.url);
const o200k = JSON.parse(readFileSync(require.resolve("tiktoken/encoders/o200k_base.json"), "utf8")) as TiktokenJsonShape & { special_tokens: Record<string, number> };
const spec = bpeSpecOfTiktoken(o200k, HARMONY_SPECIAL_TOKENS);
const codec = harmonyCodec({ bpe: spec });
provideFamily("gpt-oss", () => codec);
const unlimited = { bytes: Number.POSITIVE_INFINITY };

/** tiktoken with o200k_harmony: o200k_base's ranks, its regex, harmony's special tokens. */
const oracle = (() => {
  const ranks = spec.ranks
    .split("\n")
    .flatMap((b64, rank) => (b64 === "" ? [] : [`${b64} ${rank}`]))
    .join("\n");
  return new (tiktokenBindings().Tiktoken)(ranks, Object.fromEntries(HARMONY_SPECIAL_TOKENS), o200k.pat_str);
})();
const theirs = (text: string) => Array.from(oracle.encode(text, "all"));

/** Segments as ids, each text piece alone (the codec's way, through a chat it cannot be given directly). */
const ids = (segments: readonly HarmonySegment[]) => segments.flatMap((s) => (typeof s === "number" ? [s] : Array.from(codec.plain(s))));

describe("o200k_harmony", () => {
  it("is o200k_base's file byte for byte (harmony's expected SHA-256), o200k's regex and harmony's special tokens", () => {
    const lines = spec.ranks.split("\n").map((b64, rank) => `${b64} ${rank}\n`);
    expect(lines).toHaveLength(199_998);
    expect(createHash("sha256").update(lines.join("")).digest("hex")).toBe("446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d");
    expect(spec.patterns).toEqual([
      [
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        "[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
        "\\p{N}{1,3}",
        " ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*",
        "\\s*[\\r\\n]+",
        "\\s+(?!\\S)",
        "\\s+",
      ].join("|"),
    ]);
    expect(spec.added).toHaveLength(16 + 201088 - 200014 + 1);
    expect(codec.vocabSize).toBe(201089);
  });

  it("harmony's own vectors: 'hello world' is [24912, 2375]; <|start|> is 200006 in a text prompt, and plain text in a chat's text", () => {
    expect(Array.from(codec.text("hello world", 100, unlimited))).toEqual([24912, 2375]);
    expect(Array.from(codec.text("<|start|>", 100, unlimited))).toEqual([200006]);
    expect(Array.from(codec.plain("<|start|>"))).toEqual(Array.from(oracle.encode_ordinary("<|start|>")));
    expect(Array.from(codec.plain("<|start|>"))).not.toContain(200006);
    expect(codec.decode([24912, 200006, 2375])).toBe("hello world");
  });

  it.each(HARMONY_TEST_CONVERSATIONS)("$file: the ids tiktoken gives the test-data text", ({ file, messages, autoDropAnalysis, completion }) => {
    const out: HarmonySegment[] = [];
    if (completion) out.push(...renderForCompletion(messages, "assistant", autoDropAnalysis));
    else renderConversation(messages, out, autoDropAnalysis);
    expect(ids(out)).toEqual(theirs(harmonyVector(file)));
  });

  it("adversarial chat bodies (every Unicode class, whitespace sets, CRLF, tools with floats and odd keys, tool calls, reasoning): the ids are tiktoken's for the rendered text (property test)", () => {
    let rendered = 0;
    fc.assert(
      fc.property(adversarialChatBody, (body) => {
        const json = JSON.parse(body) as { messages: Record<string, unknown>[]; tools?: unknown[] };
        // Where the seams differ from the joined text's, by design: content that spells a special token (harmony encodes it as text), or lone surrogates.
        if (body.includes("<|") || /\\ud[89ab][0-9a-f]{2}(?!\\ud[c-f])|(?<!\\ud[89ab][0-9a-f]{2})\\ud[c-f][0-9a-f]{2}/i.test(body)) return true;
        let segments: HarmonySegment[];
        try {
          segments = renderForCompletion(gptOssConversation({ messages: json.messages, tools: json.tools ? toolsAsPython(body, json.tools) : undefined, startDate: "2026-01-01" }));
        } catch (err) {
          if (err instanceof UnsupportedPrompt) return true;
          throw err;
        }
        rendered++;
        expect(ids(segments), body).toEqual(theirs(asText(segments)));
        return true;
      }),
      { numRuns: 300, seed: 55 },
    );
    // Skipped bodies prove nothing: many must render.
    expect(rendered).toBeGreaterThanOrEqual(60);
  });

  it("random text: the edge's BPE engine gives tiktoken's encode_ordinary", () => {
    const next = mulberry32(55);
    const units = ["a", "The", " quick", "'s", "'LL", "123", "4567", " ", "  ", "\n", "\r\n", "\t", "é", "中文", "👩‍💻", "ß", "ǅ", "\u00a0", "<|end|>", "{\"a\": 1}", ".", "!!", "/", "\n\n", "ー", "한국어", "Ωμέγα", "\u0301"];
    for (let i = 0; i < 1000; i++) {
      let s = "";
      const n = 1 + Math.floor(next() * 40);
      for (let k = 0; k < n; k++) s += units[Math.floor(next() * units.length)];
      expect(Array.from(codec.plain(s)), JSON.stringify(s)).toEqual(Array.from(oracle.encode_ordinary(s)));
    }
  });
});

describe("vLLM's chat for gpt-oss", () => {
  const vectors = JSON.parse(readFileSync(join(import.meta.dirname, "../fixtures/harmony/vllm-chat-vectors.json"), "utf8")) as Record<
    string,
    { request: { messages: Record<string, unknown>[]; tools?: unknown[]; reasoning_effort?: string }; start_date: string; text: string; token_ids: number[] }
  >;
  const gptOss = promptTokenizer("gpt-oss");

  it.each(Object.entries(vectors))("%s", (_name, v) => {
    const tokens = gptOss.chat(v.request.messages as never, 100_000, { ...(v.request.tools && { tools: v.request.tools }), reasoningEffort: v.request.reasoning_effort, startDate: v.start_date }, { bytes: Infinity });
    expect(Array.from(tokens)).toEqual(v.token_ids);
  });

  it("from a request's body (its tools read as Python reads them, reasoning_effort from the body, the deployment's start date), the keys of the vector's ids", () => {
    for (const v of Object.values(vectors)) {
      const body = new TextEncoder().encode(JSON.stringify({ model: "openai/gpt-oss-20b", ...v.request }));
      const got = promptKeys(body, "chat", { tokenizer: gptOss, extra: "", startDate: v.start_date })!;
      expect(got.fallback).toBeUndefined();
      expect(got.keys).toEqual(blockKeys(v.token_ids, { extra: "", blockSize: 16, maxBlocks: PROMPT_MAX_BLOCKS }));
    }
  });

  it("refuses what vLLM answers 400 for: an effort of none or another word, a role it does not know, a tool that is not a function", () => {
    const chat = (body: object, extras: object = {}) => () => gptOss.chat((body as { messages: never }).messages, 1000, extras);
    for (const [body, extras, reason] of [
      [{ messages: [{ role: "user", content: "hi" }] }, { reasoningEffort: "none" }, "reasoning_effort"],
      [{ messages: [{ role: "user", content: "hi" }] }, { reasoningEffort: "minimal" }, "reasoning_effort"],
      [{ messages: [{ role: "critic", content: "hi" }] }, {}, "template_error"],
      [{ messages: [{ role: "user", content: ["hi"] }] }, {}, "template_error"],
      [{ messages: [{ role: "user", content: "hi" }] }, { tools: [{ type: "web_search" }] }, "tool_not_a_function"],
      [{ messages: [{ role: "assistant", tool_calls: [{ id: "c", function: { name: "f", arguments: { a: 1 } } }] }] }, {}, "tool_call_not_a_function"],
    ] as const) {
      expect(chat(body, extras)).toThrow(expect.objectContaining({ reason }) as unknown as UnsupportedPrompt);
    }
  });

  it("refuses a tool schema nested past MAX_SCHEMA_DEPTH (its text grows with the square of the depth), and renders one at it", () => {
    const nested = (levels: number) => {
      let schema: object = { type: "string" };
      for (let i = 0; i < levels; i++) schema = { type: "object", properties: { a: schema } };
      return [{ type: "function", function: { name: "f", parameters: schema } }];
    };
    const messages = [{ role: "user", content: "hi" }] as never;
    expect(() => gptOss.chat(messages, 1000, { tools: nested(MAX_SCHEMA_DEPTH + 1) })).toThrow(expect.objectContaining({ reason: "tool_schema_depth" }) as unknown as UnsupportedPrompt);
    expect(gptOss.chat(messages, 100_000, { tools: nested(MAX_SCHEMA_DEPTH) }).length).toBeGreaterThan(100);
    // 64 KB of tools nested 1,700 deep (the worst input): refused at the bound, no deeper recursion.
    expect(() => gptOss.chat(messages, 1000, { tools: nested(1700) })).toThrow(expect.objectContaining({ reason: "tool_schema_depth" }) as unknown as UnsupportedPrompt);
  });

  it("starts the conversation today (UTC) unless told; the flags vLLM ignores for gpt-oss change nothing", () => {
    const messages = [{ role: "user", content: "hi" }] as never;
    const today = Array.from(gptOss.chat(messages, 1000));
    expect(today).toEqual(Array.from(gptOss.chat(messages, 1000, { startDate: utcDate() })));
    expect(codec.decode(today)).toContain(`Current date: ${utcDate()}`);
    expect(Array.from(gptOss.chat(messages, 1000, { startDate: "2026-01-01", addGenerationPrompt: false, continueFinalMessage: true, kwargs: { model_identity: "x" } }))).toEqual(
      Array.from(gptOss.chat(messages, 1000, { startDate: "2026-01-01" })),
    );
  });

  it("stops at maxTokens and at the budget, the ids it gives a prefix of the whole", () => {
    const messages = [{ role: "user", content: "word ".repeat(2000) }] as never;
    const whole = Array.from(gptOss.chat(messages, 100_000, { startDate: "2026-01-01" }));
    expect(Array.from(gptOss.chat(messages, 100, { startDate: "2026-01-01" }))).toEqual(whole.slice(0, 100));
    // Words never seen (a piece merged before costs no budget): the cut first, then the whole.
    const fresh = [{ role: "user", content: Array.from({ length: 2000 }, (_, i) => `q${i}z`).join(" ") }] as never;
    const budget = { bytes: 600 };
    const cut = Array.from(gptOss.chat(fresh, 100_000, { startDate: "2026-01-02" }, budget));
    expect(budget).toMatchObject({ exhausted: true });
    const all = Array.from(gptOss.chat(fresh, 100_000, { startDate: "2026-01-02" }));
    expect(cut.length).toBeLessThan(all.length);
    expect(all.slice(0, cut.length)).toEqual(cut);
  });
});
