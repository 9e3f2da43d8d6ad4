/**
 * A request's priority in its engine's own terms, for deployments whose engines
 * schedule by a request field (`openai.enginePriority`, docs/agent.md). The replica
 * agent is not on the request path (the edge dispatches straight to the engine), so
 * the edge says it, in the body it forwards. Pure.
 *
 * vLLM (`--scheduling-policy priority`): `priority` of ChatCompletionRequest,
 * CompletionRequest, ResponsesRequest and the embedding requests, an integer, default
 * 0, lower values served first; any other value than 0 is refused by an engine without
 * priority scheduling. Switchyard's priority is higher first (docs/admission.md), so
 * the engine gets it negated. Every route whose body vLLM reads `priority` from is
 * written, so a client's own `priority` never reaches the engine past its key's cap.
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
import { OpenAIPath } from "../../protocol/index.ts";

/** The engines' request fields the edge knows (`openai.enginePriority`). */
export type EnginePriority = "vllm";

/** vLLM's `priority` for a Switchyard priority: negated (vLLM serves lower first). */
export function vllmPriority(priority: number): number {
  if (stryMutAct_9fa48("2090")) {
    {}
  } else {
    stryCov_9fa48("2090");
    return (stryMutAct_9fa48("2093") ? priority !== 0 : stryMutAct_9fa48("2092") ? false : stryMutAct_9fa48("2091") ? true : (stryCov_9fa48("2091", "2092", "2093"), priority === 0)) ? 0 : stryMutAct_9fa48("2094") ? +priority : (stryCov_9fa48("2094"), -priority);
  }
}

/** The /v1 paths whose vLLM requests have `priority`: every body route the edge serves. */
const PRIORITY_PATHS: ReadonlySet<string> = new Set(stryMutAct_9fa48("2095") ? [] : (stryCov_9fa48("2095"), [OpenAIPath.chat, OpenAIPath.completions, OpenAIPath.responses, OpenAIPath.embeddings]));

/**
 * The /v1 body the engine gets: `body` (a JSON object, as the route checked) with its
 * top-level `priority` set to the engine's value for `priority`, or `body` itself when
 * nothing is to be said (no engine field, another path, or priority 0 and no
 * `priority` of the client's to override, since 0 is vLLM's default).
 * `bodyHasPriority`: the client's body has its own top-level `priority`.
 */
export function bodyForEngine(engine: EnginePriority | undefined, path: string, body: ArrayBuffer, priority: number, bodyHasPriority: boolean): ArrayBuffer {
  if (stryMutAct_9fa48("2096")) {
    {}
  } else {
    stryCov_9fa48("2096");
    if (stryMutAct_9fa48("2099") ? engine !== "vllm" && !PRIORITY_PATHS.has(path) : stryMutAct_9fa48("2098") ? false : stryMutAct_9fa48("2097") ? true : (stryCov_9fa48("2097", "2098", "2099"), (stryMutAct_9fa48("2101") ? engine === "vllm" : stryMutAct_9fa48("2100") ? false : (stryCov_9fa48("2100", "2101"), engine !== (stryMutAct_9fa48("2102") ? "" : (stryCov_9fa48("2102"), "vllm")))) || (stryMutAct_9fa48("2103") ? PRIORITY_PATHS.has(path) : (stryCov_9fa48("2103"), !PRIORITY_PATHS.has(path))))) return body;
    if (stryMutAct_9fa48("2106") ? priority === 0 || !bodyHasPriority : stryMutAct_9fa48("2105") ? false : stryMutAct_9fa48("2104") ? true : (stryCov_9fa48("2104", "2105", "2106"), (stryMutAct_9fa48("2108") ? priority !== 0 : stryMutAct_9fa48("2107") ? true : (stryCov_9fa48("2107", "2108"), priority === 0)) && (stryMutAct_9fa48("2109") ? bodyHasPriority : (stryCov_9fa48("2109"), !bodyHasPriority)))) return body;
    return stryMutAct_9fa48("2110") ? withLastMember(body, "priority", String(vllmPriority(priority))) && body : (stryCov_9fa48("2110"), withLastMember(body, stryMutAct_9fa48("2111") ? "" : (stryCov_9fa48("2111"), "priority"), String(vllmPriority(priority))) ?? body);
  }
}
const isSpace = stryMutAct_9fa48("2112") ? () => undefined : (stryCov_9fa48("2112"), (() => {
  const isSpace = (b: number) => stryMutAct_9fa48("2115") ? (b === 0x20 || b === 0x0a || b === 0x0d) && b === 0x09 : stryMutAct_9fa48("2114") ? false : stryMutAct_9fa48("2113") ? true : (stryCov_9fa48("2113", "2114", "2115"), (stryMutAct_9fa48("2117") ? (b === 0x20 || b === 0x0a) && b === 0x0d : stryMutAct_9fa48("2116") ? false : (stryCov_9fa48("2116", "2117"), (stryMutAct_9fa48("2119") ? b === 0x20 && b === 0x0a : stryMutAct_9fa48("2118") ? false : (stryCov_9fa48("2118", "2119"), (stryMutAct_9fa48("2121") ? b !== 0x20 : stryMutAct_9fa48("2120") ? false : (stryCov_9fa48("2120", "2121"), b === 0x20)) || (stryMutAct_9fa48("2123") ? b !== 0x0a : stryMutAct_9fa48("2122") ? false : (stryCov_9fa48("2122", "2123"), b === 0x0a)))) || (stryMutAct_9fa48("2125") ? b !== 0x0d : stryMutAct_9fa48("2124") ? false : (stryCov_9fa48("2124", "2125"), b === 0x0d)))) || (stryMutAct_9fa48("2127") ? b !== 0x09 : stryMutAct_9fa48("2126") ? false : (stryCov_9fa48("2126", "2127"), b === 0x09)));
  return isSpace;
})());

