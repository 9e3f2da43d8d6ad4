/**
 * The hot path: one client request → one replica, with retries only while no
 * replica has accepted it. Bodies stream in both directions; the only state
 * touched is this isolate's routing view (no Durable Object call).
 */
import type { Deployment } from "../config/deployment.ts";
import { Header, PROTOCOL_VERSION, UNAUTHORIZED_REJECTION, errorResponse, parseLoadHeader } from "../protocol/index.ts";
import { backoffMs, pickRandom, pickReplica, pickReplicaForModel, pickRoundRobin } from "../policy/pick-replica.ts";
import { clientHeaders, dispatchHeaders } from "./headers.ts";
import { checkDeclaredLength, readBoundedBody, uploadPaceOf, uploadTooSlow } from "./request-body.ts";
import { dispatchUrl } from "./request-path.ts";
import { nativePipe, sseWithErrorEvent } from "./response-streams.ts";
import { stripRoutePrefix } from "./route-table.ts";
import { pacedBody } from "./upload-pace.ts";
import type { ReplicaEntry, RoutingView } from "./routing-view.ts";
import type { SessionAffinity } from "./session-affinity.ts";

/** Signs one dispatch (replica-keys.ts): the headers that prove the edge sent it. */
export type DispatchSigner = (p: { method: string; deployment: string; target: string; requestId: string }) => Promise<[string, string][]>;

