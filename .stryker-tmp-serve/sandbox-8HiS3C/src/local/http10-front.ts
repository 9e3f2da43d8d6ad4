/**
 * A TCP front for workerd that makes HTTP/1.0 clients work.
 *
 * workerd's HTTP server never closes a connection after a response, not even
 * for HTTP/1.0 or `Connection: close` (measured: the socket stays open until
 * workerd's 5 s idle timeout), so clients that wait for the close, such as
 * ApacheBench, stall 5 s per connection. This front reads the first request
 * line of each connection:
 *  - HTTP/1.1: the connection is relayed byte for byte (keep-alive clients keep
 *    their speed; workerd speaks to them directly).
 *  - HTTP/1.0: Node's HTTP server takes the connection and proxies its request
 *    to workerd over a pooled keep-alive connection, then answers the way
 *    HTTP/1.0 expects (close-delimited, connection closed after the response).
 * Used only by the local stack; on Cloudflare the edge terminates HTTP itself.
 *
 * A client that leaves has its connection to workerd reset, not closed: workerd
 * does not read a closed connection while the Worker waits on a replica, but a reset
 * aborts the request's signal, and with it the dispatch (as Cloudflare does).
 *
 * Slow clients are bounded here (the front would otherwise hold a socket per
 * idle connection forever): the first request line must arrive within
 * `firstLineTimeoutMs`, its headers within `headersTimeoutMs` after that, and
 * HTTP/1.0 request bodies within Node's `requestTimeout`. Relayed HTTP/1.1
 * connections get no further timeout from the front; workerd applies its own.
 *
 * The front also screens the first request's framing before anything else sees
 * it (screenRequestHead): workerd answers duplicate or malformed Content-Length,
 * transfer codings other than chunked, absolute-form targets, CONNECT and
 * unknown methods with a plain-text 500 or 501, and Node's parser with a bare
 * 400; here they get the edge's JSON error and the connection is closed. Later
 * requests on a kept-alive HTTP/1.1 connection are relayed as bytes, unscreened
 * (on Cloudflare, its own front end refuses them).
 */
// @ts-nocheck

import { Agent, createServer as createHttpServer, request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { HOP_BY_HOP_HEADERS } from "../proxy/serve/request.ts";

/** A request line longer than this is not HTTP we relay. */
const MAX_LINE_BYTES = 16 * 1024;
/** Request headers longer than this are not HTTP we relay (workerd's own limit is lower). */
const MAX_HEAD_BYTES = 128 * 1024;
const LINE_END = Buffer.from("\r\n");
const HEAD_END = Buffer.from("\r\n\r\n");

/** Methods the edge knows; anything else is refused here (workerd would answer a plain 501). */
const KNOWN_METHODS = new Set(["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE"]);

/** Why the front refuses a request before relaying it: the edge's JSON error. */
export interface HeadRefusal {
  status: 400 | 405;
  code: "bad_request" | "method_not_allowed";
  message: string;
}

/**
 * Checks the framing of a request head (request line and headers, CRLF-separated,
 * without the final blank line): null when it may be relayed. Pure.
 */
export function screenRequestHead(head: string): HeadRefusal | null {
  const lines = head.split("\r\n");
  const m = /^([!#$%&'*+.^_`|~0-9A-Za-z-]+) (\S+) HTTP\/1\.[01]$/.exec(lines[0] ?? "");
  if (!m) return { status: 400, code: "bad_request", message: "malformed request line" };
  const [, method, target] = m as unknown as [string, string, string];
  if (method === "CONNECT") return { status: 405, code: "method_not_allowed", message: "CONNECT is not served: this is not a forward proxy" };
  if (!KNOWN_METHODS.has(method)) return { status: 405, code: "method_not_allowed", message: `unknown method ${method.slice(0, 32)}` };
  if (!target.startsWith("/")) return { status: 400, code: "bad_request", message: "request targets are paths (origin-form); absolute URLs and * are not served" };
  const lengths: string[] = [];
  const codings: string[] = [];
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon <= 0) return { status: 400, code: "bad_request", message: "malformed header line" };
    const name = line.slice(0, colon).toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === "content-length") lengths.push(value);
    else if (name === "transfer-encoding") codings.push(...value.split(",").map((c) => c.trim().toLowerCase()));
  }
  if (lengths.length > 1) return { status: 400, code: "bad_request", message: "more than one Content-Length header" };
  if (lengths.length === 1 && !/^\d{1,15}$/.test(lengths[0]!)) return { status: 400, code: "bad_request", message: "invalid Content-Length header" };
  if (codings.length > 0) {
    if (codings.length !== 1 || codings[0] !== "chunked") return { status: 400, code: "bad_request", message: "transfer codings other than chunked are not supported" };
    if (lengths.length > 0) return { status: 400, code: "bad_request", message: "Content-Length and Transfer-Encoding together" };
  }
  return null;
}

