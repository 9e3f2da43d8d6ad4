/**
 * The dispatch stage: one attempt of a client request on one replica, signed and
 * judged. The attempts' loop (who is tried, retries, holds) is the path's (serve.ts);
 * bodies are prepared by body.ts. Bodies stream in both directions; the only state
 * touched is this isolate's routing view (no Durable Object call). In this file, in
 * order: the opened dispatch and its attempt's fetch, the verdicts on how an attempt
 * ended (pure), and the answer's body passed back as it streams.
 */
import type { Deployment } from "../../config/deployment.ts";
import { Header, PROTOCOL_VERSION, errorResponse, parseLoadHeader, parseReplicaTime, UNAUTHORIZED_REJECTION, type Load, errorBody, type ContinuationForm } from "../../protocol/index.ts";
import type { ActiveBalancer, PrefixBelief } from "../../policy/balancers/index.ts";
import { backoffMs } from "../../policy/pick-replica.ts";
import { scrubForClient, stripRoutePrefix, type HeldBody } from "./request.ts";
import { bodyRefusal, uploadTooSlow, type PreparedBody } from "./body.ts";
import type { ReplicaEntry, RoutingView } from "./view.ts";
import type { Coordinates, TtftPrediction } from "../../policy/latency-model.ts";
import type { RequestSlo } from "../../policy/balancers/index.ts";
import type { SessionAffinity } from "./session-affinity.ts";

/** Signs one dispatch (dispatchSignature, protocol/signing.ts): the headers that prove the edge sent it, to that replica, with that body. */
export type DispatchSigner = (p: { method: string; deployment: string; target: string; requestId: string; replica: string; bodySha256: string }) => Promise<[string, string][]>;

export interface DispatchContext {
  deployment: Deployment;
  routePrefix: string;
  /** The request's normalised path and raw query (serve/request.ts). */
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
  /** The request's priority (admission's), when it is not 0: sent as x-switchyard-priority for the replica's own scheduler. */
  priority?: number;
  /** Filled in as the dispatch goes, for metrics and logs. */
  trace?: DispatchTrace;
  /**
   * The request body, already read (OpenAI routes read it to route). It is
   * replayed on another replica until one accepts the request, even after a lost
   * connection: inference has no side effects worth more than a wasted prefill.
   */
  body?: ArrayBuffer;
  /** The body as the route read it (request.ts HeldBody, its one parse): what the choice keys the prompt from. */
  held?: HeldBody;
  /**
   * The response is a Server-Sent Events stream (OpenAI `stream: true`): a
   * replica failing after the first byte ends it with an error event instead of
   * a cut connection.
   */
  sseErrors?: boolean;
  /** The edge continues this stream elsewhere if it breaks (stream migration): sent as x-switchyard-migratable. */
  migratable?: boolean;
  /** This request continues a broken stream, in this form: it goes only to replicas that take it. */
  continuation?: ContinuationForm;
  /** When the request's time is up, epoch ms (holding included); default: requestTimeoutMs from the first attempt. */
  deadline?: number;
  /** The client's disconnect (Request.signal): it aborts the dispatch's fetch, before the answer's head or after. */
  clientSignal?: AbortSignal;
  /** Where this isolate is, when it knows (IsolateState.coordinates): the choice estimates unmeasured trips from it. */
  here?: Coordinates;
  /** The request's latency objectives (requestSlo). */
  slo?: RequestSlo;
}

/** Why a split request went whole after all (docs/pd.md, "When something fails"). */
export type PdFallback = "no_prefill_replica" | "prefill_refused" | "prefill_failed" | "nothing_passed" | "decode_refused";

/** What the disaggregate stage did with a request (disaggregate.ts), for the log. */
export interface SplitTrace {
  /** The prompt's tokens not cached on the decode replica, as the choice believed (undefined: its balancer does not read prompts). */
  uncached?: number;
  /** The prefill replica whose answer the decode leg carries. */
  prefill?: string;
  /** Why the request went whole to the decode replica after all. */
  fallback?: PdFallback;
}

