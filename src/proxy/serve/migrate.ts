/**
 * The migrate stage (docs/migration.md): a streamed /v1/chat/completions or
 * /v1/completions answer whose replica fails after its first byte is continued on
 * another replica, and the client sees one stream. Opt-in per deployment
 * (`openai.migrationLimit`), as Dynamo's `migration_limit`.
 *
 * The stream is read event by event (this costs JS per chunk, only for deployments
 * that turn migration on). The stage keeps what the client has been sent: the
 * answer's text, its token count (content events: one token each, as vLLM and the
 * reference replica stream at the default stream interval), its id and creation time.
 * A failure is the edge's own `upstream_failed` event (the connection was lost or
 * reset: dispatch.ts, sseWithErrorEvent), an error event from the replica (a draining
 * replica's `stream_handover` among them), or nothing for `openai.migrationStallMs`
 * (the replica hangs; its stream is cancelled), or its replica's announced drain
 * deadline coming within HANDOVER_LEAD_MS (an engine behind the agent cannot hand its
 * streams over itself; docs/migration.md, "Drain deadlines"). Then the
 * replica is marked down in this isolate's view, and a continuation goes through the
 * whole request path again (admission, choice, signed dispatch):
 * - chat: the messages plus the partial answer as an assistant message, with vLLM's
 *   `continue_final_message: true, add_generation_prompt: false`;
 * - completions: the prompt text plus the text generated so far;
 * - `max_tokens` less the tokens sent; everything else (stop, seed, temperature) kept.
 * The continuation's events are rewritten to the first answer's id and creation time,
 * its opening role event dropped, and its usage reported for the whole answer
 * (prompt: the client's prompt; completion: both parts).
 *
 * Not migrated (continuationOf answers undefined; the stream fails as before):
 * n > 1, logprobs, tools or tool calls in the answer (half a tool call cannot be
 * continued as text), a completion prompt given as token ids, echo, best_of, and the
 * Responses API. Greedy decoding continues to the same text as an uninterrupted run,
 * and so does seeded sampling on the reference replica (it draws each token from the
 * seed and the token's position); other sampling continues from another random state.
 */
import { errorBody, Header } from "../../protocol/index.ts";
import { jsonOf, withLastMember } from "../../protocol/json-top-level.ts";

/**
 * How long before a replica's announced drain deadline its streams leave it: enough
 * for a continuation's connect before the replica stops (its own handover margin is
 * HANDOVER_MARGIN_MS, 500 ms, for the streams it cannot finish).
 */
export const HANDOVER_LEAD_MS = 1_000;

/** When a stream on a replica that drains at `drainsAt` (its announced deadline, epoch ms) must leave it: HANDOVER_LEAD_MS before, so its continuation is prefilled elsewhere in time. */
export function leaveByOf(drainsAt: number | undefined): number | undefined {
  return drainsAt === undefined ? undefined : drainsAt - HANDOVER_LEAD_MS;
}

/** What a continuation needs of the original request, parsed once from its body. */
export interface MigrationPlan {
  endpoint: "chat" | "completion";
  body: Record<string, unknown>;
  /** The body as the client sent it: the continuation keeps its bytes (a seed beyond 2^53 stays the client's). */
  raw: ArrayBuffer;
  /** The token budget asked (max_completion_tokens / max_tokens), undefined when none. */
  maxTokens: number | undefined;
}

/**
 * The original body's plan, or undefined when the request must not be migrated (see
 * above). `held`: the body as the route holds it, whose one parse the plan reads (the
 * bytes are parsed here only without one).
 */
export function migrationPlan(endpoint: string, bytes: ArrayBuffer, held?: { json(): unknown }): MigrationPlan | undefined {
  if (endpoint !== "chat" && endpoint !== "completions") return undefined;
  const body = held ? held.json() : jsonOf(bytes);
  if (typeof body !== "object" || body === null || Array.isArray(body)) return undefined;
  const b = body as Record<string, unknown>;
  if (b.stream !== true) return undefined;
  if (b.n != null && b.n !== 1) return undefined;
  if (b.logprobs != null && b.logprobs !== false) return undefined;
  if (b.top_logprobs != null) return undefined;
  if (endpoint === "chat") {
    if (!Array.isArray(b.messages) || b.messages.length === 0) return undefined;
    if ((b.tools != null && (!Array.isArray(b.tools) || b.tools.length > 0)) || b.functions != null) return undefined;
    if (b.continue_final_message === true) return undefined;
  } else {
    if (typeof b.prompt !== "string" && !(Array.isArray(b.prompt) && b.prompt.length === 1 && typeof b.prompt[0] === "string")) return undefined;
    if (b.echo === true || (b.best_of != null && b.best_of !== 1) || b.suffix != null) return undefined;
  }
  const asked = endpoint === "chat" ? (b.max_completion_tokens ?? b.max_tokens) : b.max_tokens;
  return { endpoint: endpoint === "chat" ? "chat" : "completion", body: b, raw: bytes, maxTokens: typeof asked === "number" ? asked : undefined };
}

