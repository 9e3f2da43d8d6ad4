/**
 * The hot path: one client request → one replica, with retries only while no
 * replica has accepted it. Bodies stream in both directions; the only state
 * touched is this isolate's routing view (no Durable Object call).
 */
import type { Deployment } from "../config/deployment.ts";
import { Header, PROTOCOL_VERSION, errorBody, errorResponse, parseLoadHeader } from "../protocol/index.ts";
import { backoffMs, pickRandom, pickReplica, pickReplicaForModel, pickRoundRobin } from "../policy/pick-replica.ts";
import { clientHeaders, dispatchHeaders } from "./headers.ts";
import { checkDeclaredLength } from "./request-body.ts";
import { stripRoutePrefix } from "./route-table.ts";
import { SseEventFramer } from "./sse-framing.ts";
import type { ReplicaEntry, RoutingView } from "./routing-view.ts";
import type { SessionAffinity } from "./session-affinity.ts";

export interface DispatchContext {
  deployment: Deployment;
  routePrefix: string;
  view: RoutingView;
  requestId: string;
  /** Registers follow-up work that must outlive the response (ctx.waitUntil). */
  background: (p: Promise<unknown>) => void;
  /** Multiplexed model the request names (already validated). */
  model?: string;
  /** Session the request belongs to, when the deployment has affinity on. */
  session?: { id: string; affinity: SessionAffinity };
  /** Filled in as the dispatch goes, for metrics and logs. */
  trace?: DispatchTrace;
  /**
   * The request body, already read (OpenAI routes read it to route). It is
   * replayed on another replica until one accepts the request, even after a lost
   * connection: inference has no side effects worth more than a wasted prefill.
   */
  body?: ArrayBuffer;
  /**
   * The response is a Server-Sent Events stream (OpenAI `stream: true`): a
   * replica failing after the first byte ends it with an error event instead of
   * a cut connection.
   */
  sseErrors?: boolean;
}

/** What happened to one request on its way to a replica. */
export interface DispatchTrace {
  attempts: number;
  rejections: number;
  ejections: number;
  /** The replica whose answer the client got. */
  replica?: string;
  /** Settles when a streamed response body has been passed on completely (or cut). */
  streamEnd?: Promise<unknown>;
}

type Body = ArrayBuffer | ReadableStream<Uint8Array> | null;

