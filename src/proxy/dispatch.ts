/**
 * The hot path: one client request → one replica, with retries only while no
 * replica has accepted it. Bodies stream in both directions; the only state
 * touched is this isolate's routing view and the deployment's balancer (no
 * Durable Object call). Who is tried is the balancer's choice
 * (src/policy/balancers/), how an attempt ended is judged by attempt-outcome.ts,
 * and the bodies are prepared and passed on by request-body.ts and
 * response-streams.ts: this file is the attempt loop and the fetch.
 */
import type { Deployment } from "../config/deployment.ts";
import { Header, PROTOCOL_VERSION, bodySha256 as bodySha256Of, errorResponse, parseLoadHeader } from "../protocol/index.ts";
import type { ActiveBalancer, BalanceInput } from "../policy/balancers/index.ts";
import { backoffMs } from "../policy/pick-replica.ts";
import { judgeAnswer, judgeLostConnection, safeToRepeat, sessionFollowsRetry } from "./attempt-outcome.ts";
import { scrubForClient } from "./headers.ts";
import { bodyRefusal, dispatchBody, heldBody, uploadTooSlow, type DispatchBody } from "./request-body.ts";
import { dispatchTarget } from "./request-path.ts";
import { requestPromptKeys } from "./request-prompt.ts";
import { passAnswerBody } from "./response-streams.ts";
import { stripRoutePrefix } from "./route-table.ts";
import type { ReplicaEntry, RoutingView } from "./routing-view.ts";
import type { SessionAffinity } from "./session-affinity.ts";

/** Signs one dispatch (replica-keys.ts): the headers that prove the edge sent it, to that replica, with that body. */
export type DispatchSigner = (p: { method: string; deployment: string; target: string; requestId: string; replica: string; bodySha256: string }) => Promise<[string, string][]>;

export interface DispatchContext {
  deployment: Deployment;
  routePrefix: string;
  /** The request's normalised path and raw query (request-path.ts). */
  target: { path: string; search: string };
  /**
   * The request's headers as a dispatch passes them on (readRequestHeaders: no
   * hop-by-hop, host, protocol or session-token headers, no API key for a private
   * deployment). The dispatch's own object: the protocol's headers are set on it.
   */
  headers: Headers;
  sign: DispatchSigner;
  view: RoutingView;
  /** The deployment's balancer in this isolate (IsolateState.balancerFor). */
  balancer: ActiveBalancer;
  requestId: string;
  /** Registers follow-up work that must outlive the response (ctx.waitUntil). */
  background: (p: Promise<unknown>) => void;
  /** Multiplexed model the request names (already validated). */
  model?: string;
  /** Who sent the request, for per-client budgets: `key:<hash>` (its API key), else `ip:<address>` (cf-connecting-ip). */
  client: string;
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

/** A dispatch body, and whether the request may run again after a lost connection (safeToRepeat). */
interface PreparedBody extends DispatchBody {
  safeToRepeat: boolean;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * The deadline for a replica's response head, one per request: a single timer
 * (instead of an AbortController, a closure and a timer per attempt) aborts
 * whichever attempt is waiting when the request's deadline passes. Armed at the
 * first attempt, disarmed as soon as a replica's answer is accepted (a stream
 * that has started is not cut by it) and when the dispatch ends.
 */
class HeadDeadline {
  #abort: AbortController | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;

  /** The signal of the request's deadline (`at`, epoch ms; the same for every attempt), armed on first use. */
  signal(at: number): AbortSignal {
    if (!this.#abort) {
      this.#abort = new AbortController();
      this.#timer = setTimeout(abortNow, Math.max(0, at - Date.now()), this.#abort);
    }
    return this.#abort.signal;
  }

  /** The deadline passed (the attempt waiting then was aborted). */
  get passed(): boolean {
    return this.#abort?.signal.aborted === true;
  }

  disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

// Module-level: the timer gets its controller as an argument, so no closure per request.
const abortNow = (abort: AbortController) => abort.abort();

export async function dispatch(req: Request, ctx: DispatchContext): Promise<Response> {
  const head = new HeadDeadline();
  try {
    return await dispatchAttempts(req, ctx, head);
  } finally {
    head.disarm();
  }
}

async function dispatchAttempts(req: Request, ctx: DispatchContext, head: HeadDeadline): Promise<Response> {
  const { deployment, requestId } = ctx;
  let prepared: PreparedBody;
  if (ctx.body !== undefined) {
    // A body read to route (OpenAI routes): inference has no side effects worth more than a wasted prefill.
    prepared = { ...heldBody(ctx.body), safeToRepeat: true };
  } else {
    // A public deployment's body is read before anything authenticated its sender: charged to the client's hold.
    const pending = dispatchBody(req, deployment, requestId, { client: ctx.client, authenticated: !deployment.access.public });
    const body = pending instanceof Promise ? await pending : pending;
    if (body instanceof Response) return body;
    prepared = { ...body, safeToRepeat: body.replayable && safeToRepeat(req.method, req.headers, deployment.policy.idempotent) };
  }
  const answer = await attemptsWith(req, ctx, head, prepared);
  // No replica took the body (an error of the edge's own): what it holds is given back now.
  if (!answer.fromReplica) prepared.release();
  return answer.response;
}

/** An answer of the edge's own (no replica's): its error. */
function edgeError(...args: Parameters<typeof errorResponse>): { response: Response; fromReplica: false } {
  return { response: errorResponse(...args), fromReplica: false };
}

async function attemptsWith(req: Request, ctx: DispatchContext, head: HeadDeadline, prepared: PreparedBody): Promise<{ response: Response; fromReplica: boolean }> {
  const { deployment, view, requestId, balancer } = ctx;

  const { search } = ctx.target;
  const path = deployment.policy.stripPrefix ? stripRoutePrefix(ctx.target.path, ctx.routePrefix) : ctx.target.path;
  const deadline = Date.now() + deployment.policy.requestTimeoutMs;
  // One Headers object for every attempt: fetch() copies it into its request, so
  // what differs per attempt (attempt number, signature, engine key) is set on it
  // in place instead of copying it per attempt.
  const headers = ctx.headers;
  headers.set(Header.protocol, String(PROTOCOL_VERSION));
  headers.set(Header.requestId, requestId);
  headers.set(Header.deployment, deployment.name);
  headers.set(Header.deadline, String(deadline));
  if (ctx.model !== undefined) headers.set(Header.model, ctx.model);
  if (ctx.session) headers.set(Header.session, ctx.session.id);
  // The session's binding token is the edge's business, not the replica's (ctx.headers lacks it).
  const sessionToken = ctx.session ? (req.headers.get(Header.sessionToken) ?? undefined) : undefined;
  /** The authorization the request carries to a replica without an engine key; read once an engine key first replaces it. */
  let ownAuthorization: string | null | undefined;
  const model = ctx.model;

  const input: BalanceInput = { random: Math.random, now: Date.now() };
  if (model !== undefined) input.model = model;
  // Only a balancer that reads the prompt pays for parsing and tokenizing it, and only from a body held here.
  if (balancer.readsPrompt && prepared.body instanceof ArrayBuffer) {
    // The extra key as the replica will see it: the model header as dispatched (the edge's own
    // on a multiplexed deployment, else the client's copy, which is passed on).
    const prompt = requestPromptKeys(deployment, ctx.target.path, prepared.body, headers.get(Header.model)?.trim());
    if (prompt) input.prompt = prompt;
  }
  // A body held here is covered by the signature (its digest, once per request); a streamed one cannot be.
  const bodySha256 = prepared.body instanceof ArrayBuffer && prepared.body.byteLength > 0 ? await bodySha256Of(prepared.body) : "";
  if (bodySha256 !== "") headers.set(Header.bodySha256, bodySha256);
  const pick = (among: readonly ReplicaEntry[]) => balancer.pick(among, input);
  // A session new to this isolate goes where its prompt's prefix goes, when the balancer
  // reads one; otherwise rendezvous on its id places it (session-affinity.ts).
  const placeNew = input.prompt !== undefined ? pick : undefined;

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
        ? await ctx.session.affinity.choose(deployment, ctx.session.id, candidates, pick, ctx.client, () => view.lapsed(now, tried), sessionToken, placeNew)
        : pick(candidates);
    if (!replica) break;
    if (model !== undefined) view.noteModelDispatch(replica, model);
    sawReplica = true;
    tried.add(replica.id);
    const checked = dispatchTarget(replica.url, path, search);
    if (!checked) {
      // requestTarget's path cannot leave the replica's URL; this is a bug, and nothing is sent.
      console.error(JSON.stringify({ msg: "dispatch target refused", deployment: deployment.name, replica: replica.id, request_id: requestId, path }));
      return edgeError("internal_error", "internal error", { requestId });
    }
    headers.set(Header.attempt, String(attempt));
    // The engine's own key (vLLM --api-key), registered by its agent, replaces any client credential.
    if (replica.engineKey !== undefined) {
      if (ownAuthorization === undefined) ownAuthorization = headers.get("authorization");
      headers.set("authorization", `Bearer ${replica.engineKey}`);
    } else if (ownAuthorization !== undefined) {
      // An earlier attempt went to an engine with its own key: this replica gets what the request had.
      if (ownAuthorization === null) headers.delete("authorization");
      else headers.set("authorization", ownAuthorization);
    }
    let signature: [string, string][];
    try {
      signature = await ctx.sign({ method: req.method, deployment: deployment.name, target: checked.target, requestId, replica: replica.id, bodySha256 });
    } catch (err) {
      console.error(JSON.stringify({ msg: "cannot sign dispatches (is SWITCHYARD_REPLICA_SECRET set?)", deployment: deployment.name, error: String(err) }));
      return edgeError("internal_error", "the edge cannot sign dispatches", { requestId });
    }
    for (const [name, value] of signature) headers.set(name, value);
    // The checked URL as fetch() takes it.
    const target = checked.href;
    if (ctx.trace) ctx.trace.attempts = attempt;

    const outcome = await attemptOn(replica, target, req.method, headers, prepared, deadline, head, ctx);
    if (outcome.kind === "response") {
      if (outcome.fromReplica) {
        if (ctx.trace) ctx.trace.replica = replica.id;
        balancer.served?.(replica.id, input);
        if (ctx.session) {
          if (sessionFollowsRetry(firstRefusal)) ctx.session.affinity.served(deployment, ctx.session.id, replica.id, ctx.background);
          // The binding after this request, signed: a client that sends it back is routed with no object call.
          const { affinity, id } = ctx.session;
          const token = affinity.reusableToken(deployment, id, replica.id) ?? (await affinity.tokenFor(deployment, id, replica.id));
          if (token !== undefined) outcome.response.headers.set(Header.sessionToken, token);
        }
      }
      return outcome;
    }
    if (attempt === 1) firstRefusal = outcome.why;
    // Not accepted: another replica may take it, if the body can be sent again.
    if (!prepared.replayable || attempt === maxAttempts) break;
    if (Date.now() >= deadline) return edgeError("deadline_exceeded", "deadline passed while retrying", { requestId });
    const wait = backoffMs(attempt, backoffBaseMs, backoffCapMs);
    if (wait > 0) await sleep(Math.min(wait, deadline - Date.now()));
  }
  if (!sawReplica) {
    // Why each replica was no candidate is for operators (the log), not for clients.
    console.error(JSON.stringify({ msg: "no ready replica", deployment: deployment.name, request_id: requestId, replicas: view.describe(Date.now()) }));
    return edgeError("no_ready_replica", `deployment "${deployment.name}" has no ready replica`, { requestId, retryAfterSeconds: 1 });
  }
  return edgeError("all_replicas_busy", `every replica of "${deployment.name}" tried was at capacity or unreachable`, {
    requestId,
    retryAfterSeconds: 1,
    details: { attempts: tried.size },
  });
}

/** `fromReplica`: the replica accepted the request and this is its answer (not a proxy error). */
/** `full`: the replica refused because it is at capacity (alive); `gone`: draining, unreachable or refusing the edge. */
type AttemptOutcome = { kind: "response"; response: Response; fromReplica: boolean } | { kind: "not_accepted"; why: "full" | "gone" };

async function attemptOn(
  replica: ReplicaEntry,
  target: string,
  method: string,
  headers: Headers,
  prepared: PreparedBody,
  deadline: number,
  head: HeadDeadline,
  ctx: DispatchContext,
): Promise<AttemptOutcome> {
  const { view, requestId, deployment } = ctx;
  view.startDispatch(replica);
  let upstream: Response;
  try {
    upstream = await fetch(target, { method, headers, body: prepared.body, signal: head.signal(deadline), redirect: "manual" });
  } catch (err) {
    view.endDispatch(replica);
    const verdict = judgeLostConnection({
      deadline: head.passed,
      tooSlow: prepared.tooSlow(),
      overLimit: prepared.overLimit(),
      clientGone: prepared.aborted(),
      safeToRepeat: prepared.safeToRepeat,
    });
    switch (verdict) {
      case "deadline":
        // A hung replica: after a few in a row it is ejected (circuit breaker).
        if (view.recordFailure(replica, Date.now(), deployment.policy)) logEjection(ctx, replica, "deadline");
        console.error(JSON.stringify({ msg: "replica deadline passed", deployment: deployment.name, replica: replica.id, request_id: requestId }));
        return respond(errorResponse("deadline_exceeded", "the replica did not answer before the deadline", { requestId }));
      // The client's fault, not the replica's: it is not marked down.
      case "too_slow":
        return respond(uploadTooSlow(requestId));
      case "over_limit":
        return respond(errorResponse("payload_too_large", `request body exceeds ${deployment.limits.maxRequestBodyBytes} bytes`, { requestId }));
      case "client_gone":
        return respond(bodyRefusal("aborted", deployment.limits.maxRequestBodyBytes, requestId));
      default:
        // The replica is unreachable or went away: no new dispatches to it from this isolate for a while.
        view.markDown(replica.id, Date.now());
        if (view.recordFailure(replica, Date.now(), deployment.policy)) logEjection(ctx, replica, "connection");
        console.error(JSON.stringify({ msg: "replica connection failed", deployment: deployment.name, replica: replica.id, request_id: requestId, error: String(err) }));
        if (verdict === "retry") return { kind: "not_accepted", why: "gone" };
        return respond(errorResponse("upstream_failed", "the connection to the replica was lost", { requestId }));
    }
  }

  const load = parseLoadHeader(upstream.headers.get(Header.load));
  if (load) view.applyLoad(replica.id, load, Date.now());

  const verdict = judgeAnswer({ status: upstream.status, rejected: upstream.headers.get(Header.rejected), load, engineKey: replica.engineKey !== undefined });
  // The deadline bounds the wait for an accepted response head only: a stream that has started is not cut by it.
  if (verdict.kind === "accepted") head.disarm();
  if (verdict.kind !== "accepted") {
    view.endDispatch(replica);
    if (verdict.kind === "credential_refusal") {
      if (view.recordFailure(replica, Date.now(), deployment.policy)) logEjection(ctx, replica, "refused the edge's credentials");
      console.error(JSON.stringify({ msg: "replica refused the edge's credentials", deployment: deployment.name, replica: replica.id, request_id: requestId }));
    } else {
      if (ctx.trace) ctx.trace.rejections++;
      if (verdict.lying && view.recordFailure(replica, Date.now(), deployment.policy)) logEjection(ctx, replica, "refused while claiming room");
    }
    // Free the connection: the refusal's body is a short JSON we do not need.
    ctx.background(upstream.body?.cancel() ?? Promise.resolve());
    return { kind: "not_accepted", why: verdict.kind === "rejected" ? verdict.why : "gone" };
  }

  view.recordSuccess(replica);
  const passed = passAnswerBody(upstream, { sseErrors: ctx.sseErrors === true, replicaId: replica.id, requestId });
  // The Response constructor copies the replica's headers; that copy is the client's, scrubbed in place.
  const response = new Response(passed.body, { status: upstream.status, statusText: upstream.statusText, headers: upstream.headers });
  const out = response.headers;
  scrubForClient(out);
  // Only the edge mints binding tokens (dispatch() adds the session's own to a session response).
  out.delete(Header.sessionToken);
  out.set(Header.replica, replica.id);
  out.set(Header.requestId, requestId);
  if (!passed.ended) {
    // A sized body is already produced by the replica; its work is done.
    view.endDispatch(replica);
    return respond(response, true);
  }
  // A stream: the replica is busy until it ends, so count it in flight until then.
  const ended = passed.ended.finally(() => view.endDispatch(replica));
  if (ctx.trace) ctx.trace.streamEnd = ended;
  ctx.background(ended);
  return respond(response, true);
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
