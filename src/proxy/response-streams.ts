/**
 * How a replica's response body is passed on to the client, and when it has
 * been passed on completely (or cut): the replica is busy until then.
 */
import { errorBody } from "../protocol/index.ts";
import { MAX_SSE_EVENT_BYTES, SseEventFramer } from "./sse-framing.ts";

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
 * An SSE stream passed on event by event; when the replica fails mid-stream (it
 * died, or the connection broke), the client gets a last well-formed event,
 * OpenAI's `data: {"error": {...}}`, and a clean end, instead of a stream that
 * simply stops. A client that goes away cancels the replica's response. An
 * event larger than MAX_SSE_EVENT_BYTES ends the stream the same way (the edge
 * will not buffer without limit for a replica that never ends an event).
 *
 * Why JS touches every chunk here: workerd's native pipe (pipeTo between
 * native streams, or returning the fetch body as is) ends the client's response
 * as if complete when the replica's connection drops mid-body, so a truncated
 * answer would look finished (and with preventAbort the pipe never settles);
 * a JS read sees the error ("Network connection lost."). The body is a pull
 * byte stream: one JS step per chunk, when the client side asks for it, and
 * the cheapest shape measured (bench/README.md). SseEventFramer holds back a
 * partial event, so the error event never lands in the middle of one.
 *
 * The client sees only a code and the request id; the cause goes to the log.
 */
export function sseWithErrorEvent(source: ReadableStream<Uint8Array>, replicaId: string, requestId: string): PassedStream {
  const framer = new SseEventFramer();
  const reader = source.getReader();
  let end!: () => void;
  const ended = new Promise<void>((r) => (end = r));
  const fail = (controller: ReadableByteStreamController, message: string, cause: string) => {
    const event = errorBody("upstream_failed", message, { requestId });
    controller.enqueue(new TextEncoder().encode(`data: ${JSON.stringify(event)}\n\n`));
    controller.close();
    console.error(JSON.stringify({ msg: "stream failed", replica: replicaId, request_id: requestId, error: cause }));
    end();
  };
  const body = new ReadableStream({
    type: "bytes",
    async pull(controller) {
      for (;;) {
        let chunk: ReadableStreamReadResult<Uint8Array>;
        try {
          chunk = await reader.read();
        } catch (err) {
          fail(controller, "the replica failed mid-stream", String(err));
          return;
        }
        if (chunk.done) {
          const rest = framer.flush();
          if (rest.length > 0) controller.enqueue(rest);
          controller.close();
          end();
          return;
        }
        const complete = framer.push(chunk.value);
        if (complete.length > 0) controller.enqueue(complete);
        if (framer.overflowed) {
          fail(controller, `the replica sent an event larger than ${MAX_SSE_EVENT_BYTES} bytes`, "event too large");
          await reader.cancel("event too large").catch(() => undefined);
          return;
        }
        if (complete.length > 0) return;
      }
    },
    async cancel(reason) {
      // The client went away: stop the replica's work.
      await reader.cancel(reason).catch(() => undefined);
      end();
    },
  });
  return { body, ended };
}

/**
 * A response body passed on with each chunk shown to `observe` on the way (the
 * /v1 routes keep its tail to read the token usage, token-usage.ts). A sized
 * body keeps its length (FixedLengthStream). A client that goes away cancels
 * the pipe, which cancels the source.
 */
export function tapped(source: ReadableStream<Uint8Array>, observe: (chunk: Uint8Array) => void, length: number | null): PassedStream {
  const sink = length !== null ? new FixedLengthStream(length) : new IdentityTransformStream();
  const tap = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      observe(chunk);
      controller.enqueue(chunk);
    },
  });
  return { body: sink.readable, ended: source.pipeThrough(tap).pipeTo(sink.writable).catch(() => undefined) };
}
