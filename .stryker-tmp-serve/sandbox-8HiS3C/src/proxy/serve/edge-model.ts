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
import { bodyRefusal, checkDeclaredLength, clientOf, readBoundedBody, uploadPaceOf } from "./body.ts";
import type { Deployment } from "../../config/deployment.ts";
import { errorBody, errorResponse, Header, MODEL_ID } from "../../protocol/index.ts";
import { MAX_MODEL_INPUT_BYTES, ModelInputError, UnknownModelError } from "../../models/model.ts";
import { edgeModelHost } from "../../edge/lazy-model.ts";

/** The value of `x-switchyard-replica` on answers computed at the edge. */
export const EDGE_REPLICA_ID = stryMutAct_9fa48("1954") ? "" : (stryCov_9fa48("1954"), "edge");
export { MAX_MODEL_INPUT_BYTES };
export interface EdgeServeContext {
  deployment: Deployment;
  requestId: string;
}
function json(status: number, body: unknown, headers: Record<string, string>): Response {
  if (stryMutAct_9fa48("1955")) {
    {}
  } else {
    stryCov_9fa48("1955");
    return new Response(JSON.stringify(body), stryMutAct_9fa48("1956") ? {} : (stryCov_9fa48("1956"), {
      status,
      headers: stryMutAct_9fa48("1957") ? {} : (stryCov_9fa48("1957"), {
        ...headers,
        "content-type": stryMutAct_9fa48("1958") ? "" : (stryCov_9fa48("1958"), "application/json; charset=utf-8")
      })
    }));
  }
}

