/**
 * The request stage: the client's request as the path reads it, before any
 * replica is considered. Its target (the one normalised path, or a 400), the
 * deployment route it falls under, its id, its headers (their size, what a
 * dispatch passes on, what the client gets back) and its keys (model, session).
 */
import type { Deployment } from "../../config/deployment.ts";
import { EDGE_ONLY_HEADERS, HOP_BY_HOP_HEADERS, Header, type ErrorCode, type OpenAIEndpoint, MODEL_ID, PROTOCOL_HEADER_PREFIX, isEdgeOnlyHeader, isReplicaOperationalPath, operationalPathOf } from "../../protocol/index.ts";
import { HEX_BYTE } from "../../protocol/hex.ts";
import { TopLevelScanner, jsonOf, type ScanFailure, type ScanResult, type TopLevelValue } from "../../protocol/json-top-level.ts";
import type { UploadPace } from "./body.ts";

/**
 * The one path a proxied request is routed by and forwarded with, and the
 * replica URL it is sent to. Pure.
 *
 * Why this exists: routing once matched the decoded, un-normalised path
 * (`/llm/%2e%2e/x` starts with `/llm`) while dispatch rebuilt the path with
 * `new URL()`, which resolves the dot segment, and the target was a string
 * concatenation. `/llm/%2e%2e/aaa@host:port/secret` then became
 * `http://<replica>@host:port/secret`: an open proxy. Here the path is
 * normalised once (RFC 3986 §6.2.2: percent-encoded unreserved characters
 * decoded), a path with a dot segment in any spelling is refused outright (no
 * client that follows RFC 3986 sends one: it removes them before sending), and
 * the dispatch URL is checked to keep the replica's origin and base path.
 */
/** What the edge app's first middleware (app.ts) leaves on the context for every route. */
export type PathVariables = { target: { path: string; search: string } };

export type RequestTarget = { ok: true; path: string; search: string } | { ok: false; message: string };

const HEX = /^[0-9A-Fa-f]{2}$/;
const UNRESERVED = /^[A-Za-z0-9\-._~]$/;

/**
 * The normalised origin-form path and the raw query of a request URL (what
 * `Request.url` holds: absolute, `scheme://authority/path?query`). Refused:
 * a malformed percent escape, a backslash, and any dot segment (`.` or `..`)
 * however it is spelled (`%2e`, `.%2E`, `..;x`) and whatever separates it (`/`, or
 * an encoded `%2F` or `%5C` that a replica might decode into a separator).
 */
export function requestTarget(url: string): RequestTarget {
  const scheme = url.indexOf("://");
  const slash = scheme < 0 ? -1 : url.indexOf("/", scheme + 3);
  if (slash < 0) return { ok: true, path: "/", search: "" };
  let end = url.length;
  const hash = url.indexOf("#", slash);
  if (hash >= 0) end = hash;
  const q = url.indexOf("?", slash);
  const queryAt = q >= 0 && q < end ? q : end;
  const raw = url.slice(slash, queryAt);
  const search = url.slice(queryAt, end);
  const path = decodeUnreserved(raw);
  if (path === null) return { ok: false, message: "the request path has a malformed percent escape" };
  if (path.includes("\\")) return { ok: false, message: "the request path contains a backslash" };
  if (hasDotSegment(path)) return { ok: false, message: "the request path has a dot segment ('.' or '..'); send the path resolved" };
  return { ok: true, path, search: search === "?" ? "" : search };
}

/** Decodes %XX of unreserved characters (and only those); null on a malformed escape. */
function decodeUnreserved(raw: string): string | null {
  if (!raw.includes("%")) return raw;
  let out = "";
  let from = 0;
  for (let i = raw.indexOf("%"); i >= 0; i = raw.indexOf("%", i + 1)) {
    const hex = raw.slice(i + 1, i + 3);
    if (!HEX.test(hex)) return null;
    const ch = String.fromCharCode(parseInt(hex, 16));
    if (!UNRESERVED.test(ch)) continue;
    out += raw.slice(from, i) + ch;
    from = i + 3;
    i += 2;
  }
  return out + raw.slice(from);
}

/**
 * Whether any segment is "." or "..", splitting on "/" and on encoded slashes and
 * backslashes too, and ignoring a `;` path parameter (raw or encoded): servlet
 * containers read `/..;/x` as `/../x`.
 */
