/**
 * The request path, top to bottom: a request for a deployment's route, from the
 * checks at the boundary to the replica's answer and its record. The stages, in
 * the order a request meets them:
 *
 *   request   (request.ts)   route, method, header size, keys (model, session)
 *   access    (access.ts)    API key and rate limit, for a private deployment
 *   admit     (admit.ts)     priority, the pending cap, the request's ticket
 *   view      (view.ts)      this isolate's view of the deployment's replicas
 *   gate      (admit.ts)     no free slot: held by priority and flow until one frees
 *   attempts  (below)        the body once (body.ts), then per attempt the choice (choose.ts)
 *                            and the signed dispatch (dispatch.ts); refusals retry elsewhere,
 *                            a round of them holds the request at the gate again; a P/D
 *                            deployment's first choice may split off the prefill (disaggregate.ts)
 *   tail      (below)        a /v1 answer's migration and usage
 *   observe   (below)        counted (this isolate's metrics, flushed to the Telemetry shards) and logged (one JSON line, sampled)
 *
 * A deployment whose model runs in this Worker is served by edge-model.ts in
 * place of view, gate and attempts. Each refusal is a JSON error. Below the
 * path: IsolateState (isolate-state.ts), what the path reads between requests in one isolate.
 */
import type { Deployment } from "../../config/deployment.ts";
import type { Env } from "../../env.ts";
import type { PrefixBelief, RequestSlo } from "../../policy/balancers/index.ts";
import type { ProxyMetrics, RequestOutcome } from "../../telemetry/proxy-metrics.ts";
import type { TokenCounts } from "../../telemetry/types.ts";
import { Header, MAX_SLO_MS, PD_PROTOCOLS, SLO_HEADERS, errorResponse, openaiEndpointOf, parseSloHeader, type ContinuationForm } from "../../protocol/index.ts";
import { keyRefusal, type KeyCheck } from "./access.ts";
import { clientOf, declaredLength, drainUnreadBody, prepareBody, type PreparedBody } from "./body.ts";
import { AdmissionSlot, admissionRefusal, bodyForEngine, flowOf, holdsAtZero, pendingShareOf, priorityOf, tokenCost, type Ticket } from "./admit.ts";
import { Dispatch, sessionFollowsRetry, tapped, type AttemptOutcome, type DispatchContext, type DispatchTrace, type Refusal, type SplitTrace } from "./dispatch.ts";
import { chooseFor } from "./choose.ts";
import { decodeLeg, splitFor, type DecodeLegEnd, type Disaggregation, type PrefillLeg } from "./disaggregate.ts";
import { leaveByOf, migratingStream, type MigrationPlan } from "./migrate.ts";
import { SseDataEvents, UsageTail, withoutUsageChunk } from "./token-usage.ts";
import { serveAtEdge } from "./edge-model.ts";
import type { IsolateState } from "./isolate-state.ts";
import { RouteTable, readRequestHeaders, replicaRouteForwarded, requestHeaderBytes, requestIdFor, requestKeys, stripRoutePrefix, type HeldBody, type RequestKeys } from "./request.ts";

/** Bodies of requests to no route are read up to this size before the 404 (see drainUnreadBody). */
export const NO_ROUTE_DRAIN_BYTES = 1024 * 1024;

/** What the path needs of the Worker's execution context. */
export interface Background {
  waitUntil(p: Promise<unknown>): void;
}

/**
 * The request path for `deployments`: a function serving one request for a
 * deployment's route (or for none: 404), given its normalised target.
 */
export function routeServer(deployments: readonly Deployment[], stateFor: (env: Env) => IsolateState) {
  const routes = new RouteTable(deployments.map((d) => ({ prefix: d.routePrefix, target: d })));
  return async function serveRoute(req: Request, env: Env, executionCtx: Background, target: { path: string; search: string }): Promise<Response> {
    const requestId = requestIdFor(req.headers.get(Header.requestId));
    const routed = routes.match(target.path);
    if (!routed) {
      await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("route_not_found", `no deployment serves ${target.path}`, { requestId });
    }
    const deployment = routed.target;
    if (!(deployment.methods as readonly string[]).includes(req.method)) {
      await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("method_not_allowed", `${req.method} is not served by "${deployment.name}"`, { requestId, headers: { allow: deployment.methods.join(", ") } });
    }
    // A replica's operational routes (/-/healthz, /metrics, an engine's admin routes) are not for clients.
    if (!replicaRouteForwarded(deployment, deployment.policy.stripPrefix ? stripRoutePrefix(target.path, routed.prefix) : target.path)) {
      await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
      return errorResponse("route_not_found", `no deployment serves ${target.path}`, { requestId });
    }
    const state = stateFor(env);
    const background = (p: Promise<unknown>) => executionCtx.waitUntil(p);
    const trace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
    return servePath(req, env, { deployment, routePrefix: routed.prefix, target, state, requestId, background, trace });
  };
}