/** What happened to one request on its way to a replica. */
export interface DispatchTrace {
  attempts: number;
  rejections: number;
  ejections: number;
  /** Why the prompt was keyed by bytes instead of the deployment's tokenizer (src/prefix/prompt-keys.ts), when it was. */
  promptFallback?: string;
  /** The replica whose answer the client got. */
  replica?: string;
  /** What the last choice believed of the prompt's cached prefix, when its balancer scored it. */
  prefix?: PrefixBelief;
  /** A deployment with prefill/decode disaggregation: whether and where the request's prefill went. */
  split?: SplitTrace;
  /** The chosen replica's predicted time to first token, when the choice predicted one (src/policy/latency-model.ts), and the request's TTFT objective. */
  latency?: { predicted: TtftPrediction; sloMs?: number; refused?: boolean };
  /** Settles when a streamed response body has been passed on completely (or cut). */
  streamEnd?: Promise<unknown>;
  /** Set by the admit stage: tells it the tokens the request actually used, once known (AdmissionGate.correct). */
  used?: (tokens: number) => void;
  /**
   * Set by servePath when it reads the answer's usage: settles once that usage has been read
   * and `used` told. The admission slot frees then, not at the stream's end, so the next held
   * request is chosen with its flow's place already corrected.
   */
  answered?: Promise<unknown>;
}

const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));

/**
 * The deadline for a replica's response head, one per request: a single timer
 * (instead of an AbortController, a closure and a timer per attempt) aborts
 * whichever attempt is waiting when the request's deadline passes. Armed at the
 * first attempt, disarmed as soon as a replica's answer is accepted (a stream
 * that has started is not cut by it) and when the dispatch ends.
 *
 * The client's disconnect (`client`, Request.signal) aborts the wait too, so a client
 * that leaves before the answer's head frees the replica's slot: the fetch is aborted
 * and the replica sees its connection close. After the head it does nothing here: the
 * answer's stream is cancelled with the client's, and an aborted fetch would read as
 * the replica failing mid-stream.
 */
class HeadDeadline {
  #abort: AbortController | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #deadlinePassed = false;
  #client: AbortSignal | undefined;

  /** The signal of the request's deadline (`at`, epoch ms; the same for every attempt) and of the client's leaving, armed on first use. */
  signal(at: number, client?: AbortSignal): AbortSignal {
    if (!this.#abort) {
      this.#abort = new AbortController();
      this.#timer = setTimeout(deadlinePassed, Math.max(0, at - Date.now()), this);
      if (client) {
        this.#client = client;
        if (client.aborted) this.#abort.abort();
        else client.addEventListener("abort", this, { once: true });
      }
    }
    return this.#abort.signal;
  }

  /** The deadline passed (the attempt waiting then was aborted). */
  get passed(): boolean {
    return this.#deadlinePassed;
  }

  /** The timer's end (module-level callback: no closure per request). */
  expire(): void {
    this.#deadlinePassed = true;
    this.#abort?.abort();
  }

  /** The client left (an EventListener object: no closure per request). */
  handleEvent(): void {
    this.#abort?.abort();
  }

  disarm(): void {
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#client?.removeEventListener("abort", this);
    this.#client = undefined;
  }
}

// Module-level: the timer gets its deadline as an argument, so no closure per request.
const deadlinePassed = (head: HeadDeadline) => head.expire();

/**
 * One request's dispatch, opened once its body is prepared (body.ts prepareBody): its
 * protocol headers set once. The path (serve.ts) chooses each replica and calls
 * attempt() on it; this only sends, signs and judges. close() gives back what the
 * dispatch held.
 */
export class Dispatch {
  readonly #req: Request;
  readonly #ctx: DispatchContext;
  readonly #prepared: PreparedBody;
  readonly #head = new HeadDeadline();
  readonly #path: string;
  /** The authorization the request carries to a replica without an engine key; read once an engine key first replaces it. */
  #ownAuthorization: string | null | undefined;
  /** When the request's time is up, epoch ms. */
  readonly #deadline: number;

