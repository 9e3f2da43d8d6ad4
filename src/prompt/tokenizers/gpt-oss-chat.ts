/**
 * A Chat Completions request as vLLM renders it for gpt-oss: not through a Jinja
 * template but as a harmony conversation (./harmony.ts), built by vLLM's
 * harmony_utils (vLLM 0.26; the rules were read from its source, PR #44330's
 * instructions included):
 *
 * - a system message of harmony's defaults, the request's `reasoning_effort`
 *   (default medium) and the date the conversation starts (vLLM: its
 *   VLLM_SYSTEM_START_DATE, else the server's date);
 * - a developer message when the first message is a system or developer one with
 *   text (its `# Instructions`) or the request has tools (the `functions` namespace);
 * - each message: a user's as is, each content part its own text; an assistant's
 *   reasoning on the analysis channel, its content on the final one, its tool calls
 *   to `functions.NAME` with content type `json`; a tool result from
 *   `functions.NAME` (found by its tool_call_id) to the assistant; a later system or
 *   developer message as developer instructions;
 * - every analysis message before the last final one dropped;
 * - `<|start|>assistant` at the end, whatever add_generation_prompt or
 *   continue_final_message say (vLLM ignores both for gpt-oss).
 *
 * What vLLM answers 400 for throws UnsupportedPrompt (the prompt is then keyed by bytes).
 */
import { defaultSystemContent, type HarmonyMessage, type HarmonyTool, type JsonLike, type ReasoningEffort } from "./harmony.ts";
import { member } from "./py-json.ts";
import { UnsupportedPrompt } from "./tokenizer.ts";

/** What of a chat request the rendering reads. */
export interface GptOssChat {
  messages: readonly Record<string, unknown>[];
  tools?: readonly unknown[] | undefined;
  reasoningEffort?: unknown;
  /** The conversation's start date, YYYY-MM-DD. */
  startDate: string;
}

/** vLLM's flatten_input_text_content: a string as is; a list's strings and parts' `text` joined; else none. */
function flattened(content: unknown): string | undefined {
  if (content === null || content === undefined) return undefined;
  if (typeof content === "string") return content;
  if (!Array.isArray(content)) return undefined;
  const texts: string[] = [];
  for (const item of content) {
    if (typeof item === "string") texts.push(item);
    else {
      const t = member(item, "text");
      if (typeof t === "string") texts.push(t);
    }
  }
  return texts.length > 0 ? texts.join("") : undefined;
}

const text = (t: string) => ({ type: "text" as const, text: t });
const instructionsMessage = (instructions: string | undefined, tools?: HarmonyTool[]): HarmonyMessage => ({
  role: "developer",
  content: [{ type: "developer", ...(instructions !== undefined && { instructions }), ...(tools && tools.length > 0 && { tools: [{ name: "functions", tools }] }) }],
});

/** The request's tools as harmony's function tools, in request order (a missing description is ""). */
function functionTools(tools: readonly unknown[]): HarmonyTool[] {
  return tools.map((t) => {
    const fn = member(t, "function");
    const name = member(fn, "name");
    const type = member(t, "type");
    if ((type !== undefined && type !== "function") || typeof name !== "string") throw new UnsupportedPrompt("tool_not_a_function");
    const description = member(fn, "description");
    const parameters = member(fn, "parameters");
    return { name, description: typeof description === "string" ? description : "", ...(parameters !== undefined && parameters !== null && { parameters: parameters as JsonLike }) };
  });
}

/** The harmony conversation vLLM renders for this chat. */
export function gptOssConversation(chat: GptOssChat): HarmonyMessage[] {
  let messages = chat.messages;
  let instructions: string | undefined;
  const first = messages[0];
  if (first && (first.role === "system" || first.role === "developer")) {
    instructions = flattened(first.content);
    messages = messages.slice(1);
  }
  const effort = chat.reasoningEffort;
  if (effort !== undefined && effort !== null && effort !== "low" && effort !== "medium" && effort !== "high") throw new UnsupportedPrompt("reasoning_effort");
  const tools = chat.tools !== undefined && chat.tools.length > 0 ? functionTools(chat.tools) : undefined;
  const out: HarmonyMessage[] = [{ role: "system", content: [{ ...defaultSystemContent(), ...(typeof effort === "string" && { reasoningEffort: effort as ReasoningEffort }), conversationStartDate: chat.startDate }] }];
  if ((instructions !== undefined && instructions !== "") || tools) out.push(instructionsMessage(instructions, tools));

  // Tool names by call id, from every assistant message (a later one's included; the last one given wins).
  const names = new Map<unknown, unknown>();
  for (const m of messages) {
    const calls = m.tool_calls;
    if (Array.isArray(calls)) for (const c of calls) names.set(member(c, "id"), member(member(c, "function"), "name"));
  }
  const conversation: HarmonyMessage[] = [];
  for (const m of messages) conversation.push(...converted(m, names));
  // vLLM's auto_drop_analysis_messages: every analysis message before the last final one goes.
  const lastFinal = conversation.findLastIndex((m) => m.role === "assistant" && m.channel === "final");
  return [...out, ...conversation.filter((m, i) => !(i < lastFinal && m.channel === "analysis"))];
}

/** One request message as vLLM's parse_chat_input_to_harmony_message turns it into harmony messages. */
function converted(m: Record<string, unknown>, names: Map<unknown, unknown>): HarmonyMessage[] {
  const role = m.role;
  const reasoning = typeof m.reasoning === "string" && m.reasoning !== "" ? m.reasoning : undefined;
  const calls = Array.isArray(m.tool_calls) ? m.tool_calls : [];
  if (role === "assistant" && calls.length > 0) {
    const out: HarmonyMessage[] = [];
    const preamble = flattened(m.content);
    if (preamble) out.push({ role: "assistant", channel: "commentary", content: [text(preamble)] });
    if (reasoning) out.push({ role: "assistant", channel: "analysis", content: [text(reasoning)] });
    for (const call of calls) {
      const fn = member(call, "function");
      const name = member(fn, "name") ?? "";
      const args = member(fn, "arguments") ?? "";
      if (typeof name !== "string" || typeof args !== "string") throw new UnsupportedPrompt("tool_call_not_a_function");
      out.push({ role: "assistant", channel: "commentary", recipient: `functions.${name}`, contentType: "json", content: [text(args)] });
    }
    return out;
  }
  if (role === "tool") {
    const name = names.get(m.tool_call_id ?? "") ?? "";
    return [{ role: "tool", name: `functions.${typeof name === "string" ? name : String(name)}`, channel: "commentary", recipient: "assistant", content: [text(flattened(m.content) ?? "")] }];
  }
  if (role === "system" || role === "developer") {
    const later = flattened(m.content);
    return later === undefined ? [] : [instructionsMessage(later)];
  }
  if (role !== "user" && role !== "assistant") throw new UnsupportedPrompt("template_error");
  const content = m.content ?? "";
  let parts: string[];
  if (typeof content === "string") parts = [content];
  else if (Array.isArray(content)) {
    parts = content.map((p) => {
      if (typeof p !== "object" || p === null) throw new UnsupportedPrompt("template_error");
      const t = member(p, "text");
      return typeof t === "string" ? t : "";
    });
  } else throw new UnsupportedPrompt("template_error");
  if (role === "user") return [{ role: "user", content: parts.map(text) }];
  const out: HarmonyMessage[] = reasoning ? [{ role: "assistant", channel: "analysis", content: [text(reasoning)] }] : [];
  if (parts.length > 0 && parts[0] !== "") out.push({ role: "assistant", channel: "final", content: parts.map(text) });
  return out;
}
