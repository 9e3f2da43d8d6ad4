/** What the edge reads from an OpenAI-style body to route it. */
import { describe, expect, it } from "vitest";
import { checkDeployments, defineDeployment } from "../../src/config/deployment.ts";
import { openaiBodyLimit, openaiModelTable, parseOpenAIBody } from "../../src/proxy/serve/request.ts";

const body = (x: unknown) => new TextEncoder().encode(typeof x === "string" ? x : JSON.stringify(x)).buffer as ArrayBuffer;
const chat = { model: "tiny-lm", messages: [{ role: "user", content: "hi" }] };

describe("parseOpenAIBody", () => {
  it("reads model, stream and user from a chat body", () => {
    expect(parseOpenAIBody("chat", body({ ...chat, stream: true, user: "alice" }))).toEqual({ ok: true, routing: { model: "tiny-lm", stream: true, streamUsage: false, user: "alice" } });
    expect(parseOpenAIBody("chat", body(chat))).toEqual({ ok: true, routing: { model: "tiny-lm", stream: false, streamUsage: false } });
  });

  it("a stream carries usage only with stream_options (chat, completions) or always (Responses): the edge reads the tail only then", () => {
    const usage = (endpoint: "chat" | "completions" | "responses", b: object) => (parseOpenAIBody(endpoint, body(b)) as { routing: { streamUsage: boolean } }).routing.streamUsage;
    expect(usage("chat", { ...chat, stream: true, stream_options: { include_usage: true } })).toBe(true);
    expect(usage("completions", { model: "m", prompt: "x", stream: true })).toBe(false);
    expect(usage("completions", { model: "m", prompt: "x", stream: true, stream_options: { include_usage: true } })).toBe(true);
    expect(usage("completions", { model: "m", prompt: "x", stream_options: { include_usage: true } })).toBe(false);
    expect(usage("responses", { model: "m", input: "x", stream: true })).toBe(true);
    // Issue 50: stream_options that does not ask for usage carries none (the edge asked for nothing, and charged a floor).
    expect(usage("chat", { ...chat, stream: true, stream_options: { include_usage: false } })).toBe(false);
    expect(usage("chat", { ...chat, stream: true, stream_options: {} })).toBe(false);
    expect(usage("chat", { ...chat, stream: true, stream_options: { include_usage: "yes" } })).toBe(false);
    expect(usage("chat", { ...chat, stream: true, stream_options: null })).toBe(false);
  });

  it("reads stream_options as sent, bounded, so the edge can ask for usage without dropping the client's other options", () => {
    const r = parseOpenAIBody("chat", body({ ...chat, stream: true, stream_options: { include_usage: false, continuous_usage_stats: true } }));
    expect(r).toMatchObject({ ok: true, routing: { streamOptions: { include_usage: false, continuous_usage_stats: true } } });
    expect(parseOpenAIBody("chat", body({ ...chat, stream: true, stream_options: { pad: "x".repeat(2000) } }))).toMatchObject({ ok: false, message: "`stream_options`: at most 1024 bytes" });
    expect(parseOpenAIBody("chat", body({ ...chat, stream: true, stream_options: [true] }))).toMatchObject({ ok: false, message: "`stream_options`: expected an object, got array" });
  });

  it("keeps unknown fields out of its way (they are forwarded, not checked)", () => {
    const r = parseOpenAIBody("completions", body({ model: "m", prompt: ["a", "b"], logit_bias: { "1": 2 }, frobnicate: true }));
    expect(r.ok).toBe(true);
  });

  it("refuses a body that sets prefill/decode disaggregation's fields, which only the router sets (vLLM's kv_transfer_params, SGLang's bootstrap fields), on every endpoint", () => {
    // vLLM NixlConnector's decode-side parameters: with them an engine would read KV blocks from the named host.
    const kv = { do_remote_prefill: true, do_remote_decode: false, remote_engine_id: "e", remote_block_ids: [1, 2], remote_host: "10.0.0.9", remote_port: 5600, remote_request_id: "r", tp_size: 1 };
    const bodies = { chat, completions: { model: "m", prompt: "x" }, embeddings: { model: "m", input: "x" }, responses: { model: "m", input: "x" } } as const;
    for (const [endpoint, b] of Object.entries(bodies) as [keyof typeof bodies, object][]) {
      for (const [name, value] of [["kv_transfer_params", kv], ["bootstrap_host", "10.0.0.9"], ["bootstrap_port", 8998], ["bootstrap_room", 12345]] as const) {
        const r = parseOpenAIBody(endpoint, body({ ...b, [name]: value }));
        expect(r, `${endpoint} ${name}`).toEqual({ ok: false, code: "bad_request", message: `\`${name}\` is set by the router for prefill/decode disaggregation, never by a client` });
      }
      // null is the fields' absence (vLLM's default).
      expect(parseOpenAIBody(endpoint, body({ ...b, kv_transfer_params: null })).ok).toBe(true);
    }
    // Only at the top level, where the engines read them.
    expect(parseOpenAIBody("chat", body({ ...chat, metadata: { kv_transfer_params: kv } })).ok).toBe(true);
  });

  it("accepts every prompt shape OpenAI accepts", () => {
    for (const prompt of ["x", ["x", "y"], [1, 2, 3], [[1], [2, 3]]]) expect(parseOpenAIBody("completions", body({ model: "m", prompt })).ok).toBe(true);
    for (const input of ["x", ["x"], [1, 2], [[1, 2]]]) expect(parseOpenAIBody("embeddings", body({ model: "m", input })).ok).toBe(true);
  });

  it("routes a Responses API body (/v1/responses) by its model: input as a string or a message list; tools pass unchecked", () => {
    expect(parseOpenAIBody("responses", body({ model: "m", input: "hi", stream: true }))).toEqual({ ok: true, routing: { model: "m", stream: true, streamUsage: true } });
    const tools = { model: "m", input: [{ role: "user", content: [{ type: "input_text", text: "x" }] }], tools: [{ type: "function", name: "f" }], tool_choice: "required", text: { format: { type: "json_object" } } };
    expect(parseOpenAIBody("responses", body(tools))).toEqual({ ok: true, routing: { model: "m", stream: false, streamUsage: false } });
    const refused = parseOpenAIBody("responses", body({ model: "m" }));
    expect(refused.ok === false && refused.message).toMatch(/`input`/);
  });

  it("refuses what cannot be routed or served, with a message naming the field", () => {
    const bad = (endpoint: "chat" | "completions" | "embeddings", x: unknown) => {
      const r = parseOpenAIBody(endpoint, body(x));
      if (r.ok) throw new Error("expected a refusal");
      expect(r.code).toBe("bad_request");
      return r.message;
    };
    expect(bad("chat", "{not json")).toMatch(/not valid JSON/);
    expect(bad("chat", "[1,2]")).toMatch(/JSON object/);
    expect(bad("chat", { messages: chat.messages })).toMatch(/`model`/);
    expect(bad("chat", { ...chat, model: "" })).toMatch(/`model`/);
    expect(bad("chat", { ...chat, messages: [] })).toMatch(/`messages`/);
    expect(bad("chat", { ...chat, stream: "yes" })).toMatch(/`stream`/);
    expect(bad("completions", { model: "m" })).toMatch(/`prompt`/);
    expect(bad("embeddings", { model: "m", input: "x", stream: true })).toMatch(/`stream`/);
  });

  it("reads the body's priority (admission, docs/admission.md): an integer, or a 400 naming the field", () => {
    const routed = (x: unknown) => parseOpenAIBody("chat", body(x));
    expect(routed({ ...chat, priority: -3 })).toMatchObject({ ok: true, routing: { priority: -3 } });
    expect(routed({ ...chat, priority: 0 })).toMatchObject({ ok: true, routing: { priority: 0 } });
    expect(routed(chat)).toMatchObject({ ok: true });
    expect((routed(chat) as { routing: object }).routing).not.toHaveProperty("priority");
    for (const bad of [1.5, "high", null, 1e300])
      expect(routed({ ...chat, priority: bad })).toMatchObject({ ok: false, code: "bad_request", message: expect.stringContaining("`priority`") });
  });

  it("reads the answer's token budget where the body sets one, for admission's fair order; leaves a bad one to the replica", () => {
    const budget = (endpoint: "chat" | "completions" | "responses", x: object) => {
      const r = parseOpenAIBody(endpoint, body(x));
      if (!r.ok) throw new Error(r.message);
      return r.routing.maxTokens;
    };
    expect(budget("chat", { ...chat, max_tokens: 64 })).toBe(64);
    expect(budget("chat", { ...chat, max_tokens: 64, max_completion_tokens: 32 })).toBe(32);
    expect(budget("completions", { model: "m", prompt: "x", max_tokens: 7 })).toBe(7);
    expect(budget("responses", { model: "m", input: "x", max_output_tokens: 9 })).toBe(9);
    expect(budget("chat", chat)).toBeUndefined();
    for (const bad of [null, -1, 1.5, "10"]) expect(budget("chat", { ...chat, max_tokens: bad })).toBeUndefined();
  });

  it("refuses invalid UTF-8", () => {
    const r = parseOpenAIBody("chat", new Uint8Array([0x7b, 0xff, 0x7d]).buffer);
    expect(r.ok).toBe(false);
  });

  it("turns any `user` into a header-safe session key", () => {
    const r = parseOpenAIBody("chat", body({ ...chat, user: "Zoë Müller" }));
    expect(r.ok && r.routing.user).toBe("Zo%C3%AB%20M%C3%BCller");
    const long = parseOpenAIBody("chat", body({ ...chat, user: "é".repeat(100) }));
    expect(long.ok).toBe(false);
  });
});

