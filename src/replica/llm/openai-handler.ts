/**
 * The reference replica's OpenAI-compatible HTTP API for its language model (the CLI's
 * `--backend llm`), shaped like a vLLM server so clients and tools written for one work:
 *
 *   POST /v1/completions        prompt → text; `stream: true` for server-sent events
 *   POST /v1/chat/completions   messages → assistant message (template below); streams too
 *   POST /v1/embeddings         input (string or strings) → unit vectors
 *   POST /v1/responses          OpenAI's Responses API: input (string or messages) → a
 *                               response; streams named events (responses-api.ts)
 *   GET  /v1/models             the served model
 *   GET  /metrics               vLLM's Prometheus metrics (vllm-metrics.ts)
 *   GET  /health                200 (vLLM's liveness route)
 *
 * The GET routes are answered outside admission control (they are cheap and must work on
 * a full replica); the POST routes are admitted like any request.
 *
 * Streaming: `text/event-stream`, one `data: {chunk}\n\n` per generated token, written as
 * soon as the token exists, then `data: [DONE]\n\n`. Chunks are OpenAI's
 * (`text_completion` / `chat.completion.chunk`); with `stream_options.include_usage` every
 * chunk carries `usage: null` and one last chunk with no choices carries the usage.
 *
 * The model brings its tokenizer and chat template (engine.ts's PromptCodec). tiny-lm's
 * (docs/tiny-lm.md): each message becomes `<role>: <text>\n`, then `assistant: ` follows,
 * and the completion of that text is the answer. The engine stand-in's: a real family's
 * (family-standin.ts), with `tools` and `chat_template_kwargs` passed to its template.
 *
 * Parameters: max_tokens / max_completion_tokens (at most 1024; default, as vLLM's: a
 * chat's and a Responses request's the rest of the context, a completion's 64), temperature
 * (0..2, default 1; 0 is greedy), top_p (0 < p ≤ 1), seed (same seed, same text), stop
 * (a string or up to 4), presence_penalty / frequency_penalty (-2..2), n (1 only), user,
 * priority (an integer, below) and unknown fields (ignored). Errors are OpenAI's error
 * object (src/protocol/errors.ts).
 *
 * Priority (requestPriority): where generations wait (KV blocks, the prefill lane), a
 * higher priority goes first. On a dispatch it is the edge's x-switchyard-priority.
 */
import { randomUUID } from "node:crypto";
import type { IncomingHttpHeaders, IncomingMessage, ServerResponse } from "node:http";
import { z } from "zod";
import { ERROR_STATUS, Header, KV_TRANSFER_PATH, OpenAIPath, dispatchPriority, errorBody, type ErrorCode, type ReplicaRoleFlag } from "../../protocol/index.ts";
import type { RequestHandler } from "../handlers.ts";
import { readBodyUpTo, sendJson } from "../http-json.ts";
import { RequestTooLong, type FinishReason, type GenerateResult, type LlmEngine, type PromptCodec } from "./engine.ts";
import { UnsupportedPrompt } from "../../prompt/tokenizers/tokenizer.ts";
import { toolsAsPython } from "../../prefix/prompt-keys.ts";
import {
  BootstrapFields,
  KV_READ_TIMEOUT_MS,
  KvTransferParams,
  bootstrapOf,
  prefillAnswer,
  readRemotePrefill,
  remotePrefillOf,
  roomTransferId,
  serveBootstrapIdentity,
  serveTransferRead,
  type ReadSigner,
  type TransferIdentity,
} from "./kv-transfer.ts";
import { ResponseEvents, responseObject, responseUsage, responsesMessages, responsesSchema, type ResponseIds } from "./responses-api.ts";

/** A completion's max_tokens when it sets none (vLLM's is 16; tiny-lm's prompts are characters). */
export const DEFAULT_MAX_TOKENS = 64;

/**
 * A chat's or a Responses request's budget when it sets none: as vLLM's, the rest of the
 * model's context after the prompt (at most MAX_TOKENS_CAP), so an answer ends at its
 * end of turn (finish_reason `stop`), not at a budget the client never asked for.
 */
function restOfContext(engine: LlmEngine, promptTokens: number): number {
  return Math.max(1, Math.min(MAX_TOKENS_CAP, engine.maxModelLen - promptTokens));
}
/** A handed-over stream's continuation needs its dispatch and a prefill elsewhere before the replica exits. */
export const HANDOVER_MARGIN_MS = 500;

