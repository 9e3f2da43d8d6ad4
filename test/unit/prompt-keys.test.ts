/**
 * The prompt keys the edge computes from a request body (src/prefix/prompt-keys.ts,
 * src/proxy/serve/choose.ts) are the keys of the prompt the replica will see: its
 * chat template and tokenizer, then blockKeys.
 */
import { describe, it, expect, vi } from "vitest";
import { defineDeployment, prefixTokenizerName } from "../../src/config/deployment.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { PROMPT_MAX_BLOCKS, PROMPT_MAX_BODY_BYTES, PROMPT_MAX_MESSAGES, PROMPT_MAX_TOOLS_BYTES, PROMPT_TOKENIZE_BUDGET_BYTES, promptEndpointOf, promptKeys } from "../../src/prefix/prompt-keys.ts";
import { chatPrompt, continuationPrompt } from "../../src/prompt/tiny-lm-chat-template.ts";
import { encode } from "../../src/prompt/tiny-lm-tokenizer.ts";
import { headOf } from "../../src/prompt/tokenizers/tokenizer.ts";
import { PROMPT_TOKENIZER_NAMES, promptTokenizer } from "../../src/prompt/tokenizers/index.ts";
import { provideFamilyFilesFromNodeModules } from "../../src/prompt/tokenizers/node-files.ts";
import { requestPromptKeys, tokenizerFor } from "../../src/proxy/serve/choose.ts";
import { migrationPlan } from "../../src/proxy/serve/migrate.ts";
import { HeldBody } from "../../src/proxy/serve/request.ts";
import { responsesMessages, responsesSchema } from "../../src/replica/llm/responses-api.ts";

const tinyLm = promptTokenizer("tiny-lm");
const bytes = promptTokenizer("bytes");
const body = (json: unknown) => new TextEncoder().encode(JSON.stringify(json));
const system = "You are a careful assistant for Switchyard's users. ".repeat(12);
const messages = [
  { role: "system", content: system },
  { role: "user", content: [{ type: "text", text: "What does the edge do with a prompt – and why?" }] },
  { role: "assistant", content: "It hashes blocks… café" },
  { role: "user", content: "Thanks.\r\nMore\ttabs" },
];

describe("promptEndpointOf", () => {
  it("knows the prompt endpoints under /v1, wherever the route prefix puts them", () => {
    expect(promptEndpointOf("/v1/chat/completions")).toBe("chat");
    expect(promptEndpointOf("/llm/v1/chat/completions")).toBe("chat");
    expect(promptEndpointOf("/v1/completions")).toBe("completions");
    expect(promptEndpointOf("/a/b/v1/responses")).toBe("responses");
    for (const p of ["/v1/embeddings", "/v1/models", "/hello", "/chat/completions"]) expect(promptEndpointOf(p), p).toBeUndefined();
  });
});

