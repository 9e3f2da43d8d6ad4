/**
 * The migrate stage (docs/migration.md): a streamed /v1/chat/completions or
 * /v1/completions answer whose replica fails after its first byte is continued on
 * another replica, and the client sees one stream. Opt-in per deployment
 * (`openai.migrationLimit`), as Dynamo's `migration_limit`.
 *
 * The stream is read event by event (this costs JS per chunk, only for deployments
 * that turn migration on). The stage keeps what the client has been sent: the
 * answer's text, its token count (content events: one token each, as vLLM and the
 * reference replica stream at the default stream interval), its id and creation time.
 * A failure is the edge's own `upstream_failed` event (the connection was lost or
 * reset: dispatch.ts, sseWithErrorEvent), an error event from the replica (a draining
 * replica's `stream_handover` among them), or nothing for `openai.migrationStallMs`
 * (the replica hangs; its stream is cancelled), or its replica's announced drain
 * deadline coming within HANDOVER_LEAD_MS (an engine behind the agent cannot hand its
 * streams over itself; docs/migration.md, "Drain deadlines"). Then the
 * replica is marked down in this isolate's view, and a continuation goes through the
 * whole request path again (admission, choice, signed dispatch):
 * - chat: the messages plus the partial answer as an assistant message, with vLLM's
 *   `continue_final_message: true, add_generation_prompt: false`;
 * - completions: the prompt text plus the text generated so far;
 * - `max_tokens` less the tokens sent; everything else (stop, seed, temperature) kept.
 * The continuation's events are rewritten to the first answer's id and creation time,
 * its opening role event dropped, and its usage reported for the whole answer
 * (prompt: the client's prompt; completion: both parts).
 *
 * Not migrated (continuationOf answers undefined; the stream fails as before):
 * n > 1, logprobs, tools or tool calls in the answer (half a tool call cannot be
 * continued as text), a completion prompt given as token ids, echo, best_of, and the
 * Responses API. Greedy decoding continues to the same text as an uninterrupted run,
 * and so does seeded sampling on the reference replica (it draws each token from the
 * seed and the token's position); other sampling continues from another random state.
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
import { errorBody, Header } from "../../protocol/index.ts";
import { withLastMember } from "./engine-priority.ts";

/**
 * How long before a replica's announced drain deadline its streams leave it: enough
 * for a continuation's connect before the replica stops (its own handover margin is
 * HANDOVER_MARGIN_MS, 500 ms, for the streams it cannot finish).
 */
export const HANDOVER_LEAD_MS = 1_000;

/** When a stream on a replica that drains at `drainsAt` (its announced deadline, epoch ms) must leave it: HANDOVER_LEAD_MS before, so its continuation is prefilled elsewhere in time. */
export function leaveByOf(drainsAt: number | undefined): number | undefined {
  if (stryMutAct_9fa48("2162")) {
    {}
  } else {
    stryCov_9fa48("2162");
    return (stryMutAct_9fa48("2165") ? drainsAt !== undefined : stryMutAct_9fa48("2164") ? false : stryMutAct_9fa48("2163") ? true : (stryCov_9fa48("2163", "2164", "2165"), drainsAt === undefined)) ? undefined : stryMutAct_9fa48("2166") ? drainsAt + HANDOVER_LEAD_MS : (stryCov_9fa48("2166"), drainsAt - HANDOVER_LEAD_MS);
  }
}

/** What a continuation needs of the original request, parsed once from its body. */
export interface MigrationPlan {
  endpoint: "chat" | "completion";
  body: Record<string, unknown>;
  /** The body as the client sent it: the continuation keeps its bytes (a seed beyond 2^53 stays the client's). */
  raw: ArrayBuffer;
  /** The token budget asked (max_completion_tokens / max_tokens), undefined when none. */
  maxTokens: number | undefined;
}