/** A stream a drain may hand over: its budget, its progress, and the signal that ends it. */
interface MigratableStream {
  maxTokens: number;
  generated: number;
  firstAt: number;
  handover: AbortController;
}
export const MAX_TOKENS_CAP = 1024;
const MAX_BODY_BYTES = 1024 * 1024;
const MAX_EMBEDDING_INPUTS = 2048;
const MAX_EMBEDDING_TOKENS = 8192;

type LoadHeaders = () => Record<string, string>;

export interface LlmServiceOptions {
  engine: LlmEngine;
  /** The served model id: requests must name it in `model`. */
  modelId: string;
  /** owned_by in /v1/models. */
  ownedBy?: string;
  /**
   * Usage says how many of the prompt's tokens the prefix cache held: Chat Completions' and
   * completions' prompt_tokens_details.cached_tokens, the Responses API's
   * input_tokens_details.cached_tokens (0 without it). vLLM's --enable-prompt-tokens-details;
   * off by default, as there.
   */
  promptTokensDetails?: boolean;
  /**
   * Prefill/decode disaggregation (kv-transfer.ts): how this replica names itself in a
   * prefill's answer, and signs its reads as a decode. vLLM's fields are served either
   * way (as a kv_both engine does); SGLang's by `role`, as an SGLang server's
   * --disaggregation-mode decides (both: they are ignored, as in SGLang's "null" mode).
   * Absent: kv_transfer_params and bootstrap fields are ignored, as by an engine without a KV connector.
   */
  kvTransfer?: { self: TransferIdentity; signer: ReadSigner; role: ReplicaRoleFlag; log?: (msg: string) => void };
}

export interface LlmService {
  /** POST routes (admitted requests). */
  handler: RequestHandler;
  /**
   * A drain with a deadline (epoch ms): the streams the edge will continue elsewhere
   * (x-switchyard-migratable) that cannot finish by then end now with a
   * `stream_handover` event, the others at the deadline less HANDOVER_MARGIN_MS if
   * still open (docs/migration.md).
   */
  handOver(deadlineAt: number): void;
  /** GET /metrics, /health, /v1/models, answered without admission; false for anything else. */
  unadmitted: (req: IncomingMessage, res: ServerResponse, loadHeaders: LoadHeaders) => boolean;
}

// ---- request schemas -------------------------------------------------------------------

/** Token ids; their range is the model's (PromptCodec), checked once parsed (checkIds). */
const tokenIds = z.array(z.number().int().min(0));
const unsupported = (what: string) => ({ message: `${what} is not supported by this server` });

const common = {
  model: z.string().min(1),
  max_tokens: z.number().int().min(1).max(MAX_TOKENS_CAP).nullish(),
  temperature: z.number().min(0).max(2).nullish(),
  top_p: z.number().gt(0).max(1).nullish(),
  seed: z.number().int().nullish(),
  stop: z
    .union([z.string(), z.array(z.string())])
    .nullish()
    .refine((v) => !Array.isArray(v) || v.length <= 4, { message: "at most 4 stop sequences" }),
  n: z
    .number()
    .int()
    .nullish()
    .refine((n) => n == null || n === 1, { message: "only n=1 is supported (one choice per request)" }),
  stream: z.boolean().nullish(),
  stream_options: z.object({ include_usage: z.boolean().nullish() }).nullish(),
  presence_penalty: z.number().min(-2).max(2).nullish(),
  frequency_penalty: z.number().min(-2).max(2).nullish(),
  user: z.string().nullish(),
  /** vLLM's extension: generate max_tokens, past the end of the turn (benchmarks that need a fixed length). */
  ignore_eos: z.boolean().nullish(),
  /** vLLM's extension, but higher first, as the edge reads it; used only off a dispatch (requestPriority). */
  priority: z.number().int().nullish(),
  /** vLLM's prefill/decode disaggregation (NixlConnector's fields; kv-transfer.ts): set by a router, never a client (the edge refuses them from clients). */
  kv_transfer_params: KvTransferParams.nullish(),
  /** SGLang's prefill/decode disaggregation (bootstrap_host, _port, _room; kv-transfer.ts): set by a router, never a client. */
  ...BootstrapFields,
};

