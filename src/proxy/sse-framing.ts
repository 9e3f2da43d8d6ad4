/**
 * Holds back the unfinished tail of a Server-Sent Events stream, so what has
 * been forwarded always ends on an event boundary (a blank line). Then, if the
 * upstream dies mid-event, the proxy can still append a well-formed error event
 * instead of leaving the client with half a JSON object. Replicas write whole
 * events, so in practice nothing is held; a TCP split mid-event only waits for
 * the rest of that event, which the client could not have used anyway. Pure.
 */
const LF = 0x0a;
const EMPTY = new Uint8Array(0);
const CR = 0x0d;

/** Index just past the last blank line ("\n\n" or "\r\n\r\n") in `bytes`, or 0. */
export function lastEventBoundary(bytes: Uint8Array): number {
  for (let i = bytes.length - 1; i >= 1; i--) {
    if (bytes[i] !== LF) continue;
    if (bytes[i - 1] === LF) return i + 1;
    if (bytes[i - 1] === CR && i >= 2 && bytes[i - 2] === LF) return i + 1;
  }
  return 0;
}

export class SseEventFramer {
  #held: Uint8Array = EMPTY;

  /** Takes the next chunk; returns the bytes that complete events (possibly empty). */
  push(chunk: Uint8Array): Uint8Array {
    const joined = this.#held.length === 0 ? chunk : concat(this.#held, chunk);
    const end = lastEventBoundary(joined);
    // A copy, not a view: the returned bytes may be transferred (a byte stream's
    // enqueue detaches their buffer), and the held tail must survive that.
    this.#held = end === joined.length ? EMPTY : joined.slice(end);
    return joined.subarray(0, end);
  }

  /** Bytes held back: an event that has not ended yet. */
  get held(): number {
    return this.#held.length;
  }

  /** At a clean end of stream: whatever is held, passed on as it is. */
  flush(): Uint8Array {
    const rest = this.#held;
    this.#held = EMPTY;
    return rest;
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}
