/**
 * The Worker of bench/hot-path-steps/hot-path-steps.ts: `GET /?step=NAME&n=N` runs one step of
 * the proxy's hot path N times and answers. The steps call the proxy's own code
 * (src/proxy/, src/protocol/) with the inputs a plain `GET /hello` gives it;
 * the deadline step mirrors HeadDeadline (src/proxy/serve/dispatch.ts keeps it private).
 */
import { Header, PROTOCOL_VERSION, parseLoadHeader } from "../../src/protocol/index.ts";
import { HOP_BY_HOP_HEADERS } from "../../src/protocol/index.ts";
import { readRequestHeaders, requestHeaderBytes, requestIdFor, scrubForClient } from "../../src/proxy/serve/request.ts";
import { dispatchSignature } from "../../src/protocol/index.ts";
import { openaiBodyScanner, openaiRouting } from "../../src/proxy/serve/request.ts";
import { requestLogLine } from "../../src/proxy/serve/serve.ts";
import { requestPromptKeys } from "../../src/proxy/serve/choose.ts";
import llm from "../../functions/llm.ts";
import { requestTarget } from "../../src/proxy/serve/request.ts";
import { ProxyMetrics } from "../../src/telemetry/proxy-metrics.ts";

/** What the copy-and-delete dispatch headers (before 2026-12-03) deleted: hop-by-hop, host, the protocol's own. */
const COPY_DELETED = [
  ...HOP_BY_HOP_HEADERS,
  "host",
  Header.protocol, Header.deadline, Header.attempt, Header.deployment, Header.session, Header.load, Header.rejected, Header.replica,
  Header.timestamp, Header.nonce, Header.signature, "expect",
];
/** Response headers a client never gets. */
const NOT_SHOWN = new Set([
  ...HOP_BY_HOP_HEADERS,
  Header.protocol, Header.load, Header.rejected, Header.sessionToken, Header.replica, Header.requestId,
]);

/** What the hello replica answers with (its head, as workerd's fetch() gives it to the proxy). */
const replicaHead = new Headers({
  "content-type": "application/json",
  "content-length": "64",
  date: "Thu, 03 Dec 2026 06:00:00 GMT",
  "x-request-id": "0b7c2f4e-5d1a-4c8e-9f3b-2a6d8e1c4b7f",
  [Header.protocol]: String(PROTOCOL_VERSION),
  [Header.load]: "seq=42;ongoing=3;queued=0;max=5;state=ready;kv=0.31",
});
// Made on first use: its constructor draws random values, which workerd refuses at global scope.
let metrics: ProxyMetrics | undefined;
const MASTER = "hot-path-steps-master-secret-0123456789";
const abortNow = (abort: AbortController) => abort.abort();

type Step = (req: Request, i: number) => unknown;

/** bench/streaming/streaming.ts's request body: a streamed 64-token completion. */
const completionBody = new TextEncoder().encode(
  JSON.stringify({ model: "tiny-lm", prompt: "The edge proxy sends each request to", max_tokens: 64, temperature: 0.8, stream: true }),
);

