/**
 * What the edge reads from an OpenAI-style request body to route it: the model
 * (which picks the deployment and, with multiplexing, the replica), whether it
 * streams, and the session (`user`). The body itself is forwarded byte for byte;
 * the replica validates everything else. Pure.
 */
import type { Deployment } from "../../config/deployment.ts";
import type { ErrorCode } from "../../protocol/index.ts";
import { TopLevelScanner, type ScanFailure, type ScanResult, type TopLevelValue } from "../../protocol/json-top-level.ts";
import { SESSION_ID } from "../serve/request.ts";
import type { UploadPace } from "../serve/body.ts";
import type { OpenAIEndpoint } from "../../protocol/index.ts";

/** Where the OpenAI routes are mounted: the paths' common prefix. */
export const OPENAI_PREFIX = "/v1";

export interface OpenAIRouting {
  model: string;
  stream: boolean;
  /**
   * A streamed answer carries token usage: chat and completions streams do only when
   * the client sent `stream_options.include_usage: true`, Responses streams always do
   * (the `response.completed` event). The edge reads a stream's tail only then, or asks
   * for usage itself (a token-limited key: openai.ts).
   */
  streamUsage: boolean;
  /** The body's `stream_options` object, parsed (at most MAX_STREAM_OPTIONS_BYTES), where it sent one. */
  streamOptions?: Record<string, unknown>;
  /** Session key from the body's `user` (percent-encoded when it is not a plain session id). */
  user?: string;
  /** The body's `priority` (an integer; admission caps it, docs/admission.md). */
  priority?: number;
  /**
   * The answer's token budget where the body sets one (`max_tokens`, chat's
   * `max_completion_tokens`, Responses' `max_output_tokens`): admission's fair order
   * weighs a request by its tokens (admit.ts, tokenCost). Read only: the replica validates it.
   */
  maxTokens?: number;
}

export type OpenAIRoutingResult = { ok: true; routing: OpenAIRouting } | { ok: false; code: ErrorCode; message: string };

/** The one field each endpoint cannot do without, and the JSON types it may have. */
const REQUIRED: Record<OpenAIEndpoint, { field: string; types: readonly TopLevelValue["type"][]; nonEmpty?: boolean }> = {
  chat: { field: "messages", types: ["array"], nonEmpty: true },
  completions: { field: "prompt", types: ["string", "array"] },
  embeddings: { field: "input", types: ["string", "array"] },
  responses: { field: "input", types: ["string", "array"] },
};

/** Longest `model` and `user` accepted, characters. */
const MAX_NAME = 256;
/** Largest `stream_options` object read (OpenAI's has one flag, vLLM's two). */
export const MAX_STREAM_OPTIONS_BYTES = 1024;

const WANTED: Record<OpenAIEndpoint, ReadonlySet<string>> = {
  chat: new Set(["model", "stream", "user", "messages", "stream_options", "priority", "max_tokens", "max_completion_tokens"]),
  completions: new Set(["model", "stream", "user", "prompt", "stream_options", "priority", "max_tokens"]),
  embeddings: new Set(["model", "stream", "user", "input", "priority"]),
  responses: new Set(["model", "stream", "user", "input", "priority", "max_output_tokens"]),
};

const FAILURES: Record<ScanFailure, string> = {
  invalid_utf8: "request body is not valid JSON (it is not UTF-8)",
  invalid_json: "request body is not valid JSON",
  not_an_object: "request body must be a JSON object",
  too_deep: "request body nests too deeply",
};

const refuse = (message: string): OpenAIRoutingResult => ({ ok: false, code: "bad_request", message });
const typeName = (v: TopLevelValue | undefined) => (v === undefined ? "nothing" : v.type === "true" || v.type === "false" ? "boolean" : v.type);

/**
 * Checks a request body (bytes as received) for `endpoint` and reads what
 * routing needs, without building the document: one scan over the bytes
 * (json-top-level.ts) checks that it is UTF-8 JSON and an object, and picks
 * out `model`, `stream`, `user`, `priority` and the endpoint's required field. The replica
 * validates everything else (the shape of each message, token ids). The route
 * itself scans each chunk as it arrives (openaiBodyScanner, openaiRouting), so a
 * large body's scan is spread over its upload instead of one block at the end.
 */
export function parseOpenAIBody(endpoint: OpenAIEndpoint, bytes: ArrayBuffer): OpenAIRoutingResult {
  const scanner = openaiBodyScanner(endpoint);
  const view = new Uint8Array(bytes);
  scanner.push(view);
  return openaiRouting(endpoint, scanner.end(), view);
}

/** A scanner for an `endpoint` body, fed chunk by chunk as the body arrives (what the route does). */
export function openaiBodyScanner(endpoint: OpenAIEndpoint): TopLevelScanner {
  return new TopLevelScanner(WANTED[endpoint], { maxStringBytes: 6 * MAX_NAME });
}

