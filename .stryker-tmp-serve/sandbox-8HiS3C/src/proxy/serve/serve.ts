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
// @ts-nocheck
function stryNS_9fa48() {
  var g = typeof globalThis === 'object' && globalThis && globalThis.Math === Math && globalThis || new Function("return this")();
  var ns = g.__stryker__ || (g.__stryker__ = {});
  if (ns.activeMutant === undefined && g.process && g.process.env && g.process.env.__STRYKER_ACTIVE_MUTANT__) {
    ns.activeMutant = g.process.env.__STRYKER_ACTIVE_MUTANT__;
  }
  function retrieveNS() {
    return ns;
  }
  stryNS_9fa48 = retrieveNS;
  return retrieveNS();
}
stryNS_9fa48();
function stryCov_9fa48() {
  var ns = stryNS_9fa48();
  var cov = ns.mutantCoverage || (ns.mutantCoverage = {
    static: {},
    perTest: {}
  });
  function cover() {
    var c = cov.static;
    if (ns.currentTestId) {
      c = cov.perTest[ns.currentTestId] = cov.perTest[ns.currentTestId] || {};
    }
    var a = arguments;
    for (var i = 0; i < a.length; i++) {
      c[a[i]] = (c[a[i]] || 0) + 1;
    }
  }
  stryCov_9fa48 = cover;
  cover.apply(null, arguments);
}
function stryMutAct_9fa48(id) {
  var ns = stryNS_9fa48();
  function isActive(id) {
    if (ns.activeMutant === id) {
      if (ns.hitCount !== void 0 && ++ns.hitCount > ns.hitLimit) {
        throw new Error('Stryker: Hit count limit reached (' + ns.hitCount + ')');
      }
      return true;
    }
    return false;
  }
  stryMutAct_9fa48 = isActive;
  return isActive(id);
}
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
export const NO_ROUTE_DRAIN_BYTES = stryMutAct_9fa48("3157") ? 1024 / 1024 : (stryCov_9fa48("3157"), 1024 * 1024);

/** What the path needs of the Worker's execution context. */
export interface Background {
  waitUntil(p: Promise<unknown>): void;
}

/**
 * The request path for `deployments`: a function serving one request for a
 * deployment's route (or for none: 404), given its normalised target.
 */
export function routeServer(deployments: readonly Deployment[], stateFor: (env: Env) => IsolateState) {
  if (stryMutAct_9fa48("3158")) {
    {}
  } else {
    stryCov_9fa48("3158");
    const routes = new RouteTable(deployments.map(stryMutAct_9fa48("3159") ? () => undefined : (stryCov_9fa48("3159"), d => stryMutAct_9fa48("3160") ? {} : (stryCov_9fa48("3160"), {
      prefix: d.routePrefix,
      target: d
    }))));
    return async function serveRoute(req: Request, env: Env, executionCtx: Background, target: {
      path: string;
      search: string;
    }): Promise<Response> {
      if (stryMutAct_9fa48("3161")) {
        {}
      } else {
        stryCov_9fa48("3161");
        const requestId = requestIdFor(req.headers.get(Header.requestId));
        const routed = routes.match(target.path);
        if (stryMutAct_9fa48("3164") ? false : stryMutAct_9fa48("3163") ? true : stryMutAct_9fa48("3162") ? routed : (stryCov_9fa48("3162", "3163", "3164"), !routed)) {
          if (stryMutAct_9fa48("3165")) {
            {}
          } else {
            stryCov_9fa48("3165");
            await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
            return errorResponse(stryMutAct_9fa48("3166") ? "" : (stryCov_9fa48("3166"), "route_not_found"), stryMutAct_9fa48("3167") ? `` : (stryCov_9fa48("3167"), `no deployment serves ${target.path}`), stryMutAct_9fa48("3168") ? {} : (stryCov_9fa48("3168"), {
              requestId
            }));
          }
        }
        const deployment = routed.target;
        if (stryMutAct_9fa48("3171") ? false : stryMutAct_9fa48("3170") ? true : stryMutAct_9fa48("3169") ? (deployment.methods as readonly string[]).includes(req.method) : (stryCov_9fa48("3169", "3170", "3171"), !(deployment.methods as readonly string[]).includes(req.method))) {
          if (stryMutAct_9fa48("3172")) {
            {}
          } else {
            stryCov_9fa48("3172");
            await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
            return errorResponse(stryMutAct_9fa48("3173") ? "" : (stryCov_9fa48("3173"), "method_not_allowed"), stryMutAct_9fa48("3174") ? `` : (stryCov_9fa48("3174"), `${req.method} is not served by "${deployment.name}"`), stryMutAct_9fa48("3175") ? {} : (stryCov_9fa48("3175"), {
              requestId,
              headers: stryMutAct_9fa48("3176") ? {} : (stryCov_9fa48("3176"), {
                allow: deployment.methods.join(stryMutAct_9fa48("3177") ? "" : (stryCov_9fa48("3177"), ", "))
              })
            }));
          }
        }
        // A replica's operational routes (/-/healthz, /metrics, an engine's admin routes) are not for clients.
        if (stryMutAct_9fa48("3180") ? false : stryMutAct_9fa48("3179") ? true : stryMutAct_9fa48("3178") ? replicaRouteForwarded(deployment, deployment.policy.stripPrefix ? stripRoutePrefix(target.path, routed.prefix) : target.path) : (stryCov_9fa48("3178", "3179", "3180"), !replicaRouteForwarded(deployment, deployment.policy.stripPrefix ? stripRoutePrefix(target.path, routed.prefix) : target.path))) {
          if (stryMutAct_9fa48("3181")) {
            {}
          } else {
            stryCov_9fa48("3181");
            await drainUnreadBody(req, NO_ROUTE_DRAIN_BYTES);
            return errorResponse(stryMutAct_9fa48("3182") ? "" : (stryCov_9fa48("3182"), "route_not_found"), stryMutAct_9fa48("3183") ? `` : (stryCov_9fa48("3183"), `no deployment serves ${target.path}`), stryMutAct_9fa48("3184") ? {} : (stryCov_9fa48("3184"), {
              requestId
            }));
          }
        }
        const state = stateFor(env);
        const background = stryMutAct_9fa48("3185") ? () => undefined : (stryCov_9fa48("3185"), (() => {
          const background = (p: Promise<unknown>) => executionCtx.waitUntil(p);
          return background;
        })());
        const started = Date.now();
        const trace: DispatchTrace = stryMutAct_9fa48("3186") ? {} : (stryCov_9fa48("3186"), {
          attempts: 0,
          rejections: 0,
          ejections: 0
        });
        const response = await serveRequest(req, stryMutAct_9fa48("3187") ? {} : (stryCov_9fa48("3187"), {
          deployment,
          routePrefix: routed.prefix,
          target,
          state,
          requestId,
          background,
          trace
        }));
        // Refused at the edge (no replica saw it): read the body so the client's connection survives.
        if (stryMutAct_9fa48("3190") ? trace.attempts === 0 || response.status >= 400 : stryMutAct_9fa48("3189") ? false : stryMutAct_9fa48("3188") ? true : (stryCov_9fa48("3188", "3189", "3190"), (stryMutAct_9fa48("3192") ? trace.attempts !== 0 : stryMutAct_9fa48("3191") ? true : (stryCov_9fa48("3191", "3192"), trace.attempts === 0)) && (stryMutAct_9fa48("3195") ? response.status < 400 : stryMutAct_9fa48("3194") ? response.status > 400 : stryMutAct_9fa48("3193") ? true : (stryCov_9fa48("3193", "3194", "3195"), response.status >= 400)))) await drainUnreadBody(req, deployment.limits.maxRequestBodyBytes);
        if (stryMutAct_9fa48("3196")) {
          ;
        } else {
          stryCov_9fa48("3196");
          observeRequest(env, state, deployment.name, req.method, response.status, requestId, started, trace, background);
        }
        return response;
      }
    };
  }
}
export interface ServeContext {
  deployment: Deployment;
  routePrefix: string;
  /** The request's normalised path and raw query (serve/request.ts). */
  target: {
    path: string;
    search: string;
  };
  state: IsolateState;
  requestId: string;
  background: (p: Promise<unknown>) => void;
  trace: DispatchTrace;
  /**
   * An OpenAI-style request (routes/openai.ts): its body is already read and its
   * model and session come from it, not from headers.
   */
  openai?: {
    body: ArrayBuffer;
    stream: boolean;
    keys: RequestKeys;
    priority?: number;
    migratable?: boolean;
    maxTokens?: number;
    continuation?: ContinuationForm;
  };
}

