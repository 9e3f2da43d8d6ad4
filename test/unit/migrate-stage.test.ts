/**
 * The migrate stage (src/proxy/serve/migrate.ts) in each of its branches: which
 * bodies may be continued, the continuation's body, and migratingStream's reading
 * of a replica's events (multi-line data, comments, text that is not JSON, error
 * events), its stall and drain watches, its refusals (tool calls, a failed
 * continuation, a client gone) and an answer whose end only was lost. Issue 51: the
 * folder's mutation score; written against the mutants that survived the other
 * unit tests (test/unit/migration.test.ts covers the deadline, the limit and vLLM's
 * request format).
 */
import { describe, expect, it } from "vitest";
import { continuationBody, migratingStream, migrationPlan, type MigrateOptions } from "../../src/proxy/serve/migrate.ts";
import { Header } from "../../src/protocol/index.ts";
import { partStream, type StreamEnd } from "../fixtures/streams.ts";

const enc = new TextEncoder();
const bytes = (o: unknown) => enc.encode(JSON.stringify(o)).buffer as ArrayBuffer;
const chat = { model: "m", messages: [{ role: "user", content: "Hi" }], stream: true, max_tokens: 10 };
const completion = { model: "m", prompt: "Once", stream: true, max_tokens: 10 };
const event = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
const chatPiece = (id: string, text: string, extra: Record<string, unknown> = {}) =>
  event({ id, object: "chat.completion.chunk", created: 5, model: "m", choices: [{ index: 0, delta: { content: text, ...extra }, finish_reason: null }] });
const textPiece = (id: string, text: string) => event({ id, object: "text_completion", created: 5, model: "m", choices: [{ index: 0, text, finish_reason: null }] });

/** A replica's answer: `parts` sent, then the stream ends (`end`), breaks, or hangs. */
function upstream(parts: string[], end: StreamEnd, replica: string | null = "r0"): Response {
  return new Response(partStream(parts, end).stream, { headers: replica === null ? {} : { [Header.replica]: replica } });
}

function run(first: Response, o: Partial<MigrateOptions> & { plan: MigrateOptions["plan"] }) {
  const seen = { continued: [] as string[], down: [] as string[], migrations: [] as { from: string | null; tokens: number; attempt: number; ok: boolean; reason: string }[] };
  const out = migratingStream(first, {
    limit: 2,
    stallMs: 0,
    requestId: "req-m",
    background: (p) => void p,
    markDown: (r) => seen.down.push(r),
    continueOn: async () => new Response("data: [DONE]\n\n", { headers: { [Header.replica]: "r1" } }),
    onMigration: (m) => seen.migrations.push(m),
    ...o,
  });
  return { out, seen };
}

