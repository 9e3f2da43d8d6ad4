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
});
