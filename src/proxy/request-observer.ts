/**
 * After each proxied request: the isolate's metrics (flushed to the Telemetry
 * object every few seconds) and one structured JSON log line with the request
 * id, deployment, replica, status and timings (Workers Logs / `wrangler tail`
 * in production; workerd's output locally).
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
  const logs = env.SWITCHYARD_REQUEST_LOGS !== "off";
  const finish = () => {
    const totalMs = Date.now() - started;
    state.metrics.recordDuration(deployment, totalMs);
    const tokens = usage?.usage() ?? null;
    if (tokens) state.metrics.recordTokens(deployment, usage!.key, tokens);
    if (logs) {
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