describe("migrationPlan's choice", () => {
  it("takes only the chat and completions endpoints, and only a JSON object", () => {
    expect(migrationPlan("responses", bytes(chat))).toBeUndefined();
    expect(migrationPlan("embeddings", bytes(chat))).toBeUndefined();
    expect(migrationPlan("chat", bytes([chat]))).toBeUndefined();
    expect(migrationPlan("chat", bytes(null))).toBeUndefined();
    expect(migrationPlan("chat", bytes("x"))).toBeUndefined();
    expect(migrationPlan("completions", bytes(completion))).toMatchObject({ endpoint: "completion", maxTokens: 10 });
  });

  it("reads the route's one parse of the body when it has one", () => {
    let parsed = 0;
    const plan = migrationPlan("chat", new ArrayBuffer(0), { json: () => (parsed++, chat) });
    expect(parsed).toBe(1);
    expect(plan).toMatchObject({ endpoint: "chat", body: chat });
  });

  it("takes the defaults that change nothing (n 1, logprobs false, best_of 1, no tools) and refuses the rest", () => {
    const ok = [{ n: 1 }, { n: null }, { logprobs: false }, { tools: [] }, { tool_choice: "none" }];
    for (const extra of ok) expect(migrationPlan("chat", bytes({ ...chat, ...extra })), JSON.stringify(extra)).toBeDefined();
    const refused = [{ stream: false }, { stream: "true" }, { n: 2 }, { logprobs: true }, { top_logprobs: 0 }, { messages: [] }, { messages: "Hi" }, { tools: {} }, { functions: [] }, { continue_final_message: true }];
    for (const extra of refused) expect(migrationPlan("chat", bytes({ ...chat, ...extra })), JSON.stringify(extra)).toBeUndefined();
    for (const extra of [{ best_of: 1 }, { prompt: ["Once"] }, { echo: false }]) expect(migrationPlan("completions", bytes({ ...completion, ...extra })), JSON.stringify(extra)).toBeDefined();
    const refusedCompletion = [{ prompt: ["a", "b"] }, { prompt: [1, 2] }, { prompt: [] }, { echo: true }, { best_of: 2 }, { suffix: "" }, { n: 3 }];
    for (const extra of refusedCompletion) expect(migrationPlan("completions", bytes({ ...completion, ...extra })), JSON.stringify(extra)).toBeUndefined();
  });

  it("reads the budget from max_completion_tokens before max_tokens for a chat, max_tokens only for a completion; none when not a number", () => {
    expect(migrationPlan("chat", bytes({ ...chat, max_completion_tokens: 4 }))!.maxTokens).toBe(4);
    expect(migrationPlan("chat", bytes({ ...chat, max_tokens: undefined }))!.maxTokens).toBeUndefined();
    expect(migrationPlan("chat", bytes({ ...chat, max_tokens: "9" }))!.maxTokens).toBeUndefined();
    expect(migrationPlan("completions", bytes({ ...completion, max_completion_tokens: 3 }))!.maxTokens).toBe(10);
  });
});

describe("continuationBody", () => {
  it("names the budget as the client did, and continues a completion given as a one-string list", () => {
    const chatBody = JSON.parse(continuationBody(migrationPlan("chat", bytes({ ...chat, max_tokens: undefined, max_completion_tokens: 8 }))!, "ab", 3)!) as Record<string, unknown>;
    expect(chatBody.max_completion_tokens).toBe(5);
    expect(chatBody.add_generation_prompt).toBe(false);
    const noBudget = JSON.parse(continuationBody(migrationPlan("chat", bytes({ ...chat, max_tokens: undefined }))!, "ab", 3)!) as Record<string, unknown>;
    expect(noBudget.max_tokens).toBeUndefined();
    const listed = JSON.parse(continuationBody(migrationPlan("completions", bytes({ ...completion, prompt: ["Once"] }))!, " upon", 1)!) as Record<string, unknown>;
    expect(listed.prompt).toBe("Once upon");
    expect(listed.max_tokens).toBe(9);
    expect(continuationBody(migrationPlan("completions", bytes(completion))!, "x", 10)).toBeUndefined();
    expect(continuationBody(migrationPlan("completions", bytes(completion))!, "x", 9)).toBeDefined();
  });
});

