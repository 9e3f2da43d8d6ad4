/**
 * The choose stage: which replica each attempt of a request goes to. What the
 * balancer reads (the multiplexed model; the prompt's block keys, computed only
 * for a balancer that reads them, from a body the edge holds, with the
 * deployment's tokenizer), the candidates the view allows (holders of the model
 * first), a session's bound replica on the first attempt (session-affinity.ts),
 * and the balancer's feedback once a replica accepted.
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
import { prefixTokenizerName, type Deployment } from "../../config/deployment.ts";
import type { BalanceInput, PromptKeys } from "../../policy/balancers/index.ts";
import { promptEndpointOf, promptKeys, type PromptKeysResult } from "../../prefix/prompt-keys.ts";
import { promptTokenizer, type PromptTokenizer } from "../../prompt/tokenizers/index.ts";
import type { ActiveBalancer } from "../../policy/balancers/index.ts";
import type { ContinuationForm } from "../../protocol/index.ts";
import type { SessionAffinity } from "./session-affinity.ts";
import type { ReplicaEntry, RoutingView } from "./view.ts";

/** The deployment's prompt tokenizer (prefixTokenizerName: "auto" is the llm backend's model, bytes for anything else). */
export function tokenizerFor(deployment: Deployment): PromptTokenizer {
  if (stryMutAct_9fa48("1358")) {
    {}
  } else {
    stryCov_9fa48("1358");
    return promptTokenizer(prefixTokenizerName(deployment));
  }
}

/** The request's prompt keys, or undefined when its path or body has no prompt. */
export function requestPromptKeys(deployment: Deployment, path: string, body: ArrayBuffer, model: string | undefined): PromptKeysResult | undefined {
  if (stryMutAct_9fa48("1359")) {
    {}
  } else {
    stryCov_9fa48("1359");
    const endpoint = promptEndpointOf(path);
    if (stryMutAct_9fa48("1362") ? false : stryMutAct_9fa48("1361") ? true : stryMutAct_9fa48("1360") ? endpoint : (stryCov_9fa48("1360", "1361", "1362"), !endpoint)) return undefined;
    return promptKeys(new Uint8Array(body), endpoint, stryMutAct_9fa48("1363") ? {} : (stryCov_9fa48("1363"), {
      tokenizer: tokenizerFor(deployment),
      extra: stryMutAct_9fa48("1364") ? model && "" : (stryCov_9fa48("1364"), model ?? (stryMutAct_9fa48("1365") ? "Stryker was here!" : (stryCov_9fa48("1365"), "")))
    }));
  }
}

/** What the choice needs of a request (dispatch.ts's DispatchContext has it). */
export interface ChoiceRequest {
  deployment: Deployment;
  target: {
    path: string;
  };
  view: RoutingView;
  balancer: ActiveBalancer;
  /** Who sent it (per-client budgets of session placement). */
  client: string;
  model?: string;
  session?: {
    id: string;
    affinity: SessionAffinity;
  };
  /** Told why the prompt fell back to bytes keys, when it did (counted in the metrics). */
  trace?: {
    promptFallback?: string;
  };
  /** A stream's continuation (migrate.ts), in this form: only replicas that take it are candidates. */
  continuation?: ContinuationForm;
}

/** The choice for one request's attempts. */
export interface Choice {
  /** The replica for attempt `attempt` (from 1) among those not `tried`; undefined when none is left. */
  next(attempt: number, tried: ReadonlySet<string>): Promise<ReplicaEntry | undefined>;
  /** `replica` accepted the request (the balancer learns from it). */
  served(replica: ReplicaEntry): void;
}

/**
 * The choice for the request `ctx` describes. `body`: the body when the edge holds
 * it; `promptModel`: the model as the replica will see it (the prompt's extra key);
 * `sessionToken`: the session's binding token, when the client sent one.
 */
