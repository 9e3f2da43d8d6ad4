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

describe("token usage: the edges of the search", () => {
  it("the tail holds no more than its limit and one piece: a huge chunk is cut to the limit, small ones are dropped from the front", () => {
    const huge = new UsageTail(64);
    huge.push(new Uint8Array(1 << 20).fill(0x61));
    expect(huge.bytes).toBe(64);
    const small = new UsageTail(16);
    for (let i = 0; i < 3; i++) small.push(enc.encode("abcdefgh"));
    // 24 bytes in three pieces of 8: the first is dropped when what is left (16) still covers the limit.
    expect(small.bytes).toBe(16);
    for (let i = 0; i < 1_000; i++) small.push(enc.encode("0123456"));
    expect(small.bytes).toBeLessThan(16 + 7);
  });

  it("keeps a copy of each chunk: a buffer the stream reuses afterwards does not change the tail", () => {
    const tail = new UsageTail(64);
    const chunk = enc.encode('{"usage":{"prompt_tokens":3,"completion_tokens":4}}');
    tail.push(chunk);
    chunk.fill(0x20);
    expect(tail.usage()).toEqual({ prompt: 3, completion: 4 });
  });

  it("skips a later usage object without counts and takes the one before it", () => {
    expect(usageIn('{"usage":{"prompt_tokens":3},"x":{"usage":{"cached":1}}}')).toEqual({ prompt: 3, completion: 0 });
  });

  it("finds the object's end past brackets and braces inside strings, escaped quotes and nested arrays", () => {
    const usage = { prompt_tokens: 8, completion_tokens: 2, note: 'a "}" and a "]" {[\\', details: [[1, { a: [] }], []] };
    expect(usageIn(JSON.stringify({ usage }))).toEqual({ prompt: 8, completion: 2 });
    expect(usageIn(`{"usage":${JSON.stringify({ details: [[]], prompt_tokens: 5 })}}`)).toEqual({ prompt: 5, completion: 0 });
  });

  it("counts are whole numbers from zero up; a fraction or a string is no count", () => {
    expect(usageIn('{"usage":{"prompt_tokens":0,"completion_tokens":5}}')).toEqual({ prompt: 0, completion: 5 });
    expect(usageIn('{"usage":{"prompt_tokens":2.5,"completion_tokens":5}}')).toBeNull();
    expect(usageIn('{"usage":{"prompt_tokens":"3","completion_tokens":5}}')).toBeNull();
    expect(usageIn('{"usage":{"input_tokens":4,"output_tokens":1.5}}')).toEqual({ prompt: 4, completion: 0 });
  });

  it("SseDataEvents counts a line only once it has matched all of data:, not lines that begin with d", () => {
    const counter = new SseDataEvents();
    counter.push(enc.encode("done: 1\ndat\ndelta: x\ndata: 2\n\n"));
    expect(counter.count).toBe(1);
  });
});

describe("withoutUsageChunk: which events are the usage chunk", () => {
  const run = async (chunks: string[] | Uint8Array[]) => {
    const source = new ReadableStream<Uint8Array>({
      start(c) {
        for (const x of chunks) c.enqueue(typeof x === "string" ? enc.encode(x) : x);
        c.close();
      },
    });
    const reader = withoutUsageChunk(source).getReader();
    const parts: Uint8Array[] = [];
    for (let r = await reader.read(); !r.done; r = await reader.read()) parts.push(r.value);
    return { text: new TextDecoder().decode(Buffer.concat(parts)), empty: parts.filter((p) => p.length === 0).length };
  };
  const usageChunk = 'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}\n\n';

  it("drops only an event whose data is choices: [] with a usage object", async () => {
    const kept = [
      'data: {"choices":[{"index":0,"delta":{}}],"usage":{"prompt_tokens":1}}\n\n',
      'data: {"choices":[],"usage":null}\n\n',
      'data: {"choices":[],"usage":5}\n\n',
      'data: {"usage":{"prompt_tokens":1}}\n\n',
      'data: {"choices":"","usage":{"prompt_tokens":1}}\n\n',
      ':abcd{"choices":[],"usage":{"prompt_tokens":1}}\n\n',
      "data: not json\n\n",
    ];
    const out = await run([...kept, usageChunk, "data: [DONE]\n\n"]);
    expect(out.text).toBe(kept.join("") + "data: [DONE]\n\n");
  });

  it("ends an event at a blank line written LF CR LF, the shortest there is", async () => {
    expect((await run([":\n\r\n" + usageChunk + "data: [DONE]\n\n"])).text).toBe(":\n\r\ndata: [DONE]\n\n");
  });

  it("an event of exactly the hold is held (and dropped if it is the usage chunk); one byte more passes as it comes", async () => {
    const padded = (n: number) => {
      const head = 'data: {"choices":[],"usage":{"prompt_tokens":5},"pad":"';
      return head + "x".repeat(n - head.length - 2) + '"}';
    };
    const exact = padded(EVENT_HOLD_BYTES);
    expect(enc.encode(exact).length).toBe(EVENT_HOLD_BYTES);
    expect((await run([exact, "\n\n", "data: [DONE]\n\n"])).text).toBe("data: [DONE]\n\n");
    const over = padded(EVENT_HOLD_BYTES + 1);
    expect((await run([over, "\n\n", "data: [DONE]\n\n"])).text).toBe(over + "\n\ndata: [DONE]\n\n");
  });

  it("passes the rest of a long event as it is, even a line of it that looks like the usage chunk", async () => {
    const long = `data: ${"x".repeat(EVENT_HOLD_BYTES + 10)}`;
    const rest = `\n${usageChunk}`;
    expect((await run([long, rest, "data: [DONE]\n\n"])).text).toBe(long + rest + "data: [DONE]\n\n");
  });

  it("a stream that ends inside an event: the event passes, unless it is the usage chunk; no empty chunks", async () => {
    expect(await run(['data: {"choices":[{"delta":{"content":"a"}}]}\n\n', "data: [DONE]"])).toEqual({ text: 'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: [DONE]', empty: 0 });
    expect(await run(['data: {"choices":[{"delta":{"content":"a"}}]}\n\n', usageChunk.trimEnd()])).toEqual({ text: 'data: {"choices":[{"delta":{"content":"a"}}]}\n\n', empty: 0 });
    expect(await run(["data: [DONE]\n\n"])).toEqual({ text: "data: [DONE]\n\n", empty: 0 });
  });
});
