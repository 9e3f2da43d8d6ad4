/**
 * The reference replica's text and echo handlers (src/replica/handlers.ts) on a real
 * loopback HTTP server: what each answers, byte for byte and header for header, its
 * knobs (service time, delay, chunks and their spacing) and a client that leaves.
 * Waits are on events; the only clock readings are lower bounds on a deliberate delay.
 */
import { createServer, request, type IncomingMessage, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { echoHandler, textHandler, type RequestHandler } from "../../src/replica/handlers.ts";
import { waitFor } from "../fixtures/wait.ts";

const cleanup: (() => Promise<void>)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0)) await f();
});

const LOAD = { "x-switchyard-load": "seq=1;ongoing=1" };

/** Serves `handler`; `settled` resolves with each request's handler outcome. */
async function serve(handler: RequestHandler) {
  const settled: Promise<void>[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    settled.push(handler(req, res, () => LOAD));
  });
  await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
  cleanup.push(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, settled };
}

/** A request whose answer is read piece by piece: the head, then each chunk as it arrives. */
function open(url: string, method = "GET") {
  const chunks: string[] = [];
  let onChunk = () => {};
  const req = request(url, { method });
  const head = new Promise<IncomingMessage>((resolve, reject) => {
    req.on("response", (res) => {
      res.setEncoding("utf8");
      res.on("data", (c: string) => {
        chunks.push(c);
        onChunk();
      });
      resolve(res);
    });
    req.on("error", reject);
  });
  req.end();
  const chunk = (n: number) =>
    new Promise<void>((resolve) => {
      onChunk = () => chunks.length >= n && resolve();
      onChunk();
    });
  return { req, head, chunks, chunk };
}

describe("textHandler", () => {
  it("answers the text with its length, the load headers, and reads the body away", async () => {
    const { url } = await serve(textHandler("Hello world!"));
    const res = await fetch(url, { method: "POST", body: "x".repeat(100_000) });
    expect(res.status).toBe(200);
    expect(Object.fromEntries(res.headers)).toMatchObject({ "content-type": "text/plain; charset=utf-8", "content-length": "12", ...LOAD });
    expect(await res.text()).toBe("Hello world!");
  });

  it("with a service time: answers no sooner, and writes nothing for a client that left meanwhile", async () => {
    const { url } = await serve(textHandler("ok", { serviceMs: 150 }));
    const t0 = performance.now();
    expect(await (await fetch(url)).text()).toBe("ok");
    expect(performance.now() - t0).toBeGreaterThanOrEqual(140);
    // The client leaves once the handler has its request, a second before the answer.
    const slow = await serve(textHandler("ok", { serviceMs: 1_000 }));
    const settled = slow.settled;
    const gone = open(slow.url);
    gone.head.catch(() => undefined);
    await waitFor("the request to reach the handler", () => settled.length === 1);
    gone.req.destroy();
    await Promise.all(settled);
    expect(gone.chunks).toEqual([]);
  });
});