const completionSchema = z.object({
  ...common,
  prompt: z.union([z.string(), z.array(z.string()).length(1), tokenIds, z.array(tokenIds).length(1)]),
  echo: z
    .boolean()
    .nullish()
    .refine((v) => !v, unsupported("echo")),
  suffix: z
    .string()
    .nullish()
    .refine((v) => !v, unsupported("suffix")),
  best_of: z
    .number()
    .int()
    .nullish()
    .refine((v) => v == null || v === 1, unsupported("best_of > 1")),
  logprobs: z
    .number()
    .int()
    .nullish()
    .refine((v) => v == null, unsupported("logprobs")),
});

const contentPart = z.looseObject({ type: z.string(), text: z.string().optional() }).refine((p) => p.type === "text" && p.text !== undefined, {
  message: "only text content parts are supported",
});
const message = z.looseObject({
  role: z.enum(["system", "developer", "user", "assistant", "tool"]),
  content: z.union([z.string(), z.array(contentPart), z.null()]).optional(),
  name: z.string().optional(),
});
const chatSchema = z.object({
  ...common,
  max_completion_tokens: z.number().int().min(1).max(MAX_TOKENS_CAP).nullish(),
  messages: z.array(message).min(1),
  /** For templates that take them (the stand-in's real families); tiny-lm's template reads neither. */
  tools: z.array(z.unknown()).nullish(),
  chat_template_kwargs: z.record(z.string(), z.unknown()).nullish(),
  /** vLLM's: continue the last (assistant) message instead of starting a new turn; with add_generation_prompt false. */
  continue_final_message: z.boolean().nullish(),
  add_generation_prompt: z.boolean().nullish(),
  logprobs: z
    .boolean()
    .nullish()
    .refine((v) => !v, unsupported("logprobs")),
  top_logprobs: z
    .number()
    .int()
    .nullish()
    .refine((v) => v == null, unsupported("top_logprobs")),
});

const responsesRequest = responsesSchema(MAX_TOKENS_CAP);

const embeddingSchema = z.object({
  model: z.string().min(1),
  // At least one input: an empty list is refused (as OpenAI does), not answered with no embeddings.
  input: z.union([z.string(), z.array(z.string()).min(1).max(MAX_EMBEDDING_INPUTS), tokenIds.min(1), z.array(tokenIds).min(1).max(MAX_EMBEDDING_INPUTS)]),
  encoding_format: z.enum(["float", "base64"]).nullish(),
  dimensions: z.number().int().min(1).nullish(),
  user: z.string().nullish(),
});

// ---- HTTP helpers ----------------------------------------------------------------------

class HttpError extends Error {
  constructor(
    readonly code: ErrorCode,
    message: string,
    readonly details?: unknown,
  ) {
    super(message);
  }
}

/**
 * A signal that aborts when the client goes away before the answer is
 * finished; `release` detaches the listeners and aborts, which stops a
 * generation the handler left early.
 */
function watchClient(req: IncomingMessage, res: ServerResponse): { signal: AbortSignal; release(): void } {
  const abort = new AbortController();
  const onClose = () => {
    if (!res.writableFinished) abort.abort();
  };
  res.once("close", onClose);
  req.once("error", onClose);
  return {
    signal: abort.signal,
    release() {
      res.off("close", onClose);
      req.off("error", onClose);
      abort.abort();
    },
  };
}

/**
 * Starts a Server-Sent Events answer and returns its writer: a write that waits
 * for the socket to drain (or close) when its buffer is full, so a slow client
 * holds back generation instead of growing the buffer.
 */
function openEventStream(res: ServerResponse, headers: Record<string, string>): (chunk: string) => Promise<void> {
  res.writeHead(200, { ...headers, "content-type": "text/event-stream; charset=utf-8", "cache-control": "no-cache", "x-accel-buffering": "no" });
  res.flushHeaders();
  return async (chunk) => {
    if (res.write(chunk) || res.destroyed) return;
    await new Promise<void>((resolve) => {
      const done = () => {
        res.off("drain", done);
        res.off("close", done);
        resolve();
      };
      res.on("drain", done);
      res.on("close", done);
    });
  };
}

function sendError(res: ServerResponse, err: HttpError, headers: Record<string, string>): void {
  sendJson(res, ERROR_STATUS[err.code], errorBody(err.code, err.message, err.details === undefined ? undefined : { details: err.details }), headers);
}

