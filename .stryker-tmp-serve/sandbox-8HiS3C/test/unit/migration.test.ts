/**
 * Stream migration's pure parts (src/proxy/serve/migrate.ts): which requests may be
 * continued, and the continuation's body; and the reference replica's rendering of a
 * continuation (tiny-lm's template with continue_final_message), which must be exactly
 * the original prompt followed by the text sent so far, so greedy decoding goes on as
 * if nothing happened.
 */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { HANDOVER_LEAD_MS, continuationBody, leaveByOf, migratingStream, migrationPlan } from "../../src/proxy/serve/migrate.ts";
import { Header } from "../../src/protocol/index.ts";
import { chatPrompt, continuationPrompt } from "../../src/prompt/tiny-lm-chat-template.ts";

const bytes = (o: unknown) => new TextEncoder().encode(JSON.stringify(o)).buffer as ArrayBuffer;
const chat = { model: "m", messages: [{ role: "system", content: "Be brief." }, { role: "user", content: "Hi 😀" }], stream: true, max_tokens: 50, seed: 7, stop: ["END"] };

describe("migrationPlan", () => {
  it("takes streamed chats and text completions", () => {
    expect(migrationPlan("chat", bytes(chat))).toMatchObject({ endpoint: "chat", maxTokens: 50 });
    expect(migrationPlan("chat", bytes({ ...chat, max_tokens: undefined, max_completion_tokens: 9 }))!.maxTokens).toBe(9);
    expect(migrationPlan("completions", bytes({ model: "m", prompt: "Once", stream: true }))).toMatchObject({ endpoint: "completion", maxTokens: undefined });
    expect(migrationPlan("completions", bytes({ model: "m", prompt: ["Once"], stream: true }))).toBeDefined();
  });

  it("refuses what cannot be continued as text: not streamed, n > 1, logprobs, tools, token ids, echo, best_of, the Responses API", () => {
    for (const body of [
      { ...chat, stream: false },
      { ...chat, n: 2 },
      { ...chat, logprobs: true },
      { ...chat, top_logprobs: 2 },
      { ...chat, tools: [{ type: "function", function: { name: "f" } }] },
      { ...chat, continue_final_message: true },
    ]) {
      expect(migrationPlan("chat", bytes(body)), JSON.stringify(body)).toBeUndefined();
    }
    for (const body of [{ prompt: [1, 2, 3] }, { prompt: ["a", "b"] }, { prompt: "a", echo: true }, { prompt: "a", best_of: 2 }]) {
      expect(migrationPlan("completions", bytes({ model: "m", stream: true, ...body })), JSON.stringify(body)).toBeUndefined();
    }
    expect(migrationPlan("responses", bytes({ model: "m", input: "x", stream: true }))).toBeUndefined();
    expect(migrationPlan("chat", new TextEncoder().encode("{not json").buffer as ArrayBuffer)).toBeUndefined();
  });
});

describe("continuationBody", () => {
  it("a chat: the partial answer as the final assistant message, continued, with the rest of the budget and everything else kept", () => {
    const body = JSON.parse(continuationBody(migrationPlan("chat", bytes(chat))!, "Hello the", 3)!) as Record<string, unknown>;
    expect(body).toEqual({ ...chat, max_tokens: 47, messages: [...chat.messages, { role: "assistant", content: "Hello the" }], continue_final_message: true, add_generation_prompt: false });
    const completion = JSON.parse(continuationBody(migrationPlan("chat", bytes({ ...chat, max_completion_tokens: 10 }))!, "x", 4)!) as Record<string, unknown>;
    expect(completion.max_completion_tokens).toBe(6);
  });

  it("a completion: the prompt followed by the text; nothing left to generate: none", () => {
    const plan = migrationPlan("completions", bytes({ model: "m", prompt: ["Once upon"], stream: true, max_tokens: 5 }))!;
    expect(JSON.parse(continuationBody(plan, " a time", 3)!)).toMatchObject({ prompt: "Once upon a time", max_tokens: 2 });
    expect(continuationBody(plan, " a time there", 5)).toBeUndefined();
  });
});

describe("tiny-lm's continuation prompt", () => {
  it("is the original prompt followed by the partial answer, exactly", () => {
    for (const partial of ["", "The replica", "ends here: 😀\t"]) {
      expect(continuationPrompt([...chat.messages, { role: "assistant", content: partial }])).toBe(chatPrompt(chat.messages) + partial);
    }
  });
});

