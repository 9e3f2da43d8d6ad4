/**
 * OpenAI's Responses API (POST /v1/responses), as much of it as a text-only
 * model can serve faithfully: the request schema, the chat messages it stands
 * for, and the response object and streaming events in OpenAI's wire format
 * (the shapes vLLM's `/v1/responses` serves too). Pure.
 *
 * Streaming is `text/event-stream` with named events, each `event: <type>` and
 * `data: {"type": <type>, "sequence_number": n, ...}`: response.created,
 * response.in_progress, response.output_item.added, response.content_part.added,
 * response.output_text.delta (one per token), response.output_text.done,
 * response.content_part.done, response.output_item.done, response.completed
 * (the whole response, with `usage`). No `data: [DONE]`: the stream just ends.
 */
import { z } from "zod";

const inputText = z.looseObject({ type: z.enum(["input_text", "output_text", "text"]), text: z.string() });
const inputMessage = z.looseObject({
  type: z.literal("message").optional(),
  role: z.enum(["system", "developer", "user", "assistant"]),
  content: z.union([z.string(), z.array(inputText)]),
});

export function responsesSchema(maxTokensCap: number) {
  return z.object({
    model: z.string().min(1),
    input: z.union([z.string(), z.array(inputMessage).min(1)]),
    instructions: z.string().nullish(),
    max_output_tokens: z.number().int().min(1).max(maxTokensCap).nullish(),
    temperature: z.number().min(0).max(2).nullish(),
    top_p: z.number().gt(0).max(1).nullish(),
    seed: z.number().int().nullish(),
    stream: z.boolean().nullish(),
    user: z.string().nullish(),
    /** vLLM's extension: generate max_output_tokens, past the end of the turn. */
    ignore_eos: z.boolean().nullish(),
    /** Higher first, as the edge reads it; used only off a dispatch (openai-handler.ts, requestPriority). */
    priority: z.number().int().nullish(),
    metadata: z.record(z.string(), z.string()).nullish(),
    store: z.boolean().nullish(),
    previous_response_id: z
      .string()
      .nullish()
      .refine((v) => v == null, { message: "previous_response_id is not supported by this server (it stores no responses)" }),
  });
}

export type ResponsesRequest = z.infer<ReturnType<typeof responsesSchema>>;

// The request as chat messages: pure, in src/prompt/, so the edge renders the same prompt.
export { responsesMessages } from "../../prompt/responses-messages.ts";

export interface ResponseIds {
  id: string;
  messageId: string;
  createdAt: number;
  model: string;
}

export interface ResponseUsage {
  input_tokens: number;
  input_tokens_details: { cached_tokens: number };
  output_tokens: number;
  output_tokens_details: { reasoning_tokens: number };
  total_tokens: number;
}

export const responseUsage = (input: number, output: number, cached = 0): ResponseUsage => ({
  input_tokens: input,
  input_tokens_details: { cached_tokens: cached },
  output_tokens: output,
  output_tokens_details: { reasoning_tokens: 0 },
  total_tokens: input + output,
});

type Status = "in_progress" | "completed" | "incomplete";

const outputMessage = (ids: ResponseIds, text: string, status: Status) => ({
  type: "message",
  id: ids.messageId,
  status,
  role: "assistant",
  content: [{ type: "output_text", text, annotations: [] }],
});

/** The response object; `usage` comes last, as OpenAI writes it (the edge reads it from the tail). */
export function responseObject(
  ids: ResponseIds,
  r: ResponsesRequest,
  o: { status: Status; text?: string; maxOutputTokensHit?: boolean; usage?: ResponseUsage },
): Record<string, unknown> {
  return {
    id: ids.id,
    object: "response",
    created_at: ids.createdAt,
    status: o.status,
    error: null,
    incomplete_details: o.maxOutputTokensHit ? { reason: "max_output_tokens" } : null,
    instructions: r.instructions ?? null,
    max_output_tokens: r.max_output_tokens ?? null,
    model: ids.model,
    output: o.text === undefined ? [] : [outputMessage(ids, o.text, o.status === "in_progress" ? "in_progress" : "completed")],
    parallel_tool_calls: true,
    previous_response_id: null,
    temperature: r.temperature ?? 1,
    tool_choice: "auto",
    tools: [],
    top_p: r.top_p ?? 1,
    truncation: "disabled",
    user: r.user ?? null,
    metadata: r.metadata ?? {},
    usage: o.usage ?? null,
  };
}

/** Writes a response's streaming events with consecutive sequence numbers. */
export class ResponseEvents {
  #sequence = 0;

  constructor(readonly ids: ResponseIds) {}

  /** One SSE event: `event: <type>` and its JSON `data`. */
  event(type: string, fields: Record<string, unknown>): string {
    return `event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.#sequence++, ...fields })}\n\n`;
  }

  /** The events before the first token: created, in_progress, the output item and its text part. */
  opening(r: ResponsesRequest): string {
    const started = responseObject(this.ids, r, { status: "in_progress" });
    return (
      this.event("response.created", { response: started }) +
      this.event("response.in_progress", { response: started }) +
      this.event("response.output_item.added", { output_index: 0, item: { ...outputMessage(this.ids, "", "in_progress"), content: [] } }) +
      this.event("response.content_part.added", { item_id: this.ids.messageId, output_index: 0, content_index: 0, part: { type: "output_text", text: "", annotations: [] } })
    );
  }

  delta(text: string): string {
    return this.event("response.output_text.delta", { item_id: this.ids.messageId, output_index: 0, content_index: 0, delta: text, logprobs: [] });
  }

  /** The events after the last token, ending with response.completed (or response.incomplete at max_output_tokens). */
  closing(r: ResponsesRequest, text: string, usage: ResponseUsage, maxOutputTokensHit: boolean): string {
    const part = { type: "output_text", text, annotations: [] };
    const status: Status = maxOutputTokensHit ? "incomplete" : "completed";
    return (
      this.event("response.output_text.done", { item_id: this.ids.messageId, output_index: 0, content_index: 0, text, logprobs: [] }) +
      this.event("response.content_part.done", { item_id: this.ids.messageId, output_index: 0, content_index: 0, part }) +
      this.event("response.output_item.done", { output_index: 0, item: outputMessage(this.ids, text, "completed") }) +
      this.event(`response.${status}`, { response: responseObject(this.ids, r, { status, text, maxOutputTokensHit, usage }) })
    );
  }
}