/** The model a request names: x-switchyard-model, else Ray's header, else the deployment's model (as the replica reads them). */
function requestedModel(headers: Headers, defaultModel: string): string {
  if (stryMutAct_9fa48("1959")) {
    {}
  } else {
    stryCov_9fa48("1959");
    for (const name of stryMutAct_9fa48("1960") ? [] : (stryCov_9fa48("1960"), [Header.model, Header.rayModel])) {
      if (stryMutAct_9fa48("1961")) {
        {}
      } else {
        stryCov_9fa48("1961");
        const value = stryMutAct_9fa48("1963") ? headers.get(name).trim() : stryMutAct_9fa48("1962") ? headers.get(name) : (stryCov_9fa48("1962", "1963"), headers.get(name)?.trim());
        if (stryMutAct_9fa48("1965") ? false : stryMutAct_9fa48("1964") ? true : (stryCov_9fa48("1964", "1965"), value)) return value;
      }
    }
    return defaultModel;
  }
}
export async function serveAtEdge(req: Request, ctx: EdgeServeContext): Promise<Response> {
  if (stryMutAct_9fa48("1966")) {
    {}
  } else {
    stryCov_9fa48("1966");
    const {
      deployment,
      requestId
    } = ctx;
    if (stryMutAct_9fa48("1969") ? deployment.backend.kind === "edge" : stryMutAct_9fa48("1968") ? false : stryMutAct_9fa48("1967") ? true : (stryCov_9fa48("1967", "1968", "1969"), deployment.backend.kind !== (stryMutAct_9fa48("1970") ? "" : (stryCov_9fa48("1970"), "edge")))) throw new Error(stryMutAct_9fa48("1972") ? `` : (stryCov_9fa48("1972"), `deployment "${deployment.name}" does not run at the edge`));
    const served = deployment.backend.model;
    const base: Record<string, string> = stryMutAct_9fa48("1973") ? {} : (stryCov_9fa48("1973"), {
      [Header.replica]: EDGE_REPLICA_ID,
      [Header.requestId]: requestId
    });
    const method = req.method;

    // The proxy's checks on a body it would dispatch (src/proxy/serve/dispatch.ts, prepareBody).
    const {
      maxRequestBodyBytes
    } = deployment.limits;
    const hasBody = stryMutAct_9fa48("1976") ? req.body !== null && method !== "GET" || method !== "HEAD" : stryMutAct_9fa48("1975") ? false : stryMutAct_9fa48("1974") ? true : (stryCov_9fa48("1974", "1975", "1976"), (stryMutAct_9fa48("1978") ? req.body !== null || method !== "GET" : stryMutAct_9fa48("1977") ? true : (stryCov_9fa48("1977", "1978"), (stryMutAct_9fa48("1980") ? req.body === null : stryMutAct_9fa48("1979") ? true : (stryCov_9fa48("1979", "1980"), req.body !== null)) && (stryMutAct_9fa48("1982") ? method === "GET" : stryMutAct_9fa48("1981") ? true : (stryCov_9fa48("1981", "1982"), method !== (stryMutAct_9fa48("1983") ? "" : (stryCov_9fa48("1983"), "GET")))))) && (stryMutAct_9fa48("1985") ? method === "HEAD" : stryMutAct_9fa48("1984") ? true : (stryCov_9fa48("1984", "1985"), method !== (stryMutAct_9fa48("1986") ? "" : (stryCov_9fa48("1986"), "HEAD")))));
    if (stryMutAct_9fa48("1988") ? false : stryMutAct_9fa48("1987") ? true : (stryCov_9fa48("1987", "1988"), hasBody)) {
      if (stryMutAct_9fa48("1989")) {
        {}
      } else {
        stryCov_9fa48("1989");
        const declared = checkDeclaredLength(req.headers, maxRequestBodyBytes, requestId);
        if (stryMutAct_9fa48("1991") ? false : stryMutAct_9fa48("1990") ? true : (stryCov_9fa48("1990", "1991"), declared instanceof Response)) return declared;
      }
    }

    // From here on, what the replica's model handler answers.
    if (stryMutAct_9fa48("1994") ? method !== "GET" || method !== "POST" : stryMutAct_9fa48("1993") ? false : stryMutAct_9fa48("1992") ? true : (stryCov_9fa48("1992", "1993", "1994"), (stryMutAct_9fa48("1996") ? method === "GET" : stryMutAct_9fa48("1995") ? true : (stryCov_9fa48("1995", "1996"), method !== (stryMutAct_9fa48("1997") ? "" : (stryCov_9fa48("1997"), "GET")))) && (stryMutAct_9fa48("1999") ? method === "POST" : stryMutAct_9fa48("1998") ? true : (stryCov_9fa48("1998", "1999"), method !== (stryMutAct_9fa48("2000") ? "" : (stryCov_9fa48("2000"), "POST")))))) {
      if (stryMutAct_9fa48("2001")) {
        {}
      } else {
        stryCov_9fa48("2001");
        return json(405, errorBody(stryMutAct_9fa48("2002") ? "" : (stryCov_9fa48("2002"), "method_not_allowed"), stryMutAct_9fa48("2003") ? "" : (stryCov_9fa48("2003"), "use POST with a JSON body (GET describes the model)")), stryMutAct_9fa48("2004") ? {} : (stryCov_9fa48("2004"), {
          ...base,
          allow: stryMutAct_9fa48("2005") ? "" : (stryCov_9fa48("2005"), "GET, POST")
        }));
      }
    }
    const id = requestedModel(req.headers, served);
    if (stryMutAct_9fa48("2008") ? false : stryMutAct_9fa48("2007") ? true : stryMutAct_9fa48("2006") ? MODEL_ID.test(id) : (stryCov_9fa48("2006", "2007", "2008"), !MODEL_ID.test(id))) {
      if (stryMutAct_9fa48("2009")) {
        {}
      } else {
        stryCov_9fa48("2009");
        return json(400, errorBody(stryMutAct_9fa48("2010") ? "" : (stryCov_9fa48("2010"), "bad_request"), stryMutAct_9fa48("2011") ? `` : (stryCov_9fa48("2011"), `malformed model id (1-128 of [A-Za-z0-9._:@/+-], starting with a letter or digit)`)), base);
      }
    }
    if (stryMutAct_9fa48("2014") ? id === served : stryMutAct_9fa48("2013") ? false : stryMutAct_9fa48("2012") ? true : (stryCov_9fa48("2012", "2013", "2014"), id !== served)) {
      if (stryMutAct_9fa48("2015")) {
        {}
      } else {
        stryCov_9fa48("2015");
        const err = new UnknownModelError(id, stryMutAct_9fa48("2016") ? [] : (stryCov_9fa48("2016"), [served]));
        return json(404, errorBody(stryMutAct_9fa48("2017") ? "" : (stryCov_9fa48("2017"), "model_not_found"), err.message, stryMutAct_9fa48("2018") ? {} : (stryCov_9fa48("2018"), {
          details: stryMutAct_9fa48("2019") ? {} : (stryCov_9fa48("2019"), {
            model: id,
            known: err.known
          })
        })), base);
      }
    }
    const host = edgeModelHost(served);
    if (stryMutAct_9fa48("2022") ? false : stryMutAct_9fa48("2021") ? true : stryMutAct_9fa48("2020") ? host : (stryCov_9fa48("2020", "2021", "2022"), !host)) {
      if (stryMutAct_9fa48("2023")) {
        {}
      } else {
        stryCov_9fa48("2023");
        return errorResponse(stryMutAct_9fa48("2024") ? "" : (stryCov_9fa48("2024"), "internal_error"), stryMutAct_9fa48("2025") ? `` : (stryCov_9fa48("2025"), `this Worker was built without the edge runtime for model "${served}" (build it with scripts/build.ts)`), stryMutAct_9fa48("2026") ? {} : (stryCov_9fa48("2026"), {
          requestId
        }));
      }
    }
    let input: unknown;
    if (stryMutAct_9fa48("2029") ? method !== "POST" : stryMutAct_9fa48("2028") ? false : stryMutAct_9fa48("2027") ? true : (stryCov_9fa48("2027", "2028", "2029"), method === (stryMutAct_9fa48("2030") ? "" : (stryCov_9fa48("2030"), "POST")))) {
      if (stryMutAct_9fa48("2031")) {
        {}
      } else {
        stryCov_9fa48("2031");
        const limit = stryMutAct_9fa48("2032") ? Math.max(maxRequestBodyBytes, MAX_MODEL_INPUT_BYTES) : (stryCov_9fa48("2032"), Math.min(maxRequestBodyBytes, MAX_MODEL_INPUT_BYTES));
        // A public deployment's body is read before anything authenticated its sender: charged to the client's hold.
        const bytes = await readBoundedBody(req, limit, uploadPaceOf(deployment.limits), deployment.access.public ? clientOf(req.headers) : undefined);
        if (stryMutAct_9fa48("2035") ? bytes !== "too_large" : stryMutAct_9fa48("2034") ? false : stryMutAct_9fa48("2033") ? true : (stryCov_9fa48("2033", "2034", "2035"), bytes === (stryMutAct_9fa48("2036") ? "" : (stryCov_9fa48("2036"), "too_large")))) {
          if (stryMutAct_9fa48("2037")) {
            {}
          } else {
            stryCov_9fa48("2037");
            return (stryMutAct_9fa48("2041") ? maxRequestBodyBytes >= MAX_MODEL_INPUT_BYTES : stryMutAct_9fa48("2040") ? maxRequestBodyBytes <= MAX_MODEL_INPUT_BYTES : stryMutAct_9fa48("2039") ? false : stryMutAct_9fa48("2038") ? true : (stryCov_9fa48("2038", "2039", "2040", "2041"), maxRequestBodyBytes < MAX_MODEL_INPUT_BYTES)) ? errorResponse(stryMutAct_9fa48("2042") ? "" : (stryCov_9fa48("2042"), "payload_too_large"), stryMutAct_9fa48("2043") ? `` : (stryCov_9fa48("2043"), `request body exceeds ${maxRequestBodyBytes} bytes`), stryMutAct_9fa48("2044") ? {} : (stryCov_9fa48("2044"), {
              requestId
            })) : json(413, errorBody(stryMutAct_9fa48("2045") ? "" : (stryCov_9fa48("2045"), "payload_too_large"), stryMutAct_9fa48("2046") ? `` : (stryCov_9fa48("2046"), `model input over ${MAX_MODEL_INPUT_BYTES} bytes`)), base);
          }
        }
        if (stryMutAct_9fa48("2049") ? typeof bytes !== "string" : stryMutAct_9fa48("2048") ? false : stryMutAct_9fa48("2047") ? true : (stryCov_9fa48("2047", "2048", "2049"), typeof bytes === (stryMutAct_9fa48("2050") ? "" : (stryCov_9fa48("2050"), "string")))) return bodyRefusal(bytes, limit, requestId);
        // ignoreBOM: a leading BOM stays and fails JSON.parse, as Buffer#toString does on the replica.
        const text = new TextDecoder(stryMutAct_9fa48("2051") ? "" : (stryCov_9fa48("2051"), "utf-8"), stryMutAct_9fa48("2052") ? {} : (stryCov_9fa48("2052"), {
          fatal: stryMutAct_9fa48("2053") ? true : (stryCov_9fa48("2053"), false),
          ignoreBOM: stryMutAct_9fa48("2054") ? false : (stryCov_9fa48("2054"), true)
        })).decode(bytes);
        try {
          if (stryMutAct_9fa48("2055")) {
            {}
          } else {
            stryCov_9fa48("2055");
            input = JSON.parse(text);
          }
        } catch {
          if (stryMutAct_9fa48("2056")) {
            {}
          } else {
            stryCov_9fa48("2056");
            return json(400, errorBody(stryMutAct_9fa48("2057") ? "" : (stryCov_9fa48("2057"), "bad_request"), stryMutAct_9fa48("2058") ? "" : (stryCov_9fa48("2058"), "body is not valid JSON")), base);
          }
        }
      }
    }
    let lease;
    try {
      if (stryMutAct_9fa48("2059")) {
        {}
      } else {
        stryCov_9fa48("2059");
        lease = await host.acquire();
      }
    } catch (err) {
      if (stryMutAct_9fa48("2060")) {
        {}
      } else {
        stryCov_9fa48("2060");
        console.error(JSON.stringify(stryMutAct_9fa48("2062") ? {} : (stryCov_9fa48("2062"), {
          msg: stryMutAct_9fa48("2063") ? "" : (stryCov_9fa48("2063"), "edge model failed to load"),
          deployment: deployment.name,
          model: served,
          request_id: requestId,
          error: String(err)
        })));
        return errorResponse(stryMutAct_9fa48("2064") ? "" : (stryCov_9fa48("2064"), "internal_error"), stryMutAct_9fa48("2065") ? `` : (stryCov_9fa48("2065"), `model "${served}" failed to load at the edge`), stryMutAct_9fa48("2066") ? {} : (stryCov_9fa48("2066"), {
          requestId,
          headers: base
        }));
      }
    }
    const {
      model
    } = lease;
    const headers = stryMutAct_9fa48("2067") ? {} : (stryCov_9fa48("2067"), {
      ...base,
      [Header.model]: model.id,
      [Header.modelCache]: lease.hit ? stryMutAct_9fa48("2068") ? "" : (stryCov_9fa48("2068"), "hit") : stryMutAct_9fa48("2069") ? "" : (stryCov_9fa48("2069"), "miss")
    });
    if (stryMutAct_9fa48("2072") ? method !== "GET" : stryMutAct_9fa48("2071") ? false : stryMutAct_9fa48("2070") ? true : (stryCov_9fa48("2070", "2071", "2072"), method === (stryMutAct_9fa48("2073") ? "" : (stryCov_9fa48("2073"), "GET")))) {
      if (stryMutAct_9fa48("2074")) {
        {}
      } else {
        stryCov_9fa48("2074");
        // GET …/example returns a valid input, ready to POST back; any other GET describes the model.
        const example = stryMutAct_9fa48("2075") ? new URL(req.url).pathname.startsWith("/example") : (stryCov_9fa48("2075"), new URL(req.url).pathname.endsWith(stryMutAct_9fa48("2076") ? "" : (stryCov_9fa48("2076"), "/example")));
        return json(200, example ? model.inputExample : stryMutAct_9fa48("2077") ? {} : (stryCov_9fa48("2077"), {
          model: model.id,
          description: model.description,
          input_example: model.inputExample
        }), headers);
      }
    }
    try {
      if (stryMutAct_9fa48("2078")) {
        {}
      } else {
        stryCov_9fa48("2078");
        return json(200, await model.infer(input), headers);
      }
    } catch (err) {
      if (stryMutAct_9fa48("2079")) {
        {}
      } else {
        stryCov_9fa48("2079");
        if (stryMutAct_9fa48("2081") ? false : stryMutAct_9fa48("2080") ? true : (stryCov_9fa48("2080", "2081"), err instanceof ModelInputError)) return json(400, errorBody(stryMutAct_9fa48("2082") ? "" : (stryCov_9fa48("2082"), "bad_request"), err.message, stryMutAct_9fa48("2083") ? {} : (stryCov_9fa48("2083"), {
          details: err.issues
        })), headers);
        console.error(JSON.stringify(stryMutAct_9fa48("2085") ? {} : (stryCov_9fa48("2085"), {
          msg: stryMutAct_9fa48("2086") ? "" : (stryCov_9fa48("2086"), "edge inference failed"),
          deployment: deployment.name,
          model: served,
          request_id: requestId,
          error: String(err)
        })));
        return errorResponse(stryMutAct_9fa48("2087") ? "" : (stryCov_9fa48("2087"), "internal_error"), stryMutAct_9fa48("2088") ? "" : (stryCov_9fa48("2088"), "edge inference failed"), stryMutAct_9fa48("2089") ? {} : (stryCov_9fa48("2089"), {
          requestId,
          headers
        }));
      }
    }
  }
}