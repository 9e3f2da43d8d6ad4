import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { SseEventFramer, lastEventBoundary } from "../../src/proxy/sse-framing.ts";

const enc = (s: string) => new TextEncoder().encode(s);
const dec = (b: Uint8Array) => new TextDecoder().decode(b);

describe("lastEventBoundary", () => {
  it("finds the end of the last blank line, LF or CRLF", () => {
    expect(lastEventBoundary(enc("data: a\n\ndata: b"))).toBe(9);
    expect(lastEventBoundary(enc("data: a\r\n\r\n"))).toBe(11);
    expect(lastEventBoundary(enc("data: a\n"))).toBe(0);
    expect(lastEventBoundary(enc(""))).toBe(0);
    expect(lastEventBoundary(enc("\n\n"))).toBe(2);
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

  it("keeps what it holds when the bytes it returned are transferred (a byte stream detaches them)", () => {
    const f = new SseEventFramer();
    const out = f.push(enc("data: 1\n\ndata: {\"par"));
    expect(dec(out)).toBe("data: 1\n\n");
    structuredClone(out.buffer, { transfer: [out.buffer as ArrayBuffer] });
    expect(out.buffer.byteLength).toBe(0);
    expect(dec(f.push(enc("t\":1}\n\n")))).toBe('data: {"part":1}\n\n');
  });
});
