/**
 * OpenAI-compatible routes: POST /v1/chat/completions, /v1/completions,
 * /v1/embeddings and /v1/responses are routed by the body's `model` to the deployment that lists
 * it in `openai.models`, and forwarded byte for byte to the same path on one of
 * its replicas; GET /v1/models lists the models whose deployment has a ready
 * replica now, and GET /v1/models/{model} one of them.
 *
 * A route is a way to read the deployment, the model and the prompt from a body (the
 * request stage's openaiRouting, over one scan of the bytes, and HeldBody, its one
 * parse), and the answers only a /v1 caller gets (a private model answered as unknown, a
 * token limit). Everything after is the path's, as for any route (serve/serve.ts
 * servePath): access's rate, admission, choice, dispatch, then the answer's tail
 * (migration, the usage tap) and observe.
 */
import { Hono, type Context } from "hono";
import type { Deployment } from "../../config/deployment.ts";
import type { Env } from "../../env.ts";
import { errorResponse, Header, OPENAI_ENDPOINTS, OpenAIPath, type ContinuationForm } from "../../protocol/index.ts";
import type { DispatchTrace } from "../serve/dispatch.ts";
import { HeldBody, openaiBodyLimit, openaiBodyScanner, openaiModelTable, openaiRouting, openaiUploadPace, requestIdFor, type PathVariables, SESSION_ID } from "../serve/request.ts";
import type { IsolateState } from "../serve/isolate-state.ts";
import { keyRefusal, type KeyCheck } from "../serve/access.ts";
import { withLastMember, type ScanResult, type TopLevelScanner } from "../../protocol/json-top-level.ts";
import { bodyRefusal, checkDeclaredLength, clientOf, drainUnreadBody, readBoundedBody } from "../serve/body.ts";
import { servePath, serveRequest, type AnswerTail, type Background, type ServeContext } from "../serve/serve.ts";
import { bearerToken } from "../../state/api-key-format.ts";
import { migrationPlan } from "../serve/migrate.ts";

/** Where the OpenAI routes are mounted: the paths' common prefix. */
export const OPENAI_PREFIX = "/v1";

/** A body refused before it was read is read up to this size first, so the client's connection survives (drainUnreadBody). */
const REFUSAL_DRAIN_BYTES = 64 * 1024;

type OpenAIEnv = { Bindings: Env; Variables: PathVariables };

export interface OpenAIRoutes {
  /** GET /v1/models and the method errors (Hono routes them; mounted at /v1). */
  app: Hono<OpenAIEnv>;
  /** Serves a POST to one of the four endpoints, with no Hono on its path. */
  serve(req: Request, env: Env, executionCtx: Background, target: { path: string; search: string }): Promise<Response>;
}

