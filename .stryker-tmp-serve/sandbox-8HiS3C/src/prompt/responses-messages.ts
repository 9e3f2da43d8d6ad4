/**
 * OpenAI's Responses API request (POST /v1/responses) as the chat messages it
 * stands for, for a chat template: the reference replica (src/replica/llm/) and the
 * edge (prefix routing) turn a Responses request into the same prompt. Pure.
 */
// @ts-nocheck


export type ResponsesRole = "system" | "developer" | "user" | "assistant";

/** The fields of a Responses request that make its prompt (the replica's schema validates the rest). */
export interface ResponsesInput {
  instructions?: string | null;
  input: string | readonly { role: ResponsesRole; content: string | readonly { text: string }[] }[];
}

/** The request as chat messages (instructions first, as a system message), for the chat template. */
export function responsesMessages(r: ResponsesInput): { role: ResponsesRole; content: string }[] {
  const messages: { role: ResponsesRole; content: string }[] = [];
  if (r.instructions) messages.push({ role: "system", content: r.instructions });
  if (typeof r.input === "string") messages.push({ role: "user", content: r.input });
  else for (const m of r.input) messages.push({ role: m.role, content: typeof m.content === "string" ? m.content : m.content.map((p) => p.text).join("") });
  return messages;
}
