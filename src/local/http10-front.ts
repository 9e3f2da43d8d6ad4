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
 */
import { Agent, createServer as createHttpServer, request as httpRequest, type IncomingMessage, type OutgoingHttpHeaders, type ServerResponse } from "node:http";
import { connect, createServer, type Server, type Socket } from "node:net";
import { HOP_BY_HOP_HEADERS } from "../proxy/headers.ts";

/** A request line longer than this is not HTTP we relay. */
const MAX_LINE_BYTES = 16 * 1024;
const LINE_END = Buffer.from("\r\n");
const HOP_BY_HOP = new Set(HOP_BY_HOP_HEADERS);

export interface FrontOptions {
  host: string;
  port: number;
  targetHost: string;
  targetPort: number;
}

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
  client.on("close", () => upstream.destroy());
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
      if (!res.headersSent) res.writeHead(502, { "content-type": "application/json" });
      res.end(JSON.stringify({ error: { code: "upstream_failed", message: "edge proxy unreachable", type: "server_error" } }));
    });
    req.pipe(upstream);
  };
}

export function startHttp10Front(o: FrontOptions): Promise<Server> {
  const http10 = createHttpServer({ noDelay: true }, http10Proxy(o));
  const server = createServer({ noDelay: true }, (client) => {
    let buffered: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      buffered = buffered.length === 0 ? chunk : Buffer.concat([buffered, chunk]);
      const lineEnd = buffered.indexOf(LINE_END);
      if (lineEnd < 0 && buffered.length <= MAX_LINE_BYTES) return;
      client.off("data", onData);
      client.pause();
      const version = lineEnd < 0 ? null : httpVersionOf(buffered.subarray(0, lineEnd).toString("latin1"));
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