/** One request for `deployment` (a route's, or an OpenAI route's): the checks, then the edge model or a dispatch. */
export async function serveRequest(req: Request, ctx: ServeContext): Promise<Response> {
  if (stryMutAct_9fa48("3197")) {
    {}
  } else {
    stryCov_9fa48("3197");
    const {
      deployment,
      state,
      requestId,
      background
    } = ctx;
    const headers = req.headers;
    // One walk of the headers for their size and, for a deployment served by replicas, what its dispatch passes on.
    const read = (stryMutAct_9fa48("3200") ? deployment.backend.kind !== "edge" : stryMutAct_9fa48("3199") ? false : stryMutAct_9fa48("3198") ? true : (stryCov_9fa48("3198", "3199", "3200"), deployment.backend.kind === (stryMutAct_9fa48("3201") ? "" : (stryCov_9fa48("3201"), "edge")))) ? undefined : readRequestHeaders(headers, stryMutAct_9fa48("3202") ? deployment.access.public : (stryCov_9fa48("3202"), !deployment.access.public));
    const headerBytes = read ? read.bytes : requestHeaderBytes(headers);
    if (stryMutAct_9fa48("3206") ? headerBytes <= deployment.limits.maxHeaderBytes : stryMutAct_9fa48("3205") ? headerBytes >= deployment.limits.maxHeaderBytes : stryMutAct_9fa48("3204") ? false : stryMutAct_9fa48("3203") ? true : (stryCov_9fa48("3203", "3204", "3205", "3206"), headerBytes > deployment.limits.maxHeaderBytes)) {
      if (stryMutAct_9fa48("3207")) {
        {}
      } else {
        stryCov_9fa48("3207");
        return errorResponse(stryMutAct_9fa48("3208") ? "" : (stryCov_9fa48("3208"), "header_too_large"), stryMutAct_9fa48("3209") ? `` : (stryCov_9fa48("3209"), `request headers take ${headerBytes} bytes; the limit is ${deployment.limits.maxHeaderBytes}`), stryMutAct_9fa48("3210") ? {} : (stryCov_9fa48("3210"), {
          requestId
        }));
      }
    }
    /** The request's API key, when the deployment takes one (it names the client, below). */
    let keyHash: string | undefined;
    let keyPriority: {
      default: number;
      max: number;
    } | undefined;
    if (stryMutAct_9fa48("3213") ? false : stryMutAct_9fa48("3212") ? true : stryMutAct_9fa48("3211") ? deployment.access.public : (stryCov_9fa48("3211", "3212", "3213"), !deployment.access.public)) {
      if (stryMutAct_9fa48("3214")) {
        {}
      } else {
        stryCov_9fa48("3214");
        const key = await state.apiKeys.check(deployment.name, headers.get(stryMutAct_9fa48("3215") ? "" : (stryCov_9fa48("3215"), "authorization")), background);
        if (stryMutAct_9fa48("3218") ? false : stryMutAct_9fa48("3217") ? true : stryMutAct_9fa48("3216") ? key.ok : (stryCov_9fa48("3216", "3217", "3218"), !key.ok)) return keyRefusal(key, requestId);
        keyHash = key.keyHash;
        keyPriority = key.priority;
        const rate = state.rateLimits.take(deployment, key.keyHash, background);
        if (stryMutAct_9fa48("3221") ? false : stryMutAct_9fa48("3220") ? true : stryMutAct_9fa48("3219") ? rate.ok : (stryCov_9fa48("3219", "3220", "3221"), !rate.ok)) {
          if (stryMutAct_9fa48("3222")) {
            {}
          } else {
            stryCov_9fa48("3222");
            return errorResponse(stryMutAct_9fa48("3223") ? "" : (stryCov_9fa48("3223"), "rate_limited"), stryMutAct_9fa48("3224") ? `` : (stryCov_9fa48("3224"), `rate limit of ${stryMutAct_9fa48("3225") ? deployment.access.rateLimit.requestsPerSecond : (stryCov_9fa48("3225"), deployment.access.rateLimit?.requestsPerSecond)} requests/s for this key exceeded`), stryMutAct_9fa48("3226") ? {} : (stryCov_9fa48("3226"), {
              requestId,
              retryAfterSeconds: rate.retryAfterSeconds
            }));
          }
        }
      }
    }
    const openai = ctx.openai;
    const keys = openai ? stryMutAct_9fa48("3227") ? {} : (stryCov_9fa48("3227"), {
      ok: true as const,
      keys: openai.keys
    }) : requestKeys(headers, deployment);
    if (stryMutAct_9fa48("3230") ? false : stryMutAct_9fa48("3229") ? true : stryMutAct_9fa48("3228") ? keys.ok : (stryCov_9fa48("3228", "3229", "3230"), !keys.ok)) return errorResponse(keys.code, keys.message, stryMutAct_9fa48("3231") ? {} : (stryCov_9fa48("3231"), {
      requestId
    }));
    const priority = priorityOf(deployment, headers, stryMutAct_9fa48("3232") ? openai.priority : (stryCov_9fa48("3232"), openai?.priority), keyPriority);
    if (stryMutAct_9fa48("3235") ? false : stryMutAct_9fa48("3234") ? true : stryMutAct_9fa48("3233") ? priority.ok : (stryCov_9fa48("3233", "3234", "3235"), !priority.ok)) return priority.response;
    // Who the request comes from, for per-client bounds (its share of the pending cap, session
    // bindings, duplex uploads) and its flow: its API key, else its address (Cloudflare sets
    // cf-connecting-ip; the local stack's workerd too).
    const client = (stryMutAct_9fa48("3238") ? keyHash === undefined : stryMutAct_9fa48("3237") ? false : stryMutAct_9fa48("3236") ? true : (stryCov_9fa48("3236", "3237", "3238"), keyHash !== undefined)) ? stryMutAct_9fa48("3239") ? `` : (stryCov_9fa48("3239"), `key:${keyHash}`) : clientOf(headers);
    const done = state.admit(deployment, client);
    if (stryMutAct_9fa48("3242") ? done !== "isolate" : stryMutAct_9fa48("3241") ? false : stryMutAct_9fa48("3240") ? true : (stryCov_9fa48("3240", "3241", "3242"), done === (stryMutAct_9fa48("3243") ? "" : (stryCov_9fa48("3243"), "isolate")))) {
      if (stryMutAct_9fa48("3244")) {
        {}
      } else {
        stryCov_9fa48("3244");
        return errorResponse(stryMutAct_9fa48("3245") ? "" : (stryCov_9fa48("3245"), "queue_full"), stryMutAct_9fa48("3246") ? `` : (stryCov_9fa48("3246"), `deployment "${deployment.name}" has ${deployment.limits.maxPendingRequests} requests waiting here already`), stryMutAct_9fa48("3247") ? {} : (stryCov_9fa48("3247"), {
          requestId,
          retryAfterSeconds: 1
        }));
      }
    }
    if (stryMutAct_9fa48("3250") ? done !== "client" : stryMutAct_9fa48("3249") ? false : stryMutAct_9fa48("3248") ? true : (stryCov_9fa48("3248", "3249", "3250"), done === (stryMutAct_9fa48("3251") ? "" : (stryCov_9fa48("3251"), "client")))) {
      if (stryMutAct_9fa48("3252")) {
        {}
      } else {
        stryCov_9fa48("3252");
        return errorResponse(stryMutAct_9fa48("3253") ? "" : (stryCov_9fa48("3253"), "rate_limited"), stryMutAct_9fa48("3254") ? `` : (stryCov_9fa48("3254"), `this client has ${pendingShareOf(deployment)} requests for deployment "${deployment.name}" pending here already`), stryMutAct_9fa48("3255") ? {} : (stryCov_9fa48("3255"), {
          requestId,
          retryAfterSeconds: 1
        }));
      }
    }
    // A client that leaves cancels its request: the runtime drops what it was waiting on, and a
    // `finally` below may never run. Its signal does fire (enable_request_signal): it ends the count.
    stryMutAct_9fa48("3256") ? req.signal.addEventListener("abort", done, {
      once: true
    }) : (stryCov_9fa48("3256"), req.signal?.addEventListener(stryMutAct_9fa48("3257") ? "" : (stryCov_9fa48("3257"), "abort"), done, stryMutAct_9fa48("3258") ? {} : (stryCov_9fa48("3258"), {
      once: stryMutAct_9fa48("3259") ? false : (stryCov_9fa48("3259"), true)
    })));
    try {
      if (stryMutAct_9fa48("3260")) {
        {}
      } else {
        stryCov_9fa48("3260");
        // A model run inside this Worker (src/edge/; `read` is undefined for it): no replica, no dispatch; the pending cap still applies.
        if (stryMutAct_9fa48("3263") ? false : stryMutAct_9fa48("3262") ? true : stryMutAct_9fa48("3261") ? read : (stryCov_9fa48("3261", "3262", "3263"), !read)) {
          if (stryMutAct_9fa48("3264")) {
            {}
          } else {
            stryCov_9fa48("3264");
            ctx.trace.replica = stryMutAct_9fa48("3265") ? "" : (stryCov_9fa48("3265"), "edge");
            return await serveAtEdge(req, stryMutAct_9fa48("3266") ? {} : (stryCov_9fa48("3266"), {
              deployment,
              requestId
            }));
          }
        }
        const deadline = stryMutAct_9fa48("3267") ? Date.now() - deployment.policy.requestTimeoutMs : (stryCov_9fa48("3267"), Date.now() + deployment.policy.requestTimeoutMs);
        const view = stryMutAct_9fa48("3268") ? state.snapshots.viewNow(deployment.name, background) && (await state.snapshots.view(deployment.name, background)) : (stryCov_9fa48("3268"), state.snapshots.viewNow(deployment.name, background) ?? (await state.snapshots.view(deployment.name, background)));
        const {
          model,
          session
        } = keys.keys;
        // The optional fields set one by one, not spread from objects made for the purpose.
        const dispatched: DispatchContext = stryMutAct_9fa48("3269") ? {} : (stryCov_9fa48("3269"), {
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
          deadline
        });
        if (stryMutAct_9fa48("3272") ? model === undefined : stryMutAct_9fa48("3271") ? false : stryMutAct_9fa48("3270") ? true : (stryCov_9fa48("3270", "3271", "3272"), model !== undefined)) dispatched.model = model;
        if (stryMutAct_9fa48("3275") ? session === undefined : stryMutAct_9fa48("3274") ? false : stryMutAct_9fa48("3273") ? true : (stryCov_9fa48("3273", "3274", "3275"), session !== undefined)) dispatched.session = stryMutAct_9fa48("3276") ? {} : (stryCov_9fa48("3276"), {
          id: session,
          affinity: state.affinity
        });
        if (stryMutAct_9fa48("3279") ? priority.priority === 0 : stryMutAct_9fa48("3278") ? false : stryMutAct_9fa48("3277") ? true : (stryCov_9fa48("3277", "3278", "3279"), priority.priority !== 0)) dispatched.priority = priority.priority;
        if (stryMutAct_9fa48("3281") ? false : stryMutAct_9fa48("3280") ? true : (stryCov_9fa48("3280", "3281"), req.signal)) dispatched.clientSignal = req.signal;
        if (stryMutAct_9fa48("3283") ? false : stryMutAct_9fa48("3282") ? true : (stryCov_9fa48("3282", "3283"), openai)) {
          if (stryMutAct_9fa48("3284")) {
            {}
          } else {
            stryCov_9fa48("3284");
            // As received, but for the engine's own `priority` where the engines schedule by it (engine-priority.ts).
            dispatched.body = bodyForEngine(stryMutAct_9fa48("3285") ? deployment.openai.enginePriority : (stryCov_9fa48("3285"), deployment.openai?.enginePriority), ctx.target.path, openai.body, priority.priority, stryMutAct_9fa48("3288") ? openai.priority === undefined : stryMutAct_9fa48("3287") ? false : stryMutAct_9fa48("3286") ? true : (stryCov_9fa48("3286", "3287", "3288"), openai.priority !== undefined));
            dispatched.sseErrors = openai.stream;
            if (stryMutAct_9fa48("3290") ? false : stryMutAct_9fa48("3289") ? true : (stryCov_9fa48("3289", "3290"), openai.migratable)) dispatched.migratable = stryMutAct_9fa48("3291") ? false : (stryCov_9fa48("3291"), true);
            if (stryMutAct_9fa48("3294") ? openai.continuation === undefined : stryMutAct_9fa48("3293") ? false : stryMutAct_9fa48("3292") ? true : (stryCov_9fa48("3292", "3293", "3294"), openai.continuation !== undefined)) dispatched.continuation = openai.continuation;
          }
        }
        if (stryMutAct_9fa48("3297") ? false : stryMutAct_9fa48("3296") ? true : stryMutAct_9fa48("3295") ? deployment.admission.hold : (stryCov_9fa48("3295", "3296", "3297"), !deployment.admission.hold)) return await dispatch(req, dispatched);
        return await admitted(req, dispatched, state.gateFor(deployment.name), stryMutAct_9fa48("3298") ? {} : (stryCov_9fa48("3298"), {
          priority: priority.priority,
          flow: flowOf(deployment, headers, client),
          cost: openai ? tokenCost(openai.body.byteLength, openai.maxTokens) : tokenCost(stryMutAct_9fa48("3299") ? declaredLength(headers) && 0 : (stryCov_9fa48("3299"), declaredLength(headers) ?? 0), undefined),
          deadline,
          refresh: stryMutAct_9fa48("3300") ? () => undefined : (stryCov_9fa48("3300"), () => state.snapshots.view(deployment.name, background)),
          // With relays, the relay passes the location's held requests on (they ride on the view asks).
          ...((stryMutAct_9fa48("3303") ? deployment.autoscaling || !deployment.routing.relay : stryMutAct_9fa48("3302") ? false : stryMutAct_9fa48("3301") ? true : (stryCov_9fa48("3301", "3302", "3303"), deployment.autoscaling && (stryMutAct_9fa48("3304") ? deployment.routing.relay : (stryCov_9fa48("3304"), !deployment.routing.relay)))) ? stryMutAct_9fa48("3305") ? {} : (stryCov_9fa48("3305"), {
            demand: stryMutAct_9fa48("3306") ? () => undefined : (stryCov_9fa48("3306"), (held: number) => state.tellDemand(deployment.name, held, background))
          }) : {}),
          ...(req.signal ? stryMutAct_9fa48("3307") ? {} : (stryCov_9fa48("3307"), {
            signal: req.signal
          }) : {})
        }));
      }
    } finally {
      if (stryMutAct_9fa48("3308")) {
        {}
      } else {
        stryCov_9fa48("3308");
        if (stryMutAct_9fa48("3309")) {
          ;
        } else {
          stryCov_9fa48("3309");
          done();
        }
      }
    }
  }
}

