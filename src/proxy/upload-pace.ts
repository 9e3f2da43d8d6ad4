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
