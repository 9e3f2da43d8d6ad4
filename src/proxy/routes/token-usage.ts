/**
 * The token usage a replica reports at the end of an OpenAI-style response,
 * read from the last bytes that pass, never from a buffered body. Pure.
 *
 * Where `usage` is, in each wire format the /v1 routes carry:
 * - a non-streamed chat/completions/embeddings JSON: the top-level `usage`
 *   ({prompt_tokens, completion_tokens}), which OpenAI and vLLM write after
 *   `choices`/`data`, so at the end of the body;
 * - a streamed chat/completions answer with `stream_options.include_usage`:
 *   the last chunk before `data: [DONE]` carries `usage`;
 * - the Responses API: `response.usage` ({input_tokens, output_tokens}) at
 *   the end of the `response.completed` event (streamed, the last event) or of
 *   the response object (not streamed).
 * So the last `"usage": {...}` in the stream's tail is the answer's usage.
 * A `"usage"` inside a string value is escaped (`\"usage\"`) and is skipped.
 */
import type { TokenCounts } from "../../telemetry/types.ts";

/** Bytes of a response's tail kept to find its usage: the usage object and what follows it (a Responses object's trailing fields). */
export const USAGE_TAIL_BYTES = 8 * 1024;

/** Keeps the last USAGE_TAIL_BYTES of a byte stream (copies: the chunks themselves may be transferred on). */
export class UsageTail {
  readonly #pieces: Uint8Array[] = [];
  #held = 0;
  readonly #limit: number;

  constructor(limit = USAGE_TAIL_BYTES) {
    this.#limit = limit;
  }

  push(chunk: Uint8Array): void {
    if (chunk.length === 0) return;
    if (chunk.length >= this.#limit) {
      this.#pieces.length = 0;
      this.#pieces.push(chunk.slice(chunk.length - this.#limit));
      this.#held = this.#limit;
      return;
    }
    this.#pieces.push(chunk.slice());
    this.#held += chunk.length;
    // Drop whole pieces from the front while what is left still covers the limit.
    while (this.#pieces.length > 1 && this.#held - this.#pieces[0]!.length >= this.#limit) this.#held -= this.#pieces.shift()!.length;
  }

  /** The tail as text (its first character may be a cut UTF-8 sequence: harmless for the search). */
  text(): string {
    const out = new Uint8Array(this.#held);
    let at = 0;
    for (const p of this.#pieces) {
      out.set(p, at);
      at += p.length;
    }
    const start = Math.max(0, this.#held - this.#limit);
    return new TextDecoder().decode(out.subarray(start));
  }

  usage(): TokenCounts | null {
    return usageIn(this.text());
  }
}

const USAGE_KEY = /"usage"\s*:\s*\{/g;

/** The last well-formed `"usage": {...}` object in `text` with token counts, or null. */
export function usageIn(text: string): TokenCounts | null {
  const starts: number[] = [];
  for (const m of text.matchAll(USAGE_KEY)) if (m.index === 0 || text[m.index - 1] !== "\\") starts.push(m.index + m[0].length - 1);
  for (let i = starts.length - 1; i >= 0; i--) {
    const end = objectEnd(text, starts[i]!);
    if (end < 0) continue;
    let value: unknown;
    try {
      value = JSON.parse(text.slice(starts[i]!, end));
    } catch {
      continue;
    }
    const counts = countsOf(value);
    if (counts) return counts;
  }
  return null;
}

/** Index just past the `}` that closes the object opening at `open`, or -1 (strings skipped). */
function objectEnd(text: string, open: number): number {
  let depth = 0;
  for (let i = open; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      for (i++; i < text.length && text[i] !== '"'; i++) if (text[i] === "\\") i++;
    } else if (c === "{" || c === "[") depth++;
    else if (c === "}" || c === "]") {
      depth--;
      if (depth === 0) return i + 1;
    }
  }
  return -1;
}

const count = (v: unknown): number | undefined => (typeof v === "number" && Number.isInteger(v) && v >= 0 ? v : undefined);

/** Chat/completions/embeddings name them prompt/completion_tokens; the Responses API input/output_tokens. */
function countsOf(usage: unknown): TokenCounts | null {
  if (typeof usage !== "object" || usage === null) return null;
  const u = usage as Record<string, unknown>;
  const prompt = count(u.prompt_tokens) ?? count(u.input_tokens);
  if (prompt === undefined) return null;
  return { prompt, completion: count(u.completion_tokens) ?? count(u.output_tokens) ?? 0 };
}
