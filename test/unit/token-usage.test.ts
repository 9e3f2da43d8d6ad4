import { describe, expect, it } from "vitest";
import { UsageTail, usageIn, SseDataEvents, withoutUsageChunk, EVENT_HOLD_BYTES } from "../../src/proxy/serve/token-usage.ts";

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

describe("SseDataEvents: the chunks a stream passed on", () => {
  const sse = (events: string[]) => new TextEncoder().encode(events.map((e) => `data: ${e}\n\n`).join(""));

  it("counts data lines whatever the chunking, one byte at a time included", () => {
    const bytes = sse(['{"choices":[{"delta":{"content":"a"}}]}', '{"choices":[{"delta":{"content":"b"}}]}', '{"choices":[{"delta":{"content":"data: c"}}]}', "[DONE]"]);
    for (const size of [1, 2, 3, 7, bytes.length]) {
      const counter = new SseDataEvents();
      for (let at = 0; at < bytes.length; at += size) counter.push(bytes.subarray(at, at + size));
      expect(counter.count, `chunks of ${size}`).toBe(4);
    }
  });

  it("counts only lines that begin with data:", () => {
    const counter = new SseDataEvents();
    counter.push(new TextEncoder().encode(': keep-alive\n\nevent: x\ndata: 1\n\n  data: 2\nxdata: 3\n\ndata:4\n\n'));
    expect(counter.count).toBe(2);
  });
});

describe("withoutUsageChunk: the stream a client that did not ask for usage asked for", () => {
  const read = async (chunks: Uint8Array[]) => {
    const source = new ReadableStream<Uint8Array>({
      start(c) {
        for (const x of chunks) c.enqueue(x);
        c.close();
      },
    });
    return new TextDecoder().decode(new Uint8Array(await new Response(withoutUsageChunk(source)).arrayBuffer()));
  };
  const text = [
    'data: {"choices":[{"index":0,"delta":{"content":"hi"}}],"usage":null}\n\n',
    'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
    'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}\n\n',
    "data: [DONE]\n\n",
  ];
  const expected = [text[0], text[1], text[3]].join("");

  it("drops the usage chunk and nothing else, however the bytes are cut", async () => {
    const bytes = new TextEncoder().encode(text.join(""));
    for (const size of [1, 5, 64, bytes.length]) {
      const chunks: Uint8Array[] = [];
      for (let at = 0; at < bytes.length; at += size) chunks.push(bytes.slice(at, at + size));
      expect(await read(chunks), `chunks of ${size}`).toBe(expected);
    }
    expect(await read([new TextEncoder().encode(text.join("").replaceAll("\n", "\r\n"))])).toBe(expected.replaceAll("\n", "\r\n"));
  });

  it(`holds at most ${EVENT_HOLD_BYTES} bytes of an event: a longer one passes as its bytes come, unchanged`, async () => {
    const long = `data: {"choices":[{"delta":{"content":"${"x".repeat(EVENT_HOLD_BYTES * 3)}"}}]}\n\n`;
    const bytes = new TextEncoder().encode(long + text[2] + text[3]);
    const source = new ReadableStream<Uint8Array>({
      start(c) {
        for (let at = 0; at < bytes.length; at += 1000) c.enqueue(bytes.slice(at, at + 1000));
        c.close();
      },
    });
    const reader = withoutUsageChunk(source).getReader();
    let out = "";
    let largest = 0;
    for (let r = await reader.read(); !r.done; r = await reader.read()) {
      largest = Math.max(largest, r.value.length);
      out += new TextDecoder().decode(r.value);
    }
    expect(out).toBe(long + text[3]);
    expect(largest).toBeLessThanOrEqual(EVENT_HOLD_BYTES + 1000);
  });
});
