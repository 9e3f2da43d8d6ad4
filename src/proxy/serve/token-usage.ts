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

  /** Bytes held now: at most the limit plus one piece smaller than it (a bound on what a long answer costs here). */
  get bytes(): number {
    return this.#held;
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

const DATA = [0x64, 0x61, 0x74, 0x61, 0x3a]; // "data:"
const LF = 0x0a;

/**
 * Counts a server-sent-events stream's `data:` lines as they pass, in O(1) memory
 * whatever the chunking: each is one chunk the replica sent, and a chunk carries at
 * least one token but for the first (the role), the last (the finish reason, the
 * usage) and `[DONE]`. What a token limit charges for a stream that ends before its
 * usage arrives (the client left, the replica was cut): the tokens the edge passed on,
 * not a guess from the request's size.
 */
export class SseDataEvents {
  #count = 0;
  /** How much of "data:" the current line has matched so far; -1: the line is not one. */
  #matched = 0;

  push(chunk: Uint8Array): void {
    let matched = this.#matched;
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i]!;
      if (b === LF) matched = 0;
      else if (matched >= 0 && matched < DATA.length) {
        if (b === DATA[matched]) {
          if (++matched === DATA.length) this.#count++;
        } else matched = -1;
      }
    }
    this.#matched = matched;
  }

  get count(): number {
    return this.#count;
  }
}

/** Bytes of one event held back at most while looking for OpenAI's usage chunk: larger events pass as they come. */
export const EVENT_HOLD_BYTES = 8 * 1024;

/**
 * A chat or completions stream without its usage chunk (`choices: []` and a `usage`
 * object: what `stream_options.include_usage` adds before `[DONE]`). The edge asks a
 * replica for usage whenever a key is token-limited, whatever the client sent; this
 * gives a client that did not ask the stream it asked for. It holds at most one event
 * of EVENT_HOLD_BYTES: an event longer than that (never a usage chunk) is passed on
 * as its bytes come, so a replica's endless event costs nothing more here. Events
 * end at a blank line (LF LF, or CR LF CR LF).
 */
export function withoutUsageChunk(source: ReadableStream<Uint8Array>): ReadableStream<Uint8Array> {
  let held = new Uint8Array(0);
  // Inside an event too long to hold: passing until its end.
  let passing = false;
  const decoder = new TextDecoder();
  const isUsageChunk = (event: Uint8Array) => {
    const text = decoder.decode(event).trim();
    if (!text.startsWith("data:")) return false;
    try {
      const o = JSON.parse(text.slice(5)) as { choices?: unknown; usage?: unknown };
      return Array.isArray(o.choices) && o.choices.length === 0 && typeof o.usage === "object" && o.usage !== null;
    } catch {
      return false;
    }
  };
  /** Where the first event in `b` from `from` ends (just past its blank line), or -1. */
  const eventEnd = (b: Uint8Array, from: number) => {
    for (let i = Math.max(from, 1); i < b.length; i++) {
      if (b[i] !== LF) continue;
      if (b[i - 1] === LF) return i + 1;
      if (i >= 3 && b[i - 1] === 0x0d && b[i - 2] === LF) return i + 1;
    }
    return -1;
  };
  return source.pipeThrough(
    new TransformStream<Uint8Array, Uint8Array>({
      transform(chunk, controller) {
        let b = chunk;
        // The held bytes hold no event's end: the search resumes where a blank line could still begin.
        let from = 0;
        if (held.length > 0) {
          b = new Uint8Array(held.length + chunk.length);
          b.set(held);
          b.set(chunk, held.length);
          from = Math.max(0, held.length - 3);
          held = new Uint8Array(0);
        }
        let at = 0;
        for (;;) {
          const end = eventEnd(b, Math.max(at, from));
          if (end < 0) break;
          const event = b.subarray(at, end);
          if (passing || !isUsageChunk(event)) controller.enqueue(event.slice());
          passing = false;
          at = end;
        }
        const rest = b.subarray(at);
        if (rest.length === 0) return;
        if (passing || rest.length > EVENT_HOLD_BYTES) {
          passing = true;
          controller.enqueue(rest.slice());
        } else held = rest.slice();
      },
      flush(controller) {
        if (held.length > 0 && (passing || !isUsageChunk(held))) controller.enqueue(held);
      },
    }),
  );
}
