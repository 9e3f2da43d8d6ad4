/**
 * The observe stage: what one request did, counted (this isolate's metrics,
 * flushed to the Telemetry shards) and logged (one JSON line, sampled).
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
import type { Env } from "../../env.ts";
import type { DispatchTrace } from "./dispatch.ts";
import type { ProxyMetrics } from "../../telemetry/proxy-metrics.ts";
import type { TokenCounts } from "../../telemetry/types.ts";

/**
 * After each proxied request: the isolate's metrics (flushed to the Telemetry
 * object every few seconds) and one structured JSON log line with the request
 * id, deployment, replica, status and timings (Workers Logs / `wrangler tail`
 * in production; workerd's output locally). The line is not free (a few % of a
 * plain request's CPU, docs/scaling.md): SWITCHYARD_REQUEST_LOGS may sample the
 * routine ones (requestLogRate); the metrics still count every request.
 */
/** A /v1 request's token usage, known once its response has passed (token-usage.ts). */
export interface UsageWatch {
  /** The API key's label: its public prefix (as the admin API lists it), or "public". */
  key: string;
  /** Settles when the response has passed on completely (or was cut). */
  ended: Promise<unknown>;
  usage: () => TokenCounts | null;
}

/**
 * A request whose line may be left out when SWITCHYARD_REQUEST_LOGS is a fraction:
 * answered (below 400) on the first attempt, nothing refused or ejected on the way,
 * and done within this long. Every other line is always written.
 */
export const ROUTINE_REQUEST_MS = 1_000;

/**
 * SWITCHYARD_REQUEST_LOGS as a rate: "off" 0 lines, a fraction from "0" to "1" (a
 * decimal) that share of the routine requests' lines and every other line, anything
 * else (the default "on") every line. Read once per value, not per request.
 */
let logSetting: {
  value: string | undefined;
  rate: number | "off";
} | undefined;
export function requestLogRate(value: string | undefined): number | "off" {
  if (stryMutAct_9fa48("2626")) {
    {}
  } else {
    stryCov_9fa48("2626");
    if (stryMutAct_9fa48("2629") ? logSetting === undefined && logSetting.value !== value : stryMutAct_9fa48("2628") ? false : stryMutAct_9fa48("2627") ? true : (stryCov_9fa48("2627", "2628", "2629"), (stryMutAct_9fa48("2631") ? logSetting !== undefined : stryMutAct_9fa48("2630") ? false : (stryCov_9fa48("2630", "2631"), logSetting === undefined)) || (stryMutAct_9fa48("2633") ? logSetting.value === value : stryMutAct_9fa48("2632") ? false : (stryCov_9fa48("2632", "2633"), logSetting.value !== value)))) {
      if (stryMutAct_9fa48("2634")) {
        {}
      } else {
        stryCov_9fa48("2634");
        const fraction = (stryMutAct_9fa48("2637") ? value !== undefined || /^(0|1|0?\.\d{1,6}|1\.0{1,6})$/.test(value) : stryMutAct_9fa48("2636") ? false : stryMutAct_9fa48("2635") ? true : (stryCov_9fa48("2635", "2636", "2637"), (stryMutAct_9fa48("2639") ? value === undefined : stryMutAct_9fa48("2638") ? true : (stryCov_9fa48("2638", "2639"), value !== undefined)) && (stryMutAct_9fa48("2645") ? /^(0|1|0?\.\d{1,6}|1\.0)$/ : stryMutAct_9fa48("2644") ? /^(0|1|0?\.\D{1,6}|1\.0{1,6})$/ : stryMutAct_9fa48("2643") ? /^(0|1|0?\.\d|1\.0{1,6})$/ : stryMutAct_9fa48("2642") ? /^(0|1|0\.\d{1,6}|1\.0{1,6})$/ : stryMutAct_9fa48("2641") ? /^(0|1|0?\.\d{1,6}|1\.0{1,6})/ : stryMutAct_9fa48("2640") ? /(0|1|0?\.\d{1,6}|1\.0{1,6})$/ : (stryCov_9fa48("2640", "2641", "2642", "2643", "2644", "2645"), /^(0|1|0?\.\d{1,6}|1\.0{1,6})$/)).test(value))) ? Number(value) : 1;
        logSetting = stryMutAct_9fa48("2646") ? {} : (stryCov_9fa48("2646"), {
          value,
          rate: (stryMutAct_9fa48("2649") ? value !== "off" : stryMutAct_9fa48("2648") ? false : stryMutAct_9fa48("2647") ? true : (stryCov_9fa48("2647", "2648", "2649"), value === (stryMutAct_9fa48("2650") ? "" : (stryCov_9fa48("2650"), "off")))) ? stryMutAct_9fa48("2651") ? "" : (stryCov_9fa48("2651"), "off") : fraction
        });
      }
    }
    return logSetting.rate;
  }
}

