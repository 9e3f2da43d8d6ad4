// @ts-nocheck
// The edge's response pipes inside workerd (src/proxy/serve/dispatch.ts): a tapped
// stream (the /v1 routes read its tail for token usage) keeps the client's backpressure
// and its cancellation, as the native pipe does.
import { describe, expect, it } from "vitest";
import { nativePipe, tapped } from "../../src/proxy/serve/dispatch.ts";

/**
 * A source of 2,000 chunks of 1 KiB (bounded, so a pipe that ignores backpressure reads it
 * to its end and fails the test instead of spinning) that counts how often it was pulled
 * and whether it was cancelled.
 */
function endless() {
  const state = { pulls: 0, cancelled: false };
  const stream = new ReadableStream<Uint8Array>(
    {
      pull(c) {
        state.pulls++;
        c.enqueue(new Uint8Array(1024).fill(97));
        if (state.pulls === 2_000) c.close();
      },
      cancel() {
        state.cancelled = true;
      },
    },
    { highWaterMark: 0 },
  );
  return { stream, state };
}

const settle = () => new Promise((r) => setTimeout(r, 50));

describe("tapped streams", () => {
  for (const [name, pass] of [
    ["tapped (the usage tail)", (s: ReadableStream<Uint8Array>, seen: Uint8Array[]) => tapped(s, (c) => seen.push(c), null)],
    ["the native pipe (for comparison)", (s: ReadableStream<Uint8Array>) => nativePipe(s)],
  ] as const) {
    it(`${name}: a client that stops reading stops the source, and one that leaves cancels it`, async () => {
      const { stream, state } = endless();
      const seen: Uint8Array[] = [];
      const passed = pass(stream, seen);
      const reader = passed.body.getReader();
      for (let i = 0; i < 3; i++) expect((await reader.read()).value?.byteLength).toBe(1024);
      // The client reads no more: the source is read a few chunks ahead at most, not to its end.
      await settle();
      const pulled = state.pulls;
      await settle();
      expect(state.pulls).toBe(pulled);
      expect(pulled).toBeLessThan(10);
      // The observer saw no more than was pulled.
      expect(seen.length).toBeLessThanOrEqual(pulled);
      // The client leaves: the source is cancelled (the replica's request with it).
      await reader.cancel("client gone");
      await passed.ended;
      expect(state.cancelled).toBe(true);
    });
  }

  it("the tap sees every chunk the client got, in order", async () => {
    const chunks = ["data: a\n\n", "data: b\n\n", 'data: {"usage":{}}\n\n'].map((t) => new TextEncoder().encode(t));
    const source = new ReadableStream<Uint8Array>({
      start(c) {
        for (const chunk of chunks) c.enqueue(chunk);
        c.close();
      },
    });
    const seen: string[] = [];
    const passed = tapped(source, (c) => seen.push(new TextDecoder().decode(c)), null);
    expect(await new Response(passed.body).text()).toBe(chunks.map((c) => new TextDecoder().decode(c)).join(""));
    await passed.ended;
    expect(seen.join("")).toBe(chunks.map((c) => new TextDecoder().decode(c)).join(""));
  });
});
