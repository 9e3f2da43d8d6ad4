/**
 * The request path, top to bottom: a request for a deployment's route, from the
 * checks at the boundary to the replica's answer and its record. The stages, in
 * the order a request meets them:
 *
 *   request   (request.ts)   route, method, header size, keys (model, session)
 *   access    (access.ts)    API key and rate limit, for a private deployment
 *   view      (view.ts)      this isolate's view of the deployment's replicas
 *   admit     (admit.ts)     no free slot: held by priority and flow until one frees
 *   choose    (choose.ts)    the deployment's balancer, given the request's prompt
 *   dispatch  (dispatch.ts)  signed attempts until a replica accepts; its answer streams back
 *   observe   (observe.ts)   counted and logged
 *
 * A deployment whose model runs in this Worker is served by edge-model.ts in
 * place of view, admit, choose and dispatch. Each refusal is a JSON error. Below the
 * path: IsolateState, what the path reads between requests in one isolate.
 */
import { type Deployment, DEFAULT_PREFIX_POLICY } from "../../config/deployment.ts";
import type { Env } from "../../env.ts";
import { Header, errorResponse, type ContinuationForm, type RoutingSnapshot } from "../../protocol/index.ts";
import { keyRefusal, ApiKeyCache, KEY_SET_TTL_MS, RELAYED_KEY_SET_TTL_MS, RateLimits, TOKEN_RATE } from "./access.ts";
import type { BucketLimits } from "../../policy/token-bucket.ts";
import type { RateUse } from "../../policy/rate-limit-sync.ts";
import { clientOf, declaredLength, drainUnreadBody } from "./body.ts";
import { AdmissionGate, admissionRefusal, flowOf, priorityOf, tokenCost, type Ticket } from "./admit.ts";
import { dispatch, type DispatchContext, type DispatchTrace, type DispatchSigner, dispatchSignature } from "./dispatch.ts";
import { serveAtEdge } from "./edge-model.ts";
import { bodyForEngine } from "./engine-priority.ts";
import { observeRequest } from "./observe.ts";
import { RouteTable, readRequestHeaders, replicaRouteForwarded, requestHeaderBytes, requestIdFor, requestKeys, stripRoutePrefix, type RequestKeys } from "./request.ts";
import { servedDeployment } from "../../config/served.ts";
import { keysFor } from "../../state/access-keys.ts";
import { rateLimiterFor } from "../../state/rate-limiter.ts";
import { relayFor } from "../../state/snapshot-relay.ts";
import { sessionRouterFor } from "../../state/session-router.ts";
import { createBalancer, type ActiveBalancer } from "../../policy/balancers/index.ts";
import { mergedSnapshot, tellHeldDemand } from "../../state/routing-plane.ts";
import { VIEW_SUMMARY_BYTES } from "../../state/summary-delta.ts";
import { HELD_DEMAND_INTERVAL_MS } from "../../state/routing-shards.ts";
import { ProxyMetrics } from "../../telemetry/proxy-metrics.ts";
import { sendFlush } from "../../state/telemetry.ts";
import { SessionAffinity } from "./session-affinity.ts";
import { SessionTokens, sessionTokenKeyFor } from "./session-token.ts";
import { RELAYED_SNAPSHOT_TTL_MS, SNAPSHOT_TTL_MS, SnapshotCache } from "./view.ts";

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
    const started = Date.now();
    const trace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
    const response = await serveRequest(req, { deployment, routePrefix: routed.prefix, target, state, requestId, background, trace });
    // Refused at the edge (no replica saw it): read the body so the client's connection survives.
    if (trace.attempts === 0 && response.status >= 400) await drainUnreadBody(req, deployment.limits.maxRequestBodyBytes);
    observeRequest(env, state, deployment.name, req.method, response.status, requestId, started, trace, background);
    return response;
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
  /**
   * An OpenAI-style request (routes/openai.ts): its body is already read and its
   * model and session come from it, not from headers.
   */
  openai?: { body: ArrayBuffer; stream: boolean; keys: RequestKeys; priority?: number; migratable?: boolean; maxTokens?: number; continuation?: ContinuationForm };
}

