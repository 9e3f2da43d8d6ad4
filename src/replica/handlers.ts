/**
 * What the reference replica does with an admitted request, per backend kind.
 * Each handler owns the response; the server owns admission and load headers.
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { Header, MODEL_ID, errorBody } from "../protocol/index.ts";
import type { ModelCache, ModelLease } from "../models/model-cache.ts";
import { readBodyUpTo, sendJson } from "./http-json.ts";
import { MAX_MODEL_INPUT_BYTES, ModelInputError, UnknownModelError } from "../models/model.ts";

export type RequestHandler = (req: IncomingMessage, res: ServerResponse, loadHeaders: () => Record<string, string>) => Promise<void>;

export interface TextHandlerOptions {
  /**
   * Simulated service time, ms (a benchmark knob, the CLI's --service-ms): each
   * request waits this long on a timer, holding its admission slot but no CPU,
   * before the answer is sent. 0 (default): answer at once.
   */
  serviceMs?: number;
}

/** The seed's handler: a fixed text. */
export function textHandler(text: string, options: TextHandlerOptions = {}): RequestHandler {
  const body = Buffer.from(text);
  const serviceMs = options.serviceMs ?? 0;
  return async (req, res, loadHeaders) => {
    req.resume();
    if (serviceMs > 0) {
      await new Promise((r) => setTimeout(r, serviceMs));
      if (res.destroyed) return; // the client (the proxy) went away meanwhile
    }
    // Load headers are computed now, after the wait, so they show the load at send time.
    res.writeHead(200, { ...loadHeaders(), "content-type": "text/plain; charset=utf-8", "content-length": body.byteLength });
    res.end(body);
  };
}

/**
 * Echo: POST streams the request body back as it arrives; GET with
 * ?chunks=N&interval_ms=M streams N numbered lines M ms apart (a stand-in
 * for token streaming in tests of the byte path); GET with ?headers answers the
 * request's headers as the replica received them (what the edge passes on).
 * ?delay_ms=D waits before the response head (a slow or hung replica).
 */
export function echoHandler(): RequestHandler {
  return async (req, res, loadHeaders) => {
    const url = new URL(req.url ?? "/", "http://replica");
    const delay = Math.min(Number(url.searchParams.get("delay_ms") ?? 0) || 0, 600_000);
    if (delay > 0) await new Promise((r) => setTimeout(r, delay));
    if (res.destroyed) return;
    if (req.method === "GET" && url.searchParams.has("headers")) {
      // The request's headers as this replica received them: what the edge passes on.
      req.resume();
      const body = JSON.stringify(req.headers);
      res.writeHead(200, { ...loadHeaders(), "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    if (req.method === "GET" || req.method === "HEAD") {
      req.resume();
      const chunks = Math.min(Number(url.searchParams.get("chunks") ?? 1) || 1, 10_000);
      const interval = Math.min(Number(url.searchParams.get("interval_ms") ?? 0) || 0, 60_000);
      res.writeHead(200, { ...loadHeaders(), "content-type": "text/plain; charset=utf-8", "cache-control": "no-cache" });
      res.flushHeaders();
      for (let i = 0; i < chunks; i++) {
        if (res.destroyed) return;
        res.write(`chunk ${i}\n`);
        // A client that leaves ends the stream at once, as an engine aborts a request whose client is gone: its slot frees now.
        if (interval > 0 && i < chunks - 1) await untilOrClosed(res, interval);
      }
      res.end();
      return;
    }
    const type = req.headers["content-type"] ?? "application/octet-stream";
    res.writeHead(200, { ...loadHeaders(), "content-type": type });
    res.flushHeaders();
    for await (const chunk of req) {
      if (!res.write(chunk)) await new Promise((r) => res.once("drain", r));
    }
    res.end();
  };
}

/** Resolves after `ms`, or as soon as `res` closes (its client went away). */
function untilOrClosed(res: ServerResponse, ms: number): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      clearTimeout(timer);
      res.off("close", done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    res.once("close", done);
  });
}

