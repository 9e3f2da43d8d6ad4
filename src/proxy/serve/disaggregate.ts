/**
 * The disaggregate stage (docs/pd.md): a chat or completion of a deployment with
 * `openai.disaggregation` is split across two replicas when its prompt has enough tokens
 * that the decode replica chosen for it does not hold. As llm-d decides it, the decode
 * replica is chosen first (the attempts' own choice, among replicas with the `decode`
 * role); then, when the uncached part of the prompt there reaches
 * `minUncachedTokens`, the prefill leg goes to a `prefill` replica chosen by the same
 * balancer (for its cache), signed, under the same request id, deadline, priority and
 * client signal, and the decode leg carries what the prefill answered, in the
 * deployment's protocol (src/protocol/disaggregation.ts). A client never sets those
 * fields (the route refuses them).
 *
 * Failures fall back to one replica: a prefill refused or failed is tried on one other
 * prefill replica, then the request goes whole to the decode replica, which computes
 * the prompt itself; a decode that cannot read the blocks does the same (§2d). The
 * client sees one answer, the decode's, with its usage (the prefill's one token is not
 * counted). A continuation of a migrated stream is never split.
 */
import { MAX_PREFILL_ANSWER_BYTES, type PdProtocol } from "../../protocol/index.ts";
import { prepareBody, type PreparedBody } from "./body.ts";
import { chooseFor } from "./choose.ts";
import { Dispatch, type DispatchContext, type DispatchTrace, type SplitTrace } from "./dispatch.ts";
import type { ReplicaEntry } from "./view.ts";

/** What a split needs: the deployment's protocol and threshold, and the request's endpoint. */
export interface Disaggregation {
  protocol: PdProtocol;
  minUncachedTokens: number;
  endpoint: "chat" | "completions";
}

/** Prefill replicas a prefill leg is offered to before the request goes whole to the decode replica. */
export const PREFILL_ATTEMPTS = 2;

/**
 * The decode leg's prepared body when the request is split, else undefined (it goes whole
 * to the decode replica). `decode`: the replica the attempts chose; `prepared`: the
 * client's body, prepared; `promptModel`: the prompt's extra key as the choice reads it.
 */
export async function splitFor(req: Request, ctx: DispatchContext, pd: Disaggregation, prepared: PreparedBody, decode: ReplicaEntry, promptModel: string | undefined): Promise<PreparedBody | undefined> {
  const trace: SplitTrace = {};
  if (ctx.trace) ctx.trace.split = trace;
  const body = prepared.body;
  if (!(body instanceof ArrayBuffer)) return undefined;
  const belief = ctx.trace?.prefix;
  if (belief) {
    trace.uncached = Math.max(0, belief.blocks - belief.held) * belief.blockSize;
    if (trace.uncached < pd.minUncachedTokens) return undefined;
  }
  const legBody = pd.protocol.prefillBody(body, pd.endpoint);
  if (!legBody) return undefined;
  const legPrepared = await prepareBody(req, ctx.deployment, ctx.requestId, { client: ctx.client, authenticated: !ctx.deployment.access.public }, legBody);
  if (legPrepared instanceof Response) return undefined;
  // The leg's own headers and trace: the decode leg's dispatch sets its own on the request's.
  const legTrace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
  const legCtx: DispatchContext = { ...ctx, headers: new Headers(ctx.headers), trace: legTrace, sseErrors: false, migratable: false };
  delete legCtx.session;
  delete legCtx.continuation;
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
      const decodePrepared = await prepareBody(req, ctx.deployment, ctx.requestId, { client: ctx.client, authenticated: !ctx.deployment.access.public }, decodeBody);
      if (decodePrepared instanceof Response) return undefined;
      delete trace.fallback;
      trace.prefill = replica.id;
      return decodePrepared;
    }
    return undefined;
  } finally {
    leg.close(answered);
  }
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