describe("migratingStream and a drain deadline", () => {
  const event = (o: unknown) => `data: ${JSON.stringify(o)}\n\n`;
  const piece = (id: string, text: string) => event({ id, object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: text }, finish_reason: null }] });

  it("moves a stream off a replica whose announced deadline comes, between two events, and the client sees one stream", async () => {
    const enc = new TextEncoder();
    let push!: (s: string) => void;
    let cancelled = false;
    const first = new ReadableStream<Uint8Array>({
      start(c) {
        push = (s) => c.enqueue(enc.encode(s));
        push(event({ id: "a", object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null }] }));
        push(piece("a", "one "));
      },
      cancel() {
        cancelled = true;
      },
    });
    /** The replica's deadline, as the isolate's view has it: unknown until the test announces it. */
    let leaveBy: number | undefined;
    const continued: string[] = [];
    const migrations: { reason: string; tokens: number }[] = [];
    const out = migratingStream(new Response(first, { headers: { [Header.replica]: "r1", "content-type": "text/event-stream" } }), {
      plan: migrationPlan("chat", bytes({ ...chat, max_tokens: 4 }))!,
      limit: 2,
      stallMs: 0,
      requestId: "req",
      background: (p) => void p,
      markDown: () => undefined,
      leaveBy: (replica) => (replica === "r1" ? leaveBy : undefined),
      continueOn: async (body) => {
        continued.push(new TextDecoder().decode(body));
        const rest = piece("b", "two ") + piece("b", "three ") + event({ id: "b", choices: [], usage: { prompt_tokens: 9, completion_tokens: 2, total_tokens: 11 } }) + "data: [DONE]\n\n";
        return new Response(rest, { headers: { [Header.replica]: "r2" } });
      },
      onMigration: (m) => migrations.push({ reason: m.reason, tokens: m.tokens }),
    });
    const reader = out.body!.pipeThrough(new TextDecoderStream()).getReader();
    let text = "";
    // The first event passes; then the replica announces its deadline, already due, and sends one more token.
    while (!text.includes("one ")) text += (await reader.read()).value ?? "";
    leaveBy = Date.now() - 1;
    push(piece("a", "more "));
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += value;
    }
    // The stream left r1 after the event in flight when it looked (at most one more), and went on at r2 under the first id.
    const sent = [...text.matchAll(/"content":"([^"]*)"/g)].map((m) => m[1]).join("");
    expect(sent === "one two three " || sent === "one more two three ").toBe(true);
    expect(text).not.toContain('"id":"b"');
    expect(text.trimEnd().endsWith("data: [DONE]")).toBe(true);
    expect(migrations).toEqual([{ reason: "drain_deadline", tokens: sent.startsWith("one more") ? 2 : 1 }]);
    // One answer's usage (issue 51: dropping the first part's tokens got past every unit test): the
    // continuation's prompt held the first part's tokens; they count as completion, once.
    const firstPart = sent.startsWith("one more") ? 2 : 1;
    const usage = JSON.parse(/^data: (\{[^\n]*"usage"[^\n]*\})$/m.exec(text)![1]!) as { usage: { prompt_tokens: number; completion_tokens: number; total_tokens: number } };
    expect(usage.usage).toEqual({ prompt_tokens: 9 - firstPart, completion_tokens: 2 + firstPart, total_tokens: 11 });
    expect(cancelled).toBe(true);
    // The continuation asked for the rest of the budget, the partial answer continued.
    const body = JSON.parse(continued[0]!) as { max_tokens: number; continue_final_message: boolean; messages: { role: string; content: string }[] };
    expect(body.continue_final_message).toBe(true);
    expect(body.messages.at(-1)).toEqual({ role: "assistant", content: sent.startsWith("one more") ? "one more " : "one " });
  });
});

describe("the drain's handover lead (issue 51)", () => {
  it("leaves a draining replica HANDOVER_LEAD_MS before its deadline, time for a prefill elsewhere", () => {
    expect(HANDOVER_LEAD_MS).toBeGreaterThanOrEqual(500);
    expect(leaveByOf(100_000)).toBe(100_000 - HANDOVER_LEAD_MS);
    expect(leaveByOf(undefined)).toBeUndefined();
  });
});