/** The requests one client may have pending for `deployment` in an isolate (limits.maxPendingRequestsPerClient). */
export function pendingShareOf(deployment: Deployment): number {
  if (stryMutAct_9fa48("3310")) {
    {}
  } else {
    stryCov_9fa48("3310");
    return stryMutAct_9fa48("3311") ? deployment.limits.maxPendingRequestsPerClient && Math.max(1, Math.ceil(deployment.limits.maxPendingRequests / 4)) : (stryCov_9fa48("3311"), deployment.limits.maxPendingRequestsPerClient ?? (stryMutAct_9fa48("3312") ? Math.min(1, Math.ceil(deployment.limits.maxPendingRequests / 4)) : (stryCov_9fa48("3312"), Math.max(1, Math.ceil(stryMutAct_9fa48("3313") ? deployment.limits.maxPendingRequests * 4 : (stryCov_9fa48("3313"), deployment.limits.maxPendingRequests / 4))))));
  }
}

/**
 * The admit stage around the dispatch (admit.ts): the request waits for a free slot
 * when none is free, and again when every replica it tried was full; a slot freed by
 * its end (a stream's, when it streams) lets the next held request go.
 */
async function admitted(req: Request, ctx: DispatchContext, gate: AdmissionGate, ticket: Ticket): Promise<Response> {
  if (stryMutAct_9fa48("3314")) {
    {}
  } else {
    stryCov_9fa48("3314");
    const {
      deployment,
      view,
      requestId
    } = ctx;
    const first = await gate.enter(deployment, view, ticket);
    if (stryMutAct_9fa48("3317") ? first.outcome === "go" : stryMutAct_9fa48("3316") ? false : stryMutAct_9fa48("3315") ? true : (stryCov_9fa48("3315", "3316", "3317"), first.outcome !== (stryMutAct_9fa48("3318") ? "" : (stryCov_9fa48("3318"), "go")))) return admissionRefusal(first.outcome, deployment, requestId);
    if (stryMutAct_9fa48("3319")) {
      ;
    } else {
      stryCov_9fa48("3319");
      gate.started(ticket.priority, ticket.flow);
    }
    if (stryMutAct_9fa48("3322") ? ctx.trace || ticket.cost !== undefined : stryMutAct_9fa48("3321") ? false : stryMutAct_9fa48("3320") ? true : (stryCov_9fa48("3320", "3321", "3322"), ctx.trace && (stryMutAct_9fa48("3324") ? ticket.cost === undefined : stryMutAct_9fa48("3323") ? true : (stryCov_9fa48("3323", "3324"), ticket.cost !== undefined)))) {
      if (stryMutAct_9fa48("3325")) {
        {}
      } else {
        stryCov_9fa48("3325");
        const estimated = ticket.cost;
        ctx.trace.used = stryMutAct_9fa48("3326") ? () => undefined : (stryCov_9fa48("3326"), tokens => gate.correct(ticket.priority, ticket.flow, estimated, tokens));
      }
    }
    /** Counted in the gate's requests in flight: not while held again (a refused request holds no slot). */
    let running = stryMutAct_9fa48("3327") ? false : (stryCov_9fa48("3327"), true);
    let reserved = first.queued;
    const dispatching = () => {
      if (stryMutAct_9fa48("3328")) {
        {}
      } else {
        stryCov_9fa48("3328");
        if (stryMutAct_9fa48("3331") ? false : stryMutAct_9fa48("3330") ? true : stryMutAct_9fa48("3329") ? reserved : (stryCov_9fa48("3329", "3330", "3331"), !reserved)) return;
        reserved = stryMutAct_9fa48("3332") ? true : (stryCov_9fa48("3332"), false);
        if (stryMutAct_9fa48("3333")) {
          ;
        } else {
          stryCov_9fa48("3333");
          gate.dispatching();
        }
      }
    };
    ctx.onDispatch = dispatching;
    ctx.hold = async () => {
      if (stryMutAct_9fa48("3334")) {
        {}
      } else {
        stryCov_9fa48("3334");
        if (stryMutAct_9fa48("3336") ? false : stryMutAct_9fa48("3335") ? true : (stryCov_9fa48("3335", "3336"), running)) gate.ended(ticket.priority, ticket.flow, stryMutAct_9fa48("3338") ? true : (stryCov_9fa48("3338"), false));
        running = stryMutAct_9fa48("3339") ? true : (stryCov_9fa48("3339"), false);
        const again = await gate.enter(deployment, view, stryMutAct_9fa48("3340") ? {} : (stryCov_9fa48("3340"), {
          ...ticket,
          again: stryMutAct_9fa48("3341") ? false : (stryCov_9fa48("3341"), true)
        }));
        reserved = again.queued;
        if (stryMutAct_9fa48("3344") ? again.outcome !== "go" : stryMutAct_9fa48("3343") ? false : stryMutAct_9fa48("3342") ? true : (stryCov_9fa48("3342", "3343", "3344"), again.outcome === (stryMutAct_9fa48("3345") ? "" : (stryCov_9fa48("3345"), "go")))) {
          if (stryMutAct_9fa48("3346")) {
            {}
          } else {
            stryCov_9fa48("3346");
            if (stryMutAct_9fa48("3347")) {
              ;
            } else {
              stryCov_9fa48("3347");
              gate.started(ticket.priority, ticket.flow);
            }
            running = stryMutAct_9fa48("3348") ? false : (stryCov_9fa48("3348"), true);
          }
        }
        return again.outcome;
      }
    };
    const over = () => {
      if (stryMutAct_9fa48("3349")) {
        {}
      } else {
        stryCov_9fa48("3349");
        if (stryMutAct_9fa48("3351") ? false : stryMutAct_9fa48("3350") ? true : (stryCov_9fa48("3350", "3351"), running)) if (stryMutAct_9fa48("3352")) {
          ;
        } else {
          stryCov_9fa48("3352");
          gate.ended(ticket.priority, ticket.flow);
        }
        running = stryMutAct_9fa48("3353") ? true : (stryCov_9fa48("3353"), false);
        if (stryMutAct_9fa48("3354")) {
          ;
        } else {
          stryCov_9fa48("3354");
          gate.pump();
        }
      }
    };
    // A client that leaves cancels the request, and the `finally` below may never run: its signal frees the slot.
    const gone = () => {
      if (stryMutAct_9fa48("3355")) {
        {}
      } else {
        stryCov_9fa48("3355");
        if (stryMutAct_9fa48("3356")) {
          ;
        } else {
          stryCov_9fa48("3356");
          dispatching();
        }
        if (stryMutAct_9fa48("3357")) {
          ;
        } else {
          stryCov_9fa48("3357");
          over();
        }
      }
    };
    stryMutAct_9fa48("3358") ? req.signal.addEventListener("abort", gone, {
      once: true
    }) : (stryCov_9fa48("3358"), req.signal?.addEventListener(stryMutAct_9fa48("3359") ? "" : (stryCov_9fa48("3359"), "abort"), gone, stryMutAct_9fa48("3360") ? {} : (stryCov_9fa48("3360"), {
      once: stryMutAct_9fa48("3361") ? false : (stryCov_9fa48("3361"), true)
    })));
    try {
      if (stryMutAct_9fa48("3362")) {
        {}
      } else {
        stryCov_9fa48("3362");
        return await dispatch(req, ctx);
      }
    } finally {
      if (stryMutAct_9fa48("3363")) {
        {}
      } else {
        stryCov_9fa48("3363");
        if (stryMutAct_9fa48("3364")) {
          ;
        } else {
          stryCov_9fa48("3364");
          dispatching();
        }
        const end = stryMutAct_9fa48("3365") ? ctx.trace.streamEnd : (stryCov_9fa48("3365"), ctx.trace?.streamEnd);
        if (stryMutAct_9fa48("3367") ? false : stryMutAct_9fa48("3366") ? true : (stryCov_9fa48("3366", "3367"), end)) void end.finally(over);else if (stryMutAct_9fa48("3368")) {
          ;
        } else {
          stryCov_9fa48("3368");
          over();
        }
      }
    }
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
  location = stryMutAct_9fa48("3369") ? "" : (stryCov_9fa48("3369"), "local");
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
    if (stryMutAct_9fa48("3370")) {
      {}
    } else {
      stryCov_9fa48("3370");
      this.#env = env;
      this.sign = stryMutAct_9fa48("3371") ? () => undefined : (stryCov_9fa48("3371"), p => dispatchSignature(env.SWITCHYARD_REPLICA_SECRET, p));
      this.snapshots = new SnapshotCache(stryMutAct_9fa48("3372") ? () => undefined : (stryCov_9fa48("3372"), (name, have) => this.#snapshotOf(name, have)), Date.now, name => {
        if (stryMutAct_9fa48("3373")) {
          {}
        } else {
          stryCov_9fa48("3373");
          const routing = stryMutAct_9fa48("3374") ? servedDeployment(name).routing : (stryCov_9fa48("3374"), servedDeployment(name)?.routing);
          return stryMutAct_9fa48("3375") ? {} : (stryCov_9fa48("3375"), {
            ttlMs: (stryMutAct_9fa48("3376") ? routing.relay : (stryCov_9fa48("3376"), routing?.relay)) ? RELAYED_SNAPSHOT_TTL_MS : SNAPSHOT_TTL_MS,
            everyRequests: stryMutAct_9fa48("3377") ? routing?.refreshEveryRequests && 1 : (stryCov_9fa48("3377"), (stryMutAct_9fa48("3378") ? routing.refreshEveryRequests : (stryCov_9fa48("3378"), routing?.refreshEveryRequests)) ?? 1)
          });
        }
      }, stryMutAct_9fa48("3379") ? () => undefined : (stryCov_9fa48("3379"), name => stryMutAct_9fa48("3380") ? this.#gates.get(name)?.busy && false : (stryCov_9fa48("3380"), (stryMutAct_9fa48("3381") ? this.#gates.get(name).busy : (stryCov_9fa48("3381"), this.#gates.get(name)?.busy)) ?? (stryMutAct_9fa48("3382") ? true : (stryCov_9fa48("3382"), false)))));
      const ttlMs = stryMutAct_9fa48("3383") ? () => undefined : (stryCov_9fa48("3383"), (() => {
        const ttlMs = (d: Deployment) => stryMutAct_9fa48("3384") ? d.sessionAffinity.ttlSeconds / 1000 : (stryCov_9fa48("3384"), d.sessionAffinity.ttlSeconds * 1000);
        return ttlMs;
      })());
      this.affinity = new SessionAffinity(stryMutAct_9fa48("3385") ? {} : (stryCov_9fa48("3385"), {
        resolve: stryMutAct_9fa48("3386") ? () => undefined : (stryCov_9fa48("3386"), async (d, session, proposal) => (await sessionRouterFor(env, d.name, session, d.sessionAffinity.shards).resolve(session, proposal, ttlMs(d))).replica),
        rebind: stryMutAct_9fa48("3387") ? () => undefined : (stryCov_9fa48("3387"), async (d, session, from, to) => (await sessionRouterFor(env, d.name, session, d.sessionAffinity.shards).rebind(session, from, to, ttlMs(d))).replica)
      }), Date.now,
      // Binding tokens, under a key derived from the master secret once per isolate.
      new SessionTokens(stryMutAct_9fa48("3388") ? () => undefined : (stryCov_9fa48("3388"), () => sessionTokenKeyFor(env.SWITCHYARD_REPLICA_SECRET))));
      this.apiKeys = new ApiKeyCache(stryMutAct_9fa48("3389") ? () => undefined : (stryCov_9fa48("3389"), name => (stryMutAct_9fa48("3390") ? servedDeployment(name).routing.relay : (stryCov_9fa48("3390"), servedDeployment(name)?.routing.relay)) ? relayFor(env, name, this.location).activeKeys(name) : keysFor(env, name).activeKeys()), Date.now, stryMutAct_9fa48("3391") ? () => undefined : (stryCov_9fa48("3391"), name => (stryMutAct_9fa48("3392") ? servedDeployment(name).routing.relay : (stryCov_9fa48("3392"), servedDeployment(name)?.routing.relay)) ? RELAYED_KEY_SET_TTL_MS : KEY_SET_TTL_MS));
      // With relays, rate-limit syncs go through the location's relay too (it syncs the location's sum with the shard).
      const syncRates = stryMutAct_9fa48("3393") ? () => undefined : (stryCov_9fa48("3393"), (() => {
        const syncRates = (name: string, shard: number, limits: BucketLimits, uses: RateUse[]) => (stryMutAct_9fa48("3394") ? servedDeployment(name).routing.relay : (stryCov_9fa48("3394"), servedDeployment(name)?.routing.relay)) ? relayFor(env, name, this.location).syncRates(name, shard, limits, uses) : rateLimiterFor(env, name, shard).sync(limits, uses);
        return syncRates;
      })());
      this.rateLimits = new RateLimits(syncRates);
      this.tokenLimits = new RateLimits(syncRates, Date.now, TOKEN_RATE);
    }
  }

  /**
   * A deployment's routing snapshot: from its relay in this location, or merged
   * from its shards without relays. Either way it carries only the prefix-cache
   * summaries the view lacks (`have`), at most VIEW_SUMMARY_BYTES of them.
   */
  #snapshotOf(name: string, have: string): Promise<RoutingSnapshot> {
    if (stryMutAct_9fa48("3395")) {
      {}
    } else {
      stryCov_9fa48("3395");
      const routing = stryMutAct_9fa48("3396") ? servedDeployment(name)?.routing && {
        shards: 1,
        relay: false
      } : (stryCov_9fa48("3396"), (stryMutAct_9fa48("3397") ? servedDeployment(name).routing : (stryCov_9fa48("3397"), servedDeployment(name)?.routing)) ?? (stryMutAct_9fa48("3398") ? {} : (stryCov_9fa48("3398"), {
        shards: 1,
        relay: stryMutAct_9fa48("3399") ? true : (stryCov_9fa48("3399"), false)
      })));
      if (stryMutAct_9fa48("3401") ? false : stryMutAct_9fa48("3400") ? true : (stryCov_9fa48("3400", "3401"), routing.relay)) return this.#relayedSnapshotOf(name, routing.shards, have);
      return mergedSnapshot(this.#env, name, routing.shards, undefined, stryMutAct_9fa48("3402") ? {} : (stryCov_9fa48("3402"), {
        have,
        maxBytes: VIEW_SUMMARY_BYTES
      }));
    }
  }

  /**
   * The relay's view, with this isolate's recent dispatches posted and the location's
   * other isolates' learned, when the balancer shares them (src/state/dispatch-board.ts).
   * Notes of an ask that fails are lost: the replicas' summaries say the same a little later.
   */
  async #relayedSnapshotOf(name: string, shards: number, have: string): Promise<RoutingSnapshot> {
    if (stryMutAct_9fa48("3403")) {
      {}
    } else {
      stryCov_9fa48("3403");
      const balancer = this.#balancers.get(name);
      const relay = relayFor(this.#env, name, this.location);
      // Admission's demand rides on the same ask; the answer's budget bounds this isolate's requests in flight.
      const gate = this.#gates.get(name);
      const demand = stryMutAct_9fa48("3404") ? gate.demand() : (stryCov_9fa48("3404"), gate?.demand());
      const posted = (stryMutAct_9fa48("3405") ? balancer.shareDispatches : (stryCov_9fa48("3405"), balancer?.shareDispatches)) ? stryMutAct_9fa48("3406") ? {} : (stryCov_9fa48("3406"), {
        after: stryMutAct_9fa48("3407") ? this.#peerCursors.get(name) && 0 : (stryCov_9fa48("3407"), this.#peerCursors.get(name) ?? 0),
        notes: balancer.shareDispatches()
      }) : undefined;
      const snapshot = await relay.view(name, shards, this.seed, have, posted, demand);
      stryMutAct_9fa48("3408") ? gate.setBudget(snapshot.admissionBudget, snapshot.admissionFlowCaps, snapshot.admissionOpenFrom) : (stryCov_9fa48("3408"), gate?.setBudget(snapshot.admissionBudget, snapshot.admissionFlowCaps, snapshot.admissionOpenFrom));
      if (stryMutAct_9fa48("3411") ? false : stryMutAct_9fa48("3410") ? true : stryMutAct_9fa48("3409") ? posted : (stryCov_9fa48("3409", "3410", "3411"), !posted)) return snapshot;
      if (stryMutAct_9fa48("3413") ? false : stryMutAct_9fa48("3412") ? true : (stryCov_9fa48("3412", "3413"), snapshot.peers)) {
        if (stryMutAct_9fa48("3414")) {
          {}
        } else {
          stryCov_9fa48("3414");
          if (stryMutAct_9fa48("3415")) {
            ;
          } else {
            stryCov_9fa48("3415");
            this.#peerCursors.set(name, snapshot.peers.cursor);
          }
          stryMutAct_9fa48("3416") ? this.peerDispatchesLearned -= snapshot.peers.notes.length : (stryCov_9fa48("3416"), this.peerDispatchesLearned += snapshot.peers.notes.length);
          stryMutAct_9fa48("3418") ? balancer.learnDispatches?.(snapshot.peers.notes, Date.now()) : stryMutAct_9fa48("3417") ? balancer?.learnDispatches(snapshot.peers.notes, Date.now()) : (stryCov_9fa48("3417", "3418"), balancer?.learnDispatches?.(snapshot.peers.notes, Date.now()));
        }
      }
      return snapshot;
    }
  }

  /** Forgets the deployment's key set here and in this location's relay (an admin call changed it). */
  async keysChanged(deployment: string): Promise<void> {
    if (stryMutAct_9fa48("3419")) {
      {}
    } else {
      stryCov_9fa48("3419");
      if (stryMutAct_9fa48("3422") ? servedDeployment(deployment).routing.relay : stryMutAct_9fa48("3421") ? false : stryMutAct_9fa48("3420") ? true : (stryCov_9fa48("3420", "3421", "3422"), servedDeployment(deployment)?.routing.relay)) await relayFor(this.#env, deployment, this.location).forgetKeys();
      if (stryMutAct_9fa48("3423")) {
        ;
      } else {
        stryCov_9fa48("3423");
        this.apiKeys.invalidate(deployment);
      }
    }
  }

  /** The deployment's balancer in this isolate (`policy.balancer`, src/policy/balancers/). */
  balancerFor(deployment: Deployment): ActiveBalancer {
    if (stryMutAct_9fa48("3424")) {
      {}
    } else {
      stryCov_9fa48("3424");
      let balancer = this.#balancers.get(deployment.name);
      if (stryMutAct_9fa48("3427") ? false : stryMutAct_9fa48("3426") ? true : stryMutAct_9fa48("3425") ? balancer : (stryCov_9fa48("3425", "3426", "3427"), !balancer)) this.#balancers.set(deployment.name, balancer = createBalancer(deployment.policy.balancer, stryMutAct_9fa48("3429") ? deployment.policy.prefix && DEFAULT_PREFIX_POLICY : (stryCov_9fa48("3429"), deployment.policy.prefix ?? DEFAULT_PREFIX_POLICY)));
      return balancer;
    }
  }

  /** The deployment's admission gate in this isolate (admit.ts). */
  /**
   * Tells the deployment's autoscaler (its leader routing object) how many requests this
   * isolate holds: at most once per HELD_DEMAND_INTERVAL_MS per deployment, and only while
   * it holds any, so a deployment that is not saturated costs no call.
   */
  tellDemand(deployment: string, held: number, background: (p: Promise<unknown>) => void): void {
    if (stryMutAct_9fa48("3430")) {
      {}
    } else {
      stryCov_9fa48("3430");
      const now = Date.now();
      if (stryMutAct_9fa48("3434") ? now - (this.#demandToldAt.get(deployment) ?? 0) >= HELD_DEMAND_INTERVAL_MS : stryMutAct_9fa48("3433") ? now - (this.#demandToldAt.get(deployment) ?? 0) <= HELD_DEMAND_INTERVAL_MS : stryMutAct_9fa48("3432") ? false : stryMutAct_9fa48("3431") ? true : (stryCov_9fa48("3431", "3432", "3433", "3434"), (stryMutAct_9fa48("3435") ? now + (this.#demandToldAt.get(deployment) ?? 0) : (stryCov_9fa48("3435"), now - (stryMutAct_9fa48("3436") ? this.#demandToldAt.get(deployment) && 0 : (stryCov_9fa48("3436"), this.#demandToldAt.get(deployment) ?? 0)))) < HELD_DEMAND_INTERVAL_MS)) return;
      if (stryMutAct_9fa48("3437")) {
        ;
      } else {
        stryCov_9fa48("3437");
        this.#demandToldAt.set(deployment, now);
      }
      if (stryMutAct_9fa48("3438")) {
        ;
      } else {
        stryCov_9fa48("3438");
        background(tellHeldDemand(this.#env, deployment, this.#isolateId, held));
      }
    }
  }
  gateFor(deployment: string): AdmissionGate {
    if (stryMutAct_9fa48("3439")) {
      {}
    } else {
      stryCov_9fa48("3439");
      let gate = this.#gates.get(deployment);
      if (stryMutAct_9fa48("3442") ? false : stryMutAct_9fa48("3441") ? true : stryMutAct_9fa48("3440") ? gate : (stryCov_9fa48("3440", "3441", "3442"), !gate)) if (stryMutAct_9fa48("3443")) {
        ;
      } else {
        stryCov_9fa48("3443");
        this.#gates.set(deployment, gate = new AdmissionGate());
      }
      return gate;
    }
  }

  /** A timer is waiting to send counts a quiet isolate would otherwise keep (flushMetrics). */
  #flushTimer = stryMutAct_9fa48("3444") ? true : (stryCov_9fa48("3444"), false);

  /**
   * Sends the metrics deltas to this isolate's Telemetry shard when a flush is due
   * (in the background). Counts that are not due yet are sent when they are, by one
   * timer per isolate inside the request's waitUntil, so the last requests before a
   * quiet spell are counted then, not at the next request (which may never come:
   * `requests_total` read 27 for 51 requests, and stayed there).
   */
  flushMetrics(background: (p: Promise<unknown>) => void): void {
    if (stryMutAct_9fa48("3445")) {
      {}
    } else {
      stryCov_9fa48("3445");
      const sent = this.#sendDueFlush();
      if (stryMutAct_9fa48("3447") ? false : stryMutAct_9fa48("3446") ? true : (stryCov_9fa48("3446", "3447"), sent)) {
        if (stryMutAct_9fa48("3448")) {
          {}
        } else {
          stryCov_9fa48("3448");
          if (stryMutAct_9fa48("3449")) {
            ;
          } else {
            stryCov_9fa48("3449");
            background(sent);
          }
          return;
        }
      }
      const wait = this.metrics.flushDueIn(Date.now());
      if (stryMutAct_9fa48("3452") ? wait === null && this.#flushTimer : stryMutAct_9fa48("3451") ? false : stryMutAct_9fa48("3450") ? true : (stryCov_9fa48("3450", "3451", "3452"), (stryMutAct_9fa48("3454") ? wait !== null : stryMutAct_9fa48("3453") ? false : (stryCov_9fa48("3453", "3454"), wait === null)) || this.#flushTimer)) return;
      this.#flushTimer = stryMutAct_9fa48("3455") ? false : (stryCov_9fa48("3455"), true);
      background(new Promise(stryMutAct_9fa48("3457") ? () => undefined : (stryCov_9fa48("3457"), r => setTimeout(r, stryMutAct_9fa48("3458") ? wait - 1 : (stryCov_9fa48("3458"), wait + 1)))).then(() => {
        if (stryMutAct_9fa48("3459")) {
          {}
        } else {
          stryCov_9fa48("3459");
          this.#flushTimer = stryMutAct_9fa48("3460") ? true : (stryCov_9fa48("3460"), false);
          return this.#sendDueFlush();
        }
      }));
    }
  }

  /** The send of the deltas, when a flush is due; undefined when none is. */
  #sendDueFlush(): Promise<void> | undefined {
    if (stryMutAct_9fa48("3461")) {
      {}
    } else {
      stryCov_9fa48("3461");
      const flush = this.metrics.takeFlush(Date.now());
      if (stryMutAct_9fa48("3464") ? false : stryMutAct_9fa48("3463") ? true : stryMutAct_9fa48("3462") ? flush : (stryCov_9fa48("3462", "3463", "3464"), !flush)) return undefined;
      return sendFlush(this.#env, flush).catch(stryMutAct_9fa48("3465") ? () => undefined : (stryCov_9fa48("3465"), (err: unknown) => console.error(JSON.stringify(stryMutAct_9fa48("3466") ? {} : (stryCov_9fa48("3466"), {
        msg: stryMutAct_9fa48("3467") ? "" : (stryCov_9fa48("3467"), "telemetry flush failed"),
        error: String(err)
      })))));
    }
  }

  /**
   * Counts a request of `client` as pending until `done` is called; or which cap it
   * meets: the deployment's (`isolate`) or the client's share of it (`client`,
   * pendingShareOf).
   */
  admit(deployment: Deployment, client: string): "isolate" | "client" | (() => void) {
    if (stryMutAct_9fa48("3468")) {
      {}
    } else {
      stryCov_9fa48("3468");
      const n = stryMutAct_9fa48("3469") ? this.pending.get(deployment.name) && 0 : (stryCov_9fa48("3469"), this.pending.get(deployment.name) ?? 0);
      if (stryMutAct_9fa48("3473") ? n < deployment.limits.maxPendingRequests : stryMutAct_9fa48("3472") ? n > deployment.limits.maxPendingRequests : stryMutAct_9fa48("3471") ? false : stryMutAct_9fa48("3470") ? true : (stryCov_9fa48("3470", "3471", "3472", "3473"), n >= deployment.limits.maxPendingRequests)) return stryMutAct_9fa48("3474") ? "" : (stryCov_9fa48("3474"), "isolate");
      const key = stryMutAct_9fa48("3475") ? `` : (stryCov_9fa48("3475"), `${deployment.name}\n${client}`);
      const mine = stryMutAct_9fa48("3476") ? this.#pendingByClient.get(key) && 0 : (stryCov_9fa48("3476"), this.#pendingByClient.get(key) ?? 0);
      if (stryMutAct_9fa48("3480") ? mine < pendingShareOf(deployment) : stryMutAct_9fa48("3479") ? mine > pendingShareOf(deployment) : stryMutAct_9fa48("3478") ? false : stryMutAct_9fa48("3477") ? true : (stryCov_9fa48("3477", "3478", "3479", "3480"), mine >= pendingShareOf(deployment))) return stryMutAct_9fa48("3481") ? "" : (stryCov_9fa48("3481"), "client");
      this.pending.set(deployment.name, stryMutAct_9fa48("3483") ? n - 1 : (stryCov_9fa48("3483"), n + 1));
      this.#pendingByClient.set(key, stryMutAct_9fa48("3485") ? mine - 1 : (stryCov_9fa48("3485"), mine + 1));
      let done = stryMutAct_9fa48("3486") ? true : (stryCov_9fa48("3486"), false);
      return () => {
        if (stryMutAct_9fa48("3487")) {
          {}
        } else {
          stryCov_9fa48("3487");
          if (stryMutAct_9fa48("3489") ? false : stryMutAct_9fa48("3488") ? true : (stryCov_9fa48("3488", "3489"), done)) return;
          done = stryMutAct_9fa48("3490") ? false : (stryCov_9fa48("3490"), true);
          this.pending.set(deployment.name, stryMutAct_9fa48("3492") ? (this.pending.get(deployment.name) ?? 1) + 1 : (stryCov_9fa48("3492"), (stryMutAct_9fa48("3493") ? this.pending.get(deployment.name) && 1 : (stryCov_9fa48("3493"), this.pending.get(deployment.name) ?? 1)) - 1));
          const left = stryMutAct_9fa48("3494") ? (this.#pendingByClient.get(key) ?? 1) + 1 : (stryCov_9fa48("3494"), (stryMutAct_9fa48("3495") ? this.#pendingByClient.get(key) && 1 : (stryCov_9fa48("3495"), this.#pendingByClient.get(key) ?? 1)) - 1);
          if (stryMutAct_9fa48("3499") ? left > 0 : stryMutAct_9fa48("3498") ? left < 0 : stryMutAct_9fa48("3497") ? false : stryMutAct_9fa48("3496") ? true : (stryCov_9fa48("3496", "3497", "3498", "3499"), left <= 0)) {
            if (stryMutAct_9fa48("3500")) {
              ;
            } else {
              stryCov_9fa48("3500");
              this.#pendingByClient.delete(key);
            }
          } else if (stryMutAct_9fa48("3501")) {
            ;
          } else {
            stryCov_9fa48("3501");
            this.#pendingByClient.set(key, left);
          }
        }
      };
    }
  }
}