/** The body that continues `plan`'s request after `text` (`tokens` tokens) was sent; undefined when nothing is left to generate. */
export function continuationBody(plan: MigrationPlan, text: string, tokens: number): string | undefined {
  const b = plan.body;
  // The client's bytes, with the changed members added after them: the last of duplicate
  // names wins in Python's json (vLLM, SGLang) and in JSON.parse (withLastMember), and
  // every other member (a seed beyond 2^53, escapes, key order) stays as sent.
  const changes: [string, unknown][] = [];
  if (plan.maxTokens !== undefined) {
    const left = plan.maxTokens - tokens;
    if (left <= 0) return undefined;
    changes.push([plan.endpoint === "chat" && b.max_completion_tokens != null ? "max_completion_tokens" : "max_tokens", left]);
  }
  if (plan.endpoint === "chat") {
    changes.push(["messages", [...(b.messages as unknown[]), { role: "assistant", content: text }]], ["continue_final_message", true], ["add_generation_prompt", false]);
  } else {
    changes.push(["prompt", (typeof b.prompt === "string" ? b.prompt : (b.prompt as string[])[0]!) + text]);
  }
  let body: ArrayBuffer | null = plan.raw;
  for (const [name, value] of changes) body = body && withLastMember(body, name, JSON.stringify(value));
  return body ? new TextDecoder().decode(body) : undefined;
}

/**
 * Why a stream left its replica: an error event or a lost connection (`error`; a
 * replica's own `stream_handover` among them), nothing for migrationStallMs (`stalled`),
 * or its replica's announced drain deadline near (`drain_deadline`).
 */
export type MigrationReason = "error" | "stalled" | "drain_deadline";

/** Runs one continuation through the request path; resolves with the answer (any status). */
export type Continue = (body: ArrayBuffer, attempt: number) => Promise<Response>;

export interface MigrateOptions {
  plan: MigrationPlan;
  limit: number;
  /** A stream that sends nothing for this long has failed (its replica hangs); 0: no limit. */
  stallMs: number;
  requestId: string;
  /** Keeps the isolate working on the stream (ctx.waitUntil). */
  background: (p: Promise<unknown>) => void;
  /** Marks a failed replica down in this isolate's view. */
  markDown: (replicaId: string) => void;
  /**
   * When a stream must have left `replicaId`, epoch ms: its drain deadline (the replica
   * or its agent announced when it stops serving) less HANDOVER_LEAD_MS, as this
   * isolate's view has it; undefined while it announced none. A stream still there
   * then is continued elsewhere, as on a failure.
   */
  leaveBy?: (replicaId: string) => number | undefined;
  continueOn: Continue;
  /** Each migration, for logs and metrics, and why the stream left its replica. */
  onMigration?: (m: { from: string | null; tokens: number; attempt: number; ok: boolean; reason: MigrationReason }) => void;
}

interface Event {
  /** The event's whole text, "data: ...\n\n" included. */
  raw: string;
  data: string | undefined;
}

/** Splits SSE text into whole events; returns them and the rest (an incomplete event). */
function splitEvents(buffer: string): { events: Event[]; rest: string } {
  const events: Event[] = [];
  let at = 0;
  for (;;) {
    const end = buffer.indexOf("\n\n", at);
    if (end < 0) break;
    const raw = buffer.slice(at, end + 2);
    at = end + 2;
    let data: string | undefined;
    for (const line of raw.split("\n")) if (line.startsWith("data:")) data = (data === undefined ? "" : `${data}\n`) + line.slice(5).trimStart();
    events.push({ raw, data });
  }
  return { events, rest: buffer.slice(at) };
}

/** The reader's next chunk, or "stalled" when none comes within `ms` (0: wait as long as it takes). */
async function readWithin<T>(reader: ReadableStreamDefaultReader<T>, ms: number): Promise<ReadableStreamReadResult<T> | "stalled"> {
  if (ms <= 0) return reader.read();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const stalled = new Promise<"stalled">((resolve) => (timer = setTimeout(resolve, ms, "stalled")));
  try {
    return await Promise.race([reader.read(), stalled]);
  } finally {
    if (timer !== undefined) clearTimeout(timer);
  }
}

interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/**
 * The client's stream of a migratable answer: `first` passed on event by event, and,
 * when its replica fails, continued on others (at most `limit` times).
 */
