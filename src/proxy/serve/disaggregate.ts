/**
 * The disaggregate stage (docs/pd.md): a chat or completion of a deployment with
 * `openai.disaggregation` is split across two replicas when its prompt has enough tokens
 * that the decode replica chosen for it does not hold. As llm-d decides it, the decode
 * replica is chosen first (the attempts' own choice, by the decode leg's balancer, among
 * replicas with the `decode` role); then, when the uncached part of the prompt there
 * reaches `minUncachedTokens`, the prefill leg goes to a `prefill` replica chosen by the
 * prefill leg's balancer (for its cache), signed, under the same request id, deadline,
 * priority and client signal, in the deployment's protocol
 * (src/protocol/disaggregation.ts): vLLM's decode leg follows with what the prefill
 * answered; SGLang's goes at the same time, with the same body. A client never sets
 * those fields (the route refuses them).
 *
 * Failures fall back to one replica. vLLM's: a prefill refused or failed is tried on
 * one other prefill replica, then the request goes whole to the decode replica, which
 * computes the prompt itself; a decode that cannot read the blocks does the same (§2d).
 * SGLang's: a prefill that fails before the decode's first bytes aborts the decode leg
 * and the request goes whole (decodeLeg). The client sees one answer, the decode's,
 * with its usage (the prefill's token is not counted). A continuation of a migrated
 * stream is never split.
 */
import type { ActiveBalancer } from "../../policy/balancers/index.ts";
import { MAX_PREFILL_ANSWER_BYTES, type ConcurrentPd, type PdProtocol } from "../../protocol/index.ts";
import { prepareBody, type PreparedBody } from "./body.ts";
import { chooseFor, type Choice } from "./choose.ts";
import { Dispatch, type AttemptOutcome, type DispatchContext, type DispatchTrace, type PdFallback, type SplitTrace } from "./dispatch.ts";
import type { ReplicaEntry } from "./view.ts";

/** What a split needs: the deployment's protocol, threshold and prefill balancer, and the request's endpoint. */
export interface Disaggregation {
  protocol: PdProtocol;
  minUncachedTokens: number;
  endpoint: "chat" | "completions";
  /** The prefill leg's balancer (`openai.disaggregation.prefill`, else the deployment's). */
  prefillBalancer: ActiveBalancer;
}

/** Prefill replicas a prefill leg is offered to (vLLM's), or pairs tried (SGLang's), before the request goes whole to the decode replica. */
export const PREFILL_ATTEMPTS = 2;

/** A split request: its decode leg's body and, for a protocol that sends both legs at once, the prefill leg in flight. */
export interface Split {
  body: PreparedBody;
  prefill?: PrefillLeg;
}

/** How a prefill leg failed: refused or unreachable, or an error answer (PdFallback's). */
type PrefillFailure = Extract<PdFallback, "prefill_refused" | "prefill_failed">;

/** A prefill leg sent beside its decode leg (ConcurrentPd). */
export interface PrefillLeg {
  /** Settles as soon as the leg is known to have failed (why: refused or unreachable, or an error answer) or answered (undefined). */
  failed: Promise<PrefillFailure | undefined>;
  /** Ends the leg (the request goes whole, or the decode refused it). */
  abort(): void;
  /**
   * A new pair after this leg failed: another prefill replica (none tried for this
   * request), a new room, its leg in flight; undefined when PREFILL_ATTEMPTS pairs were
   * tried, no prefill replica is left, or the prefill answered the request a 4xx (the
   * request goes whole: a client's bad body costs at most 3 dispatches, not 5).
   */
  again(): Promise<Split | undefined>;
}

/**
 * The decode leg when the request is split, else undefined (it goes whole to the decode
 * replica). `decode`: the replica the attempts chose; `prepared`: the client's body,
 * prepared; `promptModel`: the prompt's extra key as the choice reads it.
 */
