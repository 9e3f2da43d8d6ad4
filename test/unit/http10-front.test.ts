/** The HTTP/1.0 front's pure helpers: request-line sniffing and header filtering. */
import { describe, it, expect } from "vitest";
import { endToEndHeaders, httpVersionOf } from "../../src/local/http10-front.ts";

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

  // Finding (reported): unlike proxy/headers.ts, headers named in Connection are not removed
  // (RFC 9110 §7.6.1 says a proxy must remove them).
  it("drops headers named in Connection", () => {
    const out = endToEndHeaders({ connection: "x-hop", "x-hop": "1", accept: "*/*" });
    expect(out).toEqual({ accept: "*/*" });
  });
});