/** A parsed body's text, for what must be read again as Python reads it (a chat's tools: toolsAsPython). */
const bodyTexts = new WeakMap<object, string>();

async function readJson(req: IncomingMessage, res: ServerResponse): Promise<unknown> {
  const body = await readBodyUpTo(req, MAX_BODY_BYTES, res);
  if (body === null) {
    throw new HttpError("payload_too_large", `request body over ${MAX_BODY_BYTES} bytes`);
  }
  try {
    const text = body.toString("utf8");
    const json: unknown = JSON.parse(text);
    if (typeof json === "object" && json !== null) bodyTexts.set(json, text);
    return json;
  } catch {
    throw new HttpError("bad_request", "We could not parse the JSON body of your request: it is not valid JSON.");
  }
}

function parse<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (parsed.success) return parsed.data;
  const issues = parsed.error.issues.slice(0, 20);
  const first = issues[0]!;
  const where = first.path.length > 0 ? `'${first.path.join(".")}': ` : "";
  throw new HttpError("bad_request", `${where}${first.message}`, issues);
}

/** The body's `model` must be the served one: 404 model_not_found otherwise (as OpenAI and vLLM answer). */
function checkModel(body: unknown, modelId: string): void {
  if (typeof body !== "object" || body === null || Array.isArray(body)) throw new HttpError("bad_request", "the request body must be a JSON object");
  const model = (body as { model?: unknown }).model;
  if (typeof model === "string" && model !== modelId) {
    throw new HttpError("model_not_found", `The model \`${model}\` does not exist. This server serves \`${modelId}\`.`, { model, known: [modelId] });
  }
}

/** Ids given as a prompt must be the model's: 400 otherwise, naming the first that is not. */
function checkIds(ids: readonly number[], prompts: PromptCodec, field: string): void {
  const bad = ids.findIndex((id) => id < prompts.firstId || id >= prompts.vocabSize);
  if (bad >= 0) throw new HttpError("bad_request", `'${field}': token id ${ids[bad]} at ${bad} is outside this model's vocabulary (${prompts.firstId}..${prompts.vocabSize - 1})`);
}

function promptIds(prompt: string | string[] | number[] | number[][], prompts: PromptCodec): number[] {
  const one = Array.isArray(prompt) && prompt.length === 1 && typeof prompt[0] !== "number" ? prompt[0]! : prompt;
  if (typeof one === "string") return prompts.text(one);
  checkIds(one as number[], prompts, "prompt");
  return one as number[];
}

const nowS = () => Math.floor(Date.now() / 1000);

/**
 * The request's priority in the engine's queues (higher first). On a dispatch (the edge
 * sends x-switchyard-protocol on every one) it is the edge's x-switchyard-priority,
 * admission's word on it (capped at the deployment's `maxPriority`), and 0 without it;
 * the body's own `priority` is the client's and not looked at then, so no client can
 * raise its request past the cap by the body on any route. A request straight from a
 * client (a standalone replica with no edge in front) takes the body's `priority`, in
 * the edge's sense: higher first (vLLM's field is lower first; the edge negates it only
 * for vLLM engines, `openai.enginePriority`).
 */
export function requestPriority(headers: IncomingHttpHeaders, bodyPriority: number | null | undefined): number {
  return dispatchPriority(headers) ?? bodyPriority ?? 0;
}

/**
 * The extra key of the request's KV blocks (src/prefix/block-keys.ts): the adapter /
 * multiplexed model it names in x-switchyard-model, as the proxy sends it, "" when none
 * (the base model). An edge names the same blocks from the same header and
 * blockKeys(encode(<prompt text>)): the engine keys exactly these prompt ids.
 */
function blockExtra(req: IncomingMessage): string {
  const raw = req.headers[Header.model];
  return (Array.isArray(raw) ? raw[0] : raw)?.trim() ?? "";
}

// ---- the service -----------------------------------------------------------------------