export function chooseFor(ctx: ChoiceRequest, body: ArrayBuffer | ReadableStream | null | undefined, promptModel: string | undefined, sessionToken: string | undefined): Choice {
  if (stryMutAct_9fa48("1366")) {
    {}
  } else {
    stryCov_9fa48("1366");
    const {
      deployment,
      view,
      balancer,
      model,
      session
    } = ctx;
    const input: BalanceInput = stryMutAct_9fa48("1367") ? {} : (stryCov_9fa48("1367"), {
      random: Math.random,
      now: Date.now()
    });
    if (stryMutAct_9fa48("1370") ? model === undefined : stryMutAct_9fa48("1369") ? false : stryMutAct_9fa48("1368") ? true : (stryCov_9fa48("1368", "1369", "1370"), model !== undefined)) input.model = model;
    // Only a balancer that reads the prompt pays for parsing and tokenizing it, and only from a body held here.
    if (stryMutAct_9fa48("1373") ? balancer.readsPrompt || body instanceof ArrayBuffer : stryMutAct_9fa48("1372") ? false : stryMutAct_9fa48("1371") ? true : (stryCov_9fa48("1371", "1372", "1373"), balancer.readsPrompt && body instanceof ArrayBuffer)) {
      if (stryMutAct_9fa48("1374")) {
        {}
      } else {
        stryCov_9fa48("1374");
        const prompt = requestPromptKeys(deployment, ctx.target.path, body, promptModel);
        if (stryMutAct_9fa48("1376") ? false : stryMutAct_9fa48("1375") ? true : (stryCov_9fa48("1375", "1376"), prompt)) input.prompt = prompt;
        if (stryMutAct_9fa48("1379") ? prompt?.fallback !== undefined || ctx.trace : stryMutAct_9fa48("1378") ? false : stryMutAct_9fa48("1377") ? true : (stryCov_9fa48("1377", "1378", "1379"), (stryMutAct_9fa48("1381") ? prompt?.fallback === undefined : stryMutAct_9fa48("1380") ? true : (stryCov_9fa48("1380", "1381"), (stryMutAct_9fa48("1382") ? prompt.fallback : (stryCov_9fa48("1382"), prompt?.fallback)) !== undefined)) && ctx.trace)) ctx.trace.promptFallback = prompt.fallback;
      }
    }
    const pick = stryMutAct_9fa48("1383") ? () => undefined : (stryCov_9fa48("1383"), (() => {
      const pick = (among: readonly ReplicaEntry[]) => balancer.pick(among, input);
      return pick;
    })());
    // A session new to this isolate goes where its prompt's prefix goes, when the balancer
    // reads one; otherwise rendezvous on its id places it (session-affinity.ts).
    const placeNew = (stryMutAct_9fa48("1386") ? input.prompt === undefined : stryMutAct_9fa48("1385") ? false : stryMutAct_9fa48("1384") ? true : (stryCov_9fa48("1384", "1385", "1386"), input.prompt !== undefined)) ? pick : undefined;
    return stryMutAct_9fa48("1387") ? {} : (stryCov_9fa48("1387"), {
      async next(attempt, tried) {
        if (stryMutAct_9fa48("1388")) {
          {}
        } else {
          stryCov_9fa48("1388");
          const now = Date.now();
          // A holder of the model whose liveness merely lapsed here is still tried first (RoutingView.lapsed).
          const all = (stryMutAct_9fa48("1391") ? model === undefined : stryMutAct_9fa48("1390") ? false : stryMutAct_9fa48("1389") ? true : (stryCov_9fa48("1389", "1390", "1391"), model !== undefined)) ? view.candidatesHolding(now, tried, stryMutAct_9fa48("1392") ? () => undefined : (stryCov_9fa48("1392"), e => stryMutAct_9fa48("1395") ? e.models.includes(model) && e.loading.includes(model) : stryMutAct_9fa48("1394") ? false : stryMutAct_9fa48("1393") ? true : (stryCov_9fa48("1393", "1394", "1395"), e.models.includes(model) || e.loading.includes(model)))) : view.candidates(now, tried);
          // A continuation goes only where it is understood (a replica that declared none takes both forms).
          const form = ctx.continuation;
          const candidates = (stryMutAct_9fa48("1398") ? form !== undefined : stryMutAct_9fa48("1397") ? false : stryMutAct_9fa48("1396") ? true : (stryCov_9fa48("1396", "1397", "1398"), form === undefined)) ? all : stryMutAct_9fa48("1399") ? all : (stryCov_9fa48("1399"), all.filter(stryMutAct_9fa48("1400") ? () => undefined : (stryCov_9fa48("1400"), e => stryMutAct_9fa48("1403") ? e.continues === undefined && e.continues.includes(form) : stryMutAct_9fa48("1402") ? false : stryMutAct_9fa48("1401") ? true : (stryCov_9fa48("1401", "1402", "1403"), (stryMutAct_9fa48("1405") ? e.continues !== undefined : stryMutAct_9fa48("1404") ? false : (stryCov_9fa48("1404", "1405"), e.continues === undefined)) || e.continues.includes(form)))));
          const replica = (stryMutAct_9fa48("1408") ? attempt === 1 || session : stryMutAct_9fa48("1407") ? false : stryMutAct_9fa48("1406") ? true : (stryCov_9fa48("1406", "1407", "1408"), (stryMutAct_9fa48("1410") ? attempt !== 1 : stryMutAct_9fa48("1409") ? true : (stryCov_9fa48("1409", "1410"), attempt === 1)) && session)) ? await session.affinity.choose(deployment, session.id, candidates, pick, ctx.client, stryMutAct_9fa48("1411") ? () => undefined : (stryCov_9fa48("1411"), () => view.lapsed(now, tried)), sessionToken, placeNew) : pick(candidates);
          if (stryMutAct_9fa48("1414") ? replica || model !== undefined : stryMutAct_9fa48("1413") ? false : stryMutAct_9fa48("1412") ? true : (stryCov_9fa48("1412", "1413", "1414"), replica && (stryMutAct_9fa48("1416") ? model === undefined : stryMutAct_9fa48("1415") ? true : (stryCov_9fa48("1415", "1416"), model !== undefined)))) if (stryMutAct_9fa48("1417")) {
            ;
          } else {
            stryCov_9fa48("1417");
            view.noteModelDispatch(replica, model);
          }
          return replica;
        }
      },
      served: stryMutAct_9fa48("1418") ? () => undefined : (stryCov_9fa48("1418"), replica => stryMutAct_9fa48("1419") ? balancer.served(replica.id, input) : (stryCov_9fa48("1419"), balancer.served?.(replica.id, input)))
    });
  }
}