function hasDotSegment(path: string): boolean {
  if (!path.includes(".")) return false;
  for (const segment of path.split(/\/|%2[Ff]|%5[Cc]/)) {
    const bare = segment.split(/;|%3[Bb]/, 1)[0];
    if (bare === "." || bare === "..") return true;
  }
  return false;
}

/**
 * The path as the edge app sees it when a user's Hono app mounts it under
 * `mount` (`userApp.route("/ml", app)`): without that prefix, so route prefixes
 * and dispatch are the app's own. `mount` is "/" (or "") when not mounted.
 * Hono only runs the app's routes for paths under the mount, so a path
 * outside it is a bug and is returned as it is.
 */
export function unmountedPath(path: string, mount: string): string {
  const base = mount.replace(/\/+$/, "");
  if (base === "") return path;
  if (path === base) return "/";
  return path.startsWith(`${base}/`) ? path.slice(base.length) : path;
}

/** Longest-prefix routing from a request path to a deployment. Pure. */
export interface Routed<T> {
  target: T;
  prefix: string;
}

export class RouteTable<T> {
  readonly #entries: { prefix: string; target: T }[];

  constructor(entries: Iterable<{ prefix: string; target: T }>) {
    this.#entries = [...entries].sort((a, b) => b.prefix.length - a.prefix.length);
  }

  /** Matches whole path segments: "/hello" takes "/hello" and "/hello/x", not "/helloworld". */
  match(path: string): Routed<T> | undefined {
    for (const e of this.#entries) {
      if (e.prefix === "/" || path === e.prefix || path.startsWith(e.prefix + "/")) return e;
    }
    return undefined;
  }