export function llmService(options: LlmServiceOptions): LlmService {
  const { engine, modelId } = options;
  const prompts = engine.model.prompts;
  const createdS = nowS();
  const migratable = new Set<MigratableStream>();

  const handOver = (deadlineAt: number): void => {
    const now = Date.now();
    for (const s of migratable) {
      // Its pace so far: tokens since the first, over the time since; none yet: it cannot be known to finish.
      const perTokenMs = s.generated > 1 ? (now - s.firstAt) / (s.generated - 1) : Infinity;
      if (now + (s.maxTokens - s.generated) * perTokenMs > deadlineAt - HANDOVER_MARGIN_MS) s.handover.abort();
    }
    const rest = setTimeout(() => {
      for (const s of migratable) s.handover.abort();
    }, Math.max(0, deadlineAt - HANDOVER_MARGIN_MS - now));
    rest.unref();
  };

  const unadmitted = (req: IncomingMessage, res: ServerResponse, loadHeaders: LoadHeaders): boolean => {
    const path = (req.url ?? "/").split("?")[0];
    // A decode replica reads a prefill's blocks (signed like a dispatch: the server checked it): no admission slot, no model run.
    if (path === KV_TRANSFER_PATH && req.method === "POST" && options.kvTransfer) {
      serveTransferRead(req, res, (what, signal) =>
        "room" in what ? engine.awaitTransfer(roomTransferId(what.room), KV_READ_TIMEOUT_MS, signal) : engine.readTransfer(what.transferId, what.blockIds),
      );
      return true;
    }
    // SGLang's decode asks a prefill's bootstrap who it is (to sign its read for it).
    if (path === KV_TRANSFER_PATH && req.method === "GET" && options.kvTransfer) {
      req.resume();
      serveBootstrapIdentity(res, options.kvTransfer.self.engineId);
      return true;
    }
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    if (path === "/metrics") {
      req.resume();
      const text = engine.metricsText(modelId);
      res.writeHead(200, { ...loadHeaders(), "content-type": "text/plain; version=0.0.4; charset=utf-8", "content-length": Buffer.byteLength(text) });
      res.end(req.method === "HEAD" ? undefined : text);
      return true;
    }
    if (path === "/health") {
      req.resume();
      res.writeHead(200, { ...loadHeaders(), "content-length": 0 });
      res.end();
      return true;
    }
    if (path === OpenAIPath.models) {
      req.resume();
      sendJson(
        res,
        200,
        {
          object: "list",
          data: [{ id: modelId, object: "model", created: createdS, owned_by: options.ownedBy ?? "switchyard", root: modelId, parent: null, max_model_len: engine.maxModelLen }],
        },
        loadHeaders(),
      );
      return true;
    }
    return false;
  };

  const handler: RequestHandler = async (req, res, loadHeaders) => {
    const path = (req.url ?? "/").split("?")[0];
    const route = path === OpenAIPath.completions ? "completion" : path === OpenAIPath.chat ? "chat" : path === OpenAIPath.embeddings ? "embedding" : path === OpenAIPath.responses ? "responses" : undefined;
    try {
      if (!route) {
        req.resume();
        throw new HttpError("route_not_found", `no route ${req.method} ${path}; this server has POST /v1/completions, /v1/chat/completions, /v1/embeddings, /v1/responses and GET /v1/models, /metrics, /health`);
      }
      if (req.method !== "POST") {
        req.resume();
        res.setHeader("allow", "POST");
        throw new HttpError("method_not_allowed", `${path} takes POST`);
      }
      const body = await readJson(req, res);
      checkModel(body, modelId);
      if (route === "embedding") await embeddings(body, res, loadHeaders);
      else if (route === "responses") await responses(body, req, res, loadHeaders);
      else await completions(route, body, req, res, loadHeaders);
    } catch (err) {
      if (!(err instanceof HttpError)) throw err;
      if (res.headersSent || res.destroyed) return;
      sendError(res, err, loadHeaders());
    }
  };

  /** The chat's prompt tokens; a chat the template refuses is the client's error (400), as vLLM answers it. */
  function renderChat(...args: Parameters<PromptCodec["chat"]>): number[] {
    try {
      return prompts.chat(...args);
    } catch (err) {
      if (err instanceof UnsupportedPrompt) throw new HttpError("bad_request", `the chat template cannot render this chat (${err.reason})`);
      throw err;
    }
  }

  async function embeddings(body: unknown, res: ServerResponse, loadHeaders: LoadHeaders): Promise<void> {
    const request = parse(embeddingSchema, body);
    const size = engine.model.embeddings?.size;
    if (size === undefined) throw new HttpError("bad_request", `The model \`${modelId}\` does not support the Embeddings API.`);
    if (request.dimensions != null && request.dimensions !== size) {
      throw new HttpError("bad_request", `'dimensions': this model's embeddings have ${size} dimensions`);
    }
    const input = request.input;
    const inputs: number[][] =
      typeof input === "string" ? [prompts.text(input)] : input.length > 0 && typeof input[0] === "number" ? [input as number[]] : (input as (string | number[])[]).map((x) => (typeof x === "string" ? prompts.text(x) : x));
    inputs.forEach((ids, i) => {
      checkIds(ids, prompts, inputs.length > 1 ? `input[${i}]` : "input");
      if (ids.length === 0) throw new HttpError("bad_request", `'input'${inputs.length > 1 ? `[${i}]` : ""}: empty input`);
      if (ids.length > MAX_EMBEDDING_TOKENS) throw new HttpError("bad_request", `'input'${inputs.length > 1 ? `[${i}]` : ""}: ${ids.length} tokens, at most ${MAX_EMBEDDING_TOKENS}`);
    });
    const data: { object: "embedding"; index: number; embedding: number[] | string }[] = [];
    let tokens = 0;
    for (const [index, ids] of inputs.entries()) {
      if (res.destroyed) return;
      const vector = await engine.embed(ids);
      tokens += ids.length;
      const embedding = request.encoding_format === "base64" ? Buffer.from(vector.buffer, vector.byteOffset, vector.byteLength).toString("base64") : Array.from(vector);
      data.push({ object: "embedding", index, embedding });
    }
    sendJson(res, 200, { object: "list", data, model: modelId, usage: { prompt_tokens: tokens, total_tokens: tokens } }, loadHeaders());
  }

  async function completions(route: "completion" | "chat", body: unknown, req: IncomingMessage, res: ServerResponse, loadHeaders: LoadHeaders): Promise<void> {
    let prompt: number[];
    let maxTokens: number;
    let r: z.infer<typeof completionSchema> | z.infer<typeof chatSchema>;
    if (route === "chat") {
      const chat = parse(chatSchema, body);
      r = chat;
      const continueFinalMessage = chat.continue_final_message === true;
      // vLLM's rules for the pair (its chat endpoint refuses the same bodies).
      if (continueFinalMessage && chat.add_generation_prompt !== false) throw new HttpError("bad_request", "continue_final_message needs add_generation_prompt: false");
      if (continueFinalMessage && chat.messages.at(-1)!.role !== "assistant") throw new HttpError("bad_request", "continue_final_message needs the last message to be the assistant's");
      if (!continueFinalMessage && chat.add_generation_prompt === false) throw new HttpError("bad_request", "add_generation_prompt: false is supported only with continue_final_message");
      prompt = renderChat(chat.messages, {
        ...(chat.tools && { tools: toolsAsPython(bodyTexts.get(body as object) ?? "", chat.tools) }),
        ...(chat.chat_template_kwargs && { kwargs: chat.chat_template_kwargs }),
        ...(continueFinalMessage && { continueFinalMessage }),
      });
      maxTokens = chat.max_completion_tokens ?? chat.max_tokens ?? restOfContext(engine, prompt.length);
    } else {
      const completion = parse(completionSchema, body);
      r = completion;
      prompt = promptIds(completion.prompt, prompts);
      maxTokens = completion.max_tokens ?? DEFAULT_MAX_TOKENS;
    }
    if (prompt.length === 0) throw new HttpError("bad_request", "'prompt': the prompt is empty");
    const tooLong = engine.check(prompt.length, maxTokens);
    if (tooLong) throw new HttpError("bad_request", tooLong);
    const asked = r.stop == null ? [] : typeof r.stop === "string" ? [r.stop] : r.stop;
    // A chat answer ends with its turn: tiny-lm's end-of-turn text, or the model's EOS (the engine's).
    const stop = route === "chat" && !r.ignore_eos ? [...asked, ...prompts.chatStop] : asked;

    const client = watchClient(req, res);
    const transfer = options.kvTransfer ? r.kv_transfer_params : undefined;
    // SGLang's legs by this replica's mode: a prefill holds the prompt's blocks under the room
    // and answers its first token; a decode reads them from the prefill's bootstrap.
    const sglangRole = options.kvTransfer && r.bootstrap_room != null ? options.kvTransfer.role : undefined;
    const room = sglangRole === "prefill" ? roomTransferId(r.bootstrap_room!) : undefined;
    if (room !== undefined) maxTokens = 1;
    const remote = remotePrefillOf(transfer) ?? (sglangRole === "decode" ? bootstrapOf(r) : undefined);
    if (remote) {
      // A decode: the prefill's blocks are read and cached here first; unread (the prefill is gone, or freed them), the prompt is computed here.
      const got = await readRemotePrefill(remote, options.kvTransfer!.signer, String(req.headers[Header.requestId] ?? "kv-transfer"), client.signal);
      const extra = blockExtra(req);
      const matches = got !== undefined && got.extra === extra && got.ids.length <= prompt.length && got.ids.every((t, i) => t === prompt[i]);
      if (matches) engine.importPrefix(got.ids, extra);
      else {
        const which = remote.protocol === "vllm" ? `${remote.requestId} from ${remote.engineId}` : `room ${remote.room} from ${remote.host}:${remote.port}`;
        options.kvTransfer!.log?.(`KV transfer ${which}: ${got === undefined ? "not read" : "blocks of another prompt"}; computing the prompt here`);
      }
    }
    const keepPrompt = transfer?.do_remote_decode === true;
    const generation = engine.generate({
      prompt,
      maxTokens,
      sampling: { temperature: r.temperature ?? 1, topP: r.top_p ?? 1, presencePenalty: r.presence_penalty ?? 0, frequencyPenalty: r.frequency_penalty ?? 0 },
      ...(r.seed != null && { seed: r.seed }),
      stop,
      ignoreEos: r.ignore_eos === true,
      signal: client.signal,
      extra: blockExtra(req),
      priority: requestPriority(req.headers, r.priority),
      ...(keepPrompt && { keepPrompt }),
      ...(room !== undefined && { keepAs: room }),
    });

    const id = `${route === "chat" ? "chatcmpl" : "cmpl"}-${randomUUID().replaceAll("-", "")}`;
    const created = nowS();
    const object = route === "chat" ? "chat.completion" : "text_completion";
    const usageOf = (result: GenerateResult) => ({
      prompt_tokens: result.promptTokens,
      completion_tokens: result.completionTokens,
      total_tokens: result.promptTokens + result.completionTokens,
      ...(options.promptTokensDetails && { prompt_tokens_details: { cached_tokens: result.cachedTokens } }),
    });

    try {
      if (!r.stream) {
        const { text, result } = await collected(generation);
        if (result.finishReason === "abort" || res.destroyed) return;
        const choice =
          route === "chat"
            ? { index: 0, message: { role: "assistant", content: text }, logprobs: null, finish_reason: result.finishReason }
            : { index: 0, text, logprobs: null, finish_reason: result.finishReason };
        const answer: Record<string, unknown> = { id, object, created, model: modelId, choices: [choice], usage: usageOf(result) };
        // A prefill's blocks for the decode replica (vLLM answers kv_transfer_params at the top level).
        if (keepPrompt) answer.kv_transfer_params = prefillAnswer(result.kept, options.kvTransfer!.self);
        sendJson(res, 200, answer, loadHeaders());
        return;
      }

      const includeUsage = r.stream_options?.include_usage === true;
      const chunkObject = route === "chat" ? "chat.completion.chunk" : "text_completion";
      const write = openEventStream(res, loadHeaders());
      const send = (choices: unknown[], usage?: unknown): Promise<void> => {
        const chunk: Record<string, unknown> = { id, object: chunkObject, created, model: modelId, choices };
        if (includeUsage) chunk.usage = usage ?? null;
        return write(`data: ${JSON.stringify(chunk)}\n\n`);
      };
      const piece = (text: string, finish: FinishReason | null) =>
        route === "chat"
          ? { index: 0, delta: text === "" && finish !== null ? {} : { content: text }, logprobs: null, finish_reason: finish }
          : { index: 0, text, logprobs: null, finish_reason: finish };

      if (route === "chat") await send([{ index: 0, delta: { role: "assistant", content: "" }, logprobs: null, finish_reason: null }]);
      const stream = req.headers[Header.migratable] === "1" ? { maxTokens, generated: 0, firstAt: 0, handover: new AbortController() } : undefined;
      if (stream) migratable.add(stream);
      let step = await generation.next();
      try {
        while (!step.done) {
          if (res.destroyed) break;
          if (stream?.handover.signal.aborted) {
            // Handed over (a drain): the edge continues from what it has; the generation stops (finally).
            res.end(`data: ${JSON.stringify(errorBody("stream_handover", "this replica is draining; the stream continues on another replica"))}\n\n`);
            return;
          }
          await send([piece(step.value, null)]);
          if (stream && ++stream.generated === 1) stream.firstAt = Date.now();
          step = await generation.next();
        }
      } finally {
        if (stream) migratable.delete(stream);
      }
      if (!step.done || res.destroyed) return;
      const result = step.value;
      if (result.finishReason === "abort") return;
      await send([piece("", result.finishReason)]);
      if (includeUsage) await send([], usageOf(result));
      res.end("data: [DONE]\n\n");
    } catch (err) {
      if (err instanceof RequestTooLong) throw new HttpError("bad_request", err.message);
      if (!res.headersSent) throw err;
      // A failure after the stream started: say so in the stream, then end it.
      const body = errorBody("internal_error", `generation failed: ${err instanceof Error ? err.message : String(err)}`);
      res.end(`data: ${JSON.stringify(body)}\n\ndata: [DONE]\n\n`);
    } finally {
      // Stops the generation if this function left it early (the client went away).
      client.release();
      await generation.return(undefined as never).catch(() => undefined);
    }
  }

  async function responses(body: unknown, req: IncomingMessage, res: ServerResponse, loadHeaders: LoadHeaders): Promise<void> {
    const r = parse(responsesRequest, body);
    const prompt = renderChat(responsesMessages(r));
    const maxTokens = r.max_output_tokens ?? restOfContext(engine, prompt.length);
    const tooLong = engine.check(prompt.length, maxTokens);
    if (tooLong) throw new HttpError("bad_request", tooLong);
    const client = watchClient(req, res);
    const generation = engine.generate({
      prompt,
      maxTokens,
      sampling: { temperature: r.temperature ?? 1, topP: r.top_p ?? 1, presencePenalty: 0, frequencyPenalty: 0 },
      ...(r.seed != null && { seed: r.seed }),
      // The answer ends with its turn, unless vLLM's ignore_eos asks for all of max_output_tokens.
      stop: r.ignore_eos ? [] : [...prompts.chatStop],
      ignoreEos: r.ignore_eos === true,
      signal: client.signal,
      extra: blockExtra(req),
      priority: requestPriority(req.headers, r.priority),
    });
    const usageOf = (result: GenerateResult) => responseUsage(result.promptTokens, result.completionTokens, options.promptTokensDetails ? result.cachedTokens : 0);
    const hex = randomUUID().replaceAll("-", "");
    const ids: ResponseIds = { id: `resp_${hex}`, messageId: `msg_${hex}`, createdAt: nowS(), model: modelId };
    try {
      if (!r.stream) {
        const { text, result } = await collected(generation);
        if (result.finishReason === "abort" || res.destroyed) return;
        const hit = result.finishReason === "length";
        sendJson(res, 200, responseObject(ids, r, { status: hit ? "incomplete" : "completed", text, maxOutputTokensHit: hit, usage: usageOf(result) }), loadHeaders());
        return;
      }
      const write = openEventStream(res, loadHeaders());
      const events = new ResponseEvents(ids);
      await write(events.opening(r));
      let text = "";
      let step = await generation.next();
      while (!step.done) {
        if (res.destroyed) return;
        text += step.value;
        await write(events.delta(step.value));
        step = await generation.next();
      }
      const result = step.value;
      if (result.finishReason === "abort" || res.destroyed) return;
      res.end(events.closing(r, text, usageOf(result), result.finishReason === "length"));
    } catch (err) {
      if (err instanceof RequestTooLong) throw new HttpError("bad_request", err.message);
      if (!res.headersSent) throw err;
      // OpenAI's stream error event, then the end.
      res.end(`event: error\ndata: ${JSON.stringify({ type: "error", code: "internal_error", message: `generation failed: ${err instanceof Error ? err.message : String(err)}`, param: null })}\n\n`);
    } finally {
      client.release();
      await generation.return(undefined as never).catch(() => undefined);
    }
  }

  return { handler, unadmitted, handOver };
}

/** A whole (not streamed) answer: every piece of text the generation yields, and how it ended. */
async function collected(generation: AsyncGenerator<string, GenerateResult, void>): Promise<{ text: string; result: GenerateResult }> {
  let text = "";
  let step = await generation.next();
  while (!step.done) {
    text += step.value;
    step = await generation.next();
  }
  return { text, result: step.value };
}
