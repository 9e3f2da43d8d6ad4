/**
 * The HTTP/1.0 front: its pure helpers (request-line sniffing, header filtering), and,
 * with real sockets on loopback, how it bounds clients that never finish a request.
 */
// @ts-nocheck

import { once } from "node:events";
import { createServer as createHttpServer, request as httpRequest, type IncomingMessage, type Server as HttpServer } from "node:http";
import { connect, type AddressInfo, type Server, type Socket } from "node:net";
import { afterAll, beforeAll, describe, it, expect } from "vitest";
import { endToEndHeaders, httpVersionOf, screenRequestHead, startHttp10Front, type FrontOptions } from "../../src/local/http10-front.ts";

describe("httpVersionOf", () => {
  it("recognises HTTP/1.0 and HTTP/1.1 request lines", () => {
    expect(httpVersionOf("GET / HTTP/1.0")).toBe("1.0");
    expect(httpVersionOf("GET /hello?x=1 HTTP/1.1")).toBe("1.1");
    expect(httpVersionOf("POST /v1/chat/completions HTTP/1.0")).toBe("1.0");
    expect(httpVersionOf("OPTIONS * HTTP/1.1")).toBe("1.1");
    expect(httpVersionOf("CONNECT example.com:443 HTTP/1.1")).toBe("1.1");
  });

  it("returns null for anything else", () => {
    for (const line of [
      "",
      "GET / HTTP/2.0",
      "GET / HTTP/1.2",
      "GET / HTTP/0.9",
      "GET /",
      "get / HTTP/1.1",
      "GET / http/1.1",
      "GET  / HTTP/1.1",
      "GET / HTTP/1.1 ",
      " GET / HTTP/1.1",
      "GET / HTTP/1.1\r",
      "GET /a b HTTP/1.1",
      "GET\t/\tHTTP/1.1",
      "PRI * HTTP/2.0",
      "\u0016\u0003\u0001", // TLS ClientHello bytes
      "GET / HTTP/1.10",
    ]) {
      expect(httpVersionOf(line), JSON.stringify(line)).toBeNull();
    }
  });
});

describe("endToEndHeaders", () => {
  it("drops hop-by-hop headers and keeps the rest", () => {
    const out = endToEndHeaders({
      connection: "close",
      "keep-alive": "timeout=5",
      "proxy-connection": "keep-alive",
      "transfer-encoding": "chunked",
      te: "trailers",
      trailer: "x-t",
      upgrade: "h2c",
      host: "localhost:8787",
      "content-type": "application/json",
      "content-length": "2",
      "x-request-id": "r1",
    });
    expect(out).toEqual({ host: "localhost:8787", "content-type": "application/json", "content-length": "2", "x-request-id": "r1" });
  });

  it("keeps array values (e.g. set-cookie) and drops undefined ones", () => {
    const out = endToEndHeaders({ "set-cookie": ["a=1", "b=2"], "x-none": undefined, accept: "*/*" });
    expect(out).toEqual({ "set-cookie": ["a=1", "b=2"], accept: "*/*" });
    expect("x-none" in out).toBe(false);
  });

  it("returns a new object and leaves the input alone", () => {
    const input = { connection: "close", accept: "*/*" };
    const out = endToEndHeaders(input);
    expect(out).not.toBe(input);
    expect(input).toEqual({ connection: "close", accept: "*/*" });
  });

  it("handles no headers", () => {
    expect(endToEndHeaders({})).toEqual({});
  });

  // Finding (reported): unlike proxy/serve/request.ts, headers named in Connection are not removed
  // (RFC 9110 §7.6.1 says a proxy must remove them).
  it("drops headers named in Connection", () => {
    const out = endToEndHeaders({ connection: "x-hop", "x-hop": "1", accept: "*/*" });
    expect(out).toEqual({ accept: "*/*" });
  });
});