describe("echoHandler", () => {
  it("GET ?headers answers the request's headers as JSON", async () => {
    const { url } = await serve(echoHandler());
    const res = await fetch(`${url}/x?headers`, { headers: { "x-test": "1" } });
    expect(Object.fromEntries(res.headers)).toMatchObject({ "content-type": "application/json", ...LOAD });
    const text = await res.text();
    expect(res.headers.get("content-length")).toBe(String(Buffer.byteLength(text)));
    expect(JSON.parse(text)).toMatchObject({ "x-test": "1", host: url.slice("http://".length) });
  });

  it("GET streams N numbered lines, not cached; one by default; HEAD answers the head", async () => {
    const { url } = await serve(echoHandler());
    const res = await fetch(`${url}/s?chunks=3`);
    expect(Object.fromEntries(res.headers)).toMatchObject({ "content-type": "text/plain; charset=utf-8", "cache-control": "no-cache", ...LOAD });
    expect(await res.text()).toBe("chunk 0\nchunk 1\nchunk 2\n");
    expect(await (await fetch(`${url}/s`)).text()).toBe("chunk 0\n");
    expect(await (await fetch(`${url}/s?chunks=nope`)).text()).toBe("chunk 0\n");
    const head = await fetch(`${url}/s?chunks=2`, { method: "HEAD" });
    expect([head.status, head.headers.get("cache-control"), await head.text()]).toEqual([200, "no-cache", ""]);
  });

  it("spaces the lines interval_ms apart: the head and the first line come before the second is written", async () => {
    const { url } = await serve(echoHandler());
    const s = open(`${url}/s?chunks=2&interval_ms=60000`);
    const res = await s.head;
    expect(res.headers["x-switchyard-load"]).toBe(LOAD["x-switchyard-load"]);
    await s.chunk(1);
    expect(s.chunks).toEqual(["chunk 0\n"]);
    s.req.destroy();
  });

  it("does not wait after the last line (a minute's interval, one line: the answer ends at once)", async () => {
    const { url } = await serve(echoHandler());
    expect(await (await fetch(`${url}/s?chunks=1&interval_ms=60000`)).text()).toBe("chunk 0\n");
    expect(await (await fetch(`${url}/s?chunks=2&interval_ms=1`)).text()).toBe("chunk 0\nchunk 1\n");
  });

  it("a client that leaves between lines ends the stream at once (its slot frees now, not after the interval)", async () => {
    const { url, settled } = await serve(echoHandler());
    const s = open(`${url}/s?chunks=3&interval_ms=60000`);
    await s.chunk(1);
    s.req.destroy();
    await Promise.all(settled);
    expect(s.chunks).toEqual(["chunk 0\n"]);
  });

  it("delay_ms holds the head back; a client that leaves during it gets nothing; a bad value is no delay", async () => {
    const { url, settled } = await serve(echoHandler());
    const t0 = performance.now();
    expect(await (await fetch(`${url}/s?delay_ms=150`)).text()).toBe("chunk 0\n");
    expect(performance.now() - t0).toBeGreaterThanOrEqual(140);
    expect(await (await fetch(`${url}/s?delay_ms=soon&chunks=1`)).text()).toBe("chunk 0\n");
    const gone = open(`${url}/s?delay_ms=1000`);
    gone.head.catch(() => undefined);
    await waitFor("the request to reach the handler", () => settled.length === 3);
    gone.req.destroy();
    await Promise.all(settled);
    expect(gone.chunks).toEqual([]);
  });

  it("POST echoes the body as it arrives, with its content type (octet-stream when it has none), past backpressure", async () => {
    const { url } = await serve(echoHandler());
    const typed = await fetch(url, { method: "POST", headers: { "content-type": "application/x-ndjson" }, body: '{"a":1}\n' });
    expect(Object.fromEntries(typed.headers)).toMatchObject({ "content-type": "application/x-ndjson", ...LOAD });
    expect(await typed.text()).toBe('{"a":1}\n');
    // 8 MiB: more than the socket buffers hold, so the echo waits for drain.
    const big = Buffer.alloc(8 * 1024 * 1024, "ab");
    const res = await new Promise<{ type: string | undefined; bytes: Buffer }>((resolve, reject) => {
      const req = request(url, { method: "POST" }, (r) => {
        const parts: Buffer[] = [];
        // Read slowly at first: the replica's writes fill the socket.
        r.pause();
        setTimeout(() => r.resume(), 50);
        r.on("data", (c: Buffer) => parts.push(c));
        r.on("end", () => resolve({ type: r.headers["content-type"], bytes: Buffer.concat(parts) }));
      });
      req.on("error", reject);
      req.end(big);
    });
    expect(res.type).toBe("application/octet-stream");
    expect(res.bytes.equals(big)).toBe(true);
  });
});