/**
 * What the path does with a /v1 answer after its dispatch (routes/openai.ts sets it):
 * a stream continued elsewhere if its replica fails (migrate.ts), and its token usage
 * read as it passes (token-usage.ts), for the metrics, admission's correction and a
 * token limit's charge.
 */
export interface AnswerTail {
  migration?: {
    plan: MigrationPlan;
    limit: number;
    stallMs: number;
    /** The request that continues the stream: down the path again (serveRequest), with no tail of its own. */
    continueOn: (continuation: ArrayBuffer) => Promise<Response>;
  };
  usage?: {
    /** The API key's label (its public prefix), or "public". */
    key: string;
    /** The edge asked for the usage chunk, the client did not: taken out after the tap. */
    strip: boolean;
    /** A token-limited key: charged what the answer used once it has passed. */
    charge?: { keyHash: string; promptBytes: number; stream: boolean };
  };
}

/**
 * One request down the path: its stages (serveRequest), then its answer's tail, then
 * observe. The one place a request is observed, whichever route it came by.
 */
export async function servePath(req: Request, env: Env, ctx: ServeContext, tail?: AnswerTail): Promise<Response> {
  const { deployment, state, requestId, background, trace } = ctx;
  const started = Date.now();
  const usage = tail?.usage;
  // The slot's end waits for the usage read below (DispatchTrace.answered); settled on every way out.
  let answered: (() => void) | undefined;
  if (usage) trace.answered = new Promise<void>((resolve) => (answered = resolve));
  let response: Response;
  try {
    response = await serveRequest(req, ctx);
  } catch (e) {
    answered?.();
    throw e;
  }
  // Refused at the edge (no replica saw it): read the body so the client's connection survives.
  if (!ctx.openai && trace.attempts === 0 && response.status >= 400) await drainUnreadBody(req, deployment.limits.maxRequestBodyBytes);
  const migration = tail?.migration;
  if (migration && response.status === 200 && response.body) {
    response = migratingStream(response, {
      plan: migration.plan,
      limit: migration.limit,
      stallMs: migration.stallMs,
      requestId,
      background,
      markDown: (replica) => void state.snapshots.view(deployment.name, background).then((v) => v.markDown(replica, Date.now())),
      leaveBy: drainWatch(state, deployment.name, background),
      continueOn: migration.continueOn,
      onMigration: (m) => console.log(JSON.stringify({ msg: "stream migrated", deployment: deployment.name, request_id: requestId, from: m.from, tokens: m.tokens, migration: m.attempt, ok: m.ok, reason: m.reason })),
    });
  }
  const watched = usage ? watchUsage(response, usage.key, usage.strip) : null;
  observeRequest(env, state, deployment.name, req.method, response.status, requestId, started, trace, background, watched?.usage);
  const used = trace.used;
  const charge = usage?.charge;
  if (watched && (used || charge)) {
    void watched.usage.ended
      .then(() => {
        const t = watched.usage.usage();
        // Admission ordered it by an estimate of its tokens: what it used corrects its flow's place (AdmissionGate.correct).
        if (used && t) used(t.prompt + t.completion);
        // Charged once the answer has passed. One that ended before its usage (the client left,
        // the replica was cut) is charged its prompt's bytes / 4 and, streamed, a token for every
        // chunk the edge passed on.
        if (charge) state.tokenLimits.charge(deployment, charge.keyHash, t ? t.prompt + t.completion : Math.ceil(charge.promptBytes / 4) + (charge.stream ? watched.chunks() : 0), background);
      })
      .finally(() => answered?.());
  } else if (answered) void (watched?.usage.ended ?? trace.streamEnd ?? Promise.resolve()).finally(answered);
  return watched?.response ?? response;
}

