/**
 * The observe stage: what one request did, counted (this isolate's metrics,
 * flushed to the Telemetry shards) and logged (one JSON line, sampled).
 */
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
let logSetting: { value: string | undefined; rate: number | "off" } | undefined;

export function requestLogRate(value: string | undefined): number | "off" {
  if (logSetting === undefined || logSetting.value !== value) {
    const fraction = value !== undefined && /^(0|1|0?\.\d{1,6}|1\.0{1,6})$/.test(value) ? Number(value) : 1;
    logSetting = { value, rate: value === "off" ? "off" : fraction };
  }
  return logSetting.rate;
}

/** What this stage needs of the isolate's state (serve.ts, IsolateState): its counters, and their flush. */
export interface MetricsHolder {
  readonly metrics: ProxyMetrics;
  flushMetrics(background: (p: Promise<unknown>) => void): void;
}

export function observeRequest(
  env: Env,
  state: MetricsHolder,
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
  state.metrics.recordResponse(deployment, { status, attempts: trace.attempts, rejections: trace.rejections, ejections: trace.ejections, ttfbMs, ...(trace.promptFallback !== undefined ? { promptFallback: trace.promptFallback } : {}) });
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
  tokens?: { key: string; prompt: number; completion: number } | null;
}

/** Printable ASCII without `"` and `\`: quoted as it is (JSON.stringify's output too). */
const PLAIN = /^[\x20\x21\x23-\x5b\x5d-\x7e]*$/;

/** A JSON string literal; JSON.stringify only for the rare value that needs escapes. */
function str(s: string): string {
  return PLAIN.test(s) ? `"${s}"` : JSON.stringify(s);
}

/** A JSON number as JSON.stringify writes it (null for a non-finite one). */
function num(n: number): string {
  return Number.isFinite(n) ? String(n) : "null";
}

export function requestLogLine(f: RequestLogFields): string {
  let line =
    `{"msg":"request","request_id":${str(f.requestId)},"deployment":${str(f.deployment)},"method":${str(f.method)},"status":${num(f.status)}` +
    `,"replica":${f.replica === null ? "null" : str(f.replica)},"attempts":${num(f.attempts)},"ttfb_ms":${num(f.ttfbMs)},"total_ms":${num(f.totalMs)}`;
  const t = f.tokens;
  if (t) line += `,"key":${str(t.key)},"prompt_tokens":${num(t.prompt)},"completion_tokens":${num(t.completion)}`;
  return `${line}}`;
}