describe("migratingStream and its limit (issue 51)", () => {
  const enc = new TextEncoder();
  const piece = (id: string, text: string) => `data: ${JSON.stringify({ id, object: "chat.completion.chunk", created: 1, model: "m", choices: [{ index: 0, delta: { content: text }, finish_reason: null }] })}\n\n`;
  /** A replica's stream that sends one token and breaks. */
  const breaking = (id: string) =>
    new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(enc.encode(piece(id, `${id} `)));
        c.error(new Error("the replica went away"));
      },
    });

  it.each([0, 1, 3])("continues a stream that keeps breaking at most `limit` (%i) times, then ends it with an error event", async (limit) => {
    const attempts: number[] = [];
    const out = migratingStream(new Response(breaking("a"), { headers: { [Header.replica]: "r0", "content-type": "text/event-stream" } }), {
      plan: migrationPlan("chat", bytes({ ...chat, max_tokens: 100 }))!,
      limit,
      stallMs: 0,
      requestId: "req",
      background: (p) => void p,
      markDown: () => undefined,
      leaveBy: () => undefined,
      continueOn: async (_body, attempt) => {
        attempts.push(attempt);
        return new Response(breaking(`p${attempt}`), { headers: { [Header.replica]: `r${attempt}` } });
      },
    });
    const text = await out.text();
    expect(attempts).toEqual(Array.from({ length: limit }, (_, i) => i + 1));
    expect(text.trimEnd()).toMatch(/"code":"upstream_failed"[^\n]*$/);
  });
});

describe("continuations in vLLM's request format (test/fixtures/vllm-requests)", () => {
  const vllm = JSON.parse(readFileSync(join(import.meta.dirname, "../fixtures/vllm-requests/request-fields.json"), "utf8")) as {
    chat: { fields: string[]; refused: { when: Record<string, unknown> }[] };
    completion: { fields: string[] };
  };
  const fixture = (name: string) => readFileSync(join(import.meta.dirname, `../fixtures/vllm-requests/${name}`));

  it("a chat's continuation uses only fields vLLM's ChatCompletionRequest declares, and none of the combinations it refuses", () => {
    for (const client of [JSON.parse(fixture("chat-completion.json").toString()), { ...chat, max_completion_tokens: 40, top_k: 5, ignore_eos: true }]) {
      const body = JSON.parse(continuationBody(migrationPlan("chat", bytes(client))!, "Partial", 3)!) as Record<string, unknown>;
      expect(Object.keys(body).filter((k) => !vllm.chat.fields.includes(k))).toEqual([]);
      for (const r of vllm.chat.refused) expect(Object.entries(r.when).every(([k, v]) => body[k] === v)).toBe(false);
      // vLLM continues the final message only with add_generation_prompt off, and the last message the assistant's.
      expect(body).toMatchObject({ continue_final_message: true, add_generation_prompt: false });
      expect((body.messages as { role: string }[]).at(-1)).toEqual({ role: "assistant", content: "Partial" });
    }
  });

  it("a completion's continuation uses only fields vLLM's CompletionRequest declares", () => {
    const body = JSON.parse(continuationBody(migrationPlan("completions", bytes({ ...JSON.parse(fixture("completion.json").toString()), stream: true }))!, " city", 1)!) as Record<string, unknown>;
    expect(Object.keys(body).filter((k) => !vllm.completion.fields.includes(k))).toEqual([]);
    expect(body).toMatchObject({ prompt: "San Francisco is a city", max_tokens: 15 });
  });
});

describe("a continuation keeps the client's bytes", () => {
  it("keeps a seed beyond 2^53 exactly, and the members it changes parse to their new values", () => {
    const raw = readFileSync(join(import.meta.dirname, "../fixtures/vllm-requests/chat-completion.json"));
    const body = continuationBody(migrationPlan("chat", raw.buffer.slice(raw.byteOffset, raw.byteOffset + raw.byteLength) as ArrayBuffer)!, "The Dodgers", 2)!;
    expect(body).toContain('"seed": 9007199254740993');
    expect(JSON.parse(body)).toMatchObject({ max_tokens: 126, continue_final_message: true, add_generation_prompt: false });
    expect((JSON.parse(body) as { messages: unknown[] }).messages).toHaveLength(3);
  });
});