const steps: Record<string, Step> = {
  none: () => undefined,
  /** serveRequest's header walk (size, and what the dispatch passes on), then dispatch()'s protocol headers. */
  "request-headers": (req, i) => {
    const { bytes, passed } = readRequestHeaders(req.headers, false);
    setProtocolHeaders(passed, i);
    return bytes;
  },
  /** What request-headers replaced (2026-12-03): a walk for the size, then a copy with ~22 names deleted, then the same sets. */
  "request-headers-copy-and-delete": (req, i) => {
    let bytes = 0;
    for (const [name, value] of req.headers) bytes += name.length + value.length + 4;
    const h = new Headers(req.headers);
    const named = h.get("connection");
    if (named) for (const n of named.split(",")) h.delete(n.trim());
    for (const n of COPY_DELETED) h.delete(n);
    h.delete(Header.sessionToken);
    setProtocolHeaders(h, i);
    return bytes;
  },
  /** The size walk alone (a request to a model run at the edge). */
  "header-size": (req) => requestHeaderBytes(req.headers),
  /** Candidate, rejected 2026-12-03 (dearer than client-response): one walk of the replica's head that reads the load header and appends what the client gets. */
  "walk-client-response": () => {
    const out = new Headers();
    let load: string | undefined;
    let sized = false;
    for (const [name, value] of replicaHead) {
      if (name === Header.load) load = value;
      else if (name === "content-length") sized = true;
      if (!NOT_SHOWN.has(name)) out.append(name, value);
    }
    out.set(Header.replica, "hello-2");
    out.set(Header.requestId, "0b7c2f4e-5d1a-4c8e-9f3b-2a6d8e1c4b7f");
    return [parseLoadHeader(load), sized, new Response(null, { status: 200, statusText: "OK", headers: out })];
  },
  /** attemptOn's client Response: the replica's load, refusal and size read, its head copied and scrubbed, the edge's two headers set. */
  "client-response": () => {
    const load = parseLoadHeader(replicaHead.get(Header.load));
    const rejected = replicaHead.get(Header.rejected);
    const sized = replicaHead.has("content-length");
    const response = new Response(null, { status: 200, statusText: "OK", headers: replicaHead });
    const out = response.headers;
    scrubForClient(out);
    out.delete(Header.sessionToken);
    out.set(Header.replica, "hello-2");
    out.set(Header.requestId, "0b7c2f4e-5d1a-4c8e-9f3b-2a6d8e1c4b7f");
    return [load, rejected, sized, response];
  },
  /** /v1's routing read: the body scanned for its top-level model, stream and user (json-top-level.ts), as routes/openai.ts does. */
  "openai-body-scan": () => {
    const scanner = openaiBodyScanner("completions");
    scanner.push(completionBody);
    return openaiRouting("completions", scanner.end(), completionBody);
  },
  /** prefix_cache's prompt keys for that body (functions/llm.ts: the tiny-lm tokenizer, block hashes). */
  "prompt-keys": () => requestPromptKeys(llm, "/v1/completions", completionBody.buffer as ArrayBuffer, "tiny-lm"),
  /** The dispatch's HMAC (one crypto.subtle.sign) and its three headers' values. */
  sign: (_req, i) => dispatchSignature(MASTER, { method: "GET", deployment: "hello", target: "/hello", requestId: `0b7c2f4e-5d1a-4c8e-${i}`, replica: "hello-0", bodySha256: "" }),
  /** Setting the three signature headers on the dispatch's Headers. */
  "signature-headers": (req) => {
    const h = new Headers(req.headers);
    h.set(Header.timestamp, "1800000000000");
    h.set(Header.nonce, "1234567890123");
    h.set(Header.signature, "v2=8d2f6a1b3c4e5f60718293a4b5c6d7e8f90112233445566778899aabbccddeef");
    return h;
  },
  /** The copy alone, to subtract from signature-headers. */
  "headers-copy": (req) => new Headers(req.headers),
  /** HeadDeadline: one AbortController and one timer, armed and disarmed. */
  deadline: () => {
    const abort = new AbortController();
    const timer = setTimeout(abortNow, 30_000, abort);
    clearTimeout(timer);
    return abort.signal;
  },
  /** The replica's load header read and parsed (attemptOn). */
  "load-header": () => parseLoadHeader(replicaHead.get(Header.load)),
  /** A Response with the replica's head and nothing else done to it. */
  "response-copy": () => new Response(null, { status: 200, statusText: "OK", headers: replicaHead }),
  /** The per-request log line, built and written (serve/serve.ts, observe). */
  "log-line": (_req, i) => console.log(logLine(i)),
  /** The same line built but not written. */
  "log-line-built": (_req, i) => logLine(i),
  /** The isolate's counters for one request (serve/serve.ts, observe). */
  metrics: (_req, i) => {
    metrics ??= new ProxyMetrics();
    metrics.recordResponse("hello", { status: 200, attempts: 1, rejections: 0, ejections: 0, ttfbMs: i & 3 });
    metrics.recordDuration("hello", i & 7);
  },
  /** The URL parsed and normalised once (serve/request.ts). */
  "request-target": (req) => requestTarget(req.url),
  /** A request id drawn (no x-request-id sent). */
  "request-id": () => requestIdFor(null),
  /** One async function level awaited: what each of the path's nested async calls costs. */
  "async-level": async (_req, i) => await oneLevel(i),
};

async function oneLevel(i: number): Promise<number> {
  return i;
}

/** The protocol headers dispatch() sets on every dispatch (the signature's apart). */
function setProtocolHeaders(h: Headers, i: number): void {
  h.set(Header.protocol, String(PROTOCOL_VERSION));
  h.set(Header.requestId, "0b7c2f4e-5d1a-4c8e-9f3b-2a6d8e1c4b7f");
  h.set(Header.deployment, "hello");
  h.set(Header.deadline, String(1_800_000_000_000 + i));
  h.set(Header.attempt, "1");
}

function logLine(i: number): string {
  return requestLogLine({
    requestId: "0b7c2f4e-5d1a-4c8e-9f3b-2a6d8e1c4b7f",
    deployment: "hello",
    method: "GET",
    status: 200,
    replica: "hello-2",
    attempts: 1,
    ttfbMs: i & 3,
    totalMs: i & 7,
  });
}

export default {
  async fetch(req: Request): Promise<Response> {
    const url = new URL(req.url);
    if (url.pathname === "/steps") return Response.json(Object.keys(steps));
    const step = steps[url.searchParams.get("step") ?? ""];
    const n = Number(url.searchParams.get("n"));
    if (!step || !Number.isInteger(n) || n < 1) return Response.json({ error: "want ?step=NAME&n=N (GET /steps lists them)" }, { status: 400 });
    for (let i = 0; i < n; i++) {
      const out = step(req, i);
      if (out instanceof Promise) await out;
    }
    return new Response("ok");
  },
};