export interface ModelHandlerOptions {
  /** Model served when a request names none (single-model replicas, or a configured default). */
  defaultModel?: string;
}

/** The model a request names: x-switchyard-model (set by the proxy), else Ray's header, else the default. */
function requestedModel(req: IncomingMessage, defaultModel: string | undefined): string | undefined {
  for (const name of [Header.model, Header.rayModel]) {
    const raw = req.headers[name];
    const value = (Array.isArray(raw) ? raw[0] : raw)?.trim();
    if (value) return value;
  }
  return defaultModel;
}

/**
 * ONNX model inference on a JSON body, with the model taken from a ModelCache (loaded on
 * demand). Every response about a model the replica serves carries `x-switchyard-model`
 * and `x-switchyard-model-cache: hit|miss`. The model is held (cache refcount) from the
 * acquire to the end of inference, released on every path.
 */
export function modelHandler(cache: ModelCache, options: ModelHandlerOptions = {}): RequestHandler {
  return async (req, res, loadHeaders) => {
    if (req.method !== "GET" && req.method !== "POST") {
      req.resume();
      sendJson(res, 405, errorBody("method_not_allowed", "use POST with a JSON body (GET describes the model)"), { ...loadHeaders(), allow: "GET, POST" });
      return;
    }
    const id = requestedModel(req, options.defaultModel);
    if (id === undefined) {
      req.resume();
      sendJson(res, 400, errorBody("bad_request", `this replica serves several models; name one with the ${Header.model} header`), loadHeaders());
      return;
    }
    if (!MODEL_ID.test(id)) {
      req.resume();
      sendJson(res, 400, errorBody("bad_request", `malformed model id (1-128 of [A-Za-z0-9._:@/+-], starting with a letter or digit)`), loadHeaders());
      return;
    }
    const unknown = (err: UnknownModelError) =>
      sendJson(res, 404, errorBody("model_not_found", err.message, { details: { model: id, known: err.known } }), loadHeaders());
    if (!cache.allows(id)) {
      req.resume();
      unknown(new UnknownModelError(id, cache.allowed ?? []));
      return;
    }

    let input: unknown;
    if (req.method === "POST") {
      const body = await readBodyUpTo(req, MAX_MODEL_INPUT_BYTES, res);
      if (body === null) {
        sendJson(res, 413, errorBody("payload_too_large", `model input over ${MAX_MODEL_INPUT_BYTES} bytes`), loadHeaders());
        return;
      }
      try {
        input = JSON.parse(body.toString("utf8"));
      } catch {
        sendJson(res, 400, errorBody("bad_request", "body is not valid JSON"), loadHeaders());
        return;
      }
    } else {
      req.resume();
    }

    let lease: ModelLease;
    try {
      lease = await cache.acquire(id);
    } catch (err) {
      if (err instanceof UnknownModelError) {
        unknown(err);
        return;
      }
      throw err;
    }
    const { model } = lease;
    // Load headers are computed at send time (after the load and the inference), so they show the model loaded.
    const headers = () => ({ ...loadHeaders(), [Header.model]: model.id, [Header.modelCache]: lease.hit ? "hit" : "miss" });
    try {
      if (res.destroyed) return; // the client left while the model was loading
      if (req.method === "GET") {
        // GET …/example returns a valid input, ready to POST back; any other GET describes the model.
        const example = (req.url ?? "").split("?")[0]!.endsWith("/example");
        sendJson(res, 200, example ? model.inputExample : { model: model.id, description: model.description, input_example: model.inputExample }, headers());
        return;
      }
      let output: unknown;
      try {
        output = await model.infer(input);
      } catch (err) {
        if (err instanceof ModelInputError) {
          sendJson(res, 400, errorBody("bad_request", err.message, { details: err.issues }), headers());
          return;
        }
        throw err;
      }
      sendJson(res, 200, output, headers());
    } finally {
      lease.release();
    }
  };
}
