// @ts-nocheck
// The OpenAI ecosystem end to end (issue 17 §3): the Python `openai` client (in its
// own virtualenv) against the edge and the tiny-LM replicas, including the Responses
// API; tool-call and JSON-mode bodies reaching the replica byte for byte (an echo
// replica answers with what it received); and token usage per API key in the
// request log line and in /-/metrics.
import { execFile } from "node:child_process";
import { createHash } from "node:crypto";
import { join } from "node:path";
import { promisify } from "node:util";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { pythonEnv } from "../../scripts/python-env.ts";
import { startStack, until } from "./stack-fixture.ts";

const run = promisify(execFile);
/** The Python `openai` client version the test installs (from the machine's package index). */
const PY_OPENAI_VERSION = "2.54.0";

let stack: Awaited<ReturnType<typeof startStack>>;

/** The virtualenv with the pinned client (scripts/python-env.ts: made once, kept between runs, configured indexes only). */
const pythonWithOpenAI = () => pythonEnv("openai", [`openai==${PY_OPENAI_VERSION}`]);

let python: string;

beforeAll(async () => {
  [python, stack] = await Promise.all([pythonWithOpenAI(), startStack({ functionsDir: join(import.meta.dirname, "fixtures/functions-openai-ecosystem") })]);
  for (const id of ["llm-a", "llm-b"]) await stack.startReplica("llm", { id, backendArgs: ["--backend", "llm", "--model", "tiny-lm", "--decode-ms", "5"] });
}, 600_000);

afterAll(async () => {
  await stack?.dispose();
});

const admin = () => ({ authorization: `Bearer ${stack.adminSecret}`, "content-type": "application/json" });

/** switchyard_tokens_total samples for a deployment, as { "<key>/<kind>": value }. */
/** Requests the deployment's replica has admitted (its /-/healthz). */
async function admitted(deployment: string): Promise<number> {
  const replica = [...stack.replicas.values()].find((r) => r.deployment === deployment)!;
  return ((await (await fetch(`${replica.url}/-/healthz`)).json()) as { admitted: number }).admitted;
}

async function tokenCounters(deployment: string): Promise<Record<string, number>> {
  const text = await (await fetch(`${stack.url}/-/metrics`, { headers: admin() })).text();
  const out: Record<string, number> = {};
  for (const line of text.split("\n")) {
    const m = /^switchyard_tokens_total\{deployment="([^"]*)",key="([^"]*)",kind="([^"]*)"\} (\d+)$/.exec(line);
    if (m && m[1] === deployment) out[`${m[2]}/${m[3]}`] = Number(m[4]);
  }
  return out;
}

const logLine = (requestId: string) => {
  const raw = stack.logLines.find((l) => l.includes(`"request_id":"${requestId}"`) && l.includes('"msg":"request"'));
  return raw ? (JSON.parse(raw.slice(raw.indexOf("{"))) as Record<string, unknown>) : undefined;
};

interface PyOut {
  version: string;
  models: string[];
  chat: { object: string; text: string; usage: { prompt_tokens: number; completion_tokens: number } };
  chat_stream: { text: string; usage: { prompt_tokens: number; completion_tokens: number } | null };
  completions: { text: string; streamed: string; usage: { prompt_tokens: number; completion_tokens: number } };
  embeddings: { count: number; dims: number; differ: boolean; usage: { prompt_tokens: number } };
  responses: { object: string; status: string; text: string; usage: { input_tokens: number; output_tokens: number; total_tokens: number } };
  responses_stream: { events: string[]; text: string; final_text: string; usage: { input_tokens: number; output_tokens: number } };
  responses_helper: { status: string; text: string; final_text: string; input_tokens: number; output_tokens: number };
  chat_helper: { finish_reason: string; completion_tokens: number | null };
  model_retrieve: { id: string; object: string; owned_by: string };
  errors: Record<string, { class: string; status: number; body: { code?: string; type?: string; message?: string } } | null>;
}

