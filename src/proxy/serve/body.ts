/**
 * Request bodies at the edge: the declared Content-Length, checked once the
 * same way everywhere; every body read at the deployment's upload pace (the
 * PacedReader, at the end of this file), chunk by chunk, sized or chunked, on every route; bodies
 * read before the client is authenticated charged to that client's share of the
 * isolate (BodyHolds); the body of a dispatch, held when it is small (so it can be
 * replayed on another replica), and otherwise held until its first bytes prove
 * the pace, then streamed; and draining the body of a request the edge refused
 * without reading it.
 */
import type { Deployment } from "../../config/deployment.ts";
import { bodySha256, errorResponse } from "../../protocol/index.ts";

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

/**
 * How much body one client, and all clients together, may have in flight in one
 * isolate before anything authenticated them (public deployments, the /v1 routes'
 * routing read, control messages before their signature). An isolate has 128 MB
 * on Cloudflare: before this bound, ten connections sending 10 MiB each and
 * stopping just short of the end raised workerd's RSS by ~100 MiB. The client is
 * its address (`cf-connecting-ip`, which Cloudflare sets, and the local stack's
 * workerd sets to the loopback address it listens on). A body alone is always
 * allowed up to its deployment's body limit: the bounds are on bodies together.
 */
export interface HoldLimits {
  clientBodies: number;
  clientBytes: number;
  isolateBodies: number;
  isolateBytes: number;
}

export const UNAUTHENTICATED_HOLD_LIMITS: HoldLimits = {
  clientBodies: 64,
  clientBytes: 16 * 1024 * 1024,
  isolateBodies: 1024,
  isolateBytes: 64 * 1024 * 1024,
};

/** Why a body could not be held: this client's share, or the isolate's, is used up. */
export type HoldRefusal = "client_holds" | "isolate_holds";

/** One body's share of the ledger; `close` gives it all back. */
export interface BodyHold {
  /** Charges `bytes` more; a refusal when that would go past a bound (nothing is charged then). */
  take(bytes: number): HoldRefusal | null;
  close(): void;
}

/** The isolate's ledger of unauthenticated bodies, per client and in all. Pure (no I/O, no clock). */
export class BodyHolds {
  readonly #limits: HoldLimits;
  readonly #clients = new Map<string, { bodies: number; bytes: number }>();
  bodies = 0;
  bytes = 0;

  constructor(limits: HoldLimits = UNAUTHENTICATED_HOLD_LIMITS) {
    this.#limits = limits;
  }

  /** How many clients hold a body now: an entry lives only while its client holds one (no growth per address seen). */
  get clients(): number {
    return this.#clients.size;
  }