/** How often one stream looks at its replica's drain deadline in the view (each look may refresh a view past its TTL). */
const DRAIN_LOOK_MS = 500;

/**
 * A migrating stream's watch on its replica's drain deadline (migrate.ts, leaveBy): the
 * replica's deadline less HANDOVER_LEAD_MS (leaveByOf), as this isolate's view has it. A stream
 * looks at most every DRAIN_LOOK_MS, and the look counts as a use of the view, so an
 * isolate that only streams still refreshes it (at its pace, routing.refreshEveryRequests):
 * a drain announced by a replica reaches the streams on it within a second or two.
 */
function drainWatch(state: IsolateState, deployment: string, background: (p: Promise<unknown>) => void): (replica: string) => number | undefined {
  let lookedAt = -Infinity;
  let drainsAt: number | undefined;
  let looked: string | undefined;
  return (replica) => {
    const now = Date.now();
    if (replica !== looked || now - lookedAt >= DRAIN_LOOK_MS) {
      looked = replica;
      lookedAt = now;
      drainsAt = state.snapshots.viewNow(deployment, background)?.get(replica)?.drainsAt;
    }
    return leaveByOf(drainsAt);
  };
}

/**
 * A successful answer's body, with its tail kept to read its token usage as it
 * passes (nothing is buffered beyond USAGE_TAIL_BYTES), and a stream's `data:`
 * chunks counted; errors pass as they are. One transform sees each chunk on its way
 * (dispatch.ts tapped). `stripUsage`: the edge asked for the usage chunk, the
 * client did not: it is taken out after the tap (token-usage.ts withoutUsageChunk).
 */
function watchUsage(response: Response, key: string, stripUsage: boolean): { response: Response; usage: UsageWatch; chunks: () => number } | null {
  if (response.status !== 200 || !response.body) return null;
  const tail = new UsageTail();
  const events = new SseDataEvents();
  const declared = response.headers.get("content-length");
  const length = declared !== null && /^\d{1,15}$/.test(declared) ? Number(declared) : null;
  const passed = tapped(
    response.body,
    (chunk) => {
      tail.push(chunk);
      events.push(chunk);
    },
    length,
  );
  // Read once, when the answer has passed: observe, admission's correction and a token charge all read it then.
  let counts: TokenCounts | null = null;
  const ended = passed.ended.then(() => {
    counts = tail.usage();
  });
  return {
    response: new Response(stripUsage ? withoutUsageChunk(passed.body) : passed.body, { status: response.status, statusText: response.statusText, headers: response.headers }),
    usage: { key, ended, usage: () => counts },
    chunks: () => events.count,
  };
}

export interface ServeContext {
  deployment: Deployment;
  routePrefix: string;
  /** The request's normalised path and raw query (serve/request.ts). */
  target: { path: string; search: string };
  state: IsolateState;
  requestId: string;
  background: (p: Promise<unknown>) => void;
  trace: DispatchTrace;
  /** The API key the route already checked (the OpenAI routes check it to answer for a model): access takes its rate, not the check again. */
  checkedKey?: Extract<KeyCheck, { ok: true }>;
  /**
   * An OpenAI-style request (routes/openai.ts): its body is already read and its
   * model and session come from it, not from headers.
   */
  openai?: { body: ArrayBuffer; held: HeldBody; stream: boolean; keys: RequestKeys; priority?: number; migratable?: boolean; maxTokens?: number; continuation?: ContinuationForm };
}

/**
 * One request for `deployment` (a route's, or an OpenAI route's), its stages in order:
 * request, access, admit (priority, the pending cap, its ticket), then the edge model,
 * or view, admit's gate, and the attempts (body, choose, dispatch).
 */
