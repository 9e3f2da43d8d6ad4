/**
 * The reference replica's HTTP server: admission (a free slot, else a place in
 * the bounded FIFO queue when the replica has one, else reject before accepting:
 * at capacity or draining), a load header on every response, and graceful drain.
 */
import { IncomingMessage, createServer, type Server, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { Header, KV_TRANSFER_PATH, PROTOCOL_VERSION, SystemPath, REJECT_STATUS, UNAUTHORIZED_REJECTION, dispatchLoadLimit, dispatchPriority, errorBody, formatLoadHeader, formatReplicaTime, timingSafeEqualStrings, type RejectReason } from "../protocol/index.ts";
import type { AdmissionControl } from "./admission.ts";
import type { DispatchGuard, DispatchRefusal } from "./dispatch-guard.ts";
import type { RequestHandler } from "./handlers.ts";
import { readBodyUpTo } from "./http-json.ts";

/** Largest body a signed digest may cover: the edge holds at most its deployments' largest body limit (100 MiB). */
const MAX_HELD_BODY_BYTES = 100 * 1024 * 1024;

export type ReplicaFault = "hang" | "lie";

export interface ReplicaServerOptions {
  replicaId: string;
  admission: AdmissionControl;
  handler: RequestHandler;
  /** Extra fields for /-/healthz (e.g. the model cache: models, loading, stats). */
  describe?: () => Record<string, unknown>;
  /**
   * Routes served outside admission, like /-/healthz (e.g. an engine's GET /metrics and
   * /health): returns true when it answered the request, false to admit it as usual.
   */
  unadmitted?: (req: IncomingMessage, res: ServerResponse, loadHeaders: () => Record<string, string>) => boolean;
  log?: (msg: string) => void;
  /**
   * Fault injection, for testing a fleet's behaviour (the replica CLI's --fault):
   * "hang" admits requests and never answers them; "lie" claims to be idle in its
   * load header while refusing every request as "at capacity".
   */
  fault?: ReplicaFault;
  /**
   * Serve only dispatches signed by the deployment's edge (docs/protocol.md §2).
   * Without one (a --standalone benchmark baseline) every request is served.
   */
  guard?: DispatchGuard;
  /**
   * Benchmarks only (the CLI's --accept-unsigned): requests without a signature are
   * served too, as by a replica behind another proxy (the direct, nginx and bare
   * Worker arms); signed ones are still checked, so the edge's arm pays the same.
   */
  acceptUnsigned?: boolean;
  /**
   * Serve only requests with `Authorization: Bearer <one of these>`, the way vLLM's
   * `--api-key` does (a --standalone replica standing in for an engine behind the
   * agent). Read at each request, so a key file reloaded on SIGHUP takes effect at once.
   */
  apiKeys?: () => readonly string[];
}

/**
 * Routes that stay open without a signature (GET/HEAD only, and only where the
 * backend serves them, like the LLM's vLLM-style /health and /metrics; the
 * replica's own /-/healthz is always open): they are read by orchestrators and
 * scrapers that hold no replica key (Kubernetes probes, Prometheus, the replica
 * agent) and show load figures, never model output. vLLM leaves the same two
 * open under --api-key. A prefill's GET /-/kv-transfer says only its replica id, for
 * an SGLang-protocol decode to sign its read by (kv-transfer.ts); the read is signed.
 */
const OPEN_PATHS = new Set(["/health", "/metrics", KV_TRANSFER_PATH]);

/** What a refusal before accepting says the replica is, by its reason (one entry per RejectReason). */
const REFUSED_AS: Record<RejectReason, string> = { capacity: "at capacity", draining: "draining", over_limit: "over the dispatch's load limit" };

const firstHeader = (v: string | string[] | undefined): string | undefined => (Array.isArray(v) ? v[0] : v);

export class ReplicaServer {
  readonly #o: ReplicaServerOptions;
  readonly server: Server;
  #faultRefusals = 0;
  /** When each refusal reason was last logged (a flood of forgeries logs once per 10 s per reason). */
  readonly #refusalLogged = new Map<DispatchRefusal, number>();
  /** Requests served per API key (rotation: shows when the old key is no longer used). */
  readonly #apiKeyUses = new Map<string, number>();

  constructor(options: ReplicaServerOptions) {
    this.#o = options;
    this.server = createServer((req, res) => void this.#handle(req, res));
    // The edge keeps connections to replicas alive; do not cut them sooner than it does.
    this.server.keepAliveTimeout = 65_000;
    this.server.headersTimeout = 66_000;
  }

  listen(port: number, host: string): Promise<AddressInfo> {
    return new Promise((resolve, reject) => {
      this.server.once("error", reject);
      this.server.listen(port, host, () => resolve(this.server.address() as AddressInfo));
    });
  }

  async close(): Promise<void> {
    await new Promise<void>((resolve) => {
      this.server.close(() => resolve());
      this.server.closeIdleConnections();
    });
  }

  /** The protocol's headers on an answer; `arrived`: performance.now() when the request's head came, for Header.replicaTime. */
  #loadHeaders(excluding: number, arrived?: number): Record<string, string> {
    const headers: Record<string, string> = {
      [Header.load]: formatLoadHeader(this.#o.admission.load(excluding)),
      [Header.protocol]: String(PROTOCOL_VERSION),
      [Header.replica]: this.#o.replicaId,
    };
    if (arrived !== undefined) headers[Header.replicaTime] = formatReplicaTime(performance.now() - arrived);
    return headers;
  }

  #isOpen(req: IncomingMessage): boolean {
    if (req.method !== "GET" && req.method !== "HEAD") return false;
    const url = req.url ?? "/";
    const q = url.indexOf("?");
    return OPEN_PATHS.has(q < 0 ? url : url.slice(0, q));
  }

  /** Answers 401 (and returns true) unless the request carries a valid edge signature. */
  #refuseUnsigned(req: IncomingMessage, res: ServerResponse, guard: DispatchGuard): boolean {
    const refusal = guard.check({ method: req.method ?? "GET", target: req.url ?? "/", header: (name) => firstHeader(req.headers[name]) });
    if (refusal === null) return false;
    const now = Date.now();
    if (now - (this.#refusalLogged.get(refusal) ?? -Infinity) >= 10_000) {
      this.#refusalLogged.set(refusal, now);
      this.#o.log?.(`refused a dispatch not signed by the edge (${refusal}; ${guard.refused[refusal]} so far): ${req.method} ${(req.url ?? "").slice(0, 200)}`);
    }
    req.resume();
    this.#sendUnauthorized(res, refusal);
    return true;
  }

  /** The 401 for a dispatch the edge did not sign (or not as received). */
  #sendUnauthorized(res: ServerResponse, reason: DispatchRefusal): void {
    const body = JSON.stringify(errorBody("unauthorized", "this replica serves only requests dispatched by its deployment's edge", { details: { reason } }));
    res.writeHead(401, { ...this.#loadHeaders(0), [Header.rejected]: UNAUTHORIZED_REJECTION, "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
  }

  /**
   * The request with its body read and checked against the digest its signature
   * covers, as a request the handler reads like the original; null when the body
   * does not match (changed on the way: counted, refused) or the client went.
   */
  async #verifiedBody(req: IncomingMessage, res: ServerResponse, signedSha256: string, guard: DispatchGuard): Promise<IncomingMessage | null> {
    let body: Buffer | null;
    try {
      body = await readBodyUpTo(req, MAX_HELD_BODY_BYTES, res);
    } catch {
      return null;
    }
    if (!guard.checkBody(body, signedSha256)) return null;
    const copy = new IncomingMessage(req.socket);
    copy.method = req.method;
    copy.url = req.url;
    copy.headers = req.headers;
    copy.rawHeaders = req.rawHeaders;
    copy.httpVersion = req.httpVersion;
    // Complete: a read copy must not take the connection down with it when it is done.
    copy.complete = true;
    copy.push(body);
    copy.push(null);
    return copy;
  }

  /** vLLM's answer to a missing or wrong API key: 401 {"error": "Unauthorized"}. */
  #refuseWithoutApiKey(req: IncomingMessage, res: ServerResponse, keys: readonly string[]): boolean {
    const header = firstHeader(req.headers.authorization) ?? "";
    const given = header.startsWith("Bearer ") ? header.slice(7) : "";
    // Every key is compared (no early exit), each in constant time.
    let matched: string | undefined;
    for (const key of keys) if (timingSafeEqualStrings(given, key)) matched = key;
    if (matched !== undefined) {
      this.#apiKeyUses.set(matched, (this.#apiKeyUses.get(matched) ?? 0) + 1);
      return false;
    }
    req.resume();
    const body = JSON.stringify({ error: "Unauthorized" });
    res.writeHead(401, { "content-type": "application/json", "content-length": Buffer.byteLength(body) });
    res.end(body);
    return true;
  }

  async #handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // The replica's share of the time to each answer's head (Header.replicaTime): the edge takes the rest as the trip.
    const arrived = performance.now();
    const admission = this.#o.admission;
    if (req.url === SystemPath.healthz) {
      req.resume();
      const ok = admission.state === "ready";
      res.writeHead(ok ? 200 : 503, { ...this.#loadHeaders(0, arrived), "content-type": "application/json" });
      res.end(
        JSON.stringify({
          status: admission.state,
          ongoing: admission.ongoing,
          queued: admission.queued,
          max_ongoing_requests: admission.maxOngoing,
          max_queued_requests: admission.maxQueued,
          ...admission.counts,
          ...(this.#o.guard ? { dispatch_refusals: this.#o.guard.refused } : {}),
          // By position in the key file, never the keys themselves.
          ...(this.#o.apiKeys ? { api_key_requests: this.#o.apiKeys().map((k) => this.#apiKeyUses.get(k) ?? 0) } : {}),
          ...this.#o.describe?.(),
          ...(this.#o.fault ? { fault: this.#o.fault, fault_refusals: this.#faultRefusals } : {}),
        }),
      );
      return;
    }
    // Open routes (the backend's /health and /metrics) answer without a signature or key; everything else needs one.
    const open = this.#isOpen(req);
    if (open && this.#o.unadmitted?.(req, res, () => this.#loadHeaders(0, arrived))) return;
    const unsignedOk = this.#o.acceptUnsigned === true && req.headers[Header.signature] === undefined;
    if (this.#o.guard && !unsignedOk && this.#refuseUnsigned(req, res, this.#o.guard)) return;
    if (this.#o.apiKeys && this.#refuseWithoutApiKey(req, res, this.#o.apiKeys())) return;
    if (!open && this.#o.unadmitted?.(req, res, () => this.#loadHeaders(0, arrived))) return;
    if (this.#o.fault === "lie") {
      this.#faultRefusals++;
      req.resume();
      const body = JSON.stringify(errorBody("all_replicas_busy", `replica ${this.#o.replicaId} is at capacity`));
      const claimed = formatLoadHeader({ ...admission.load(0), ongoing: 0, queued: 0 });
      res.writeHead(REJECT_STATUS, { ...this.#loadHeaders(0, arrived), [Header.load]: claimed, [Header.rejected]: "capacity", "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
      return;
    }
    // A dispatch's priority (the edge's word; a request straight from a client is 0 here): a
    // replica whose engine preempts admits a higher one past a lower one (AdmissionControl).
    const priority = dispatchPriority(req.headers) ?? 0;
    // The edge's bounded-load line for this dispatch, checked against the exact load here.
    const decision = admission.admitOrQueue(priority, dispatchLoadLimit(req.headers));
    if (decision.admitted === false) {
      // Rejected before accepting: the body is not read, the proxy retries elsewhere.
      const body = JSON.stringify(errorBody("all_replicas_busy", `replica ${this.#o.replicaId} is ${REFUSED_AS[decision.reason]}`));
      res.writeHead(REJECT_STATUS, { ...this.#loadHeaders(0, arrived), [Header.rejected]: decision.reason, "content-type": "application/json", "content-length": Buffer.byteLength(body) });
      res.end(body);
      req.resume();
      return;
    }
    if (decision.admitted === "queued") {
      // Accepted, waiting for a slot; the body stays unread meanwhile. A client
      // that goes away leaves the queue (or, if a slot was just handed over, frees it).
      let gone = false;
      const onClose = () => {
        gone = true;
        decision.leave();
      };
      res.once("close", onClose);
      const started = await decision.started;
      res.off("close", onClose);
      if (!started) return;
      if (gone) {
        admission.release(priority);
        return;
      }
    }
    let released = false;
    const release = () => {
      if (!released) {
        released = true;
        admission.release(priority);
      }
    };
    // Released when the response is done or the client went away (cancellation).
    res.once("close", release);
    if (this.#o.fault === "hang") {
      req.resume();
      return;
    }
    // A body the edge held comes with its digest under the signature: it is checked whole before the handler sees it.
    const signedSha256 = this.#o.guard && !unsignedOk ? firstHeader(req.headers[Header.bodySha256]) : undefined;
    let handled = req;
    if (signedSha256 !== undefined) {
      const verified = await this.#verifiedBody(req, res, signedSha256, this.#o.guard!);
      if (!verified) {
        if (!res.headersSent && !res.destroyed) this.#sendUnauthorized(res, "bad_signature");
        return;
      }
      handled = verified;
    }
    try {
      await this.#o.handler(handled, res, () => this.#loadHeaders(1, arrived));
    } catch (err) {
      this.#o.log?.(`handler error: ${String(err)}`);
      if (!res.headersSent) {
        const body = JSON.stringify(errorBody("internal_error", "replica handler failed"));
        res.writeHead(500, { ...this.#loadHeaders(1, arrived), "content-type": "application/json", "content-length": Buffer.byteLength(body) });
        res.end(body);
      } else {
        res.destroy();
      }
    }
  }
}
