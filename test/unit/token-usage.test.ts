import { describe, expect, it } from "vitest";
import { UsageTail, usageIn } from "../../src/proxy/routes/token-usage.ts";

const enc = new TextEncoder();

/** A body passed through a tail in chunks of `size` bytes. */
function tailOf(body: string, size: number, limit?: number): UsageTail {
  const bytes = enc.encode(body);
  const tail = new UsageTail(limit);
  for (let at = 0; at < bytes.length; at += size) tail.push(bytes.subarray(at, at + size));
  return tail;
}

const chatJson = JSON.stringify({
  id: "chatcmpl-1",
  object: "chat.completion",
  choices: [{ index: 0, message: { role: "assistant", content: 'he said "usage": {"prompt_tokens": 999}' }, finish_reason: "stop" }],
  usage: { prompt_tokens: 12, completion_tokens: 7, total_tokens: 19 },
});

describe("token usage from a response's tail", () => {
  it("a non-streamed chat completion: the top-level usage, not a look-alike inside a string", () => {
    expect(usageIn(chatJson)).toEqual({ prompt: 12, completion: 7 });
    for (const size of [1, 7, 64, 100_000]) expect(tailOf(chatJson, size).usage()).toEqual({ prompt: 12, completion: 7 });
  });

  it("embeddings: prompt tokens only", () => {
    expect(usageIn('{"object":"list","data":[],"model":"m","usage":{"prompt_tokens":5,"total_tokens":5}}')).toEqual({ prompt: 5, completion: 0 });
  });

  it("a chat stream with include_usage: `usage: null` in every chunk, the counts in the last", () => {
    const chunk = (choices: unknown[], usage: unknown) => `data: ${JSON.stringify({ id: "c", object: "chat.completion.chunk", choices, usage })}\n\n`;
    let sse = "";
    for (let i = 0; i < 50; i++) sse += chunk([{ index: 0, delta: { content: `tok${i} ` } }], null);
    sse += chunk([], { prompt_tokens: 30, completion_tokens: 50, total_tokens: 80 }) + "data: [DONE]\n\n";
    expect(tailOf(sse, 33).usage()).toEqual({ prompt: 30, completion: 50 });
  });

  it("a stream without usage (no include_usage) has none", () => {
    expect(usageIn('data: {"choices":[{"delta":{"content":"x"}}],"usage":null}\n\ndata: [DONE]\n\n')).toBeNull();
  });

  it("the Responses API: input/output tokens of response.completed, after a long output", () => {
    const text = "word ".repeat(5_000);
    const completed = {
      type: "response.completed",
      sequence_number: 9,
      response: { id: "resp_1", object: "response", status: "completed", output: [{ type: "message", content: [{ type: "output_text", text }] }], usage: { input_tokens: 20, input_tokens_details: { cached_tokens: 0 }, output_tokens: 64, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 84 }, user: null, metadata: {} },
    };
    const sse = `event: response.output_text.delta\ndata: {"type":"response.output_text.delta","delta":"x"}\n\nevent: response.completed\ndata: ${JSON.stringify(completed)}\n\n`;
    const tail = tailOf(sse, 1000);
    expect(tail.text().length).toBeLessThanOrEqual(8 * 1024);
    expect(tail.usage()).toEqual({ prompt: 20, completion: 64 });
  });

  it("usage cut off by the tail's start, or malformed, is not counted", () => {
    const body = `{"usage":{"prompt_tokens":3,"completion_tokens":4},"pad":"${"x".repeat(100)}"}`;
    expect(tailOf(body, 10, 64).usage()).toBeNull();
    expect(usageIn('{"usage":{"prompt_tokens":-1}}')).toBeNull();
    expect(usageIn('{"usage":{"prompt_tokens":2')).toBeNull();
  });

  it("the tail keeps at most its limit, whatever the chunk sizes", () => {
    const tail = new UsageTail(16);
    for (const piece of ["0123456789", "abcdefghij", "KLMNOPQRSTUVWXYZ0123", "!"]) tail.push(enc.encode(piece));
    expect(tail.text()).toBe("MNOPQRSTUVWXYZ0123!".slice(-16));
  });
});