/** What this stage needs of the isolate's state (serve.ts, IsolateState): its counters, and their flush. */
export interface MetricsHolder {
  readonly metrics: ProxyMetrics;
  flushMetrics(background: (p: Promise<unknown>) => void): void;
}
export function observeRequest(env: Env, state: MetricsHolder, deployment: string, method: string, status: number, requestId: string, started: number, trace: DispatchTrace, background: (p: Promise<unknown>) => void, usage?: UsageWatch): void {
  if (stryMutAct_9fa48("2652")) {
    {}
  } else {
    stryCov_9fa48("2652");
    const ttfbMs = stryMutAct_9fa48("2653") ? Date.now() + started : (stryCov_9fa48("2653"), Date.now() - started);
    state.metrics.recordResponse(deployment, stryMutAct_9fa48("2655") ? {} : (stryCov_9fa48("2655"), {
      status,
      attempts: trace.attempts,
      rejections: trace.rejections,
      ejections: trace.ejections,
      ttfbMs,
      ...((stryMutAct_9fa48("2658") ? trace.promptFallback === undefined : stryMutAct_9fa48("2657") ? false : stryMutAct_9fa48("2656") ? true : (stryCov_9fa48("2656", "2657", "2658"), trace.promptFallback !== undefined)) ? stryMutAct_9fa48("2659") ? {} : (stryCov_9fa48("2659"), {
        promptFallback: trace.promptFallback
      }) : {})
    }));
    const rate = requestLogRate(env.SWITCHYARD_REQUEST_LOGS);
    const finish = () => {
      if (stryMutAct_9fa48("2660")) {
        {}
      } else {
        stryCov_9fa48("2660");
        const totalMs = stryMutAct_9fa48("2661") ? Date.now() + started : (stryCov_9fa48("2661"), Date.now() - started);
        if (stryMutAct_9fa48("2662")) {
          ;
        } else {
          stryCov_9fa48("2662");
          state.metrics.recordDuration(deployment, totalMs);
        }
        const tokens = stryMutAct_9fa48("2663") ? usage?.usage() && null : (stryCov_9fa48("2663"), (stryMutAct_9fa48("2664") ? usage.usage() : (stryCov_9fa48("2664"), usage?.usage())) ?? null);
        if (stryMutAct_9fa48("2666") ? false : stryMutAct_9fa48("2665") ? true : (stryCov_9fa48("2665", "2666"), tokens)) if (stryMutAct_9fa48("2667")) {
          ;
        } else {
          stryCov_9fa48("2667");
          state.metrics.recordTokens(deployment, usage!.key, tokens);
        }
        const routine = stryMutAct_9fa48("2670") ? status < 400 && trace.attempts <= 1 && trace.rejections === 0 && trace.ejections === 0 || totalMs < ROUTINE_REQUEST_MS : stryMutAct_9fa48("2669") ? false : stryMutAct_9fa48("2668") ? true : (stryCov_9fa48("2668", "2669", "2670"), (stryMutAct_9fa48("2672") ? status < 400 && trace.attempts <= 1 && trace.rejections === 0 || trace.ejections === 0 : stryMutAct_9fa48("2671") ? true : (stryCov_9fa48("2671", "2672"), (stryMutAct_9fa48("2674") ? status < 400 && trace.attempts <= 1 || trace.rejections === 0 : stryMutAct_9fa48("2673") ? true : (stryCov_9fa48("2673", "2674"), (stryMutAct_9fa48("2676") ? status < 400 || trace.attempts <= 1 : stryMutAct_9fa48("2675") ? true : (stryCov_9fa48("2675", "2676"), (stryMutAct_9fa48("2679") ? status >= 400 : stryMutAct_9fa48("2678") ? status <= 400 : stryMutAct_9fa48("2677") ? true : (stryCov_9fa48("2677", "2678", "2679"), status < 400)) && (stryMutAct_9fa48("2682") ? trace.attempts > 1 : stryMutAct_9fa48("2681") ? trace.attempts < 1 : stryMutAct_9fa48("2680") ? true : (stryCov_9fa48("2680", "2681", "2682"), trace.attempts <= 1)))) && (stryMutAct_9fa48("2684") ? trace.rejections !== 0 : stryMutAct_9fa48("2683") ? true : (stryCov_9fa48("2683", "2684"), trace.rejections === 0)))) && (stryMutAct_9fa48("2686") ? trace.ejections !== 0 : stryMutAct_9fa48("2685") ? true : (stryCov_9fa48("2685", "2686"), trace.ejections === 0)))) && (stryMutAct_9fa48("2689") ? totalMs >= ROUTINE_REQUEST_MS : stryMutAct_9fa48("2688") ? totalMs <= ROUTINE_REQUEST_MS : stryMutAct_9fa48("2687") ? true : (stryCov_9fa48("2687", "2688", "2689"), totalMs < ROUTINE_REQUEST_MS)));
        if (stryMutAct_9fa48("2692") ? rate !== "off" || rate >= 1 || !routine || Math.random() < rate : stryMutAct_9fa48("2691") ? false : stryMutAct_9fa48("2690") ? true : (stryCov_9fa48("2690", "2691", "2692"), (stryMutAct_9fa48("2694") ? rate === "off" : stryMutAct_9fa48("2693") ? true : (stryCov_9fa48("2693", "2694"), rate !== (stryMutAct_9fa48("2695") ? "" : (stryCov_9fa48("2695"), "off")))) && (stryMutAct_9fa48("2697") ? (rate >= 1 || !routine) && Math.random() < rate : stryMutAct_9fa48("2696") ? true : (stryCov_9fa48("2696", "2697"), (stryMutAct_9fa48("2699") ? rate >= 1 && !routine : stryMutAct_9fa48("2698") ? false : (stryCov_9fa48("2698", "2699"), (stryMutAct_9fa48("2702") ? rate < 1 : stryMutAct_9fa48("2701") ? rate > 1 : stryMutAct_9fa48("2700") ? false : (stryCov_9fa48("2700", "2701", "2702"), rate >= 1)) || (stryMutAct_9fa48("2703") ? routine : (stryCov_9fa48("2703"), !routine)))) || (stryMutAct_9fa48("2706") ? Math.random() >= rate : stryMutAct_9fa48("2705") ? Math.random() <= rate : stryMutAct_9fa48("2704") ? false : (stryCov_9fa48("2704", "2705", "2706"), Math.random() < rate)))))) {
          if (stryMutAct_9fa48("2707")) {
            {}
          } else {
            stryCov_9fa48("2707");
            console.log(requestLogLine(stryMutAct_9fa48("2709") ? {} : (stryCov_9fa48("2709"), {
              requestId,
              deployment,
              method,
              status,
              replica: stryMutAct_9fa48("2710") ? trace.replica && null : (stryCov_9fa48("2710"), trace.replica ?? null),
              attempts: trace.attempts,
              ttfbMs,
              totalMs,
              tokens: tokens ? stryMutAct_9fa48("2711") ? {} : (stryCov_9fa48("2711"), {
                key: usage!.key,
                prompt: tokens.prompt,
                completion: tokens.completion
              }) : null
            })));
          }
        }
      }
    };
    // The usage watch's end comes after the dispatch's (its pipe reads the dispatched body).
    const end = stryMutAct_9fa48("2712") ? usage?.ended && trace.streamEnd : (stryCov_9fa48("2712"), (stryMutAct_9fa48("2713") ? usage.ended : (stryCov_9fa48("2713"), usage?.ended)) ?? trace.streamEnd);
    if (stryMutAct_9fa48("2715") ? false : stryMutAct_9fa48("2714") ? true : (stryCov_9fa48("2714", "2715"), end)) {
      if (stryMutAct_9fa48("2716")) {
        {}
      } else {
        stryCov_9fa48("2716");
        // A long stream's end may come after the flush interval: flush then too (takeFlush throttles).
        background(end.then(() => {
          if (stryMutAct_9fa48("2718")) {
            {}
          } else {
            stryCov_9fa48("2718");
            if (stryMutAct_9fa48("2719")) {
              ;
            } else {
              stryCov_9fa48("2719");
              finish();
            }
            if (stryMutAct_9fa48("2720")) {
              ;
            } else {
              stryCov_9fa48("2720");
              state.flushMetrics(background);
            }
          }
        }));
      }
    } else if (stryMutAct_9fa48("2721")) {
      ;
    } else {
      stryCov_9fa48("2721");
      finish();
    }
    if (stryMutAct_9fa48("2722")) {
      ;
    } else {
      stryCov_9fa48("2722");
      state.flushMetrics(background);
    }
  }
}