export function openaiRoutes(deployments: readonly Deployment[], stateFor: (env: Env) => IsolateState): OpenAIRoutes {
  const byModel = openaiModelTable(deployments);
  const served = deployments.filter((d) => d.openai);
  const bodyLimit = openaiBodyLimit(deployments);
  const pace = openaiUploadPace(deployments);
  // When every /v1 deployment is private, a caller with no key valid for any of them is refused before its body is read.
  const keyFirst = served.every((d) => !d.access.public) ? served.map((d) => d.name) : null;
  const privateNames = served.filter((d) => !d.access.public).map((d) => d.name);
  const app = new Hono<OpenAIEnv>();

  /** The models this caller may use now: a private deployment's only with a key it takes, and only deployments with a ready replica. */
  const listModels = async (c: Context<OpenAIEnv>) => {
    const state = stateFor(c.env);
    const now = Date.now();
    const background = (p: Promise<unknown>) => c.executionCtx.waitUntil(p);
    const usable = await state.apiKeys.usableBy(privateNames, c.req.header("authorization"), background);
    const data: { id: string; object: "model"; created: number; owned_by: string }[] = [];
    for (const d of served) {
      if (!d.access.public && !usable.has(d.name)) continue;
      // (Edge deployments cannot list OpenAI models: the config refuses it.)
      if ((await state.snapshots.view(d.name, background)).readyCount(now) === 0) continue;
      for (const id of d.openai!.models) data.push({ id, object: "model", created: 0, owned_by: d.name });
    }
    return data;
  };

  app.get("/models", async (c) => c.json({ object: "list", data: await listModels(c) }));

  // The SDKs' models.retrieve: one model, by id (ids may hold slashes: "org/model"), as /v1/models lists it.
  app.get("/models/*", async (c) => {
    const id = decodeURIComponent(c.get("target").path.slice(`${OpenAIPath.models}/`.length));
    const model = (await listModels(c)).find((m) => m.id === id);
    return model ? c.json(model) : modelNotFound(id, requestIdFor(c.req.header(Header.requestId) ?? null));
  });

  /**
   * A POST to one of the four endpoints, served without Hono (app.ts calls it
   * first, for every such request): the same path as a deployment's route, with
   * the body read here to route by its `model`.
   */
  async function serveOpenAI(req: Request, env: Env, executionCtx: Background, target: { path: string; search: string }): Promise<Response> {
    const endpoint = OPENAI_ENDPOINTS[target.path as keyof typeof OPENAI_ENDPOINTS];
    const path = target.path;
    const authorization = req.headers.get("authorization") ?? undefined;
    const requestId = requestIdFor(req.headers.get(Header.requestId));
    const state = stateFor(env);
    const background = (p: Promise<unknown>) => executionCtx.waitUntil(p);
    // The cheap checks first: the declared size, and the key when no /v1 deployment is public.
    const declared = checkDeclaredLength(req.headers, bodyLimit, requestId);
    if (declared instanceof Response) return declared;
    if (keyFirst) {
      const key = await state.apiKeys.checkAny(keyFirst, authorization, background);
      if (!key.ok) {
        await drainUnreadBody(req, REFUSAL_DRAIN_BYTES);
        return keyRefusal(key, requestId);
      }
    }
    // With a public /v1 deployment the body is read before any key is checked: it is charged to the client's hold.
    const bytes = await readBoundedBody(req, bodyLimit, pace, keyFirst ? undefined : clientOf(req.headers));
    if (typeof bytes === "string") return bodyRefusal(bytes, bodyLimit, requestId);
    const parsed = openaiRouting(endpoint, await scanInSlices(openaiBodyScanner(endpoint), new Uint8Array(bytes)), new Uint8Array(bytes));
    // The body as every later stage reads it: prompt keys and a migration's plan share its one parse.
    const held = new HeldBody(bytes);
    if (!parsed.ok) return errorResponse(parsed.code, parsed.message, { requestId });
    const { model, stream, streamUsage, user } = parsed.routing;
    const deployment = byModel.get(model);
    if (!deployment) return modelNotFound(model, requestId);
    /** The key a token limit charges (a private deployment's with `access.tokenLimit`). */
    let tokenKey: string | undefined;
    /** The key checked here, once: the access stage takes its rate without checking it again. */
    let checkedKey: Extract<KeyCheck, { ok: true }> | undefined;
    if (!deployment.access.public) {
      // A private model is answered as an unknown one to a caller whose key may not use it, so
      // its name cannot be found by trying names (as /v1/models lists it only to such callers).
      const key = await state.apiKeys.check(deployment.name, authorization, background);
      if (!key.ok) return key.code === "unauthorized" ? modelNotFound(model, requestId) : keyRefusal(key, requestId);
      checkedKey = key;
      if (deployment.access.tokenLimit) {
        const left = state.tokenLimits.check(deployment, key.keyHash, background);
        if (!left.ok) {
          return errorResponse("token_limited", `token limit of ${deployment.access.tokenLimit.tokensPerMinute} tokens/min for this key used up`, {
            requestId,
            retryAfterSeconds: left.retryAfterSeconds,
          });
        }
        tokenKey = key.keyHash;
      }
    }
    if (bytes.byteLength > deployment.limits.maxRequestBodyBytes) {
      return errorResponse("payload_too_large", `request body of ${bytes.byteLength} bytes exceeds ${deployment.limits.maxRequestBodyBytes}`, { requestId });
    }
    // The session: the x-session-id header when given, else the body's `user`.
    let session: string | undefined;
    if (deployment.sessionAffinity.enabled) {
      const header = req.headers.get(Header.clientSession) ?? undefined;
      if (header !== undefined) {
        if (!SESSION_ID.test(header)) return errorResponse("bad_request", `invalid ${Header.clientSession}: 1-256 visible ASCII characters`, { requestId });
        session = header;
      } else {
        session = user;
      }
    }
    // A token-limited stream must say its usage, whatever the client sent: the edge asks
    // for it (the client's other stream options kept; the last member wins, in the engine
    // as here), and takes the usage chunk out again for a client that did not ask.
    let body = bytes;
    const askUsage = tokenKey !== undefined && stream && !streamUsage;
    if (askUsage) body = withLastMember(bytes, "stream_options", JSON.stringify({ ...parsed.routing.streamOptions, include_usage: true })) ?? bytes;
    // Migration (migrate.ts): a stream whose replica fails mid-answer is continued on another.
    const migrationLimit = deployment.openai?.migrationLimit ?? 0;
    const plan = migrationLimit > 0 && stream ? migrationPlan(endpoint, body, held) : undefined;
    const contextFor = (requestBody: ArrayBuffer, trace: DispatchTrace, continuation?: ContinuationForm): ServeContext => ({
      deployment,
      // /v1 paths go to the replica unchanged, whatever the deployment's own prefix.
      routePrefix: "/",
      // The query as app.ts normalised the request (its path check runs first, for every route).
      target: { path, search: target.search },
      state,
      requestId,
      background,
      trace,
      ...(checkedKey && { checkedKey }),
      openai: {
        body: requestBody,
        // A continuation's body is another prompt: held (and parsed) on its own.
        held: continuation === undefined ? held : new HeldBody(requestBody),
        stream,
        keys: { ...(deployment.multiplexing ? { model } : {}), ...(session !== undefined ? { session } : {}) },
        ...(parsed.routing.priority !== undefined ? { priority: parsed.routing.priority } : {}),
        ...(parsed.routing.maxTokens !== undefined ? { maxTokens: parsed.routing.maxTokens } : {}),
        ...(plan ? { migratable: true } : {}),
        ...(continuation !== undefined ? { continuation } : {}),
      },
    });
    const tail: AnswerTail = {};
    if (plan) {
      tail.migration = {
        plan,
        limit: migrationLimit,
        stallMs: deployment.openai?.migrationStallMs ?? 0,
        continueOn: (continuation) => serveRequest(req, contextFor(continuation, { attempts: 0, rejections: 0, ejections: 0 }, plan.endpoint)),
      };
    }
    // A stream that cannot carry usage is not read for it.
    if (!stream || streamUsage || askUsage) {
      tail.usage = {
        key: deployment.access.public ? "public" : keyLabel(authorization),
        strip: askUsage,
        ...(tokenKey !== undefined && { charge: { keyHash: tokenKey, promptBytes: bytes.byteLength, stream } }),
      };
    }
    return servePath(req, env, contextFor(body, { attempts: 0, rejections: 0, ejections: 0 }), tail);
  }

  for (const path of Object.keys(OPENAI_ENDPOINTS)) {
    const sub = path.slice("/v1".length);
    app.post(sub, (c) => serveOpenAI(c.req.raw, c.env, c.executionCtx, c.get("target")));
    app.all(sub, (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}; use POST`, { headers: { allow: "POST" } }));
  }
  app.all("/models", (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}; use GET`, { headers: { allow: "GET" } }));
  app.all("/models/*", (c) => errorResponse("method_not_allowed", `${c.req.method} is not allowed on ${c.req.path}; use GET`, { headers: { allow: "GET" } }));
  app.all("*", (c) => errorResponse("route_not_found", `no OpenAI route ${c.req.method} ${c.req.path}; served: POST ${Object.keys(OPENAI_ENDPOINTS).join(", POST ")}, GET /v1/models, GET /v1/models/{model}`));
  return { app, serve: serveOpenAI };
}