describe("promptKeys with tiny-lm", () => {
  it("a chat's keys are blockKeys over encode(chatPrompt(messages)), what the reference replica computes", () => {
    const keys = promptKeys(body({ model: "tiny-lm", messages, stream: true }), "chat", { tokenizer: tinyLm, extra: "" });
    const replica = blockKeys(encode(chatPrompt(messages)));
    expect(replica.length).toBeGreaterThan(16);
    expect(keys).toEqual({ keys: replica, blockSize: 16 });
  });

  it("a continuation's keys (continue_final_message, as the edge sends a migrated stream on) are the replica's: the last message left open", () => {
    const partial = [...messages, { role: "assistant", content: "The edge keys the prompt by blocks and" }];
    const keys = promptKeys(body({ model: "tiny-lm", messages: partial, continue_final_message: true, add_generation_prompt: false }), "chat", { tokenizer: tinyLm, extra: "" });
    expect(keys).toEqual({ keys: blockKeys(encode(continuationPrompt(partial))), blockSize: 16 });
    // Not the chat with a new assistant turn after it (what the keys were before issue 55).
    expect(keys!.keys).not.toEqual(blockKeys(encode(chatPrompt(partial))));
  });

  it("a completion's prompt, a one-string list, and token ids (used as they are)", () => {
    const text = system + " and then some";
    expect(promptKeys(body({ prompt: text }), "completions", { tokenizer: tinyLm, extra: "" })!.keys).toEqual(blockKeys(encode(text)));
    expect(promptKeys(body({ prompt: [text] }), "completions", { tokenizer: tinyLm, extra: "" })!.keys).toEqual(blockKeys(encode(text)));
    const ids = encode(text);
    expect(promptKeys(body({ prompt: ids }), "completions", { tokenizer: bytes, extra: "" })).toEqual({ keys: blockKeys(ids), blockSize: 16 });
    expect(promptKeys(body({ prompt: [ids] }), "completions", { tokenizer: tinyLm, extra: "" })!.keys).toEqual(blockKeys(ids));
  });

  it("a Responses request's keys are those of its chat messages, instructions first, as the replica renders them", () => {
    const request = { model: "tiny-lm", instructions: system, input: [{ role: "user", content: [{ type: "input_text", text: "Hello there, edge." }] }] };
    const replica = blockKeys(encode(chatPrompt(responsesMessages(responsesSchema(1024).parse(request)))));
    expect(promptKeys(body(request), "responses", { tokenizer: tinyLm, extra: "" })!.keys).toEqual(replica);
    const plain = { model: "tiny-lm", input: system };
    expect(promptKeys(body(plain), "responses", { tokenizer: tinyLm, extra: "" })!.keys).toEqual(blockKeys(encode(chatPrompt([{ role: "user", content: system }]))));
  });

  it("folds the multiplexed model into every key", () => {
    const plain = promptKeys(body({ messages }), "chat", { tokenizer: tinyLm, extra: "" })!.keys;
    const adapter = promptKeys(body({ messages }), "chat", { tokenizer: tinyLm, extra: "lora-a" })!.keys;
    expect(adapter).toEqual(blockKeys(encode(chatPrompt(messages)), { extra: "lora-a" }));
    expect(adapter[0]).not.toBe(plain[0]);
  });

  it("hashes at most maxBlocks blocks, the first ones, unchanged", () => {
    const long = [{ role: "user", content: "x".repeat(16 * 300) }];
    const all = blockKeys(encode(chatPrompt(long)));
    expect(promptKeys(body({ messages: long }), "chat", { tokenizer: tinyLm, extra: "", maxBlocks: 100 })!.keys).toEqual(all.slice(0, 100));
    expect(PROMPT_MAX_BLOCKS).toBe(4096);
  });

  it("has no keys for a body without a prompt the replica would accept", () => {
    const o = { tokenizer: tinyLm, extra: "" };
    expect(promptKeys(new TextEncoder().encode("not json"), "chat", o)).toBeUndefined();
    expect(promptKeys(new Uint8Array(0), "chat", o)).toBeUndefined();
    expect(promptKeys(body({ messages: [] }), "chat", o)).toBeUndefined();
    expect(promptKeys(body({ messages: "hi" }), "chat", o)).toBeUndefined();
    expect(promptKeys(body({ prompt: ["a", "b"] }), "completions", o)).toBeUndefined();
    expect(promptKeys(body([1, 2]), "chat", o)).toBeUndefined();
    expect(promptKeys(new Uint8Array(PROMPT_MAX_BODY_BYTES + 1), "chat", o)).toBeUndefined();
  });

  it("a prompt shorter than one block has no keys (the balancer then chooses by load)", () => {
    expect(promptKeys(body({ prompt: "fifteen chars.." }), "completions", { tokenizer: tinyLm, extra: "" })!.keys).toEqual([]);
    expect(promptKeys(body({ prompt: "sixteen chars..." }), "completions", { tokenizer: tinyLm, extra: "" })!.keys).toHaveLength(1);
  });
});