describe("migratingStream reading a replica's events", () => {
  it("passes comments, events without data and data that is not JSON as they are, joins multi-line data, and keeps the first part's bytes", async () => {
    const parts = [": keep-alive\n\n", "event: ping\n\n", "data: not json\n\n", "data: {\"id\":\"a\",\"created\":5,\n", "data: \"choices\":[{\"index\":0,\"delta\":{\"content\":\"x\"}}]}\n\n", chatPiece("a", "y"), "data:[DONE]\n\n"];
    const { out, seen } = run(upstream(parts, "close"), { plan: migrationPlan("chat", bytes(chat))! });
    expect(await out.text()).toBe(parts.join(""));
    expect(seen.migrations).toEqual([]);
    expect(out.headers.get(Header.replica)).toBe("r0");
  });

  it("migrates a stream whose replica sends an error event, and one that ends without [DONE]; marks the replica down", async () => {
    const errorEvent = event({ error: { code: "stream_handover", message: "draining" } });
    for (const parts of [[chatPiece("a", "one"), errorEvent, chatPiece("a", "never")], [chatPiece("a", "one")]]) {
      const { out, seen } = run(upstream(parts, "close"), {
        plan: migrationPlan("chat", bytes(chat))!,
        continueOn: async (body) => {
          seen.continued.push(new TextDecoder().decode(body));
          return new Response(chatPiece("b", "", { role: "assistant" }) + chatPiece("b", "two") + "data: [DONE]\n\n", { headers: { [Header.replica]: "r1" } });
        },
      });
      const text = await out.text();
      expect(text).not.toContain("never");
      expect(text).not.toContain('"role"');
      expect([...text.matchAll(/"content":"([^"]*)"/g)].map((m) => m[1])).toEqual(["one", "two"]);
      expect([...text.matchAll(/"id":"([^"]*)"/g)].map((m) => m[1])).toEqual(["a", "a"]);
      expect([...text.matchAll(/"created":(\d+)/g)].map((m) => m[1])).toEqual(["5", "5"]);
      expect(seen.down).toEqual(["r0"]);
      expect(seen.migrations).toEqual([{ from: "r0", tokens: 1, attempt: 1, ok: true, reason: "error" }]);
      expect((JSON.parse(seen.continued[0]!) as { messages: { content: string }[] }).messages.at(-1)!.content).toBe("one");
    }
  });

  it("continues a completion from its text", async () => {
    const { out, seen } = run(upstream([textPiece("c", " upon")], "error"), {
      plan: migrationPlan("completions", bytes(completion))!,
      continueOn: async (body) => {
        seen.continued.push(new TextDecoder().decode(body));
        return new Response(textPiece("d", " a time") + "data: [DONE]\n\n", { headers: { [Header.replica]: "r1" } });
      },
    });
    const text = await out.text();
    expect([...text.matchAll(/"text":"([^"]*)"/g)].map((m) => m[1])).toEqual([" upon", " a time"]);
    expect(JSON.parse(seen.continued[0]!)).toMatchObject({ prompt: "Once upon", max_tokens: 9 });
    expect(text).not.toContain('"id":"d"');
  });

  it("does not continue an answer that has begun a tool call: it ends with the edge's error event", async () => {
    const toolCall = chatPiece("a", "", { tool_calls: [{ index: 0, id: "call_1", type: "function", function: { name: "f", arguments: "{" } }] });
    const { out, seen } = run(upstream([chatPiece("a", "one"), toolCall], "error"), { plan: migrationPlan("chat", bytes(chat))! });
    const text = await out.text();
    expect(seen.migrations).toEqual([]);
    expect(seen.down).toEqual(["r0"]);
    expect(text.trimEnd()).toMatch(/"code":"upstream_failed"[^\n]*"request_id":"req-m"/);
  });

  it("ends with the error event when the continuation is refused or cannot be sent, and says so", async () => {
    for (const continueOn of [
      async () => new Response('{"error":{}}', { status: 503, headers: { [Header.replica]: "r1" } }),
      async () => new Response(null, { status: 200 }),
      async () => Promise.reject(new Error("no replica")),
    ]) {
      const { out, seen } = run(upstream([chatPiece("a", "one")], "error"), { plan: migrationPlan("chat", bytes(chat))!, continueOn });
      const text = await out.text();
      expect(seen.migrations).toEqual([{ from: "r0", tokens: 1, attempt: 1, ok: false, reason: "error" }]);
      expect(text.trimEnd()).toMatch(/"code":"upstream_failed"[^\n]*$/);
      expect(text.match(/upstream_failed/g)).toHaveLength(1);
    }
  });

  it("an answer that sent every token asked and lost only its end ends as the engine would have (finish_reason length)", async () => {
    const plan = migrationPlan("chat", bytes({ ...chat, max_tokens: 2 }))!;
    const { out, seen } = run(upstream([chatPiece("a", "one"), chatPiece("a", "two")], "error"), { plan });
    const text = await out.text();
    expect(seen.migrations).toEqual([]);
    const events = text.trimEnd().split("\n\n");
    expect(events.at(-1)).toBe("data: [DONE]");
    expect(JSON.parse(events.at(-2)!.slice(6))).toEqual({ id: "a", object: "chat.completion.chunk", created: 5, model: "m", choices: [{ index: 0, delta: {}, logprobs: null, finish_reason: "length" }] });
    const done = run(upstream([textPiece("c", "a"), textPiece("c", "b")], "error"), { plan: migrationPlan("completions", bytes({ ...completion, max_tokens: 2 }))! });
    const last = (await done.out.text()).trimEnd().split("\n\n");
    expect(JSON.parse(last.at(-2)!.slice(6))).toEqual({ id: "c", object: "text_completion", created: 5, model: "m", choices: [{ index: 0, text: "", logprobs: null, finish_reason: "length" }] });
    // Past the limit the same answer fails (the limit says no more parts, not that the answer is complete).
    const limited = run(upstream([chatPiece("a", "one"), chatPiece("a", "two")], "error"), { plan, limit: 0 });
    expect((await limited.out.text()).trimEnd()).toMatch(/"code":"upstream_failed"[^\n]*$/);
  });

  it("migrates a stream that sends nothing for stallMs, and not one without a stall limit", async () => {
    const { out, seen } = run(upstream([chatPiece("a", "one")], "hang"), {
      plan: migrationPlan("chat", bytes(chat))!,
      stallMs: 30,
      continueOn: async () => new Response(chatPiece("b", "two") + "data: [DONE]\n\n", { headers: { [Header.replica]: "r1" } }),
    });
    expect([...(await out.text()).matchAll(/"content":"([^"]*)"/g)].map((m) => m[1])).toEqual(["one", "two"]);
    expect(seen.migrations).toEqual([{ from: "r0", tokens: 1, attempt: 1, ok: true, reason: "stalled" }]);
  });

  it("leaves a replica whose deadline comes while it sends nothing: the watch is a drain, not a stall", async () => {
    const at = Date.now() + 40;
    const { out, seen } = run(upstream([chatPiece("a", "one")], "hang"), {
      plan: migrationPlan("chat", bytes(chat))!,
      stallMs: 60_000,
      leaveBy: (r) => (r === "r0" ? at : undefined),
      continueOn: async () => new Response(chatPiece("b", "two") + "data: [DONE]\n\n", { headers: { [Header.replica]: "r1" } }),
    });
    await out.text();
    expect(seen.migrations.map((m) => m.reason)).toEqual(["drain_deadline"]);
  });

  it("does not watch a replica it cannot name, and marks none down", async () => {
    const { out, seen } = run(upstream([chatPiece("a", "one")], "error", null), {
      plan: migrationPlan("chat", bytes(chat))!,
      leaveBy: (r) => (r === "r1" ? undefined : Date.now() - 1),
    });
    await out.text();
    expect(seen.down).toEqual([]);
    expect(seen.migrations).toEqual([{ from: null, tokens: 1, attempt: 1, ok: true, reason: "error" }]);
  });

  it("stops reading the replica when the client leaves, and continues nothing", async () => {
    let cancelled = false;
    let push!: (s: string) => void;
    const body = new ReadableStream<Uint8Array>({
      start(c) {
        push = (s) => c.enqueue(enc.encode(s));
      },
      cancel() {
        cancelled = true;
      },
    });
    const { out, seen } = run(new Response(body, { headers: { [Header.replica]: "r0" } }), { plan: migrationPlan("chat", bytes(chat))! });
    const reader = out.body!.getReader();
    push(chatPiece("a", "one"));
    await reader.read();
    await reader.cancel("client left");
    push(chatPiece("a", "two"));
    await expect.poll(() => cancelled).toBe(true);
    expect(seen.migrations).toEqual([]);
    expect(seen.down).toEqual([]);
  });

  it("keeps the first answer's status and headers", async () => {
    const first = new Response(chatPiece("a", "x") + "data: [DONE]\n\n", { status: 200, statusText: "OK fine", headers: { [Header.replica]: "r0", "content-type": "text/event-stream" } });
    const { out } = run(first, { plan: migrationPlan("chat", bytes(chat))! });
    expect(out.status).toBe(200);
    expect(out.statusText).toBe("OK fine");
    expect(out.headers.get("content-type")).toBe("text/event-stream");
    await out.text();
  });
});