/**
 * The per-request JSON log line (serve/observe.ts), written as one string.
 * It is exactly what JSON.stringify gives for the same fields in the same order,
 * without the object and the spread built first: it runs once per request, and a
 * V8 measurement put the template at about a fifth of the object's cost.
 */
/** What one proxied request's line says. */
export interface RequestLogFields {
  requestId: string;
  deployment: string;
  method: string;
  status: number;
  replica: string | null;
  attempts: number;
  ttfbMs: number;
  totalMs: number;
  /** A /v1 request's token usage and its key label (token-usage.ts). */
  tokens?: {
    key: string;
    prompt: number;
    completion: number;
  } | null;
}

/** Printable ASCII without `"` and `\`: quoted as it is (JSON.stringify's output too). */
const PLAIN = stryMutAct_9fa48("2726") ? /^[^\x20\x21\x23-\x5b\x5d-\x7e]*$/ : stryMutAct_9fa48("2725") ? /^[\x20\x21\x23-\x5b\x5d-\x7e]$/ : stryMutAct_9fa48("2724") ? /^[\x20\x21\x23-\x5b\x5d-\x7e]*/ : stryMutAct_9fa48("2723") ? /[\x20\x21\x23-\x5b\x5d-\x7e]*$/ : (stryCov_9fa48("2723", "2724", "2725", "2726"), /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/);

