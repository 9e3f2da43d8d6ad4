/**
 * The dispatch stage: one client request to one replica, with retries only while
 * no replica has accepted it. Bodies stream in both directions; the only state
 * touched is this isolate's routing view and the deployment's balancer (no
 * Durable Object call). In this file, in order: the attempt loop and the fetch
 * (who is tried is the choose stage's, choose.ts; bodies are prepared by
 * body.ts), the verdicts on how an attempt ended (pure), the dispatch
 * signatures, and the answer's body passed back as it streams.
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
import type { Deployment } from "../../config/deployment.ts";
import { Header, PROTOCOL_VERSION, bodySha256 as bodySha256Of, errorResponse, parseLoadHeader, UNAUTHORIZED_REJECTION, type Load, deriveReplicaKey, importReplicaKey, signDispatch, errorBody, type ContinuationForm } from "../../protocol/index.ts";
import type { ActiveBalancer } from "../../policy/balancers/index.ts";
import { backoffMs } from "../../policy/pick-replica.ts";
import { scrubForClient, dispatchTarget, stripRoutePrefix } from "./request.ts";
import { bodyRefusal, dispatchBody, heldBody, uploadTooSlow, type DispatchBody } from "./body.ts";
import { chooseFor } from "./choose.ts";
import { admissionRefusal, holdsAtZero } from "./admit.ts";
import type { ReplicaEntry, RoutingView } from "./view.ts";
import type { SessionAffinity } from "./session-affinity.ts";

/** Signs one dispatch (dispatchSignature, below): the headers that prove the edge sent it, to that replica, with that body. */
export type DispatchSigner = (p: {
  method: string;
  deployment: string;
  target: string;
  requestId: string;
  replica: string;
  bodySha256: string;
}) => Promise<[string, string][]>;
export interface DispatchContext {
  deployment: Deployment;
  routePrefix: string;
  /** The request's normalised path and raw query (serve/request.ts). */
  target: {
    path: string;
    search: string;
  };
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
  session?: {
    id: string;
    affinity: SessionAffinity;
  };
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
  /**
   * Admission (admit.ts): waits for a free slot when no replica was ready or every
   * one tried was full, so the request tries again instead of getting 503.
   */
  hold?: () => Promise<"go" | "expired" | "gone" | "shed">;
  /** Called as a dispatch starts (admission counts the request's slot as the view's from then on). */
  onDispatch?: () => void;
  /** The client's disconnect (Request.signal): it aborts the dispatch's fetch, before the answer's head or after. */
  clientSignal?: AbortSignal;
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
  /** Settles when a streamed response body has been passed on completely (or cut). */
  streamEnd?: Promise<unknown>;
  /** Set by the admit stage: tells it the tokens the request actually used, once known (AdmissionGate.correct). */
  used?: (tokens: number) => void;
}

/** A dispatch body, and whether the request may run again after a lost connection (safeToRepeat). */
interface PreparedBody extends DispatchBody {
  safeToRepeat: boolean;
}
const sleep = stryMutAct_9fa48("1420") ? () => undefined : (stryCov_9fa48("1420"), (() => {
  const sleep = (ms: number) => new Promise<void>(stryMutAct_9fa48("1421") ? () => undefined : (stryCov_9fa48("1421"), r => setTimeout(r, ms)));
  return sleep;
})());

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
  #deadlinePassed = stryMutAct_9fa48("1422") ? true : (stryCov_9fa48("1422"), false);
  #client: AbortSignal | undefined;

  /** The signal of the request's deadline (`at`, epoch ms; the same for every attempt) and of the client's leaving, armed on first use. */
  signal(at: number, client?: AbortSignal): AbortSignal {
    if (stryMutAct_9fa48("1423")) {
      {}
    } else {
      stryCov_9fa48("1423");
      if (stryMutAct_9fa48("1426") ? false : stryMutAct_9fa48("1425") ? true : stryMutAct_9fa48("1424") ? this.#abort : (stryCov_9fa48("1424", "1425", "1426"), !this.#abort)) {
        if (stryMutAct_9fa48("1427")) {
          {}
        } else {
          stryCov_9fa48("1427");
          this.#abort = new AbortController();
          this.#timer = setTimeout(deadlinePassed, stryMutAct_9fa48("1428") ? Math.min(0, at - Date.now()) : (stryCov_9fa48("1428"), Math.max(0, stryMutAct_9fa48("1429") ? at + Date.now() : (stryCov_9fa48("1429"), at - Date.now()))), this);
          if (stryMutAct_9fa48("1431") ? false : stryMutAct_9fa48("1430") ? true : (stryCov_9fa48("1430", "1431"), client)) {
            if (stryMutAct_9fa48("1432")) {
              {}
            } else {
              stryCov_9fa48("1432");
              this.#client = client;
              if (stryMutAct_9fa48("1434") ? false : stryMutAct_9fa48("1433") ? true : (stryCov_9fa48("1433", "1434"), client.aborted)) {
                if (stryMutAct_9fa48("1435")) {
                  ;
                } else {
                  stryCov_9fa48("1435");
                  this.#abort.abort();
                }
              } else client.addEventListener(stryMutAct_9fa48("1437") ? "" : (stryCov_9fa48("1437"), "abort"), this, stryMutAct_9fa48("1438") ? {} : (stryCov_9fa48("1438"), {
                once: stryMutAct_9fa48("1439") ? false : (stryCov_9fa48("1439"), true)
              }));
            }
          }
        }
      }
      return this.#abort.signal;
    }
  }

  /** The deadline passed (the attempt waiting then was aborted). */
  get passed(): boolean {
    if (stryMutAct_9fa48("1440")) {
      {}
    } else {
      stryCov_9fa48("1440");
      return this.#deadlinePassed;
    }
  }

  /** The timer's end (module-level callback: no closure per request). */
  expire(): void {
    if (stryMutAct_9fa48("1441")) {
      {}
    } else {
      stryCov_9fa48("1441");
      this.#deadlinePassed = stryMutAct_9fa48("1442") ? false : (stryCov_9fa48("1442"), true);
      stryMutAct_9fa48("1443") ? this.#abort.abort() : (stryCov_9fa48("1443"), this.#abort?.abort());
    }
  }

  /** The client left (an EventListener object: no closure per request). */
  handleEvent(): void {
    if (stryMutAct_9fa48("1444")) {
      {}
    } else {
      stryCov_9fa48("1444");
      stryMutAct_9fa48("1445") ? this.#abort.abort() : (stryCov_9fa48("1445"), this.#abort?.abort());
    }
  }
  disarm(): void {
    if (stryMutAct_9fa48("1446")) {
      {}
    } else {
      stryCov_9fa48("1446");
      if (stryMutAct_9fa48("1449") ? this.#timer === undefined : stryMutAct_9fa48("1448") ? false : stryMutAct_9fa48("1447") ? true : (stryCov_9fa48("1447", "1448", "1449"), this.#timer !== undefined)) if (stryMutAct_9fa48("1450")) {
        ;
      } else {
        stryCov_9fa48("1450");
        clearTimeout(this.#timer);
      }
      this.#timer = undefined;
      stryMutAct_9fa48("1451") ? this.#client.removeEventListener("abort", this) : (stryCov_9fa48("1451"), this.#client?.removeEventListener(stryMutAct_9fa48("1452") ? "" : (stryCov_9fa48("1452"), "abort"), this));
      this.#client = undefined;
    }
  }
}

// Module-level: the timer gets its deadline as an argument, so no closure per request.
const deadlinePassed = stryMutAct_9fa48("1453") ? () => undefined : (stryCov_9fa48("1453"), (() => {
  const deadlinePassed = (head: HeadDeadline) => head.expire();
  return deadlinePassed;
})());
export async function dispatch(req: Request, ctx: DispatchContext): Promise<Response> {
  if (stryMutAct_9fa48("1454")) {
    {}
  } else {
    stryCov_9fa48("1454");
    const head = new HeadDeadline();
    try {
      if (stryMutAct_9fa48("1455")) {
        {}
      } else {
        stryCov_9fa48("1455");
        return await dispatchAttempts(req, ctx, head);
      }
    } finally {
      if (stryMutAct_9fa48("1456")) {
        {}
      } else {
        stryCov_9fa48("1456");
        if (stryMutAct_9fa48("1457")) {
          ;
        } else {
          stryCov_9fa48("1457");
          head.disarm();
        }
      }
    }
  }
}
async function dispatchAttempts(req: Request, ctx: DispatchContext, head: HeadDeadline): Promise<Response> {
  if (stryMutAct_9fa48("1458")) {
    {}
  } else {
    stryCov_9fa48("1458");
    const {
      deployment,
      requestId
    } = ctx;
    let prepared: PreparedBody;
    if (stryMutAct_9fa48("1461") ? ctx.body === undefined : stryMutAct_9fa48("1460") ? false : stryMutAct_9fa48("1459") ? true : (stryCov_9fa48("1459", "1460", "1461"), ctx.body !== undefined)) {
      if (stryMutAct_9fa48("1462")) {
        {}
      } else {
        stryCov_9fa48("1462");
        // A body read to route (OpenAI routes): inference has no side effects worth more than a wasted prefill.
        prepared = stryMutAct_9fa48("1463") ? {} : (stryCov_9fa48("1463"), {
          ...heldBody(ctx.body),
          safeToRepeat: stryMutAct_9fa48("1464") ? false : (stryCov_9fa48("1464"), true)
        });
      }
    } else {
      if (stryMutAct_9fa48("1465")) {
        {}
      } else {
        stryCov_9fa48("1465");
        // A public deployment's body is read before anything authenticated its sender: charged to the client's hold.
        const pending = dispatchBody(req, deployment, requestId, stryMutAct_9fa48("1466") ? {} : (stryCov_9fa48("1466"), {
          client: ctx.client,
          authenticated: stryMutAct_9fa48("1467") ? deployment.access.public : (stryCov_9fa48("1467"), !deployment.access.public)
        }));
        const body = pending instanceof Promise ? await pending : pending;
        if (stryMutAct_9fa48("1469") ? false : stryMutAct_9fa48("1468") ? true : (stryCov_9fa48("1468", "1469"), body instanceof Response)) return body;
        prepared = stryMutAct_9fa48("1470") ? {} : (stryCov_9fa48("1470"), {
          ...body,
          safeToRepeat: stryMutAct_9fa48("1473") ? body.replayable || safeToRepeat(req.method, req.headers, deployment.policy.idempotent) : stryMutAct_9fa48("1472") ? false : stryMutAct_9fa48("1471") ? true : (stryCov_9fa48("1471", "1472", "1473"), body.replayable && safeToRepeat(req.method, req.headers, deployment.policy.idempotent))
        });
      }
    }
    const answer = await attemptsWith(req, ctx, head, prepared);
    // No replica took the body (an error of the edge's own): what it holds is given back now.
    if (stryMutAct_9fa48("1476") ? false : stryMutAct_9fa48("1475") ? true : stryMutAct_9fa48("1474") ? answer.fromReplica : (stryCov_9fa48("1474", "1475", "1476"), !answer.fromReplica)) if (stryMutAct_9fa48("1477")) {
      ;
    } else {
      stryCov_9fa48("1477");
      prepared.release();
    }
    return answer.response;
  }
}