  constructor(req: Request, ctx: DispatchContext, prepared: PreparedBody) {
    const { deployment, requestId } = ctx;
    this.#req = req;
    this.#ctx = ctx;
    this.#prepared = prepared;
    this.#path = deployment.policy.stripPrefix ? stripRoutePrefix(ctx.target.path, ctx.routePrefix) : ctx.target.path;
    this.#deadline = ctx.deadline ?? Date.now() + deployment.policy.requestTimeoutMs;
    // One Headers object for every attempt: fetch() copies it into its request, so
    // what differs per attempt (attempt number, signature, engine key) is set on it
    // in place instead of copying it per attempt.
    const headers = ctx.headers;
    headers.set(Header.protocol, String(PROTOCOL_VERSION));
    headers.set(Header.requestId, requestId);
    headers.set(Header.deployment, deployment.name);
    headers.set(Header.deadline, String(this.#deadline));
    if (ctx.model !== undefined) headers.set(Header.model, ctx.model);
    if (ctx.session) headers.set(Header.session, ctx.session.id);
    if (ctx.priority !== undefined) headers.set(Header.priority, String(ctx.priority));
    if (ctx.migratable) headers.set(Header.migratable, "1");
    if (prepared.sha256 !== "") headers.set(Header.bodySha256, prepared.sha256);
  }

  /**
   * Attempt number `attempt` (from 1), on `replica`: sent signed; accepted (its answer), or
   * refused and why. `loadLimit`: the most load at which the replica is to take it
   * (Header.loadLimit; choose.ts Choice.loadLimit), none when undefined.
   */
  async attempt(replica: ReplicaEntry, attempt: number, loadLimit?: number): Promise<AttemptOutcome> {
    const { deployment, requestId } = this.#ctx;
    const checked = dispatchTarget(replica.url, this.#path, this.#ctx.target.search);
    if (!checked) {
      // requestTarget's path cannot leave the replica's URL; this is a bug, and nothing is sent.
      console.error(JSON.stringify({ msg: "dispatch target refused", deployment: deployment.name, replica: replica.id, request_id: requestId, path: this.#path }));
      return respond(errorResponse("internal_error", "internal error", { requestId }));
    }
    const headers = this.#ctx.headers;
    headers.set(Header.attempt, String(attempt));
    if (loadLimit !== undefined) headers.set(Header.loadLimit, String(loadLimit));
    else headers.delete(Header.loadLimit);
    // The engine's own key (vLLM --api-key), registered by its agent, replaces any client credential.
    if (replica.engineKey !== undefined) {
      if (this.#ownAuthorization === undefined) this.#ownAuthorization = headers.get("authorization");
      headers.set("authorization", `Bearer ${replica.engineKey}`);
    } else if (this.#ownAuthorization !== undefined) {
      // An earlier attempt went to an engine with its own key: this replica gets what the request had.
      if (this.#ownAuthorization === null) headers.delete("authorization");
      else headers.set("authorization", this.#ownAuthorization);
    }
    let signature: [string, string][];
    try {
      signature = await this.#ctx.sign({ method: this.#req.method, deployment: deployment.name, target: checked.target, requestId, replica: replica.id, bodySha256: this.#prepared.sha256 });
    } catch (err) {
      console.error(JSON.stringify({ msg: "cannot sign dispatches (is SWITCHYARD_REPLICA_SECRET set?)", deployment: deployment.name, error: String(err) }));
      return respond(errorResponse("internal_error", "the edge cannot sign dispatches", { requestId }));
    }
    for (const [name, value] of signature) headers.set(name, value);
    if (this.#ctx.trace) this.#ctx.trace.attempts = attempt;
    const outcome = await attemptOn(replica, checked.href, this.#req.method, headers, this.#prepared, this.#deadline, this.#head, this.#ctx);
    if (outcome.kind === "response" && outcome.fromReplica && this.#ctx.trace) this.#ctx.trace.replica = replica.id;
    return outcome;
  }

  /** The pause before the attempt after `attempt` (policy.backoff*), or the deadline's error when the time is up. */
  async backoff(attempt: number): Promise<Response | undefined> {
    const { backoffBaseMs, backoffCapMs } = this.#ctx.deployment.policy;
    if (Date.now() >= this.#deadline) return errorResponse("deadline_exceeded", "deadline passed while retrying", { requestId: this.#ctx.requestId });
    const wait = backoffMs(attempt, backoffBaseMs, backoffCapMs);
    if (wait > 0) await sleep(Math.min(wait, this.#deadline - Date.now()));
    return undefined;
  }

  /** No attempt was accepted: the edge's own error, no_ready_replica when no replica was there to try. */
  refused(sawReplica: boolean, tried: number): Response {
    const { deployment, requestId } = this.#ctx;
    if (!sawReplica) {
      // Why each replica was no candidate is for operators (the log), not for clients.
      console.error(JSON.stringify({ msg: "no ready replica", deployment: deployment.name, request_id: requestId, replicas: this.#ctx.view.describe(Date.now()) }));
      return errorResponse("no_ready_replica", `deployment "${deployment.name}" has no ready replica`, { requestId, retryAfterSeconds: 1 });
    }
    return errorResponse("all_replicas_busy", `every replica of "${deployment.name}" tried was at capacity or unreachable`, {
      requestId,
      retryAfterSeconds: 1,
      details: { attempts: tried },
    });
  }

  /** The dispatch is over: the deadline's timer stops, and a body no replica took is given back now. */
  close(fromReplica: boolean): void {
    this.#head.disarm();
    if (!fromReplica) this.#prepared.release();
  }
}

/** Parsed replica URLs (one per registered replica): origin and base path, so dispatch does not parse them per request. */
const replicaBases = new Map<string, { origin: string; base: string }>();
const REPLICA_BASES_MAX = 4096;

function replicaBase(replicaUrl: string): { origin: string; base: string } | null {
  let known = replicaBases.get(replicaUrl);
  if (known) return known;
  let u: URL;
  try {
    u = new URL(replicaUrl);
  } catch {
    return null;
  }
  known = { origin: u.origin, base: u.pathname.replace(/\/+$/, "") };
  if (replicaBases.size >= REPLICA_BASES_MAX) replicaBases.clear();
  replicaBases.set(replicaUrl, known);
  return known;
}

/**
 * The URL a dispatch goes to: the replica's URL with `path` (normalised, starting
 * with "/") and `search` appended. Null when the result would leave the replica's
 * origin or its base path; with a path from requestTarget that cannot happen, so
 * null means a bug, and the request is refused rather than sent anywhere else.
 */
export function dispatchUrl(replicaUrl: string, path: string, search: string): URL | null {
  const replica = replicaBase(replicaUrl);
  if (!replica || !path.startsWith("/")) return null;
  let u: URL;
  try {
    u = new URL(`${replica.origin}${replica.base}${path}${search}`);
  } catch {
    return null;
  }
  if (u.origin !== replica.origin) return null;
  if (replica.base !== "" && u.pathname !== replica.base && !u.pathname.startsWith(`${replica.base}/`)) return null;
  return u;
}

/** A checked dispatch URL as fetch() is given it, and the request target a dispatch signature covers (path and query as the replica receives them). */
export interface DispatchTarget {
  href: string;
  target: string;
}

/**
 * dispatchUrl's answers per replica URL, then per path and query: a path sent
 * again (the usual case) costs no URL parse and no getter calls. The key is the
 * path and query as one string, which is all the URL is built from. At most
 * DISPATCH_TARGETS_MAX answers in all (then forgotten at once, like replicaBases);
 * refusals are not kept (they are bugs, logged each time).
 */
const dispatchTargets = new Map<string, Map<string, DispatchTarget>>();
const DISPATCH_TARGETS_MAX = 4096;
let dispatchTargetCount = 0;

/** dispatchUrl's URL as a DispatchTarget, from memory when the same replica URL, path and query were checked before. */
export function dispatchTarget(replicaUrl: string, path: string, search: string): DispatchTarget | null {
  const key = path + search;
  let known = dispatchTargets.get(replicaUrl);
  const hit = known?.get(key);
  if (hit) return hit;
  const u = dispatchUrl(replicaUrl, path, search);
  if (!u) return null;
  const entry = { href: u.href, target: u.pathname + u.search };
  if (dispatchTargetCount >= DISPATCH_TARGETS_MAX) {
    dispatchTargets.clear();
    dispatchTargetCount = 0;
    known = undefined;
  }
  if (!known) dispatchTargets.set(replicaUrl, (known = new Map()));
  known.set(key, entry);
  dispatchTargetCount++;
  return entry;
}

/**
 * An attempt's end: an answer for the client (`fromReplica`: the replica accepted the
 * request and this is its answer, not a proxy error), or not accepted and why (`full`:
 * at capacity, alive; `over_limit`: over the attempt's load limit, alive and to be passed
 * by at once; `gone`: draining, unreachable or refusing the edge).
 */
export type AttemptOutcome = { kind: "response"; response: Response; fromReplica: boolean } | { kind: "not_accepted"; why: Refusal };
export type Refusal = "full" | "over_limit" | "gone";

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
  const mark = view.startDispatch(replica);
  // Its predicted prefill queues at the replica until the replica's next word (latency-model.ts ReplicaTimings.book).
  const booked = ctx.trace?.latency?.predicted.prefill;
  if (booked !== undefined) replica.timings.book(mark, booked);
  let upstream: Response;
  try {
    upstream = await fetch(target, { method, headers, body: prepared.body, signal: head.signal(deadline, ctx.clientSignal), redirect: "manual" });
  } catch (err) {
    view.endDispatch(replica, mark);
    const verdict = judgeLostConnection({
      deadline: head.passed,
      tooSlow: prepared.tooSlow(),
      overLimit: prepared.overLimit(),
      clientGone: prepared.aborted() || ctx.clientSignal?.aborted === true,
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

  const answeredAt = Date.now();
  const load = parseLoadHeader(upstream.headers.get(Header.load));
  if (load) view.applyLoad(replica.id, load, answeredAt);
  // The wait for this head less the replica's share of it is one trip (src/policy/latency-model.ts).
  const replicaMs = parseReplicaTime(upstream.headers.get(Header.replicaTime));
  if (replicaMs !== undefined) replica.timings.recordTrip(answeredAt - mark, replicaMs);
  const verdict = judgeAnswer({ status: upstream.status, rejected: upstream.headers.get(Header.rejected), load, engineKey: replica.engineKey !== undefined });

  // The deadline bounds the wait for an accepted response head only: a stream that has started is not cut by it.
  if (verdict.kind === "accepted") head.disarm();
  if (verdict.kind !== "accepted") {
    view.endDispatch(replica, mark);
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
  // A stream's head comes before its prefill is queued: the replica's word it carries does not count it yet.
  if (passed.ended && booked !== undefined && load?.prefillWaitMs !== undefined) replica.timings.book(answeredAt + 1e-3, booked);
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
    view.endDispatch(replica, mark);
    replica.timings.recordService(answeredAt - mark);
    return respond(response, true);
  }
  // A stream: the replica is busy until it ends, so count it in flight until then.
  const ended = passed.ended.finally(() => {
    const now = Date.now();
    view.endDispatch(replica, mark, now);
    replica.timings.recordService(now - mark);
  });
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

/**
 * How one dispatch attempt ended, judged from what came back: the rules the attempt
 * loop (above) applies, pure so each can be tested alone. The loop does what a
 * verdict says (count a failure towards ejection, try another replica, answer the
 * client); these functions only decide.
 */
/** A replica's response head, as the rules read it. */
export interface AnswerHead {
  status: number;
  /** The x-switchyard-rejected header (null when absent). */
  rejected: string | null;
  /** The parsed load header; null when absent or garbled. */
  load: Load | null;
  /** The dispatch carried the engine's own key (an agent registered one). */
  engineKey: boolean;
}

export type AnswerVerdict =
  /** The replica took the request: its answer goes to the client, whatever its status. */
  | { kind: "accepted" }
  /**
   * The replica refused the edge itself: it checks signatures with another key (or a
   * clock far off), or the engine does not take the key its agent registered. Not the
   * client's doing: another replica is tried, and it counts towards ejection.
   */
  | { kind: "credential_refusal" }
  /**
   * The replica did not take it: `full` (at capacity, alive), `over_limit` (over the
   * dispatch's load limit, alive) or `gone` (draining, shutting down). `lying`: it
   * refused for capacity while its load header claims room, or its load header is
   * garbled; a broken replica, which counts towards ejection so it cannot soak up every
   * request's first attempt.
   */
  | { kind: "rejected"; why: Refusal; lying: boolean };

export function judgeAnswer(head: AnswerHead): AnswerVerdict {
  if (head.status === 401 && (head.rejected === UNAUTHORIZED_REJECTION || head.engineKey)) return { kind: "credential_refusal" };
  if (head.status === 503 && head.rejected !== null) {
    const full = head.rejected === "capacity";
    const { load } = head;
    const lying = !load || (full && load.state === "ready" && load.ongoing + load.queued < load.max);
    return { kind: "rejected", why: full ? "full" : head.rejected === "over_limit" ? "over_limit" : "gone", lying };
  }
  return { kind: "accepted" };
}

/** What is known when the connection to a replica failed before a response head. */
export interface LostConnection {
  /** The deadline for the response head passed (the edge aborted the fetch). */
  deadline: boolean;
  /** The client's body stopped arriving (serve/body.ts). */
  tooSlow: boolean;
  /** The client's streamed body outgrew the limit. */
  overLimit: boolean;
  /** The client's connection went away while its body was being passed on. */
  clientGone: boolean;
  /** The request may run again elsewhere (safeToRepeat, with a replayable body). */
  safeToRepeat: boolean;
}

/**
 * - `deadline`: a hung replica (504; counts towards ejection).
 * - `too_slow` / `over_limit` / `client_gone`: the client's doing (408 / 413 / its
 *   upload aborted); the replica is not blamed.
 * - `retry`: the replica is unreachable or went away (cool-down, counts towards
 *   ejection) and the request may run elsewhere; `lost`: the same, but it may not (502).
 */
export type LostVerdict = "deadline" | "too_slow" | "over_limit" | "client_gone" | "retry" | "lost";

export function judgeLostConnection(c: LostConnection): LostVerdict {
  if (c.deadline) return "deadline";
  if (c.tooSlow) return "too_slow";
  if (c.overLimit) return "over_limit";
  if (c.clientGone) return "client_gone";
  return c.safeToRepeat ? "retry" : "lost";
}

/**
 * Whether a session follows the replica that served a retry: only when its own
 * replica (the first attempt's) was gone or draining. A full one keeps the session;
 * the next requests spill until the saturation grace period ends (session-affinity.ts).
 */
export function sessionFollowsRetry(firstRefusal: Refusal | undefined): boolean {
  return firstRefusal === "gone";
}

/**
 * How a replica's response body is passed on to the client, and when it has
 * been passed on completely (or cut): the replica is busy until then.
 */
/** A response body passed on, and when it has been passed on completely (or cut). */
export interface PassedStream {
  body: ReadableStream<Uint8Array>;
  ended: Promise<void>;
}

/**
 * A replica's answer body as the client gets it. A sized (or empty) body goes as it
 * is: the replica has produced it already, its work is done (`ended` undefined). A
 * stream goes through the native pipe, or, for an SSE answer whose failure must end
 * in an error event, event by event (sseWithErrorEvent).
 */
export function passAnswerBody(
  upstream: Response,
  o: { sseErrors: boolean; replicaId: string; requestId: string },
): { body: ReadableStream<Uint8Array> | null; ended?: Promise<void> } {
  if (!upstream.body || upstream.headers.has("content-length")) return { body: upstream.body };
  return o.sseErrors ? sseWithErrorEvent(upstream.body, o.replicaId, o.requestId) : nativePipe(upstream.body);
}

/**
 * The native pipe: no JS per chunk. A client that goes away cancels the
 * readable side, which cancels the pipe's source: the replica sees its request
 * closed and stops.
 */
export function nativePipe(source: ReadableStream<Uint8Array>): PassedStream {
  const { readable, writable } = new IdentityTransformStream();
  return { body: readable, ended: source.pipeTo(writable).catch(() => undefined) };
}

/**
 * An SSE stream passed on natively (no JS per chunk); when the replica fails
 * mid-stream (it died, or the connection broke), the client gets a last event,
 * OpenAI's `data: {"error": {...}}`, and a clean end, instead of a stream that
 * simply stops. A client that goes away cancels the replica's response.
 *
 * How the cut is seen without touching each chunk: the pipe into the client's
 * stream keeps that stream open and unaborted whatever happens upstream
 * (preventClose, preventAbort), so it settles with the outcome. It resolves
 * when the replica ended its body, and rejects ("Network connection lost.")
 * when the connection dropped mid-body; either way the edge then writes what
 * follows itself: nothing but the close, or the error event first. (workerd
 * 1.20260426 settled neither way with preventAbort, which is why an earlier
 * design pulled every chunk through JS; 1.20261117 settles: bench/README.md.)
 *
 * Replicas write whole events, so a cut lands between events; a connection
 * broken in the middle of a chunk would leave that partial event before the
 * error event (the edge no longer holds events back to frame them: holding is
 * what cost the JS step per chunk). Nothing is buffered at the edge.
 *
 * The client sees only a code and the request id; the cause goes to the log.
 */
export function sseWithErrorEvent(source: ReadableStream<Uint8Array>, replicaId: string, requestId: string): PassedStream {
  const { readable, writable } = new IdentityTransformStream();
  /** Writes `tail` (if any) and closes the client's stream; false when the client has gone. */
  const finish = async (tail: Uint8Array | undefined): Promise<boolean> => {
    const writer = writable.getWriter();
    try {
      if (tail) await writer.write(tail);
      await writer.close();
      return true;
    } catch {
      return false;
    }
  };
  const ended = source.pipeTo(writable, { preventClose: true, preventAbort: true }).then(
    () => {
      // Not awaited: the replica's work is done once its body has ended.
      void finish(undefined);
    },
    (err: unknown) => {
      // A cut and a client that went away reject alike ("Network connection lost."); only
      // after a cut does the client's side still take the error event. Not awaited either:
      // a client that stopped reading must not keep the replica counted busy.
      const event = errorBody("upstream_failed", "the replica failed mid-stream", { requestId });
      void finish(new TextEncoder().encode(`data: ${JSON.stringify(event)}\n\n`)).then((toClient) => {
        if (toClient) console.error(JSON.stringify({ msg: "stream failed", replica: replicaId, request_id: requestId, error: String(err) }));
      });
    },
  );
  return { body: readable, ended };
}

/**
 * A response body passed on with each chunk shown to `observe` (the /v1 routes keep
 * its tail to read the token usage, token-usage.ts), through one transform: the
 * chunk is seen, then enqueued for the client. It keeps the stream's backpressure
 * (a client that stops reading stops the replica's stream; nothing piles up here)
 * and its cancellation (a client that goes away cancels the pipe, which cancels
 * the replica's request). A sized body (`length`) keeps its length through a
 * FixedLengthStream. Until 2026-12 a stream was teed instead: the copy branch read
 * the replica's stream to its end whatever the client did, so a closed `/v1/responses`
 * stream still generated all of its tokens, and unread streams piled up in memory.
 */
export function tapped(source: ReadableStream<Uint8Array>, observe: (chunk: Uint8Array) => void, length: number | null): PassedStream {
  const sink = length === null ? new IdentityTransformStream() : new FixedLengthStream(length);
  const tap = new TransformStream<Uint8Array, Uint8Array>({
    transform(chunk, controller) {
      observe(chunk);
      controller.enqueue(chunk);
    },
  });
  return { body: sink.readable, ended: source.pipeThrough(tap).pipeTo(sink.writable).catch(() => undefined) };
}