/** What routing needs from a scanned body (`bytes`: the body scanned), or the refusal (400) naming the field. */
export function openaiRouting(endpoint: OpenAIEndpoint, scan: ScanResult, bytes: Uint8Array): OpenAIRoutingResult {
  if (!scan.ok) return refuse(FAILURES[scan.reason]);
  const f = scan.fields;
  const model = f.get("model");
  if (model?.type !== "string") return refuse(`\`model\`: expected a string, got ${typeName(model)}`);
  if (model.value === undefined || model.value.length > MAX_NAME) return refuse(`\`model\`: at most ${MAX_NAME} characters`);
  if (model.value.length === 0) return refuse("`model` must not be empty");
  const stream = f.get("stream");
  if (stream !== undefined && stream.type !== "true" && stream.type !== "false") return refuse(`\`stream\`: expected a boolean, got ${typeName(stream)}`);
  if (endpoint === "embeddings" && stream?.type === "true") return refuse("`stream`: embeddings do not stream");
  const required = REQUIRED[endpoint];
  const value = f.get(required.field);
  if (value === undefined || !required.types.includes(value.type)) {
    return refuse(`\`${required.field}\`: expected ${required.types.join(" or ")}, got ${typeName(value)}`);
  }
  if (required.nonEmpty && value.type === "array" && value.length === 0) return refuse(`\`${required.field}\` must not be empty`);
  const streams = stream?.type === "true";
  const options = f.get("stream_options");
  let streamOptions: Record<string, unknown> | undefined;
  if (options?.type === "object") {
    if (options.end - options.start > MAX_STREAM_OPTIONS_BYTES) return refuse(`\`stream_options\`: at most ${MAX_STREAM_OPTIONS_BYTES} bytes`);
    // The scan checked the whole body: these bytes are a JSON object.
    streamOptions = JSON.parse(new TextDecoder().decode(bytes.subarray(options.start, options.end))) as Record<string, unknown>;
  } else if (options !== undefined && options.type !== "null") return refuse(`\`stream_options\`: expected an object, got ${typeName(options)}`);
  const routing: OpenAIRouting = { model: model.value, stream: streams, streamUsage: streams && (endpoint === "responses" || streamOptions?.include_usage === true) };
  if (streamOptions !== undefined) routing.streamOptions = streamOptions;
  const user = f.get("user");
  if (user !== undefined && user.type !== "string") return refuse(`\`user\`: expected a string, got ${typeName(user)}`);
  if (user !== undefined) {
    if (user.value === undefined || user.value.length > MAX_NAME) return refuse(`\`user\`: at most ${MAX_NAME} characters`);
    if (user.value !== "") {
      // Session ids travel in a header: anything beyond visible ASCII is percent-encoded.
      const key = SESSION_ID.test(user.value) ? user.value : encodeURIComponent(user.value);
      if (!SESSION_ID.test(key)) return refuse("`user` is too long to serve as a session key (at most 256 bytes once percent-encoded)");
      routing.user = key;
    }
  }
  const priority = f.get("priority");
  if (priority !== undefined) {
    if (priority.type !== "number" || !Number.isSafeInteger(priority.value)) return refuse(`\`priority\`: expected an integer, got ${typeName(priority)}`);
    routing.priority = priority.value!;
  }
  // The first budget the body sets (chat: the newer max_completion_tokens wins, as in OpenAI's API).
  for (const name of ["max_completion_tokens", "max_tokens", "max_output_tokens"]) {
    const v = f.get(name);
    if (v?.type === "number" && Number.isSafeInteger(v.value) && v.value! >= 0) {
      routing.maxTokens = v.value!;
      break;
    }
  }
  return { ok: true, routing };
}

/** Model name → the deployment serving it on /v1 (names are unique, checkDeployments enforces it). */
export function openaiModelTable(deployments: readonly Deployment[]): Map<string, Deployment> {
  const table = new Map<string, Deployment>();
  for (const d of deployments) for (const m of d.openai?.models ?? []) table.set(m, d);
  return table;
}

/** The largest body any /v1 deployment accepts: the bound for reading a body before its model is known. */
export function openaiBodyLimit(deployments: readonly Deployment[]): number {
  let limit = 0;
  for (const d of deployments) if (d.openai) limit = Math.max(limit, d.limits.maxRequestBodyBytes);
  return limit;
}

/** The strictest upload pace among the /v1 deployments: a body is read before its model (and so its deployment) is known. */
export function openaiUploadPace(deployments: readonly Deployment[]): UploadPace {
  let pace: UploadPace | undefined;
  for (const d of deployments) {
    if (!d.openai) continue;
    const { uploadIdleTimeoutMs: idleMs, uploadMinBytesPerSecond: minBytesPerSecond } = d.limits;
    pace = pace ? { idleMs: Math.min(pace.idleMs, idleMs), minBytesPerSecond: Math.max(pace.minBytesPerSecond, minBytesPerSecond) } : { idleMs, minBytesPerSecond };
  }
  return pace ?? { idleMs: 10_000, minBytesPerSecond: 1024 };
}