describe("startHttp10Front on loopback", () => {
  let target: HttpServer;
  let targetPort = 0;
  const fronts: Server[] = [];
  const clients: Socket[] = [];

  /** The target's request for `url`, once the front has forwarded it. */
  const targetRequest = (url: string) =>
    new Promise<IncomingMessage>((resolve) => {
      const onRequest = (req: IncomingMessage) => {
        if (req.url !== url) return;
        target.off("request", onRequest);
        resolve(req);
      };
      target.on("request", onRequest);
    });

  beforeAll(async () => {
    // Answers with the HTTP version it was spoken to in, so a test can tell relay from proxy.
    target = createHttpServer((req, res) => {
      req.on("error", () => {}); // a client abort; the slow-body test expects one
      req.resume();
      req.on("end", () => res.end(`hello ${req.method} ${req.url} ${req.httpVersion}`));
    });
    target.listen(0, "127.0.0.1");
    await once(target, "listening");
    targetPort = (target.address() as AddressInfo).port;
  });

  afterAll(async () => {
    for (const c of clients) c.destroy();
    target.closeAllConnections();
    await Promise.all([...fronts.map((f) => new Promise((r) => f.close(r))), new Promise((r) => target.close(r))]);
  });

  const front = async (o: Partial<FrontOptions> = {}): Promise<number> => {
    const f = await startHttp10Front({ host: "127.0.0.1", port: 0, targetHost: "127.0.0.1", targetPort, ...o });
    fronts.push(f);
    return (f.address() as AddressInfo).port;
  };

  /** A raw client socket; `received` collects what the front sends, `closed` settles when the socket closes. */
  const rawClient = async (port: number) => {
    const socket = connect({ host: "127.0.0.1", port });
    clients.push(socket);
    let received = "";
    socket.setEncoding("latin1");
    socket.on("data", (d: string) => (received += d));
    socket.on("error", () => {}); // a reset counts as closed too
    // Not events.once: it rejects on an 'error' first, and a client still writing when the
    // front hangs up gets one (ECONNRESET, EPIPE) before its 'close' (seen once under load).
    const closed = new Promise<string>((resolve) => socket.once("close", () => resolve(received)));
    await once(socket, "connect");
    return { socket, closed, received: () => received };
  };

  /** Resolves with everything received once `text` has arrived on `socket`. */
  const until = (socket: Socket, got: () => string, text: string) =>
    new Promise<string>((resolve, reject) => {
      const check = () => {
        if (!got().includes(text)) return;
        socket.off("data", check);
        resolve(got());
      };
      socket.on("data", check);
      socket.once("close", () => reject(new Error(`closed before ${JSON.stringify(text)}; got ${JSON.stringify(got())}`)));
      check();
    });

  it("closes a connection that sends nothing once the first-line timeout passes", async () => {
    const c = await rawClient(await front({ firstLineTimeoutMs: 200 }));
    expect(await c.closed).toBe("");
  });

  it("closes a connection that sends half a request line and stops", async () => {
    const c = await rawClient(await front({ firstLineTimeoutMs: 200 }));
    c.socket.write("GET /hel");
    expect(await c.closed).toBe("");
  });

  it("closes a connection that dribbles a request line byte by byte (the timeout is not an idle timeout)", async () => {
    const c = await rawClient(await front({ firstLineTimeoutMs: 200 }));
    // Keeps the connection busy until the front hangs up; an idle timeout would never fire.
    const dribble = setInterval(() => c.socket.writable && c.socket.write("G"), 20);
    expect(await c.closed.finally(() => clearInterval(dribble))).toBe("");
  });

  it("answers an HTTP/1.0 request through Node's server and closes the connection after it", async () => {
    const c = await rawClient(await front({ firstLineTimeoutMs: 200 }));
    c.socket.write("GET /hello HTTP/1.0\r\nHost: front\r\n\r\n");
    const response = await c.closed;
    expect(response).toMatch(/^HTTP\/1\.[01] 200 /);
    // Proxied: the target was spoken to by the front's own HTTP/1.1 client.
    expect(response.endsWith("hello GET /hello 1.1")).toBe(true);
  });

  it("relays an HTTP/1.1 request byte for byte", async () => {
    const port = await front({ firstLineTimeoutMs: 200 });
    const body = await new Promise<string>((resolve, reject) => {
      const req = httpRequest({ host: "127.0.0.1", port, path: "/hello?x=1", agent: false }, (res) => {
        let text = "";
        res.setEncoding("utf8");
        res.on("data", (d: string) => (text += d));
        res.on("end", () => resolve(`${res.statusCode} ${text}`));
      });
      req.on("error", reject);
      req.end();
    });
    expect(body).toBe("200 hello GET /hello?x=1 1.1");
  });

  it("leaves an idle relayed HTTP/1.1 keep-alive connection open past the first-line timeout", async () => {
    const port = await front({ firstLineTimeoutMs: 200 });
    const kept = await rawClient(port);
    kept.socket.write("GET /one HTTP/1.1\r\nHost: front\r\n\r\n");
    await until(kept.socket, kept.received, "hello GET /one 1.1");
    // A silent connection opened after the first request: when the front closes it, the kept
    // connection's first-line timer (same length, started earlier) would have fired too.
    const silent = await rawClient(port);
    await silent.closed;
    expect(kept.socket.destroyed).toBe(false);
    kept.socket.write("GET /two HTTP/1.1\r\nHost: front\r\n\r\n");
    expect(await until(kept.socket, kept.received, "hello GET /two 1.1")).toContain("hello GET /one 1.1");
    kept.socket.destroy();
  });

  it("answers 408 and closes an HTTP/1.0 request whose headers never finish (headersTimeout)", async () => {
    // A long first-line timeout, so the close can only come from Node's headers timeout.
    const c = await rawClient(await front({ firstLineTimeoutMs: 60_000, headersTimeoutMs: 200, requestTimeoutMs: 400 }));
    c.socket.write("GET /slow HTTP/1.0\r\nHost: front\r\n");
    expect(await c.closed).toMatch(/^HTTP\/1\.1 408 /);
  });

  it("answers 408 and closes an HTTP/1.0 request whose body never finishes (requestTimeout)", async () => {
    const c = await rawClient(await front({ firstLineTimeoutMs: 60_000, headersTimeoutMs: 200, requestTimeoutMs: 400 }));
    const forwarded = targetRequest("/slow-body");
    c.socket.write("POST /slow-body HTTP/1.0\r\nHost: front\r\nContent-Length: 10\r\n\r\nab");
    const proxied = await forwarded;
    // Not events.once: that rejects on the 'error' ("aborted") that comes with the close.
    const proxiedClosed = new Promise((resolve) => proxied.on("close", resolve));
    expect(await c.closed).toMatch(/^HTTP\/1\.1 408 /);
    // The proxied request is abandoned too, rather than left waiting for the rest of the body.
    await proxiedClosed;
    expect(proxied.complete).toBe(false);
  });

  it("refuses a first request with malformed framing with the edge's JSON 400 and closes, relaying nothing", async () => {
    for (const version of ["1.0", "1.1"]) {
      const c = await rawClient(await front());
      c.socket.write(`POST /dup HTTP/${version}\r\nHost: front\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd`);
      const answer = await c.closed;
      expect(answer, version).toMatch(/^HTTP\/1\.1 400 Bad Request\r\n/);
      expect(JSON.parse(answer.slice(answer.indexOf("\r\n\r\n") + 4))).toEqual({
        error: { code: "bad_request", message: "more than one Content-Length header", type: "invalid_request_error" },
      });
    }
  });

  it("answers 408 when the first request's headers stop coming, on HTTP/1.1 too", async () => {
    const c = await rawClient(await front({ headersTimeoutMs: 200 }));
    c.socket.write("GET /slow HTTP/1.1\r\nHost: front\r\n");
    expect(await c.closed).toMatch(/^HTTP\/1\.1 408 Request Timeout\r\n[\s\S]*"request_timeout"/);
  });
});

