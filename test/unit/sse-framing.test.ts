import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { MAX_SSE_EVENT_BYTES, SseEventFramer, lastEventBoundary } from "../../src/proxy/sse-framing.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);
const KiB = 1024;

/**
 * The framer as it was (rescan and concatenate on every chunk): quadratic, but
 * plainly right, so it is the model the framer must match push for push.
 */
function referenceFramer(): { push(chunk: Uint8Array): Uint8Array; flush(): Uint8Array } {
  let held = new Uint8Array(0);
  return {
    push(chunk) {
      const joined = new Uint8Array(held.length + chunk.length);
      joined.set(held, 0);
      joined.set(chunk, held.length);
      const end = lastEventBoundary(joined);
      held = joined.slice(end);
      return joined.slice(0, end);
    },
    flush() {
      const rest = held;
      held = new Uint8Array(0);
      return rest;
    },
  };
}

/**
 * Pushes `parts` through a framer and the model, checking every push against
 * the model; like the proxy, transfers each non-empty result (a byte stream's
 * enqueue detaches its buffer), and then scribbles on the chunk pushed, so a
 * held tail that aliased either would show.
 */
function checkAgainstModel(parts: string[]): string {
  const f = new SseEventFramer();
  const model = referenceFramer();
  let out = "";
  for (const p of parts) {
    const chunk = enc(p);
    const got = f.push(chunk);
    const text = dec(got);
    expect(text).toBe(dec(model.push(enc(p))));
    if (text.length > 0) expect(lastEventBoundary(got)).toBe(got.length);
    out += text;
    if (got.length > 0) structuredClone(got.buffer, { transfer: [got.buffer as ArrayBuffer] });
    if (chunk.buffer.byteLength > 0) chunk.fill(0x7a);
    expect(f.overflowed).toBe(false);
  }
  const rest = f.flush();
  expect(dec(rest)).toBe(dec(model.flush()));
  out += dec(rest);
  expect(f.held).toBe(0);
  return out;
}

/** Every way to cut `s` into two parts, and byte by byte. */
function splits(s: string): string[][] {
  const out: string[][] = [];
  for (let i = 0; i <= s.length; i++) out.push([s.slice(0, i), s.slice(i)]);
  out.push([...s]);
  return out;
}

/** A chunk of exactly `size` bytes of one line of `data:` (no blank line in it), ending in "\n". */
function dataLine(size: number): Uint8Array {
  const line = new Uint8Array(size).fill(0x78);
  line.set(enc("data: "), 0);
  line[size - 1] = 0x0a;
  return line;
}

describe("lastEventBoundary", () => {
  it("finds the end of the last blank line, LF or CRLF", () => {
    expect(lastEventBoundary(enc("data: a\n\ndata: b"))).toBe(9);
    expect(lastEventBoundary(enc("data: a\r\n\r\n"))).toBe(11);
    expect(lastEventBoundary(enc("data: a\n"))).toBe(0);
    expect(lastEventBoundary(enc(""))).toBe(0);
    expect(lastEventBoundary(enc("\n\n"))).toBe(2);
  });

  it("counts LF CR LF as a blank line, and not CR CR or a lone CRLF", () => {
    expect(lastEventBoundary(enc("data: a\n\r\n"))).toBe(10);
    expect(lastEventBoundary(enc("data: a\r\n\r\ndata: b\r\n"))).toBe(11);
    expect(lastEventBoundary(enc("data: a\r\r"))).toBe(0);
    expect(lastEventBoundary(enc("\r\n"))).toBe(0);
    expect(lastEventBoundary(enc("\n"))).toBe(0);
  });
});