/** One request for `deployment` (a route's, or an OpenAI route's): the checks, then the edge model or a dispatch. */
export async function serveRequest(req: Request, ctx: ServeContext): Promise<Response> {
  const { deployment, state, requestId, background } = ctx;
  const headers = req.headers;
  // One walk of the headers for their size and, for a deployment served by replicas, what its dispatch passes on.
  const read = deployment.backend.kind === "edge" ? undefined : readRequestHeaders(headers, !deployment.access.public);
  const headerBytes = read ? read.bytes : requestHeaderBytes(headers);
  if (headerBytes > deployment.limits.maxHeaderBytes) {
    return errorResponse("header_too_large", `request headers take ${headerBytes} bytes; the limit is ${deployment.limits.maxHeaderBytes}`, { requestId });
  }
  /** The request's API key, when the deployment takes one (it names the client, below). */
  let keyHash: string | undefined;
  let keyPriority: { default: number; max: number } | undefined;
  if (!deployment.access.public) {
    const key = await state.apiKeys.check(deployment.name, headers.get("authorization"), background);
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
  const openai = ctx.openai;
  const keys = openai ? { ok: true as const, keys: openai.keys } : requestKeys(headers, deployment);
  if (!keys.ok) return errorResponse(keys.code, keys.message, { requestId });
  const priority = priorityOf(deployment, headers, openai?.priority, keyPriority);
  if (!priority.ok) return priority.response;
  // Who the request comes from, for per-client bounds (its share of the pending cap, session
  // bindings, duplex uploads) and its flow: its API key, else its address (Cloudflare sets
  // cf-connecting-ip; the local stack's workerd too).
  const client = keyHash !== undefined ? `key:${keyHash}` : clientOf(headers);
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
    const deadline = Date.now() + deployment.policy.requestTimeoutMs;
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
    if (openai) {
      // As received, but for the engine's own `priority` where the engines schedule by it (engine-priority.ts).
      dispatched.body = bodyForEngine(deployment.openai?.enginePriority, ctx.target.path, openai.body, priority.priority, openai.priority !== undefined);
      dispatched.sseErrors = openai.stream;
      if (openai.migratable) dispatched.migratable = true;
      if (openai.continuation !== undefined) dispatched.continuation = openai.continuation;
    }
    if (!deployment.admission.hold) return await dispatch(req, dispatched);
    return await admitted(req, dispatched, state.gateFor(deployment.name), {
      priority: priority.priority,
      flow: flowOf(deployment, headers, client),
      cost: openai ? tokenCost(openai.body.byteLength, openai.maxTokens) : tokenCost(declaredLength(headers) ?? 0, undefined),
      deadline,
      refresh: () => state.snapshots.view(deployment.name, background),
      // With relays, the relay passes the location's held requests on (they ride on the view asks).
      ...(deployment.autoscaling && !deployment.routing.relay ? { demand: (held: number) => state.tellDemand(deployment.name, held, background) } : {}),
      ...(req.signal ? { signal: req.signal } : {}),
    });
  } finally {
    done();
  }
}

/** The requests one client may have pending for `deployment` in an isolate (limits.maxPendingRequestsPerClient). */
export function pendingShareOf(deployment: Deployment): number {
  return deployment.limits.maxPendingRequestsPerClient ?? Math.max(1, Math.ceil(deployment.limits.maxPendingRequests / 4));
}

/**
 * The admit stage around the dispatch (admit.ts): the request waits for a free slot
 * when none is free, and again when every replica it tried was full; a slot freed by
 * its end (a stream's, when it streams) lets the next held request go.
 */