/** The answer for a model this caller cannot use: it does not exist, or its key may not use it (the same words for both). */
function modelNotFound(model: string, requestId: string): Response {
  return errorResponse("model_not_found", `the model "${model}" does not exist here, or your key may not use it; GET /v1/models lists the models you can use now`, { requestId });
}

/** The characters of a key the admin API lists as its `prefix` (AccessKeys.create keeps key.slice(0, 10)). */
const API_KEY_PREFIX_CHARS = 10;

/** A private deployment's key label: the key's first characters, as the admin API lists it (the prefix), never the key. */
function keyLabel(authorization: string | undefined): string {
  return bearerToken(authorization)?.slice(0, API_KEY_PREFIX_CHARS) ?? "none";
}

/** Bytes scanned between yields to the event loop: about a millisecond of scanning. */
const SCAN_SLICE_BYTES = 256 * 1024;

/**
 * Scans a body a slice at a time, yielding to the event loop between slices, so
 * a 10 MiB body's ~30-50 ms of scanning does not hold up the isolate's other
 * requests (one synchronous scan of three such bodies delayed a /hello ~200 ms).
 */
async function scanInSlices(scanner: TopLevelScanner, bytes: Uint8Array): Promise<ScanResult> {
  for (let at = 0; at < bytes.byteLength; at += SCAN_SLICE_BYTES) {
    if (scanner.push(bytes.subarray(at, at + SCAN_SLICE_BYTES))) break;
    if (at + SCAN_SLICE_BYTES < bytes.byteLength) await new Promise((r) => setTimeout(r, 0));
  }
  return scanner.end();
}
