/**
 * A request body must keep arriving: no gap longer than `idleMs` between bytes,
 * and, once `idleMs` has passed, an average of at least `minBytesPerSecond`
 * since it started (Apache mod_reqtimeout's idea). Otherwise the edge answers
 * 408 and lets go of the replica. Without this, 16 connections sending one
 * chunk every 5 s held 16 replica slots for as long as they liked.
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

/** The longest a body of `size` bytes may take to arrive in full, ms (sized bodies read in one native call). Pure. */
export function uploadBudgetMs(size: number, pace: UploadPace): number {
  return pace.minBytesPerSecond <= 0 ? Infinity : pace.idleMs + (size * 1000) / pace.minBytesPerSecond;
}

export const TIMED_OUT = Symbol("timed out");

/**
 * `p`, or TIMED_OUT once `ms` have passed (the timer is cleared either way). One
 * promise settled by whichever comes first, instead of an async function around a
 * Promise.race of two: it runs per held body and per streamed upload chunk.
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

/** What a paced body stream reports after the fact. */
export interface PacedBody {
  body: ReadableStream<Uint8Array>;
  /** The client stopped sending (too slow): the stream was errored and its source cancelled. */
  tooSlow(): boolean;
  /** More than `limit` bytes arrived: the stream was errored. */
  overLimit(): boolean;
}

/**
 * `source` passed on chunk by chunk under the pace, and at most `limit` bytes.
 * Either violation errors the stream (so the fetch sending it to a replica fails
 * and the replica's connection closes) and is reported by the getters.
 */
export function pacedBody(source: ReadableStream<Uint8Array>, limit: number, pace: UploadPace, now: () => number = Date.now): PacedBody {
  const reader = source.getReader();
  const startedAt = now();
  let lastByteAt = startedAt;
  let received = 0;
  let slow = false;
  let over = false;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      const read = await withinMs(reader.read(), uploadDeadline(startedAt, lastByteAt, received, pace) - now());
      if (read === TIMED_OUT) {
        slow = true;
        controller.error(new Error("request body arrived too slowly"));
        await reader.cancel("too slow").catch(() => undefined);
        return;
      }
      if (read.done) {
        controller.close();
        return;
      }
      received += read.value.byteLength;
      if (received > limit) {
        over = true;
        controller.error(new Error("request body too large"));
        await reader.cancel("too large").catch(() => undefined);
        return;
      }
      if (read.value.byteLength > 0) lastByteAt = now();
      controller.enqueue(read.value);
    },
    async cancel(reason) {
      await reader.cancel(reason).catch(() => undefined);
    },
  });
  return { body, tooSlow: () => slow, overLimit: () => over };
}