async function admitted(req: Request, ctx: DispatchContext, gate: AdmissionGate, ticket: Ticket): Promise<Response> {
  const { deployment, view, requestId } = ctx;
  const first = await gate.enter(deployment, view, ticket);
  if (first.outcome !== "go") return admissionRefusal(first.outcome, deployment, requestId);
  gate.started(ticket.priority, ticket.flow);
  if (ctx.trace && ticket.cost !== undefined) {
    const estimated = ticket.cost;
    ctx.trace.used = (tokens) => gate.correct(ticket.priority, ticket.flow, estimated, tokens);
  }
  /** Counted in the gate's requests in flight: not while held again (a refused request holds no slot). */
  let running = true;
  let reserved = first.queued;
  const dispatching = () => {
    if (!reserved) return;
    reserved = false;
    gate.dispatching();
  };
  ctx.onDispatch = dispatching;
  ctx.hold = async () => {
    if (running) gate.ended(ticket.priority, ticket.flow, false);
    running = false;
    const again = await gate.enter(deployment, view, { ...ticket, again: true });
    reserved = again.queued;
    if (again.outcome === "go") {
      gate.started(ticket.priority, ticket.flow);
      running = true;
    }
    return again.outcome;
  };
  const over = () => {
    if (running) gate.ended(ticket.priority, ticket.flow);
    running = false;
    gate.pump();
  };
  // A client that leaves cancels the request, and the `finally` below may never run: its signal frees the slot.
  const gone = () => {
    dispatching();
    over();
  };
  req.signal?.addEventListener("abort", gone, { once: true });
  try {
    return await dispatch(req, ctx);
  } finally {
    dispatching();
    const end = ctx.trace?.streamEnd;
    if (end) void end.finally(over);
    else over();
  }
}

/**
 * What one proxy isolate keeps between requests: routing views, balancers,
 * session bindings, API key sets, rate-limit buckets and pending-request counts. Module
 * scope on purpose (an isolate serves many requests); created on first use
 * because the bindings it needs arrive with the first request's env.
 */
export class IsolateState {
  readonly snapshots: SnapshotCache;
  readonly affinity: SessionAffinity;
  readonly apiKeys: ApiKeyCache;
  readonly rateLimits: RateLimits;
  /** Per-key token limits of the /v1 routes (access.tokenLimit), kept across isolates as rateLimits are. */
  readonly tokenLimits: RateLimits;
  readonly metrics = new ProxyMetrics();
  readonly #env: Env;
  /** Requests per deployment dispatched and not yet answered by a replica. */
  readonly pending = new Map<string, number>();
  /** The same per deployment and client (`${deployment}\n${client}`), while it has any. */
  readonly #pendingByClient = new Map<string, number>();
  /** Signs each dispatch with its deployment's replica key (derived from the master secret once per isolate). */
  readonly sign: DispatchSigner;
  /**
   * Where this isolate runs (Cloudflare's colo, from the first request's
   * `cf.colo`; "local" on workerd): it names the relay the isolate asks.
   */
  location = "local";
  /** Random per isolate: picks this isolate's sample of a deployment too large for one view. */
  readonly seed = crypto.getRandomValues(new Uint32Array(1))[0]!;
  /** Names this isolate to the autoscaler, which sums the isolates' held requests. */
  readonly #isolateId = crypto.randomUUID();
  /** Per deployment, when this isolate last told the autoscaler how many requests it holds. */
  readonly #demandToldAt = new Map<string, number>();
  /** Each deployment's admission gate (admit.ts), created on first use. */
  readonly #gates = new Map<string, AdmissionGate>();
  /** Each deployment's balancer, created on first use: its state (a turn, a memory of recent prefixes) lives as long as the routing view. */
  readonly #balancers = new Map<string, ActiveBalancer>();
  /** Per deployment, the cursor of the peers' dispatches last learned from the relay. */
  readonly #peerCursors = new Map<string, number>();
  /** Other isolates' dispatch notes learned through relays (observability and tests). */
  peerDispatchesLearned = 0;