  list(): { prefix: string; target: T }[] {
    return [...this.#entries];
  }
}

/** Path forwarded to the replica when the deployment strips its prefix. */
export function stripRoutePrefix(path: string, prefix: string): string {
  if (prefix === "/") return path;
  const rest = path.slice(prefix.length);
  return rest === "" ? "/" : rest;
}

/**
 * What the proxy reads from a request to route it beyond its path: the
 * multiplexed model and the session. Validated here, at the boundary; pure.
 */
/** Session ids: 1-256 visible ASCII characters (they travel in headers and name bindings). */
export const SESSION_ID = /^[\x21-\x7e]{1,256}$/;

export interface RequestKeys {
  model?: string;
  session?: string;
}

export type RequestKeysResult = { ok: true; keys: RequestKeys } | { ok: false; code: "bad_request" | "model_not_found"; message: string };

export function requestKeys(headers: Headers, deployment: Deployment): RequestKeysResult {
  const keys: RequestKeys = {};
  const mux = deployment.multiplexing;
  if (mux) {
    const named = headers.get(Header.model) ?? headers.get(Header.rayModel);
    const model = named ?? mux.defaultModel;
    if (model !== undefined) {
      if (!MODEL_ID.test(model)) {
        return { ok: false, code: "bad_request", message: `invalid model id in ${Header.model}/${Header.rayModel}: 1-128 of [A-Za-z0-9._:@/+-]` };
      }
      if (mux.models.length > 0 && !mux.models.includes(model)) {
        return { ok: false, code: "model_not_found", message: `deployment "${deployment.name}" does not serve model "${model}"; it serves: ${mux.models.join(", ")}` };
      }
      keys.model = model;
    }
  }
  if (deployment.sessionAffinity.enabled) {
    const session = headers.get(Header.clientSession);
    if (session !== null) {
      if (!SESSION_ID.test(session)) return { ok: false, code: "bad_request", message: `invalid ${Header.clientSession}: 1-256 visible ASCII characters` };
      keys.session = session;
    }
  }
  return { ok: true, keys };
}


/**
 * Headers a dispatch never takes from the client besides the protocol's edge-only
 * ones (src/protocol/headers.ts isEdgeOnlyHeader): `expect`, since the edge answers
 * the client's 100-continue itself, and a replica's interim 100 reaching the Worker
 * made workerd throw (a 500) after the replica had done the work.
 */
const DISPATCH_ONLY = ["expect"];
/** Protocol headers a replica sends for the proxy that clients do not need to see. */
const REPLICA_ONLY = [Header.protocol, Header.load, Header.rejected, Header.replicaTime];
/**
 * Request headers a dispatch never passes on: hop-by-hop ones, host, the
 * protocol's edge-only ones (every `x-switchyard-` header a client may not set), and
 * the session's binding token (the edge's business, not the replica's).
 */
const NOT_PASSED: ReadonlySet<string> = new Set([...HOP_BY_HOP_HEADERS, "host", ...DISPATCH_ONLY, ...EDGE_ONLY_HEADERS, Header.sessionToken]);
const notPassed = (name: string) => NOT_PASSED.has(name) || (name.startsWith(PROTOCOL_HEADER_PREFIX) && isEdgeOnlyHeader(name));

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** Deletes the headers a Connection header names (RFC 9110 §7.6.1). */
function dropConnectionNamed(h: Headers, named: string): void {
  for (const item of named.split(",")) {
    const n = item.trim();
    // Empty list items are ignored (RFC 9110 §5.6.1); invalid names cannot be present anyway.
    if (TOKEN.test(n)) h.delete(n);
  }
}

/**
 * Deletes the hop-by-hop headers and those the Connection header names. One delete
 * per name, present or not: in workerd walking `keys()` to delete only those present
 * cost more than the deletes (bench/README.md, "Where the proxy's CPU goes", and the
 * 2026-12-02 trial).
 */
function dropHopByHop(h: Headers): void {
  const named = h.get("connection");
  if (named) dropConnectionNamed(h, named);
  for (const n of HOP_BY_HOP_HEADERS) h.delete(n);
}

/** What one header counts against the header-size limit: its name, its value and 4 bytes of framing. */
function fieldBytes(name: string, value: string): number {
  return name.length + value.length + 4;
}

/** A request's headers read once at the boundary: their size, and what a dispatch passes on. */
export interface ReadRequestHeaders {
  /** Names, values and 4 bytes of framing per header: what the header-size limit counts. */
  bytes: number;
  /** The headers a dispatch sends on (a fresh object, the dispatch's to change). */
  passed: Headers;
}

/**
 * One walk of the request's headers, counting their size and noting which of the
 * names a dispatch must not pass on are present; then one copy, with only those
 * deleted. The walk is needed anyway for the size, so the ~22 deletes of names
 * that are almost never there are saved (bench/hot-path-steps/hot-path-steps.ts, "request
 * headers"). `dropAuthorization`: a private deployment's API key is the edge's
 * credential, not the replica's.
 */
export function readRequestHeaders(incoming: Headers, dropAuthorization: boolean): ReadRequestHeaders {
  let bytes = 0;
  let present: string[] | undefined;
  let connection: string | undefined;
  for (const [name, value] of incoming) {
    bytes += fieldBytes(name, value);
    if (notPassed(name) || (dropAuthorization && name === "authorization")) {
      (present ??= []).push(name);
      if (name === "connection") connection = value;
    }
  }
  const passed = new Headers(incoming);
  if (present) for (const name of present) passed.delete(name);
  if (connection) dropConnectionNamed(passed, connection);
  return { bytes, passed };
}

/** The header-size limit's count alone (a request served without dispatch). */
export function requestHeaderBytes(incoming: Headers): number {
  let bytes = 0;
  for (const [name, value] of incoming) bytes += fieldBytes(name, value);
  return bytes;
}

export function clientHeaders(upstream: Headers): Headers {
  const h = new Headers(upstream);
  scrubForClient(h);
  return h;
}

/**
 * clientHeaders in place: for the headers of a Response the edge has just built
 * from the replica's (the Response constructor copies them already, so a second
 * copy per request would be waste).
 */
export function scrubForClient(h: Headers): void {
  dropHopByHop(h);
  for (const n of REPLICA_ONLY) h.delete(n);
}

const REQUEST_ID = /^[A-Za-z0-9._:-]{1,128}$/;

/** Echoes a well-formed client request id, else makes one. */
export function requestIdFor(incoming: string | null): string {
  return incoming && REQUEST_ID.test(incoming) ? incoming : randomUuid();
}

/**
 * Version 4 UUIDs for request ids, as crypto.randomUUID makes them (RFC 9562 §5.4:
 * 122 random bits from the same CSPRNG), from random bytes drawn 256 ids at a time:
 * one runtime call per 256 requests instead of one per request. Not secrets: they
 * name a request in logs and headers.
 */
const IDS_PER_DRAW = 256;

// Drawn on first use: workerd refuses crypto calls at module scope (outside a request).
let pool: Uint8Array | undefined;
let at = IDS_PER_DRAW * 16;

export function randomUuid(): string {
  if (!pool || at >= pool.length) {
    pool = crypto.getRandomValues(new Uint8Array(IDS_PER_DRAW * 16));
    at = 0;
  }
  const b = pool;
  const i = at;
  at += 16;
  const h = HEX_BYTE;
  return (
    h[b[i]!]! + h[b[i + 1]!]! + h[b[i + 2]!]! + h[b[i + 3]!]! + "-" +
    h[b[i + 4]!]! + h[b[i + 5]!]! + "-" +
    // Version 4 in the high nibble of byte 6, variant 10 in the high bits of byte 8.
    h[(b[i + 6]! & 0x0f) | 0x40]! + h[b[i + 7]!]! + "-" +
    h[(b[i + 8]! & 0x3f) | 0x80]! + h[b[i + 9]!]! + "-" +
    h[b[i + 10]!]! + h[b[i + 11]!]! + h[b[i + 12]!]! + h[b[i + 13]!]! + h[b[i + 14]!]! + h[b[i + 15]!]!
  );
}

/** Whether a request for dispatched `path` may reach a replica: any but its operational routes, and those the deployment names (access.replicaRoutes). */
export function replicaRouteForwarded(deployment: Deployment, path: string): boolean {
  if (!isReplicaOperationalPath(path)) return true;
  const named = deployment.access.replicaRoutes;
  return named === true || (Array.isArray(named) && named.includes(operationalPathOf(path)));
}

/**
 * A body the edge holds (read to route it, or to key its prompt), read once: the bytes
 * as the client sent them, and the one JSON.parse of them that every later stage reads
 * (prompt keys, a stream's migration plan), made on first need. What is forwarded is
 * still the client's bytes (or a copy with members added).
 */
export class HeldBody {
  #json: { value: unknown } | undefined;
  constructor(readonly bytes: ArrayBuffer) {}