interface PreparedBody {
  body: Body;
  /** The body can be sent again (no body, or held in memory). */
  replayable: boolean;
  /** Replayable, and the request may run twice (see safeToRepeat). */
  safeToRepeat: boolean;
  /** Set when a streamed body outgrew the limit mid-flight. */
  overLimit: () => boolean;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * Round-robin counters, one per routing view, i.e. per isolate and deployment
 * (the snapshot cache keeps one view per deployment for the isolate's life).
 */
const roundRobinTurns = new WeakMap<RoutingView, { next: number }>();

/**
 * The choice for a plain request (no session, no model), by `policy.balancer`.
 * Load-blind balancers still only see the candidates the view allows (ready,
 * fresh, not cooling down, not ejected, not already tried).
 */
function plainPicker(deployment: Deployment, view: RoutingView): (among: readonly ReplicaEntry[]) => ReplicaEntry | undefined {
  switch (deployment.policy.balancer) {
    case "round_robin": {
      let turns = roundRobinTurns.get(view);
      if (!turns) roundRobinTurns.set(view, (turns = { next: 0 }));
      const t = turns;
      return (among) => {
        if (among.length === 0) return undefined;
        const turn = t.next;
        t.next = turn >= Number.MAX_SAFE_INTEGER ? 0 : turn + 1;
        return pickRoundRobin(among, turn);
      };
    }
    case "random":
      return (among) => pickRandom(among);
    default:
      return (among) => pickReplica(among);
  }
}

export async function dispatch(req: Request, ctx: DispatchContext): Promise<Response> {
  const { deployment, view, requestId } = ctx;
  let prepared: PreparedBody;
  if (ctx.body !== undefined) {
    prepared = { body: ctx.body, replayable: true, safeToRepeat: true, overLimit: () => false };
  } else {
    const body = await prepareBody(req, deployment, requestId);
    if (body instanceof Response) return body;
    prepared = { ...body, safeToRepeat: body.replayable && safeToRepeat(req.method, req.headers, deployment.policy.idempotent) };
  }

  const url = new URL(req.url);
  const path = deployment.policy.stripPrefix ? stripRoutePrefix(url.pathname, ctx.routePrefix) : url.pathname;
  const deadline = Date.now() + deployment.policy.requestTimeoutMs;
  const baseHeaders = dispatchHeaders(req.headers);
  // A private deployment's API key is the edge's credential, not the replica's.
  if (!deployment.access.public) baseHeaders.delete("authorization");
  baseHeaders.set(Header.protocol, String(PROTOCOL_VERSION));
  baseHeaders.set(Header.requestId, requestId);
  baseHeaders.set(Header.deployment, deployment.name);
  baseHeaders.set(Header.deadline, String(deadline));
  if (ctx.model !== undefined) baseHeaders.set(Header.model, ctx.model);
  if (ctx.session) baseHeaders.set(Header.session, ctx.session.id);
  const model = ctx.model;
  // `policy.balancer` applies to plain requests only: sessions (affinity proposals
  // and their retries) and multiplexed models always use the load-aware choice.
  const pick =
    model !== undefined
      ? (among: readonly ReplicaEntry[]) => pickReplicaForModel(among, model)
      : ctx.session
        ? (among: readonly ReplicaEntry[]) => pickReplica(among)
        : plainPicker(deployment, view);

  const tried = new Set<string>();
  let sawReplica = false;
  /** How the first attempt (the session's bound replica, for session requests) ended, when it was not accepted. */
  let firstRefusal: "full" | "gone" | undefined;
  const { maxAttempts, backoffBaseMs, backoffCapMs } = deployment.policy;
  for (let attempt = 1; attempt <= maxAttempts; attempt++) {
    const candidates = view.candidates(Date.now(), tried);
    const replica =
      attempt === 1 && ctx.session ? await ctx.session.affinity.choose(deployment, ctx.session.id, candidates, pick) : pick(candidates);
    if (!replica) break;
    if (model !== undefined) view.noteModelDispatch(replica, model);
    sawReplica = true;
    tried.add(replica.id);
    const headers = new Headers(baseHeaders);
    headers.set(Header.attempt, String(attempt));
    if (ctx.trace) ctx.trace.attempts = attempt;

    const outcome = await attemptOn(replica, `${replica.url}${path}${url.search}`, req.method, headers, prepared, deadline, ctx);
    if (outcome.kind === "response") {
      if (outcome.fromReplica && ctx.trace) ctx.trace.replica = replica.id;
      // The session follows a retry only when its replica is gone or draining; a
      // full one keeps it (the next requests spill until the grace period ends).
      if (outcome.fromReplica && firstRefusal === "gone") ctx.session?.affinity.served(deployment, ctx.session.id, replica.id, ctx.background);
      return outcome.response;
    }
    if (attempt === 1) firstRefusal = outcome.why;
    // Not accepted: another replica may take it, if the body can be sent again.
    if (!prepared.replayable || attempt === maxAttempts) break;
    if (Date.now() >= deadline) return errorResponse("deadline_exceeded", "deadline passed while retrying", { requestId });
    const wait = backoffMs(attempt, backoffBaseMs, backoffCapMs);
    if (wait > 0) await sleep(Math.min(wait, deadline - Date.now()));
  }
  if (!sawReplica) {
    return errorResponse("no_ready_replica", `deployment "${deployment.name}" has no ready replica`, {
      requestId,
      retryAfterSeconds: 1,
      details: { replicas: view.describe(Date.now()) },
    });
  }
  return errorResponse("all_replicas_busy", `every replica of "${deployment.name}" tried was at capacity or unreachable`, {
    requestId,
    retryAfterSeconds: 1,
    details: { attempts: tried.size },
  });
}

/** `fromReplica`: the replica accepted the request and this is its answer (not a proxy error). */
/** `full`: the replica refused because it is at capacity (alive); `gone`: draining or unreachable. */
type AttemptOutcome = { kind: "response"; response: Response; fromReplica: boolean } | { kind: "not_accepted"; why: "full" | "gone" };

async function attemptOn(
  replica: ReplicaEntry,
  target: string,
  method: string,
  headers: Headers,
  prepared: PreparedBody,
  deadline: number,
  ctx: DispatchContext,
): Promise<AttemptOutcome> {
  const { view, requestId } = ctx;
  // The deadline bounds the wait for response headers only; a stream that has
  // started is not cut by it.
  const abort = new AbortController();
  const timer = setTimeout(() => abort.abort(), Math.max(0, deadline - Date.now()));
  view.startDispatch(replica);
  let upstream: Response;
  try {
    upstream = await fetch(target, { method, headers, body: prepared.body, signal: abort.signal, redirect: "manual" });
  } catch (err) {
    view.endDispatch(replica);
    if (abort.signal.aborted) {
      // A hung replica: after a few in a row it is ejected (circuit breaker).
      if (view.recordFailure(replica, Date.now(), ctx.deployment.policy)) logEjection(ctx, replica, "deadline");
      return respond(errorResponse("deadline_exceeded", `replica ${replica.id} did not answer before the deadline`, { requestId }));
    }
    if (prepared.overLimit()) {
      return respond(errorResponse("payload_too_large", `request body exceeds ${ctx.deployment.limits.maxRequestBodyBytes} bytes`, { requestId }));
    }
    // The replica is unreachable or went away: no new dispatches to it from this isolate for a while.
    view.markDown(replica.id, Date.now());
    if (view.recordFailure(replica, Date.now(), ctx.deployment.policy)) logEjection(ctx, replica, "connection");
    console.error(JSON.stringify({ msg: "replica connection failed", deployment: ctx.deployment.name, replica: replica.id, request_id: requestId, error: String(err) }));
    if (prepared.safeToRepeat) return { kind: "not_accepted", why: "gone" };
    return respond(errorResponse("upstream_failed", `connection to replica ${replica.id} lost: ${String(err)}`, { requestId }));
  } finally {
    clearTimeout(timer);
  }

  const load = parseLoadHeader(upstream.headers.get(Header.load));
  if (load) view.applyLoad(replica.id, load, Date.now());

  if (upstream.status === 503 && upstream.headers.has(Header.rejected)) {
    view.endDispatch(replica);
    if (ctx.trace) ctx.trace.rejections++;
    // Full is honest; refusing for capacity while claiming room is a lie (or a
    // broken replica) and counts towards ejection, so it cannot soak up every
    // request's first attempt. A garbled load header counts the same way.
    const lying = !load || (upstream.headers.get(Header.rejected) === "capacity" && load.state === "ready" && load.ongoing + load.queued < load.max);
    if (lying) {
      if (view.recordFailure(replica, Date.now(), ctx.deployment.policy)) logEjection(ctx, replica, "refused while claiming room");
    }
    // Free the connection: the rejection body is a short JSON we do not need.
    ctx.background(upstream.body?.cancel() ?? Promise.resolve());
    return { kind: "not_accepted", why: upstream.headers.get(Header.rejected) === "capacity" ? "full" : "gone" };
  }

  view.recordSuccess(replica);
  const out = clientHeaders(upstream.headers);
  out.set(Header.replica, replica.id);
  out.set(Header.requestId, requestId);
  const init = { status: upstream.status, statusText: upstream.statusText, headers: out };

  if (!upstream.body || upstream.headers.has("content-length")) {
    // A sized body is already produced by the replica; its work is done.
    view.endDispatch(replica);
    return respond(new Response(upstream.body, init), true);
  }
  // A stream: the replica is busy until it ends, so count it in flight until then.
  const stream = ctx.sseErrors ? sseWithErrorEvent(upstream.body, replica.id, requestId) : nativePipe(upstream.body);
  const ended = stream.ended.finally(() => view.endDispatch(replica));
  if (ctx.trace) ctx.trace.streamEnd = ended;
  ctx.background(ended);
  return respond(new Response(stream.body, init), true);
}

/** A response body passed on, and when it has been passed on completely (or cut). */
interface PassedStream {
  body: ReadableStream<Uint8Array>;
  ended: Promise<void>;
}

/**
 * The native pipe: no JS per chunk. A client that goes away cancels the
 * readable side, which cancels the pipe's source: the replica sees its request
 * closed and stops.
 */
function nativePipe(source: ReadableStream<Uint8Array>): PassedStream {
  const { readable, writable } = new IdentityTransformStream();
  return { body: readable, ended: source.pipeTo(writable).catch(() => undefined) };
}

/**
 * An SSE stream passed on event by event; when the replica fails mid-stream (it
 * died, or the connection broke), the client gets a last well-formed event,
 * OpenAI's `data: {"error": {...}}`, and a clean end, instead of a stream that
 * simply stops. A client that goes away cancels the replica's response.
 *
 * Why JS touches every chunk here: workerd's native pipe (pipeTo between
 * native streams, or returning the fetch body as is) ends the client's response
 * as if complete when the replica's connection drops mid-body, so a truncated
 * answer would look finished (and with preventAbort the pipe never settles);
 * a JS read sees the error ("Network connection lost."). The body is a pull
 * byte stream: one JS step per chunk, when the client side asks for it, and
 * the cheapest shape measured (bench/README.md: TTFT p50 +1.6–2.3 ms at
 * concurrency 120 against +3.0–4.1 ms for a plain pull stream, +3.3–6.3 ms for
 * a read/write loop, +3.6 ms and p90 +25 ms for a TransformStream).
 * SseEventFramer holds back a partial event, so the error event never lands in
 * the middle of one.
 */
function sseWithErrorEvent(source: ReadableStream<Uint8Array>, replicaId: string, requestId: string): PassedStream {
  const framer = new SseEventFramer();
  const reader = source.getReader();
  let end!: () => void;
  const ended = new Promise<void>((r) => (end = r));
  const body = new ReadableStream(
    {
      type: "bytes",
      async pull(controller) {
        for (;;) {
          let chunk: ReadableStreamReadResult<Uint8Array>;
          try {
            chunk = await reader.read();
          } catch (err) {
            const event = errorBody("upstream_failed", `replica ${replicaId} failed mid-stream: ${String(err)}`, { requestId });
            controller.enqueue(new TextEncoder().encode(`data: ${JSON.stringify(event)}\n\n`));
            controller.close();
            console.error(JSON.stringify({ msg: "stream failed", replica: replicaId, request_id: requestId, error: String(err) }));
            end();
            return;
          }
          if (chunk.done) {
            const rest = framer.flush();
            if (rest.length > 0) controller.enqueue(rest);
            controller.close();
            end();
            return;
          }
          const complete = framer.push(chunk.value);
          if (complete.length > 0) {
            controller.enqueue(complete);
            return;
          }
        }
      },
      async cancel(reason) {
        // The client went away: stop the replica's work.
        await reader.cancel(reason).catch(() => undefined);
        end();
      },
    },
  );
  return { body, ended };
}

function logEjection(ctx: DispatchContext, replica: ReplicaEntry, cause: string): void {
  if (ctx.trace) ctx.trace.ejections++;
  console.error(
    JSON.stringify({ msg: "replica ejected", deployment: ctx.deployment.name, replica: replica.id, cause, failures: replica.breaker.failures, ejections: replica.breaker.ejections }),
  );
}

function respond(response: Response, fromReplica = false): AttemptOutcome {
  return { kind: "response", response, fromReplica };
}

const IDEMPOTENT_METHODS = new Set(["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]);

/**
 * Whether a request may run again after its connection to a replica was lost.
 * workerd gives the same error ("Network connection lost.") for a refused
 * connection and for one lost after the request was sent, so the proxy cannot
 * tell whether the replica accepted it.
 */
export function safeToRepeat(method: string, headers: Headers, deploymentIdempotent: boolean): boolean {
  return deploymentIdempotent || IDEMPOTENT_METHODS.has(method) || headers.has("idempotency-key");
}

async function prepareBody(req: Request, deployment: Deployment, requestId: string): Promise<Omit<PreparedBody, "safeToRepeat"> | Response> {
  const never = () => false;
  if (!req.body || req.method === "GET" || req.method === "HEAD") return { body: null, replayable: true, overLimit: never };
  const { maxRequestBodyBytes, replayableBodyBytes } = deployment.limits;
  const declared = checkDeclaredLength(req.headers, maxRequestBodyBytes, requestId);
  if (declared instanceof Response) return declared;
  const { size } = declared;
  if (size !== undefined) {
    // Small bodies are held so a rejected dispatch can be replayed elsewhere.
    if (size <= replayableBodyBytes) return { body: await req.arrayBuffer(), replayable: true, overLimit: never };
    return { body: req.body, replayable: false, overLimit: never };
  }
  // Chunked upload of unknown size: stream it, counting bytes against the limit.
  let seen = 0;
  let over = false;
  const limiter = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      seen += chunk.byteLength;
      if (seen > maxRequestBodyBytes) {
        over = true;
        controller.error(new Error("request body too large"));
        return;
      }
      controller.enqueue(chunk);
    },
  });
  return { body: req.body.pipeThrough(limiter), replayable: false, overLimit: () => over };
}