export async function splitFor(req: Request, ctx: DispatchContext, pd: Disaggregation, prepared: PreparedBody, decode: ReplicaEntry, promptModel: string | undefined): Promise<Split | undefined> {
  const trace: SplitTrace = {};
  if (ctx.trace) ctx.trace.split = trace;
  const body = prepared.body;
  if (!(body instanceof ArrayBuffer)) return undefined;
  // An engine in one mode: a decode leg goes only to a decode-only replica (a unified one takes the request whole).
  if (pd.protocol.legs === "concurrent" && !only(decode, "decode")) return undefined;
  const belief = ctx.trace?.prefix;
  if (belief) {
    trace.uncached = Math.max(0, belief.blocks - belief.held) * belief.blockSize;
    if (trace.uncached < pd.minUncachedTokens) return undefined;
  } else if (ctx.balancer.readsPrompt) {
    // A prompt-reading choice believes nothing only of a prompt under one block (or one it could not key): not worth a second hop.
    return undefined;
  }
  const prepare = (legBody: ArrayBuffer) => prepareBody(req, ctx.deployment, ctx.requestId, { client: ctx.client, authenticated: !ctx.deployment.access.public }, legBody);
  // The leg's own headers, trace and signal: the decode leg's dispatch sets its own on the request's.
  const legTrace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
  const legCtx: DispatchContext = { ...ctx, balancer: pd.prefillBalancer, headers: new Headers(ctx.headers), trace: legTrace, sseErrors: false, migratable: false };
  delete legCtx.session;
  delete legCtx.continuation;
  if (pd.protocol.legs === "concurrent") {
    const choice = chooseFor({ ...legCtx, role: "prefill", singleRole: true }, body, promptModel, undefined);
    return concurrentSplit({ req, ctx, legCtx, protocol: pd.protocol, body, choice, tried: new Set([decode.id]), trace, prepare }, 1);
  }
  const legBody = pd.protocol.prefillBody(body, pd.endpoint);
  if (!legBody) return undefined;
  const legPrepared = await prepare(legBody);
  if (legPrepared instanceof Response) return undefined;
  const choice = chooseFor({ ...legCtx, role: "prefill" }, legBody, promptModel, undefined);
  const leg = new Dispatch(req, legCtx, legPrepared);
  let answered = false;
  try {
    const tried = new Set([decode.id]);
    for (let attempt = 1; attempt <= PREFILL_ATTEMPTS; attempt++) {
      const replica = await choice.next(attempt, tried);
      if (!replica) {
        trace.fallback ??= "no_prefill_replica";
        return undefined;
      }
      tried.add(replica.id);
      const outcome = await leg.attempt(replica, attempt, choice.loadLimit(replica));
      if (outcome.kind !== "response") {
        trace.fallback = "prefill_refused";
        continue;
      }
      answered = outcome.fromReplica;
      const res = outcome.response;
      if (!outcome.fromReplica || res.status !== 200) {
        await res.body?.cancel();
        trace.fallback = "prefill_failed";
        // The edge's own answer (the deadline passed, the client left): no other prefill can do better.
        if (!outcome.fromReplica) return undefined;
        continue;
      }
      const answer = await boundedJson(res);
      await choice.served(replica, res, false);
      const decodeBody = answer === undefined ? undefined : pd.protocol.decodeBody(body, answer);
      if (!decodeBody) {
        trace.fallback = "nothing_passed";
        return undefined;
      }
      const decodePrepared = await prepare(decodeBody);
      if (decodePrepared instanceof Response) return undefined;
      delete trace.fallback;
      trace.prefill = replica.id;
      return { body: decodePrepared };
    }
    return undefined;
  } finally {
    leg.close(answered);
  }
}

/** Whether a replica declared `role` alone. */
function only(replica: ReplicaEntry, role: "prefill" | "decode"): boolean {
  return replica.roles !== undefined && replica.roles.length === 1 && replica.roles[0] === role;
}

/** What each pair of a concurrent split shares: the request, its prefill choice and the replicas tried. */
interface ConcurrentPlan {
  req: Request;
  ctx: DispatchContext;
  legCtx: DispatchContext;
  protocol: ConcurrentPd;
  body: ArrayBuffer;
  choice: Choice;
  tried: Set<string>;
  trace: SplitTrace;
  prepare: (legBody: ArrayBuffer) => Promise<PreparedBody | Response>;
}

