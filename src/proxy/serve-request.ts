/**
 * One proxied request, from the checks at the boundary to the replica's answer:
 * header size, API key and rate limit (private deployments), model and session
 * keys, the pending cap, then dispatch. Each refusal is a JSON error.
 */
import type { Deployment } from "../config/deployment.ts";
import { serveAtEdge } from "./edge-model.ts";
import { errorResponse } from "../protocol/index.ts";
import { keyRefusal } from "./api-keys.ts";
import { dispatch, type DispatchContext, type DispatchTrace } from "./dispatch.ts";
import { readRequestHeaders, requestHeaderBytes } from "./headers.ts";
import type { IsolateState } from "./isolate-state.ts";
import { clientOf } from "./request-body.ts";
import { requestKeys, type RequestKeys } from "./request-keys.ts";

export interface ServeContext {
  deployment: Deployment;
  routePrefix: string;
  /** The request's normalised path and raw query (request-path.ts). */
  target: { path: string; search: string };
  state: IsolateState;
  requestId: string;
  background: (p: Promise<unknown>) => void;
  trace: DispatchTrace;
  /**
   * An OpenAI-style request (openai-routes.ts): its body is already read and its
   * model and session come from it, not from headers.
   */
  openai?: { body: ArrayBuffer; stream: boolean; keys: RequestKeys };
}

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
  if (!deployment.access.public) {
    const key = await state.apiKeys.check(deployment.name, headers.get("authorization"), background);
    if (!key.ok) return keyRefusal(key, requestId);
    keyHash = key.keyHash;
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
  const done = state.admit(deployment);
  if (!done) {
    return errorResponse("queue_full", `deployment "${deployment.name}" has ${deployment.limits.maxPendingRequests} requests waiting here already`, {
      requestId,
      retryAfterSeconds: 1,
    });
  }
  try {
    // A model run inside this Worker (src/edge/; `read` is undefined for it): no replica, no dispatch; the pending cap still applies.
    if (!read) {
      ctx.trace.replica = "edge";
      return await serveAtEdge(req, { deployment, requestId });
    }
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
      // Who the request comes from, for per-client budgets (session bindings, duplex uploads): its API
      // key, else its address (Cloudflare sets cf-connecting-ip; the local stack's workerd sets it too).
      client: keyHash !== undefined ? `key:${keyHash}` : clientOf(headers),
    };
    if (model !== undefined) dispatched.model = model;
    if (session !== undefined) dispatched.session = { id: session, affinity: state.affinity };
    if (openai) {
      dispatched.body = openai.body;
      dispatched.sseErrors = openai.stream;
    }
    return await dispatch(req, dispatched);
  } finally {
    done();
  }
}