describe("the OpenAI ecosystem through the edge", () => {
  let py: PyOut;
  let before: Record<string, number>;

  it("the Python openai client: models, chat (streamed and not), completions, embeddings, responses, errors", async () => {
    before = await tokenCounters("llm");
    const { stdout } = await run(python, [join(import.meta.dirname, "fixtures/py-openai/client.py"), `${stack.workerdUrl}/v1`], { maxBuffer: 16 * 1024 * 1024 });
    py = JSON.parse(stdout) as PyOut;
    expect(py.version).toBe(PY_OPENAI_VERSION);
    expect(py.models.sort()).toEqual(["echo-model", "tiny-lm"]);
    expect(py.chat.object).toBe("chat.completion");
    expect(py.chat.text.length).toBeGreaterThan(0);
    expect(py.chat.usage.completion_tokens).toBe(12);
    expect(py.chat_stream.text).toBe(py.chat.text);
    expect(py.chat_stream.usage).toEqual(py.chat.usage);
    expect(py.completions.streamed).toBe(py.completions.text);
    expect(py.embeddings).toMatchObject({ count: 2, differ: true });
    expect(py.responses).toMatchObject({ object: "response", status: "incomplete", usage: { output_tokens: 10 } });
    expect(py.responses.text.length).toBeGreaterThan(0);
    // The same input as a message list: the same prompt, the same greedy text, streamed.
    expect(py.responses_stream.text).toBe(py.responses.text);
    expect(py.responses_stream.final_text).toBe(py.responses.text);
    expect(py.responses_stream.usage).toMatchObject({ input_tokens: py.responses.usage.input_tokens, output_tokens: 10 });
    const ev = py.responses_stream.events;
    expect(ev[0]).toBe("response.created");
    expect(ev.filter((e) => e === "response.output_text.delta").length).toBeGreaterThanOrEqual(5);
    expect(ev.at(-1)).toBe("response.incomplete");
    // The SDKs' stream helpers finish: the model ends its answer (the chat template's end of turn).
    expect(py.responses_helper).toMatchObject({ status: "completed" });
    expect(py.responses_helper.final_text).toBe(py.responses_helper.text);
    expect(py.responses_helper.output_tokens).toBeLessThan(400);
    expect(py.chat_helper.finish_reason).toBe("stop");
    expect(py.model_retrieve).toMatchObject({ id: "tiny-lm", object: "model", owned_by: "llm" });
    expect(py.errors.unknown_model).toMatchObject({ class: "NotFoundError", status: 404, body: { code: "model_not_found" } });
    expect(py.errors.responses_unknown_model).toMatchObject({ class: "NotFoundError", status: 404 });
    expect(py.errors.empty_messages).toMatchObject({ class: "BadRequestError", status: 400, body: { type: "invalid_request_error" } });
    expect(py.errors.replica_validation).toMatchObject({ class: "BadRequestError", status: 400 });
  });

  it("counts the Python client's tokens under key \"public\" in /-/metrics", async () => {
    // Every answer above that reported usage: chat ×2, completions (the stream had no include_usage), embeddings,
    // responses ×2 and the responses helper's (a Responses stream always carries usage; the chat helper's had none).
    const u = py;
    const prompt = u.chat.usage.prompt_tokens * 2 + u.completions.usage.prompt_tokens + u.embeddings.usage.prompt_tokens + u.responses.usage.input_tokens * 2 + u.responses_helper.input_tokens;
    const completion = u.chat.usage.completion_tokens * 2 + u.completions.usage.completion_tokens + u.responses.usage.output_tokens * 2 + u.responses_helper.output_tokens;
    expect(prompt).toBeGreaterThan(0);
    const got = await until(
      "the Python client's tokens in /-/metrics",
      async () => {
        // An isolate flushes its counters on traffic (at most every 2 s): keep some flowing.
        await fetch(`${stack.workerdUrl}/v1/embeddings`, { method: "POST", body: '{"model":"echo-model","input":"x"}' }).then((r) => r.arrayBuffer());
        const now = await tokenCounters("llm");
        const d = (k: string) => (now[k] ?? 0) - (before[k] ?? 0);
        return d("public/completion") >= completion && d("public/prompt") >= prompt ? { prompt: d("public/prompt"), completion: d("public/completion") } : undefined;
      },
      20_000,
    );
    expect(got).toEqual({ prompt, completion });
  });

  it("the request log line carries the tokens of a streamed chat with include_usage and of a streamed response", async () => {
    const chat = await fetch(`${stack.workerdUrl}/v1/chat/completions`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": "tokens-chat-1" },
      body: JSON.stringify({ model: "tiny-lm", messages: [{ role: "user", content: "hi" }], max_tokens: 6, stream: true, stream_options: { include_usage: true }, ignore_eos: true }),
    });
    const sse = await chat.text();
    const usage = JSON.parse(sse.split("\n\n").filter((e) => e.includes('"usage":{')).at(-1)!.slice("data: ".length)).usage;
    const line = await until("the chat's log line", () => logLine("tokens-chat-1"));
    expect(line).toMatchObject({ deployment: "llm", status: 200, key: "public", prompt_tokens: usage.prompt_tokens, completion_tokens: 6 });

    const resp = await fetch(`${stack.workerdUrl}/v1/responses`, {
      method: "POST",
      headers: { "content-type": "application/json", "x-request-id": "tokens-resp-1" },
      body: JSON.stringify({ model: "tiny-lm", input: "hello", max_output_tokens: 4, stream: true, ignore_eos: true }),
    });
    expect(resp.headers.get("content-type")).toMatch(/^text\/event-stream/);
    const text = await resp.text();
    expect(text).toMatch(/^event: response\.created\ndata: \{"type":"response\.created","sequence_number":0,/);
    const rline = await until("the response's log line", () => logLine("tokens-resp-1"));
    expect(rline).toMatchObject({ deployment: "llm", key: "public", completion_tokens: 4 });
  });

  it("tool-call and JSON-mode bodies reach the replica byte for byte (chat and responses)", async () => {
    // Odd spacing, key order and unicode escapes: nothing is re-serialised on the way.
    const chatBody =
      '{ "model":"echo-model","messages":[{"role":"user","content":"weather in Par\\u00eds?"}],\n' +
      '  "tools":[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}}],' +
      '"tool_choice":{"type":"function","function":{"name":"get_weather"}},"response_format":{"type":"json_object"},"temperature":0.0 }';
    const responsesBody = '{"tools":[{"type":"function","name":"f","parameters":{}}],"tool_choice":"required","model":"echo-model","input":[{"role":"user","content":"x"}],"text":{"format":{"type":"json_object"}}}';
    for (const [path, body] of [
      ["/v1/chat/completions", chatBody],
      ["/v1/responses", responsesBody],
    ] as const) {
      const res = await fetch(`${stack.workerdUrl}${path}`, { method: "POST", headers: { "content-type": "application/json" }, body });
      expect(res.status).toBe(200);
      const echoed = Buffer.from(await res.arrayBuffer());
      expect(createHash("sha256").update(echoed).digest("hex")).toBe(createHash("sha256").update(body).digest("hex"));
      expect(echoed.toString("utf8")).toBe(body);
    }
  });

  it("an engine that schedules by vLLM's priority gets the request's priority in the body, negated (openai.enginePriority)", async () => {
    const created = await fetch(`${stack.url}/-/deployments/vllm-echo/keys`, { method: "POST", headers: admin(), body: JSON.stringify({ name: "priority" }) });
    expect(created.status).toBe(201);
    const { key } = (await created.json()) as { key: string };
    /** What the engine (an echo replica) received for this body and these headers. */
    const received = async (body: string, headers: Record<string, string> = {}) => {
      const res = await fetch(`${stack.workerdUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", ...headers }, body });
      return { status: res.status, body: await res.text() };
    };
    const chat = '{"model":"echo-vllm","messages":[{"role":"user","content":"x"}],"max_tokens":4}';
    await until("the new key to be accepted", async () => ((await received(chat)).status === 200 ? true : undefined));
    // Standard (0, vLLM's default): the body goes as it was sent.
    expect(await received(chat)).toEqual({ status: 200, body: chat });
    // Critical by the deployment's priority header: vLLM's -1 (served before its default 0); no other byte changes.
    expect(await received(chat, { "x-priority": "critical" })).toEqual({ status: 200, body: `${chat.slice(0, -1)},"priority":-1}` });
    // Sheddable: 1 (after it).
    expect(await received(chat, { "x-priority": "sheddable" })).toEqual({ status: 200, body: `${chat.slice(0, -1)},"priority":1}` });
    // The client's own `priority` (Switchyard's sense) is capped at maxPriority (1), and what the engine reads is the edge's: the last member wins.
    const asked = '{"model":"echo-vllm","priority":50,"messages":[{"role":"user","content":"x"}]}';
    const got = await received(asked);
    expect(got.status).toBe(200);
    expect((JSON.parse(got.body) as { priority: number }).priority).toBe(-1);
  });

  it("a key over its token limit gets 429 token_limited with Retry-After before the replica sees its request; another key is not held back", async () => {
    const keyOf = async (name: string) => {
      const created = await fetch(`${stack.url}/-/deployments/metered-echo/keys`, { method: "POST", headers: admin(), body: JSON.stringify({ name }) });
      expect(created.status).toBe(201);
      return ((await created.json()) as { key: string }).key;
    };
    const [spender, other] = [await keyOf("spender"), await keyOf("other")];
    const ask = async (key: string, usage: { prompt_tokens: number; completion_tokens: number }) => {
      const body = JSON.stringify({ model: "echo-metered", messages: [{ role: "user", content: "x" }], usage: { ...usage, total_tokens: usage.prompt_tokens + usage.completion_tokens } });
      const res = await fetch(`${stack.workerdUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json" }, body });
      return { status: res.status, retryAfter: res.headers.get("retry-after"), body: await res.text() };
    };
    await until("the new keys to be accepted", async () => ((await ask(spender, { prompt_tokens: 0, completion_tokens: 0 })).status === 200 && (await ask(other, { prompt_tokens: 0, completion_tokens: 0 })).status === 200 ? true : undefined));
    const before = await admitted("metered-echo");
    // 80 + 40 tokens: over the burst of 100. The answer is served in full and charged after it.
    expect((await ask(spender, { prompt_tokens: 80, completion_tokens: 40 })).status).toBe(200);
    // The charge lands once the answer has passed (in the background): the next request is refused.
    const refused = await until("the key's bucket to be spent", async () => {
      const r = await ask(spender, { prompt_tokens: 1, completion_tokens: 1 });
      return r.status === 429 ? r : undefined;
    });
    expect(JSON.parse(refused.body)).toMatchObject({ error: { code: "token_limited", type: "rate_limit_error" } });
    // 20 tokens below zero at 1 token/s: about 21 s to wait.
    expect(Number(refused.retryAfter)).toBeGreaterThanOrEqual(15);
    expect(Number(refused.retryAfter)).toBeLessThanOrEqual(22);
    // The refusal never reached the replica; the other key is not held back.
    expect((await admitted("metered-echo")) - before).toBe(1);
    expect((await ask(other, { prompt_tokens: 5, completion_tokens: 5 })).status).toBe(200);
  });

  it("a private deployment's tokens count under the key's prefix, never the key", async () => {
    const created = await fetch(`${stack.url}/-/deployments/private-echo/keys`, { method: "POST", headers: admin(), body: JSON.stringify({ name: "tokens" }) });
    expect(created.status).toBe(201);
    const { key, prefix } = (await created.json()) as { key: string; prefix: string };
    // The echo replica answers with this body, so its `usage` is what the edge reads from the answer.
    const body = JSON.stringify({ model: "echo-private", messages: [{ role: "user", content: "x" }], usage: { prompt_tokens: 11, completion_tokens: 22, total_tokens: 33 } });
    await until("the new key to be accepted", async () => {
      const res = await fetch(`${stack.workerdUrl}/v1/chat/completions`, { method: "POST", headers: { authorization: `Bearer ${key}`, "content-type": "application/json", "x-request-id": "tokens-key-1" }, body });
      await res.arrayBuffer();
      return res.status === 200 ? true : undefined;
    });
    // An isolate flushes its counters on traffic (at most every 2 s): keep some flowing.
    const nudge = () => fetch(`${stack.workerdUrl}/v1/embeddings`, { method: "POST", body: '{"model":"echo-model","input":"x"}' }).then((r) => r.arrayBuffer());
    const counters = await until("the key's tokens in /-/metrics", async () => {
      await nudge();
      const c = await tokenCounters("private-echo");
      return c[`${prefix}/completion`] === 22 ? c : undefined;
    }, 20_000, () => stack.logLines.filter((l) => l.includes("tokens-key-1") || l.includes("private-echo")).slice(-10).join("\n"));
    expect(counters).toEqual({ [`${prefix}/prompt`]: 11, [`${prefix}/completion`]: 22 });
    const text = await (await fetch(`${stack.url}/-/metrics`, { headers: admin() })).text();
    expect(text).not.toContain(key);
    expect(await until("the log line", () => logLine("tokens-key-1"))).toMatchObject({ key: prefix, prompt_tokens: 11, completion_tokens: 22 });
  });
});