export interface DispatchContext {
  deployment: Deployment;
  routePrefix: string;
  /** The request's normalised path and raw query (request-path.ts). */
  target: { path: string; search: string };
  sign: DispatchSigner;
  view: RoutingView;
  requestId: string;
  /** Registers follow-up work that must outlive the response (ctx.waitUntil). */
  background: (p: Promise<unknown>) => void;
  /** Multiplexed model the request names (already validated). */
  model?: string;
  /** Session the request belongs to, when the deployment has affinity on. */
  session?: { id: string; affinity: SessionAffinity; /** Whose budget a new binding comes from (API key hash or client IP). */ client: string };
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
  /** Set when a streamed body stopped arriving (upload-pace.ts). */
  tooSlow: () => boolean;
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
    prepared = { body: ctx.body, replayable: true, safeToRepeat: true, overLimit: () => false, tooSlow: () => false };
  } else {
    const body = await prepareBody(req, deployment, requestId);
    if (body instanceof Response) return body;
    prepared = { ...body, safeToRepeat: body.replayable && safeToRepeat(req.method, req.headers, deployment.policy.idempotent) };
  }

  const { search } = ctx.target;
  const path = deployment.policy.stripPrefix ? stripRoutePrefix(ctx.target.path, ctx.routePrefix) : ctx.target.path;
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
  // The session's binding token is the edge's business, not the replica's.
  const sessionToken = ctx.session ? (req.headers.get(Header.sessionToken) ?? undefined) : undefined;
  baseHeaders.delete(Header.sessionToken);
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
    const now = Date.now();
    // A holder of the model whose liveness merely lapsed here is still tried first (RoutingView.lapsed).
    const candidates = model !== undefined ? view.candidatesHolding(now, tried, (e) => e.models.includes(model) || e.loading.includes(model)) : view.candidates(now, tried);
    const replica =
      attempt === 1 && ctx.session
        ? await ctx.session.affinity.choose(deployment, ctx.session.id, candidates, pick, ctx.session.client, () => view.lapsed(now, tried), sessionToken)
        : pick(candidates);
    if (!replica) break;
    if (model !== undefined) view.noteModelDispatch(replica, model);
    sawReplica = true;
    tried.add(replica.id);
    const target = dispatchUrl(replica.url, path, search);
    if (!target) {
      // requestTarget's path cannot leave the replica's URL; this is a bug, and nothing is sent.
      console.error(JSON.stringify({ msg: "dispatch target refused", deployment: deployment.name, replica: replica.id, request_id: requestId, path }));
      return errorResponse("internal_error", "internal error", { requestId });
    }
    const headers = new Headers(baseHeaders);
    headers.set(Header.attempt, String(attempt));
    // The engine's own key (vLLM --api-key), registered by its agent, replaces any client credential.
    if (replica.engineKey !== undefined) headers.set("authorization", `Bearer ${replica.engineKey}`);
    let signature: [string, string][];
    try {
      signature = await ctx.sign({ method: req.method, deployment: deployment.name, target: target.pathname + target.search, requestId });
    } catch (err) {
      console.error(JSON.stringify({ msg: "cannot sign dispatches (is SWITCHYARD_REPLICA_SECRET set?)", deployment: deployment.name, error: String(err) }));
      return errorResponse("internal_error", "the edge cannot sign dispatches", { requestId });
    }
    for (const [name, value] of signature) headers.set(name, value);
    if (ctx.trace) ctx.trace.attempts = attempt;

    const outcome = await attemptOn(replica, target, req.method, headers, prepared, deadline, ctx);
    if (outcome.kind === "response") {
      if (outcome.fromReplica && ctx.trace) ctx.trace.replica = replica.id;
      // The session follows a retry only when its replica is gone or draining; a
      // full one keeps it (the next requests spill until the grace period ends).
      if (outcome.fromReplica && firstRefusal === "gone") ctx.session?.affinity.served(deployment, ctx.session.id, replica.id, ctx.background);
      if (outcome.fromReplica && ctx.session) {
        // The binding after this request, signed: a client that sends it back is routed with no object call.
        const token = await ctx.session.affinity.tokenFor(deployment, ctx.session.id, replica.id);
        if (token !== undefined) outcome.response.headers.set(Header.sessionToken, token);
      }
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
    // Why each replica was no candidate is for operators (the log), not for clients.
    console.error(JSON.stringify({ msg: "no ready replica", deployment: deployment.name, request_id: requestId, replicas: view.describe(Date.now()) }));
    return errorResponse("no_ready_replica", `deployment "${deployment.name}" has no ready replica`, { requestId, retryAfterSeconds: 1 });
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
  target: URL,
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
      console.error(JSON.stringify({ msg: "replica deadline passed", deployment: ctx.deployment.name, replica: replica.id, request_id: requestId }));
      return respond(errorResponse("deadline_exceeded", "the replica did not answer before the deadline", { requestId }));
    }
    // The client's fault, not the replica's: it is not marked down.
    if (prepared.tooSlow()) return respond(uploadTooSlow(requestId));
    if (prepared.overLimit()) {
      return respond(errorResponse("payload_too_large", `request body exceeds ${ctx.deployment.limits.maxRequestBodyBytes} bytes`, { requestId }));
    }
    // The replica is unreachable or went away: no new dispatches to it from this isolate for a while.
    view.markDown(replica.id, Date.now());
    if (view.recordFailure(replica, Date.now(), ctx.deployment.policy)) logEjection(ctx, replica, "connection");
    console.error(JSON.stringify({ msg: "replica connection failed", deployment: ctx.deployment.name, replica: replica.id, request_id: requestId, error: String(err) }));
    if (prepared.safeToRepeat) return { kind: "not_accepted", why: "gone" };
    return respond(errorResponse("upstream_failed", "the connection to the replica was lost", { requestId }));
  } finally {
    clearTimeout(timer);
  }

  const load = parseLoadHeader(upstream.headers.get(Header.load));
  if (load) view.applyLoad(replica.id, load, Date.now());

  // The replica refused the edge itself: it checks signatures with another key (or a
  // clock far off), or the engine does not take the key its agent registered. Not the
  // client's doing: try another replica, and count it towards ejection.
  if (upstream.status === 401 && (upstream.headers.get(Header.rejected) === UNAUTHORIZED_REJECTION || replica.engineKey !== undefined)) {
    view.endDispatch(replica);
    if (view.recordFailure(replica, Date.now(), ctx.deployment.policy)) logEjection(ctx, replica, "refused the edge's credentials");
    console.error(JSON.stringify({ msg: "replica refused the edge's credentials", deployment: ctx.deployment.name, replica: replica.id, request_id: requestId }));
    ctx.background(upstream.body?.cancel() ?? Promise.resolve());
    return { kind: "not_accepted", why: "gone" };
  }

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
  // Only the edge mints binding tokens (dispatch() adds the session's own to a session response).
  out.delete(Header.sessionToken);
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
  if (!req.body || req.method === "GET" || req.method === "HEAD") return { body: null, replayable: true, overLimit: never, tooSlow: never };
  const { maxRequestBodyBytes, replayableBodyBytes } = deployment.limits;
  const declared = checkDeclaredLength(req.headers, maxRequestBodyBytes, requestId);
  if (declared instanceof Response) return declared;
  const { size } = declared;
  const pace = uploadPaceOf(deployment.limits);
  if (size !== undefined && size <= replayableBodyBytes) {
    // Small bodies are held so a rejected dispatch can be replayed elsewhere: one native read, bounded in time.
    const held = await readBoundedBody(req, replayableBodyBytes, pace);
    if (held === "too_slow") return uploadTooSlow(requestId);
    if (held === "too_large") return errorResponse("payload_too_large", `request body exceeds ${maxRequestBodyBytes} bytes`, { requestId });
    return { body: held, replayable: true, overLimit: never, tooSlow: never };
  }
  // Streamed to the replica as it arrives: counted against the limit and paced, so a
  // client that stops sending cannot hold a replica's slot (upload-pace.ts).
  const paced = pacedBody(req.body, maxRequestBodyBytes, pace);
  if (size === undefined) return { body: paced.body, replayable: false, overLimit: paced.overLimit, tooSlow: paced.tooSlow };
  // A sized body keeps its Content-Length on the way to the replica.
  const fixed = new FixedLengthStream(size);
  paced.body.pipeTo(fixed.writable).catch(() => undefined);
  return { body: fixed.readable, replayable: false, overLimit: paced.overLimit, tooSlow: paced.tooSlow };
}
