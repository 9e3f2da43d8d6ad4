/**
 * Serving a deployment of backend kind "edge": the model runs in this Worker
 * isolate, with no replica hop. The request and the response are those of the
 * reference replica serving the same model (src/replica/handlers.ts, modelHandler)
 * behind the proxy: the same JSON output, the same validation errors, the same
 * GET description and `…/example`; the proxy's own checks on the body
 * (Content-Length, maxRequestBodyBytes) come first, as they do before a dispatch.
 * Responses say where they ran: `x-switchyard-replica: edge`, and carry
 * `x-request-id`, `x-switchyard-model` and `x-switchyard-model-cache` (miss when the
 * request waited for the model's creation in this isolate).
 *
 * This file imports no ONNX runtime: models are registered by src/edge/runtime.ts,
 * which the build pulls into the Worker only when a deployment uses kind "edge"
 * (scripts/build.ts), so other Workers keep a small bundle.
 */
import { bodyRefusal, checkDeclaredLength, clientOf, readBoundedBody, uploadPaceOf } from "./body.ts";
import type { Deployment } from "../../config/deployment.ts";
import { errorBody, errorResponse, Header, MODEL_ID } from "../../protocol/index.ts";
import { MAX_MODEL_INPUT_BYTES, ModelInputError, UnknownModelError } from "../../models/model.ts";
import { edgeModelHost } from "../../edge/lazy-model.ts";

/** The value of `x-switchyard-replica` on answers computed at the edge. */
export const EDGE_REPLICA_ID = "edge";

export { MAX_MODEL_INPUT_BYTES };

export interface EdgeServeContext {
  deployment: Deployment;
  requestId: string;
}

function json(status: number, body: unknown, headers: Record<string, string>): Response {
  return new Response(JSON.stringify(body), { status, headers: { ...headers, "content-type": "application/json; charset=utf-8" } });
}

/** The model a request names: x-switchyard-model, else Ray's header, else the deployment's model (as the replica reads them). */
function requestedModel(headers: Headers, defaultModel: string): string {
  for (const name of [Header.model, Header.rayModel]) {
    const value = headers.get(name)?.trim();
    if (value) return value;
  }
  return defaultModel;
}

export async function serveAtEdge(req: Request, ctx: EdgeServeContext): Promise<Response> {
  const { deployment, requestId } = ctx;
  if (deployment.backend.kind !== "edge") throw new Error(`deployment "${deployment.name}" does not run at the edge`);
  const served = deployment.backend.model;
  const base: Record<string, string> = { [Header.replica]: EDGE_REPLICA_ID, [Header.requestId]: requestId };
  const method = req.method;
  // The model the request names (a header read; it is checked below, after the body's size and the method).
  const id = requestedModel(req.headers, served);

  // The proxy's checks on a body it would dispatch (body.ts, prepareBody).
  const { maxRequestBodyBytes } = deployment.limits;
  const hasBody = req.body !== null && method !== "GET" && method !== "HEAD";
  if (hasBody) {
    const declared = checkDeclaredLength(req.headers, maxRequestBodyBytes, requestId);
    if (declared instanceof Response) return declared;
  }

  // From here on, what the replica's model handler answers.
  if (method !== "GET" && method !== "POST") {
    return json(405, errorBody("method_not_allowed", "use POST with a JSON body (GET describes the model)"), { ...base, allow: "GET, POST" });
  }
  if (!MODEL_ID.test(id)) {
    return json(400, errorBody("bad_request", `malformed model id (1-128 of [A-Za-z0-9._:@/+-], starting with a letter or digit)`), base);
  }
  if (id !== served) {
    const err = new UnknownModelError(id, [served]);
    return json(404, errorBody("model_not_found", err.message, { details: { model: id, known: err.known } }), base);
  }
  const host = edgeModelHost(served);
  if (!host) {
    return errorResponse("internal_error", `this Worker was built without the edge runtime for model "${served}" (build it with scripts/build.ts)`, { requestId });
  }

  let input: unknown;
  if (method === "POST") {
    const limit = Math.min(maxRequestBodyBytes, MAX_MODEL_INPUT_BYTES);
    // A public deployment's body is read before anything authenticated its sender: charged to the client's hold.
    const bytes = await readBoundedBody(req, limit, uploadPaceOf(deployment.limits), deployment.access.public ? clientOf(req.headers) : undefined);
    if (bytes === "too_large") {
      return maxRequestBodyBytes < MAX_MODEL_INPUT_BYTES
        ? errorResponse("payload_too_large", `request body exceeds ${maxRequestBodyBytes} bytes`, { requestId })
        : json(413, errorBody("payload_too_large", `model input over ${MAX_MODEL_INPUT_BYTES} bytes`), base);
    }
    if (typeof bytes === "string") return bodyRefusal(bytes, limit, requestId);
    // ignoreBOM: a leading BOM stays and fails JSON.parse, as Buffer#toString does on the replica.
    const text = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true }).decode(bytes);
    try {
      input = JSON.parse(text);
    } catch {
      return json(400, errorBody("bad_request", "body is not valid JSON"), base);
    }
  }

  let lease;
  try {
    lease = await host.acquire();
  } catch (err) {
    console.error(JSON.stringify({ msg: "edge model failed to load", deployment: deployment.name, model: served, request_id: requestId, error: String(err) }));
    return errorResponse("internal_error", `model "${served}" failed to load at the edge`, { requestId, headers: base });
  }
  const { model } = lease;
  const headers = { ...base, [Header.model]: model.id, [Header.modelCache]: lease.hit ? "hit" : "miss" };
  if (method === "GET") {
    // GET …/example returns a valid input, ready to POST back; any other GET describes the model.
    const example = new URL(req.url).pathname.endsWith("/example");
    return json(200, example ? model.inputExample : { model: model.id, description: model.description, input_example: model.inputExample }, headers);
  }
  try {
    return json(200, await model.infer(input), headers);
  } catch (err) {
    if (err instanceof ModelInputError) return json(400, errorBody("bad_request", err.message, { details: err.issues }), headers);
    console.error(JSON.stringify({ msg: "edge inference failed", deployment: deployment.name, model: served, request_id: requestId, error: String(err) }));
    return errorResponse("internal_error", "edge inference failed", { requestId, headers });
  }
}