describe("screenRequestHead", () => {
  const head = (line: string, ...headers: string[]) => [line, "Host: edge", ...headers].join("\r\n");

  it("lets ordinary requests through", () => {
    expect(screenRequestHead(head("GET /hello HTTP/1.1"))).toBeNull();
    expect(screenRequestHead(head("POST /v1/completions HTTP/1.1", "Content-Length: 12"))).toBeNull();
    expect(screenRequestHead(head("POST /echo HTTP/1.1", "Transfer-Encoding: chunked"))).toBeNull();
    expect(screenRequestHead(head("POST /echo HTTP/1.1", "transfer-encoding: Chunked"))).toBeNull();
    expect(screenRequestHead(head("TRACE /hello HTTP/1.1"))).toBeNull(); // the edge answers it: 405 per deployment
    expect(screenRequestHead(head("GET /hello HTTP/1.0"))).toBeNull();
  });

  it("refuses what workerd answers with a plain-text 500 or 501", () => {
    const cases: [string, string, number][] = [
      [head("POST /x HTTP/1.1", "Content-Length: 3", "Content-Length: 4"), "more than one Content-Length", 400],
      [head("POST /x HTTP/1.1", "Content-Length: 3", "content-length: 3"), "more than one Content-Length", 400],
      [head("POST /x HTTP/1.1", "Content-Length: -1"), "invalid Content-Length", 400],
      [head("POST /x HTTP/1.1", "Content-Length: 1e3"), "invalid Content-Length", 400],
      [head("POST /x HTTP/1.1", "Transfer-Encoding: gzip"), "transfer codings", 400],
      [head("POST /x HTTP/1.1", "Transfer-Encoding: gzip, chunked"), "transfer codings", 400],
      [head("POST /x HTTP/1.1", "Transfer-Encoding: chunked", "Transfer-Encoding: chunked"), "transfer codings", 400],
      [head("POST /x HTTP/1.1", "Transfer-Encoding: chunked", "Content-Length: 4"), "Content-Length and Transfer-Encoding", 400],
      [head("GET http://evil.test/x HTTP/1.1"), "origin-form", 400],
      [head("OPTIONS * HTTP/1.1"), "origin-form", 400],
      [head("CONNECT evil.test:443 HTTP/1.1"), "CONNECT", 405],
      [head("FOO /x HTTP/1.1"), "unknown method", 405],
      [head("GET /x HTTP/1.1", "no colon here"), "malformed header", 400],
    ];
    for (const [text, message, status] of cases) {
      const r = screenRequestHead(text);
      expect(r, text).not.toBeNull();
      expect(r!.status, text).toBe(status);
      expect(r!.message, text).toContain(message);
    }
  });
});
