/**
 * Holds back the unfinished tail of a Server-Sent Events stream, so what has
 * been forwarded always ends on an event boundary (a blank line). Then, if the
 * upstream dies mid-event, the proxy can still append a well-formed error event
 * instead of leaving the client with half a JSON object. Replicas write whole
 * events, so in practice nothing is held; a TCP split mid-event only waits for
 * the rest of that event, which the client could not have used anyway. Pure.
 *
 * What it holds is capped (MAX_SSE_EVENT_BYTES): an upstream that sends one
 * endless event makes the framer give up (`overflowed`) instead of buffering
 * without limit.
 *
 * Work is linear in the stream's size, by construction:
 * - each push scans only the new chunk's bytes, from its end back to the last
 *   boundary in it (or its start), looking back at most 2 held bytes for a
 *   boundary that began before the chunk; held bytes are never rescanned,
 *   because they hold no boundary (they are what follows the last one);
 * - each held byte is copied twice in all: once when it is kept (a copy of the
 *   chunk's tail, appended to a list, never concatenated to what was held
 *   before) and once when its event ends (the list joined into the bytes
 *   returned) or at flush.
 */
const LF = 0x0a;
const CR = 0x0d;
const EMPTY = new Uint8Array(0);

/**
 * The most bytes held for one unfinished event: the part of it received before
 * the chunk that ends it. An event that is still unfinished past this many
 * bytes makes the framer overflow.
 */
export const MAX_SSE_EVENT_BYTES = 4 * 1024 * 1024;

/** Index just past the last blank line ("\n\n" or "\n\r\n", so "\r\n\r\n" too) in `bytes`, or 0. */
export function lastEventBoundary(bytes: Uint8Array): number {
  return boundaryIn(bytes, -1, -1);
}

/**
 * lastEventBoundary of `before2 before1 bytes`, as an index into `bytes`, for
 * `before1` and `before2` the two bytes before `bytes` (-1: none). An event
 * ends at a LF preceded by LF, or by CR LF. A boundary ends at index 1 or more
 * of the whole, so 0 means none.
 */
function boundaryIn(bytes: Uint8Array, before1: number, before2: number): number {
  for (let i = bytes.length - 1; i >= 0; i--) {
    if (bytes[i] !== LF) continue;
    const b1 = i >= 1 ? bytes[i - 1] : before1;
    if (b1 === LF) return i + 1;
    if (b1 === CR && (i >= 2 ? bytes[i - 2] : i === 1 ? before1 : before2) === LF) return i + 1;
  }
  return 0;
}

export class SseEventFramer {
  /** The held tail, as copies in order; none empty, none aliasing returned bytes. */
  readonly #pieces: Uint8Array[] = [];
  #held = 0;
  /** The last byte held and the one before it, when #held is not 0 (-1: none). */
  #last1 = -1;
  #last2 = -1;
  #overflowed = false;

  /**
   * Takes the next chunk; returns the bytes that complete events (possibly
   * empty). The returned bytes may be a view of `chunk` (often `chunk` itself)
   * or new; either way the caller may transfer them. Once the unfinished tail
   * would pass MAX_SSE_EVENT_BYTES, returns the complete events before it and
   * overflows: what was held is dropped, and from then on every push returns
   * nothing.
   */
  push(chunk: Uint8Array): Uint8Array {
    if (this.#overflowed) return EMPTY;
    const held = this.#held;
    const n = chunk.length;
    if (held === 0) {
      // The hot path: nothing held, and the chunk is whole events (one scan
      // that stops at the chunk's last bytes, no allocation).
      const end = boundaryIn(chunk, -1, -1);
      if (end === n) return chunk;
      this.#keep(chunk, end);
      return end === 0 ? EMPTY : chunk.subarray(0, end);
    }
    const end = boundaryIn(chunk, this.#last1, this.#last2);
    if (end === 0) {
      if (n === 0) return EMPTY;
      if (held + n > MAX_SSE_EVENT_BYTES) {
        this.#overflow();
        return EMPTY;
      }
      this.#pieces.push(chunk.slice());
      this.#held = held + n;
      this.#noteLastTwo(chunk);
      return EMPTY;
    }
    const out = this.#join(end);
    out.set(end === n ? chunk : chunk.subarray(0, end), held);
    this.#keep(chunk, end);
    return out;
  }

  /** Bytes held back: an event that has not ended yet. Never more than MAX_SSE_EVENT_BYTES. */
  get held(): number {
    return this.#held;
  }

  /**
   * Whether an event passed MAX_SSE_EVENT_BYTES before it ended. Then the
   * stream cannot go on well-formed: its holder ends it (with an error event)
   * and stops the upstream; push and flush return nothing.
   */
  get overflowed(): boolean {
    return this.#overflowed;
  }

  /** At a clean end of stream: whatever is held, passed on as it is (nothing after an overflow). */
  flush(): Uint8Array {
    if (this.#held === 0) return EMPTY;
    const rest = this.#pieces.length === 1 ? (this.#pieces[0] as Uint8Array) : this.#join(0);
    this.#pieces.length = 0;
    this.#held = 0;
    return rest;
  }

  /** Holds a copy of `chunk` from `end` on, with nothing held before (or overflows). */
  #keep(chunk: Uint8Array, end: number): void {
    const tail = chunk.length - end;
    if (tail === 0) return;
    if (tail > MAX_SSE_EVENT_BYTES) return this.#overflow();
    // A copy, not a view: the returned bytes may be transferred (a byte stream's
    // enqueue detaches their buffer), and the held tail must survive that.
    this.#pieces.push(chunk.slice(end));
    this.#held = tail;
    const n = chunk.length;
    this.#last1 = chunk[n - 1] as number;
    this.#last2 = tail >= 2 ? (chunk[n - 2] as number) : -1;
  }

  /** After appending `bytes` (not empty) to what was already held: the two last bytes held. */
  #noteLastTwo(bytes: Uint8Array): void {
    const n = bytes.length;
    this.#last2 = n >= 2 ? (bytes[n - 2] as number) : this.#last1;
    this.#last1 = bytes[n - 1] as number;
  }

  /** New bytes: what is held, then room for `extra` more; nothing is held after. */
  #join(extra: number): Uint8Array {
    const out = new Uint8Array(this.#held + extra);
    let at = 0;
    for (const piece of this.#pieces) {
      out.set(piece, at);
      at += piece.length;
    }
    this.#pieces.length = 0;
    this.#held = 0;
    return out;
  }

  #overflow(): void {
    this.#overflowed = true;
    this.#pieces.length = 0;
    this.#held = 0;
  }
}
