/**
 * The choose stage: which replica each attempt of a request goes to. What the
 * balancer reads (the multiplexed model; the prompt's block keys, computed only
 * for a balancer that reads them, from a body the edge holds, with the
 * deployment's tokenizer), the candidates the view allows (holders of the model
 * first), a session's bound replica on the first attempt (session-affinity.ts),
 * and the balancer's feedback once a replica accepted.
 */
import { prefixTokenizerName, type Deployment } from "../../config/deployment.ts";
import type { BalanceInput, PrefixBelief, PromptKeys, RequestSlo } from "../../policy/balancers/index.ts";
import type { Coordinates, TtftPrediction } from "../../policy/latency-model.ts";
import { promptEndpointOf, promptKeys, type PromptKeysResult } from "../../prefix/prompt-keys.ts";
import { promptTokenizer, type PromptTokenizer } from "../../prompt/tokenizers/index.ts";
import type { ActiveBalancer } from "../../policy/balancers/index.ts";
import { Header, type ContinuationForm, type ReplicaRole } from "../../protocol/index.ts";
import type { HeldBody } from "./request.ts";
import type { SessionAffinity } from "./session-affinity.ts";
import type { ReplicaEntry, RoutingView } from "./view.ts";

/** The deployment's prompt tokenizer (prefixTokenizerName: "auto" is the llm backend's model, bytes for anything else). */
export function tokenizerFor(deployment: Deployment): PromptTokenizer {
  return promptTokenizer(prefixTokenizerName(deployment));
}

/**
 * The request's prompt keys, or undefined when its path or body has no prompt. `body`:
 * the bytes, or the body the route holds (its one parse is shared).
 */
export function requestPromptKeys(deployment: Deployment, path: string, body: ArrayBuffer | HeldBody, model: string | undefined): PromptKeysResult | undefined {
  const endpoint = promptEndpointOf(path);
  if (!endpoint) return undefined;
  const startDate = deployment.policy.prefix?.startDate;
  return promptKeys(body instanceof ArrayBuffer ? new Uint8Array(body) : body, endpoint, { tokenizer: tokenizerFor(deployment), extra: model ?? "", ...(startDate !== undefined && { startDate }) });
}

/** What the choice needs of a request (dispatch.ts's DispatchContext has it). */
export interface ChoiceRequest {
  deployment: Deployment;
  target: { path: string };
  view: RoutingView;
  balancer: ActiveBalancer;
  /** Who sent it (per-client budgets of session placement). */
  client: string;
  model?: string;
  session?: { id: string; affinity: SessionAffinity };
  /** Told why the prompt fell back to bytes keys, when it did (counted in the metrics), what the choice believed of its cached prefix, and its predicted time to first token. */
  trace?: { promptFallback?: string; prefix?: PrefixBelief; latency?: { predicted: TtftPrediction; sloMs?: number; refused?: boolean } };
  /** Where this isolate is, when it knows (IsolateState.coordinates). */
  here?: Coordinates;
  /** The request's latency objectives (x-slo-ttft-ms / x-slo-tpot-ms, else the deployment's). */
  slo?: RequestSlo;
  /** A stream's continuation (migrate.ts), in this form: only replicas that take it are candidates. */
  continuation?: ContinuationForm;
  /** A leg of a split request (disaggregate.ts): only replicas with this role are candidates (one that declared none has both). */
  role?: ReplicaRole;
  /** With `role`: only replicas that declared that role alone (an SGLang server runs in one mode). */
  singleRole?: boolean;
  /** Registers follow-up work that must outlive the response (a session's binding). */
  background: (p: Promise<unknown>) => void;
  /** The body as the route read it (request.ts HeldBody): its prompt is keyed from its one parse. */
  held?: HeldBody;
}

/** The choice for one request's attempts. */
export interface Choice {
  /** The replica for attempt `attempt` (from 1) among those not `tried`; undefined when none is left. */
  next(attempt: number, tried: ReadonlySet<string>): Promise<ReplicaEntry | undefined>;
  /**
   * The load limit for `replica`, the last `next` answer (Header.loadLimit: the balancer's
   * load rule, checked by the replica against its exact load), or undefined: none for a
   * session's own replica, nor where no other candidate is left to try.
   */
  loadLimit(replica: ReplicaEntry): number | undefined;
  /**
   * `replica` accepted the request and `response` is its answer: the balancer learns
   * from it, and a session is bound to it (`followsRetry`: a retry moves the binding,
   * sessionFollowsRetry), its signed binding token set on the answer.
   */
  served(replica: ReplicaEntry, response: Response, followsRetry: boolean): Promise<void>;
  /**
   * After the first `next`: the request's TTFT objective and the best prediction among the
   * candidates, when the objective is one no candidate is predicted to meet; else undefined.
   */
  unattainable(): { sloMs: number; bestMs: number } | undefined;
}