describe("SseEventFramer", () => {
  it("passes whole events at once and holds a split one until it ends", () => {
    const f = new SseEventFramer();
    expect(dec(f.push(enc("data: 1\n\n")))).toBe("data: 1\n\n");
    expect(dec(f.push(enc("data: {\"choi")))).toBe("");
    expect(f.held).toBe(12);
    expect(dec(f.push(enc("ces\":[]}\n\ndata: 3")))).toBe('data: {"choices":[]}\n\n');
    expect(dec(f.flush())).toBe("data: 3");
    expect(f.held).toBe(0);
  });

  it("passes a chunk of whole events on as it is, when nothing is held", () => {
    const f = new SseEventFramer();
    const chunk = enc("data: 1\n\ndata: 2\n\n");
    expect(f.push(chunk)).toBe(chunk);
    const crlf = enc("data: 3\r\n\r\n");
    expect(f.push(crlf)).toBe(crlf);
    expect(f.held).toBe(0);
  });

  it("forwards exactly the input, in order, however it is split, and only up to event boundaries", () => {
    fc.assert(
      fc.property(fc.array(fc.stringMatching(/^[a-z:{} "\n]{0,30}$/), { maxLength: 20 }), (parts) => {
        const f = new SseEventFramer();
        let out = "";
        for (const p of parts) {
          const chunk = dec(f.push(enc(p)));
          if (chunk.length > 0) expect(chunk.endsWith("\n\n")).toBe(true);
          out += chunk;
        }
        out += dec(f.flush());
        expect(out).toBe(parts.join(""));
      }),
    );
  });

  it("returns, push for push, what rescanning everything held would, with CR and LF split anywhere", () => {
    fc.assert(
      fc.property(fc.array(fc.stringMatching(/^[a:\r\n]{0,12}$/), { maxLength: 30 }), (parts) => {
        expect(checkAgainstModel(parts)).toBe(parts.join(""));
      }),
      { numRuns: 500 },
    );
  });

  it("finds CRLF and LF boundaries split across chunks at every position", () => {
    const streams = [
      "data: a\r\n\r\ndata: b\r\n\r\n",
      "data: a\n\ndata: b\n\n",
      "data: a\r\n\r\ndata: b\n\ndata: c\n\r\n",
      "\n\n\n\r\n\r\n\r\r\n\n",
      "data: a\r\n\r\ndata: unfinished\r\n",
      // Only held bytes count as what came before a chunk: a CR held after an
      // event that was passed on, then LF, is no blank line.
      "data: a\n\n\r\ndata: b",
    ];
    for (const s of streams) {
      for (const parts of splits(s)) {
        expect(checkAgainstModel(parts)).toBe(s);
      }
    }
    // Every two cuts, for one CRLF stream: three chunks, some of them empty.
    const s = "id: 1\r\ndata: a\r\n\r\ndata: b\r\n\r\n";
    for (let i = 0; i <= s.length; i++) {
      for (let j = i; j <= s.length; j++) {
        expect(checkAgainstModel([s.slice(0, i), s.slice(i, j), s.slice(j)])).toBe(s);
      }
    }
  });

  it("holds a boundary split as CR | LF until its last byte, then passes the whole event", () => {
    const f = new SseEventFramer();
    expect(dec(f.push(enc("data: a\r")))).toBe("");
    expect(dec(f.push(enc("\n")))).toBe("");
    expect(dec(f.push(enc("\r")))).toBe("");
    expect(f.held).toBe(10);
    expect(dec(f.push(enc("\ndata: b")))).toBe("data: a\r\n\r\n");
    expect(f.held).toBe(7);
  });

  it("keeps what it holds when the bytes it returned are transferred (a byte stream detaches them)", () => {
    const f = new SseEventFramer();
    const out = f.push(enc("data: 1\n\ndata: {\"par"));
    expect(dec(out)).toBe("data: 1\n\n");
    structuredClone(out.buffer, { transfer: [out.buffer as ArrayBuffer] });
    expect(out.buffer.byteLength).toBe(0);
    expect(dec(f.push(enc("t\":1}\n\n")))).toBe('data: {"part":1}\n\n');
  });

  it("keeps what it holds when the joined bytes it returned, or what it flushed, are transferred", () => {
    const f = new SseEventFramer();
    f.push(enc("data: {\"a"));
    f.push(enc("\":1"));
    const out = f.push(enc("}\n\ndata: {\"b"));
    expect(dec(out)).toBe('data: {"a":1}\n\n');
    structuredClone(out.buffer, { transfer: [out.buffer as ArrayBuffer] });
    f.push(enc("\":2"));
    const rest = f.flush();
    expect(dec(rest)).toBe('data: {"b":2');
    structuredClone(rest.buffer, { transfer: [rest.buffer as ArrayBuffer] });
    expect(dec(f.push(enc("data: 3\n\n")))).toBe("data: 3\n\n");
  });

  it("holds an unfinished event of exactly MAX_SSE_EVENT_BYTES, and passes it whole when it ends", () => {
    const f = new SseEventFramer();
    expect(f.push(dataLine(MAX_SSE_EVENT_BYTES - KiB)).length).toBe(0);
    expect(f.push(dataLine(KiB)).length).toBe(0);
    expect(f.held).toBe(MAX_SSE_EVENT_BYTES);
    expect(f.overflowed).toBe(false);
    const out = f.push(enc("\ndata: next"));
    expect(out.length).toBe(MAX_SSE_EVENT_BYTES + 1);
    expect(lastEventBoundary(out)).toBe(out.length);
    expect(f.held).toBe(10);
    expect(f.overflowed).toBe(false);
  });

  it("passes an event of exactly MAX_SSE_EVENT_BYTES pushed in 1 KiB chunks", () => {
    const f = new SseEventFramer();
    let forwarded = 0;
    for (let i = 0; i < MAX_SSE_EVENT_BYTES / KiB; i++) {
      const chunk = dataLine(KiB);
      if (i === MAX_SSE_EVENT_BYTES / KiB - 1) chunk[KiB - 2] = 0x0a;
      forwarded += f.push(chunk).length;
    }
    expect(forwarded).toBe(MAX_SSE_EVENT_BYTES);
    expect(f.overflowed).toBe(false);
    expect(f.held).toBe(0);
  });

  it("overflows when the unfinished event would pass MAX_SSE_EVENT_BYTES by one byte", () => {
    const f = new SseEventFramer();
    f.push(dataLine(MAX_SSE_EVENT_BYTES));
    expect(f.overflowed).toBe(false);
    expect(f.push(enc("x")).length).toBe(0);
    expect(f.overflowed).toBe(true);
    expect(f.held).toBe(0);

    const one = new SseEventFramer();
    expect(one.push(dataLine(MAX_SSE_EVENT_BYTES + 1)).length).toBe(0);
    expect(one.overflowed).toBe(true);
    expect(one.held).toBe(0);
  });

  it("returns the events before an overflowing tail, in the same chunk or the held ones", () => {
    const tail = dataLine(MAX_SSE_EVENT_BYTES + 1);
    const chunk = new Uint8Array(9 + tail.length);
    chunk.set(enc("data: 1\n\n"), 0);
    chunk.set(tail, 9);
    const f = new SseEventFramer();
    expect(dec(f.push(chunk))).toBe("data: 1\n\n");
    expect(f.overflowed).toBe(true);
    expect(f.held).toBe(0);

    const g = new SseEventFramer();
    g.push(enc("data: {\"a"));
    // The blank line ends the held event; what follows it is one byte too long.
    const next = new Uint8Array(6 + tail.length);
    next.set(enc("\":1}\n\n"), 0);
    next.set(tail, 6);
    expect(dec(g.push(next))).toBe('data: {"a":1}\n\n');
    expect(g.overflowed).toBe(true);
    expect(g.held).toBe(0);
  });

  it("a stream of one 8 MiB event in 1 KiB chunks overflows once past the cap, never holding more", () => {
    const f = new SseEventFramer();
    const pushes = (8 * MAX_SSE_EVENT_BYTES) / 4 / KiB; // 8 MiB
    let overflowedAt = -1;
    for (let i = 0; i < pushes; i++) {
      expect(f.push(dataLine(KiB)).length).toBe(0);
      expect(f.held).toBeLessThanOrEqual(MAX_SSE_EVENT_BYTES);
      if (f.overflowed && overflowedAt < 0) overflowedAt = i;
    }
    // 4096 chunks are exactly the cap; the 4097th would pass it.
    expect(overflowedAt).toBe(MAX_SSE_EVENT_BYTES / KiB);
    expect(f.overflowed).toBe(true);
    expect(f.held).toBe(0);
    expect(f.push(enc("\n\ndata: 2\n\n")).length).toBe(0);
    expect(f.flush().length).toBe(0);
    expect(f.overflowed).toBe(true);
  });

  it("forwards a 3 MiB event pushed as 3,072 chunks of 1 KiB, byte for byte, when it ends", () => {
    // No timing here: the framer's work is linear by construction (see
    // sse-framing.ts); before, each chunk rescanned and recopied all it held.
    const f = new SseEventFramer();
    const count = 3 * KiB;
    const sent = new Uint8Array(count * KiB);
    let got: Uint8Array = new Uint8Array(0);
    for (let i = 0; i < count; i++) {
      const chunk = dataLine(KiB);
      chunk.set(enc(String(i)), 6);
      if (i === count - 1) chunk[KiB - 2] = 0x0a;
      sent.set(chunk, i * KiB);
      const out = f.push(chunk);
      if (i < count - 1) {
        expect(out.length).toBe(0);
        expect(f.held).toBe((i + 1) * KiB);
      } else {
        got = out;
      }
    }
    expect(got.length).toBe(sent.length);
    expect(Buffer.from(got.buffer, got.byteOffset, got.byteLength).equals(Buffer.from(sent))).toBe(true);
    expect(f.held).toBe(0);
    expect(f.overflowed).toBe(false);
  });
});