describe("the bytes tokenizer", () => {
  it("makes the same keys in every isolate from the UTF-8 of the rendered chat, 64 bytes a block", () => {
    const keys = promptKeys(body({ messages }), "chat", { tokenizer: bytes, extra: "" })!;
    expect(keys).toEqual({ keys: blockKeys(new TextEncoder().encode(chatPrompt(messages)), { blockSize: 64 }), blockSize: 64 });
  });

  it("bounds its work without changing the first blocks", () => {
    const text = "é".repeat(10_000);
    expect(bytes.text(text, 640)).toEqual(new TextEncoder().encode(text).subarray(0, 640));
  });
});

describe("headOf", () => {
  it("cuts at a code point, never inside a surrogate pair", () => {
    expect(headOf("ab😀c", 3)).toBe("ab");
    expect(headOf("ab😀c", 4)).toBe("ab😀");
    expect(headOf("abc", 10)).toBe("abc");
  });

  it("tiny-lm's tokens of a cut text are a prefix of the whole text's", () => {
    const text = "Ça va? – oui… 𝐀 → b\r\n".repeat(40);
    const all = encode(text);
    for (const n of [1, 7, 50, 333]) {
      const head = tinyLm.text(text, n);
      expect(Array.from(head)).toEqual(all.slice(0, head.length));
    }
  });
});

describe("requestPromptKeys: the deployment's tokenizer and extra", () => {
  const llm = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "llm" }, openai: { models: ["tiny-lm"] }, policy: { balancer: "prefix_cache" } });
  const ext = defineDeployment({ name: "ext", routePrefix: "/ext", backend: { kind: "external" }, policy: { balancer: "prefix_hash" } });

  it("auto: tiny-lm for the reference LLM, bytes for anything else; a named one otherwise", () => {
    expect(tokenizerFor(llm).name).toBe("tiny-lm");
    expect(tokenizerFor(ext).name).toBe("bytes");
    expect(tokenizerFor({ ...ext, policy: { ...ext.policy, prefix: { tokenizer: "tiny-lm", loadFactor: 0.25, prefillWeight: 1 } } }).name).toBe("tiny-lm");
    expect([...PROMPT_TOKENIZER_NAMES].sort()).toEqual(["bytes", "deepseek-v3", "gemma3", "gpt-oss", "llama3", "mistral-nemo", "qwen3", "tiny-lm"]);
  });

  it("every registered family fits an isolate (Gemma 3 too, as the merges engine's spec): auto and a name both key by the family", () => {
    expect(prefixTokenizerName({ backend: { kind: "llm", model: "gemma3" }, policy: ext.policy } as never)).toBe("gemma3");
    expect(prefixTokenizerName({ backend: { kind: "llm", model: "qwen3" }, policy: ext.policy } as never)).toBe("qwen3");
    expect(() => defineDeployment({ name: "g", routePrefix: "/g", backend: { kind: "external" }, policy: { prefix: { tokenizer: "gemma3" } } })).not.toThrow();
  });

  it("keys a prompt by bytes, with the reason, where the deployment's family cannot render it", () => {
    const qwen = { ...ext, policy: { ...ext.policy, prefix: { tokenizer: "qwen3" as const, loadFactor: 0.25, prefillWeight: 1 } } };
    // An image's tokens are not the edge's to compute (whether or not qwen3's files are here).
    const b = body({ model: "m", messages: [{ role: "user", content: [{ type: "text", text: "what is this?" }, { type: "image_url", image_url: { url: "data:," } }] }] }).slice().buffer;
    const got = requestPromptKeys(qwen, "/ext/v1/chat/completions", b, undefined)!;
    expect(got.fallback).toBe("non_text_content");
    expect(got.keys).toEqual(requestPromptKeys(ext, "/ext/v1/chat/completions", b, undefined)!.keys);
  });

  it("keys a prompt by bytes when a tokenizer fails in a way it did not mean to (tokenizer_error): the request is never failed by its keys", () => {
    const broken = { ...tinyLm, chat: () => { throw new RangeError("Maximum call stack size exceeded"); }, text: () => { throw new TypeError("bug"); } };
    const chat = promptKeys(body({ messages }), "chat", { tokenizer: broken, extra: "" })!;
    expect(chat.fallback).toBe("tokenizer_error");
    expect(chat.keys).toEqual(promptKeys(body({ messages }), "chat", { tokenizer: bytes, extra: "" })!.keys);
    expect(promptKeys(body({ prompt: "a long prompt ".repeat(40) }), "completions", { tokenizer: broken, extra: "" })!.fallback).toBe("tokenizer_error");
  });

  it("reads the endpoint from the path and the model as the extra key", () => {
    const b = body({ model: "tiny-lm", messages }).slice().buffer;
    expect(requestPromptKeys(llm, "/llm/v1/chat/completions", b, undefined)!.keys).toEqual(blockKeys(encode(chatPrompt(messages))));
    expect(requestPromptKeys(llm, "/v1/chat/completions", b, "m1")!.keys).toEqual(blockKeys(encode(chatPrompt(messages)), { extra: "m1" }));
    expect(requestPromptKeys(llm, "/llm/generate", b, undefined)).toBeUndefined();
  });

  it("reads a held body's one parse: prompt keys and a migration's plan parse it once between them (issue 53)", () => {
    const raw = body({ model: "tiny-lm", messages, stream: true, max_tokens: 20 }).slice().buffer;
    const held = new HeldBody(raw);
    const parse = vi.spyOn(JSON, "parse");
    try {
      const plan = migrationPlan("chat", raw, held);
      const keys = requestPromptKeys(llm, "/v1/chat/completions", held, undefined);
      expect(parse).toHaveBeenCalledTimes(1);
      expect(plan).toMatchObject({ endpoint: "chat", maxTokens: 20 });
      // The same keys as from the bytes themselves.
      expect(keys!.keys).toEqual(requestPromptKeys(llm, "/v1/chat/completions", raw, undefined)!.keys);
    } finally {
      parse.mockRestore();
    }
  });
});

