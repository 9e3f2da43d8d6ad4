/**
 * tiny-lm's chat template (docs/tiny-lm.md): each message becomes `<role>: <text>\n`,
 * then `assistant: ` follows, and the completion of that text is the answer. Pure, so
 * the reference replica (src/replica/llm/openai-handler.ts) and the edge (prefix
 * routing) render a conversation to the very same text.
 */
// @ts-nocheck


/**
 * Where an answer's turn ends: the newline that closes every message in this
 * template. The replica stops an answer there (finish_reason "stop"), as an engine
 * stops at its chat template's end-of-turn token (Qwen's <|im_end|>, Llama 3's
 * <|eot_id|>), unless the request sets vLLM's `ignore_eos`.
 */
export const END_OF_TURN = "\n";

/** A chat message as the template reads it: text content, or text parts joined. */
export interface TemplateMessage {
  role: string;
  content?: string | readonly { text?: string }[] | null;
}

const contentOf = (m: TemplateMessage) => (typeof m.content === "string" ? m.content : (m.content ?? []).map((p) => p.text ?? "").join(""));

/** The chat template: `<role>: <text>\n` per message, then `assistant: `. */
export function chatPrompt(messages: readonly TemplateMessage[]): string {
  let text = "";
  for (const m of messages) text += `${m.role}: ${contentOf(m)}\n`;
  return `${text}assistant: `;
}

/**
 * The template with vLLM's `continue_final_message` (and no generation prompt): the
 * last message left open, `<role>: <text>` with no end of turn, so the model continues
 * it. A partial answer re-sent this way renders to exactly the prompt and the text the
 * model had generated (docs/migration.md).
 */
export function continuationPrompt(messages: readonly TemplateMessage[]): string {
  const last = messages.at(-1);
  if (!last) return "";
  return `${chatPrompt(messages.slice(0, -1)).slice(0, -"assistant: ".length)}${last.role}: ${contentOf(last)}`;
}