function refuseHead(client: Socket, r: HeadRefusal | { status: 408; code: "request_timeout"; message: string }): void {
  const body = JSON.stringify({ error: { code: r.code, message: r.message, type: r.status === 408 ? "timeout_error" : "invalid_request_error" } });
  const reason = r.status === 400 ? "Bad Request" : r.status === 405 ? "Method Not Allowed" : "Request Timeout";
  client.end(
    `HTTP/1.1 ${r.status} ${reason}\r\ncontent-type: application/json; charset=utf-8\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`,
  );
}
const HOP_BY_HOP = new Set(HOP_BY_HOP_HEADERS);

export interface FrontOptions {
  host: string;
  port: number;
  targetHost: string;
  targetPort: number;
  /** The whole first request line must arrive within this long, or the socket is destroyed. Default 10 s. */
  firstLineTimeoutMs?: number;
  /** The first request's headers must arrive within this long after its request line (answered 408; 0: none). Default 20 s. */
  headersTimeoutMs?: number;
  /**
   * HTTP/1.0: the whole request, body included, must arrive within this long (Node's `requestTimeout`; answered 408).
   * Not the response: a long streamed response is unaffected. Default 120 s (0: none); the edge enforces body rates itself.
   */
  requestTimeoutMs?: number;
}

const DEFAULT_FIRST_LINE_TIMEOUT_MS = 10_000;
const DEFAULT_HEADERS_TIMEOUT_MS = 20_000;
const DEFAULT_REQUEST_TIMEOUT_MS = 120_000;

/** "1.0", "1.1" or null (not an HTTP/1.x request line). Pure. */
export function httpVersionOf(requestLine: string): "1.0" | "1.1" | null {
  const m = /^[A-Z]+ \S+ HTTP\/1\.([01])$/.exec(requestLine);
  return m ? (m[1] === "0" ? "1.0" : "1.1") : null;
}

/** Headers to forward, without hop-by-hop ones. Pure. */
export function endToEndHeaders(headers: IncomingMessage["headers"]): OutgoingHttpHeaders {
  const named = new Set(
    String(headers.connection ?? "")
      .split(",")
      .map((n) => n.trim().toLowerCase())
      .filter(Boolean),
  );
  const out: OutgoingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) {
    if (value !== undefined && !HOP_BY_HOP.has(name) && !named.has(name)) out[name] = value;
  }
  return out;
}

function relay(client: Socket, first: Buffer, o: FrontOptions): void {
  const upstream = connect({ host: o.targetHost, port: o.targetPort, noDelay: true });
  upstream.write(first);
  client.pipe(upstream);
  upstream.pipe(client);
  const end = () => {
    client.destroy();
    upstream.destroy();
  };
  upstream.on("error", end);
  client.on("error", end);
  upstream.on("close", () => client.end());
  // Reset, not closed: workerd notices a client gone only by a reset (a FIN it does not read
  // while the Worker waits on a replica), and then aborts the request's signal, which aborts
  // its dispatch (serve/dispatch.ts) and frees its slot. On Cloudflare the edge does this.
  client.on("close", () => {
    if (!upstream.destroyed) upstream.resetAndDestroy();
  });
}