export async function serveRequest(req: Request, ctx: ServeContext): Promise<Response> {
  const { deployment, state, requestId, background } = ctx;
  const headers = req.headers;
  // request: one walk of the headers for their size and, for a deployment served by replicas, what its dispatch passes on.
  const read = deployment.backend.kind === "edge" ? undefined : readRequestHeaders(headers, !deployment.access.public);
  const headerBytes = read ? read.bytes : requestHeaderBytes(headers);
  if (headerBytes > deployment.limits.maxHeaderBytes) {
    return errorResponse("header_too_large", `request headers take ${headerBytes} bytes; the limit is ${deployment.limits.maxHeaderBytes}`, { requestId });
  }
  const openai = ctx.openai;
  const keys = openai ? { ok: true as const, keys: openai.keys } : requestKeys(headers, deployment);
  // access: the API key (the route may have checked it already) and its rate.
  /** The request's API key, when the deployment takes one (it names the client, below). */
  let keyHash: string | undefined;
  let keyPriority: { default: number; max: number } | undefined;
  if (!deployment.access.public) {
    const key = ctx.checkedKey ?? (await state.apiKeys.check(deployment.name, headers.get("authorization"), background));
    if (!key.ok) return keyRefusal(key, requestId);
    keyHash = key.keyHash;
    keyPriority = key.priority;
    const rate = state.rateLimits.take(deployment, key.keyHash, background);
    if (!rate.ok) {
      return errorResponse("rate_limited", `rate limit of ${deployment.access.rateLimit?.requestsPerSecond} requests/s for this key exceeded`, {
        requestId,
        retryAfterSeconds: rate.retryAfterSeconds,
      });
    }
  }
  if (!keys.ok) return errorResponse(keys.code, keys.message, { requestId });
  // admit: the request's priority, its place under the pending cap and, held, its ticket.
  const priority = priorityOf(deployment, headers, openai?.priority, keyPriority);
  if (!priority.ok) return priority.response;
  // choose: the request's latency objectives, checked before it waits anywhere.
  const slo = requestSlo(deployment, headers);
  if (slo === null) return errorResponse("bad_request", `${SLO_HEADERS.ttft} and ${SLO_HEADERS.tpot} take whole milliseconds, 1 to ${MAX_SLO_MS}`, { requestId });
  // Who the request comes from, for per-client bounds (its share of the pending cap, session
  // bindings, duplex uploads) and its flow: its API key, else its address (Cloudflare sets
  // cf-connecting-ip; the local stack's workerd too).
  const client = keyHash !== undefined ? `key:${keyHash}` : clientOf(headers);
  const deadline = Date.now() + deployment.policy.requestTimeoutMs;
  const ticket: Ticket | undefined =
    read && deployment.admission.hold
      ? {
          priority: priority.priority,
          flow: flowOf(deployment, headers, client),
          cost: openai ? tokenCost(openai.body.byteLength, openai.maxTokens) : tokenCost(declaredLength(headers) ?? 0, undefined),
          deadline,
          refresh: () => state.snapshots.view(deployment.name, background),
          // With relays, the relay passes the location's held requests on (they ride on the view asks).
          ...(deployment.autoscaling && !deployment.routing.relay ? { demand: (held: number) => state.tellDemand(deployment.name, held, background) } : {}),
          ...(req.signal ? { signal: req.signal } : {}),
        }
      : undefined;
  const done = state.admit(deployment, client);
  if (done === "isolate") {
    return errorResponse("queue_full", `deployment "${deployment.name}" has ${deployment.limits.maxPendingRequests} requests waiting here already`, {
      requestId,
      retryAfterSeconds: 1,
    });
  }
  if (done === "client") {
    return errorResponse("rate_limited", `this client has ${pendingShareOf(deployment)} requests for deployment "${deployment.name}" pending here already`, {
      requestId,
      retryAfterSeconds: 1,
    });
  }
  // A client that leaves cancels its request: the runtime drops what it was waiting on, and a
  // `finally` below may never run. Its signal does fire (enable_request_signal): it ends the count.
  req.signal?.addEventListener("abort", done, { once: true });
  try {
    // A model run inside this Worker (src/edge/; `read` is undefined for it): no replica, no dispatch; the pending cap still applies.
    if (!read) {
      ctx.trace.replica = "edge";
      return await serveAtEdge(req, { deployment, requestId });
    }
    // view: this isolate's view of the deployment's replicas.
    const view = state.snapshots.viewNow(deployment.name, background) ?? (await state.snapshots.view(deployment.name, background));
    const { model, session } = keys.keys;
    // The optional fields set one by one, not spread from objects made for the purpose.
    const dispatched: DispatchContext = {
      deployment,
      routePrefix: ctx.routePrefix,
      target: ctx.target,
      headers: read.passed,
      sign: state.sign,
      trace: ctx.trace,
      view,
      balancer: state.balancerFor(deployment),
      requestId,
      background,
      client,
      deadline,
    };
    if (model !== undefined) dispatched.model = model;
    if (session !== undefined) dispatched.session = { id: session, affinity: state.affinity };
    if (priority.priority !== 0) dispatched.priority = priority.priority;
    if (req.signal) dispatched.clientSignal = req.signal;
    if (state.coordinates) dispatched.here = state.coordinates;
    if (slo) dispatched.slo = slo;
    if (openai) {
      // As received, but for the engine's own `priority` where the engines schedule by it (admit.ts, bodyForEngine).
      dispatched.body = bodyForEngine(deployment.openai?.enginePriority, ctx.target.path, openai.body, priority.priority, openai.priority !== undefined);
      dispatched.held = openai.held;
      dispatched.sseErrors = openai.stream;
      if (openai.migratable) dispatched.migratable = true;
      if (openai.continuation !== undefined) dispatched.continuation = openai.continuation;
    }
    // admit's gate: no free slot, the request is held by priority and flow until one frees (admit.ts).
    const slot = ticket && (await AdmissionSlot.enter(state.gateFor(deployment.name), deployment, view, ticket));
    if (typeof slot === "string") return admissionRefusal(slot, deployment, requestId);
    // Admission ordered it by an estimate of its tokens: what it used corrects its flow's place.
    if (slot) ctx.trace.used = (tokens) => slot.used(tokens);
    // A chat or completion of a deployment that splits prefill from decode (a continuation of a stream goes whole to a decode replica).
    const split = deployment.openai?.disaggregation;
    const endpoint = openai && split ? openaiEndpointOf(ctx.target.path) : undefined;
    const pd: Disaggregation | undefined =
      split && (endpoint === "chat" || endpoint === "completions")
        ? { protocol: PD_PROTOCOLS[split.protocol], minUncachedTokens: split.minUncachedTokens, endpoint, prefillBalancer: state.balancerFor(deployment, "prefill") }
        : undefined;
    // Its decode replica (or the whole request's) is chosen by the decode leg's balancer.
    if (pd) dispatched.balancer = state.balancerFor(deployment, "decode");
    try {
      return await attempts(req, dispatched, slot, pd);
    } finally {
      // Its slot frees when its answer has passed (a stream's at its end) and, where servePath
      // reads its usage, once that has corrected its flow's place (DispatchTrace.answered).
      const end = ctx.trace.answered ?? ctx.trace.streamEnd;
      if (slot && end) void end.finally(() => slot.end());
      else slot?.end();
    }
  } finally {
    done();
  }
}