/**
 * The choice for the request `ctx` describes. `body`: the body when the edge holds
 * it; `promptModel`: the model as the replica will see it (the prompt's extra key);
 * `sessionToken`: the session's binding token, when the client sent one.
 */
export function chooseFor(ctx: ChoiceRequest, body: ArrayBuffer | ReadableStream | null | undefined, promptModel: string | undefined, sessionToken: string | undefined): Choice {
  const { deployment, view, balancer, model, session } = ctx;
  const input: BalanceInput = { random: Math.random, now: Date.now() };
  if (model !== undefined) input.model = model;
  if (ctx.here !== undefined) input.here = ctx.here;
  /** The best prediction among the first choice's candidates, when the request has a TTFT objective. */
  let bestMs: number | undefined;
  if (ctx.slo !== undefined) input.slo = ctx.slo;
  {
    const trace = ctx.trace;
    const sloMs = ctx.slo?.ttftMs;
    input.predicted = (predicted, best) => {
      if (trace) trace.latency = sloMs === undefined ? { predicted } : { predicted, sloMs };
      bestMs ??= best;
    };
  }
  // Only a balancer that reads the prompt pays for parsing and tokenizing it, and only from a body held here.
  const held = ctx.held ?? (body instanceof ArrayBuffer ? body : undefined);
  if (balancer.readsPrompt && held) {
    const prompt = requestPromptKeys(deployment, ctx.target.path, held, promptModel);
    if (prompt) input.prompt = prompt;
    if (prompt?.fallback !== undefined && ctx.trace) ctx.trace.promptFallback = prompt.fallback;
    const trace = ctx.trace;
    if (trace) input.explain = (belief) => void (trace.prefix = belief);
  }
  const pick = (among: readonly ReplicaEntry[]) => balancer.pick(among, input);
  // A session new to this isolate goes where its prompt's prefix goes, when the balancer
  // reads one; otherwise rendezvous on its id places it (session-affinity.ts).
  const placeNew = input.prompt !== undefined ? pick : undefined;
  /** Whether the last answer of `next` was the balancer's pick among two or more candidates (not a session's binding). */
  let pickedOfMany = false;
  /**
   * The candidates the line is drawn over: the first pick's, tried ones included, as a router
   * that sees every replica draws it (a refusal's fresh load then raises the mean, not leaves it).
   */
  let lineOver: readonly ReplicaEntry[] | undefined;
  return {
    async next(attempt, tried) {
      const now = Date.now();
      // A holder of the model whose liveness merely lapsed here is still tried first (RoutingView.lapsed).
      const all = model !== undefined ? view.candidatesHolding(now, tried, (e) => e.models.includes(model) || e.loading.includes(model)) : view.candidates(now, tried);
      // A continuation goes only where it is understood (a replica that declared none takes both forms).
      const form = ctx.continuation;
      const role = ctx.role;
      const formed = form === undefined ? all : all.filter((e) => e.continues === undefined || e.continues.includes(form));
      const candidates =
        role === undefined
          ? formed
          : ctx.singleRole === true
            ? formed.filter((e) => e.roles?.length === 1 && e.roles[0] === role)
            : formed.filter((e) => e.roles === undefined || e.roles.includes(role));
      const bound = attempt === 1 && session !== undefined;
      pickedOfMany = !bound && candidates.length >= 2;
      if (!bound) {
        lineOver ??= candidates;
        input.fleet = lineOver;
      }
      const replica = bound
        ? await session.affinity.choose(deployment, session.id, candidates, pick, ctx.client, () => view.lapsed(now, tried), sessionToken, placeNew)
        : pick(candidates);
      if (replica && model !== undefined) view.noteModelDispatch(replica, model);
      return replica;
    },
    loadLimit(replica) {
      if (!pickedOfMany || lineOver === undefined || !balancer.loadLimit) return undefined;
      return balancer.loadLimit(lineOver, replica, input);
    },
    unattainable() {
      const sloMs = ctx.slo?.ttftMs;
      return sloMs !== undefined && bestMs !== undefined && bestMs > sloMs ? { sloMs, bestMs } : undefined;
    },
    async served(replica, response, followsRetry) {
      balancer.served?.(replica.id, input);
      if (!session) return;
      const { affinity, id } = session;
      if (followsRetry) affinity.served(deployment, id, replica.id, ctx.background);
      // The binding after this request, signed: a client that sends it back is routed with no object call.
      const token = affinity.reusableToken(deployment, id, replica.id) ?? (await affinity.tokenFor(deployment, id, replica.id));
      if (token !== undefined) response.headers.set(Header.sessionToken, token);
    },
  };
}