function http10Proxy(o: FrontOptions) {
  const agent = new Agent({ keepAlive: true, maxSockets: 256 });
  return (req: IncomingMessage, res: ServerResponse) => {
    const upstream = httpRequest(
      { host: o.targetHost, port: o.targetPort, method: req.method, path: req.url, headers: endToEndHeaders(req.headers), agent },
      (up) => {
        res.writeHead(up.statusCode ?? 502, endToEndHeaders(up.headers));
        up.pipe(res);
      },
    );
    upstream.on("error", () => {
      if (res.destroyed) return; // the client is gone (see below); nobody to answer
      if (!res.headersSent) res.writeHead(502, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code: "upstream_failed", message: "edge proxy unreachable", type: "server_error" } }));
    });
    // A client that goes away mid-request (or is timed out by headersTimeout/requestTimeout) would
    // otherwise leave the upstream request waiting for the rest of the body, holding a pooled socket.
    res.on("close", () => {
      if (res.writableFinished) return;
      // Reset, as relay() does: workerd then aborts the request (its signal) rather than running it on.
      if (upstream.socket && !upstream.socket.destroyed) upstream.socket.resetAndDestroy();
      upstream.destroy();
    });
    req.pipe(upstream);
  };
}

export function startHttp10Front(o: FrontOptions): Promise<Server> {
  const firstLineTimeoutMs = o.firstLineTimeoutMs ?? DEFAULT_FIRST_LINE_TIMEOUT_MS;
  const headersTimeout = o.headersTimeoutMs ?? DEFAULT_HEADERS_TIMEOUT_MS;
  const requestTimeout = o.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
  const http10 = createHttpServer(
    {
      noDelay: true,
      headersTimeout,
      requestTimeout,
      // Node checks the two timeouts on this interval (default 30 s, which would add up to 30 s to each).
      connectionsCheckingInterval: Math.max(10, Math.min(1000, Math.floor(Math.min(...[headersTimeout, requestTimeout].filter((t) => t > 0)) / 4))),
    },
    http10Proxy(o),
  );
  // This server never listens (it is handed connections), and Node only tracks connections and
  // enforces headersTimeout/requestTimeout once 'listening' fires (checked on Node 20: without
  // this, a request with unfinished headers stays open forever). The tracking timer is unref'd
  // and cleared by close().
  http10.emit("listening");
  const server = createServer({ noDelay: true }, (client) => {
    let buffered: Buffer = Buffer.alloc(0);
    // Absolute, not idle timeouts: a client dribbling one byte at a time must not keep it alive.
    let timer = setTimeout(() => client.destroy(), firstLineTimeoutMs);
    let lineSeen = false;
    client.once("close", () => clearTimeout(timer));
    const onData = (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const lineEnd = buffered.indexOf(LINE_END);
      if (lineEnd < 0 && buffered.length <= MAX_LINE_BYTES) return;
      const version = lineEnd < 0 ? null : httpVersionOf(buffered.subarray(0, lineEnd).toString("latin1"));
      // An HTTP/1.x request: its whole head is screened before anything is relayed.
      const headEnd = version === null ? -1 : buffered.indexOf(HEAD_END);
      if (version !== null && headEnd < 0 && buffered.length <= MAX_HEAD_BYTES) {
        if (!lineSeen) {
          lineSeen = true;
          clearTimeout(timer);
          if (headersTimeout > 0) {
            timer = setTimeout(() => refuseHead(client, { status: 408, code: "request_timeout", message: "the request headers did not arrive in time" }), headersTimeout);
          }
        }
        return;
      }
      clearTimeout(timer);
      client.off("data", onData);
      client.pause();
      if (version !== null) {
        const refusal = headEnd < 0 ? { status: 400 as const, code: "bad_request" as const, message: "request headers too large" } : screenRequestHead(buffered.subarray(0, headEnd).toString("latin1"));
        if (refusal) {
          refuseHead(client, refusal);
          return;
        }
      }
      if (version === "1.0") {
        client.unshift(buffered);
        http10.emit("connection", client);
        client.resume();
      } else {
        relay(client, buffered, o);
      }
    };
    client.on("data", onData);
    client.on("error", () => client.destroy());
  });
  server.on("close", () => http10.close());
  return new Promise((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, o.host, () => resolve(server));
  });
}
