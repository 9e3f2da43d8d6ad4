/**
 * How a replica's response body is passed on to the client, and when it has
 * been passed on completely (or cut): the replica is busy until then.
 */
import { errorBody } from "../protocol/index.ts";

/** A response body passed on, and when it has been passed on completely (or cut). */
export interface PassedStream {
  body: ReadableStream<Uint8Array>;
  ended: Promise<void>;
}

/**
 * A replica's answer body as the client gets it. A sized (or empty) body goes as it
 * is: the replica has produced it already, its work is done (`ended` undefined). A
 * stream goes through the native pipe, or, for an SSE answer whose failure must end
 * in an error event, event by event (sseWithErrorEvent).
 */
export function passAnswerBody(
  upstream: Response,
  o: { sseErrors: boolean; replicaId: string; requestId: string },
): { body: ReadableStream<Uint8Array> | null; ended?: Promise<void> } {
  if (!upstream.body || upstream.headers.has("content-length")) return { body: upstream.body };
  return o.sseErrors ? sseWithErrorEvent(upstream.body, o.replicaId, o.requestId) : nativePipe(upstream.body);
}

/**
 * The native pipe: no JS per chunk. A client that goes away cancels the
 * readable side, which cancels the pipe's source: the replica sees its request
 * closed and stops.
 */
export function nativePipe(source: ReadableStream<Uint8Array>): PassedStream {
  const { readable, writable } = new IdentityTransformStream();
  return { body: readable, ended: source.pipeTo(writable).catch(() => undefined) };
}

/**
 * An SSE stream passed on natively (no JS per chunk); when the replica fails
 * mid-stream (it died, or the connection broke), the client gets a last event,
 * OpenAI's `data: {"error": {...}}`, and a clean end, instead of a stream that
 * simply stops. A client that goes away cancels the replica's response.
 *
 * How the cut is seen without touching each chunk: the pipe into the client's
 * stream keeps that stream open and unaborted whatever happens upstream
 * (preventClose, preventAbort), so it settles with the outcome. It resolves
 * when the replica ended its body, and rejects ("Network connection lost.")
 * when the connection dropped mid-body; either way the edge then writes what
 * follows itself: nothing but the close, or the error event first. (workerd
 * 1.20260426 settled neither way with preventAbort, which is why an earlier
 * design pulled every chunk through JS; 1.20261117 settles: bench/README.md.)
 *
 * Replicas write whole events, so a cut lands between events; a connection
 * broken in the middle of a chunk would leave that partial event before the
 * error event (the edge no longer holds events back to frame them: holding is
 * what cost the JS step per chunk). Nothing is buffered at the edge.
 *
 * The client sees only a code and the request id; the cause goes to the log.
 */
export function sseWithErrorEvent(source: ReadableStream<Uint8Array>, replicaId: string, requestId: string): PassedStream {
  const { readable, writable } = new IdentityTransformStream();
  /** Writes `tail` (if any) and closes the client's stream; false when the client has gone. */
  const finish = async (tail: Uint8Array | undefined): Promise<boolean> => {
    const writer = writable.getWriter();
    try {
      if (tail) await writer.write(tail);
      await writer.close();
      return true;
    } catch {
      return false;
    }
  };
  const ended = source.pipeTo(writable, { preventClose: true, preventAbort: true }).then(
    () => {
      // Not awaited: the replica's work is done once its body has ended.
      void finish(undefined);
    },
    (err: unknown) => {
      // A cut and a client that went away reject alike ("Network connection lost."); only
      // after a cut does the client's side still take the error event. Not awaited either:
      // a client that stopped reading must not keep the replica counted busy.
      const event = errorBody("upstream_failed", "the replica failed mid-stream", { requestId });
      void finish(new TextEncoder().encode(`data: ${JSON.stringify(event)}\n\n`)).then((toClient) => {
        if (toClient) console.error(JSON.stringify({ msg: "stream failed", replica: replicaId, request_id: requestId, error: String(err) }));
      });
    },
  );
  return { body: readable, ended };
}

/**
 * A response body passed on with each chunk shown to `observe` (the /v1 routes keep
 * its tail to read the token usage, token-usage.ts), through one transform: the
 * chunk is seen, then enqueued for the client. It keeps the stream's backpressure
 * (a client that stops reading stops the replica's stream; nothing piles up here)
 * and its cancellation (a client that goes away cancels the pipe, which cancels
 * the replica's request). A sized body (`length`) keeps its length through a
 * FixedLengthStream. Until 2026-12 a stream was teed instead: the copy branch read
 * the replica's stream to its end whatever the client did, so a closed `/v1/responses`
 * stream still generated all of its tokens, and unread streams piled up in memory.
 */
export function tapped(source: ReadableStream<Uint8Array>, observe: (chunk: Uint8Array) => void, length: number | null): PassedStream {
  const sink = length === null ? new IdentityTransformStream() : new FixedLengthStream(length);
  const tap = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      observe(chunk);
      controller.enqueue(chunk);
    },
  });
  return { body: sink.readable, ended: source.pipeThrough(tap).pipeTo(sink.writable).catch(() => undefined) };
}
