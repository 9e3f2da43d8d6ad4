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

  it("every field's bounds: accepted at the edge of its range, refused past it, the message naming the field", async () => {
    const m = TINY_LM_ID;
    const c = (o: Record<string, unknown>) => ["/v1/completions", { model: m, prompt: "a", max_tokens: 1, ...o }] as const;
    const ch = (o: Record<string, unknown>) => ["/v1/chat/completions", { model: m, messages: [{ role: "user", content: "a" }], max_tokens: 1, ...o }] as const;
    const e = (o: Record<string, unknown>) => ["/v1/embeddings", { model: m, ...o }] as const;
    const msg = (role: string, content: unknown = "a") => ch({ messages: [{ role, content }] });
    // [request, the refusal's message, or null: served]
    const table: [readonly [string, Record<string, unknown>], string | null][] = [
      // The cap passes the schema; this prompt and 1,024 then pass the context (a different refusal).
      [c({ max_tokens: 1024 }), "This model's maximum context length is 1024 tokens. However, you requested 1025 tokens (1 in the prompt, 1024 for the completion). Please reduce the prompt or max_tokens."],
      [c({ max_tokens: 1023 }), null],
      [c({ max_tokens: 1025 }), "'max_tokens': Too big: expected number to be <=1024"],
      [c({ max_tokens: 0 }), "'max_tokens': Too small: expected number to be >=1"],
      [c({ temperature: 0 }), null],
      [c({ temperature: 2 }), null],
      [c({ temperature: 2.5 }), "'temperature': Too big: expected number to be <=2"],
      [c({ temperature: -1 }), "'temperature': Too small: expected number to be >=0"],
      [c({ top_p: 1 }), null],
      [c({ top_p: 0 }), "'top_p': Too small: expected number to be >0"],
      [c({ top_p: 1.5 }), "'top_p': Too big: expected number to be <=1"],
      [c({ stop: ["a", "b", "c", "d"] }), null],
      [c({ stop: ["a", "b", "c", "d", "e"] }), "'stop': at most 4 stop sequences"],
      [c({ stop: [1] }), "'stop': Invalid input"],
      [c({ n: 1 }), null],
      [c({ n: 2 }), "'n': only n=1 is supported (one choice per request)"],
      [c({ stream_options: { include_usage: "yes" } }), "'stream_options.include_usage': Invalid input: expected boolean, received string"],
      [c({ presence_penalty: -2, frequency_penalty: 2 }), null],
      [c({ presence_penalty: 2, frequency_penalty: -2 }), null],
      [c({ presence_penalty: 2.5 }), "'presence_penalty': Too big: expected number to be <=2"],
      [c({ presence_penalty: -2.5 }), "'presence_penalty': Too small: expected number to be >=-2"],
      [c({ frequency_penalty: 2.5 }), "'frequency_penalty': Too big: expected number to be <=2"],
      [c({ frequency_penalty: -2.5 }), "'frequency_penalty': Too small: expected number to be >=-2"],
      [c({ prompt: [5, 6] }), null],
      [c({ prompt: [-1] }), "'prompt.0': Too small: expected number to be >=0"],
      [c({ prompt: ["a", "b"] }), "'prompt': Invalid input"],
      [c({ echo: false, suffix: "", best_of: 1, logprobs: null }), null],
      [c({ echo: true }), "'echo': echo is not supported by this server"],
      [c({ suffix: "x" }), "'suffix': suffix is not supported by this server"],
      [c({ best_of: 2 }), "'best_of': best_of > 1 is not supported by this server"],
      [c({ logprobs: 1 }), "'logprobs': logprobs is not supported by this server"],
      [c({ logprobs: 0 }), "'logprobs': logprobs is not supported by this server"],
      [ch({ max_completion_tokens: 1024 }), "This model's maximum context length is 1024 tokens. However, you requested 1043 tokens (19 in the prompt, 1024 for the completion). Please reduce the prompt or max_tokens."],
      [ch({ max_completion_tokens: 1000 }), null],
      [ch({ max_completion_tokens: 1025 }), "'max_completion_tokens': Too big: expected number to be <=1024"],
      [ch({ max_completion_tokens: 0 }), "'max_completion_tokens': Too small: expected number to be >=1"],
      [ch({ messages: [] }), "'messages': Too small: expected array to have >=1 items"],
      [ch({ messages: [{ role: "system", content: "s" }, { role: "user", content: "a" }, { role: "assistant", content: "b" }, { role: "user", content: "c" }] }), null],
      [msg("developer"), null],
      [msg("tool"), null],
      [msg("function"), "'messages.0.role': Invalid option: expected one of \"system\"|\"developer\"|\"user\"|\"assistant\"|\"tool\""],
      [msg("user", [{ type: "text", text: "a" }]), null],
      [msg("user", null), null],
      [msg("user", [{ type: "image_url", image_url: { url: "x" } }]), "'messages.0.content.0': only text content parts are supported"],
      [msg("user", [{ type: "text" }]), "'messages.0.content.0': only text content parts are supported"],
      [msg("user", 5), "'messages.0.content': Invalid input"],
      [ch({ logprobs: false, top_logprobs: null }), null],
      [ch({ logprobs: true }), "'logprobs': logprobs is not supported by this server"],
      [ch({ top_logprobs: 0 }), "'top_logprobs': top_logprobs is not supported by this server"],
      [e({ input: "a" }), null],
      [e({ input: ["a", "b"] }), null],
      [e({ input: [[1], [2]] }), null],
      [e({ input: [1, 2] }), null],
      [e({ model: "", input: "a" }), "The model `` does not exist. This server serves `tiny-lm`."],
      // No input at all is refused, as OpenAI refuses it, not answered with no embeddings.
      [e({ input: [] }), "'input': Invalid input"],
      [e({ input: [[1], []] }), "'input'[1]: empty input"],
      [e({ input: Array.from({ length: 8193 }, () => 1) }), "'input': 8193 tokens, at most 8192"],
      [e({ input: [[1], Array.from({ length: 8193 }, () => 1)] }), "'input'[1]: 8193 tokens, at most 8192"],
      [e({ input: "a", encoding_format: "hex" }), "'encoding_format': Invalid option: expected one of \"float\"|\"base64\""],
      [e({ input: "a", dimensions: 0 }), "'dimensions': Too small: expected number to be >=1"],
      [e({ input: Array.from({ length: 2049 }, () => "a") }), "'input': Invalid input"],
    ];
    const got: [string, string | null][] = [];
    for (const [[path, body]] of table) {
      const res = await post(path, body);
      got.push([JSON.stringify(body), res.status === 200 ? ((await res.arrayBuffer()), null) : (await json(res)).error.message]);
    }
    expect(got).toEqual(table.map(([[, body], want]) => [JSON.stringify(body), want]));
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
    // Resolved: the connection closed. The answer, unless the close's reset discarded it (oversized-upload.ts).
    const big = await oversizedUpload(`${base}/v1/completions`);
    if (big) expect(big.status).toBe(413);
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

  it("stop as a list ends at the first of them to appear; a chat also ends at its turn's end, unless ignore_eos", async () => {
    const free = await json(await post("/v1/completions", { model: TINY_LM_ID, prompt: "a", temperature: 0, ignore_eos: true, max_tokens: 40 }));
    const text = free.choices[0].text as string;
    const listed = await json(await post("/v1/completions", { model: TINY_LM_ID, prompt: "a", temperature: 0, max_tokens: 40, stop: ["\u0000never", text.slice(6, 8)] }));
    expect(listed.choices[0]).toMatchObject({ finish_reason: "stop", text: text.slice(0, text.indexOf(text.slice(6, 8))) });
    // A chat whose turn ends before 200 tokens (the first seed that does): it stops there; with ignore_eos, the same seed runs its whole budget.
    const chat = { model: TINY_LM_ID, messages: [{ role: "user", content: "hi" }], max_tokens: 200 };
    let seed = 0;
    let ended: Record<string, any> | undefined;
    while (!ended && seed < 50) {
      const r = await json(await post("/v1/chat/completions", { ...chat, seed: ++seed }));
      if (r.choices[0].finish_reason === "stop") ended = r;
    }
    expect(ended?.usage.completion_tokens).toBeLessThan(200);
    const ran = await json(await post("/v1/chat/completions", { ...chat, seed, ignore_eos: true }));
    expect(ran.choices[0].finish_reason).toBe("length");
    expect(ran.usage.completion_tokens).toBe(200);
    expect((ran.choices[0].message.content as string).startsWith(ended!.choices[0].message.content)).toBe(true);
    // The same for the Responses API.
    const resp = { model: TINY_LM_ID, input: [{ role: "user", content: "hi" }], seed, max_output_tokens: 200 };
    expect((await json(await post("/v1/responses", resp))).usage.output_tokens).toBeLessThan(200);
    expect((await json(await post("/v1/responses", { ...resp, ignore_eos: true }))).usage.output_tokens).toBe(200);
    // A completion has no turn to end: it runs to its budget either way.
    expect((await json(await post("/v1/completions", { model: TINY_LM_ID, prompt: "hi", temperature: 0, max_tokens: 40 }))).usage.completion_tokens).toBe(40);
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
    expect(chunks[5]).toMatchObject({ usage: null });
    expect(chunks[5].choices).toEqual([{ index: 0, delta: {}, logprobs: null, finish_reason: "length" }]);
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
