/**
 * After each proxied request: the isolate's metrics (flushed to the Telemetry
 * object every few seconds) and one structured JSON log line with the request
 * id, deployment, replica, status and timings (Workers Logs / `wrangler tail`
 * in production; workerd's output locally).
 */
import type { Env } from "../env.ts";
import type { DispatchTrace } from "./dispatch.ts";
import type { IsolateState } from "./isolate-state.ts";

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
): void {
  const ttfbMs = Date.now() - started;
  state.metrics.recordResponse(deployment, { status, attempts: trace.attempts, rejections: trace.rejections, ejections: trace.ejections, ttfbMs });
  const logs = env.SWITCHYARD_REQUEST_LOGS !== "off";
  const finish = () => {
    const totalMs = Date.now() - started;
    state.metrics.recordDuration(deployment, totalMs);
    if (logs) {
      console.log(
        JSON.stringify({
          msg: "request",
          request_id: requestId,
          deployment,
          method,
          status,
          replica: trace.replica ?? null,
          attempts: trace.attempts,
          ttfb_ms: ttfbMs,
          total_ms: totalMs,
        }),
      );
    }
  };
  if (trace.streamEnd) background(trace.streamEnd.then(finish));
  else finish();
  state.flushMetrics(background);
}