/**
 * SGLang's way: one prefill replica (prefill-only, chosen for its cache) and one body
 * naming it and a fresh room, sent to it now and to the decode replica by the attempts.
 * The decode was told this prefill's address: a prefill that fails is retried as a new
 * pair (again(): another prefill, a new room, the decode leg sent anew), as SGLang's
 * router retries a pair; past PREFILL_ATTEMPTS the request goes whole (decodeLeg).
 */
async function concurrentSplit(plan: ConcurrentPlan, attempt: number): Promise<Split | undefined> {
  const { req, ctx, legCtx, protocol, body, choice, tried, trace, prepare } = plan;
  const replica = attempt <= PREFILL_ATTEMPTS ? await choice.next(attempt, tried) : undefined;
  if (!replica) {
    if (attempt === 1) trace.fallback = "no_prefill_replica";
    return undefined;
  }
  tried.add(replica.id);
  const legBody = protocol.legBody(body, { host: hostOf(replica.url), port: replica.bootstrapPort }, room());
  const legPrepared = legBody && (await prepare(legBody));
  if (!legPrepared || legPrepared instanceof Response) return undefined;
  // The leg ends with the client, or when the request goes on without it.
  const own = new AbortController();
  const pairCtx: DispatchContext = { ...legCtx, headers: new Headers(legCtx.headers), clientSignal: ctx.clientSignal ? AbortSignal.any([ctx.clientSignal, own.signal]) : own.signal };
  const leg = new Dispatch(req, pairCtx, legPrepared);
  let settle!: (why: PrefillFailure | undefined) => void;
  const failed = new Promise<PrefillFailure | undefined>((resolve) => (settle = resolve));
  /** The prefill refused the request itself (a 4xx): another pair would too, so the request goes whole at once. */
  let requestRefused = false;
  const run = (async () => {
    let answered = false;
    try {
      const outcome = await leg.attempt(replica, attempt, choice.loadLimit(replica));
      if (outcome.kind !== "response") return settle("prefill_refused");
      answered = outcome.fromReplica;
      const res = outcome.response;
      if (!outcome.fromReplica || res.status !== 200) {
        requestRefused = outcome.fromReplica && res.status >= 400 && res.status < 500;
        settle("prefill_failed");
        return void (await res.body?.cancel());
      }
      settle(undefined);
      await choice.served(replica, res, false);
      // Read to its end (an engine may take a closed connection for a client that left), and dropped.
      await drained(res);
    } catch {
      settle("prefill_failed");
    } finally {
      leg.close(answered);
    }
  })();
  ctx.background(run);
  trace.prefill = replica.id;
  return { body: legPrepared, prefill: { failed, abort: () => own.abort(), again: () => (requestRefused ? Promise.resolve(undefined) : concurrentSplit(plan, attempt + 1)) } };
}

/** A URL's host as SGLang's router writes bootstrap_host (brackets off an IPv6 address: the protocol adds them). */
function hostOf(url: string): string {
  return new URL(url).hostname.replace(/^\[|\]$/g, "");
}

/** A bootstrap room: uniformly random below 2^53, so every JSON reader reads it exactly. */
function room(): number {
  const [hi, lo] = crypto.getRandomValues(new Uint32Array(2));
  return (hi! % 2 ** 21) * 2 ** 32 + lo!;
}

/** Reads a body to its end, up to MAX_PREFILL_ANSWER_BYTES (then cancels it). */
async function drained(res: Response): Promise<void> {
  const reader = res.body?.getReader();
  if (!reader) return;
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    size += value.byteLength;
    if (size > MAX_PREFILL_ANSWER_BYTES) return void (await reader.cancel());
  }
}