/** The original body's plan, or undefined when the request must not be migrated (see above). */
export function migrationPlan(endpoint: string, bytes: ArrayBuffer): MigrationPlan | undefined {
  if (stryMutAct_9fa48("2167")) {
    {}
  } else {
    stryCov_9fa48("2167");
    if (stryMutAct_9fa48("2170") ? endpoint !== "chat" || endpoint !== "completions" : stryMutAct_9fa48("2169") ? false : stryMutAct_9fa48("2168") ? true : (stryCov_9fa48("2168", "2169", "2170"), (stryMutAct_9fa48("2172") ? endpoint === "chat" : stryMutAct_9fa48("2171") ? true : (stryCov_9fa48("2171", "2172"), endpoint !== (stryMutAct_9fa48("2173") ? "" : (stryCov_9fa48("2173"), "chat")))) && (stryMutAct_9fa48("2175") ? endpoint === "completions" : stryMutAct_9fa48("2174") ? true : (stryCov_9fa48("2174", "2175"), endpoint !== (stryMutAct_9fa48("2176") ? "" : (stryCov_9fa48("2176"), "completions")))))) return undefined;
    let body: unknown;
    try {
      if (stryMutAct_9fa48("2177")) {
        {}
      } else {
        stryCov_9fa48("2177");
        body = JSON.parse(new TextDecoder().decode(bytes));
      }
    } catch {
      if (stryMutAct_9fa48("2178")) {
        {}
      } else {
        stryCov_9fa48("2178");
        return undefined;
      }
    }
    if (stryMutAct_9fa48("2181") ? (typeof body !== "object" || body === null) && Array.isArray(body) : stryMutAct_9fa48("2180") ? false : stryMutAct_9fa48("2179") ? true : (stryCov_9fa48("2179", "2180", "2181"), (stryMutAct_9fa48("2183") ? typeof body !== "object" && body === null : stryMutAct_9fa48("2182") ? false : (stryCov_9fa48("2182", "2183"), (stryMutAct_9fa48("2185") ? typeof body === "object" : stryMutAct_9fa48("2184") ? false : (stryCov_9fa48("2184", "2185"), typeof body !== (stryMutAct_9fa48("2186") ? "" : (stryCov_9fa48("2186"), "object")))) || (stryMutAct_9fa48("2188") ? body !== null : stryMutAct_9fa48("2187") ? false : (stryCov_9fa48("2187", "2188"), body === null)))) || Array.isArray(body))) return undefined;
    const b = body as Record<string, unknown>;
    if (stryMutAct_9fa48("2191") ? b.stream === true : stryMutAct_9fa48("2190") ? false : stryMutAct_9fa48("2189") ? true : (stryCov_9fa48("2189", "2190", "2191"), b.stream !== (stryMutAct_9fa48("2192") ? false : (stryCov_9fa48("2192"), true)))) return undefined;
    if (stryMutAct_9fa48("2195") ? b.n != null || b.n !== 1 : stryMutAct_9fa48("2194") ? false : stryMutAct_9fa48("2193") ? true : (stryCov_9fa48("2193", "2194", "2195"), (stryMutAct_9fa48("2197") ? b.n == null : stryMutAct_9fa48("2196") ? true : (stryCov_9fa48("2196", "2197"), b.n != null)) && (stryMutAct_9fa48("2199") ? b.n === 1 : stryMutAct_9fa48("2198") ? true : (stryCov_9fa48("2198", "2199"), b.n !== 1)))) return undefined;
    if (stryMutAct_9fa48("2202") ? b.logprobs != null || b.logprobs !== false : stryMutAct_9fa48("2201") ? false : stryMutAct_9fa48("2200") ? true : (stryCov_9fa48("2200", "2201", "2202"), (stryMutAct_9fa48("2204") ? b.logprobs == null : stryMutAct_9fa48("2203") ? true : (stryCov_9fa48("2203", "2204"), b.logprobs != null)) && (stryMutAct_9fa48("2206") ? b.logprobs === false : stryMutAct_9fa48("2205") ? true : (stryCov_9fa48("2205", "2206"), b.logprobs !== (stryMutAct_9fa48("2207") ? true : (stryCov_9fa48("2207"), false)))))) return undefined;
    if (stryMutAct_9fa48("2210") ? b.top_logprobs == null : stryMutAct_9fa48("2209") ? false : stryMutAct_9fa48("2208") ? true : (stryCov_9fa48("2208", "2209", "2210"), b.top_logprobs != null)) return undefined;
    if (stryMutAct_9fa48("2213") ? endpoint !== "chat" : stryMutAct_9fa48("2212") ? false : stryMutAct_9fa48("2211") ? true : (stryCov_9fa48("2211", "2212", "2213"), endpoint === (stryMutAct_9fa48("2214") ? "" : (stryCov_9fa48("2214"), "chat")))) {
      if (stryMutAct_9fa48("2215")) {
        {}
      } else {
        stryCov_9fa48("2215");
        if (stryMutAct_9fa48("2218") ? !Array.isArray(b.messages) && b.messages.length === 0 : stryMutAct_9fa48("2217") ? false : stryMutAct_9fa48("2216") ? true : (stryCov_9fa48("2216", "2217", "2218"), (stryMutAct_9fa48("2219") ? Array.isArray(b.messages) : (stryCov_9fa48("2219"), !Array.isArray(b.messages))) || (stryMutAct_9fa48("2221") ? b.messages.length !== 0 : stryMutAct_9fa48("2220") ? false : (stryCov_9fa48("2220", "2221"), b.messages.length === 0)))) return undefined;
        if (stryMutAct_9fa48("2224") ? b.tools != null && (!Array.isArray(b.tools) || b.tools.length > 0) && b.functions != null : stryMutAct_9fa48("2223") ? false : stryMutAct_9fa48("2222") ? true : (stryCov_9fa48("2222", "2223", "2224"), (stryMutAct_9fa48("2226") ? b.tools != null || !Array.isArray(b.tools) || b.tools.length > 0 : stryMutAct_9fa48("2225") ? false : (stryCov_9fa48("2225", "2226"), (stryMutAct_9fa48("2228") ? b.tools == null : stryMutAct_9fa48("2227") ? true : (stryCov_9fa48("2227", "2228"), b.tools != null)) && (stryMutAct_9fa48("2230") ? !Array.isArray(b.tools) && b.tools.length > 0 : stryMutAct_9fa48("2229") ? true : (stryCov_9fa48("2229", "2230"), (stryMutAct_9fa48("2231") ? Array.isArray(b.tools) : (stryCov_9fa48("2231"), !Array.isArray(b.tools))) || (stryMutAct_9fa48("2234") ? b.tools.length <= 0 : stryMutAct_9fa48("2233") ? b.tools.length >= 0 : stryMutAct_9fa48("2232") ? false : (stryCov_9fa48("2232", "2233", "2234"), b.tools.length > 0)))))) || (stryMutAct_9fa48("2236") ? b.functions == null : stryMutAct_9fa48("2235") ? false : (stryCov_9fa48("2235", "2236"), b.functions != null)))) return undefined;
        if (stryMutAct_9fa48("2239") ? b.continue_final_message !== true : stryMutAct_9fa48("2238") ? false : stryMutAct_9fa48("2237") ? true : (stryCov_9fa48("2237", "2238", "2239"), b.continue_final_message === (stryMutAct_9fa48("2240") ? false : (stryCov_9fa48("2240"), true)))) return undefined;
      }
    } else {
      if (stryMutAct_9fa48("2241")) {
        {}
      } else {
        stryCov_9fa48("2241");
        if (stryMutAct_9fa48("2244") ? typeof b.prompt !== "string" || !(Array.isArray(b.prompt) && b.prompt.length === 1 && typeof b.prompt[0] === "string") : stryMutAct_9fa48("2243") ? false : stryMutAct_9fa48("2242") ? true : (stryCov_9fa48("2242", "2243", "2244"), (stryMutAct_9fa48("2246") ? typeof b.prompt === "string" : stryMutAct_9fa48("2245") ? true : (stryCov_9fa48("2245", "2246"), typeof b.prompt !== (stryMutAct_9fa48("2247") ? "" : (stryCov_9fa48("2247"), "string")))) && (stryMutAct_9fa48("2248") ? Array.isArray(b.prompt) && b.prompt.length === 1 && typeof b.prompt[0] === "string" : (stryCov_9fa48("2248"), !(stryMutAct_9fa48("2251") ? Array.isArray(b.prompt) && b.prompt.length === 1 || typeof b.prompt[0] === "string" : stryMutAct_9fa48("2250") ? false : stryMutAct_9fa48("2249") ? true : (stryCov_9fa48("2249", "2250", "2251"), (stryMutAct_9fa48("2253") ? Array.isArray(b.prompt) || b.prompt.length === 1 : stryMutAct_9fa48("2252") ? true : (stryCov_9fa48("2252", "2253"), Array.isArray(b.prompt) && (stryMutAct_9fa48("2255") ? b.prompt.length !== 1 : stryMutAct_9fa48("2254") ? true : (stryCov_9fa48("2254", "2255"), b.prompt.length === 1)))) && (stryMutAct_9fa48("2257") ? typeof b.prompt[0] !== "string" : stryMutAct_9fa48("2256") ? true : (stryCov_9fa48("2256", "2257"), typeof b.prompt[0] === (stryMutAct_9fa48("2258") ? "" : (stryCov_9fa48("2258"), "string")))))))))) return undefined;
        if (stryMutAct_9fa48("2261") ? (b.echo === true || b.best_of != null && b.best_of !== 1) && b.suffix != null : stryMutAct_9fa48("2260") ? false : stryMutAct_9fa48("2259") ? true : (stryCov_9fa48("2259", "2260", "2261"), (stryMutAct_9fa48("2263") ? b.echo === true && b.best_of != null && b.best_of !== 1 : stryMutAct_9fa48("2262") ? false : (stryCov_9fa48("2262", "2263"), (stryMutAct_9fa48("2265") ? b.echo !== true : stryMutAct_9fa48("2264") ? false : (stryCov_9fa48("2264", "2265"), b.echo === (stryMutAct_9fa48("2266") ? false : (stryCov_9fa48("2266"), true)))) || (stryMutAct_9fa48("2268") ? b.best_of != null || b.best_of !== 1 : stryMutAct_9fa48("2267") ? false : (stryCov_9fa48("2267", "2268"), (stryMutAct_9fa48("2270") ? b.best_of == null : stryMutAct_9fa48("2269") ? true : (stryCov_9fa48("2269", "2270"), b.best_of != null)) && (stryMutAct_9fa48("2272") ? b.best_of === 1 : stryMutAct_9fa48("2271") ? true : (stryCov_9fa48("2271", "2272"), b.best_of !== 1)))))) || (stryMutAct_9fa48("2274") ? b.suffix == null : stryMutAct_9fa48("2273") ? false : (stryCov_9fa48("2273", "2274"), b.suffix != null)))) return undefined;
      }
    }
    const asked = (stryMutAct_9fa48("2277") ? endpoint !== "chat" : stryMutAct_9fa48("2276") ? false : stryMutAct_9fa48("2275") ? true : (stryCov_9fa48("2275", "2276", "2277"), endpoint === (stryMutAct_9fa48("2278") ? "" : (stryCov_9fa48("2278"), "chat")))) ? stryMutAct_9fa48("2279") ? b.max_completion_tokens && b.max_tokens : (stryCov_9fa48("2279"), b.max_completion_tokens ?? b.max_tokens) : b.max_tokens;
    return stryMutAct_9fa48("2280") ? {} : (stryCov_9fa48("2280"), {
      endpoint: (stryMutAct_9fa48("2283") ? endpoint !== "chat" : stryMutAct_9fa48("2282") ? false : stryMutAct_9fa48("2281") ? true : (stryCov_9fa48("2281", "2282", "2283"), endpoint === (stryMutAct_9fa48("2284") ? "" : (stryCov_9fa48("2284"), "chat")))) ? stryMutAct_9fa48("2285") ? "" : (stryCov_9fa48("2285"), "chat") : stryMutAct_9fa48("2286") ? "" : (stryCov_9fa48("2286"), "completion"),
      body: b,
      raw: bytes,
      maxTokens: (stryMutAct_9fa48("2289") ? typeof asked !== "number" : stryMutAct_9fa48("2288") ? false : stryMutAct_9fa48("2287") ? true : (stryCov_9fa48("2287", "2288", "2289"), typeof asked === (stryMutAct_9fa48("2290") ? "" : (stryCov_9fa48("2290"), "number")))) ? asked : undefined
    });
  }
}