  get byteLength(): number {
    return this.bytes.byteLength;
  }

  /** The body as JSON; undefined when it is not JSON. Parsed at most once. */
  json(): unknown {
    this.#json ??= { value: jsonOf(this.bytes) };
    return this.#json.value;
  }
}

// --- A /v1 body's routing fields ------------------------------------------------------
//
// What the edge reads from an OpenAI-style request body to route it: the model (which
// picks the deployment and, with multiplexing, the replica), whether it streams, the
// session (`user`), the priority and the token budget. The body itself is forwarded
// byte for byte; the replica validates everything else. Pure.

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

/**
 * Fields of prefill/decode disaggregation that only a router sets: vLLM's
 * `kv_transfer_params` (with NixlConnector, `remote_host`/`remote_port` make the engine
 * connect out and read KV blocks by id) and SGLang's bootstrap fields (where its decode
 * server fetches KV from). A client that sets them could point an engine at any host or
 * at another request's blocks, so a body with one is refused, whichever endpoint it names.
 */
export const EDGE_OWNED_FIELDS = ["kv_transfer_params", "bootstrap_host", "bootstrap_port", "bootstrap_room"] as const;

const WANTED: Record<OpenAIEndpoint, ReadonlySet<string>> = {
  chat: new Set(["model", "stream", "user", "messages", "stream_options", "priority", "max_tokens", "max_completion_tokens", ...EDGE_OWNED_FIELDS]),
  completions: new Set(["model", "stream", "user", "prompt", "stream_options", "priority", "max_tokens", ...EDGE_OWNED_FIELDS]),
  embeddings: new Set(["model", "stream", "user", "input", "priority", ...EDGE_OWNED_FIELDS]),
  responses: new Set(["model", "stream", "user", "input", "priority", "max_output_tokens", ...EDGE_OWNED_FIELDS]),
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
  for (const name of EDGE_OWNED_FIELDS) {
    const v = f.get(name);
    if (v !== undefined && v.type !== "null") return refuse(`\`${name}\` is set by the router for prefill/decode disaggregation, never by a client`);
  }
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
