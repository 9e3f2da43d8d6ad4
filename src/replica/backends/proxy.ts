/**
 * The proxy kind: any HTTP model server (FastAPI, Triton, TorchServe, BentoML, Ray
 * Serve) behind the replica's front door (docs/agent.md, "Proxy mode"). The server
 * (src/replica/server.ts) does what it does for every kind: it checks the edge's
 * signature, refuses beyond --max-ongoing before accepting, adds the load header,
 * reports and drains. This handler passes each admitted request on to the app at
 * --upstream on loopback, streams the answer back as it comes, and ends the app's
 * request when the client leaves (a cancel reaches the app).
 *
 * Where the app reports its own queue (Triton's nv_inference_pending_request_count
 * at --upstream-metrics), requests it holds beyond the ones sent through here count
 * as queued in the load reports (other clients of the same server); else the
 * replica's own count is the load.
 */
import { request as httpRequest, Agent, type IncomingHttpHeaders, type IncomingMessage, type ServerResponse } from "node:http";
import { pipeline } from "node:stream";
import { HOP_BY_HOP_HEADERS, Header, errorBody } from "../../protocol/index.ts";
import type { ReplicaBackend, ReplicaBackendContext } from "./context.ts";

/**
 * Hop-by-hop headers and the edge's signature, which stay on this side of the hop. A
 * request's transfer-encoding is the exception: Node frames the body piped to the app by
 * it (an answer's is dropped, answerHeaders).
 */
const NOT_FORWARDED = new Set([...HOP_BY_HOP_HEADERS.filter((h) => h !== "transfer-encoding"), "host", Header.signature, Header.timestamp, Header.nonce, Header.bodySha256]);

/** How often the app's /metrics is read, ms. */
export const UPSTREAM_SCRAPE_MS = 500;

/** The app's own count of requests it holds, from its Prometheus text: Triton's pending requests summed over models; undefined where it reports none. */
export function upstreamPending(text: string): number | undefined {
  let found = false;
  let sum = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith("nv_inference_pending_request_count")) continue;
    const m = /^nv_inference_pending_request_count(?:\{[^}]*\})?\s+([0-9.eE+-]+)/.exec(line);
    if (!m) continue;
    const v = Number(m[1]);
    if (!Number.isFinite(v) || v < 0) continue;
    found = true;
    sum += v;
  }
  return found ? Math.round(sum) : undefined;
}

function forwardedHeaders(headers: IncomingHttpHeaders, upstream: URL): IncomingHttpHeaders {
  const out: IncomingHttpHeaders = {};
  for (const [name, value] of Object.entries(headers)) if (!NOT_FORWARDED.has(name) && value !== undefined) out[name] = value;
  out.host = upstream.host;
  return out;
}

/** The answer's headers, without hop-by-hop ones (the replica's own connection handling applies). */
function answerHeaders(headers: IncomingHttpHeaders): Record<string, string | string[]> {
  const out: Record<string, string | string[]> = {};
  for (const [name, value] of Object.entries(headers)) if (!NOT_FORWARDED.has(name) && name !== "transfer-encoding" && value !== undefined) out[name] = value;
  return out;
}

/** Passes requests to the app at `upstream` (its origin; a path prefix, where given, goes before each request's path). */
export function proxyHandler(upstream: URL, agent = new Agent({ keepAlive: true })) {
  const prefix = upstream.pathname.replace(/\/$/, "");
  return (req: IncomingMessage, res: ServerResponse, loadHeaders: () => Record<string, string>): Promise<void> =>
    new Promise<void>((resolve) => {
      const up = httpRequest({ host: upstream.hostname, port: upstream.port || 80, method: req.method, path: prefix + (req.url ?? "/"), headers: forwardedHeaders(req.headers, upstream), agent });
      let done = false;
      const finish = () => {
        if (!done) {
          done = true;
          resolve();
        }
      };
      // The client (the edge) left before the answer ended: the app's request ends too, so it can stop working on it.
      res.once("close", () => {
        if (!res.writableFinished) up.destroy();
        finish();
      });
      up.once("response", (answer) => {
        // The head goes out with the first chunk (one write, not two); each chunk as it comes:
        // a stream (SSE, chunked) passes through unbuffered.
        res.writeHead(answer.statusCode ?? 502, { ...answerHeaders(answer.headers), ...loadHeaders() });
        // The app's answer cut short (it died mid-stream: an error, or a close before its end):
        // pipeline destroys the client's answer too, never ends it as if whole (one path for both).
        pipeline(answer, res, () => undefined);
      });
      up.once("error", (err) => {
        if (res.headersSent) {
          res.destroy();
        } else if (!res.destroyed) {
          const body = JSON.stringify(errorBody("upstream_failed", `the app at ${upstream.origin} did not answer: ${err.message}`));
          res.writeHead(502, { ...loadHeaders(), "content-type": "application/json", "content-length": Buffer.byteLength(body) });
          res.end(body);
        }
        finish();
      });
      req.pipe(up);
    });
}

export const proxy: ReplicaBackend = async (ctx: ReplicaBackendContext) => {
  const raw = ctx.flags.upstream;
  if (raw === undefined) ctx.fail("--backend proxy needs --upstream URL (the app, e.g. http://127.0.0.1:8001)");
  let upstream: URL;
  try {
    upstream = new URL(raw);
  } catch {
    ctx.fail(`--upstream "${raw}" is not a URL`);
  }
  if (upstream.protocol !== "http:") ctx.fail("--upstream must be an http:// URL (the app on loopback or the node's network)");
  const metrics = ctx.flags["upstream-metrics"];
  if (metrics !== undefined) {
    let url: URL;
    try {
      url = new URL(metrics);
    } catch {
      ctx.fail(`--upstream-metrics "${metrics}" is not a URL`);
    }
    let warned = false;
    const scrape = async () => {
      try {
        const res = await fetch(url, { signal: AbortSignal.timeout(UPSTREAM_SCRAPE_MS * 4) });
        const pending = res.ok ? upstreamPending(await res.text()) : undefined;
        ctx.admission.setExternalQueue(pending);
        if (pending === undefined && !warned) {
          warned = true;
          ctx.log(`--upstream-metrics ${url.href}: no nv_inference_pending_request_count; the replica's own count is the load`);
        }
      } catch {
        ctx.admission.setExternalQueue(undefined);
      }
    };
    const timer = setInterval(() => void scrape(), UPSTREAM_SCRAPE_MS);
    timer.unref();
    await scrape();
  }
  return { handler: proxyHandler(upstream) };
};