/** The body that continues `plan`'s request after `text` (`tokens` tokens) was sent; undefined when nothing is left to generate. */
export function continuationBody(plan: MigrationPlan, text: string, tokens: number): string | undefined {
  if (stryMutAct_9fa48("2291")) {
    {}
  } else {
    stryCov_9fa48("2291");
    const b = plan.body;
    // The client's bytes, with the changed members added after them: the last of duplicate
    // names wins in Python's json (vLLM, SGLang) and in JSON.parse (withLastMember), and
    // every other member (a seed beyond 2^53, escapes, key order) stays as sent.
    const changes: [string, unknown][] = stryMutAct_9fa48("2292") ? ["Stryker was here"] : (stryCov_9fa48("2292"), []);
    if (stryMutAct_9fa48("2295") ? plan.maxTokens === undefined : stryMutAct_9fa48("2294") ? false : stryMutAct_9fa48("2293") ? true : (stryCov_9fa48("2293", "2294", "2295"), plan.maxTokens !== undefined)) {
      if (stryMutAct_9fa48("2296")) {
        {}
      } else {
        stryCov_9fa48("2296");
        const left = stryMutAct_9fa48("2297") ? plan.maxTokens + tokens : (stryCov_9fa48("2297"), plan.maxTokens - tokens);
        if (stryMutAct_9fa48("2301") ? left > 0 : stryMutAct_9fa48("2300") ? left < 0 : stryMutAct_9fa48("2299") ? false : stryMutAct_9fa48("2298") ? true : (stryCov_9fa48("2298", "2299", "2300", "2301"), left <= 0)) return undefined;
        changes.push(stryMutAct_9fa48("2303") ? [] : (stryCov_9fa48("2303"), [(stryMutAct_9fa48("2306") ? plan.endpoint === "chat" || b.max_completion_tokens != null : stryMutAct_9fa48("2305") ? false : stryMutAct_9fa48("2304") ? true : (stryCov_9fa48("2304", "2305", "2306"), (stryMutAct_9fa48("2308") ? plan.endpoint !== "chat" : stryMutAct_9fa48("2307") ? true : (stryCov_9fa48("2307", "2308"), plan.endpoint === (stryMutAct_9fa48("2309") ? "" : (stryCov_9fa48("2309"), "chat")))) && (stryMutAct_9fa48("2311") ? b.max_completion_tokens == null : stryMutAct_9fa48("2310") ? true : (stryCov_9fa48("2310", "2311"), b.max_completion_tokens != null)))) ? stryMutAct_9fa48("2312") ? "" : (stryCov_9fa48("2312"), "max_completion_tokens") : stryMutAct_9fa48("2313") ? "" : (stryCov_9fa48("2313"), "max_tokens"), left]));
      }
    }
    if (stryMutAct_9fa48("2316") ? plan.endpoint !== "chat" : stryMutAct_9fa48("2315") ? false : stryMutAct_9fa48("2314") ? true : (stryCov_9fa48("2314", "2315", "2316"), plan.endpoint === (stryMutAct_9fa48("2317") ? "" : (stryCov_9fa48("2317"), "chat")))) {
      if (stryMutAct_9fa48("2318")) {
        {}
      } else {
        stryCov_9fa48("2318");
        if (stryMutAct_9fa48("2319")) {
          ;
        } else {
          stryCov_9fa48("2319");
          changes.push(stryMutAct_9fa48("2320") ? [] : (stryCov_9fa48("2320"), [stryMutAct_9fa48("2321") ? "" : (stryCov_9fa48("2321"), "messages"), stryMutAct_9fa48("2322") ? [] : (stryCov_9fa48("2322"), [...(b.messages as unknown[]), stryMutAct_9fa48("2323") ? {} : (stryCov_9fa48("2323"), {
            role: stryMutAct_9fa48("2324") ? "" : (stryCov_9fa48("2324"), "assistant"),
            content: text
          })])]), stryMutAct_9fa48("2325") ? [] : (stryCov_9fa48("2325"), [stryMutAct_9fa48("2326") ? "" : (stryCov_9fa48("2326"), "continue_final_message"), stryMutAct_9fa48("2327") ? false : (stryCov_9fa48("2327"), true)]), stryMutAct_9fa48("2328") ? [] : (stryCov_9fa48("2328"), [stryMutAct_9fa48("2329") ? "" : (stryCov_9fa48("2329"), "add_generation_prompt"), stryMutAct_9fa48("2330") ? true : (stryCov_9fa48("2330"), false)]));
        }
      }
    } else {
      if (stryMutAct_9fa48("2331")) {
        {}
      } else {
        stryCov_9fa48("2331");
        if (stryMutAct_9fa48("2332")) {
          ;
        } else {
          stryCov_9fa48("2332");
          changes.push(stryMutAct_9fa48("2333") ? [] : (stryCov_9fa48("2333"), [stryMutAct_9fa48("2334") ? "" : (stryCov_9fa48("2334"), "prompt"), stryMutAct_9fa48("2335") ? (typeof b.prompt === "string" ? b.prompt : (b.prompt as string[])[0]!) - text : (stryCov_9fa48("2335"), ((stryMutAct_9fa48("2338") ? typeof b.prompt !== "string" : stryMutAct_9fa48("2337") ? false : stryMutAct_9fa48("2336") ? true : (stryCov_9fa48("2336", "2337", "2338"), typeof b.prompt === (stryMutAct_9fa48("2339") ? "" : (stryCov_9fa48("2339"), "string")))) ? b.prompt : (b.prompt as string[])[0]!) + text)]));
        }
      }
    }
    let body: ArrayBuffer | null = plan.raw;
    for (const [name, value] of changes) body = stryMutAct_9fa48("2342") ? body || withLastMember(body, name, JSON.stringify(value)) : stryMutAct_9fa48("2341") ? false : stryMutAct_9fa48("2340") ? true : (stryCov_9fa48("2340", "2341", "2342"), body && withLastMember(body, name, JSON.stringify(value)));
    return body ? new TextDecoder().decode(body) : undefined;
  }
}