  /** What `client` holds now (tests, observability). */
  heldBy(client: string): { bodies: number; bytes: number } {
    return { ...(this.#clients.get(client) ?? { bodies: 0, bytes: 0 }) };
  }

  open(client: string): BodyHold | HoldRefusal {
    const limits = this.#limits;
    let mine = this.#clients.get(client);
    if ((mine?.bodies ?? 0) >= limits.clientBodies) return "client_holds";
    if (this.bodies >= limits.isolateBodies) return "isolate_holds";
    if (!mine) this.#clients.set(client, (mine = { bodies: 0, bytes: 0 }));
    const account = mine;
    account.bodies++;
    this.bodies++;
    let held = 0;
    let open = true;
    return {
      take: (bytes) => {
        // One body alone is bounded by its deployment's body limit; the bounds are on bodies together.
        if (account.bytes > held && account.bytes + bytes > limits.clientBytes) return "client_holds";
        if (this.bytes > held && this.bytes + bytes > limits.isolateBytes) return "isolate_holds";
        account.bytes += bytes;
        this.bytes += bytes;
        held += bytes;
        return null;
      },
      close: () => {
        if (!open) return;
        open = false;
        account.bodies--;
        account.bytes -= held;
        this.bodies--;
        this.bytes -= held;
        if (account.bodies === 0) this.#clients.delete(client);
      },
    };
  }
}

/** This isolate's ledger (module scope: one per isolate). */
export const unauthenticatedHolds = new BodyHolds();

/** A client known only by its address, as per-client budgets name it: `ip:` and cf-connecting-ip. */
export function clientOf(headers: Headers): string {
  return `ip:${headers.get("cf-connecting-ip") ?? ""}`;
}

/** Why a body was not read. */
export type BodyFailure = "too_large" | "too_slow" | "aborted" | HoldRefusal;

/** A body read into memory, or why not. */
export type BoundedBody = ArrayBuffer | BodyFailure;

/** The JSON refusal for a body that failed (`limit`: the size it may not pass). */
export function bodyRefusal(failure: BodyFailure, limit: number, requestId: string): Response {
  switch (failure) {
    case "too_large":
      return errorResponse("payload_too_large", `request body exceeds ${limit} bytes`, { requestId });
    case "too_slow":
      return uploadTooSlow(requestId);
    case "aborted":
      // Nobody reads this (the client has gone); it names the request in the edge's own log line.
      return errorResponse("bad_request", "the request body ended early: the client's connection was lost", { requestId });
    case "client_holds":
      return errorResponse("rate_limited", "this client has too many request bodies in flight here before authentication; retry shortly", { requestId, retryAfterSeconds: 1 });
    case "isolate_holds":
      return errorResponse("queue_full", "too many request bodies in flight here before authentication; retry shortly", { requestId, retryAfterSeconds: 1 });
  }
}

/** What reading the first part of a body gave: its chunks, and whether that was all of it. */
interface FirstChunks {
  chunks: Uint8Array[];
  bytes: number;
  ended: boolean;
}

/**
 * Reads `reader` until its end or until more than `upTo` bytes have arrived,
 * failing past `limit` bytes. A body whose size is declared charges `hold` that
 * (up to `upTo`) before a byte is read, so a refusal costs the client no upload;
 * a chunked one charges each chunk as it arrives.
 */
async function readFirst(reader: PacedReader, o: { upTo: number; limit: number; size: number | undefined; hold: BodyHold | undefined }): Promise<FirstChunks | BodyFailure> {
  const { hold } = o;
  if (hold && o.size !== undefined) {
    const refused = hold.take(Math.min(o.size, o.upTo));
    if (refused) {
      await reader.cancel("held too much");
      return refused;
    }
  }
  const chunks: Uint8Array[] = [];
  let bytes = 0;
  while (bytes <= o.upTo) {
    const read = await reader.read();
    if (read === null) return { chunks, bytes, ended: true };
    if (typeof read === "string") return read;
    bytes += read.byteLength;
    if (bytes > o.limit) {
      await reader.cancel("too large");
      return "too_large";
    }
    if (hold && o.size === undefined) {
      const refused = hold.take(read.byteLength);
      if (refused) {
        await reader.cancel("held too much");
        return refused;
      }
    }
    chunks.push(read);
  }
  return { chunks, bytes, ended: false };
}

function joined(chunks: readonly Uint8Array[], bytes: number): ArrayBuffer {
  const only = chunks.length === 1 ? chunks[0]! : undefined;
  if (only && only.byteOffset === 0 && only.byteLength === only.buffer.byteLength) return only.buffer as ArrayBuffer;
  const out = new Uint8Array(bytes);
  let at = 0;
  for (const c of chunks) {
    out.set(c, at);
    at += c.byteLength;
  }
  return out.buffer;
}

/** Opens `client`'s hold, or says why not; no client: an authenticated body, charged to nobody. */
function openHold(client: string | undefined): BodyHold | HoldRefusal | undefined {
  return client === undefined ? undefined : unauthenticatedHolds.open(client);
}

/**
 * Reads a request body into memory, up to `limit` bytes, at the upload pace,
 * chunk by chunk: "too_large" when it is (or declares itself) larger, after
 * cancelling the rest; "too_slow" when the next bytes do not arrive in time;
 * "aborted" when the client's connection went. With `client` (the body is read
 * before its sender is authenticated), it is charged to that client's hold while
 * it arrives, and refused when the hold is full.
 */
export async function readBoundedBody(req: Request, limit: number, pace: UploadPace, client?: string): Promise<BoundedBody> {
  const size = declaredLength(req.headers);
  if (typeof size === "number" && size > limit) return "too_large";
  if (!req.body) return new ArrayBuffer(0);
  const hold = openHold(client);
  if (typeof hold === "string") return hold;
  try {
    const first = await readFirst(new PacedReader(req.body, pace), { upTo: limit, limit, size: size ?? undefined, hold });
    return typeof first === "string" ? first : joined(first.chunks, first.bytes);
  } finally {
    hold?.close();
  }
}

/** The answer to a body that did not arrive at the upload pace (408). */
export function uploadTooSlow(requestId: string): Response {
  return errorResponse("request_timeout", "the request body arrived too slowly", { requestId });
}

/** The pace a deployment asks of uploads (its limits). */
export function uploadPaceOf(limits: { uploadIdleTimeoutMs: number; uploadMinBytesPerSecond: number }): UploadPace {
  return { idleMs: limits.uploadIdleTimeoutMs, minBytesPerSecond: limits.uploadMinBytesPerSecond };
}

/** The pace of bodies no deployment sets one for (control messages, requests to no route): the defaults. */
export const DEFAULT_UPLOAD_PACE: UploadPace = { idleMs: 10_000, minBytesPerSecond: 1024 };

/**
 * Reads and drops the body of a request the edge refused without reading it
 * (bad header, unknown route or model, no key, rate limit, queue full). If the
 * Worker answers with the body unread, workerd cannot reuse the connection and
 * closes it while the client may still be sending, which resets it: the client
 * then sees ECONNRESET instead of our JSON error (measured: 9 of 400 refusals of
 * a 144 KB body lost that way). Bounded by `limitBytes` and by the upload pace;
 * nothing is kept. A larger or unsized body is left alone (its connection is
 * lost, as it would be anywhere).
 */
export async function drainUnreadBody(req: Request, limitBytes: number, pace: UploadPace = DEFAULT_UPLOAD_PACE): Promise<void> {
  if (!req.body || req.bodyUsed) return;
  const size = declaredLength(req.headers);
  if (typeof size !== "number" || size > limitBytes) return;
  const reader = new PacedReader(req.body, pace);
  for (;;) {
    const read = await reader.read();
    if (read === null || typeof read === "string") return;
  }
}

/** A dispatch's request body, ready to send (to one replica, or to several in turn when replayable). */
export interface DispatchBody {
  body: ArrayBuffer | ReadableStream<Uint8Array> | null;
  /** The body can be sent again (no body, or held in memory). */
  replayable: boolean;
  /** Set when a streamed body outgrew the limit mid-flight. */
  overLimit: () => boolean;
  /** Set when a streamed body stopped arriving (serve/body.ts). */
  tooSlow: () => boolean;
  /** Set when the client's connection went away while a streamed body was passed on. */
  aborted: () => boolean;
  /** Gives back what the body holds (a duplex upload's place) when no replica took it; idempotent. */
  release: () => void;
}

const never = () => false;
const nothing = (): void => undefined;

/** A body the edge already read (the /v1 routes read it to route): replayable as it is. */
export function heldBody(body: ArrayBuffer): DispatchBody {
  return { body, replayable: true, overLimit: never, tooSlow: never, aborted: never, release: nothing };
}

/** Who sends a body: the client a budget is kept for (API key, else address), and whether anything authenticated it. */
export interface Uploader {
  client: string;
  authenticated: boolean;
}

/**
 * The body of a path-routed request, or the refusal to send (400, 408, 413, 429).
 * Unless the deployment streams uploads duplex, its first `replayableBodyBytes`
 * (at least MIN_UPLOAD_PROOF_BYTES) are read here, at the upload pace, before any
 * replica is asked: a body that ends within them is held and replayable; a longer
 * one then streams to the replica, paced and counted against the limit. A client
 * that sends slowly is cut here, before it holds a replica's slot (16 connections
 * dripping a byte every 2 s kept a deployment's 8 slots full while each was given
 * the pace's grace). What an unauthenticated client's body holds here is charged
 * to its hold. With `duplexUploads`, the body streams from its first byte, and the
 * client's duplex uploads in flight are capped instead.
 */
export function dispatchBody(req: Request, deployment: Deployment, requestId: string, uploader: Uploader): DispatchBody | Promise<DispatchBody | Response> {
  // No body (none, or GET and HEAD: the usual case) is answered with no promise.
  if (!req.body || req.method === "GET" || req.method === "HEAD") return NO_BODY;
  return bodyToDispatch(req, req.body, deployment, requestId, uploader);
}

/** A dispatch's body as the body stage hands it on (prepareBody). */
export interface PreparedBody extends DispatchBody {
  /** The request may run again after a lost connection (safeToRepeat). */
  safeToRepeat: boolean;
  /** The digest a dispatch signature covers: of a body held here, once per request; "" for a streamed one or none. */
  sha256: string;
}

/**
 * The body stage: `req`'s body as its dispatch will send it, or the refusal of it.
 * `held`: the body a route already read (OpenAI routes): inference has no side effects
 * worth more than a wasted prefill, so it may always run again.
 */
export async function prepareBody(req: Request, deployment: Deployment, requestId: string, uploader: Uploader, held?: ArrayBuffer): Promise<PreparedBody | Response> {
  let body: DispatchBody;
  let repeat: boolean;
  if (held !== undefined) {
    body = heldBody(held);
    repeat = true;
  } else {
    // A public deployment's body is read before anything authenticated its sender: charged to the client's hold.
    const pending = dispatchBody(req, deployment, requestId, uploader);
    const read = pending instanceof Promise ? await pending : pending;
    if (read instanceof Response) return read;
    body = read;
    repeat = read.replayable && safeToRepeat(req.method, req.headers, deployment.policy.idempotent);
  }
  // A body held here is covered by the signature (its digest); a streamed one cannot be.
  const sha256 = body.body instanceof ArrayBuffer && body.body.byteLength > 0 ? await bodySha256(body.body) : "";
  return { ...body, safeToRepeat: repeat, sha256 };
}

const IDEMPOTENT_METHODS = new Set(["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]);

/**
 * Whether a request may run again after its connection to a replica was lost.
 * workerd gives the same error ("Network connection lost.") for a refused
 * connection and for one lost after the request was sent, so the proxy cannot
 * tell whether the replica accepted it.
 */
export function safeToRepeat(method: string, headers: Headers, deploymentIdempotent: boolean): boolean {
  return deploymentIdempotent || IDEMPOTENT_METHODS.has(method) || headers.has("idempotency-key");
}

/** A dispatch without a body (made once: nothing in it changes). */
const NO_BODY: DispatchBody = Object.freeze({ body: null, replayable: true, overLimit: never, tooSlow: never, aborted: never, release: nothing });

/** The least of a streamed body the edge reads before asking a replica (when `replayableBodyBytes` is set lower). */
export const MIN_UPLOAD_PROOF_BYTES = 4 * 1024;

/** Duplex uploads in flight, per deployment and client, in this isolate. */
const duplexInFlight = new Map<string, number>();

/** A place for one more duplex upload of `client`, with its release; null when the client has `max` already. */
export function openDuplexUpload(deployment: string, client: string, max: number): (() => void) | null {
  const key = `${deployment}\n${client}`;
  const n = duplexInFlight.get(key) ?? 0;
  if (n >= max) return null;
  duplexInFlight.set(key, n + 1);
  let open = true;
  return () => {
    if (!open) return;
    open = false;
    const left = (duplexInFlight.get(key) ?? 1) - 1;
    if (left <= 0) duplexInFlight.delete(key);
    else duplexInFlight.set(key, left);
  };
}

async function bodyToDispatch(req: Request, source: ReadableStream<Uint8Array>, deployment: Deployment, requestId: string, uploader: Uploader): Promise<DispatchBody | Response> {
  const { limits } = deployment;
  const { maxRequestBodyBytes, replayableBodyBytes } = limits;
  const declared = checkDeclaredLength(req.headers, maxRequestBodyBytes, requestId);
  if (declared instanceof Response) return declared;
  const { size } = declared;
  const reader = new PacedReader(source, uploadPaceOf(limits));
  let first: FirstChunks = { chunks: [], bytes: 0, ended: false };
  let release: () => void = nothing;
  if (limits.duplexUploads && (size === undefined || size > replayableBodyBytes)) {
    const opened = openDuplexUpload(deployment.name, uploader.client, limits.duplexUploadsPerClient);
    if (!opened) {
      await reader.cancel("too many duplex uploads");
      return errorResponse("rate_limited", `this client has ${limits.duplexUploadsPerClient} streamed uploads to "${deployment.name}" in flight here already; retry shortly`, {
        requestId,
        retryAfterSeconds: 1,
      });
    }
    release = opened;
  } else {
    const hold = openHold(uploader.authenticated ? undefined : uploader.client);
    if (typeof hold === "string") {
      await reader.cancel("held too much");
      return bodyRefusal(hold, maxRequestBodyBytes, requestId);
    }
    let read: FirstChunks | BodyFailure;
    try {
      read = await readFirst(reader, { upTo: Math.max(replayableBodyBytes, MIN_UPLOAD_PROOF_BYTES), limit: maxRequestBodyBytes, size, hold });
    } finally {
      hold?.close();
    }
    if (typeof read === "string") return bodyRefusal(read, maxRequestBodyBytes, requestId);
    if (read.ended) return heldBody(joined(read.chunks, read.bytes));
    first = read;
  }
  const paced = pacedBody(reader, maxRequestBodyBytes, first.chunks, release);
  const streamed = { replayable: false, overLimit: paced.overLimit, tooSlow: paced.tooSlow, aborted: paced.aborted, release };
  if (size === undefined) return { body: paced.body, ...streamed };
  // A sized body keeps its Content-Length on the way to the replica.
  const fixed = new FixedLengthStream(size);
  paced.body.pipeTo(fixed.writable).catch(() => undefined);
  return { body: fixed.readable, ...streamed };
}

/**
 * A request body must keep arriving: no gap longer than `idleMs` between bytes,
 * and, once `idleMs` has passed, an average of at least `minBytesPerSecond`
 * since it started (Apache mod_reqtimeout's idea). Otherwise the edge answers
 * 408 and lets go of the replica. Every body the edge reads or passes on is held
 * to it, sized or chunked, on every route: until 2026-12 a sized body was read in
 * one native call bounded only by its total time (10 s + size ÷ 1 KiB/s: 2 h 51 min
 * for 10 MiB), so a client that sent most of it and stopped held it for hours.
 */
export interface UploadPace {
  /** Longest wait for the next bytes, and the grace period before the rate counts, ms. */
  idleMs: number;
  /** Lowest average rate once the grace period is over, bytes/s; 0: no rate floor. */
  minBytesPerSecond: number;
}

/** When the next bytes must have arrived by (epoch ms), given what arrived so far. Pure. */
export function uploadDeadline(startedAt: number, lastByteAt: number, received: number, pace: UploadPace): number {
  const idle = lastByteAt + pace.idleMs;
  if (pace.minBytesPerSecond <= 0) return idle;
  return Math.min(idle, startedAt + pace.idleMs + (received * 1000) / pace.minBytesPerSecond);
}

export const TIMED_OUT = Symbol("timed out");

/**
 * `p`, or TIMED_OUT once `ms` have passed (the timer is cleared either way). One
 * promise settled by whichever comes first, instead of an async function around a
 * Promise.race of two: it runs per body chunk.
 */
export function withinMs<T>(p: Promise<T>, ms: number): Promise<T | typeof TIMED_OUT> {
  if (!Number.isFinite(ms)) return p;
  return new Promise<T | typeof TIMED_OUT>((resolve, reject) => {
    const timer = setTimeout(resolve, Math.max(0, ms), TIMED_OUT);
    p.then(
      (value) => {
        clearTimeout(timer);
        resolve(value);
      },
      (err: unknown) => {
        clearTimeout(timer);
        reject(err);
      },
    );
  });
}

/** How a paced read ended when it did not yield bytes: the client stopped sending, or its connection went. */
export type PaceFailure = "too_slow" | "aborted";

/**
 * A body's reader held to the pace: each read waits at most until the pace's
 * deadline. On a failure the source is cancelled, so the client's connection is
 * let go at once.
 */
export class PacedReader {
  readonly #reader: ReadableStreamDefaultReader<Uint8Array>;
  readonly #pace: UploadPace;
  readonly #now: () => number;
  readonly #startedAt: number;
  #lastByteAt: number;
  /** Bytes read so far. */
  received = 0;

  constructor(source: ReadableStream<Uint8Array>, pace: UploadPace, now: () => number = Date.now) {
    this.#reader = source.getReader();
    this.#pace = pace;
    this.#now = now;
    this.#startedAt = this.#lastByteAt = now();
  }

  /** The next chunk, null at the end, or why the body stopped. */
  async read(): Promise<Uint8Array | null | PaceFailure> {
    let read: ReadableStreamReadResult<Uint8Array> | typeof TIMED_OUT;
    try {
      read = await withinMs(this.#reader.read(), uploadDeadline(this.#startedAt, this.#lastByteAt, this.received, this.#pace) - this.#now());
    } catch {
      // The client's connection went away mid-body ("Network connection lost."): its fault, not ours.
      return "aborted";
    }
    if (read === TIMED_OUT) {
      await this.cancel("too slow");
      return "too_slow";
    }
    if (read.done) return null;
    this.received += read.value.byteLength;
    if (read.value.byteLength > 0) this.#lastByteAt = this.#now();
    return read.value;
  }

  async cancel(reason: string): Promise<void> {
    await this.#reader.cancel(reason).catch(() => undefined);
  }
}

/** What a paced body stream reports after the fact. */
export interface PacedBody {
  body: ReadableStream<Uint8Array>;
  /** The client stopped sending (too slow): the stream was errored and its source cancelled. */
  tooSlow(): boolean;
  /** More than `limit` bytes arrived: the stream was errored. */
  overLimit(): boolean;
  /** The client's connection went away mid-body: the stream was errored. */
  aborted(): boolean;
}

/**
 * The rest of `reader`'s body passed on chunk by chunk under the pace, after
 * `first` (chunks already read from it), and at most `limit` bytes in all.
 * Either violation errors the stream (so the fetch sending it to a replica fails
 * and the replica's connection closes) and is reported by the getters.
 * `settled` is called once, when the stream ends, fails or is cancelled.
 */
export function pacedBody(reader: PacedReader, limit: number, first: readonly Uint8Array[] = [], settled?: () => void): PacedBody {
  let slow = false;
  let over = false;
  let gone = false;
  let at = 0;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (at < first.length) {
        controller.enqueue(first[at++]!);
        return;
      }
      const read = await reader.read();
      if (read === null) {
        controller.close();
        settled?.();
        return;
      }
      if (typeof read === "string") {
        slow = read === "too_slow";
        gone = read === "aborted";
        controller.error(new Error(slow ? "request body arrived too slowly" : "the client's connection was lost"));
        settled?.();
        return;
      }
      if (reader.received > limit) {
        over = true;
        controller.error(new Error("request body too large"));
        settled?.();
        await reader.cancel("too large");
        return;
      }
      controller.enqueue(read);
    },
    async cancel(reason) {
      settled?.();
      await reader.cancel(String(reason));
    },
  });
  return { body, tooSlow: () => slow, overLimit: () => over, aborted: () => gone };
}
