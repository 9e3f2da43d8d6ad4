/**
 * How a replica's answer body reaches the client (src/proxy/serve/dispatch.ts):
 * a stream whose replica fails mid-way ends with the edge's error event
 * (sseWithErrorEvent), a stream passed through a tap shows each chunk on its way
 * (tapped), and a sized body goes as it is (passAnswerBody). The same functions run
 * under workerd in test/workers/response-streams.test.ts; here they run in Node,
 * where the unit tests and mutation testing reach them (issue 51).
 */
import { describe, expect, it, vi } from "vitest";
import { passAnswerBody, sseWithErrorEvent, tapped } from "../../src/proxy/serve/dispatch.ts";
import { partStream } from "../fixtures/streams.ts";
import "../fixtures/workerd-streams.ts";

const enc = new TextEncoder();

describe("sseWithErrorEvent", () => {
  it("passes a stream that ends as it is, and settles when it ended", async () => {
    const passed = sseWithErrorEvent(partStream(["data: 1\n\n", "data: 2\n\n"], "close").stream, "r1", "req-1");
    expect(await new Response(passed.body).text()).toBe("data: 1\n\ndata: 2\n\n");
    await expect(passed.ended).resolves.toBeUndefined();
  });

  it("ends a stream whose replica failed with the edge's error event, naming the request, and logs the cause", async () => {
    const logged: string[] = [];
    const spy = vi.spyOn(console, "error").mockImplementation((m: string) => void logged.push(m));
    const passed = sseWithErrorEvent(partStream(["data: 1\n\n"], "error").stream, "r1", "req-2");
    const text = await new Response(passed.body).text();
    await vi.waitFor(() => expect(logged).toHaveLength(1));
    spy.mockRestore();
    const events = text.split("\n\n").filter(Boolean);
    expect(events[0]).toBe("data: 1");
    expect(JSON.parse(events[1]!.slice(6))).toEqual({ error: { code: "upstream_failed", message: "the replica failed mid-stream", type: expect.any(String), request_id: "req-2" } });
    expect(events).toHaveLength(2);
    expect(JSON.parse(logged[0]!)).toMatchObject({ msg: "stream failed", replica: "r1", request_id: "req-2", error: expect.stringContaining("Network connection lost") });
  });

  it("writes nothing more and logs nothing when the client has gone", async () => {
    const logged: string[] = [];
    const spy = vi.spyOn(console, "error").mockImplementation((m: string) => void logged.push(m));
    let cancelled = false;
    const source = new ReadableStream<Uint8Array>({
      pull(c) {
        c.enqueue(enc.encode("data: x\n\n"));
      },
      cancel() {
        cancelled = true;
      },
    });
    const passed = sseWithErrorEvent(source, "r1", "req-3");
    const reader = passed.body.getReader();
    await reader.read();
    await reader.cancel("client left");
    await passed.ended;
    await new Promise((r) => setTimeout(r, 10));
    spy.mockRestore();
    expect(cancelled).toBe(true);
    expect(logged).toEqual([]);
  });
});

describe("tapped", () => {
  it("shows each chunk to the observer on its way and passes them all", async () => {
    const seen: string[] = [];
    const passed = tapped(partStream(["a", "bc", "d"], "close").stream, (c) => seen.push(new TextDecoder().decode(c)), null);
    expect(await new Response(passed.body).text()).toBe("abcd");
    await passed.ended;
    expect(seen).toEqual(["a", "bc", "d"]);
  });

  it("settles (never rejects) when the replica's stream breaks", async () => {
    const passed = tapped(partStream(["a"], "error").stream, () => undefined, null);
    await expect(new Response(passed.body).text()).rejects.toThrow();
    await expect(passed.ended).resolves.toBeUndefined();
  });
});

describe("passAnswerBody", () => {
  it("a sized body goes as it is, with nothing to wait for; a stream goes through a pipe that says when it ended", async () => {
    const sized = new Response("hello", { headers: { "content-length": "5" } });
    const kept = passAnswerBody(sized, { sseErrors: true, replicaId: "r", requestId: "q" });
    expect(kept.body).toBe(sized.body);
    expect(kept.ended).toBeUndefined();
    const streamed = passAnswerBody(new Response(partStream(["x"], "error").stream), { sseErrors: true, replicaId: "r", requestId: "q" });
    const logged: string[] = [];
    const spy = vi.spyOn(console, "error").mockImplementation((m: string) => void logged.push(m));
    expect(await new Response(streamed.body).text()).toMatch(/^xdata: \{"error":\{"code":"upstream_failed"/);
    await vi.waitFor(() => expect(logged).toHaveLength(1));
    spy.mockRestore();
    const plain = passAnswerBody(new Response(partStream(["y"], "close").stream), { sseErrors: false, replicaId: "r", requestId: "q" });
    expect(await new Response(plain.body).text()).toBe("y");
    await expect(plain.ended).resolves.toBeUndefined();
    expect(passAnswerBody(new Response(null), { sseErrors: true, replicaId: "r", requestId: "q" }).body).toBeNull();
  });
});