/**
 * Why a stream left its replica: an error event or a lost connection (`error`; a
 * replica's own `stream_handover` among them), nothing for migrationStallMs (`stalled`),
 * or its replica's announced drain deadline near (`drain_deadline`).
 */
export type MigrationReason = "error" | "stalled" | "drain_deadline";

/** Runs one continuation through the request path; resolves with the answer (any status). */
export type Continue = (body: ArrayBuffer, attempt: number) => Promise<Response>;
export interface MigrateOptions {
  plan: MigrationPlan;
  limit: number;
  /** A stream that sends nothing for this long has failed (its replica hangs); 0: no limit. */
  stallMs: number;
  requestId: string;
  /** Keeps the isolate working on the stream (ctx.waitUntil). */
  background: (p: Promise<unknown>) => void;
  /** Marks a failed replica down in this isolate's view. */
  markDown: (replicaId: string) => void;
  /**
   * When a stream must have left `replicaId`, epoch ms: its drain deadline (the replica
   * or its agent announced when it stops serving) less HANDOVER_LEAD_MS, as this
   * isolate's view has it; undefined while it announced none. A stream still there
   * then is continued elsewhere, as on a failure.
   */
  leaveBy?: (replicaId: string) => number | undefined;
  continueOn: Continue;
  /** Each migration, for logs and metrics, and why the stream left its replica. */
  onMigration?: (m: {
    from: string | null;
    tokens: number;
    attempt: number;
    ok: boolean;
    reason: MigrationReason;
  }) => void;
}
interface Event {
  /** The event's whole text, "data: ...\n\n" included. */
  raw: string;
  data: string | undefined;
}

/** Splits SSE text into whole events; returns them and the rest (an incomplete event). */
function splitEvents(buffer: string): {
  events: Event[];
  rest: string;
} {
  if (stryMutAct_9fa48("2343")) {
    {}
  } else {
    stryCov_9fa48("2343");
    const events: Event[] = stryMutAct_9fa48("2344") ? ["Stryker was here"] : (stryCov_9fa48("2344"), []);
    let at = 0;
    if (stryMutAct_9fa48("2345")) {
      for (; false;) {
        const end = buffer.indexOf("\n\n", at);
        if (end < 0) break;
        const raw = buffer.slice(at, end + 2);
        at = end + 2;
        let data: string | undefined;
        for (const line of raw.split("\n")) if (line.startsWith("data:")) data = (data === undefined ? "" : `${data}\n`) + line.slice(5).trimStart();
        events.push({
          raw,
          data
        });
      }
    } else {
      stryCov_9fa48("2345");
      for (;;) {
        if (stryMutAct_9fa48("2346")) {
          {}
        } else {
          stryCov_9fa48("2346");
          const end = buffer.indexOf(stryMutAct_9fa48("2347") ? "" : (stryCov_9fa48("2347"), "\n\n"), at);
          if (stryMutAct_9fa48("2351") ? end >= 0 : stryMutAct_9fa48("2350") ? end <= 0 : stryMutAct_9fa48("2349") ? false : stryMutAct_9fa48("2348") ? true : (stryCov_9fa48("2348", "2349", "2350", "2351"), end < 0)) break;
          const raw = stryMutAct_9fa48("2352") ? buffer : (stryCov_9fa48("2352"), buffer.slice(at, stryMutAct_9fa48("2353") ? end - 2 : (stryCov_9fa48("2353"), end + 2)));
          at = stryMutAct_9fa48("2354") ? end - 2 : (stryCov_9fa48("2354"), end + 2);
          let data: string | undefined;
          for (const line of raw.split(stryMutAct_9fa48("2355") ? "" : (stryCov_9fa48("2355"), "\n"))) if (stryMutAct_9fa48("2358") ? line.endsWith("data:") : stryMutAct_9fa48("2357") ? false : stryMutAct_9fa48("2356") ? true : (stryCov_9fa48("2356", "2357", "2358"), line.startsWith(stryMutAct_9fa48("2359") ? "" : (stryCov_9fa48("2359"), "data:")))) data = stryMutAct_9fa48("2360") ? (data === undefined ? "" : `${data}\n`) - line.slice(5).trimStart() : (stryCov_9fa48("2360"), ((stryMutAct_9fa48("2363") ? data !== undefined : stryMutAct_9fa48("2362") ? false : stryMutAct_9fa48("2361") ? true : (stryCov_9fa48("2361", "2362", "2363"), data === undefined)) ? stryMutAct_9fa48("2364") ? "Stryker was here!" : (stryCov_9fa48("2364"), "") : stryMutAct_9fa48("2365") ? `` : (stryCov_9fa48("2365"), `${data}\n`)) + (stryMutAct_9fa48("2367") ? line.trimStart() : stryMutAct_9fa48("2366") ? line.slice(5).trimEnd() : (stryCov_9fa48("2366", "2367"), line.slice(5).trimStart())));
          events.push(stryMutAct_9fa48("2369") ? {} : (stryCov_9fa48("2369"), {
            raw,
            data
          }));
        }
      }
    }
    return stryMutAct_9fa48("2370") ? {} : (stryCov_9fa48("2370"), {
      events,
      rest: stryMutAct_9fa48("2371") ? buffer : (stryCov_9fa48("2371"), buffer.slice(at))
    });
  }
}

/** The reader's next chunk, or "stalled" when none comes within `ms` (0: wait as long as it takes). */
async function readWithin<T>(reader: ReadableStreamDefaultReader<T>, ms: number): Promise<ReadableStreamReadResult<T> | "stalled"> {
  if (stryMutAct_9fa48("2372")) {
    {}
  } else {
    stryCov_9fa48("2372");
    if (stryMutAct_9fa48("2376") ? ms > 0 : stryMutAct_9fa48("2375") ? ms < 0 : stryMutAct_9fa48("2374") ? false : stryMutAct_9fa48("2373") ? true : (stryCov_9fa48("2373", "2374", "2375", "2376"), ms <= 0)) return reader.read();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const stalled = new Promise<"stalled">(stryMutAct_9fa48("2377") ? () => undefined : (stryCov_9fa48("2377"), resolve => timer = setTimeout(resolve, ms, stryMutAct_9fa48("2378") ? "" : (stryCov_9fa48("2378"), "stalled"))));
    try {
      if (stryMutAct_9fa48("2379")) {
        {}
      } else {
        stryCov_9fa48("2379");
        return await Promise.race(stryMutAct_9fa48("2380") ? [] : (stryCov_9fa48("2380"), [reader.read(), stalled]));
      }
    } finally {
      if (stryMutAct_9fa48("2381")) {
        {}
      } else {
        stryCov_9fa48("2381");
        if (stryMutAct_9fa48("2384") ? timer === undefined : stryMutAct_9fa48("2383") ? false : stryMutAct_9fa48("2382") ? true : (stryCov_9fa48("2382", "2383", "2384"), timer !== undefined)) if (stryMutAct_9fa48("2385")) {
          ;
        } else {
          stryCov_9fa48("2385");
          clearTimeout(timer);
        }
      }
    }
  }
}
interface Usage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
}

/**
 * The client's stream of a migratable answer: `first` passed on event by event, and,
 * when its replica fails, continued on others (at most `limit` times).
 */