/** An answer of the edge's own (no replica's): its error. */
function edgeError(...args: Parameters<typeof errorResponse>): {
  response: Response;
  fromReplica: false;
} {
  if (stryMutAct_9fa48("1478")) {
    {}
  } else {
    stryCov_9fa48("1478");
    return stryMutAct_9fa48("1479") ? {} : (stryCov_9fa48("1479"), {
      response: errorResponse(...args),
      fromReplica: stryMutAct_9fa48("1480") ? true : (stryCov_9fa48("1480"), false)
    });
  }
}
async function attemptsWith(req: Request, ctx: DispatchContext, head: HeadDeadline, prepared: PreparedBody): Promise<{
  response: Response;
  fromReplica: boolean;
}> {
  if (stryMutAct_9fa48("1481")) {
    {}
  } else {
    stryCov_9fa48("1481");
    const {
      deployment,
      view,
      requestId
    } = ctx;
    const {
      search
    } = ctx.target;
    const path = deployment.policy.stripPrefix ? stripRoutePrefix(ctx.target.path, ctx.routePrefix) : ctx.target.path;
    const deadline = stryMutAct_9fa48("1482") ? ctx.deadline && Date.now() + deployment.policy.requestTimeoutMs : (stryCov_9fa48("1482"), ctx.deadline ?? (stryMutAct_9fa48("1483") ? Date.now() - deployment.policy.requestTimeoutMs : (stryCov_9fa48("1483"), Date.now() + deployment.policy.requestTimeoutMs)));
    // One Headers object for every attempt: fetch() copies it into its request, so
    // what differs per attempt (attempt number, signature, engine key) is set on it
    // in place instead of copying it per attempt.
    const headers = ctx.headers;
    if (stryMutAct_9fa48("1484")) {
      ;
    } else {
      stryCov_9fa48("1484");
      headers.set(Header.protocol, String(PROTOCOL_VERSION));
    }
    if (stryMutAct_9fa48("1485")) {
      ;
    } else {
      stryCov_9fa48("1485");
      headers.set(Header.requestId, requestId);
    }
    if (stryMutAct_9fa48("1486")) {
      ;
    } else {
      stryCov_9fa48("1486");
      headers.set(Header.deployment, deployment.name);
    }
    if (stryMutAct_9fa48("1487")) {
      ;
    } else {
      stryCov_9fa48("1487");
      headers.set(Header.deadline, String(deadline));
    }
    if (stryMutAct_9fa48("1490") ? ctx.model === undefined : stryMutAct_9fa48("1489") ? false : stryMutAct_9fa48("1488") ? true : (stryCov_9fa48("1488", "1489", "1490"), ctx.model !== undefined)) if (stryMutAct_9fa48("1491")) {
      ;
    } else {
      stryCov_9fa48("1491");
      headers.set(Header.model, ctx.model);
    }
    if (stryMutAct_9fa48("1493") ? false : stryMutAct_9fa48("1492") ? true : (stryCov_9fa48("1492", "1493"), ctx.session)) if (stryMutAct_9fa48("1494")) {
      ;
    } else {
      stryCov_9fa48("1494");
      headers.set(Header.session, ctx.session.id);
    }
    if (stryMutAct_9fa48("1497") ? ctx.priority === undefined : stryMutAct_9fa48("1496") ? false : stryMutAct_9fa48("1495") ? true : (stryCov_9fa48("1495", "1496", "1497"), ctx.priority !== undefined)) if (stryMutAct_9fa48("1498")) {
      ;
    } else {
      stryCov_9fa48("1498");
      headers.set(Header.priority, String(ctx.priority));
    }
    if (stryMutAct_9fa48("1500") ? false : stryMutAct_9fa48("1499") ? true : (stryCov_9fa48("1499", "1500"), ctx.migratable)) headers.set(Header.migratable, stryMutAct_9fa48("1502") ? "" : (stryCov_9fa48("1502"), "1"));
    // The session's binding token is the edge's business, not the replica's (ctx.headers lacks it).
    const sessionToken = ctx.session ? stryMutAct_9fa48("1503") ? req.headers.get(Header.sessionToken) && undefined : (stryCov_9fa48("1503"), req.headers.get(Header.sessionToken) ?? undefined) : undefined;
    /** The authorization the request carries to a replica without an engine key; read once an engine key first replaces it. */
    let ownAuthorization: string | null | undefined;

    // A body held here is covered by the signature (its digest, once per request); a streamed one cannot be.
    const bodySha256 = (stryMutAct_9fa48("1506") ? prepared.body instanceof ArrayBuffer || prepared.body.byteLength > 0 : stryMutAct_9fa48("1505") ? false : stryMutAct_9fa48("1504") ? true : (stryCov_9fa48("1504", "1505", "1506"), prepared.body instanceof ArrayBuffer && (stryMutAct_9fa48("1509") ? prepared.body.byteLength <= 0 : stryMutAct_9fa48("1508") ? prepared.body.byteLength >= 0 : stryMutAct_9fa48("1507") ? true : (stryCov_9fa48("1507", "1508", "1509"), prepared.body.byteLength > 0)))) ? await bodySha256Of(prepared.body) : stryMutAct_9fa48("1510") ? "Stryker was here!" : (stryCov_9fa48("1510"), "");
    if (stryMutAct_9fa48("1513") ? bodySha256 === "" : stryMutAct_9fa48("1512") ? false : stryMutAct_9fa48("1511") ? true : (stryCov_9fa48("1511", "1512", "1513"), bodySha256 !== (stryMutAct_9fa48("1514") ? "Stryker was here!" : (stryCov_9fa48("1514"), "")))) if (stryMutAct_9fa48("1515")) {
      ;
    } else {
      stryCov_9fa48("1515");
      headers.set(Header.bodySha256, bodySha256);
    }
    // The extra prompt key as the replica will see it: the model header as dispatched (the edge's own
    // on a multiplexed deployment, else the client's copy, which is passed on).
    const choice = chooseFor(ctx, prepared.body, stryMutAct_9fa48("1517") ? headers.get(Header.model).trim() : stryMutAct_9fa48("1516") ? headers.get(Header.model) : (stryCov_9fa48("1516", "1517"), headers.get(Header.model)?.trim()), sessionToken);
    const tried = new Set<string>();
    let sawReplica = stryMutAct_9fa48("1518") ? true : (stryCov_9fa48("1518"), false);
    /** How the first attempt (the session's bound replica, for session requests) ended, when it was not accepted. */
    let firstRefusal: "full" | "gone" | undefined;
    const {
      maxAttempts,
      backoffBaseMs,
      backoffCapMs
    } = deployment.policy;
    // Rounds of attempts: a round that finds no replica, or only full ones, waits for a free slot (admission) and starts over.
    if (stryMutAct_9fa48("1519")) {
      // Rounds of attempts: a round that finds no replica, or only full ones, waits for a free slot (admission) and starts over.
      for (let round = 1; false; round++) {
        /** This round found a replica to try (the view may have lost them all since the last one: killed, drained). */
        let roundSawReplica = false;
        for (let attempt = 1; attempt <= maxAttempts; attempt++) {
          const replica = await choice.next(attempt, tried);
          if (!replica) break;
          sawReplica = roundSawReplica = true;
          tried.add(replica.id);
          const checked = dispatchTarget(replica.url, path, search);
          if (!checked) {
            // requestTarget's path cannot leave the replica's URL; this is a bug, and nothing is sent.
            console.error(JSON.stringify({
              msg: "dispatch target refused",
              deployment: deployment.name,
              replica: replica.id,
              request_id: requestId,
              path
            }));
            return edgeError("internal_error", "internal error", {
              requestId
            });
          }
          headers.set(Header.attempt, String(attempt));
          // The engine's own key (vLLM --api-key), registered by its agent, replaces any client credential.
          if (replica.engineKey !== undefined) {
            if (ownAuthorization === undefined) ownAuthorization = headers.get("authorization");
            headers.set("authorization", `Bearer ${replica.engineKey}`);
          } else if (ownAuthorization !== undefined) {
            // An earlier attempt went to an engine with its own key: this replica gets what the request had.
            if (ownAuthorization === null) headers.delete("authorization");else headers.set("authorization", ownAuthorization);
          }
          let signature: [string, string][];
          try {
            signature = await ctx.sign({
              method: req.method,
              deployment: deployment.name,
              target: checked.target,
              requestId,
              replica: replica.id,
              bodySha256
            });
          } catch (err) {
            console.error(JSON.stringify({
              msg: "cannot sign dispatches (is SWITCHYARD_REPLICA_SECRET set?)",
              deployment: deployment.name,
              error: String(err)
            }));
            return edgeError("internal_error", "the edge cannot sign dispatches", {
              requestId
            });
          }
          for (const [name, value] of signature) headers.set(name, value);
          // The checked URL as fetch() takes it.
          const target = checked.href;
          if (ctx.trace) ctx.trace.attempts = attempt;
          const outcome = await attemptOn(replica, target, req.method, headers, prepared, deadline, head, ctx);
          if (outcome.kind === "response") {
            if (outcome.fromReplica) {
              if (ctx.trace) ctx.trace.replica = replica.id;
              choice.served(replica);
              if (ctx.session) {
                if (sessionFollowsRetry(firstRefusal)) ctx.session.affinity.served(deployment, ctx.session.id, replica.id, ctx.background);
                // The binding after this request, signed: a client that sends it back is routed with no object call.
                const {
                  affinity,
                  id
                } = ctx.session;
                const token = affinity.reusableToken(deployment, id, replica.id) ?? (await affinity.tokenFor(deployment, id, replica.id));
                if (token !== undefined) outcome.response.headers.set(Header.sessionToken, token);
              }
            }
            return outcome;
          }
          if (attempt === 1 && round === 1) firstRefusal = outcome.why;
          // Not accepted: another replica may take it, if the body can be sent again.
          if (!prepared.replayable || attempt === maxAttempts) break;
          if (Date.now() >= deadline) return edgeError("deadline_exceeded", "deadline passed while retrying", {
            requestId
          });
          const wait = backoffMs(attempt, backoffBaseMs, backoffCapMs);
          if (wait > 0) await sleep(Math.min(wait, deadline - Date.now()));
        }
        // Held again only with a body that can still be sent (one held here, or none sent yet), and, when this
        // round found no replica at all, only for a deployment that scales from zero: any other is down.
        if (!ctx.hold || sawReplica && !prepared.replayable || !roundSawReplica && !holdsAtZero(deployment)) break;
        const again = await ctx.hold();
        if (again !== "go") return {
          response: admissionRefusal(again, deployment, requestId),
          fromReplica: false
        };
        tried.clear();
      }
    } else {
      stryCov_9fa48("1519");
      for (let round = 1;; stryMutAct_9fa48("1520") ? round-- : (stryCov_9fa48("1520"), round++)) {
        if (stryMutAct_9fa48("1521")) {
          {}
        } else {
          stryCov_9fa48("1521");
          /** This round found a replica to try (the view may have lost them all since the last one: killed, drained). */
          let roundSawReplica = stryMutAct_9fa48("1522") ? true : (stryCov_9fa48("1522"), false);
          for (let attempt = 1; stryMutAct_9fa48("1525") ? attempt > maxAttempts : stryMutAct_9fa48("1524") ? attempt < maxAttempts : stryMutAct_9fa48("1523") ? false : (stryCov_9fa48("1523", "1524", "1525"), attempt <= maxAttempts); stryMutAct_9fa48("1526") ? attempt-- : (stryCov_9fa48("1526"), attempt++)) {
            if (stryMutAct_9fa48("1527")) {
              {}
            } else {
              stryCov_9fa48("1527");
              const replica = await choice.next(attempt, tried);
              if (stryMutAct_9fa48("1530") ? false : stryMutAct_9fa48("1529") ? true : stryMutAct_9fa48("1528") ? replica : (stryCov_9fa48("1528", "1529", "1530"), !replica)) break;
              sawReplica = roundSawReplica = stryMutAct_9fa48("1531") ? false : (stryCov_9fa48("1531"), true);
              if (stryMutAct_9fa48("1532")) {
                ;
              } else {
                stryCov_9fa48("1532");
                tried.add(replica.id);
              }
              const checked = dispatchTarget(replica.url, path, search);
              if (stryMutAct_9fa48("1535") ? false : stryMutAct_9fa48("1534") ? true : stryMutAct_9fa48("1533") ? checked : (stryCov_9fa48("1533", "1534", "1535"), !checked)) {
                if (stryMutAct_9fa48("1536")) {
                  {}
                } else {
                  stryCov_9fa48("1536");
                  // requestTarget's path cannot leave the replica's URL; this is a bug, and nothing is sent.
                  console.error(JSON.stringify(stryMutAct_9fa48("1538") ? {} : (stryCov_9fa48("1538"), {
                    msg: stryMutAct_9fa48("1539") ? "" : (stryCov_9fa48("1539"), "dispatch target refused"),
                    deployment: deployment.name,
                    replica: replica.id,
                    request_id: requestId,
                    path
                  })));
                  return edgeError(stryMutAct_9fa48("1540") ? "" : (stryCov_9fa48("1540"), "internal_error"), stryMutAct_9fa48("1541") ? "" : (stryCov_9fa48("1541"), "internal error"), stryMutAct_9fa48("1542") ? {} : (stryCov_9fa48("1542"), {
                    requestId
                  }));
                }
              }
              if (stryMutAct_9fa48("1543")) {
                ;
              } else {
                stryCov_9fa48("1543");
                headers.set(Header.attempt, String(attempt));
              } // The engine's own key (vLLM --api-key), registered by its agent, replaces any client credential.
              if (stryMutAct_9fa48("1546") ? replica.engineKey === undefined : stryMutAct_9fa48("1545") ? false : stryMutAct_9fa48("1544") ? true : (stryCov_9fa48("1544", "1545", "1546"), replica.engineKey !== undefined)) {
                if (stryMutAct_9fa48("1547")) {
                  {}
                } else {
                  stryCov_9fa48("1547");
                  if (stryMutAct_9fa48("1550") ? ownAuthorization !== undefined : stryMutAct_9fa48("1549") ? false : stryMutAct_9fa48("1548") ? true : (stryCov_9fa48("1548", "1549", "1550"), ownAuthorization === undefined)) ownAuthorization = headers.get(stryMutAct_9fa48("1551") ? "" : (stryCov_9fa48("1551"), "authorization"));
                  headers.set(stryMutAct_9fa48("1553") ? "" : (stryCov_9fa48("1553"), "authorization"), stryMutAct_9fa48("1554") ? `` : (stryCov_9fa48("1554"), `Bearer ${replica.engineKey}`));
                }
              } else if (stryMutAct_9fa48("1557") ? ownAuthorization === undefined : stryMutAct_9fa48("1556") ? false : stryMutAct_9fa48("1555") ? true : (stryCov_9fa48("1555", "1556", "1557"), ownAuthorization !== undefined)) {
                if (stryMutAct_9fa48("1558")) {
                  {}
                } else {
                  stryCov_9fa48("1558");
                  // An earlier attempt went to an engine with its own key: this replica gets what the request had.
                  if (stryMutAct_9fa48("1561") ? ownAuthorization !== null : stryMutAct_9fa48("1560") ? false : stryMutAct_9fa48("1559") ? true : (stryCov_9fa48("1559", "1560", "1561"), ownAuthorization === null)) headers.delete(stryMutAct_9fa48("1563") ? "" : (stryCov_9fa48("1563"), "authorization"));else headers.set(stryMutAct_9fa48("1565") ? "" : (stryCov_9fa48("1565"), "authorization"), ownAuthorization);
                }
              }
              let signature: [string, string][];
              try {
                if (stryMutAct_9fa48("1566")) {
                  {}
                } else {
                  stryCov_9fa48("1566");
                  signature = await ctx.sign(stryMutAct_9fa48("1567") ? {} : (stryCov_9fa48("1567"), {
                    method: req.method,
                    deployment: deployment.name,
                    target: checked.target,
                    requestId,
                    replica: replica.id,
                    bodySha256
                  }));
                }
              } catch (err) {
                if (stryMutAct_9fa48("1568")) {
                  {}
                } else {
                  stryCov_9fa48("1568");
                  console.error(JSON.stringify(stryMutAct_9fa48("1570") ? {} : (stryCov_9fa48("1570"), {
                    msg: stryMutAct_9fa48("1571") ? "" : (stryCov_9fa48("1571"), "cannot sign dispatches (is SWITCHYARD_REPLICA_SECRET set?)"),
                    deployment: deployment.name,
                    error: String(err)
                  })));
                  return edgeError(stryMutAct_9fa48("1572") ? "" : (stryCov_9fa48("1572"), "internal_error"), stryMutAct_9fa48("1573") ? "" : (stryCov_9fa48("1573"), "the edge cannot sign dispatches"), stryMutAct_9fa48("1574") ? {} : (stryCov_9fa48("1574"), {
                    requestId
                  }));
                }
              }
              for (const [name, value] of signature) if (stryMutAct_9fa48("1575")) {
                ;
              } else {
                stryCov_9fa48("1575");
                headers.set(name, value);
              }
              // The checked URL as fetch() takes it.
              const target = checked.href;
              if (stryMutAct_9fa48("1577") ? false : stryMutAct_9fa48("1576") ? true : (stryCov_9fa48("1576", "1577"), ctx.trace)) ctx.trace.attempts = attempt;
              const outcome = await attemptOn(replica, target, req.method, headers, prepared, deadline, head, ctx);
              if (stryMutAct_9fa48("1580") ? outcome.kind !== "response" : stryMutAct_9fa48("1579") ? false : stryMutAct_9fa48("1578") ? true : (stryCov_9fa48("1578", "1579", "1580"), outcome.kind === (stryMutAct_9fa48("1581") ? "" : (stryCov_9fa48("1581"), "response")))) {
                if (stryMutAct_9fa48("1582")) {
                  {}
                } else {
                  stryCov_9fa48("1582");
                  if (stryMutAct_9fa48("1584") ? false : stryMutAct_9fa48("1583") ? true : (stryCov_9fa48("1583", "1584"), outcome.fromReplica)) {
                    if (stryMutAct_9fa48("1585")) {
                      {}
                    } else {
                      stryCov_9fa48("1585");
                      if (stryMutAct_9fa48("1587") ? false : stryMutAct_9fa48("1586") ? true : (stryCov_9fa48("1586", "1587"), ctx.trace)) ctx.trace.replica = replica.id;
                      if (stryMutAct_9fa48("1588")) {
                        ;
                      } else {
                        stryCov_9fa48("1588");
                        choice.served(replica);
                      }
                      if (stryMutAct_9fa48("1590") ? false : stryMutAct_9fa48("1589") ? true : (stryCov_9fa48("1589", "1590"), ctx.session)) {
                        if (stryMutAct_9fa48("1591")) {
                          {}
                        } else {
                          stryCov_9fa48("1591");
                          if (stryMutAct_9fa48("1593") ? false : stryMutAct_9fa48("1592") ? true : (stryCov_9fa48("1592", "1593"), sessionFollowsRetry(firstRefusal))) if (stryMutAct_9fa48("1594")) {
                            ;
                          } else {
                            stryCov_9fa48("1594");
                            ctx.session.affinity.served(deployment, ctx.session.id, replica.id, ctx.background);
                          }
                          // The binding after this request, signed: a client that sends it back is routed with no object call.
                          const {
                            affinity,
                            id
                          } = ctx.session;
                          const token = stryMutAct_9fa48("1595") ? affinity.reusableToken(deployment, id, replica.id) && (await affinity.tokenFor(deployment, id, replica.id)) : (stryCov_9fa48("1595"), affinity.reusableToken(deployment, id, replica.id) ?? (await affinity.tokenFor(deployment, id, replica.id)));
                          if (stryMutAct_9fa48("1598") ? token === undefined : stryMutAct_9fa48("1597") ? false : stryMutAct_9fa48("1596") ? true : (stryCov_9fa48("1596", "1597", "1598"), token !== undefined)) if (stryMutAct_9fa48("1599")) {
                            ;
                          } else {
                            stryCov_9fa48("1599");
                            outcome.response.headers.set(Header.sessionToken, token);
                          }
                        }
                      }
                    }
                  }
                  return outcome;
                }
              }
              if (stryMutAct_9fa48("1602") ? attempt === 1 || round === 1 : stryMutAct_9fa48("1601") ? false : stryMutAct_9fa48("1600") ? true : (stryCov_9fa48("1600", "1601", "1602"), (stryMutAct_9fa48("1604") ? attempt !== 1 : stryMutAct_9fa48("1603") ? true : (stryCov_9fa48("1603", "1604"), attempt === 1)) && (stryMutAct_9fa48("1606") ? round !== 1 : stryMutAct_9fa48("1605") ? true : (stryCov_9fa48("1605", "1606"), round === 1)))) firstRefusal = outcome.why;
              // Not accepted: another replica may take it, if the body can be sent again.
              if (stryMutAct_9fa48("1609") ? !prepared.replayable && attempt === maxAttempts : stryMutAct_9fa48("1608") ? false : stryMutAct_9fa48("1607") ? true : (stryCov_9fa48("1607", "1608", "1609"), (stryMutAct_9fa48("1610") ? prepared.replayable : (stryCov_9fa48("1610"), !prepared.replayable)) || (stryMutAct_9fa48("1612") ? attempt !== maxAttempts : stryMutAct_9fa48("1611") ? false : (stryCov_9fa48("1611", "1612"), attempt === maxAttempts)))) break;
              if (stryMutAct_9fa48("1616") ? Date.now() < deadline : stryMutAct_9fa48("1615") ? Date.now() > deadline : stryMutAct_9fa48("1614") ? false : stryMutAct_9fa48("1613") ? true : (stryCov_9fa48("1613", "1614", "1615", "1616"), Date.now() >= deadline)) return edgeError(stryMutAct_9fa48("1617") ? "" : (stryCov_9fa48("1617"), "deadline_exceeded"), stryMutAct_9fa48("1618") ? "" : (stryCov_9fa48("1618"), "deadline passed while retrying"), stryMutAct_9fa48("1619") ? {} : (stryCov_9fa48("1619"), {
                requestId
              }));
              const wait = backoffMs(attempt, backoffBaseMs, backoffCapMs);
              if (stryMutAct_9fa48("1623") ? wait <= 0 : stryMutAct_9fa48("1622") ? wait >= 0 : stryMutAct_9fa48("1621") ? false : stryMutAct_9fa48("1620") ? true : (stryCov_9fa48("1620", "1621", "1622", "1623"), wait > 0)) await sleep(stryMutAct_9fa48("1624") ? Math.max(wait, deadline - Date.now()) : (stryCov_9fa48("1624"), Math.min(wait, stryMutAct_9fa48("1625") ? deadline + Date.now() : (stryCov_9fa48("1625"), deadline - Date.now()))));
            }
          }
          // Held again only with a body that can still be sent (one held here, or none sent yet), and, when this
          // round found no replica at all, only for a deployment that scales from zero: any other is down.
          if (stryMutAct_9fa48("1628") ? (!ctx.hold || sawReplica && !prepared.replayable) && !roundSawReplica && !holdsAtZero(deployment) : stryMutAct_9fa48("1627") ? false : stryMutAct_9fa48("1626") ? true : (stryCov_9fa48("1626", "1627", "1628"), (stryMutAct_9fa48("1630") ? !ctx.hold && sawReplica && !prepared.replayable : stryMutAct_9fa48("1629") ? false : (stryCov_9fa48("1629", "1630"), (stryMutAct_9fa48("1631") ? ctx.hold : (stryCov_9fa48("1631"), !ctx.hold)) || (stryMutAct_9fa48("1633") ? sawReplica || !prepared.replayable : stryMutAct_9fa48("1632") ? false : (stryCov_9fa48("1632", "1633"), sawReplica && (stryMutAct_9fa48("1634") ? prepared.replayable : (stryCov_9fa48("1634"), !prepared.replayable)))))) || (stryMutAct_9fa48("1636") ? !roundSawReplica || !holdsAtZero(deployment) : stryMutAct_9fa48("1635") ? false : (stryCov_9fa48("1635", "1636"), (stryMutAct_9fa48("1637") ? roundSawReplica : (stryCov_9fa48("1637"), !roundSawReplica)) && (stryMutAct_9fa48("1638") ? holdsAtZero(deployment) : (stryCov_9fa48("1638"), !holdsAtZero(deployment))))))) break;
          const again = await ctx.hold();
          if (stryMutAct_9fa48("1641") ? again === "go" : stryMutAct_9fa48("1640") ? false : stryMutAct_9fa48("1639") ? true : (stryCov_9fa48("1639", "1640", "1641"), again !== (stryMutAct_9fa48("1642") ? "" : (stryCov_9fa48("1642"), "go")))) return stryMutAct_9fa48("1643") ? {} : (stryCov_9fa48("1643"), {
            response: admissionRefusal(again, deployment, requestId),
            fromReplica: stryMutAct_9fa48("1644") ? true : (stryCov_9fa48("1644"), false)
          });
          if (stryMutAct_9fa48("1645")) {
            ;
          } else {
            stryCov_9fa48("1645");
            tried.clear();
          }
        }
      }
    }
    if (stryMutAct_9fa48("1648") ? false : stryMutAct_9fa48("1647") ? true : stryMutAct_9fa48("1646") ? sawReplica : (stryCov_9fa48("1646", "1647", "1648"), !sawReplica)) {
      if (stryMutAct_9fa48("1649")) {
        {}
      } else {
        stryCov_9fa48("1649");
        // Why each replica was no candidate is for operators (the log), not for clients.
        console.error(JSON.stringify(stryMutAct_9fa48("1651") ? {} : (stryCov_9fa48("1651"), {
          msg: stryMutAct_9fa48("1652") ? "" : (stryCov_9fa48("1652"), "no ready replica"),
          deployment: deployment.name,
          request_id: requestId,
          replicas: view.describe(Date.now())
        })));
        return edgeError(stryMutAct_9fa48("1653") ? "" : (stryCov_9fa48("1653"), "no_ready_replica"), stryMutAct_9fa48("1654") ? `` : (stryCov_9fa48("1654"), `deployment "${deployment.name}" has no ready replica`), stryMutAct_9fa48("1655") ? {} : (stryCov_9fa48("1655"), {
          requestId,
          retryAfterSeconds: 1
        }));
      }
    }
    return edgeError(stryMutAct_9fa48("1656") ? "" : (stryCov_9fa48("1656"), "all_replicas_busy"), stryMutAct_9fa48("1657") ? `` : (stryCov_9fa48("1657"), `every replica of "${deployment.name}" tried was at capacity or unreachable`), stryMutAct_9fa48("1658") ? {} : (stryCov_9fa48("1658"), {
      requestId,
      retryAfterSeconds: 1,
      details: stryMutAct_9fa48("1659") ? {} : (stryCov_9fa48("1659"), {
        attempts: tried.size
      })
    }));
  }
}

