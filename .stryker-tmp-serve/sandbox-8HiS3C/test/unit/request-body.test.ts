/** Bodies read before authentication (src/proxy/serve/body.ts): the per-client and per-isolate ledger, and reads charged to it. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { BodyHolds, bodyRefusal, openDuplexUpload, readBoundedBody, unauthenticatedHolds } from "../../src/proxy/serve/body.ts";

const limits = { clientBodies: 2, clientBytes: 100, isolateBodies: 3, isolateBytes: 250 };
const pace = { idleMs: 10_000, minBytesPerSecond: 1024 };

describe("BodyHolds", () => {
  it("bounds each client's bodies and bytes, and gives them back on close", () => {
    const holds = new BodyHolds(limits);
    const a = holds.open("a");
    const b = holds.open("a");
    if (typeof a === "string" || typeof b === "string") throw new Error("opened");
    expect(holds.open("a")).toBe("client_holds");
    expect(a.take(60)).toBeNull();
    expect(b.take(41)).toBe("client_holds");
    expect(b.take(40)).toBeNull();
    // A body alone is not held to the share (its deployment's body limit bounds it).
    const lone = new BodyHolds(limits).open("z");
    if (typeof lone === "string") throw new Error("opened");
    expect(lone.take(500)).toBeNull();
    expect(holds.heldBy("a")).toEqual({ bodies: 2, bytes: 100 });
    a.close();
    a.close();
    expect(holds.heldBy("a")).toEqual({ bodies: 1, bytes: 40 });
    b.close();
    expect(holds.heldBy("a")).toEqual({ bodies: 0, bytes: 0 });
    expect(holds.bodies).toBe(0);
    expect(holds.bytes).toBe(0);
  });

  it("bounds the isolate's total over all clients", () => {
    const holds = new BodyHolds(limits);
    const opened = ["a", "b", "c"].map((c) => holds.open(c));
    expect(holds.open("d")).toBe("isolate_holds");
    const [a, b, c] = opened as Exclude<(typeof opened)[number], string>[];
    expect(a!.take(100)).toBeNull();
    expect(b!.take(100)).toBeNull();
    expect(c!.take(51)).toBe("isolate_holds");
    expect(c!.take(50)).toBeNull();
    a!.close();
    expect(holds.open("d")).not.toBe("isolate_holds");
  });
});

describe("readBoundedBody", () => {
  const post = (body: BodyInit, headers: Record<string, string> = {}) => new Request("http://edge/x", { method: "POST", body, headers, duplex: "half" } as RequestInit);

  it("reads a body chunk by chunk into one buffer and gives the client's hold back", async () => {
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new TextEncoder().encode("hello "));
        c.enqueue(new TextEncoder().encode("world"));
        c.close();
      },
    });
    const read = await readBoundedBody(post(stream), 1_000, pace, "client-1");
    expect(new TextDecoder().decode(read as ArrayBuffer)).toBe("hello world");
    expect(unauthenticatedHolds.heldBy("client-1")).toEqual({ bodies: 0, bytes: 0 });
  });

  it("refuses a sized body the client's hold cannot take, beside what it holds, before reading a byte of it", async () => {
    let pulled = 0;
    const stream = new ReadableStream<Uint8Array>({ pull: () => void pulled++ }, { highWaterMark: 0 });
    const held = unauthenticatedHolds.open("client-2");
    if (typeof held === "string") throw new Error("opened");
    expect(held.take(1024)).toBeNull();
    const read = await readBoundedBody(post(stream, { "content-length": String(16 * 1024 * 1024) }), 20 * 1024 * 1024, pace, "client-2");
    held.close();
    expect(read).toBe("client_holds");
    expect(pulled).toBe(0);
    expect(bodyRefusal("client_holds", 0, "r").status).toBe(429);
    expect(bodyRefusal("isolate_holds", 0, "r").status).toBe(503);
    expect(bodyRefusal("too_slow", 0, "r").status).toBe(408);
  });

  it("charges a chunked body as it arrives and stops it once the client's share is used by its bodies together", async () => {
    const chunk = new Uint8Array(1024 * 1024);
    const endless = () => {
      let sent = 0;
      const stream = new ReadableStream<Uint8Array>({
        pull(c) {
          sent++;
          c.enqueue(chunk);
        },
      });
      return { stream, sent: () => sent };
    };
    // One body alone may reach its own limit (here 20 MiB), past the client's 16 MiB share.
    const alone = endless();
    expect(await readBoundedBody(post(alone.stream), 20 * 1024 * 1024, pace, "client-3")).toBe("too_large");
    expect(alone.sent()).toBeGreaterThan(20);
    // With another body held, the share counts both.
    const holds = unauthenticatedHolds.open("client-3");
    if (typeof holds === "string") throw new Error("opened");
    expect(holds.take(8 * 1024 * 1024)).toBeNull();
    const second = endless();
    expect(await readBoundedBody(post(second.stream), 100 * 1024 * 1024, pace, "client-3")).toBe("client_holds");
    expect(second.sent()).toBeLessThanOrEqual(10);
    holds.close();
    expect(unauthenticatedHolds.heldBy("client-3")).toEqual({ bodies: 0, bytes: 0 });
    expect(unauthenticatedHolds.bytes).toBe(0);
  });
});

describe("duplex uploads per client (issue 51: an off-by-one was caught only end to end)", () => {
  it("gives a client exactly `max` uploads in flight per deployment, and one more once one ends", () => {
    const opened = [openDuplexUpload("dup", "ip:1", 2), openDuplexUpload("dup", "ip:1", 2)];
    expect(opened.every((r) => r !== null)).toBe(true);
    expect(openDuplexUpload("dup", "ip:1", 2)).toBeNull();
    // Another client, another deployment: their own.
    const other = openDuplexUpload("dup", "ip:2", 2);
    const elsewhere = openDuplexUpload("dup2", "ip:1", 2);
    expect(other).not.toBeNull();
    expect(elsewhere).not.toBeNull();
    opened[0]!();
    opened[0]!(); // released once, however often called
    const again = openDuplexUpload("dup", "ip:1", 2);
    expect(again).not.toBeNull();
    expect(openDuplexUpload("dup", "ip:1", 2)).toBeNull();
    for (const release of [opened[1], again, other, elsewhere]) release!();
  });
});