export function migratingStream(first: Response, o: MigrateOptions): Response {
  const encoder = new TextEncoder();
  const { readable, writable } = new TransformStream<Uint8Array, Uint8Array>();
  const writer = writable.getWriter();
  let text = "";
  let tokens = 0;
  let id: unknown;
  let created: unknown;
  let finished = false;
  let toolCalls = false;
  /** Why the last part failed. */
  let reason: MigrationReason = "error";

  /** Passes one upstream answer (from replica `from`) on; resolves with how it ended. */
  const pass = async (res: Response, part: number, from: string | null): Promise<"done" | "failed" | "client_gone"> => {
    const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    try {
      for (;;) {
        // A replica draining with a deadline: the stream leaves it in time, between two events.
        const leaveIn = from === null || !o.leaveBy ? Infinity : (o.leaveBy(from) ?? Infinity) - Date.now();
        reason = "error";
        if (leaveIn <= 0) {
          reason = "drain_deadline";
          return "failed";
        }
        const limit = o.stallMs > 0 ? Math.min(o.stallMs, leaveIn) : leaveIn;
        const read = await readWithin(reader, limit === Infinity ? 0 : Math.max(1, limit));
        if (read === "stalled") {
          reason = limit < leaveIn ? "stalled" : "drain_deadline";
          return "failed";
        }
        const { done, value } = read;
        if (done) return finished ? "done" : "failed";
        buffer += value;
        const { events, rest } = splitEvents(buffer);
        buffer = rest;
        for (const e of events) {
          const out = rewrite(e, part);
          if (out === "failed") return "failed";
          if (out === undefined) continue;
          try {
            await writer.write(encoder.encode(out));
          } catch {
            return "client_gone";
          }
        }
      }
    } catch {
      return "failed";
    } finally {
      reader.cancel().catch(() => undefined);
    }
  };

  /** An upstream event as the client gets it; undefined to drop it; "failed" for an error event. */
  const rewrite = (e: Event, part: number): string | undefined | "failed" => {
    if (e.data === undefined) return e.raw;
    if (e.data === "[DONE]") {
      finished = true;
      return e.raw;
    }
    let chunk: Record<string, unknown>;
    try {
      chunk = JSON.parse(e.data) as Record<string, unknown>;
    } catch {
      return e.raw;
    }
    if (chunk.error !== undefined) return "failed";
    if (part === 0) {
      id ??= chunk.id;
      created ??= chunk.created;
    } else {
      chunk.id = id;
      chunk.created = created;
    }
    const choices = Array.isArray(chunk.choices) ? (chunk.choices as Record<string, unknown>[]) : [];
    const choice = choices[0];
    if (choice) {
      const delta = choice.delta as Record<string, unknown> | undefined;
      if (delta?.tool_calls !== undefined) toolCalls = true;
      const piece = o.plan.endpoint === "chat" ? delta?.content : choice.text;
      // The continuation's opening event (role, no text) is the client's already.
      if (part > 0 && delta?.role !== undefined && (piece === "" || piece == null)) return undefined;
      if (typeof piece === "string" && piece !== "") {
        text += piece;
        tokens++;
      }
    }
    const usage = chunk.usage as Usage | null | undefined;
    if (part > 0 && usage) {
      // One answer's usage: the client's prompt, and the tokens of every part.
      const prompt = Math.max(0, usage.prompt_tokens - tokensBefore[part]!);
      const completion = usage.completion_tokens + tokensBefore[part]!;
      chunk.usage = { ...usage, prompt_tokens: prompt, completion_tokens: completion, total_tokens: prompt + completion };
    }
    return part > 0 ? `data: ${JSON.stringify(chunk)}\n\n` : e.raw;
  };

  /** Tokens sent before each part began (the continuation's prompt carries them). */
  const tokensBefore: number[] = [0];

  const failureEvent = () => `data: ${JSON.stringify(errorBody("upstream_failed", "the replica failed mid-stream and the answer could not be continued", { requestId: o.requestId }))}\n\n`;

  /** The last events of an answer that reached max_tokens (its usage, lost with the replica, is not known here). */
  const lengthEnding = () => {
    const choice = o.plan.endpoint === "chat" ? { index: 0, delta: {}, logprobs: null, finish_reason: "length" } : { index: 0, text: "", logprobs: null, finish_reason: "length" };
    const object = o.plan.endpoint === "chat" ? "chat.completion.chunk" : "text_completion";
    return `data: ${JSON.stringify({ id, object, created, model: o.plan.body.model, choices: [choice] })}\n\ndata: [DONE]\n\n`;
  };

  const run = async () => {
    let res = first;
    let from = first.headers.get(Header.replica);
    for (let part = 0; ; part++) {
      const ended = await pass(res, part, from);
      if (ended !== "failed") break;
      const body = part < o.limit && !toolCalls ? continuationBody(o.plan, text, tokens) : undefined;
      if (from !== null) o.markDown(from);
      if (body === undefined) {
        // Every token asked was sent and only the end was lost: the answer ends as the engine would have ended it.
        const complete = part < o.limit && !toolCalls && o.plan.maxTokens !== undefined && tokens >= o.plan.maxTokens;
        await writer.write(encoder.encode(complete ? lengthEnding() : failureEvent())).catch(() => undefined);
        break;
      }
      tokensBefore[part + 1] = tokens;
      const next = await o.continueOn(encoder.encode(body).buffer as ArrayBuffer, part + 1).catch(() => undefined);
      const ok = next !== undefined && next.status === 200 && next.body !== null;
      o.onMigration?.({ from, tokens, attempt: part + 1, ok, reason });
      if (!ok) {
        await next?.body?.cancel().catch(() => undefined);
        await writer.write(encoder.encode(failureEvent())).catch(() => undefined);
        break;
      }
      res = next;
      from = next.headers.get(Header.replica);
    }
    await writer.close().catch(() => undefined);
  };
  o.background(run());
  return new Response(readable, { status: first.status, statusText: first.statusText, headers: first.headers });
}