/** `fromReplica`: the replica accepted the request and this is its answer (not a proxy error). */
/** `full`: the replica refused because it is at capacity (alive); `gone`: draining, unreachable or refusing the edge. */
type AttemptOutcome = {
  kind: "response";
  response: Response;
  fromReplica: boolean;
} | {
  kind: "not_accepted";
  why: "full" | "gone";
};
async function attemptOn(replica: ReplicaEntry, target: string, method: string, headers: Headers, prepared: PreparedBody, deadline: number, head: HeadDeadline, ctx: DispatchContext): Promise<AttemptOutcome> {
  if (stryMutAct_9fa48("1660")) {
    {}
  } else {
    stryCov_9fa48("1660");
    const {
      view,
      requestId,
      deployment
    } = ctx;
    if (stryMutAct_9fa48("1661")) {
      ;
    } else {
      stryCov_9fa48("1661");
      view.startDispatch(replica);
    }
    stryMutAct_9fa48("1662") ? ctx.onDispatch() : (stryCov_9fa48("1662"), ctx.onDispatch?.());
    let upstream: Response;
    try {
      if (stryMutAct_9fa48("1663")) {
        {}
      } else {
        stryCov_9fa48("1663");
        upstream = await fetch(target, stryMutAct_9fa48("1664") ? {} : (stryCov_9fa48("1664"), {
          method,
          headers,
          body: prepared.body,
          signal: head.signal(deadline, ctx.clientSignal),
          redirect: stryMutAct_9fa48("1665") ? "" : (stryCov_9fa48("1665"), "manual")
        }));
      }
    } catch (err) {
      if (stryMutAct_9fa48("1666")) {
        {}
      } else {
        stryCov_9fa48("1666");
        if (stryMutAct_9fa48("1667")) {
          ;
        } else {
          stryCov_9fa48("1667");
          view.endDispatch(replica);
        }
        const verdict = judgeLostConnection(stryMutAct_9fa48("1668") ? {} : (stryCov_9fa48("1668"), {
          deadline: head.passed,
          tooSlow: prepared.tooSlow(),
          overLimit: prepared.overLimit(),
          clientGone: stryMutAct_9fa48("1671") ? prepared.aborted() && ctx.clientSignal?.aborted === true : stryMutAct_9fa48("1670") ? false : stryMutAct_9fa48("1669") ? true : (stryCov_9fa48("1669", "1670", "1671"), prepared.aborted() || (stryMutAct_9fa48("1673") ? ctx.clientSignal?.aborted !== true : stryMutAct_9fa48("1672") ? false : (stryCov_9fa48("1672", "1673"), (stryMutAct_9fa48("1674") ? ctx.clientSignal.aborted : (stryCov_9fa48("1674"), ctx.clientSignal?.aborted)) === (stryMutAct_9fa48("1675") ? false : (stryCov_9fa48("1675"), true))))),
          safeToRepeat: prepared.safeToRepeat
        }));
        switch (verdict) {
          case stryMutAct_9fa48("1677") ? "" : (stryCov_9fa48("1677"), "deadline"):
            if (stryMutAct_9fa48("1676")) {} else {
              stryCov_9fa48("1676");
              // A hung replica: after a few in a row it is ejected (circuit breaker).
              if (stryMutAct_9fa48("1679") ? false : stryMutAct_9fa48("1678") ? true : (stryCov_9fa48("1678", "1679"), view.recordFailure(replica, Date.now(), deployment.policy))) logEjection(ctx, replica, stryMutAct_9fa48("1681") ? "" : (stryCov_9fa48("1681"), "deadline"));
              console.error(JSON.stringify(stryMutAct_9fa48("1683") ? {} : (stryCov_9fa48("1683"), {
                msg: stryMutAct_9fa48("1684") ? "" : (stryCov_9fa48("1684"), "replica deadline passed"),
                deployment: deployment.name,
                replica: replica.id,
                request_id: requestId
              })));
              return respond(errorResponse(stryMutAct_9fa48("1685") ? "" : (stryCov_9fa48("1685"), "deadline_exceeded"), stryMutAct_9fa48("1686") ? "" : (stryCov_9fa48("1686"), "the replica did not answer before the deadline"), stryMutAct_9fa48("1687") ? {} : (stryCov_9fa48("1687"), {
                requestId
              })));
            }
          // The client's fault, not the replica's: it is not marked down.
          case stryMutAct_9fa48("1689") ? "" : (stryCov_9fa48("1689"), "too_slow"):
            if (stryMutAct_9fa48("1688")) {} else {
              stryCov_9fa48("1688");
              return respond(uploadTooSlow(requestId));
            }
          case stryMutAct_9fa48("1691") ? "" : (stryCov_9fa48("1691"), "over_limit"):
            if (stryMutAct_9fa48("1690")) {} else {
              stryCov_9fa48("1690");
              return respond(errorResponse(stryMutAct_9fa48("1692") ? "" : (stryCov_9fa48("1692"), "payload_too_large"), stryMutAct_9fa48("1693") ? `` : (stryCov_9fa48("1693"), `request body exceeds ${deployment.limits.maxRequestBodyBytes} bytes`), stryMutAct_9fa48("1694") ? {} : (stryCov_9fa48("1694"), {
                requestId
              })));
            }
          case stryMutAct_9fa48("1696") ? "" : (stryCov_9fa48("1696"), "client_gone"):
            if (stryMutAct_9fa48("1695")) {} else {
              stryCov_9fa48("1695");
              return respond(bodyRefusal(stryMutAct_9fa48("1697") ? "" : (stryCov_9fa48("1697"), "aborted"), deployment.limits.maxRequestBodyBytes, requestId));
            }
          default:
            if (stryMutAct_9fa48("1698")) {} else {
              stryCov_9fa48("1698");
              // The replica is unreachable or went away: no new dispatches to it from this isolate for a while.
              if (stryMutAct_9fa48("1699")) {
                ;
              } else {
                stryCov_9fa48("1699");
                view.markDown(replica.id, Date.now());
              }
              if (stryMutAct_9fa48("1701") ? false : stryMutAct_9fa48("1700") ? true : (stryCov_9fa48("1700", "1701"), view.recordFailure(replica, Date.now(), deployment.policy))) logEjection(ctx, replica, stryMutAct_9fa48("1703") ? "" : (stryCov_9fa48("1703"), "connection"));
              console.error(JSON.stringify(stryMutAct_9fa48("1705") ? {} : (stryCov_9fa48("1705"), {
                msg: stryMutAct_9fa48("1706") ? "" : (stryCov_9fa48("1706"), "replica connection failed"),
                deployment: deployment.name,
                replica: replica.id,
                request_id: requestId,
                error: String(err)
              })));
              if (stryMutAct_9fa48("1709") ? verdict !== "retry" : stryMutAct_9fa48("1708") ? false : stryMutAct_9fa48("1707") ? true : (stryCov_9fa48("1707", "1708", "1709"), verdict === (stryMutAct_9fa48("1710") ? "" : (stryCov_9fa48("1710"), "retry")))) return stryMutAct_9fa48("1711") ? {} : (stryCov_9fa48("1711"), {
                kind: stryMutAct_9fa48("1712") ? "" : (stryCov_9fa48("1712"), "not_accepted"),
                why: stryMutAct_9fa48("1713") ? "" : (stryCov_9fa48("1713"), "gone")
              });
              return respond(errorResponse(stryMutAct_9fa48("1714") ? "" : (stryCov_9fa48("1714"), "upstream_failed"), stryMutAct_9fa48("1715") ? "" : (stryCov_9fa48("1715"), "the connection to the replica was lost"), stryMutAct_9fa48("1716") ? {} : (stryCov_9fa48("1716"), {
                requestId
              })));
            }
        }
      }
    }
    const load = parseLoadHeader(upstream.headers.get(Header.load));
    if (stryMutAct_9fa48("1718") ? false : stryMutAct_9fa48("1717") ? true : (stryCov_9fa48("1717", "1718"), load)) if (stryMutAct_9fa48("1719")) {
      ;
    } else {
      stryCov_9fa48("1719");
      view.applyLoad(replica.id, load, Date.now());
    }
    const verdict = judgeAnswer(stryMutAct_9fa48("1720") ? {} : (stryCov_9fa48("1720"), {
      status: upstream.status,
      rejected: upstream.headers.get(Header.rejected),
      load,
      engineKey: stryMutAct_9fa48("1723") ? replica.engineKey === undefined : stryMutAct_9fa48("1722") ? false : stryMutAct_9fa48("1721") ? true : (stryCov_9fa48("1721", "1722", "1723"), replica.engineKey !== undefined)
    }));
    // The deadline bounds the wait for an accepted response head only: a stream that has started is not cut by it.
    if (stryMutAct_9fa48("1726") ? verdict.kind !== "accepted" : stryMutAct_9fa48("1725") ? false : stryMutAct_9fa48("1724") ? true : (stryCov_9fa48("1724", "1725", "1726"), verdict.kind === (stryMutAct_9fa48("1727") ? "" : (stryCov_9fa48("1727"), "accepted")))) if (stryMutAct_9fa48("1728")) {
      ;
    } else {
      stryCov_9fa48("1728");
      head.disarm();
    }
    if (stryMutAct_9fa48("1731") ? verdict.kind === "accepted" : stryMutAct_9fa48("1730") ? false : stryMutAct_9fa48("1729") ? true : (stryCov_9fa48("1729", "1730", "1731"), verdict.kind !== (stryMutAct_9fa48("1732") ? "" : (stryCov_9fa48("1732"), "accepted")))) {
      if (stryMutAct_9fa48("1733")) {
        {}
      } else {
        stryCov_9fa48("1733");
        if (stryMutAct_9fa48("1734")) {
          ;
        } else {
          stryCov_9fa48("1734");
          view.endDispatch(replica);
        }
        if (stryMutAct_9fa48("1737") ? verdict.kind !== "credential_refusal" : stryMutAct_9fa48("1736") ? false : stryMutAct_9fa48("1735") ? true : (stryCov_9fa48("1735", "1736", "1737"), verdict.kind === (stryMutAct_9fa48("1738") ? "" : (stryCov_9fa48("1738"), "credential_refusal")))) {
          if (stryMutAct_9fa48("1739")) {
            {}
          } else {
            stryCov_9fa48("1739");
            if (stryMutAct_9fa48("1741") ? false : stryMutAct_9fa48("1740") ? true : (stryCov_9fa48("1740", "1741"), view.recordFailure(replica, Date.now(), deployment.policy))) logEjection(ctx, replica, stryMutAct_9fa48("1743") ? "" : (stryCov_9fa48("1743"), "refused the edge's credentials"));
            console.error(JSON.stringify(stryMutAct_9fa48("1745") ? {} : (stryCov_9fa48("1745"), {
              msg: stryMutAct_9fa48("1746") ? "" : (stryCov_9fa48("1746"), "replica refused the edge's credentials"),
              deployment: deployment.name,
              replica: replica.id,
              request_id: requestId
            })));
          }
        } else {
          if (stryMutAct_9fa48("1747")) {
            {}
          } else {
            stryCov_9fa48("1747");
            if (stryMutAct_9fa48("1749") ? false : stryMutAct_9fa48("1748") ? true : (stryCov_9fa48("1748", "1749"), ctx.trace)) stryMutAct_9fa48("1750") ? ctx.trace.rejections-- : (stryCov_9fa48("1750"), ctx.trace.rejections++);
            if (stryMutAct_9fa48("1753") ? verdict.lying || view.recordFailure(replica, Date.now(), deployment.policy) : stryMutAct_9fa48("1752") ? false : stryMutAct_9fa48("1751") ? true : (stryCov_9fa48("1751", "1752", "1753"), verdict.lying && view.recordFailure(replica, Date.now(), deployment.policy))) logEjection(ctx, replica, stryMutAct_9fa48("1755") ? "" : (stryCov_9fa48("1755"), "refused while claiming room"));
          }
        }
        // Free the connection: the refusal's body is a short JSON we do not need.
        ctx.background(stryMutAct_9fa48("1757") ? upstream.body?.cancel() && Promise.resolve() : (stryCov_9fa48("1757"), (stryMutAct_9fa48("1758") ? upstream.body.cancel() : (stryCov_9fa48("1758"), upstream.body?.cancel())) ?? Promise.resolve()));
        return stryMutAct_9fa48("1759") ? {} : (stryCov_9fa48("1759"), {
          kind: stryMutAct_9fa48("1760") ? "" : (stryCov_9fa48("1760"), "not_accepted"),
          why: (stryMutAct_9fa48("1763") ? verdict.kind !== "rejected" : stryMutAct_9fa48("1762") ? false : stryMutAct_9fa48("1761") ? true : (stryCov_9fa48("1761", "1762", "1763"), verdict.kind === (stryMutAct_9fa48("1764") ? "" : (stryCov_9fa48("1764"), "rejected")))) ? verdict.why : stryMutAct_9fa48("1765") ? "" : (stryCov_9fa48("1765"), "gone")
        });
      }
    }
    if (stryMutAct_9fa48("1766")) {
      ;
    } else {
      stryCov_9fa48("1766");
      view.recordSuccess(replica);
    }
    const passed = passAnswerBody(upstream, stryMutAct_9fa48("1767") ? {} : (stryCov_9fa48("1767"), {
      sseErrors: stryMutAct_9fa48("1770") ? ctx.sseErrors !== true : stryMutAct_9fa48("1769") ? false : stryMutAct_9fa48("1768") ? true : (stryCov_9fa48("1768", "1769", "1770"), ctx.sseErrors === (stryMutAct_9fa48("1771") ? false : (stryCov_9fa48("1771"), true))),
      replicaId: replica.id,
      requestId
    }));
    // The Response constructor copies the replica's headers; that copy is the client's, scrubbed in place.
    const response = new Response(passed.body, stryMutAct_9fa48("1772") ? {} : (stryCov_9fa48("1772"), {
      status: upstream.status,
      statusText: upstream.statusText,
      headers: upstream.headers
    }));
    const out = response.headers;
    if (stryMutAct_9fa48("1773")) {
      ;
    } else {
      stryCov_9fa48("1773");
      scrubForClient(out);
    } // Only the edge mints binding tokens (dispatch() adds the session's own to a session response).
    if (stryMutAct_9fa48("1774")) {
      ;
    } else {
      stryCov_9fa48("1774");
      out.delete(Header.sessionToken);
    }
    if (stryMutAct_9fa48("1775")) {
      ;
    } else {
      stryCov_9fa48("1775");
      out.set(Header.replica, replica.id);
    }
    if (stryMutAct_9fa48("1776")) {
      ;
    } else {
      stryCov_9fa48("1776");
      out.set(Header.requestId, requestId);
    }
    if (stryMutAct_9fa48("1779") ? false : stryMutAct_9fa48("1778") ? true : stryMutAct_9fa48("1777") ? passed.ended : (stryCov_9fa48("1777", "1778", "1779"), !passed.ended)) {
      if (stryMutAct_9fa48("1780")) {
        {}
      } else {
        stryCov_9fa48("1780");
        // A sized body is already produced by the replica; its work is done.
        if (stryMutAct_9fa48("1781")) {
          ;
        } else {
          stryCov_9fa48("1781");
          view.endDispatch(replica);
        }
        return respond(response, stryMutAct_9fa48("1782") ? false : (stryCov_9fa48("1782"), true));
      }
    }
    // A stream: the replica is busy until it ends, so count it in flight until then.
    const ended = passed.ended.finally(stryMutAct_9fa48("1783") ? () => undefined : (stryCov_9fa48("1783"), () => view.endDispatch(replica)));
    if (stryMutAct_9fa48("1785") ? false : stryMutAct_9fa48("1784") ? true : (stryCov_9fa48("1784", "1785"), ctx.trace)) ctx.trace.streamEnd = ended;
    if (stryMutAct_9fa48("1786")) {
      ;
    } else {
      stryCov_9fa48("1786");
      ctx.background(ended);
    }
    return respond(response, stryMutAct_9fa48("1787") ? false : (stryCov_9fa48("1787"), true));
  }
}
function logEjection(ctx: DispatchContext, replica: ReplicaEntry, cause: string): void {
  if (stryMutAct_9fa48("1788")) {
    {}
  } else {
    stryCov_9fa48("1788");
    if (stryMutAct_9fa48("1790") ? false : stryMutAct_9fa48("1789") ? true : (stryCov_9fa48("1789", "1790"), ctx.trace)) stryMutAct_9fa48("1791") ? ctx.trace.ejections-- : (stryCov_9fa48("1791"), ctx.trace.ejections++);
    console.error(JSON.stringify(stryMutAct_9fa48("1793") ? {} : (stryCov_9fa48("1793"), {
      msg: stryMutAct_9fa48("1794") ? "" : (stryCov_9fa48("1794"), "replica ejected"),
      deployment: ctx.deployment.name,
      replica: replica.id,
      cause,
      failures: replica.breaker.failures,
      ejections: replica.breaker.ejections
    })));
  }
}
function respond(response: Response, fromReplica = stryMutAct_9fa48("1795") ? true : (stryCov_9fa48("1795"), false)): AttemptOutcome {
  if (stryMutAct_9fa48("1796")) {
    {}
  } else {
    stryCov_9fa48("1796");
    return stryMutAct_9fa48("1797") ? {} : (stryCov_9fa48("1797"), {
      kind: stryMutAct_9fa48("1798") ? "" : (stryCov_9fa48("1798"), "response"),
      response,
      fromReplica
    });
  }
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
export type AnswerVerdict = /** The replica took the request: its answer goes to the client, whatever its status. */
{
  kind: "accepted";
}
/**
 * The replica refused the edge itself: it checks signatures with another key (or a
 * clock far off), or the engine does not take the key its agent registered. Not the
 * client's doing: another replica is tried, and it counts towards ejection.
 */ | {
  kind: "credential_refusal";
}
/**
 * The replica did not take it: `full` (at capacity, alive) or `gone` (draining,
 * shutting down). `lying`: it refused for capacity while its load header claims room,
 * or its load header is garbled; a broken replica, which counts towards ejection so
 * it cannot soak up every request's first attempt.
 */ | {
  kind: "rejected";
  why: "full" | "gone";
  lying: boolean;
};
export function judgeAnswer(head: AnswerHead): AnswerVerdict {
  if (stryMutAct_9fa48("1799")) {
    {}
  } else {
    stryCov_9fa48("1799");
    if (stryMutAct_9fa48("1802") ? head.status === 401 || head.rejected === UNAUTHORIZED_REJECTION || head.engineKey : stryMutAct_9fa48("1801") ? false : stryMutAct_9fa48("1800") ? true : (stryCov_9fa48("1800", "1801", "1802"), (stryMutAct_9fa48("1804") ? head.status !== 401 : stryMutAct_9fa48("1803") ? true : (stryCov_9fa48("1803", "1804"), head.status === 401)) && (stryMutAct_9fa48("1806") ? head.rejected === UNAUTHORIZED_REJECTION && head.engineKey : stryMutAct_9fa48("1805") ? true : (stryCov_9fa48("1805", "1806"), (stryMutAct_9fa48("1808") ? head.rejected !== UNAUTHORIZED_REJECTION : stryMutAct_9fa48("1807") ? false : (stryCov_9fa48("1807", "1808"), head.rejected === UNAUTHORIZED_REJECTION)) || head.engineKey)))) return stryMutAct_9fa48("1809") ? {} : (stryCov_9fa48("1809"), {
      kind: stryMutAct_9fa48("1810") ? "" : (stryCov_9fa48("1810"), "credential_refusal")
    });
    if (stryMutAct_9fa48("1813") ? head.status === 503 || head.rejected !== null : stryMutAct_9fa48("1812") ? false : stryMutAct_9fa48("1811") ? true : (stryCov_9fa48("1811", "1812", "1813"), (stryMutAct_9fa48("1815") ? head.status !== 503 : stryMutAct_9fa48("1814") ? true : (stryCov_9fa48("1814", "1815"), head.status === 503)) && (stryMutAct_9fa48("1817") ? head.rejected === null : stryMutAct_9fa48("1816") ? true : (stryCov_9fa48("1816", "1817"), head.rejected !== null)))) {
      if (stryMutAct_9fa48("1818")) {
        {}
      } else {
        stryCov_9fa48("1818");
        const full = stryMutAct_9fa48("1821") ? head.rejected !== "capacity" : stryMutAct_9fa48("1820") ? false : stryMutAct_9fa48("1819") ? true : (stryCov_9fa48("1819", "1820", "1821"), head.rejected === (stryMutAct_9fa48("1822") ? "" : (stryCov_9fa48("1822"), "capacity")));
        const {
          load
        } = head;
        const lying = stryMutAct_9fa48("1825") ? !load && full && load.state === "ready" && load.ongoing + load.queued < load.max : stryMutAct_9fa48("1824") ? false : stryMutAct_9fa48("1823") ? true : (stryCov_9fa48("1823", "1824", "1825"), (stryMutAct_9fa48("1826") ? load : (stryCov_9fa48("1826"), !load)) || (stryMutAct_9fa48("1828") ? full && load.state === "ready" || load.ongoing + load.queued < load.max : stryMutAct_9fa48("1827") ? false : (stryCov_9fa48("1827", "1828"), (stryMutAct_9fa48("1830") ? full || load.state === "ready" : stryMutAct_9fa48("1829") ? true : (stryCov_9fa48("1829", "1830"), full && (stryMutAct_9fa48("1832") ? load.state !== "ready" : stryMutAct_9fa48("1831") ? true : (stryCov_9fa48("1831", "1832"), load.state === (stryMutAct_9fa48("1833") ? "" : (stryCov_9fa48("1833"), "ready")))))) && (stryMutAct_9fa48("1836") ? load.ongoing + load.queued >= load.max : stryMutAct_9fa48("1835") ? load.ongoing + load.queued <= load.max : stryMutAct_9fa48("1834") ? true : (stryCov_9fa48("1834", "1835", "1836"), (stryMutAct_9fa48("1837") ? load.ongoing - load.queued : (stryCov_9fa48("1837"), load.ongoing + load.queued)) < load.max)))));
        return stryMutAct_9fa48("1838") ? {} : (stryCov_9fa48("1838"), {
          kind: stryMutAct_9fa48("1839") ? "" : (stryCov_9fa48("1839"), "rejected"),
          why: full ? stryMutAct_9fa48("1840") ? "" : (stryCov_9fa48("1840"), "full") : stryMutAct_9fa48("1841") ? "" : (stryCov_9fa48("1841"), "gone"),
          lying
        });
      }
    }
    return stryMutAct_9fa48("1842") ? {} : (stryCov_9fa48("1842"), {
      kind: stryMutAct_9fa48("1843") ? "" : (stryCov_9fa48("1843"), "accepted")
    });
  }
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
  if (stryMutAct_9fa48("1844")) {
    {}
  } else {
    stryCov_9fa48("1844");
    if (stryMutAct_9fa48("1846") ? false : stryMutAct_9fa48("1845") ? true : (stryCov_9fa48("1845", "1846"), c.deadline)) return stryMutAct_9fa48("1847") ? "" : (stryCov_9fa48("1847"), "deadline");
    if (stryMutAct_9fa48("1849") ? false : stryMutAct_9fa48("1848") ? true : (stryCov_9fa48("1848", "1849"), c.tooSlow)) return stryMutAct_9fa48("1850") ? "" : (stryCov_9fa48("1850"), "too_slow");
    if (stryMutAct_9fa48("1852") ? false : stryMutAct_9fa48("1851") ? true : (stryCov_9fa48("1851", "1852"), c.overLimit)) return stryMutAct_9fa48("1853") ? "" : (stryCov_9fa48("1853"), "over_limit");
    if (stryMutAct_9fa48("1855") ? false : stryMutAct_9fa48("1854") ? true : (stryCov_9fa48("1854", "1855"), c.clientGone)) return stryMutAct_9fa48("1856") ? "" : (stryCov_9fa48("1856"), "client_gone");
    return c.safeToRepeat ? stryMutAct_9fa48("1857") ? "" : (stryCov_9fa48("1857"), "retry") : stryMutAct_9fa48("1858") ? "" : (stryCov_9fa48("1858"), "lost");
  }
}

/**
 * Whether a session follows the replica that served a retry: only when its own
 * replica (the first attempt's) was gone or draining. A full one keeps the session;
 * the next requests spill until the saturation grace period ends (session-affinity.ts).
 */
export function sessionFollowsRetry(firstRefusal: "full" | "gone" | undefined): boolean {
  if (stryMutAct_9fa48("1859")) {
    {}
  } else {
    stryCov_9fa48("1859");
    return stryMutAct_9fa48("1862") ? firstRefusal !== "gone" : stryMutAct_9fa48("1861") ? false : stryMutAct_9fa48("1860") ? true : (stryCov_9fa48("1860", "1861", "1862"), firstRefusal === (stryMutAct_9fa48("1863") ? "" : (stryCov_9fa48("1863"), "gone")));
  }
}
const IDEMPOTENT_METHODS = new Set(stryMutAct_9fa48("1864") ? [] : (stryCov_9fa48("1864"), [stryMutAct_9fa48("1865") ? "" : (stryCov_9fa48("1865"), "GET"), stryMutAct_9fa48("1866") ? "" : (stryCov_9fa48("1866"), "HEAD"), stryMutAct_9fa48("1867") ? "" : (stryCov_9fa48("1867"), "OPTIONS"), stryMutAct_9fa48("1868") ? "" : (stryCov_9fa48("1868"), "PUT"), stryMutAct_9fa48("1869") ? "" : (stryCov_9fa48("1869"), "DELETE")]));

/**
 * Whether a request may run again after its connection to a replica was lost.
 * workerd gives the same error ("Network connection lost.") for a refused
 * connection and for one lost after the request was sent, so the proxy cannot
 * tell whether the replica accepted it.
 */
export function safeToRepeat(method: string, headers: Headers, deploymentIdempotent: boolean): boolean {
  if (stryMutAct_9fa48("1870")) {
    {}
  } else {
    stryCov_9fa48("1870");
    return stryMutAct_9fa48("1873") ? (deploymentIdempotent || IDEMPOTENT_METHODS.has(method)) && headers.has("idempotency-key") : stryMutAct_9fa48("1872") ? false : stryMutAct_9fa48("1871") ? true : (stryCov_9fa48("1871", "1872", "1873"), (stryMutAct_9fa48("1875") ? deploymentIdempotent && IDEMPOTENT_METHODS.has(method) : stryMutAct_9fa48("1874") ? false : (stryCov_9fa48("1874", "1875"), deploymentIdempotent || IDEMPOTENT_METHODS.has(method))) || headers.has(stryMutAct_9fa48("1876") ? "" : (stryCov_9fa48("1876"), "idempotency-key")));
  }
}

/**
 * The edge's replica keys, one per deployment, derived from the master secret
 * (SWITCHYARD_REPLICA_SECRET) once per isolate: the control plane verifies
 * replicas' messages with them, and dispatch signs every request to a replica
 * with them (docs/protocol.md §1 and §2).
 */
/**
 * Derived keys of this isolate, per deployment (reset if the master secret changes):
 * `keys` as they are derived, `ready` once imported, so a dispatch signs without
 * awaiting the key again.
 */
let keyCache: {
  master: string;
  keys: Map<string, Promise<CryptoKey>>;
  ready: Map<string, CryptoKey>;
} | undefined;

/** The deployment's replica key as an HMAC key; rejects when the master secret is empty. */
export function replicaKeyFor(master: string, deployment: string): Promise<CryptoKey> {
  if (stryMutAct_9fa48("1877")) {
    {}
  } else {
    stryCov_9fa48("1877");
    if (stryMutAct_9fa48("1880") ? keyCache?.master === master : stryMutAct_9fa48("1879") ? false : stryMutAct_9fa48("1878") ? true : (stryCov_9fa48("1878", "1879", "1880"), (stryMutAct_9fa48("1881") ? keyCache.master : (stryCov_9fa48("1881"), keyCache?.master)) !== master)) keyCache = stryMutAct_9fa48("1882") ? {} : (stryCov_9fa48("1882"), {
      master,
      keys: new Map(),
      ready: new Map()
    });
    const {
      keys,
      ready
    } = keyCache;
    let key = keys.get(deployment);
    if (stryMutAct_9fa48("1885") ? false : stryMutAct_9fa48("1884") ? true : stryMutAct_9fa48("1883") ? key : (stryCov_9fa48("1883", "1884", "1885"), !key)) {
      if (stryMutAct_9fa48("1886")) {
        {}
      } else {
        stryCov_9fa48("1886");
        const derived = deriveReplicaKey(master, deployment).then(importReplicaKey);
        derived.then(k => {
          if (stryMutAct_9fa48("1888")) {
            {}
          } else {
            stryCov_9fa48("1888");
            if (stryMutAct_9fa48("1891") ? keys.get(deployment) !== derived : stryMutAct_9fa48("1890") ? false : stryMutAct_9fa48("1889") ? true : (stryCov_9fa48("1889", "1890", "1891"), keys.get(deployment) === derived)) if (stryMutAct_9fa48("1892")) {
              ;
            } else {
              stryCov_9fa48("1892");
              ready.set(deployment, k);
            }
          }
        }, stryMutAct_9fa48("1893") ? () => undefined : (stryCov_9fa48("1893"), () => keys.delete(deployment)));
        if (stryMutAct_9fa48("1894")) {
          ;
        } else {
          stryCov_9fa48("1894");
          keys.set(deployment, key = derived);
        }
      }
    }
    return key;
  }
}

/**
 * Dispatch nonces: a random start per isolate, then one more per dispatch. Two
 * isolates collide only if their starts lie within the number of dispatches
 * either makes (odds about n / 2^52), and a collision costs one retry elsewhere
 * (the replica refuses it as a replay), never a wrong answer.
 */
let nextNonce = Math.floor(stryMutAct_9fa48("1895") ? Math.random() / 2 ** 52 : (stryCov_9fa48("1895"), Math.random() * 2 ** 52));

/** The three signature headers of one dispatch (docs/protocol.md §2, "Signed dispatches"). */
export async function dispatchSignature(master: string, p: {
  method: string;
  deployment: string;
  target: string;
  requestId: string;
  replica: string;
  bodySha256: string;
}): Promise<[string, string][]> {
  if (stryMutAct_9fa48("1896")) {
    {}
  } else {
    stryCov_9fa48("1896");
    const key = stryMutAct_9fa48("1897") ? (keyCache?.master === master ? keyCache.ready.get(p.deployment) : undefined) && (await replicaKeyFor(master, p.deployment)) : (stryCov_9fa48("1897"), ((stryMutAct_9fa48("1900") ? keyCache?.master !== master : stryMutAct_9fa48("1899") ? false : stryMutAct_9fa48("1898") ? true : (stryCov_9fa48("1898", "1899", "1900"), (stryMutAct_9fa48("1901") ? keyCache.master : (stryCov_9fa48("1901"), keyCache?.master)) === master)) ? keyCache.ready.get(p.deployment) : undefined) ?? (await replicaKeyFor(master, p.deployment)));
    const timestamp = Date.now();
    const nonce = nextNonce;
    nextNonce = (stryMutAct_9fa48("1905") ? nonce < Number.MAX_SAFE_INTEGER : stryMutAct_9fa48("1904") ? nonce > Number.MAX_SAFE_INTEGER : stryMutAct_9fa48("1903") ? false : stryMutAct_9fa48("1902") ? true : (stryCov_9fa48("1902", "1903", "1904", "1905"), nonce >= Number.MAX_SAFE_INTEGER)) ? 0 : stryMutAct_9fa48("1906") ? nonce - 1 : (stryCov_9fa48("1906"), nonce + 1);
    const signature = await signDispatch(key, stryMutAct_9fa48("1907") ? {} : (stryCov_9fa48("1907"), {
      timestamp,
      nonce,
      method: p.method,
      deployment: p.deployment,
      target: p.target,
      requestId: p.requestId,
      replica: p.replica,
      bodySha256: p.bodySha256
    }));
    return stryMutAct_9fa48("1908") ? [] : (stryCov_9fa48("1908"), [stryMutAct_9fa48("1909") ? [] : (stryCov_9fa48("1909"), [Header.timestamp, String(timestamp)]), stryMutAct_9fa48("1910") ? [] : (stryCov_9fa48("1910"), [Header.nonce, String(nonce)]), stryMutAct_9fa48("1911") ? [] : (stryCov_9fa48("1911"), [Header.signature, signature])]);
  }
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
export function passAnswerBody(upstream: Response, o: {
  sseErrors: boolean;
  replicaId: string;
  requestId: string;
}): {
  body: ReadableStream<Uint8Array> | null;
  ended?: Promise<void>;
} {
  if (stryMutAct_9fa48("1912")) {
    {}
  } else {
    stryCov_9fa48("1912");
    if (stryMutAct_9fa48("1915") ? !upstream.body && upstream.headers.has("content-length") : stryMutAct_9fa48("1914") ? false : stryMutAct_9fa48("1913") ? true : (stryCov_9fa48("1913", "1914", "1915"), (stryMutAct_9fa48("1916") ? upstream.body : (stryCov_9fa48("1916"), !upstream.body)) || upstream.headers.has(stryMutAct_9fa48("1917") ? "" : (stryCov_9fa48("1917"), "content-length")))) return stryMutAct_9fa48("1918") ? {} : (stryCov_9fa48("1918"), {
      body: upstream.body
    });
    return o.sseErrors ? sseWithErrorEvent(upstream.body, o.replicaId, o.requestId) : nativePipe(upstream.body);
  }
}

/**
 * The native pipe: no JS per chunk. A client that goes away cancels the
 * readable side, which cancels the pipe's source: the replica sees its request
 * closed and stops.
 */
export function nativePipe(source: ReadableStream<Uint8Array>): PassedStream {
  if (stryMutAct_9fa48("1919")) {
    {}
  } else {
    stryCov_9fa48("1919");
    const {
      readable,
      writable
    } = new IdentityTransformStream();
    return stryMutAct_9fa48("1920") ? {} : (stryCov_9fa48("1920"), {
      body: readable,
      ended: source.pipeTo(writable).catch(() => undefined)
    });
  }
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
  if (stryMutAct_9fa48("1921")) {
    {}
  } else {
    stryCov_9fa48("1921");
    const {
      readable,
      writable
    } = new IdentityTransformStream();
    /** Writes `tail` (if any) and closes the client's stream; false when the client has gone. */
    const finish = async (tail: Uint8Array | undefined): Promise<boolean> => {
      if (stryMutAct_9fa48("1922")) {
        {}
      } else {
        stryCov_9fa48("1922");
        const writer = writable.getWriter();
        try {
          if (stryMutAct_9fa48("1923")) {
            {}
          } else {
            stryCov_9fa48("1923");
            if (stryMutAct_9fa48("1925") ? false : stryMutAct_9fa48("1924") ? true : (stryCov_9fa48("1924", "1925"), tail)) await writer.write(tail);
            await writer.close();
            return stryMutAct_9fa48("1926") ? false : (stryCov_9fa48("1926"), true);
          }
        } catch {
          if (stryMutAct_9fa48("1927")) {
            {}
          } else {
            stryCov_9fa48("1927");
            return stryMutAct_9fa48("1928") ? true : (stryCov_9fa48("1928"), false);
          }
        }
      }
    };
    const ended = source.pipeTo(writable, stryMutAct_9fa48("1929") ? {} : (stryCov_9fa48("1929"), {
      preventClose: stryMutAct_9fa48("1930") ? false : (stryCov_9fa48("1930"), true),
      preventAbort: stryMutAct_9fa48("1931") ? false : (stryCov_9fa48("1931"), true)
    })).then(() => {
      if (stryMutAct_9fa48("1932")) {
        {}
      } else {
        stryCov_9fa48("1932");
        // Not awaited: the replica's work is done once its body has ended.
        void finish(undefined);
      }
    }, (err: unknown) => {
      if (stryMutAct_9fa48("1933")) {
        {}
      } else {
        stryCov_9fa48("1933");
        // A cut and a client that went away reject alike ("Network connection lost."); only
        // after a cut does the client's side still take the error event. Not awaited either:
        // a client that stopped reading must not keep the replica counted busy.
        const event = errorBody(stryMutAct_9fa48("1934") ? "" : (stryCov_9fa48("1934"), "upstream_failed"), stryMutAct_9fa48("1935") ? "" : (stryCov_9fa48("1935"), "the replica failed mid-stream"), stryMutAct_9fa48("1936") ? {} : (stryCov_9fa48("1936"), {
          requestId
        }));
        void finish(new TextEncoder().encode(stryMutAct_9fa48("1937") ? `` : (stryCov_9fa48("1937"), `data: ${JSON.stringify(event)}\n\n`))).then(toClient => {
          if (stryMutAct_9fa48("1938")) {
            {}
          } else {
            stryCov_9fa48("1938");
            if (stryMutAct_9fa48("1940") ? false : stryMutAct_9fa48("1939") ? true : (stryCov_9fa48("1939", "1940"), toClient)) console.error(JSON.stringify(stryMutAct_9fa48("1942") ? {} : (stryCov_9fa48("1942"), {
              msg: stryMutAct_9fa48("1943") ? "" : (stryCov_9fa48("1943"), "stream failed"),
              replica: replicaId,
              request_id: requestId,
              error: String(err)
            })));
          }
        });
      }
    });
    return stryMutAct_9fa48("1944") ? {} : (stryCov_9fa48("1944"), {
      body: readable,
      ended
    });
  }
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
  if (stryMutAct_9fa48("1945")) {
    {}
  } else {
    stryCov_9fa48("1945");
    const sink = (stryMutAct_9fa48("1948") ? length !== null : stryMutAct_9fa48("1947") ? false : stryMutAct_9fa48("1946") ? true : (stryCov_9fa48("1946", "1947", "1948"), length === null)) ? new IdentityTransformStream() : new FixedLengthStream(length);
    const tap = new TransformStream<Uint8Array, Uint8Array>(stryMutAct_9fa48("1949") ? {} : (stryCov_9fa48("1949"), {
      transform(chunk, controller) {
        if (stryMutAct_9fa48("1950")) {
          {}
        } else {
          stryCov_9fa48("1950");
          if (stryMutAct_9fa48("1951")) {
            ;
          } else {
            stryCov_9fa48("1951");
            observe(chunk);
          }
          if (stryMutAct_9fa48("1952")) {
            ;
          } else {
            stryCov_9fa48("1952");
            controller.enqueue(chunk);
          }
        }
      }
    }));
    return stryMutAct_9fa48("1953") ? {} : (stryCov_9fa48("1953"), {
      body: sink.readable,
      ended: source.pipeThrough(tap).pipeTo(sink.writable).catch(() => undefined)
    });
  }
}