  constructor(env: Env) {
    this.#env = env;
    this.sign = (p) => dispatchSignature(env.SWITCHYARD_REPLICA_SECRET, p);
    this.snapshots = new SnapshotCache(
      (name, have) => this.#snapshotOf(name, have),
      Date.now,
      (name) => {
        const routing = servedDeployment(name)?.routing;
        return { ttlMs: routing?.relay ? RELAYED_SNAPSHOT_TTL_MS : SNAPSHOT_TTL_MS, everyRequests: routing?.refreshEveryRequests ?? 1 };
      },
      (name) => this.#gates.get(name)?.busy ?? false,
    );
    const ttlMs = (d: Deployment) => d.sessionAffinity.ttlSeconds * 1000;
    this.affinity = new SessionAffinity(
      {
        resolve: async (d, session, proposal) =>
          (await sessionRouterFor(env, d.name, session, d.sessionAffinity.shards).resolve(session, proposal, ttlMs(d))).replica,
        rebind: async (d, session, from, to) =>
          (await sessionRouterFor(env, d.name, session, d.sessionAffinity.shards).rebind(session, from, to, ttlMs(d))).replica,
      },
      Date.now,
      // Binding tokens, under a key derived from the master secret once per isolate.
      new SessionTokens(() => sessionTokenKeyFor(env.SWITCHYARD_REPLICA_SECRET)),
    );
    this.apiKeys = new ApiKeyCache(
      (name) => (servedDeployment(name)?.routing.relay ? relayFor(env, name, this.location).activeKeys(name) : keysFor(env, name).activeKeys()),
      Date.now,
      (name) => (servedDeployment(name)?.routing.relay ? RELAYED_KEY_SET_TTL_MS : KEY_SET_TTL_MS),
    );
    // With relays, rate-limit syncs go through the location's relay too (it syncs the location's sum with the shard).
    const syncRates = (name: string, shard: number, limits: BucketLimits, uses: RateUse[]) =>
      servedDeployment(name)?.routing.relay
        ? relayFor(env, name, this.location).syncRates(name, shard, limits, uses)
        : rateLimiterFor(env, name, shard).sync(limits, uses);
    this.rateLimits = new RateLimits(syncRates);
    this.tokenLimits = new RateLimits(syncRates, Date.now, TOKEN_RATE);
  }

  /**
   * A deployment's routing snapshot: from its relay in this location, or merged
   * from its shards without relays. Either way it carries only the prefix-cache
   * summaries the view lacks (`have`), at most VIEW_SUMMARY_BYTES of them.
   */
  #snapshotOf(name: string, have: string): Promise<RoutingSnapshot> {
    const routing = servedDeployment(name)?.routing ?? { shards: 1, relay: false };
    if (routing.relay) return this.#relayedSnapshotOf(name, routing.shards, have);
    return mergedSnapshot(this.#env, name, routing.shards, undefined, { have, maxBytes: VIEW_SUMMARY_BYTES });
  }

