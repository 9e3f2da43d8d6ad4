/**
 * After each proxied request: the isolate's metrics (flushed to the Telemetry
 * object every few seconds) and one structured JSON log line with the request
 * id, deployment, replica, status and timings (Workers Logs / `wrangler tail`
 * in production; workerd's output locally). The line is not free (a few % of a
 * plain request's CPU, docs/scaling.md): SWITCHYARD_REQUEST_LOGS may sample the
 * routine ones (requestLogRate); the metrics still count every request.
 */
import type { Env } from "../env.ts";
import type { DispatchTrace } from "./dispatch.ts";
import type { IsolateState } from "./isolate-state.ts";
import { requestLogLine } from "./request-log-line.ts";
import type { TokenCounts } from "../telemetry/types.ts";

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
let logSetting: { value: string | undefined; rate: number | "off" } | undefined;

export function requestLogRate(value: string | undefined): number | "off" {
  if (logSetting === undefined || logSetting.value !== value) {
    const fraction = value !== undefined && /^(0|1|0?\.\d{1,6}|1\.0{1,6})$/.test(value) ? Number(value) : 1;
    logSetting = { value, rate: value === "off" ? "off" : fraction };
  }
  return logSetting.rate;
}

export function observeRequest(
  env: Env,
  state: IsolateState,
  deployment: string,
  method: string,
  status: number,
  requestId: string,
  started: number,
  trace: DispatchTrace,
  background: (p: Promise<unknown>) => void,
  usage?: UsageWatch,
): void {
  const ttfbMs = Date.now() - started;
  state.metrics.recordResponse(deployment, { status, attempts: trace.attempts, rejections: trace.rejections, ejections: trace.ejections, ttfbMs });
  const rate = requestLogRate(env.SWITCHYARD_REQUEST_LOGS);
  const finish = () => {
    const totalMs = Date.now() - started;
    state.metrics.recordDuration(deployment, totalMs);
    const tokens = usage?.usage() ?? null;
    if (tokens) state.metrics.recordTokens(deployment, usage!.key, tokens);
    const routine = status < 400 && trace.attempts <= 1 && trace.rejections === 0 && trace.ejections === 0 && totalMs < ROUTINE_REQUEST_MS;
    if (rate !== "off" && (rate >= 1 || !routine || Math.random() < rate)) {
      console.log(
        requestLogLine({
          requestId,
          deployment,
          method,
          status,
          replica: trace.replica ?? null,
          attempts: trace.attempts,
          ttfbMs,
          totalMs,
          tokens: tokens ? { key: usage!.key, prompt: tokens.prompt, completion: tokens.completion } : null,
        }),
      );
    }
  };
  // The usage watch's end comes after the dispatch's (its pipe reads the dispatched body).
  const end = usage?.ended ?? trace.streamEnd;
  if (end) {
    // A long stream's end may come after the flush interval: flush then too (takeFlush throttles).
    background(end.then(() => {
      finish();
      state.flushMetrics(background);
    }));
  } else finish();
  state.flushMetrics(background);
}