/** A JSON string literal; JSON.stringify only for the rare value that needs escapes. */
function str(s: string): string {
  if (stryMutAct_9fa48("2727")) {
    {}
  } else {
    stryCov_9fa48("2727");
    return PLAIN.test(s) ? stryMutAct_9fa48("2728") ? `` : (stryCov_9fa48("2728"), `"${s}"`) : JSON.stringify(s);
  }
}

/** A JSON number as JSON.stringify writes it (null for a non-finite one). */
function num(n: number): string {
  if (stryMutAct_9fa48("2729")) {
    {}
  } else {
    stryCov_9fa48("2729");
    return Number.isFinite(n) ? String(n) : stryMutAct_9fa48("2730") ? "" : (stryCov_9fa48("2730"), "null");
  }
}
export function requestLogLine(f: RequestLogFields): string {
  if (stryMutAct_9fa48("2731")) {
    {}
  } else {
    stryCov_9fa48("2731");
    let line = (stryMutAct_9fa48("2732") ? `` : (stryCov_9fa48("2732"), `{"msg":"request","request_id":${str(f.requestId)},"deployment":${str(f.deployment)},"method":${str(f.method)},"status":${num(f.status)}`)) + (stryMutAct_9fa48("2733") ? `` : (stryCov_9fa48("2733"), `,"replica":${(stryMutAct_9fa48("2736") ? f.replica !== null : stryMutAct_9fa48("2735") ? false : stryMutAct_9fa48("2734") ? true : (stryCov_9fa48("2734", "2735", "2736"), f.replica === null)) ? stryMutAct_9fa48("2737") ? "" : (stryCov_9fa48("2737"), "null") : str(f.replica)},"attempts":${num(f.attempts)},"ttfb_ms":${num(f.ttfbMs)},"total_ms":${num(f.totalMs)}`));
    const t = f.tokens;
    if (stryMutAct_9fa48("2739") ? false : stryMutAct_9fa48("2738") ? true : (stryCov_9fa48("2738", "2739"), t)) line += stryMutAct_9fa48("2740") ? `` : (stryCov_9fa48("2740"), `,"key":${str(t.key)},"prompt_tokens":${num(t.prompt)},"completion_tokens":${num(t.completion)}`);
    return stryMutAct_9fa48("2741") ? `` : (stryCov_9fa48("2741"), `${line}}`);
  }
}