/**
 * A request's latency objectives: its x-slo-ttft-ms and x-slo-tpot-ms, each else the
 * deployment's (`policy.latency.slo`); undefined with none; null when a header is malformed.
 */
export function requestSlo(deployment: Deployment, headers: Headers): RequestSlo | undefined | null {
  const ttft = parseSloHeader(headers.get(SLO_HEADERS.ttft));
  const tpot = parseSloHeader(headers.get(SLO_HEADERS.tpot));
  if (ttft === null || tpot === null) return null;
  const own = deployment.policy.latency?.slo;
  const ttftMs = ttft ?? own?.ttftMs;
  const tpotMs = tpot ?? own?.tpotMs;
  if (ttftMs === undefined && tpotMs === undefined) return undefined;
  return { ...(ttftMs !== undefined && { ttftMs }), ...(tpotMs !== undefined && { tpotMs }) };
}

/** The early refusal of a request no replica is predicted to serve within its TTFT objective (`policy.latency.slo.refuse`). */
function sloRefusal(unmet: { sloMs: number; bestMs: number }, requestId: string): Response {
  return errorResponse("slo_unattainable", `no replica is predicted to give the first token within ${unmet.sloMs} ms (the best is predicted at ${Math.round(unmet.bestMs)} ms)`, {
    requestId,
    retryAfterSeconds: 1,
    details: { slo_ttft_ms: unmet.sloMs, predicted_ttft_ms: Math.round(unmet.bestMs) },
  });
}

/**
 * body → choose → dispatch, attempt after attempt, until a replica accepts the
 * request: its body prepared once (body.ts), each attempt sent to the replica the
 * choice names among those not tried yet (choose.ts), signed and judged by the
 * dispatch (dispatch.ts). A round that found no replica, or only full ones, holds the
 * request again in admission (`slot`, admit.ts) and starts over, while its body can
 * still be sent.
 */
