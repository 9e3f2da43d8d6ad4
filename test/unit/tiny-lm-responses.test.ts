// The reference LLM replica's Responses API shapes (OpenAI's wire format).
import { describe, expect, it } from "vitest";
import { ResponseEvents, responseObject, responseUsage, responsesMessages, responsesSchema, type ResponseIds } from "../../src/replica/llm/responses-api.ts";
import { usageIn } from "../../src/proxy/serve/token-usage.ts";

const schema = responsesSchema(1024);
const ids: ResponseIds = { id: "resp_1", messageId: "msg_1", createdAt: 1_700_000_000, model: "tiny-lm" };

/** The SSE events in `text`, as [event name, data]. */
const events = (text: string) =>
  text
    .split("\n\n")
    .filter((e) => e !== "")
    .map((e) => {
      const [name, data] = e.split("\n") as [string, string];
      return [name.slice("event: ".length), JSON.parse(data.slice("data: ".length)) as Record<string, unknown>] as const;
    });

describe("the Responses API of the LLM replica", () => {
  it("takes input as a string or messages (string or input_text parts), instructions as a system message", () => {
    expect(responsesMessages(schema.parse({ model: "m", input: "hi", instructions: "be brief" }))).toEqual([
      { role: "system", content: "be brief" },
      { role: "user", content: "hi" },
    ]);
    const list = schema.parse({ model: "m", input: [{ role: "user", content: [{ type: "input_text", text: "a" }, { type: "input_text", text: "b" }] }, { type: "message", role: "assistant", content: "c" }] });
    expect(responsesMessages(list)).toEqual([
      { role: "user", content: "ab" },
      { role: "assistant", content: "c" },
    ]);
    expect(schema.safeParse({ model: "m", input: [] }).success).toBe(false);
    expect(schema.safeParse({ model: "m", input: "x", previous_response_id: "resp_0" }).success).toBe(false);
  });

  it("the response object: output message with output_text, status, usage last (where the edge reads it)", () => {
    const r = schema.parse({ model: "tiny-lm", input: "hi" });
    const o = responseObject(ids, r, { status: "completed", text: "hello", usage: responseUsage(3, 2) });
    expect(o).toMatchObject({ id: "resp_1", object: "response", status: "completed", output: [{ type: "message", role: "assistant", content: [{ type: "output_text", text: "hello", annotations: [] }] }], usage: { input_tokens: 3, output_tokens: 2, total_tokens: 5 } });
    expect(Object.keys(o).at(-1)).toBe("usage");
    expect(usageIn(JSON.stringify(o))).toEqual({ prompt: 3, completion: 2 });
  });

  it("streams the documented events in order, with sequence numbers, deltas adding up to the text", () => {
    const r = schema.parse({ model: "tiny-lm", input: "hi", stream: true });
    const w = new ResponseEvents(ids);
    const text = w.opening(r) + w.delta("hel") + w.delta("lo") + w.closing(r, "hello", responseUsage(3, 2), false);
    const got = events(text);
    expect(got.map(([name]) => name)).toEqual([
      "response.created",
      "response.in_progress",
      "response.output_item.added",
      "response.content_part.added",
      "response.output_text.delta",
      "response.output_text.delta",
      "response.output_text.done",
      "response.content_part.done",
      "response.output_item.done",
      "response.completed",
    ]);
    got.forEach(([name, data], i) => expect(data).toMatchObject({ type: name, sequence_number: i }));
    expect(got.filter(([n]) => n === "response.output_text.delta").map(([, d]) => d.delta).join("")).toBe("hello");
    expect(got.at(-1)![1]).toMatchObject({ response: { status: "completed", usage: { input_tokens: 3, output_tokens: 2 } } });
    expect(usageIn(text)).toEqual({ prompt: 3, completion: 2 });
    // Cut at max_output_tokens: response.incomplete, as OpenAI ends such a stream.
    const cut = events(new ResponseEvents(ids).closing(r, "he", responseUsage(3, 1), true)).at(-1)!;
    expect(cut[0]).toBe("response.incomplete");
    expect(cut[1]).toMatchObject({ response: { status: "incomplete", incomplete_details: { reason: "max_output_tokens" } } });
  });

  // Whole objects, field for field, in OpenAI's documented shape (the API reference's Response
  // object and streaming events): a client that reads any field gets what OpenAI would send.
  const message = (text: string, status: string) => ({ type: "message", id: "msg_1", status, role: "assistant", content: [{ type: "output_text", text, annotations: [] }] });
  const defaults = {
    id: "resp_1",
    object: "response",
    created_at: 1_700_000_000,
    error: null,
    incomplete_details: null,
    instructions: null,
    max_output_tokens: null,
    model: "tiny-lm",
    parallel_tool_calls: true,
    previous_response_id: null,
    temperature: 1,
    tool_choice: "auto",
    tools: [],
    top_p: 1,
    truncation: "disabled",
    user: null,
    metadata: {},
  };

  it("the response object field for field: the request's settings echoed, OpenAI's defaults where it set none", () => {
    const bare = schema.parse({ model: "tiny-lm", input: "hi" });
    expect(responseObject(ids, bare, { status: "completed", text: "hello", usage: responseUsage(3, 2, 1) })).toEqual({
      ...defaults,
      status: "completed",
      output: [message("hello", "completed")],
      usage: { input_tokens: 3, input_tokens_details: { cached_tokens: 1 }, output_tokens: 2, output_tokens_details: { reasoning_tokens: 0 }, total_tokens: 5 },
    });
    const set = schema.parse({ model: "tiny-lm", input: "hi", instructions: "be brief", max_output_tokens: 7, temperature: 0.5, top_p: 0.9, user: "u-1", metadata: { team: "a" } });
    expect(responseObject(ids, set, { status: "in_progress" })).toEqual({
      ...defaults,
      status: "in_progress",
      instructions: "be brief",
      max_output_tokens: 7,
      temperature: 0.5,
      top_p: 0.9,
      user: "u-1",
      metadata: { team: "a" },
      output: [],
      usage: null,
    });
    // Zero is a setting, not an absence.
    expect(responseObject(ids, schema.parse({ model: "m", input: "x", temperature: 0 }), { status: "in_progress" })).toMatchObject({ temperature: 0 });
    // A partial text is an in-progress message; an incomplete response's message is complete (its text is all there is).
    expect(responseObject(ids, bare, { status: "in_progress", text: "he" }).output).toEqual([message("he", "in_progress")]);
    expect(responseObject(ids, bare, { status: "incomplete", text: "he", maxOutputTokensHit: true })).toMatchObject({
      incomplete_details: { reason: "max_output_tokens" },
      output: [message("he", "completed")],
    });
  });

  it("the stream event for event, every field", () => {
    const r = schema.parse({ model: "tiny-lm", input: "hi", stream: true, instructions: "be brief" });
    const w = new ResponseEvents(ids);
    const usage = responseUsage(3, 2);
    const started = { ...defaults, instructions: "be brief", status: "in_progress", output: [], usage: null };
    const text = w.opening(r) + w.delta("hel") + w.delta("lo") + w.closing(r, "hello", usage, false);
    const part = (t: string) => ({ type: "output_text", text: t, annotations: [] });
    const at = { item_id: "msg_1", output_index: 0, content_index: 0 };
    expect(events(text).map(([, data]) => data)).toEqual([
      { type: "response.created", sequence_number: 0, response: started },
      { type: "response.in_progress", sequence_number: 1, response: started },
      { type: "response.output_item.added", sequence_number: 2, output_index: 0, item: { ...message("", "in_progress"), content: [] } },
      { type: "response.content_part.added", sequence_number: 3, ...at, part: part("") },
      { type: "response.output_text.delta", sequence_number: 4, ...at, delta: "hel", logprobs: [] },
      { type: "response.output_text.delta", sequence_number: 5, ...at, delta: "lo", logprobs: [] },
      { type: "response.output_text.done", sequence_number: 6, ...at, text: "hello", logprobs: [] },
      { type: "response.content_part.done", sequence_number: 7, ...at, part: part("hello") },
      { type: "response.output_item.done", sequence_number: 8, output_index: 0, item: message("hello", "completed") },
      { type: "response.completed", sequence_number: 9, response: { ...started, status: "completed", output: [message("hello", "completed")], usage } },
    ]);
  });

  it("the request's bounds: token cap, temperature 0–2, top_p in (0, 1], roles and part types as OpenAI names them", () => {
    const ok = (body: Record<string, unknown>) => schema.safeParse({ model: "m", input: "x", ...body }).success;
    expect([ok({ max_output_tokens: 1 }), ok({ max_output_tokens: 1024 }), ok({ max_output_tokens: 1025 }), ok({ max_output_tokens: 0 })]).toEqual([true, true, false, false]);
    expect([ok({ temperature: 0 }), ok({ temperature: 2 }), ok({ temperature: 2.01 }), ok({ temperature: -0.1 })]).toEqual([true, true, false, false]);
    expect([ok({ top_p: 1 }), ok({ top_p: 0.01 }), ok({ top_p: 1.01 }), ok({ top_p: 0 })]).toEqual([true, true, false, false]);
    for (const role of ["system", "developer", "user", "assistant"]) expect(ok({ input: [{ role, content: "a" }] })).toBe(true);
    expect(ok({ input: [{ role: "tool", content: "a" }] })).toBe(false);
    for (const type of ["input_text", "output_text", "text"]) expect(ok({ input: [{ role: "user", content: [{ type, text: "a" }] }] })).toBe(true);
    expect(ok({ input: [{ role: "user", content: [{ type: "input_image", image_url: "x" }] }] })).toBe(false);
    expect(ok({ input: [{ type: "message", role: "user", content: [] }] })).toBe(true);
    expect(ok({ input: [{ type: "function_call", role: "user", content: "a" }] })).toBe(false);
    expect(ok({ input: [{ role: "user", content: "a" }, { role: "assistant", content: "b" }] })).toBe(true);
    expect(ok({ previous_response_id: null })).toBe(true);
    const refused = schema.safeParse({ model: "m", input: "x", previous_response_id: "resp_0" });
    expect(refused.success ? [] : refused.error.issues.map((i) => [i.path.join("."), i.message])).toEqual([
      ["previous_response_id", "previous_response_id is not supported by this server (it stores no responses)"],
    ]);
  });
});
