// @ts-nocheck
// The OpenAI-compatible routes end to end: the official `openai` npm client
// against the edge on workerd, in front of two reference replicas running the
// tiny language model (real ONNX inference, token by token, paced at 25 ms per
// token so streams are observable).
import OpenAI from "openai";
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import type { ReplicaProcess } from "../../src/local/stack.ts";
import { signedFetch, sleep, startStack, until } from "./stack-fixture.ts";

const DECODE_MS = 25;
let stack: Awaited<ReturnType<typeof startStack>>;
let client: OpenAI;
const replicas: ReplicaProcess[] = [];

const startLlmReplica = (id: string) =>
  stack.startReplica("llm", { id, backendArgs: ["--backend", "llm", "--model", "tiny-lm", "--decode-ms", String(DECODE_MS)] });

beforeAll(async () => {
  stack = await startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-openai") });
  replicas.push(await startLlmReplica("llm-a"), await startLlmReplica("llm-b"));
  client = new OpenAI({ baseURL: `${stack.workerdUrl}/v1`, apiKey: "not-needed-for-public", maxRetries: 0 });
}, 120_000);

afterAll(async () => {
  await stack?.dispose();
});

/** The replica's engine gauge, from its vLLM-named /metrics. */
async function running(replica: ReplicaProcess): Promise<number> {
  const text = await (await fetch(`${replica.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("vllm:num_requests_running"));
  return Number(line?.split(" ").at(-1));
}

/** Tokens the replica generated since it started (vLLM's counter, from its /metrics). */
async function generated(replica: ReplicaProcess): Promise<number> {
  const text = await (await fetch(`${replica.url}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith("vllm:generation_tokens_total"));
  return Number(line?.split(" ").at(-1));
}

const chat = (content: string) => [{ role: "user" as const, content }];

describe("OpenAI routes through the edge, with the official client", () => {
  it("lists the served models", async () => {
    const models = await client.models.list();
    expect(models.data.map((m) => m.id)).toEqual(["tiny-lm"]);
    expect(models.data[0]!.owned_by).toBe("llm");
  });

  it("retrieves one model by id (the SDK's models.retrieve), and an unknown one is a 404 model_not_found", async () => {
    expect(await client.models.retrieve("tiny-lm")).toMatchObject({ id: "tiny-lm", object: "model", owned_by: "llm" });
    await expect(client.models.retrieve("gpt-9")).rejects.toMatchObject({ status: 404, code: "model_not_found" });
    // Private deployments' models only for a caller whose key may use them.
    await expect(client.models.retrieve("private-model")).rejects.toMatchObject({ status: 404 });
  });

  it("the SDK's stream helpers finish on the shipped model: its answers end (the chat template's end of turn)", async () => {
    const responses = client.responses.stream({ model: "tiny-lm", input: "Tell me about replicas.", max_output_tokens: 400 });
    let text = "";
    for await (const e of responses) if (e.type === "response.output_text.delta") text += e.delta;
    const final = await responses.finalResponse();
    expect(final.status).toBe("completed");
    expect(final.output_text).toBe(text);
    expect(final.usage!.output_tokens).toBeLessThan(400);
    const chatStream = client.chat.completions.stream({ model: "tiny-lm", messages: chat("Tell me about replicas."), max_tokens: 400 });
    const completion = await chatStream.finalChatCompletion();
    expect(completion.choices[0]!.finish_reason).toBe("stop");
  });

  it("chat completion, not streamed: the same text as the replica gives directly", async () => {
    // ignore_eos (vLLM's): all 12 tokens, past the end of the turn, so the count is known.
    const params = { model: "tiny-lm", messages: chat("What does the proxy do?"), max_tokens: 12, temperature: 0, ignore_eos: true };
    const { data, response } = await client.chat.completions.create(params).withResponse();
    expect(response.headers.get("x-switchyard-replica")).toMatch(/^llm-[ab]$/);
    const text = data.choices[0]!.message.content!;
    expect(text.length).toBeGreaterThan(0);
    expect(data.usage!.completion_tokens).toBe(12);
    expect(data.object).toBe("chat.completion");
    // Straight to a replica, signed as the edge signs (a replica serves nothing else).
    const direct = new OpenAI({ baseURL: `${replicas[0]!.url}/v1`, apiKey: "x", maxRetries: 0, fetch: signedFetch(stack, "llm") });
    const same = await direct.chat.completions.create(params);
    expect(same.choices[0]!.message.content).toBe(text);
  });

  it("chat completion, streamed: tokens arrive one by one, as produced, and add up to the unstreamed text", async () => {
    const params = { model: "tiny-lm", messages: chat("Tell me about replicas."), max_tokens: 16, temperature: 0, ignore_eos: true };
    const whole = (await client.chat.completions.create(params)).choices[0]!.message.content!;
    const stream = await client.chat.completions.create({ ...params, stream: true, stream_options: { include_usage: true } });
    let text = "";
    const arrivals: number[] = [];
    let usage: OpenAI.CompletionUsage | undefined | null;
    for await (const chunk of stream) {
      const delta = chunk.choices[0]?.delta?.content;
      if (delta) {
        text += delta;
        arrivals.push(performance.now());
      }
      if (chunk.usage) usage = chunk.usage;
    }
    expect(text).toBe(whole);
    expect(usage?.completion_tokens).toBe(16);
    // Not buffered: 16 tokens paced 25 ms apart reach the client spread over time, not in one burst.
    expect(arrivals.length).toBeGreaterThanOrEqual(8);
    expect(arrivals.at(-1)! - arrivals[0]!).toBeGreaterThan(10 * DECODE_MS * 0.6);
  });

  it("completions (streamed and not) and embeddings", async () => {
    const c = await client.completions.create({ model: "tiny-lm", prompt: "The replica", max_tokens: 10, seed: 7, temperature: 0.8 });
    expect(c.choices[0]!.text.length).toBeGreaterThan(0);
    let streamed = "";
    for await (const chunk of await client.completions.create({ model: "tiny-lm", prompt: "The replica", max_tokens: 10, seed: 7, temperature: 0.8, stream: true })) {
      streamed += chunk.choices[0]?.text ?? "";
    }
    expect(streamed).toBe(c.choices[0]!.text);
    const e = await client.embeddings.create({ model: "tiny-lm", input: ["the proxy", "the replica"] });
    expect(e.data).toHaveLength(2);
    expect(e.data[0]!.embedding.length).toBeGreaterThan(8);
    expect(e.data[0]!.embedding).not.toEqual(e.data[1]!.embedding);
  });

  it("errors come in OpenAI's shape with the right status, and the client raises them", async () => {
    await expect(client.chat.completions.create({ model: "gpt-9", messages: chat("hi") })).rejects.toMatchObject({ status: 404, code: "model_not_found" });
    await expect(client.chat.completions.create({ model: "tiny-lm", messages: [] })).rejects.toMatchObject({ status: 400, type: "invalid_request_error" });
    // The replica's own validation comes through unchanged.
    await expect(client.chat.completions.create({ model: "tiny-lm", messages: chat("hi"), n: 2 })).rejects.toMatchObject({ status: 400 });
    const raw = await fetch(`${stack.workerdUrl}/v1/chat/completions`, { method: "POST", headers: { "content-type": "application/json" }, body: "{nope" });
    expect(raw.status).toBe(400);
    expect(await raw.json()).toMatchObject({ error: { type: "invalid_request_error", code: "bad_request", message: expect.stringMatching(/JSON/) } });
    const get = await fetch(`${stack.workerdUrl}/v1/chat/completions`);
    expect(get.status).toBe(405);
    const other = await fetch(`${stack.workerdUrl}/v1/audio/speech`, { method: "POST", body: "{}" });
    expect(other.status).toBe(404);
    expect(await other.json()).toMatchObject({ error: { code: "route_not_found" } });
    // A private deployment's model, without a key it accepts, is answered as an unknown model (its name stays unknown).
    const priv = new OpenAI({ baseURL: `${stack.workerdUrl}/v1`, apiKey: "sy-wrong", maxRetries: 0 });
    await expect(priv.chat.completions.create({ model: "private-model", messages: chat("hi") })).rejects.toMatchObject({ status: 404, code: "model_not_found" });
  });

  it("`user` keeps a conversation on one replica", async () => {
    const served = async (user: string) => {
      const { response } = await client.chat.completions.create({ model: "tiny-lm", messages: chat("hi"), max_tokens: 2, user }).withResponse();
      return response.headers.get("x-switchyard-replica");
    };
    for (const user of ["alice", "bob ü", "carol"]) {
      const first = await served(user);
      for (let i = 0; i < 4; i++) expect(await served(user)).toBe(first);
    }
  });

  it("a client that disconnects mid-stream cancels the replica's generation", async () => {
    const abort = new AbortController();
    const res = await fetch(`${stack.workerdUrl}/v1/completions`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ model: "tiny-lm", prompt: "A long story", max_tokens: 400, stream: true }),
      signal: abort.signal,
    });
    const replica = replicas.find((r) => r.id === res.headers.get("x-switchyard-replica"))!;
    const reader = res.body!.getReader();
    await reader.read();
    await reader.read();
    expect(await running(replica)).toBe(1);
    abort.abort();
    // 400 tokens would take 10 s; the replica must stop within a fraction of that.
    const end = Date.now() + 3_000;
    while ((await running(replica)) !== 0) {
      if (Date.now() > end) throw new Error("the replica kept generating after the client left");
      await sleep(50);
    }
  });

  it("a client that leaves a stream whose usage the edge reads (Responses, include_usage) cancels the replica's generation too", async () => {
    const requests: [string, Record<string, unknown>][] = [
      ["/v1/responses", { model: "tiny-lm", input: "The replica", max_output_tokens: 400, stream: true, ignore_eos: true }],
      ["/v1/chat/completions", { model: "tiny-lm", messages: chat("The replica"), max_tokens: 400, stream: true, stream_options: { include_usage: true }, ignore_eos: true }],
      ["/v1/completions", { model: "tiny-lm", prompt: "The replica", max_tokens: 400, stream: true, stream_options: { include_usage: true } }],
    ];
    for (const [path, body] of requests) {
      const generatedBefore = await Promise.all(replicas.map(generated));
      const abort = new AbortController();
      const res = await fetch(`${stack.workerdUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body: JSON.stringify(body), signal: abort.signal });
      expect(res.status, path).toBe(200);
      const replica = replicas.find((r) => r.id === res.headers.get("x-switchyard-replica"))!;
      const reader = res.body!.getReader();
      await reader.read();
      await reader.read();
      abort.abort();
      // The replica's generation ends (the event), and it generated far fewer than the 400 tokens asked.
      await until(`${path}: the replica to stop generating`, async () => ((await running(replica)) === 0 ? true : undefined), 60_000);
      const generatedAfter = await Promise.all(replicas.map(generated));
      const made = generatedAfter.reduce((n, g, i) => n + g - generatedBefore[i]!, 0);
      expect(made, path).toBeLessThan(200);
    }
  });

  it("a replica that dies mid-stream: the shipped deployment continues the stream on the survivor (migration), and new requests go there", async () => {
    const stream = await client.completions.create({ model: "tiny-lm", prompt: "Once", max_tokens: 400, stream: true }).withResponse();
    const victim = replicas.find((r) => r.id === stream.response.headers.get("x-switchyard-replica"))!;
    let chunks = 0;
    let tokens = 0;
    const ids = new Set<string>();
    const consumed = (async () => {
      for await (const chunk of stream.data) {
        ids.add(chunk.id);
        if (chunk.choices[0]?.text) tokens++;
        if (++chunks === 3) victim.child.kill("SIGKILL");
      }
    })();
    // functions/llm.ts sets openai.migrationLimit (docs/migration.md): no error reaches the SDK, and the
    // answer is whole, one id. (test/e2e/migration.test.ts has the stream that breaks without it.)
    await expect(consumed).resolves.toBeUndefined();
    expect(tokens).toBe(400);
    expect(ids.size).toBe(1);
    await victim.exited;
    // Before the first byte, a dead replica is retried elsewhere: every request succeeds.
    for (let i = 0; i < 6; i++) {
      const { response } = await client.chat.completions.create({ model: "tiny-lm", messages: chat("still there?"), max_tokens: 2 }).withResponse();
      expect(response.headers.get("x-switchyard-replica")).not.toBe(victim.id);
    }
  });
});