export async function attempts(req: Request, ctx: DispatchContext, slot: AdmissionSlot | undefined, pd?: Disaggregation): Promise<Response> {
  const { deployment, requestId } = ctx;
  const received = await prepareBody(req, deployment, requestId, { client: ctx.client, authenticated: !deployment.access.public }, ctx.body);
  if (received instanceof Response) return received;
  let prepared: PreparedBody = received;
  // The extra prompt key as the replica will see it: the edge's own model on a multiplexed deployment, else the client's copy, which is passed on.
  const promptModel = ctx.model ?? ctx.headers.get(Header.model)?.trim();
  // The session's binding token is the edge's business, not the replica's (ctx.headers lacks it).
  const sessionToken = ctx.session ? (req.headers.get(Header.sessionToken) ?? undefined) : undefined;
  // A P/D deployment's request goes to a decode replica (whole, or its decode leg: disaggregate.ts).
  const choice = chooseFor(pd ? { ...ctx, role: "decode" } : ctx, prepared.body, promptModel, sessionToken);
  let opened = new Dispatch(req, ctx, prepared);
  /** Still to decide whether to split (on the first replica chosen; a stream's continuation never is). */
  let splitting = pd !== undefined && ctx.continuation === undefined;
  let fromReplica = false;
  try {
    const tried = new Set<string>();
    let sawReplica = false;
    /** How the first attempt (the session's bound replica, for session requests) ended, when it was not accepted. */
    let firstRefusal: Refusal | undefined;
    const { maxAttempts } = deployment.policy;
    for (let round = 1; ; round++) {
      /** This round found a replica to try (the view may have lost them all since the last one: killed, drained). */
      let roundSawReplica = false;
      for (let attempt = 1; attempt <= maxAttempts; attempt++) {
        const replica = await choice.next(attempt, tried);
        if (!replica) break;
        // No replica is predicted to meet the request's time to first token, and the deployment asks to refuse such a one early.
        const unmet = attempt === 1 && round === 1 && deployment.policy.latency?.slo?.refuse === true ? choice.unattainable() : undefined;
        if (unmet) {
          if (ctx.trace?.latency) ctx.trace.latency.refused = true;
          return sloRefusal(unmet, requestId);
        }
        sawReplica = roundSawReplica = true;
        tried.add(replica.id);
        slot?.dispatching();
        /** A split whose prefill leg runs beside this first attempt (SGLang's protocol), and the body to send whole instead. */
        let concurrent: { leg: PrefillLeg; whole: PreparedBody } | undefined;
        if (splitting) {
          splitting = false;
          // The decode leg's body, carrying the prefill's answer, goes to this replica and any retry's.
          const split = await splitFor(req, ctx, pd!, prepared, replica, promptModel);
          if (split) {
            if (split.prefill) concurrent = { leg: split.prefill, whole: prepared };
            prepared = split.body;
            opened = new Dispatch(req, ctx, prepared);
          }
        }
        // The balancer's load rule goes with the request where a refusal can still go elsewhere.
        const limit = prepared.replayable && attempt < maxAttempts ? choice.loadLimit(replica) : undefined;
        let outcome: AttemptOutcome;
        if (concurrent) {
          // Both legs at once (SGLang's protocol): a failed prefill makes a new pair, then sends the request
          // whole to this replica; a refused decode sends it whole on the next attempt (disaggregate.ts decodeLeg).
          let { leg } = concurrent;
          const { whole } = concurrent;
          let decoded: DecodeLegEnd;
          for (;;) {
            const sent = opened;
            decoded = await decodeLeg(ctx, leg, () => sent.attempt(replica, attempt, limit));
            const again = decoded.outcome === undefined ? await leg.again() : undefined;
            if (!again) break;
            opened.close(true);
            prepared = again.body;
            opened = new Dispatch(req, ctx, prepared);
            leg = again.prefill!;
          }
          if (decoded.fallback !== undefined) {
            if (ctx.trace?.split) ctx.trace.split.fallback = decoded.fallback;
            opened.close(true);
            prepared = whole;
            opened = new Dispatch(req, ctx, prepared);
          }
          // Every pair's prefill failed: the decode replica, which took the legs, takes the request whole now.
          outcome = decoded.outcome ?? (await opened.attempt(replica, attempt, limit));
        } else outcome = await opened.attempt(replica, attempt, limit);
        if (outcome.kind === "response") {
          fromReplica = outcome.fromReplica;
          if (fromReplica) await choice.served(replica, outcome.response, sessionFollowsRetry(firstRefusal));
          return outcome.response;
        }
        if (attempt === 1 && round === 1) firstRefusal = outcome.why;
        // Not accepted: another replica may take it, if the body can be sent again.
        if (!prepared.replayable || attempt === maxAttempts) break;
        // Over the load limit is no fault: the next choice is tried at once.
        const late = outcome.why === "over_limit" ? undefined : await opened.backoff(attempt);
        if (late) return late;
      }
      // Held again only with a body that can still be sent (one held here, or none sent yet), and, when this
      // round found no replica at all, only for a deployment that scales from zero: any other is down.
      if (!slot || (sawReplica && !prepared.replayable) || (!roundSawReplica && !holdsAtZero(deployment))) break;
      const again = await slot.again();
      if (again !== "go") return admissionRefusal(again, deployment, requestId);
      tried.clear();
    }
    return opened.refused(sawReplica, tried.size);
  } finally {
    opened.close(fromReplica);
  }
}

