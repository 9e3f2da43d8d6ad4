/**
 * bench/prefix-cache/prefix-cache.ts's client: one streamed OpenAI chat completion, timed.
 * TTFT runs from the request's scheduled arrival (open loop: the generator's own
 * lag counts against the arm) to the first chunk that carries content; TPOT is
 * the mean gap between content chunks after it (the reference replica sends one
 * token per chunk). The answer's text comes back too: the next turn of the
 * conversation carries it.
 */
import { sseData } from "../../test/fixtures/sse.ts";

export interface StreamResult {
  status: number;
  /** Who served it: x-switchyard-replica, or the replica the oracle chose. */
  replica: string;
  ttftMs: number;
  tpotMs: number;
  /** Content chunks received. */
  tokens: number;
  /** The assistant's text; undefined when the request failed. */
  answer: string | undefined;
  /** From the scheduled arrival to the end of the stream. */
  e2eMs: number;
  /** The prompt's tokens the replica found cached (its usage's prompt_tokens_details.cached_tokens), when the stream carried usage. */
  cachedTokens?: number;
  error?: string;
}


/**
 * POSTs `body` to `url` and reads the Server-Sent Events as they come. A status
 * other than 200, a stream that ends without content or an abort is a failure
 * (answer undefined); `expectTokens` is the max_tokens asked (the tiny LM always
 * writes that many: it has no end-of-text token).
 */
export async function streamChat(
  url: string,
  body: string,
  headers: Record<string, string>,
  scheduledAt: number,
  signal: AbortSignal,
  expectTokens: number,
): Promise<StreamResult> {
  let first = NaN;
  let last = NaN;
  let tokens = 0;
  let answer = "";
  let replica = "?";
  let cachedTokens: number | undefined;
  try {
    const res = await fetch(url, { method: "POST", headers: { "content-type": "application/json", ...headers }, body, signal });
    replica = res.headers.get("x-switchyard-replica") ?? "?";
    if (res.status !== 200 || !res.body) {
      const text = await res.text();
      return { status: res.status, replica, ttftMs: NaN, tpotMs: NaN, tokens: 0, answer: undefined, e2eMs: performance.now() - scheduledAt, error: text.slice(0, 200) };
    }
    let failed: string | undefined;
    for await (const data of sseData(res.body)) {
      if (data === "[DONE]") continue;
      const parsed = JSON.parse(data) as { choices?: { delta?: { content?: string } }[]; error?: { message?: string }; usage?: { prompt_tokens_details?: { cached_tokens?: number } } | null };
      if (parsed.error) failed = parsed.error.message ?? "error event";
      const cached = parsed.usage?.prompt_tokens_details?.cached_tokens;
      if (typeof cached === "number") cachedTokens = cached;
      const content = parsed.choices?.[0]?.delta?.content;
      if (content) {
        const now = performance.now();
        if (tokens === 0) first = now;
        last = now;
        tokens++;
        answer += content;
      }
    }
    // One token per chunk and per character for the tiny LM; either count reaching max_tokens is a whole answer.
    const ok = failed === undefined && tokens > 0 && Math.max(tokens, answer.length) >= expectTokens;
    return {
      status: ok ? 200 : 599,
      replica,
      ttftMs: first - scheduledAt,
      tpotMs: tokens > 1 ? (last - first) / (tokens - 1) : NaN,
      tokens,
      answer: ok ? answer : undefined,
      e2eMs: performance.now() - scheduledAt,
      ...(cachedTokens !== undefined ? { cachedTokens } : {}),
      ...(ok ? {} : { error: failed ?? `stream ended after ${tokens} of ${expectTokens} tokens` }),
    };
  } catch (err) {
    const e = err as Error;
    return { status: 0, replica, ttftMs: NaN, tpotMs: NaN, tokens, answer: undefined, e2eMs: performance.now() - scheduledAt, error: String(e.name === "AbortError" || e.name === "TimeoutError" ? e.name : (e.cause ?? e)) };
  }
}