describe("the work a prompt's keys may cost (issue 50)", () => {
  const qwen3 = promptTokenizer("qwen3");
  provideFamilyFilesFromNodeModules();

  it("a prompt past the tokenizing budget is keyed by its head, the same keys as the whole prompt's first ones, and counted", () => {
    // Words no cache has seen: the budget is spent on what is merged, and pieces merged before are free.
    let seed = 7;
    const letter = () => String.fromCharCode(97 + ((seed = (Math.imul(seed, 1103515245) + 12345) >>> 0) % 26));
    const long = Array.from({ length: 6000 }, () => Array.from({ length: 6 }, letter).join("")).join(" ");
    const chat = body({ messages: [{ role: "user", content: long }] });
    // The head first: a segment tokenized whole is kept, and then costs no budget.
    const head = promptKeys(chat, "chat", { tokenizer: qwen3, extra: "", budgetBytes: 16 * 1024 })!;
    const whole = promptKeys(chat, "chat", { tokenizer: qwen3, extra: "", budgetBytes: Number.POSITIVE_INFINITY })!;
    expect(whole.fallback).toBeUndefined();
    expect(head.fallback).toBe("tokenize_budget");
    expect(head.keys.length).toBeGreaterThan(100);
    expect(head.keys.length).toBeLessThan(whole.keys.length);
    expect(head.keys).toEqual(whole.keys.slice(0, head.keys.length));
  });

  it("one piece longer than the budget is not merged at all: the keys end before it", () => {
    const chat = body({ messages: [{ role: "user", content: `${"word ".repeat(200)}${"a".repeat(PROMPT_TOKENIZE_BUDGET_BYTES + 1)}` }] });
    const keys = promptKeys(chat, "chat", { tokenizer: qwen3, extra: "" })!;
    expect(keys.fallback).toBe("tokenize_budget");
    expect(keys.keys.length).toBe(12); // the template's head and 200 words: 203 tokens
  });

  it(`a chat of more than ${PROMPT_MAX_MESSAGES} messages, or tools of more than ${PROMPT_MAX_TOOLS_BYTES} bytes, is keyed by bytes from its first messages, unrendered`, () => {
    const many = Array.from({ length: PROMPT_MAX_MESSAGES + 1 }, (_, i) => ({ role: i % 2 ? "assistant" : "user", content: `turn ${i} of a long session` }));
    const keys = promptKeys(body({ messages: many }), "chat", { tokenizer: qwen3, extra: "" })!;
    expect(keys.fallback).toBe("render_budget");
    expect(keys.keys).toEqual(blockKeys(bytes.chat(many.slice(0, PROMPT_MAX_MESSAGES), 1 << 20), { extra: "", blockSize: bytes.blockSize, maxBlocks: PROMPT_MAX_BLOCKS }));
    const tools = [{ type: "function", function: { name: "f", parameters: { type: "object", description: "d".repeat(PROMPT_MAX_TOOLS_BYTES) } } }];
    expect(promptKeys(body({ messages: many.slice(0, 4), tools }), "chat", { tokenizer: qwen3, extra: "" })!.fallback).toBe("render_budget");
    expect(promptKeys(body({ messages: many.slice(0, 4), tools: tools.slice(0, 0) }), "chat", { tokenizer: qwen3, extra: "" })!.fallback).toBeUndefined();
  });

  it(`tool calls whose arguments pass ${PROMPT_MAX_TOOLS_BYTES} bytes in all are keyed by bytes, unrendered: ~1 MB of nested arrays cost ~0.8 s rendered`, () => {
    const call = (args: string) => ({ role: "assistant", content: "", tool_calls: [{ id: "c1", type: "function", function: { name: "f", arguments: args } }] });
    const nested = `[${`${"[".repeat(500)}1${"]".repeat(500)},`.repeat(1_000)}0]`;
    const turns = (args: string) => [{ role: "user", content: "hi" }, call(args), { role: "user", content: "go" }];
    const keys = promptKeys(body({ messages: turns(nested) }), "chat", { tokenizer: qwen3, extra: "" })!;
    expect(keys.fallback).toBe("render_budget");
    expect(keys.keys).toEqual(blockKeys(bytes.chat(turns(nested) as never, 1 << 20), { extra: "", blockSize: bytes.blockSize, maxBlocks: PROMPT_MAX_BLOCKS }));
    // Under the bound, they are rendered; the bound counts every call of every message (two just over half are over).
    const half = JSON.stringify({ a: "x".repeat(PROMPT_MAX_TOOLS_BYTES / 2) });
    expect(promptKeys(body({ messages: turns(half) }), "chat", { tokenizer: qwen3, extra: "" })!.fallback).toBeUndefined();
    expect(promptKeys(body({ messages: [...turns(half), call(half), { role: "user", content: "and" }] }), "chat", { tokenizer: qwen3, extra: "" })!.fallback).toBe("render_budget");
  });

  it("token ids past the blocks hashed are not read", () => {
    const ids = Array.from({ length: PROMPT_MAX_BLOCKS * 16 + 5000 }, (_, i) => i % 997);
    const keys = promptKeys(body({ prompt: ids }), "completions", { tokenizer: qwen3, extra: "" })!;
    expect(keys.keys).toEqual(blockKeys(ids, { extra: "", blockSize: 16, maxBlocks: PROMPT_MAX_BLOCKS }));
    expect(promptKeys(body({ prompt: [ids] }), "completions", { tokenizer: qwen3, extra: "" })!.keys).toEqual(keys.keys);
  });
});