// --- observe: what one request did, counted and logged ------------------------------

/**
 * After each proxied request: the isolate's metrics (flushed to the Telemetry
 * object every few seconds) and one structured JSON log line with the request
 * id, deployment, replica, status and timings (Workers Logs / `wrangler tail`
 * in production; workerd's output locally). The line is not free (a few % of a
 * plain request's CPU, docs/scaling.md): SWITCHYARD_REQUEST_LOGS may sample the
 * routine ones (requestLogRate); the metrics still count every request.
 */
/** A /v1 request's token usage, known once its response has passed (token-usage.ts). */
export interface UsageWatch {
  /** The API key's label: its public prefix (as the admin API lists it), or "public". */
  key: string;
  /** Settles when the response has passed on completely (or was cut). */
  ended: Promise<unknown>;
  usage: () => TokenCounts | null;
}

/**
 * A request whose line may be left out when SWITCHYARD_REQUEST_LOGS is a fraction:
 * answered (below 400) on the first attempt, nothing refused or ejected on the way,
 * and done within this long. Every other line is always written.
 */
export const ROUTINE_REQUEST_MS = 1_000;

/**
 * SWITCHYARD_REQUEST_LOGS as a rate: "off" 0 lines, a fraction from "0" to "1" (a
 * decimal) that share of the routine requests' lines and every other line, anything
 * else (the default "on") every line. Read once per value, not per request.
 */
let logSetting: { value: string | undefined; rate: number | "off" } | undefined;

export function requestLogRate(value: string | undefined): number | "off" {
  if (logSetting === undefined || logSetting.value !== value) {
    const fraction = value !== undefined && /^(0|1|0?\.\d{1,6}|1\.0{1,6})$/.test(value) ? Number(value) : 1;
    logSetting = { value, rate: value === "off" ? "off" : fraction };
  }
  return logSetting.rate;
}

/** What this stage needs of the isolate's state (serve.ts, IsolateState): its counters, and their flush. */
export interface MetricsHolder {
  readonly metrics: ProxyMetrics;
  flushMetrics(background: (p: Promise<unknown>) => void): void;
}

export function observeRequest(
  env: Env,
  state: MetricsHolder,
  deployment: string,
  method: string,
  status: number,
  requestId: string,
  started: number,
  trace: DispatchTrace,
  background: (p: Promise<unknown>) => void,
  usage?: UsageWatch,
): void {
  const ttfbMs = Date.now() - started;
  const outcome: RequestOutcome = { status, attempts: trace.attempts, rejections: trace.rejections, ejections: trace.ejections, ttfbMs };
  if (trace.promptFallback !== undefined) outcome.promptFallback = trace.promptFallback;
  const l = trace.latency;
  if (l?.sloMs !== undefined) outcome.slo = l.refused === true ? "refused" : l.predicted.total <= l.sloMs ? "predicted_met" : "predicted_missed";
  state.metrics.recordResponse(deployment, outcome);
  const rate = requestLogRate(env.SWITCHYARD_REQUEST_LOGS);
  const finish = () => {
    const totalMs = Date.now() - started;
    state.metrics.recordDuration(deployment, totalMs);
    const tokens = usage?.usage() ?? null;
    if (tokens) state.metrics.recordTokens(deployment, usage!.key, tokens);
    const routine = status < 400 && trace.attempts <= 1 && trace.rejections === 0 && trace.ejections === 0 && totalMs < ROUTINE_REQUEST_MS;
    if (rate !== "off" && (rate >= 1 || !routine || Math.random() < rate)) {
      console.log(
        requestLogLine({
          requestId,
          deployment,
          method,
          status,
          replica: trace.replica ?? null,
          attempts: trace.attempts,
          ttfbMs,
          totalMs,
          tokens: tokens ? { key: usage!.key, prompt: tokens.prompt, completion: tokens.completion } : null,
          ...(trace.prefix && { prefix: trace.prefix }),
          ...(trace.split && { split: trace.split }),
          ...(trace.latency && { latency: trace.latency }),
        }),
      );
    }
  };
  // The usage watch's end comes after the dispatch's (its pipe reads the dispatched body).
  const end = usage?.ended ?? trace.streamEnd;
  if (end) {
    // A long stream's end may come after the flush interval: flush then too (takeFlush throttles).
    background(end.then(() => {
      finish();
      state.flushMetrics(background);
    }));
  } else finish();
  state.flushMetrics(background);
}

