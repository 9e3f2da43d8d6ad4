/**
 * Request bodies at the edge: the declared Content-Length, checked once the
 * same way everywhere; bounded reads for requests the edge must read itself
 * (OpenAI routing, models run in the Worker), at the deployment's upload pace
 * (upload-pace.ts); the body of a dispatch, held when small (so it can be replayed
 * on another replica) and streamed at pace otherwise; and draining the body of a
 * request the edge refused without reading it.
 */
import type { Deployment } from "../config/deployment.ts";
import { errorResponse } from "../protocol/index.ts";
import { TIMED_OUT, pacedBody, uploadBudgetMs, withinMs, type UploadPace } from "./upload-pace.ts";

/** The declared Content-Length: undefined when absent, null when malformed. */
export function declaredLength(headers: Headers): number | undefined | null {
  const declared = headers.get("content-length");
  if (declared === null) return undefined;
  return /^\d{1,15}$/.test(declared) ? Number(declared) : null;
}

/**
 * The declared size checked against `limit`: `{ size }` (undefined when the
 * body is unsized), or the JSON refusal to send (400 malformed, 413 too large).
 */
export function checkDeclaredLength(headers: Headers, limit: number, requestId: string): { size: number | undefined } | Response {
  const size = declaredLength(headers);
  if (size === null) return errorResponse("bad_request", "invalid Content-Length header", { requestId });
  if (size !== undefined && size > limit) return errorResponse("payload_too_large", `request body of ${size} bytes exceeds ${limit}`, { requestId });
  return { size };
}

/** A body read into memory, or why not. */
export type BoundedBody = ArrayBuffer | "too_large" | "too_slow";

/**
 * Reads a request body into memory, up to `limit` bytes, at the upload pace:
 * "too_large" when it is (or declares itself) larger, after cancelling the
 * rest; "too_slow" when it does not arrive in time (upload-pace.ts). A sized
 * body within the limit is read in one native call, bounded by the time its
 * size may take; a chunked one is counted and paced as it arrives.
 */
export async function readBoundedBody(req: Request, limit: number, pace: UploadPace): Promise<BoundedBody> {
  const size = declaredLength(req.headers);
  if (typeof size === "number") {
    if (size > limit) return "too_large";
    const read = await withinMs(req.arrayBuffer(), uploadBudgetMs(size, pace));
    return read === TIMED_OUT ? "too_slow" : read;
  }
  if (!req.body) return new ArrayBuffer(0);
  const paced = pacedBody(req.body, limit, pace);
  const chunks: Uint8Array[] = [];
  let seen = 0;
  const reader = paced.body.getReader();
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      seen += value.byteLength;
      chunks.push(value);
    }
  } catch {
    if (paced.tooSlow()) return "too_slow";
    if (paced.overLimit()) return "too_large";
    throw new Error("the request body could not be read");
  }
  const out = new Uint8Array(seen);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out.buffer;
}

/** The answer to a body that did not arrive at the upload pace (408). */
export function uploadTooSlow(requestId: string): Response {
  return errorResponse("request_timeout", "the request body arrived too slowly", { requestId });
}

/** The pace a deployment asks of uploads (its limits). */
export function uploadPaceOf(limits: { uploadIdleTimeoutMs: number; uploadMinBytesPerSecond: number }): UploadPace {
  return { idleMs: limits.uploadIdleTimeoutMs, minBytesPerSecond: limits.uploadMinBytesPerSecond };
}

/**
 * Reads and drops the body of a request the edge refused without reading it
 * (bad header, unknown route or model, no key, rate limit, queue full). If the
 * Worker answers with the body unread, workerd cannot reuse the connection and
 * closes it while the client may still be sending, which resets it: the client
 * then sees ECONNRESET instead of our JSON error (measured: 9 of 400 refusals of
 * a 144 KB body lost that way). Bounded by the deployment's body limit; a
 * larger or unsized body is left alone (its connection is lost, as it would be
 * anywhere).
 */
export async function drainUnreadBody(req: Request, limitBytes: number): Promise<void> {
  if (!req.body || req.bodyUsed) return;
  const size = declaredLength(req.headers);
  if (typeof size !== "number" || size > limitBytes) return;
  await req.arrayBuffer().catch(() => undefined);
}

/** A dispatch's request body, ready to send (to one replica, or to several in turn when replayable). */
export interface DispatchBody {
  body: ArrayBuffer | ReadableStream<Uint8Array> | null;
  /** The body can be sent again (no body, or held in memory). */
  replayable: boolean;
  /** Set when a streamed body outgrew the limit mid-flight. */
  overLimit: () => boolean;
  /** Set when a streamed body stopped arriving (upload-pace.ts). */
  tooSlow: () => boolean;
}

const never = () => false;

/** A body the edge already read (the /v1 routes read it to route): replayable as it is. */
export function heldBody(body: ArrayBuffer): DispatchBody {
  return { body, replayable: true, overLimit: never, tooSlow: never };
}

/**
 * The body of a path-routed request, or the refusal to send (400, 408, 413): small
 * sized bodies (up to `replayableBodyBytes`) are held, in one native read bounded in
 * time; larger or chunked ones stream to the replica as they arrive, counted against
 * the limit and paced, so a client that stops sending cannot hold a replica's slot.
 */
export function dispatchBody(req: Request, limits: Deployment["limits"], requestId: string): DispatchBody | Promise<DispatchBody | Response> {
  // No body (none, or GET and HEAD: the usual case) is answered with no promise.
  if (!req.body || req.method === "GET" || req.method === "HEAD") return NO_BODY;
  return bodyToDispatch(req, req.body, limits, requestId);
}

/** A dispatch without a body (made once: nothing in it changes). */
const NO_BODY: DispatchBody = Object.freeze({ body: null, replayable: true, overLimit: never, tooSlow: never });

async function bodyToDispatch(req: Request, source: ReadableStream<Uint8Array>, limits: Deployment["limits"], requestId: string): Promise<DispatchBody | Response> {
  const { maxRequestBodyBytes, replayableBodyBytes } = limits;
  const declared = checkDeclaredLength(req.headers, maxRequestBodyBytes, requestId);
  if (declared instanceof Response) return declared;
  const { size } = declared;
  const pace = uploadPaceOf(limits);
  if (size !== undefined && size <= replayableBodyBytes) {
    const held = await readBoundedBody(req, replayableBodyBytes, pace);
    if (held === "too_slow") return uploadTooSlow(requestId);
    if (held === "too_large") return errorResponse("payload_too_large", `request body exceeds ${maxRequestBodyBytes} bytes`, { requestId });
    return heldBody(held);
  }
  const paced = pacedBody(source, maxRequestBodyBytes, pace);
  if (size === undefined) return { body: paced.body, replayable: false, overLimit: paced.overLimit, tooSlow: paced.tooSlow };
  // A sized body keeps its Content-Length on the way to the replica.
  const fixed = new FixedLengthStream(size);
  paced.body.pipeTo(fixed.writable).catch(() => undefined);
  return { body: fixed.readable, replayable: false, overLimit: paced.overLimit, tooSlow: paced.tooSlow };
}