describe("the model table", () => {
  const llm = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "llm" }, openai: { models: ["tiny-lm"] } });
  const vllm = defineDeployment({
    name: "vllm",
    routePrefix: "/vllm",
    backend: { kind: "external" },
    openai: { models: ["llama", "llama-sql-lora"] },
    multiplexing: { models: ["llama", "llama-sql-lora"] },
    limits: { maxRequestBodyBytes: 20 * 1024 * 1024 },
  });
  const plain = defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "text", text: "hi" } });

  it("maps each model to its deployment; the body bound is the largest /v1 limit", () => {
    const t = openaiModelTable([llm, vllm, plain]);
    expect(t.get("tiny-lm")?.name).toBe("llm");
    expect(t.get("llama-sql-lora")?.name).toBe("vllm");
    expect(t.size).toBe(3);
    expect(openaiBodyLimit([llm, vllm, plain])).toBe(20 * 1024 * 1024);
  });

  it("refuses a model served by two deployments and a route prefix under /v1", () => {
    const twin = defineDeployment({ name: "llm2", routePrefix: "/llm2", backend: { kind: "llm" }, openai: { models: ["tiny-lm"] } });
    expect(() => checkDeployments([llm, twin])).toThrow(/served by two deployments/);
    const v1 = defineDeployment({ name: "raw", routePrefix: "/v1/raw", backend: { kind: "echo" } });
    expect(() => checkDeployments([llm, v1])).toThrow(/clashes with the OpenAI routes/);
  });

  it("with multiplexing, OpenAI models must be multiplexed model ids", () => {
    expect(() =>
      defineDeployment({ name: "x", routePrefix: "/x", backend: { kind: "external" }, openai: { models: ["a", "b"] }, multiplexing: { models: ["a"] } }),
    ).toThrow(/b not in multiplexing.models/);
  });
});