export function migratingStream(first: Response, o: MigrateOptions): Response {
  if (stryMutAct_9fa48("2386")) {
    {}
  } else {
    stryCov_9fa48("2386");
    const encoder = new TextEncoder();
    const {
      readable,
      writable
    } = new TransformStream<Uint8Array, Uint8Array>();
    const writer = writable.getWriter();
    let text = stryMutAct_9fa48("2387") ? "Stryker was here!" : (stryCov_9fa48("2387"), "");
    let tokens = 0;
    let id: unknown;
    let created: unknown;
    let finished = stryMutAct_9fa48("2388") ? true : (stryCov_9fa48("2388"), false);
    let toolCalls = stryMutAct_9fa48("2389") ? true : (stryCov_9fa48("2389"), false);
    /** Why the last part failed. */
    let reason: MigrationReason = stryMutAct_9fa48("2390") ? "" : (stryCov_9fa48("2390"), "error");

    /** Passes one upstream answer (from replica `from`) on; resolves with how it ended. */
    const pass = async (res: Response, part: number, from: string | null): Promise<"done" | "failed" | "client_gone"> => {
      if (stryMutAct_9fa48("2391")) {
        {}
      } else {
        stryCov_9fa48("2391");
        const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
        let buffer = stryMutAct_9fa48("2392") ? "Stryker was here!" : (stryCov_9fa48("2392"), "");
        try {
          if (stryMutAct_9fa48("2393")) {
            {}
          } else {
            stryCov_9fa48("2393");
            if (stryMutAct_9fa48("2394")) {
              for (; false;) {
                // A replica draining with a deadline: the stream leaves it in time, between two events.
                const leaveIn = from === null || !o.leaveBy ? Infinity : (o.leaveBy(from) ?? Infinity) - Date.now();
                reason = "error";
                if (leaveIn <= 0) {
                  reason = "drain_deadline";
                  return "failed";
                }
                const limit = o.stallMs > 0 ? Math.min(o.stallMs, leaveIn) : leaveIn;
                const read = await readWithin(reader, limit === Infinity ? 0 : Math.max(1, limit));
                if (read === "stalled") {
                  reason = limit < leaveIn ? "stalled" : "drain_deadline";
                  return "failed";
                }
                const {
                  done,
                  value
                } = read;
                if (done) return finished ? "done" : "failed";
                buffer += value;
                const {
                  events,
                  rest
                } = splitEvents(buffer);
                buffer = rest;
                for (const e of events) {
                  const out = rewrite(e, part);
                  if (out === "failed") return "failed";
                  if (out === undefined) continue;
                  try {
                    await writer.write(encoder.encode(out));
                  } catch {
                    return "client_gone";
                  }
                }
              }
            } else {
              stryCov_9fa48("2394");
              for (;;) {
                if (stryMutAct_9fa48("2395")) {
                  {}
                } else {
                  stryCov_9fa48("2395");
                  // A replica draining with a deadline: the stream leaves it in time, between two events.
                  const leaveIn = (stryMutAct_9fa48("2398") ? from === null && !o.leaveBy : stryMutAct_9fa48("2397") ? false : stryMutAct_9fa48("2396") ? true : (stryCov_9fa48("2396", "2397", "2398"), (stryMutAct_9fa48("2400") ? from !== null : stryMutAct_9fa48("2399") ? false : (stryCov_9fa48("2399", "2400"), from === null)) || (stryMutAct_9fa48("2401") ? o.leaveBy : (stryCov_9fa48("2401"), !o.leaveBy)))) ? Infinity : stryMutAct_9fa48("2402") ? (o.leaveBy(from) ?? Infinity) + Date.now() : (stryCov_9fa48("2402"), (stryMutAct_9fa48("2403") ? o.leaveBy(from) && Infinity : (stryCov_9fa48("2403"), o.leaveBy(from) ?? Infinity)) - Date.now());
                  reason = stryMutAct_9fa48("2404") ? "" : (stryCov_9fa48("2404"), "error");
                  if (stryMutAct_9fa48("2408") ? leaveIn > 0 : stryMutAct_9fa48("2407") ? leaveIn < 0 : stryMutAct_9fa48("2406") ? false : stryMutAct_9fa48("2405") ? true : (stryCov_9fa48("2405", "2406", "2407", "2408"), leaveIn <= 0)) {
                    if (stryMutAct_9fa48("2409")) {
                      {}
                    } else {
                      stryCov_9fa48("2409");
                      reason = stryMutAct_9fa48("2410") ? "" : (stryCov_9fa48("2410"), "drain_deadline");
                      return stryMutAct_9fa48("2411") ? "" : (stryCov_9fa48("2411"), "failed");
                    }
                  }
                  const limit = (stryMutAct_9fa48("2415") ? o.stallMs <= 0 : stryMutAct_9fa48("2414") ? o.stallMs >= 0 : stryMutAct_9fa48("2413") ? false : stryMutAct_9fa48("2412") ? true : (stryCov_9fa48("2412", "2413", "2414", "2415"), o.stallMs > 0)) ? stryMutAct_9fa48("2416") ? Math.max(o.stallMs, leaveIn) : (stryCov_9fa48("2416"), Math.min(o.stallMs, leaveIn)) : leaveIn;
                  const read = await readWithin(reader, (stryMutAct_9fa48("2419") ? limit !== Infinity : stryMutAct_9fa48("2418") ? false : stryMutAct_9fa48("2417") ? true : (stryCov_9fa48("2417", "2418", "2419"), limit === Infinity)) ? 0 : stryMutAct_9fa48("2420") ? Math.min(1, limit) : (stryCov_9fa48("2420"), Math.max(1, limit)));
                  if (stryMutAct_9fa48("2423") ? read !== "stalled" : stryMutAct_9fa48("2422") ? false : stryMutAct_9fa48("2421") ? true : (stryCov_9fa48("2421", "2422", "2423"), read === (stryMutAct_9fa48("2424") ? "" : (stryCov_9fa48("2424"), "stalled")))) {
                    if (stryMutAct_9fa48("2425")) {
                      {}
                    } else {
                      stryCov_9fa48("2425");
                      reason = (stryMutAct_9fa48("2429") ? limit >= leaveIn : stryMutAct_9fa48("2428") ? limit <= leaveIn : stryMutAct_9fa48("2427") ? false : stryMutAct_9fa48("2426") ? true : (stryCov_9fa48("2426", "2427", "2428", "2429"), limit < leaveIn)) ? stryMutAct_9fa48("2430") ? "" : (stryCov_9fa48("2430"), "stalled") : stryMutAct_9fa48("2431") ? "" : (stryCov_9fa48("2431"), "drain_deadline");
                      return stryMutAct_9fa48("2432") ? "" : (stryCov_9fa48("2432"), "failed");
                    }
                  }
                  const {
                    done,
                    value
                  } = read;
                  if (stryMutAct_9fa48("2434") ? false : stryMutAct_9fa48("2433") ? true : (stryCov_9fa48("2433", "2434"), done)) return finished ? stryMutAct_9fa48("2435") ? "" : (stryCov_9fa48("2435"), "done") : stryMutAct_9fa48("2436") ? "" : (stryCov_9fa48("2436"), "failed");
                  stryMutAct_9fa48("2437") ? buffer -= value : (stryCov_9fa48("2437"), buffer += value);
                  const {
                    events,
                    rest
                  } = splitEvents(buffer);
                  buffer = rest;
                  for (const e of events) {
                    if (stryMutAct_9fa48("2438")) {
                      {}
                    } else {
                      stryCov_9fa48("2438");
                      const out = rewrite(e, part);
                      if (stryMutAct_9fa48("2441") ? out !== "failed" : stryMutAct_9fa48("2440") ? false : stryMutAct_9fa48("2439") ? true : (stryCov_9fa48("2439", "2440", "2441"), out === (stryMutAct_9fa48("2442") ? "" : (stryCov_9fa48("2442"), "failed")))) return stryMutAct_9fa48("2443") ? "" : (stryCov_9fa48("2443"), "failed");
                      if (stryMutAct_9fa48("2446") ? out !== undefined : stryMutAct_9fa48("2445") ? false : stryMutAct_9fa48("2444") ? true : (stryCov_9fa48("2444", "2445", "2446"), out === undefined)) continue;
                      try {
                        if (stryMutAct_9fa48("2447")) {
                          {}
                        } else {
                          stryCov_9fa48("2447");
                          await writer.write(encoder.encode(out));
                        }
                      } catch {
                        if (stryMutAct_9fa48("2448")) {
                          {}
                        } else {
                          stryCov_9fa48("2448");
                          return stryMutAct_9fa48("2449") ? "" : (stryCov_9fa48("2449"), "client_gone");
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        } catch {
          if (stryMutAct_9fa48("2450")) {
            {}
          } else {
            stryCov_9fa48("2450");
            return stryMutAct_9fa48("2451") ? "" : (stryCov_9fa48("2451"), "failed");
          }
        } finally {
          if (stryMutAct_9fa48("2452")) {
            {}
          } else {
            stryCov_9fa48("2452");
            if (stryMutAct_9fa48("2453")) {
              ;
            } else {
              stryCov_9fa48("2453");
              reader.cancel().catch(() => undefined);
            }
          }
        }
      }
    };

    /** An upstream event as the client gets it; undefined to drop it; "failed" for an error event. */
    const rewrite = (e: Event, part: number): string | undefined | "failed" => {
      if (stryMutAct_9fa48("2454")) {
        {}
      } else {
        stryCov_9fa48("2454");
        if (stryMutAct_9fa48("2457") ? e.data !== undefined : stryMutAct_9fa48("2456") ? false : stryMutAct_9fa48("2455") ? true : (stryCov_9fa48("2455", "2456", "2457"), e.data === undefined)) return e.raw;
        if (stryMutAct_9fa48("2460") ? e.data !== "[DONE]" : stryMutAct_9fa48("2459") ? false : stryMutAct_9fa48("2458") ? true : (stryCov_9fa48("2458", "2459", "2460"), e.data === (stryMutAct_9fa48("2461") ? "" : (stryCov_9fa48("2461"), "[DONE]")))) {
          if (stryMutAct_9fa48("2462")) {
            {}
          } else {
            stryCov_9fa48("2462");
            finished = stryMutAct_9fa48("2463") ? false : (stryCov_9fa48("2463"), true);
            return e.raw;
          }
        }
        let chunk: Record<string, unknown>;
        try {
          if (stryMutAct_9fa48("2464")) {
            {}
          } else {
            stryCov_9fa48("2464");
            chunk = JSON.parse(e.data) as Record<string, unknown>;
          }
        } catch {
          if (stryMutAct_9fa48("2465")) {
            {}
          } else {
            stryCov_9fa48("2465");
            return e.raw;
          }
        }
        if (stryMutAct_9fa48("2468") ? chunk.error === undefined : stryMutAct_9fa48("2467") ? false : stryMutAct_9fa48("2466") ? true : (stryCov_9fa48("2466", "2467", "2468"), chunk.error !== undefined)) return stryMutAct_9fa48("2469") ? "" : (stryCov_9fa48("2469"), "failed");
        if (stryMutAct_9fa48("2472") ? part !== 0 : stryMutAct_9fa48("2471") ? false : stryMutAct_9fa48("2470") ? true : (stryCov_9fa48("2470", "2471", "2472"), part === 0)) {
          if (stryMutAct_9fa48("2473")) {
            {}
          } else {
            stryCov_9fa48("2473");
            stryMutAct_9fa48("2474") ? id &&= chunk.id : (stryCov_9fa48("2474"), id ??= chunk.id);
            stryMutAct_9fa48("2475") ? created &&= chunk.created : (stryCov_9fa48("2475"), created ??= chunk.created);
          }
        } else {
          if (stryMutAct_9fa48("2476")) {
            {}
          } else {
            stryCov_9fa48("2476");
            chunk.id = id;
            chunk.created = created;
          }
        }
        const choices = Array.isArray(chunk.choices) ? chunk.choices as Record<string, unknown>[] : stryMutAct_9fa48("2477") ? ["Stryker was here"] : (stryCov_9fa48("2477"), []);
        const choice = choices[0];
        if (stryMutAct_9fa48("2479") ? false : stryMutAct_9fa48("2478") ? true : (stryCov_9fa48("2478", "2479"), choice)) {
          if (stryMutAct_9fa48("2480")) {
            {}
          } else {
            stryCov_9fa48("2480");
            const delta = choice.delta as Record<string, unknown> | undefined;
            if (stryMutAct_9fa48("2483") ? delta?.tool_calls === undefined : stryMutAct_9fa48("2482") ? false : stryMutAct_9fa48("2481") ? true : (stryCov_9fa48("2481", "2482", "2483"), (stryMutAct_9fa48("2484") ? delta.tool_calls : (stryCov_9fa48("2484"), delta?.tool_calls)) !== undefined)) toolCalls = stryMutAct_9fa48("2485") ? false : (stryCov_9fa48("2485"), true);
            const piece = (stryMutAct_9fa48("2488") ? o.plan.endpoint !== "chat" : stryMutAct_9fa48("2487") ? false : stryMutAct_9fa48("2486") ? true : (stryCov_9fa48("2486", "2487", "2488"), o.plan.endpoint === (stryMutAct_9fa48("2489") ? "" : (stryCov_9fa48("2489"), "chat")))) ? stryMutAct_9fa48("2490") ? delta.content : (stryCov_9fa48("2490"), delta?.content) : choice.text;
            // The continuation's opening event (role, no text) is the client's already.
            if (stryMutAct_9fa48("2493") ? part > 0 && delta?.role !== undefined || piece === "" || piece == null : stryMutAct_9fa48("2492") ? false : stryMutAct_9fa48("2491") ? true : (stryCov_9fa48("2491", "2492", "2493"), (stryMutAct_9fa48("2495") ? part > 0 || delta?.role !== undefined : stryMutAct_9fa48("2494") ? true : (stryCov_9fa48("2494", "2495"), (stryMutAct_9fa48("2498") ? part <= 0 : stryMutAct_9fa48("2497") ? part >= 0 : stryMutAct_9fa48("2496") ? true : (stryCov_9fa48("2496", "2497", "2498"), part > 0)) && (stryMutAct_9fa48("2500") ? delta?.role === undefined : stryMutAct_9fa48("2499") ? true : (stryCov_9fa48("2499", "2500"), (stryMutAct_9fa48("2501") ? delta.role : (stryCov_9fa48("2501"), delta?.role)) !== undefined)))) && (stryMutAct_9fa48("2503") ? piece === "" && piece == null : stryMutAct_9fa48("2502") ? true : (stryCov_9fa48("2502", "2503"), (stryMutAct_9fa48("2505") ? piece !== "" : stryMutAct_9fa48("2504") ? false : (stryCov_9fa48("2504", "2505"), piece === (stryMutAct_9fa48("2506") ? "Stryker was here!" : (stryCov_9fa48("2506"), "")))) || (stryMutAct_9fa48("2508") ? piece != null : stryMutAct_9fa48("2507") ? false : (stryCov_9fa48("2507", "2508"), piece == null)))))) return undefined;
            if (stryMutAct_9fa48("2511") ? typeof piece === "string" || piece !== "" : stryMutAct_9fa48("2510") ? false : stryMutAct_9fa48("2509") ? true : (stryCov_9fa48("2509", "2510", "2511"), (stryMutAct_9fa48("2513") ? typeof piece !== "string" : stryMutAct_9fa48("2512") ? true : (stryCov_9fa48("2512", "2513"), typeof piece === (stryMutAct_9fa48("2514") ? "" : (stryCov_9fa48("2514"), "string")))) && (stryMutAct_9fa48("2516") ? piece === "" : stryMutAct_9fa48("2515") ? true : (stryCov_9fa48("2515", "2516"), piece !== (stryMutAct_9fa48("2517") ? "Stryker was here!" : (stryCov_9fa48("2517"), "")))))) {
              if (stryMutAct_9fa48("2518")) {
                {}
              } else {
                stryCov_9fa48("2518");
                stryMutAct_9fa48("2519") ? text -= piece : (stryCov_9fa48("2519"), text += piece);
                stryMutAct_9fa48("2520") ? tokens-- : (stryCov_9fa48("2520"), tokens++);
              }
            }
          }
        }
        const usage = chunk.usage as Usage | null | undefined;
        if (stryMutAct_9fa48("2523") ? part > 0 || usage : stryMutAct_9fa48("2522") ? false : stryMutAct_9fa48("2521") ? true : (stryCov_9fa48("2521", "2522", "2523"), (stryMutAct_9fa48("2526") ? part <= 0 : stryMutAct_9fa48("2525") ? part >= 0 : stryMutAct_9fa48("2524") ? true : (stryCov_9fa48("2524", "2525", "2526"), part > 0)) && usage)) {
          if (stryMutAct_9fa48("2527")) {
            {}
          } else {
            stryCov_9fa48("2527");
            // One answer's usage: the client's prompt, and the tokens of every part.
            const prompt = stryMutAct_9fa48("2528") ? Math.min(0, usage.prompt_tokens - tokensBefore[part]!) : (stryCov_9fa48("2528"), Math.max(0, stryMutAct_9fa48("2529") ? usage.prompt_tokens + tokensBefore[part]! : (stryCov_9fa48("2529"), usage.prompt_tokens - tokensBefore[part]!)));
            const completion = stryMutAct_9fa48("2530") ? usage.completion_tokens - tokensBefore[part]! : (stryCov_9fa48("2530"), usage.completion_tokens + tokensBefore[part]!);
            chunk.usage = stryMutAct_9fa48("2531") ? {} : (stryCov_9fa48("2531"), {
              ...usage,
              prompt_tokens: prompt,
              completion_tokens: completion,
              total_tokens: stryMutAct_9fa48("2532") ? prompt - completion : (stryCov_9fa48("2532"), prompt + completion)
            });
          }
        }
        return (stryMutAct_9fa48("2536") ? part <= 0 : stryMutAct_9fa48("2535") ? part >= 0 : stryMutAct_9fa48("2534") ? false : stryMutAct_9fa48("2533") ? true : (stryCov_9fa48("2533", "2534", "2535", "2536"), part > 0)) ? stryMutAct_9fa48("2537") ? `` : (stryCov_9fa48("2537"), `data: ${JSON.stringify(chunk)}\n\n`) : e.raw;
      }
    };

    /** Tokens sent before each part began (the continuation's prompt carries them). */
    const tokensBefore: number[] = stryMutAct_9fa48("2538") ? [] : (stryCov_9fa48("2538"), [0]);
    const failureEvent = stryMutAct_9fa48("2539") ? () => undefined : (stryCov_9fa48("2539"), (() => {
      const failureEvent = () => stryMutAct_9fa48("2540") ? `` : (stryCov_9fa48("2540"), `data: ${JSON.stringify(errorBody(stryMutAct_9fa48("2541") ? "" : (stryCov_9fa48("2541"), "upstream_failed"), stryMutAct_9fa48("2542") ? "" : (stryCov_9fa48("2542"), "the replica failed mid-stream and the answer could not be continued"), stryMutAct_9fa48("2543") ? {} : (stryCov_9fa48("2543"), {
        requestId: o.requestId
      })))}\n\n`);
      return failureEvent;
    })());

    /** The last events of an answer that reached max_tokens (its usage, lost with the replica, is not known here). */
    const lengthEnding = () => {
      if (stryMutAct_9fa48("2544")) {
        {}
      } else {
        stryCov_9fa48("2544");
        const choice = (stryMutAct_9fa48("2547") ? o.plan.endpoint !== "chat" : stryMutAct_9fa48("2546") ? false : stryMutAct_9fa48("2545") ? true : (stryCov_9fa48("2545", "2546", "2547"), o.plan.endpoint === (stryMutAct_9fa48("2548") ? "" : (stryCov_9fa48("2548"), "chat")))) ? stryMutAct_9fa48("2549") ? {} : (stryCov_9fa48("2549"), {
          index: 0,
          delta: {},
          logprobs: null,
          finish_reason: stryMutAct_9fa48("2550") ? "" : (stryCov_9fa48("2550"), "length")
        }) : stryMutAct_9fa48("2551") ? {} : (stryCov_9fa48("2551"), {
          index: 0,
          text: stryMutAct_9fa48("2552") ? "Stryker was here!" : (stryCov_9fa48("2552"), ""),
          logprobs: null,
          finish_reason: stryMutAct_9fa48("2553") ? "" : (stryCov_9fa48("2553"), "length")
        });
        const object = (stryMutAct_9fa48("2556") ? o.plan.endpoint !== "chat" : stryMutAct_9fa48("2555") ? false : stryMutAct_9fa48("2554") ? true : (stryCov_9fa48("2554", "2555", "2556"), o.plan.endpoint === (stryMutAct_9fa48("2557") ? "" : (stryCov_9fa48("2557"), "chat")))) ? stryMutAct_9fa48("2558") ? "" : (stryCov_9fa48("2558"), "chat.completion.chunk") : stryMutAct_9fa48("2559") ? "" : (stryCov_9fa48("2559"), "text_completion");
        return stryMutAct_9fa48("2560") ? `` : (stryCov_9fa48("2560"), `data: ${JSON.stringify(stryMutAct_9fa48("2561") ? {} : (stryCov_9fa48("2561"), {
          id,
          object,
          created,
          model: o.plan.body.model,
          choices: stryMutAct_9fa48("2562") ? [] : (stryCov_9fa48("2562"), [choice])
        }))}\n\ndata: [DONE]\n\n`);
      }
    };
    const run = async () => {
      if (stryMutAct_9fa48("2563")) {
        {}
      } else {
        stryCov_9fa48("2563");
        let res = first;
        let from = first.headers.get(Header.replica);
        if (stryMutAct_9fa48("2564")) {
          for (let part = 0; false; part++) {
            const ended = await pass(res, part, from);
            if (ended !== "failed") break;
            const body = part < o.limit && !toolCalls ? continuationBody(o.plan, text, tokens) : undefined;
            if (from !== null) o.markDown(from);
            if (body === undefined) {
              // Every token asked was sent and only the end was lost: the answer ends as the engine would have ended it.
              const complete = part < o.limit && !toolCalls && o.plan.maxTokens !== undefined && tokens >= o.plan.maxTokens;
              await writer.write(encoder.encode(complete ? lengthEnding() : failureEvent())).catch(() => undefined);
              break;
            }
            tokensBefore[part + 1] = tokens;
            const next = await o.continueOn(encoder.encode(body).buffer as ArrayBuffer, part + 1).catch(() => undefined);
            const ok = next !== undefined && next.status === 200 && next.body !== null;
            o.onMigration?.({
              from,
              tokens,
              attempt: part + 1,
              ok,
              reason
            });
            if (!ok) {
              await next?.body?.cancel().catch(() => undefined);
              await writer.write(encoder.encode(failureEvent())).catch(() => undefined);
              break;
            }
            res = next;
            from = next.headers.get(Header.replica);
          }
        } else {
          stryCov_9fa48("2564");
          for (let part = 0;; stryMutAct_9fa48("2565") ? part-- : (stryCov_9fa48("2565"), part++)) {
            if (stryMutAct_9fa48("2566")) {
              {}
            } else {
              stryCov_9fa48("2566");
              const ended = await pass(res, part, from);
              if (stryMutAct_9fa48("2569") ? ended === "failed" : stryMutAct_9fa48("2568") ? false : stryMutAct_9fa48("2567") ? true : (stryCov_9fa48("2567", "2568", "2569"), ended !== (stryMutAct_9fa48("2570") ? "" : (stryCov_9fa48("2570"), "failed")))) break;
              const body = (stryMutAct_9fa48("2573") ? part < o.limit || !toolCalls : stryMutAct_9fa48("2572") ? false : stryMutAct_9fa48("2571") ? true : (stryCov_9fa48("2571", "2572", "2573"), (stryMutAct_9fa48("2576") ? part >= o.limit : stryMutAct_9fa48("2575") ? part <= o.limit : stryMutAct_9fa48("2574") ? true : (stryCov_9fa48("2574", "2575", "2576"), part < o.limit)) && (stryMutAct_9fa48("2577") ? toolCalls : (stryCov_9fa48("2577"), !toolCalls)))) ? continuationBody(o.plan, text, tokens) : undefined;
              if (stryMutAct_9fa48("2580") ? from === null : stryMutAct_9fa48("2579") ? false : stryMutAct_9fa48("2578") ? true : (stryCov_9fa48("2578", "2579", "2580"), from !== null)) if (stryMutAct_9fa48("2581")) {
                ;
              } else {
                stryCov_9fa48("2581");
                o.markDown(from);
              }
              if (stryMutAct_9fa48("2584") ? body !== undefined : stryMutAct_9fa48("2583") ? false : stryMutAct_9fa48("2582") ? true : (stryCov_9fa48("2582", "2583", "2584"), body === undefined)) {
                if (stryMutAct_9fa48("2585")) {
                  {}
                } else {
                  stryCov_9fa48("2585");
                  // Every token asked was sent and only the end was lost: the answer ends as the engine would have ended it.
                  const complete = stryMutAct_9fa48("2588") ? part < o.limit && !toolCalls && o.plan.maxTokens !== undefined || tokens >= o.plan.maxTokens : stryMutAct_9fa48("2587") ? false : stryMutAct_9fa48("2586") ? true : (stryCov_9fa48("2586", "2587", "2588"), (stryMutAct_9fa48("2590") ? part < o.limit && !toolCalls || o.plan.maxTokens !== undefined : stryMutAct_9fa48("2589") ? true : (stryCov_9fa48("2589", "2590"), (stryMutAct_9fa48("2592") ? part < o.limit || !toolCalls : stryMutAct_9fa48("2591") ? true : (stryCov_9fa48("2591", "2592"), (stryMutAct_9fa48("2595") ? part >= o.limit : stryMutAct_9fa48("2594") ? part <= o.limit : stryMutAct_9fa48("2593") ? true : (stryCov_9fa48("2593", "2594", "2595"), part < o.limit)) && (stryMutAct_9fa48("2596") ? toolCalls : (stryCov_9fa48("2596"), !toolCalls)))) && (stryMutAct_9fa48("2598") ? o.plan.maxTokens === undefined : stryMutAct_9fa48("2597") ? true : (stryCov_9fa48("2597", "2598"), o.plan.maxTokens !== undefined)))) && (stryMutAct_9fa48("2601") ? tokens < o.plan.maxTokens : stryMutAct_9fa48("2600") ? tokens > o.plan.maxTokens : stryMutAct_9fa48("2599") ? true : (stryCov_9fa48("2599", "2600", "2601"), tokens >= o.plan.maxTokens)));
                  await writer.write(encoder.encode(complete ? lengthEnding() : failureEvent())).catch(() => undefined);
                  break;
                }
              }
              tokensBefore[stryMutAct_9fa48("2602") ? part - 1 : (stryCov_9fa48("2602"), part + 1)] = tokens;
              const next = await o.continueOn(encoder.encode(body).buffer as ArrayBuffer, stryMutAct_9fa48("2603") ? part - 1 : (stryCov_9fa48("2603"), part + 1)).catch(() => undefined);
              const ok = stryMutAct_9fa48("2606") ? next !== undefined && next.status === 200 || next.body !== null : stryMutAct_9fa48("2605") ? false : stryMutAct_9fa48("2604") ? true : (stryCov_9fa48("2604", "2605", "2606"), (stryMutAct_9fa48("2608") ? next !== undefined || next.status === 200 : stryMutAct_9fa48("2607") ? true : (stryCov_9fa48("2607", "2608"), (stryMutAct_9fa48("2610") ? next === undefined : stryMutAct_9fa48("2609") ? true : (stryCov_9fa48("2609", "2610"), next !== undefined)) && (stryMutAct_9fa48("2612") ? next.status !== 200 : stryMutAct_9fa48("2611") ? true : (stryCov_9fa48("2611", "2612"), next.status === 200)))) && (stryMutAct_9fa48("2614") ? next.body === null : stryMutAct_9fa48("2613") ? true : (stryCov_9fa48("2613", "2614"), next.body !== null)));
              stryMutAct_9fa48("2615") ? o.onMigration({
                from,
                tokens,
                attempt: part + 1,
                ok,
                reason
              }) : (stryCov_9fa48("2615"), o.onMigration?.(stryMutAct_9fa48("2616") ? {} : (stryCov_9fa48("2616"), {
                from,
                tokens,
                attempt: stryMutAct_9fa48("2617") ? part - 1 : (stryCov_9fa48("2617"), part + 1),
                ok,
                reason
              })));
              if (stryMutAct_9fa48("2620") ? false : stryMutAct_9fa48("2619") ? true : stryMutAct_9fa48("2618") ? ok : (stryCov_9fa48("2618", "2619", "2620"), !ok)) {
                if (stryMutAct_9fa48("2621")) {
                  {}
                } else {
                  stryCov_9fa48("2621");
                  await (stryMutAct_9fa48("2623") ? next.body?.cancel().catch(() => undefined) : stryMutAct_9fa48("2622") ? next?.body.cancel().catch(() => undefined) : (stryCov_9fa48("2622", "2623"), next?.body?.cancel().catch(() => undefined)));
                  await writer.write(encoder.encode(failureEvent())).catch(() => undefined);
                  break;
                }
              }
              res = next;
              from = next.headers.get(Header.replica);
            }
          }
        }
        await writer.close().catch(() => undefined);
      }
    };
    if (stryMutAct_9fa48("2624")) {
      ;
    } else {
      stryCov_9fa48("2624");
      o.background(run());
    }
    return new Response(readable, stryMutAct_9fa48("2625") ? {} : (stryCov_9fa48("2625"), {
      status: first.status,
      statusText: first.statusText,
      headers: first.headers
    }));
  }
}