/**
 * The per-request JSON log line, written as one string.
 * It is exactly what JSON.stringify gives for the same fields in the same order,
 * without the object and the spread built first: it runs once per request, and a
 * V8 measurement put the template at about a fifth of the object's cost.
 */
/** What one proxied request's line says. */
export interface RequestLogFields {
  requestId: string;
  deployment: string;
  method: string;
  status: number;
  replica: string | null;
  attempts: number;
  ttfbMs: number;
  totalMs: number;
  /** A /v1 request's token usage and its key label (token-usage.ts). */
  tokens?: { key: string; prompt: number; completion: number } | null;
  /** The prompt's blocks, those the chosen replica was believed to hold and the most any was (a prefix-scoring balancer's choice). */
  prefix?: PrefixBelief;
  /** A P/D deployment's request: whether its prefill went elsewhere (disaggregate.ts). */
  split?: SplitTrace;
  /** The chosen replica's predicted time to first token and the request's objective, when the choice predicted one. */
  latency?: DispatchTrace["latency"];
}

/** Printable ASCII without `"` and `\`: quoted as it is (JSON.stringify's output too). */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/** A JSON string literal; JSON.stringify only for the rare value that needs escapes. */
function str(s: string): string {
  return PLAIN.test(s) ? `"${s}"` : JSON.stringify(s);
}

/** A JSON number as JSON.stringify writes it (null for a non-finite one). */
function num(n: number): string {
  return Number.isFinite(n) ? String(n) : "null";
}

export function requestLogLine(f: RequestLogFields): string {
  let line =
    `{"msg":"request","request_id":${str(f.requestId)},"deployment":${str(f.deployment)},"method":${str(f.method)},"status":${num(f.status)}` +
    `,"replica":${f.replica === null ? "null" : str(f.replica)},"attempts":${num(f.attempts)},"ttfb_ms":${num(f.ttfbMs)},"total_ms":${num(f.totalMs)}`;
  const t = f.tokens;
  if (t) line += `,"key":${str(t.key)},"prompt_tokens":${num(t.prompt)},"completion_tokens":${num(t.completion)}`;
  const p = f.prefix;
  if (p) line += `,"prefix_blocks":${num(p.blocks)},"prefix_held":${num(p.held)},"prefix_most":${num(p.most)}${p.home === undefined ? "" : `,"prefix_home":${str(p.home)}`}`;
  const l = f.latency;
  if (l) {
    const { predicted: x } = l;
    line += `,"ttft_predicted_ms":${num(Math.round(x.total))},"ttft_trip_ms":${num(Math.round(x.trip))},"ttft_queue_ms":${num(Math.round(x.queue))},"ttft_prefill_ms":${num(Math.round(x.prefill))}`;
    if (l.sloMs !== undefined) line += `,"slo_ttft_ms":${num(l.sloMs)}`;
  }
  const s = f.split;
  if (s) {
    line += `,"pd_prefill":${s.prefill === undefined ? "null" : str(s.prefill)}`;
    if (s.uncached !== undefined) line += `,"pd_uncached":${num(s.uncached)}`;
    if (s.fallback !== undefined) line += `,"pd_fallback":${str(s.fallback)}`;
  }
  return `${line}}`;
}