/**
 * `body` with `"name":json` added as the object's last member, every other byte as it
 * was (no parse, no re-serialisation: numbers, escapes and key order untouched; the
 * body digest is taken after). A member of the same name earlier in the body is
 * overridden rather than removed: the last of duplicate names wins in Python's `json`
 * (which vLLM's FastAPI server parses bodies with; its documentation says so) and in
 * JSON.parse. Null when `body` does not end with an object's `}`.
 */
export function withLastMember(body: ArrayBuffer, name: string, json: string): ArrayBuffer | null {
  if (stryMutAct_9fa48("2128")) {
    {}
  } else {
    stryCov_9fa48("2128");
    const bytes = new Uint8Array(body);
    let close = stryMutAct_9fa48("2129") ? bytes.length + 1 : (stryCov_9fa48("2129"), bytes.length - 1);
    while (stryMutAct_9fa48("2131") ? close >= 0 || isSpace(bytes[close]!) : stryMutAct_9fa48("2130") ? false : (stryCov_9fa48("2130", "2131"), (stryMutAct_9fa48("2134") ? close < 0 : stryMutAct_9fa48("2133") ? close > 0 : stryMutAct_9fa48("2132") ? true : (stryCov_9fa48("2132", "2133", "2134"), close >= 0)) && isSpace(bytes[close]!))) stryMutAct_9fa48("2135") ? close++ : (stryCov_9fa48("2135"), close--);
    if (stryMutAct_9fa48("2138") ? close < 0 && bytes[close] !== 0x7d : stryMutAct_9fa48("2137") ? false : stryMutAct_9fa48("2136") ? true : (stryCov_9fa48("2136", "2137", "2138"), (stryMutAct_9fa48("2141") ? close >= 0 : stryMutAct_9fa48("2140") ? close <= 0 : stryMutAct_9fa48("2139") ? false : (stryCov_9fa48("2139", "2140", "2141"), close < 0)) || (stryMutAct_9fa48("2143") ? bytes[close] === 0x7d : stryMutAct_9fa48("2142") ? false : (stryCov_9fa48("2142", "2143"), bytes[close] !== 0x7d)))) return null;
    let before = stryMutAct_9fa48("2144") ? close + 1 : (stryCov_9fa48("2144"), close - 1);
    while (stryMutAct_9fa48("2146") ? before >= 0 || isSpace(bytes[before]!) : stryMutAct_9fa48("2145") ? false : (stryCov_9fa48("2145", "2146"), (stryMutAct_9fa48("2149") ? before < 0 : stryMutAct_9fa48("2148") ? before > 0 : stryMutAct_9fa48("2147") ? true : (stryCov_9fa48("2147", "2148", "2149"), before >= 0)) && isSpace(bytes[before]!))) stryMutAct_9fa48("2150") ? before++ : (stryCov_9fa48("2150"), before--);
    // `{}`: the member is the first, with no comma before it.
    const member = new TextEncoder().encode(stryMutAct_9fa48("2151") ? `` : (stryCov_9fa48("2151"), `${(stryMutAct_9fa48("2154") ? bytes[before] !== 0x7b : stryMutAct_9fa48("2153") ? false : stryMutAct_9fa48("2152") ? true : (stryCov_9fa48("2152", "2153", "2154"), bytes[before] === 0x7b)) ? stryMutAct_9fa48("2155") ? "Stryker was here!" : (stryCov_9fa48("2155"), "") : stryMutAct_9fa48("2156") ? "" : (stryCov_9fa48("2156"), ",")}${JSON.stringify(name)}:${json}`));
    const out = new Uint8Array(stryMutAct_9fa48("2157") ? bytes.length - member.length : (stryCov_9fa48("2157"), bytes.length + member.length));
    if (stryMutAct_9fa48("2158")) {
      ;
    } else {
      stryCov_9fa48("2158");
      out.set(bytes.subarray(0, close), 0);
    }
    if (stryMutAct_9fa48("2159")) {
      ;
    } else {
      stryCov_9fa48("2159");
      out.set(member, close);
    }
    out.set(bytes.subarray(close), stryMutAct_9fa48("2161") ? close - member.length : (stryCov_9fa48("2161"), close + member.length));
    return out.buffer;
  }
}