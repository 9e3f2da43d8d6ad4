/**
 * The body stage (src/proxy/serve/body.ts) in each of its branches: the declared
 * length, the refusals' statuses, reads at their exact bounds, the hold a read
 * charges, the drain of a refused request's body, and the dispatch body a
 * deployment's limits make of a request (held and replayable, or streamed). Issue 51:
 * the folder's mutation score; each test here was written against a mutant that
 * survived the other unit tests.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import {
  BodyHolds,
  MIN_UPLOAD_PROOF_BYTES,
  PacedReader,
  TIMED_OUT,
  UNAUTHENTICATED_HOLD_LIMITS,
  bodyRefusal,
  checkDeclaredLength,
  clientOf,
  declaredLength,
  dispatchBody,
  drainUnreadBody,
  pacedBody,
  prepareBody,
  readBoundedBody,
  unauthenticatedHolds,
  uploadDeadline,
  uploadPaceOf,
  uploadTooSlow,
  withinMs,
  type DispatchBody,
} from "../../src/proxy/serve/body.ts";
import { bodySha256 } from "../../src/protocol/index.ts";
import { partStream, type StreamEnd } from "../fixtures/streams.ts";

const pace = { idleMs: 10_000, minBytesPerSecond: 1024 };
const enc = new TextEncoder();

const bytes = (n: number, fill = 97) => new Uint8Array(n).fill(fill);
const post = (body: BodyInit | null, headers: Record<string, string> = {}, method = "POST") =>
  new Request("http://edge/x", { method, body, headers, duplex: "half" } as RequestInit);
const errorOf = async (res: Response) => ((await res.json()) as { error: { code: string; message: string; request_id?: string } }).error;

afterEach(() => {
  vi.useRealTimers();
});

describe("the declared Content-Length", () => {
  it("is a number of at most 15 digits and nothing else; absent is undefined, anything else malformed", () => {
    const h = (v?: string) => new Headers(v === undefined ? {} : { "content-length": v });
    expect(declaredLength(h())).toBeUndefined();
    expect(declaredLength(h("0"))).toBe(0);
    expect(declaredLength(h("123"))).toBe(123);
    expect(declaredLength(h("999999999999999"))).toBe(999_999_999_999_999);
    for (const bad of ["12a", "a12", "1 2", "-1", "1e3", "", "1234567890123456"]) expect(declaredLength(h(bad)), bad).toBeNull();
  });

  it("is checked against the limit: 400 when malformed, 413 past it, its size up to it", async () => {
    const h = (v?: string) => new Headers(v === undefined ? {} : { "content-length": v });
    const malformed = checkDeclaredLength(h("x"), 10, "r1");
    expect(malformed).toBeInstanceOf(Response);
    expect((malformed as Response).status).toBe(400);
    expect(await errorOf(malformed as Response)).toMatchObject({ code: "bad_request", message: "invalid Content-Length header", request_id: "r1" });
    const over = checkDeclaredLength(h("11"), 10, "r2") as Response;
    expect(over.status).toBe(413);
    expect(await errorOf(over)).toMatchObject({ code: "payload_too_large", message: "request body of 11 bytes exceeds 10", request_id: "r2" });
    expect(checkDeclaredLength(h("10"), 10, "r3")).toEqual({ size: 10 });
    expect(checkDeclaredLength(h(), 10, "r4")).toEqual({ size: undefined });
  });
});

describe("a client known by its address", () => {
  it("is ip: and cf-connecting-ip, or ip: alone without one", () => {
    expect(clientOf(new Headers({ "cf-connecting-ip": "203.0.113.7" }))).toBe("ip:203.0.113.7");
    expect(clientOf(new Headers())).toBe("ip:");
  });
});

describe("the refusals of a body", () => {
  it("each failure has its status, code, request id and, for the holds, a Retry-After", async () => {
    const cases = [
      ["too_large", 413, "payload_too_large", "request body exceeds 7 bytes"],
      ["too_slow", 408, "request_timeout", "the request body arrived too slowly"],
      ["aborted", 400, "bad_request", "the request body ended early: the client's connection was lost"],
      ["client_holds", 429, "rate_limited", "this client has too many request bodies in flight here before authentication; retry shortly"],
      ["isolate_holds", 503, "queue_full", "too many request bodies in flight here before authentication; retry shortly"],
    ] as const;
    for (const [failure, status, code, message] of cases) {
      const res = bodyRefusal(failure, 7, `req-${failure}`);
      expect(res.status, failure).toBe(status);
      expect(await errorOf(res), failure).toEqual({ code, message, type: expect.any(String), request_id: `req-${failure}` });
      expect(res.headers.get("retry-after"), failure).toBe(failure.endsWith("_holds") ? "1" : null);
    }
    const slow = uploadTooSlow("r");
    expect(slow.status).toBe(408);
    expect(slow.headers.get("x-request-id")).toBe("r");
  });
});

describe("the isolate's ledger of unauthenticated bodies", () => {
  it("lets a client hold 16 MiB in all by default, and forgets a client once its bodies close", () => {
    expect(UNAUTHENTICATED_HOLD_LIMITS).toEqual({ clientBodies: 64, clientBytes: 16 * 1024 * 1024, isolateBodies: 1024, isolateBytes: 64 * 1024 * 1024 });
    const holds = new BodyHolds();
    const a = holds.open("a");
    const b = holds.open("a");
    if (typeof a === "string" || typeof b === "string") throw new Error("opened");
    expect(a.take(8 * 1024 * 1024)).toBeNull();
    expect(b.take(8 * 1024 * 1024)).toBeNull();
    expect(b.take(1)).toBe("client_holds");
    expect(holds.clients).toBe(1);
    a.close();
    b.close();
    // No entry per address outlives its bodies: a scan of many addresses leaves nothing behind.
    expect(holds.clients).toBe(0);
  });
});

describe("readBoundedBody at its bounds", () => {
  it("takes a body of exactly the limit, and refuses one byte more (declared, or chunked and cancelled)", async () => {
    expect(new Uint8Array((await readBoundedBody(post(bytes(10)), 10, pace)) as ArrayBuffer)).toEqual(bytes(10));
    expect(await readBoundedBody(post(bytes(11)), 10, pace)).toBe("too_large");
    const { stream, seen } = partStream([bytes(6), bytes(5), bytes(100)]);
    expect(await readBoundedBody(post(stream), 10, pace)).toBe("too_large");
    expect(seen.cancelled).toBe("too large");
    expect(seen.pulls).toBeLessThan(4);
  });

  it("refuses a declared size past the limit before reading a byte", async () => {
    const { stream, seen } = partStream([bytes(5)]);
    const req = new Request("http://edge/x", { method: "POST", body: stream, headers: { "content-length": "50" }, duplex: "half" } as RequestInit);
    expect(await readBoundedBody(req, 10, pace)).toBe("too_large");
    expect(seen.pulls).toBeLessThanOrEqual(1);
    expect(req.bodyUsed).toBe(false);
  });

  it("answers an empty buffer for no body", async () => {
    const read = await readBoundedBody(new Request("http://edge/x"), 10, pace);
    expect(read).toBeInstanceOf(ArrayBuffer);
    expect((read as ArrayBuffer).byteLength).toBe(0);
  });

  it("keeps a body's own bytes when its one chunk is a view into a larger buffer", async () => {
    const backing = enc.encode("xxhello-worldyy");
    const { stream } = partStream([backing.subarray(2, 13)]);
    expect(new TextDecoder().decode((await readBoundedBody(post(stream), 100, pace)) as ArrayBuffer)).toBe("hello-world");
    const whole = enc.encode("whole");
    const { stream: s2 } = partStream([whole.subarray(0, 3)]);
    expect(new TextDecoder().decode((await readBoundedBody(post(s2), 100, pace)) as ArrayBuffer)).toBe("who");
  });

  it("reports a connection lost mid-body as aborted", async () => {
    const { stream } = partStream([bytes(3)], "error");
    expect(await readBoundedBody(post(stream), 100, pace)).toBe("aborted");
  });

  it("charges a sized body its size (not more) before reading it, and gives the hold back", async () => {
    const client = "ip:sized-charge";
    // 16 MiB is the client's share: a body whose declared size fits is read, even when the limit is larger.
    const holds: Exclude<ReturnType<typeof unauthenticatedHolds.open>, string>[] = [];
    const other = unauthenticatedHolds.open(client);
    if (typeof other === "string") throw new Error("opened");
    holds.push(other);
    expect(other.take(16 * 1024 * 1024 - 20)).toBeNull();
    try {
      const fits = new Request("http://edge/x", { method: "POST", body: bytes(20), headers: { "content-length": "20" } });
      expect(new Uint8Array((await readBoundedBody(fits, 1_000_000, pace, client)) as ArrayBuffer)).toEqual(bytes(20));
      const { stream, seen } = partStream([bytes(21)]);
      const over = new Request("http://edge/x", { method: "POST", body: stream, headers: { "content-length": "21" }, duplex: "half" } as RequestInit);
      expect(await readBoundedBody(over, 1_000_000, pace, client)).toBe("client_holds");
      expect(seen.cancelled).toBe("held too much");
    } finally {
      for (const h of holds) h.close();
    }
    expect(unauthenticatedHolds.heldBy(client)).toEqual({ bodies: 0, bytes: 0 });
  });

  it("charges nobody for an authenticated body (no client), however full the ledger", async () => {
    const opened = [];
    for (let i = 0; i < UNAUTHENTICATED_HOLD_LIMITS.clientBodies; i++) opened.push(unauthenticatedHolds.open("undefined"));
    try {
      expect(new Uint8Array((await readBoundedBody(post(bytes(4)), 100, pace)) as ArrayBuffer)).toEqual(bytes(4));
    } finally {
      for (const h of opened) if (typeof h !== "string") h.close();
    }
  });

  it("refuses a client whose bodies are all open already, without reading", async () => {
    const client = "ip:many-bodies";
    const opened = [];
    for (let i = 0; i < UNAUTHENTICATED_HOLD_LIMITS.clientBodies; i++) opened.push(unauthenticatedHolds.open(client));
    try {
      expect(await readBoundedBody(post(bytes(4)), 100, pace, client)).toBe("client_holds");
    } finally {
      for (const h of opened) if (typeof h !== "string") h.close();
    }
  });
});

describe("drainUnreadBody", () => {
  const sized = (chunks: Uint8Array[], length: number, end: StreamEnd = "close") => {
    const s = partStream(chunks, end);
    return { ...s, req: new Request("http://edge/x", { method: "POST", body: s.stream, headers: { "content-length": String(length) }, duplex: "half" } as RequestInit) };
  };

  it("reads a refused request's sized body to its end", async () => {
    const { req, seen } = sized([bytes(3), bytes(3)], 6);
    await drainUnreadBody(req, 100);
    expect(seen.pulls).toBe(3);
  });

  it("leaves alone a body past the limit, an unsized one, and one already read", async () => {
    const over = sized([bytes(3)], 101);
    await drainUnreadBody(over.req, 100);
    expect(over.seen.pulls).toBeLessThanOrEqual(1);
    const { stream, seen } = partStream([bytes(3), bytes(3)]);
    await drainUnreadBody(post(stream), 100);
    expect(seen.pulls).toBeLessThanOrEqual(1);
    const used = sized([bytes(3)], 3);
    await used.req.arrayBuffer();
    await expect(drainUnreadBody(used.req, 100)).resolves.toBeUndefined();
    await expect(drainUnreadBody(new Request("http://edge/x"), 100)).resolves.toBeUndefined();
  });

  it("takes a body of exactly the limit", async () => {
    const { req, seen } = sized([bytes(5), bytes(5)], 10);
    await drainUnreadBody(req, 10);
    expect(seen.pulls).toBe(3);
  });

  it("stops at the pace: a body that stalls is let go, not waited on", async () => {
    vi.useFakeTimers({ now: 1_000_000 });
    const { req, seen } = sized([bytes(3)], 10, "hang");
    let done = false;
    const drained = drainUnreadBody(req, 100, { idleMs: 500, minBytesPerSecond: 0 }).then(() => (done = true));
    await vi.advanceTimersByTimeAsync(499);
    expect(done).toBe(false);
    await vi.advanceTimersByTimeAsync(2);
    await drained;
    expect(done).toBe(true);
    expect(seen.cancelled).toBe("too slow");
  });
});

describe("the upload pace", () => {
  it("is the deployment's limits, and 10 s and 1 KiB/s where none is set", async () => {
    expect(uploadPaceOf({ uploadIdleTimeoutMs: 123, uploadMinBytesPerSecond: 45 })).toEqual({ idleMs: 123, minBytesPerSecond: 45 });
    const { DEFAULT_UPLOAD_PACE } = await import("../../src/proxy/serve/body.ts");
    expect(DEFAULT_UPLOAD_PACE).toEqual({ idleMs: 10_000, minBytesPerSecond: 1024 });
  });

  it("has no rate floor at 0 bytes/s even before a byte arrived", () => {
    expect(uploadDeadline(1_000, 1_000, 0, { idleMs: 500, minBytesPerSecond: 0 })).toBe(1_500);
  });

  it("withinMs waits for a value that comes before the time, and clears its timer either way", async () => {
    vi.useFakeTimers();
    const later = new Promise<string>((resolve) => setTimeout(resolve, 10, "v"));
    const got = withinMs(later, 1_000);
    await vi.advanceTimersByTimeAsync(10);
    expect(await got).toBe("v");
    expect(vi.getTimerCount()).toBe(0);
    const failing = new Promise<string>((_, reject) => setTimeout(reject, 10, new Error("boom")));
    const failed = withinMs(failing, 1_000);
    const caught = failed.catch((e: Error) => e.message);
    await vi.advanceTimersByTimeAsync(10);
    expect(await caught).toBe("boom");
    expect(vi.getTimerCount()).toBe(0);
  });

  it("withinMs with no bound (Infinity) waits as long as it takes", async () => {
    vi.useFakeTimers();
    const slow = new Promise<string>((resolve) => setTimeout(resolve, 60_000, "late"));
    const got = withinMs(slow, Infinity);
    await vi.advanceTimersByTimeAsync(60_000);
    expect(await got).toBe("late");
  });

  it("a PacedReader's next read times out when the pace says, not later", async () => {
    vi.useFakeTimers({ now: 5_000_000 });
    const { stream, seen } = partStream([], "hang");
    const reader = new PacedReader(stream, { idleMs: 300, minBytesPerSecond: 0 });
    let got: unknown = "pending";
    const read = reader.read().then((r) => (got = r));
    await vi.advanceTimersByTimeAsync(299);
    expect(got).toBe("pending");
    await vi.advanceTimersByTimeAsync(2);
    await read;
    expect(got).toBe("too_slow");
    expect(seen.cancelled).toBe("too slow");
  });

  it("bytes that arrive restart the idle timer: a body sent slowly but within the pace is read whole", async () => {
    vi.useFakeTimers({ now: 7_000_000 });
    let push: ((c: Uint8Array | null) => void) | undefined;
    const stream = new ReadableStream<Uint8Array>({
      start(c) {
        push = (chunk) => (chunk ? c.enqueue(chunk) : c.close());
      },
    });
    const reader = new PacedReader(stream, { idleMs: 300, minBytesPerSecond: 0 });
    const got: unknown[] = [];
    const loop = (async () => {
      for (;;) {
        const r = await reader.read();
        got.push(r);
        if (!(r instanceof Uint8Array)) return;
      }
    })();
    for (let i = 0; i < 4; i++) {
      await vi.advanceTimersByTimeAsync(200);
      push!(bytes(1));
    }
    await vi.advanceTimersByTimeAsync(200);
    push!(null);
    await loop;
    expect(got.filter((r) => r instanceof Uint8Array)).toHaveLength(4);
    expect(got.at(-1)).toBeNull();
    expect(reader.received).toBe(4);
  });
});

describe("pacedBody's reports and its settled callback", () => {
  it("reports a lost connection as aborted (not too slow), and settles once", async () => {
    const { stream } = partStream([bytes(2)], "error");
    let settled = 0;
    const paced = pacedBody(new PacedReader(stream, pace), 100, [], () => settled++);
    const read = new Response(paced.body).arrayBuffer();
    await expect(read).rejects.toThrow("the client's connection was lost");
    expect(paced.aborted()).toBe(true);
    expect(paced.tooSlow()).toBe(false);
    expect(paced.overLimit()).toBe(false);
    expect(settled).toBe(1);
  });

  it("settles at the end, past the limit, and when the receiver cancels; and cancels its source then", async () => {
    let settled = 0;
    const end = pacedBody(new PacedReader(partStream([bytes(2)]).stream, pace), 100, [], () => settled++);
    expect(new Uint8Array(await new Response(end.body).arrayBuffer())).toEqual(bytes(2));
    expect(end.aborted()).toBe(false);
    expect(end.tooSlow()).toBe(false);
    expect(settled).toBe(1);

    const big = partStream([bytes(60), bytes(60), bytes(60)], "hang");
    const over = pacedBody(new PacedReader(big.stream, pace), 100, [], () => settled++);
    await expect(new Response(over.body).arrayBuffer()).rejects.toThrow("request body too large");
    expect(settled).toBe(2);
    await vi.waitFor(() => expect(big.seen.cancelled).toBe("too large"));

    const held = partStream([bytes(2)], "hang");
    const cancelled = pacedBody(new PacedReader(held.stream, pace), 100, [], () => settled++);
    await cancelled.body.cancel("client went");
    expect(settled).toBe(3);
    expect(held.seen.cancelled).toBe("client went");
    // Without a callback, nothing throws.
    const bare = pacedBody(new PacedReader(partStream([bytes(1)], "error").stream, pace), 100);
    await expect(new Response(bare.body).arrayBuffer()).rejects.toThrow();
    await pacedBody(new PacedReader(partStream([]).stream, pace), 100).body.cancel("x");
  });

  it("an ended stream says it was neither too slow nor aborted", async () => {
    vi.useFakeTimers({ now: 9_000_000 });
    const slow = partStream([bytes(1)], "hang");
    const paced = pacedBody(new PacedReader(slow.stream, { idleMs: 200, minBytesPerSecond: 0 }), 100);
    const read = new Response(paced.body).arrayBuffer().catch((e: Error) => e.message);
    await vi.advanceTimersByTimeAsync(250);
    expect(await read).toBe("request body arrived too slowly");
    expect(paced.tooSlow()).toBe(true);
    expect(paced.aborted()).toBe(false);
  });
});

describe("the dispatch body a deployment's limits make of a request", () => {
  const deployment = (limits: Record<string, unknown> = {}, policy: Record<string, unknown> = {}) =>
    defineDeployment({ name: "up", routePrefix: "/up", backend: { kind: "echo" }, limits: { maxRequestBodyBytes: 1_000_000, replayableBodyBytes: 8 * 1024, ...limits }, policy });
  const anon = (client: string) => ({ client, authenticated: false });
  const asBody = async (d: DispatchBody | Response | Promise<DispatchBody | Response>) => {
    const got = await d;
    if (got instanceof Response) throw new Error(`refused ${got.status}`);
    return got;
  };

  it("has no body for GET and HEAD, or a request without one, and answers without a promise", () => {
    for (const method of ["GET", "HEAD"]) {
      const d = dispatchBody(new Request("http://edge/x", { method }), deployment(), "r", anon("ip:g"));
      expect(d).not.toBeInstanceOf(Promise);
      expect((d as DispatchBody).body).toBeNull();
      expect((d as DispatchBody).replayable).toBe(true);
    }
    const none = dispatchBody(new Request("http://edge/x", { method: "POST" }), deployment(), "r", anon("ip:g"));
    expect((none as DispatchBody).body).toBeNull();
    // A DELETE with a body has one.
    const del = dispatchBody(new Request("http://edge/x", { method: "DELETE", body: "x" }), deployment(), "r", anon("ip:g"));
    expect(del).toBeInstanceOf(Promise);
  });

  it("holds a body that ends within the replayable bytes, and replays it", async () => {
    const d = await asBody(dispatchBody(post(bytes(3000)), deployment(), "r", anon("ip:h")));
    expect(d.replayable).toBe(true);
    expect(new Uint8Array(d.body as ArrayBuffer)).toEqual(bytes(3000));
    expect([d.overLimit(), d.tooSlow(), d.aborted()]).toEqual([false, false, false]);
    expect(unauthenticatedHolds.heldBy("ip:h")).toEqual({ bodies: 0, bytes: 0 });
  });

  it("reads at least MIN_UPLOAD_PROOF_BYTES first even when replayableBodyBytes is lower", async () => {
    expect(MIN_UPLOAD_PROOF_BYTES).toBe(4096);
    const d = await asBody(dispatchBody(post(partStream([bytes(3000), bytes(1000)]).stream), deployment({ replayableBodyBytes: 0 }), "r", anon("ip:p")));
    expect(d.replayable).toBe(true);
    expect((d.body as ArrayBuffer).byteLength).toBe(4000);
  });

  it("streams a longer unsized body after its first part, paced and counted against the limit", async () => {
    const chunks = [bytes(6000, 1), bytes(6000, 2), bytes(6000, 3)];
    const d = await asBody(dispatchBody(post(partStream(chunks).stream), deployment(), "r", anon("ip:s")));
    expect(d.replayable).toBe(false);
    expect(d.body).toBeInstanceOf(ReadableStream);
    const got = new Uint8Array(await new Response(d.body as ReadableStream).arrayBuffer());
    expect(got.byteLength).toBe(18000);
    expect(got[0]).toBe(1);
    expect(got[17999]).toBe(3);
    // Past the limit mid-flight.
    const over = await asBody(dispatchBody(post(partStream([bytes(9000), bytes(9000)]).stream), deployment({ maxRequestBodyBytes: 12_000 }), "r", anon("ip:s")));
    await expect(new Response(over.body as ReadableStream).arrayBuffer()).rejects.toThrow("request body too large");
    expect(over.overLimit()).toBe(true);
  });

  it("refuses a malformed or too large declared length, and a body past the limit in its first part", async () => {
    const bad = await dispatchBody(new Request("http://edge/x", { method: "POST", body: "abc", headers: { "content-length": "3x" } }), deployment(), "r", anon("ip:b"));
    expect((bad as Response).status).toBe(400);
    const big = await dispatchBody(new Request("http://edge/x", { method: "POST", body: "abcd", headers: { "content-length": "4" } }), deployment({ maxRequestBodyBytes: 3 }), "r", anon("ip:b"));
    expect((big as Response).status).toBe(413);
    const chunked = await dispatchBody(post(partStream([bytes(4)]).stream), deployment({ maxRequestBodyBytes: 3 }), "r-9", anon("ip:b"));
    expect((chunked as Response).status).toBe(413);
    expect((await errorOf(chunked as Response)).request_id).toBe("r-9");
  });

  it("charges an unauthenticated sender's hold and refuses it when full; an authenticated one is charged nothing", async () => {
    const client = "ip:full";
    const opened = [];
    for (let i = 0; i < UNAUTHENTICATED_HOLD_LIMITS.clientBodies; i++) opened.push(unauthenticatedHolds.open(client));
    try {
      const { stream, seen } = partStream([bytes(10)]);
      const refused = await dispatchBody(post(stream), deployment(), "r", anon(client));
      expect((refused as Response).status).toBe(429);
      expect(seen.cancelled).toBe("held too much");
      const ok = await asBody(dispatchBody(post(bytes(10)), deployment(), "r", { client, authenticated: true }));
      expect(ok.replayable).toBe(true);
    } finally {
      for (const h of opened) if (typeof h !== "string") h.close();
    }
    expect(unauthenticatedHolds.heldBy(client)).toEqual({ bodies: 0, bytes: 0 });
  });

  it("with duplexUploads, streams from the first byte and caps the client's uploads in flight", async () => {
    const d = deployment({ duplexUploads: true, duplexUploadsPerClient: 1 });
    const first = await asBody(dispatchBody(post(partStream([bytes(5)], "hang").stream), d, "r", anon("ip:dx")));
    expect(first.replayable).toBe(false);
    const { stream, seen } = partStream([bytes(5)]);
    const second = await dispatchBody(post(stream), d, "r", anon("ip:dx"));
    expect((second as Response).status).toBe(429);
    expect(await errorOf(second as Response)).toMatchObject({ code: "rate_limited", message: 'this client has 1 streamed uploads to "up" in flight here already; retry shortly' });
    expect(seen.cancelled).toBe("too many duplex uploads");
    first.release();
    const third = await asBody(dispatchBody(post(partStream([bytes(5)]).stream), d, "r", anon("ip:dx")));
    expect(third.replayable).toBe(false);
    expect(new Uint8Array(await new Response(third.body as ReadableStream).arrayBuffer())).toEqual(bytes(5));
    third.release();
  });

  it("prepareBody: a held body may repeat and carries its digest; a read one repeats only when safe; an empty one has no digest", async () => {
    const held = enc.encode('{"a":1}').buffer as ArrayBuffer;
    const fromRoute = await prepareBody(post(null), deployment(), "r", anon("ip:pb"), held);
    if (fromRoute instanceof Response) throw new Error("refused");
    expect(fromRoute.safeToRepeat).toBe(true);
    expect(fromRoute.body).toBe(held);
    expect(fromRoute.sha256).toBe(await bodySha256(held));

    const posted = await prepareBody(post(bytes(10)), deployment(), "r", anon("ip:pb"));
    if (posted instanceof Response) throw new Error("refused");
    expect(posted.safeToRepeat).toBe(false);
    expect(posted.sha256).toBe(await bodySha256(bytes(10).buffer as ArrayBuffer));
    const idempotent = await prepareBody(post(bytes(10)), deployment({}, { idempotent: true }), "r", anon("ip:pb"));
    expect((idempotent as DispatchBody & { safeToRepeat: boolean }).safeToRepeat).toBe(true);
    // Streamed: never repeated, even for an idempotent deployment, and not covered by a digest.
    const streamed = await prepareBody(post(partStream([bytes(9000), bytes(9000)]).stream), deployment({}, { idempotent: true }), "r", anon("ip:pb"));
    if (streamed instanceof Response) throw new Error("refused");
    expect(streamed.safeToRepeat).toBe(false);
    expect(streamed.sha256).toBe("");
    await (streamed.body as ReadableStream).cancel();
    const empty = await prepareBody(post(new Uint8Array(0)), deployment(), "r", anon("ip:pb"));
    expect((empty as { sha256: string }).sha256).toBe("");
    const refused = await prepareBody(new Request("http://edge/x", { method: "POST", body: "abc", headers: { "content-length": "3x" } }), deployment(), "r", anon("ip:pb"));
    expect((refused as Response).status).toBe(400);
  });
});

describe("TIMED_OUT", () => {
  it("is what withinMs gives when the time runs out", async () => {
    expect(await withinMs(new Promise(() => undefined), 0)).toBe(TIMED_OUT);
  });
});