/**
 * How a concurrent split's decode leg ended: its outcome (an answer, passed on once its
 * first bytes came before any failure of the prefill leg; an error answer; a refusal),
 * and `fallback` where the request is to go whole from now on: without an outcome when
 * the prefill failed first (the decode replica is to take it whole at once).
 */
export type DecodeLegEnd = { outcome: AttemptOutcome; fallback?: "decode_refused" } | { outcome?: undefined; fallback: PrefillFailure };

/**
 * The decode leg of a concurrent split, sent by `send` (the attempts' dispatch). A prefill
 * that fails first aborts the decode leg (it would wait for a room that will not fill); a
 * decode that refuses, or answers an error, ends the prefill leg. Once the decode has sent
 * bytes it holds the prompt's KV, and the prefill's fate no longer matters.
 */
export async function decodeLeg(ctx: DispatchContext, leg: PrefillLeg, send: () => Promise<AttemptOutcome>): Promise<DecodeLegEnd> {
  const own = new AbortController();
  const client = ctx.clientSignal;
  ctx.clientSignal = client ? AbortSignal.any([client, own.signal]) : own.signal;
  let committed = false;
  // Aborted only by a prefill failure before the decode's first bytes.
  void leg.failed.then((why) => {
    if (why !== undefined && !committed) own.abort();
  });
  try {
    const outcome = await send();
    const failedFirst = async () => ({ fallback: (await leg.failed) ?? "prefill_failed" });
    if (own.signal.aborted) {
      if (outcome.kind === "response") await outcome.response.body?.cancel().catch(() => {});
      return failedFirst();
    }
    if (outcome.kind !== "response" || !outcome.fromReplica || outcome.response.status !== 200) {
      leg.abort();
      return outcome.kind === "response" ? { outcome } : { outcome, fallback: "decode_refused" };
    }
    const answer = await firstBytes(outcome.response, own.signal);
    if (!answer) return failedFirst();
    committed = true;
    return { outcome: { kind: "response", response: answer, fromReplica: true } };
  } finally {
    // Later attempts (the request whole) end only with the client.
    if (client) ctx.clientSignal = client;
    else delete ctx.clientSignal;
  }
}

/** `res` once its first bytes have come (re-assembled, unchanged), or undefined when `failed` aborts first (it is cancelled). */
async function firstBytes(res: Response, failed: AbortSignal): Promise<Response | undefined> {
  if (!res.body) return res;
  const reader = res.body.getReader();
  const aborted = new Promise<"failed">((resolve) => (failed.aborted ? resolve("failed") : failed.addEventListener("abort", () => resolve("failed"), { once: true })));
  const first = await Promise.race([reader.read(), aborted]).catch(() => "failed" as const);
  if (first === "failed") {
    await reader.cancel().catch(() => {});
    return undefined;
  }
  let pending: Uint8Array | undefined = first.done ? undefined : first.value;
  const ended = first.done;
  const body = new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (pending) {
        controller.enqueue(pending);
        pending = undefined;
        return;
      }
      if (ended) return controller.close();
      const next = await reader.read();
      if (next.done) controller.close();
      else controller.enqueue(next.value);
    },
    cancel(reason) {
      return reader.cancel(reason);
    },
  });
  return new Response(body, { status: res.status, statusText: res.statusText, headers: res.headers });
}

/** A prefill's answer as JSON, read up to MAX_PREFILL_ANSWER_BYTES; undefined past it or when it is not JSON. */
async function boundedJson(res: Response): Promise<unknown> {
  const declared = Number(res.headers.get("content-length") ?? "0");
  if (declared > MAX_PREFILL_ANSWER_BYTES) {
    await res.body?.cancel();
    return undefined;
  }
  const reader = res.body?.getReader();
  if (!reader) return undefined;
  const decoder = new TextDecoder();
  let text = "";
  let size = 0;
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    size += value.byteLength;
    if (size > MAX_PREFILL_ANSWER_BYTES) {
      await reader.cancel();
      return undefined;
    }
    text += decoder.decode(value, { stream: true });
  }
  try {
    return JSON.parse(text + decoder.decode());
  } catch {
    return undefined;
  }
}
