/**
 * The reference replica's OpenAI-compatible API (src/replica/llm/openai-handler.ts) in
 * Node, on the real tiny-lm (its ONNX graph on onnxruntime-web) behind the real engine,
 * over HTTP on loopback: each route's answer and wire shape, the errors a client's
 * bad request gets, streams with and without usage, a stream handed over by a drain
 * and a client that leaves. The same routes run behind the edge in the e2e tests;
 * here mutation testing reaches them (issue 51).
 */
import { createServer, request, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { afterAll, afterEach, beforeAll, describe, expect, it } from "vitest";
import { Header } from "../../src/protocol/index.ts";
import { oversizedUpload } from "../fixtures/oversized-upload.ts";
import { LlmEngine } from "../../src/replica/llm/engine.ts";
import { loadTinyLm } from "../../src/replica/llm/load-tiny-lm.ts";
import { DEFAULT_MAX_TOKENS, llmService, type LlmService } from "../../src/replica/llm/openai-handler.ts";
import { TINY_LM_ID, tinyLmGenerator } from "../../src/replica/llm/tiny-lm.ts";

let server: Server;
let base: string;
let engine: LlmEngine;
let service: LlmService;
const load = () => ({ "x-load": "1" });

beforeAll(async () => {
  const { model } = await loadTinyLm({ warmupRuns: 0 });
  engine = new LlmEngine({ model: tinyLmGenerator(model), kvBlocks: 64 });
  service = llmService({ engine, modelId: TINY_LM_ID, promptTokensDetails: true });
  server = createServer((req, res) => {
    if (service.unadmitted(req, res, load)) return;
    void service.handler(req, res, load);
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise((r) => server.close(r));
});

/** Servers of a test's own service (another engine, another option), closed after it. */
const own: Server[] = [];
afterEach(async () => {
  for (const s of own.splice(0)) {
    s.closeAllConnections();
    await new Promise((r) => s.close(r));
  }
});
async function serving(svc: LlmService): Promise<string> {
  const s = createServer((req, res) => void svc.handler(req, res, load));
  own.push(s);
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return `http://127.0.0.1:${(s.address() as AddressInfo).port}`;
}

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(base + path, { method: "POST", body: typeof body === "string" ? body : JSON.stringify(body), headers: { "content-type": "application/json", ...headers } });

async function json(res: Response): Promise<Record<string, any>> {
  return (await res.json()) as Record<string, any>;
}

/** A streamed answer's data events, parsed where they are JSON. */
async function events(res: Response): Promise<unknown[]> {
  const text = await res.text();
  return text
    .split("\n\n")
    .filter((e) => e.startsWith("data: "))
    .map((e) => e.slice(6))
    .map((d) => (d === "[DONE]" ? d : (JSON.parse(d) as unknown)));
}

describe("the routes outside admission", () => {
  it("answers /health, /metrics (HEAD without a body) and /v1/models with the load headers", async () => {
    const health = await fetch(`${base}/health`);
    expect(health.status).toBe(200);
    expect(health.headers.get("x-load")).toBe("1");
    const metrics = await fetch(`${base}/metrics?x=1`);
    expect(metrics.headers.get("content-type")).toBe("text/plain; version=0.0.4; charset=utf-8");
    const text = await metrics.text();
    expect(text).toContain(`model_name="${TINY_LM_ID}"`);
    expect(Number(metrics.headers.get("content-length"))).toBe(Buffer.byteLength(text));
    const head = await fetch(`${base}/metrics`, { method: "HEAD" });
    expect(head.status).toBe(200);
    expect(await head.text()).toBe("");
    const models = await json(await fetch(`${base}/v1/models`));
    expect(models).toMatchObject({ object: "list", data: [{ id: TINY_LM_ID, object: "model", owned_by: "switchyard", root: TINY_LM_ID, parent: null, max_model_len: engine.maxModelLen }] });
  });

  it("leaves other GETs and every POST to the admitted handler", async () => {
    const res = await fetch(`${base}/v1/chat/completions`);
    expect(res.status).toBe(405);
    expect(res.headers.get("allow")).toBe("POST");
    expect((await json(res)).error.code).toBe("method_not_allowed");
    const nowhere = await post("/v2/else", {});
    expect(nowhere.status).toBe(404);
    expect((await json(nowhere)).error).toMatchObject({ code: "route_not_found", message: expect.stringContaining("no route POST /v2/else") });
  });
});

describe("bad requests, answered as OpenAI's error object", () => {
  const cases: [string, string, unknown, number, string][] = [
    ["not JSON", "/v1/completions", "{nope", 400, "We could not parse the JSON body of your request: it is not valid JSON."],
    ["not an object", "/v1/completions", [1, 2], 400, "the request body must be a JSON object"],
    ["n > 1", "/v1/completions", { model: TINY_LM_ID, prompt: "a", n: 2 }, 400, "'n': only n=1 is supported (one choice per request)"],
    ["five stops", "/v1/completions", { model: TINY_LM_ID, prompt: "a", stop: ["a", "b", "c", "d", "e"] }, 400, "'stop': at most 4 stop sequences"],
    ["echo", "/v1/completions", { model: TINY_LM_ID, prompt: "a", echo: true }, 400, "'echo': echo is not supported by this server"],
    ["an empty prompt", "/v1/completions", { model: TINY_LM_ID, prompt: "" }, 400, "'prompt': the prompt is empty"],
    ["ids outside the vocabulary", "/v1/completions", { model: TINY_LM_ID, prompt: [5, 100_000] }, 400, "'prompt': token id 100000 at 1 is outside this model's vocabulary"],
    ["max_tokens over the cap", "/v1/completions", { model: TINY_LM_ID, prompt: "a", max_tokens: 1025 }, 400, "'max_tokens':"],
    ["an image part", "/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }, 400, "'messages.0.content.0': only text content parts are supported"],
    ["no messages", "/v1/chat/completions", { model: TINY_LM_ID, messages: [] }, 400, "'messages':"],
    ["continue without add_generation_prompt false", "/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "assistant", content: "a" }], continue_final_message: true }, 400, "continue_final_message needs add_generation_prompt: false"],
    ["continue a user's message", "/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "user", content: "a" }], continue_final_message: true, add_generation_prompt: false }, 400, "continue_final_message needs the last message to be the assistant's"],
    ["no generation prompt alone", "/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "user", content: "a" }], add_generation_prompt: false }, 400, "add_generation_prompt: false is supported only with continue_final_message"],
    ["logprobs", "/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "user", content: "a" }], logprobs: true }, 400, "'logprobs': logprobs is not supported by this server"],
    ["empty embedding input", "/v1/embeddings", { model: TINY_LM_ID, input: ["a", ""] }, 400, "'input'[1]: empty input"],
    ["wrong dimensions", "/v1/embeddings", { model: TINY_LM_ID, input: "a", dimensions: 3 }, 400, "'dimensions': this model's embeddings have"],
    ["a suffix", "/v1/completions", { model: TINY_LM_ID, prompt: "a", suffix: "z" }, 400, "'suffix': suffix is not supported by this server"],
    ["top_logprobs", "/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "user", content: "a" }], top_logprobs: 2 }, 400, "'top_logprobs': top_logprobs is not supported by this server"],
    ["completion logprobs", "/v1/completions", { model: TINY_LM_ID, prompt: "a", logprobs: 1 }, 400, "'logprobs': logprobs is not supported by this server"],
    ["best_of over 1", "/v1/completions", { model: TINY_LM_ID, prompt: "a", best_of: 2 }, 400, "'best_of': best_of > 1 is not supported by this server"],
    ["one empty embedding input", "/v1/embeddings", { model: TINY_LM_ID, input: "" }, 400, "'input': empty input"],
    ["an embedding input past 8,192 tokens", "/v1/embeddings", { model: TINY_LM_ID, input: Array.from({ length: 8193 }, () => 5) }, 400, "'input': 8193 tokens, at most 8192"],
    ["one of several embedding inputs past 8,192 tokens", "/v1/embeddings", { model: TINY_LM_ID, input: [[5], Array.from({ length: 8193 }, () => 5)] }, 400, "'input'[1]: 8193 tokens, at most 8192"],
  ];
  for (const [what, path, body, status, message] of cases) {
    it(`${what}: ${status}`, async () => {
      const res = await post(path, body);
      expect(res.status).toBe(status);
      expect(res.headers.get("x-load")).toBe("1");
      const e = (await json(res)).error;
      expect(e.message.startsWith(message), e.message).toBe(true);
    });
  }

  it("what the refusals let through: n 1, best_of 1, no logprobs, an empty suffix, echo false, four stops, the first and last ids of the vocabulary; one past it is refused", async () => {
    const { firstId, vocabSize } = engine.model.prompts;
    const ok = await post("/v1/completions", { model: TINY_LM_ID, prompt: [firstId, vocabSize - 1], max_tokens: 1, n: 1, best_of: 1, logprobs: null, suffix: "", echo: false, stop: ["a", "b", "c", "d"] });
    expect(ok.status).toBe(200);
    const chat = await post("/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "user", content: [{ type: "text", text: "a" }] }], max_tokens: 1, logprobs: false, top_logprobs: null, n: null });
    expect(chat.status).toBe(200);
    const past = await post("/v1/completions", { model: TINY_LM_ID, prompt: [vocabSize], max_tokens: 1 });
    expect(past.status).toBe(400);
    expect((await json(past)).error.message).toBe(`'prompt': token id ${vocabSize} at 0 is outside this model's vocabulary (${firstId}..${vocabSize - 1})`);
    if (firstId > 0) expect((await post("/v1/completions", { model: TINY_LM_ID, prompt: [firstId - 1], max_tokens: 1 })).status).toBe(400);
  });

  it("a model this server does not serve: 404 model_not_found naming the one it does", async () => {
    const res = await post("/v1/chat/completions", { model: "gpt-9", messages: [{ role: "user", content: "a" }] });
    expect(res.status).toBe(404);
    expect((await json(res)).error).toMatchObject({ code: "model_not_found", message: `The model \`gpt-9\` does not exist. This server serves \`${TINY_LM_ID}\`.`, details: { model: "gpt-9", known: [TINY_LM_ID] } });
  });

  it("a body over 1 MiB: 413 payload_too_large, the rest left unread", async () => {
    const body = Buffer.alloc(3 * 1024 * 1024, 0x61);
    const answer = await new Promise<{ status: number; text: string }>((resolve, reject) => {
      const req = request(`${base}/v1/completions`, { method: "POST", headers: { "content-type": "application/json", "content-length": body.length } });
      req.on("response", (res) => {
        let text = "";
        res.on("data", (d: Buffer) => (text += d.toString()));
        res.on("end", () => resolve({ status: res.statusCode!, text }));
      });
      req.on("error", reject);
      req.end(body);
    });
    expect(answer.status).toBe(413);
    expect(JSON.parse(answer.text)).toEqual({ error: { code: "payload_too_large", message: "request body over 1048576 bytes", type: "invalid_request_error" } });
     // Far past the bound: the connection closes once answered, not kept alive with the upload unread.
    expect((await oversizedUpload(`${base}/v1/completions`)).status).toBe(413);
  });

  it("a prompt and budget longer than the model's context: 400, before any generation", async () => {
    const res = await post("/v1/completions", { model: TINY_LM_ID, prompt: "a".repeat(engine.maxModelLen - 2), max_tokens: 10 });
    expect(res.status).toBe(400);
    expect((await json(res)).error.code).toBe("bad_request");
  });
});

describe("completions and chat, whole", () => {
  it("a completion: text_completion, its budget used to the token when it hits length, the same seed the same text", async () => {
    const body = { model: TINY_LM_ID, prompt: "the cat", max_tokens: 5, seed: 7, temperature: 0.8 };
    const a = await json(await post("/v1/completions", body));
    const b = await json(await post("/v1/completions", body));
    expect(a).toMatchObject({ object: "text_completion", model: TINY_LM_ID, choices: [{ index: 0, logprobs: null, finish_reason: "length" }], usage: { prompt_tokens: expect.any(Number), completion_tokens: 5 } });
    expect(a.id).toMatch(/^cmpl-[0-9a-f]{32}$/);
    expect(a.usage.total_tokens).toBe(a.usage.prompt_tokens + 5);
    expect(b.choices[0].text).toBe(a.choices[0].text);
    expect(a.choices[0].text.length).toBe(5);
  });

  it("a prompt given as one string in a list, as ids and as a list of ids is the same prompt", async () => {
    const ids = engine.model.prompts.text("the dog");
    const answers = await Promise.all(
      ["the dog", ["the dog"], ids, [ids]].map(async (prompt) => (await json(await post("/v1/completions", { model: TINY_LM_ID, prompt, max_tokens: 4, temperature: 0 }))).choices[0].text as string),
    );
    expect(new Set(answers).size).toBe(1);
  });

  it(`a completion without max_tokens gets ${DEFAULT_MAX_TOKENS}; a stop string ends it, not returned`, async () => {
    const free = await json(await post("/v1/completions", { model: TINY_LM_ID, prompt: "a", temperature: 0, ignore_eos: true }));
    expect(free.usage.completion_tokens).toBe(DEFAULT_MAX_TOKENS);
    const text = free.choices[0].text as string;
    const cut = text.slice(3, 5);
    const stopped = await json(await post("/v1/completions", { model: TINY_LM_ID, prompt: "a", temperature: 0, stop: cut }));
    expect(stopped.choices[0]).toMatchObject({ finish_reason: "stop" });
    expect(text.startsWith(stopped.choices[0].text)).toBe(true);
    expect(stopped.choices[0].text).not.toContain(cut);
  });

  it("with promptTokensDetails (vLLM's --enable-prompt-tokens-details), says how much of the prompt its prefix cache held: none the first time, its full blocks the next", async () => {
    const prompt = `a prompt seen once here: ${"q".repeat(60)}`;
    const first = await json(await post("/v1/completions", { model: TINY_LM_ID, prompt, max_tokens: 2 }));
    const again = await json(await post("/v1/completions", { model: TINY_LM_ID, prompt, max_tokens: 2 }));
    expect(first.usage.prompt_tokens_details).toEqual({ cached_tokens: 0 });
    const full = Math.floor(first.usage.prompt_tokens / 16) * 16;
    expect(full).toBeGreaterThan(0);
    expect(again.usage.prompt_tokens_details.cached_tokens).toBeGreaterThanOrEqual(full - 16);
    expect(again.usage.prompt_tokens_details.cached_tokens).toBeLessThanOrEqual(first.usage.prompt_tokens);
    expect(again.usage.prompt_tokens_details.cached_tokens % 16).toBe(0);
    const response = await json(await post("/v1/responses", { model: TINY_LM_ID, input: prompt, max_output_tokens: 2 }));
    expect(response.usage.input_tokens_details.cached_tokens % 16).toBe(0);
    // Off (the default, as vLLM's): no prompt_tokens_details, and the Responses API's cached tokens 0.
    const at = await serving(llmService({ engine, modelId: TINY_LM_ID }));
    const off = await json(await fetch(`${at}/v1/completions`, { method: "POST", body: JSON.stringify({ model: TINY_LM_ID, prompt, max_tokens: 2 }) }));
    expect(off.usage).not.toHaveProperty("prompt_tokens_details");
    const offResponse = await json(await fetch(`${at}/v1/responses`, { method: "POST", body: JSON.stringify({ model: TINY_LM_ID, input: prompt, max_output_tokens: 2 }) }));
    expect(offResponse.usage.input_tokens_details).toEqual({ cached_tokens: 0 });
  });

  it("a chat: the assistant's message, chat.completion, max_completion_tokens over max_tokens", async () => {
    const r = await json(await post("/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "user", content: "hello" }], max_tokens: 9, max_completion_tokens: 3, temperature: 0 }));
    expect(r).toMatchObject({ object: "chat.completion", choices: [{ index: 0, message: { role: "assistant" }, logprobs: null, finish_reason: "length" }], usage: { completion_tokens: 3 } });
    expect(r.id).toMatch(/^chatcmpl-/);
  });

  it("a chat without a budget ends at its turn's end (stop), within the rest of the context", async () => {
    const r = await json(await post("/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "system", content: "be brief" }, { role: "user", content: [{ type: "text", text: "hi" }] }], seed: 1 }));
    expect(["stop", "length"]).toContain(r.choices[0].finish_reason);
    expect(r.usage.prompt_tokens + r.usage.completion_tokens).toBeLessThanOrEqual(engine.maxModelLen);
  });
});

describe("streams", () => {
  it("a chat stream with include_usage: the role first, usage null on every chunk, then the finish, the usage alone and [DONE]", async () => {
    const res = await post("/v1/chat/completions", { model: TINY_LM_ID, messages: [{ role: "user", content: "hi" }], max_tokens: 4, stream: true, stream_options: { include_usage: true }, temperature: 0 });
    expect(res.headers.get("content-type")).toBe("text/event-stream; charset=utf-8");
    expect(res.headers.get("x-load")).toBe("1");
    const ev = (await events(res)) as any[];
    expect(ev.at(-1)).toBe("[DONE]");
    const chunks = ev.slice(0, -1);
    expect(chunks[0]).toMatchObject({ object: "chat.completion.chunk", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }], usage: null });
    const tokens = chunks.slice(1, 5);
    expect(tokens.every((c) => typeof c.choices[0].delta.content === "string" && c.choices[0].finish_reason === null && c.usage === null)).toBe(true);
    expect(chunks[5]).toMatchObject({ choices: [{ delta: {}, finish_reason: "length" }], usage: null });
    expect(chunks[6]).toMatchObject({ choices: [], usage: { completion_tokens: 4, total_tokens: chunks[6].usage.prompt_tokens + 4 } });
    expect(chunks).toHaveLength(7);
    expect(new Set(chunks.map((c) => c.id)).size).toBe(1);
  });

  it("a completion stream without include_usage: text chunks with no usage field, the finish, [DONE]", async () => {
    const ev = (await events(await post("/v1/completions", { model: TINY_LM_ID, prompt: "a", max_tokens: 3, stream: true }))) as any[];
    expect(ev).toHaveLength(5);
    expect(ev.slice(0, 3).every((c) => c.object === "text_completion" && !("usage" in c) && c.choices[0].finish_reason === null)).toBe(true);
    expect(ev[3]).toMatchObject({ choices: [{ text: "", finish_reason: "length" }] });
    expect(ev[4]).toBe("[DONE]");
  });

  it("a migratable stream that a drain hands over ends with a stream_handover event and frees the engine", async () => {
    const slow = new LlmEngine({ model: engine.model, kvBlocks: 64, decodeMs: 20 });
    const drained = llmService({ engine: slow, modelId: TINY_LM_ID });
    const url = `${await serving(drained)}/v1/completions`;
    const res = await fetch(url, { method: "POST", body: JSON.stringify({ model: TINY_LM_ID, prompt: "a", max_tokens: 1000, stream: true, ignore_eos: true }), headers: { [Header.migratable]: "1" } });
    const reader = res.body!.getReader();
    await reader.read(); // a token has passed
    // A deadline it cannot meet at its pace: handed over now.
    drained.handOver(Date.now() + 1_000);
    let text = "";
    for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
    expect(text).toMatch(/"code":"stream_handover"/);
    expect(text).not.toContain("[DONE]");
    await expect.poll(() => slow.running, { timeout: 30_000 }).toBe(0);
  });

  it("a drain hands over only what cannot finish in time: a stream that will, at its pace, ends whole; one that is not migratable is never handed over", async () => {
    const slow = new LlmEngine({ model: engine.model, kvBlocks: 64, decodeMs: 5 });
    const drained = llmService({ engine: slow, modelId: TINY_LM_ID });
    const url = `${await serving(drained)}/v1/completions`;
    const stream = (migratable: boolean) =>
      fetch(url, { method: "POST", body: JSON.stringify({ model: TINY_LM_ID, prompt: "a", max_tokens: 12, stream: true, ignore_eos: true }), headers: migratable ? { [Header.migratable]: "1" } : {} });
    const rest = async (reader: ReadableStreamDefaultReader<Uint8Array>) => {
      let text = "";
      for (let r = await reader.read(); !r.done; r = await reader.read()) text += new TextDecoder().decode(r.value);
      return text;
    };
    // Ten minutes away: a 12-token stream finishes long before, and the timer for the rest is not due.
    const inTime = (await stream(true)).body!.getReader();
    // Two tokens out (its pace is known from the second on: with one, it could not be).
    let head = "";
    while ((head.match(/data: \{/g) ?? []).length < 2) head += new TextDecoder().decode((await inTime.read()).value);
    drained.handOver(Date.now() + 600_000);
    const whole = head + (await rest(inTime));
    expect(whole).toContain("[DONE]");
    expect(whole).not.toContain("stream_handover");
    // A deadline already past: a stream that is not migratable still ends whole.
    const pinned = (await stream(false)).body!.getReader();
    await pinned.read();
    drained.handOver(Date.now());
    const pinnedText = await rest(pinned);
    expect(pinnedText).toContain("[DONE]");
    expect(pinnedText).not.toContain("stream_handover");
  });

  it("a stream whose client leaves stops generating", async () => {
    const slow = new LlmEngine({ model: engine.model, kvBlocks: 64, decodeMs: 20 });
    const url = `${await serving(llmService({ engine: slow, modelId: TINY_LM_ID }))}/v1/chat/completions`;
    const client = new AbortController();
    const res = await fetch(url, { method: "POST", body: JSON.stringify({ model: TINY_LM_ID, messages: [{ role: "user", content: "a" }], max_tokens: 1000, stream: true, ignore_eos: true }), signal: client.signal });
    const reader = res.body!.getReader();
    // The role chunk, then a token: the generation runs.
    await reader.read();
    await reader.read();
    expect(slow.running).toBe(1);
    client.abort();
    await expect.poll(() => slow.running, { timeout: 30_000 }).toBe(0);
  });
});

describe("embeddings and the Responses API", () => {
  it("embeddings of a string, strings and ids, as floats or base64, with the tokens counted", async () => {
    const one = await json(await post("/v1/embeddings", { model: TINY_LM_ID, input: "the cat" }));
    expect(one).toMatchObject({ object: "list", model: TINY_LM_ID, data: [{ object: "embedding", index: 0 }] });
    const size = engine.model.embeddings!.size;
    expect(one.data[0].embedding).toHaveLength(size);
    const ids = engine.model.prompts.text("the cat");
    expect(one.usage).toEqual({ prompt_tokens: ids.length, total_tokens: ids.length });
    const many = await json(await post("/v1/embeddings", { model: TINY_LM_ID, input: ["a dog", "the cat"], encoding_format: "base64" }));
    expect(many.data.map((d: { index: number }) => d.index)).toEqual([0, 1]);
    const bytes = Buffer.from(many.data[1].embedding as string, "base64");
    expect(Array.from(new Float32Array(bytes.buffer, bytes.byteOffset, bytes.length / 4))).toEqual(one.data[0].embedding);
    const idLists = await json(await post("/v1/embeddings", { model: TINY_LM_ID, input: [ids, ids.slice(1)] }));
    expect(idLists.data[0].embedding).toEqual(one.data[0].embedding);
    expect(idLists.usage.prompt_tokens).toBe(2 * ids.length - 1);
    const asIds = await json(await post("/v1/embeddings", { model: TINY_LM_ID, input: ids, dimensions: size }));
    expect(asIds.data[0].embedding).toEqual(one.data[0].embedding);
  });

  it("a response, whole: incomplete when max_output_tokens is hit, with the Responses API's usage", async () => {
    const r = await json(await post("/v1/responses", { model: TINY_LM_ID, input: "hello", max_output_tokens: 2, temperature: 0 }));
    expect(r).toMatchObject({ object: "response", status: "incomplete", model: TINY_LM_ID, usage: { output_tokens: 2 } });
    expect(r.id).toMatch(/^resp_[0-9a-f]{32}$/);
  });

  it("a response, streamed: named events from response.created to response.completed", async () => {
    const res = await post("/v1/responses", { model: TINY_LM_ID, input: [{ role: "user", content: "hello" }], max_output_tokens: 3, stream: true, temperature: 0 });
    const text = await res.text();
    const names = [...text.matchAll(/^event: (\S+)$/gm)].map((m) => m[1]);
    expect(names[0]).toBe("response.created");
    expect(names.filter((n) => n === "response.output_text.delta")).toHaveLength(3);
    expect(names.at(-1)).toBe("response.incomplete");
  });
});

describe("a model that fails mid-generation, and the Responses API's limits", () => {
  /** tiny-lm, whose decoder fails at its fourth token (an engine's GPU lost mid-stream). */
  const failing = () => {
    const model = engine.model;
    return new LlmEngine({
      kvBlocks: 64,
      model: {
        ...model,
        decoder: (prompt, options) => {
          const d = model.decoder(prompt, options);
          let n = 0;
          return { next: () => (++n > 3 ? Promise.reject(new Error("the device is gone")) : d.next()) };
        },
      },
    });
  };

  it("a chat stream that fails after its head says so in the stream, then [DONE]", async () => {
    const url = await serving(llmService({ engine: failing(), modelId: TINY_LM_ID }));
    const res = await fetch(`${url}/v1/chat/completions`, { method: "POST", body: JSON.stringify({ model: TINY_LM_ID, messages: [{ role: "user", content: "hi" }], max_tokens: 50, stream: true, ignore_eos: true }) });
    expect(res.status).toBe(200);
    const all = await events(res);
    expect(all.at(-1)).toBe("[DONE]");
    expect(all.at(-2)).toEqual({ error: { code: "internal_error", message: "generation failed: the device is gone", type: expect.any(String) } } as never);
  });

  it("a streamed response that fails after its head ends with OpenAI's error event", async () => {
    const url = await serving(llmService({ engine: failing(), modelId: TINY_LM_ID }));
    const res = await fetch(`${url}/v1/responses`, { method: "POST", body: JSON.stringify({ model: TINY_LM_ID, input: "hi", max_output_tokens: 50, stream: true, ignore_eos: true }) });
    const text = await res.text();
    expect(text.endsWith(`event: error\ndata: ${JSON.stringify({ type: "error", code: "internal_error", message: "generation failed: the device is gone", param: null })}\n\n`)).toBe(true);
  });

  it("a response whose input and budget pass the context: 400 before anything is sent, streamed or not", async () => {
    for (const stream of [false, true]) {
      const res = await post("/v1/responses", { model: TINY_LM_ID, input: "hello", max_output_tokens: engine.maxModelLen, stream });
      expect(res.status).toBe(400);
      expect((await json(res)).error.code).toBe("bad_request");
    }
  });

  it("a response with a seed is the same text twice; completed when the turn ends before its budget", async () => {
    const ask = async () => (await json(await post("/v1/responses", { model: TINY_LM_ID, input: "hello", seed: 7, temperature: 1 }))) as { status: string; output: { content: { text: string }[] }[] };
    const [a, b] = [await ask(), await ask()];
    expect(a.output[0]!.content[0]!.text).toBe(b.output[0]!.content[0]!.text);
    expect(a.status).toBe("completed");
  });
});