  /**
   * The relay's view, with this isolate's recent dispatches posted and the location's
   * other isolates' learned, when the balancer shares them (src/state/dispatch-board.ts).
   * Notes of an ask that fails are lost: the replicas' summaries say the same a little later.
   */
  async #relayedSnapshotOf(name: string, shards: number, have: string): Promise<RoutingSnapshot> {
    const balancer = this.#balancers.get(name);
    const relay = relayFor(this.#env, name, this.location);
    // Admission's demand rides on the same ask; the answer's budget bounds this isolate's requests in flight.
    const gate = this.#gates.get(name);
    const demand = gate?.demand();
    const posted = balancer?.shareDispatches ? { after: this.#peerCursors.get(name) ?? 0, notes: balancer.shareDispatches() } : undefined;
    const snapshot = await relay.view(name, shards, this.seed, have, posted, demand);
    gate?.setBudget(snapshot.admissionBudget, snapshot.admissionFlowCaps, snapshot.admissionOpenFrom);
    if (!posted) return snapshot;
    if (snapshot.peers) {
      this.#peerCursors.set(name, snapshot.peers.cursor);
      this.peerDispatchesLearned += snapshot.peers.notes.length;
      balancer?.learnDispatches?.(snapshot.peers.notes, Date.now());
    }
    return snapshot;
  }

  /** Forgets the deployment's key set here and in this location's relay (an admin call changed it). */
  async keysChanged(deployment: string): Promise<void> {
    if (servedDeployment(deployment)?.routing.relay) await relayFor(this.#env, deployment, this.location).forgetKeys();
    this.apiKeys.invalidate(deployment);
  }

  /** The deployment's balancer in this isolate (`policy.balancer`, src/policy/balancers/). */
  balancerFor(deployment: Deployment): ActiveBalancer {
    let balancer = this.#balancers.get(deployment.name);
    if (!balancer) this.#balancers.set(deployment.name, (balancer = createBalancer(deployment.policy.balancer, deployment.policy.prefix ?? DEFAULT_PREFIX_POLICY)));
    return balancer;
  }

  /** The deployment's admission gate in this isolate (admit.ts). */
  /**
   * Tells the deployment's autoscaler (its leader routing object) how many requests this
   * isolate holds: at most once per HELD_DEMAND_INTERVAL_MS per deployment, and only while
   * it holds any, so a deployment that is not saturated costs no call.
   */
  tellDemand(deployment: string, held: number, background: (p: Promise<unknown>) => void): void {
    const now = Date.now();
    if (now - (this.#demandToldAt.get(deployment) ?? 0) < HELD_DEMAND_INTERVAL_MS) return;
    this.#demandToldAt.set(deployment, now);
    background(tellHeldDemand(this.#env, deployment, this.#isolateId, held));
  }

  gateFor(deployment: string): AdmissionGate {
    let gate = this.#gates.get(deployment);
    if (!gate) this.#gates.set(deployment, (gate = new AdmissionGate()));
    return gate;
  }

  /** A timer is waiting to send counts a quiet isolate would otherwise keep (flushMetrics). */
  #flushTimer = false;

  /**
   * Sends the metrics deltas to this isolate's Telemetry shard when a flush is due
   * (in the background). Counts that are not due yet are sent when they are, by one
   * timer per isolate inside the request's waitUntil, so the last requests before a
   * quiet spell are counted then, not at the next request (which may never come:
   * `requests_total` read 27 for 51 requests, and stayed there).
   */
  flushMetrics(background: (p: Promise<unknown>) => void): void {
    const sent = this.#sendDueFlush();
    if (sent) {
      background(sent);
      return;
    }
    const wait = this.metrics.flushDueIn(Date.now());
    if (wait === null || this.#flushTimer) return;
    this.#flushTimer = true;
    background(
      new Promise((r) => setTimeout(r, wait + 1)).then(() => {
        this.#flushTimer = false;
        return this.#sendDueFlush();
      }),
    );
  }

  /** The send of the deltas, when a flush is due; undefined when none is. */
  #sendDueFlush(): Promise<void> | undefined {
    const flush = this.metrics.takeFlush(Date.now());
    if (!flush) return undefined;
    return sendFlush(this.#env, flush).catch((err: unknown) => console.error(JSON.stringify({ msg: "telemetry flush failed", error: String(err) })));
  }

  /**
   * Counts a request of `client` as pending until `done` is called; or which cap it
   * meets: the deployment's (`isolate`) or the client's share of it (`client`,
   * pendingShareOf).
   */
  admit(deployment: Deployment, client: string): "isolate" | "client" | (() => void) {
    const n = this.pending.get(deployment.name) ?? 0;
    if (n >= deployment.limits.maxPendingRequests) return "isolate";
    const key = `${deployment.name}\n${client}`;
    const mine = this.#pendingByClient.get(key) ?? 0;
    if (mine >= pendingShareOf(deployment)) return "client";
    this.pending.set(deployment.name, n + 1);
    this.#pendingByClient.set(key, mine + 1);
    let done = false;
    return () => {
      if (done) return;
      done = true;
      this.pending.set(deployment.name, (this.pending.get(deployment.name) ?? 1) - 1);
      const left = (this.#pendingByClient.get(key) ?? 1) - 1;
      if (left <= 0) this.#pendingByClient.delete(key);
      else this.#pendingByClient.set(key, left);
    };
  }
}
