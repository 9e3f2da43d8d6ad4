/** The upload pace (src/proxy/serve/body.ts): when the next bytes are due, and a body stream held to it. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { PacedReader, TIMED_OUT, pacedBody, uploadDeadline, withinMs } from "../../src/proxy/serve/body.ts";
import { T0 } from "../fixtures/clock.ts";

const pace = { idleMs: 10_000, minBytesPerSecond: 1024 };

describe("uploadDeadline", () => {
  it("is the idle timeout from the last bytes while the rate has nothing to say", () => {
    expect(uploadDeadline(T0, T0, 0, pace)).toBe(T0 + 10_000);
    expect(uploadDeadline(T0, T0 + 3_000, 100 * 1024, pace)).toBe(T0 + 13_000);
  });

  it("is earlier when the average since the start would fall below the floor after the grace period", () => {
    // 16 bytes every 5 s (the review's slow uploader): due at the start + grace + 16 / 1024 s.
    expect(uploadDeadline(T0, T0 + 5_000, 16, pace)).toBe(T0 + 10_000 + (16 * 1000) / 1024);
    expect(uploadDeadline(T0, T0 + 9_000, 2048, pace)).toBe(T0 + 12_000);
  });

  it("has no rate floor at 0 bytes/s", () => {
    expect(uploadDeadline(T0, T0 + 50_000, 1, { idleMs: 10_000, minBytesPerSecond: 0 })).toBe(T0 + 60_000);
  });
});

describe("withinMs", () => {
  it("passes the value on, or TIMED_OUT when the time runs out first", async () => {
    expect(await withinMs(Promise.resolve(7), 1_000)).toBe(7);
    expect(await withinMs(new Promise(() => undefined), 1)).toBe(TIMED_OUT);
    expect(await withinMs(Promise.resolve("x"), Infinity)).toBe("x");
  });
});

/** A source the test writes to by hand. */
function source() {
  let controller!: ReadableStreamDefaultController<Uint8Array>;
  let cancelled: unknown;
  const stream = new ReadableStream<Uint8Array>({
    start: (c) => void (controller = c),
    cancel: (reason) => void (cancelled = reason),
  });
  return { stream, push: (n: number) => controller.enqueue(new Uint8Array(n)), end: () => controller.close(), cancelled: () => cancelled };
}

async function readAll(body: ReadableStream<Uint8Array>): Promise<{ bytes: number; error?: unknown }> {
  const reader = body.getReader();
  let bytes = 0;
  try {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) return { bytes };
      bytes += value.byteLength;
    }
  } catch (error) {
    return { bytes, error };
  }
}

describe("pacedBody", () => {
  it("passes a body that keeps its pace through unchanged", async () => {
    const s = source();
    const paced = pacedBody(new PacedReader(s.stream, pace), 1_000);
    s.push(300);
    s.push(700);
    s.end();
    expect(await readAll(paced.body)).toEqual({ bytes: 1_000 });
    expect(paced.tooSlow()).toBe(false);
    expect(paced.overLimit()).toBe(false);
  });

  it("errors the stream and cancels its source when the client stops sending", async () => {
    const s = source();
    const paced = pacedBody(new PacedReader(s.stream, { idleMs: 20, minBytesPerSecond: 0 }), 1_000);
    s.push(10);
    const read = await readAll(paced.body);
    expect(read.bytes).toBe(10);
    expect(String(read.error)).toMatch(/too slowly/);
    expect(paced.tooSlow()).toBe(true);
    expect(s.cancelled()).toBe("too slow");
  });

  it("errors the stream when the average falls below the floor, however regularly bytes arrive", async () => {
    // A clock the test moves: 1 byte a "second" never starves the idle timeout, but fails the rate.
    let now = T0;
    const s = source();
    const paced = pacedBody(new PacedReader(s.stream, { idleMs: 10_000, minBytesPerSecond: 1024 }, () => now), 1_000_000);
    const reading = readAll(paced.body);
    for (let i = 0; i < 11; i++) {
      now += 1_000;
      s.push(1);
    }
    // 11 s in, 11 bytes: past the grace period and the rate's deadline, so the next read times out at once.
    expect(await reading).toMatchObject({ bytes: 11 });
    expect(paced.tooSlow()).toBe(true);
  });

  it("errors the stream past the limit", async () => {
    const s = source();
    const paced = pacedBody(new PacedReader(s.stream, pace), 100);
    s.push(60);
    s.push(60);
    const read = await readAll(paced.body);
    expect(read.bytes).toBe(60);
    expect(String(read.error)).toMatch(/too large/);
    expect(paced.overLimit()).toBe(true);
    expect(paced.tooSlow()).toBe(false);
  });
});

describe("PacedReader", () => {
  it("holds a sized body to the idle timeout between bytes, however much of it has arrived", async () => {
    // The review's shape: most of a body at once, then nothing. The rate alone would allow
    // hours for 10 MiB; the gap between bytes is what ends it.
    let now = T0;
    const s = source();
    const reader = new PacedReader(s.stream, pace, () => now);
    s.push(10 * 1024 * 1024);
    expect(await reader.read()).toBeInstanceOf(Uint8Array);
    now += 10_001;
    expect(await reader.read()).toBe("too_slow");
    expect(s.cancelled()).toBe("too slow");
  });

  it("does not take an empty chunk for bytes: a client that sends only empty chunks is still too slow (issue 51)", async () => {
    // A slow-loris whose chunks are empty would hold a body forever if they reset the idle timer.
    let now = T0;
    const s = source();
    const reader = new PacedReader(s.stream, { idleMs: 10_000, minBytesPerSecond: 0 }, () => now);
    s.push(10);
    expect(await reader.read()).toBeInstanceOf(Uint8Array);
    for (let i = 0; i < 2; i++) {
      now += 4_000;
      s.push(0);
      // 4, 8 s after the last bytes: within the idle timeout, the empty chunk passes.
      expect(await reader.read()).toEqual(new Uint8Array(0));
    }
    // 12 s after the last real bytes: too slow at once, whatever empty chunks came since (an
    // empty chunk taken for bytes would have the read wait until 18 s).
    now += 4_000;
    expect(await Promise.race([reader.read(), new Promise((r) => setTimeout(r, 1_000, "still waiting"))])).toBe("too_slow");
  });

  it("reports a connection lost mid-body as aborted, not as an error of its own", async () => {
    let controller!: ReadableStreamDefaultController<Uint8Array>;
    const stream = new ReadableStream<Uint8Array>({ start: (c) => void (controller = c) });
    const reader = new PacedReader(stream, pace);
    controller.enqueue(new Uint8Array(5));
    expect(await reader.read()).toHaveLength(5);
    controller.error(new Error("Network connection lost."));
    expect(await reader.read()).toBe("aborted");
  });
});

describe("pacedBody after chunks already read", () => {
  it("passes the chunks read first, then the rest, and counts them all against the limit", async () => {
    const s = source();
    const reader = new PacedReader(s.stream, pace);
    s.push(40);
    const first = (await reader.read()) as Uint8Array;
    const paced = pacedBody(reader, 100, [first]);
    s.push(40);
    s.push(40);
    const read = await readAll(paced.body);
    expect(read.bytes).toBe(80);
    expect(String(read.error)).toMatch(/too large/);
    expect(paced.overLimit()).toBe(true);
  });
});
