/**
 * The one error shape every Switchyard error response uses. It is a superset of
 * OpenAI's error object ({ error: { message, type, code } }) so OpenAI clients
 * read our errors too.
 */
export type ErrorCode =
  | "bad_request"
  | "invalid_message"
  | "payload_too_large"
  | "unauthorized"
  | "route_not_found"
  | "model_not_found"
  | "kv_blocks_not_found"
  | "header_too_large"
  | "rate_limited"
  | "token_limited"
  | "queue_full"
  | "queue_timeout"
  | "shed"
  | "auth_unavailable"
  | "method_not_allowed"
  | "unknown_replica"
  | "no_ready_replica"
  | "all_replicas_busy"
  | "deadline_exceeded"
  | "request_timeout"
  | "upstream_failed"
  | "stream_handover"
  | "slo_unattainable"
  | "internal_error";

export const ERROR_STATUS: Record<ErrorCode, number> = {
  bad_request: 400,
  invalid_message: 400,
  payload_too_large: 413,
  unauthorized: 401,
  route_not_found: 404,
  model_not_found: 404,
  kv_blocks_not_found: 404,
  header_too_large: 431,
  rate_limited: 429,
  token_limited: 429,
  queue_full: 503,
  queue_timeout: 503,
  shed: 429,
  auth_unavailable: 503,
  method_not_allowed: 405,
  unknown_replica: 409,
  no_ready_replica: 503,
  all_replicas_busy: 503,
  deadline_exceeded: 504,
  request_timeout: 408,
  upstream_failed: 502,
  stream_handover: 503,
  slo_unattainable: 503,
  internal_error: 500,
};

export interface ErrorBody {
  error: {
    code: ErrorCode;
    message: string;
    /** OpenAI-style error class. */
    type: "invalid_request_error" | "authentication_error" | "rate_limit_error" | "not_found_error" | "server_error" | "overloaded_error" | "timeout_error";
    request_id?: string;
    details?: unknown;
  };
}

const TYPE: Record<ErrorCode, ErrorBody["error"]["type"]> = {
  bad_request: "invalid_request_error",
  invalid_message: "invalid_request_error",
  payload_too_large: "invalid_request_error",
  unauthorized: "authentication_error",
  route_not_found: "not_found_error",
  model_not_found: "invalid_request_error",
  kv_blocks_not_found: "not_found_error",
  header_too_large: "invalid_request_error",
  rate_limited: "rate_limit_error",
  token_limited: "rate_limit_error",
  queue_full: "overloaded_error",
  queue_timeout: "overloaded_error",
  shed: "rate_limit_error",
  auth_unavailable: "server_error",
  method_not_allowed: "invalid_request_error",
  unknown_replica: "invalid_request_error",
  no_ready_replica: "overloaded_error",
  all_replicas_busy: "overloaded_error",
  deadline_exceeded: "timeout_error",
  request_timeout: "timeout_error",
  upstream_failed: "server_error",
  stream_handover: "overloaded_error",
  slo_unattainable: "overloaded_error",
  internal_error: "server_error",
};

export function errorBody(code: ErrorCode, message: string, extra?: { requestId?: string; details?: unknown }): ErrorBody {
  const error: ErrorBody["error"] = { code, message, type: TYPE[code] };
  if (extra?.requestId) error.request_id = extra.requestId;
  if (extra?.details !== undefined) error.details = extra.details;
  return { error };
}

/** A JSON error response with the right status (and Retry-After for 503s). */
export function errorResponse(
  code: ErrorCode,
  message: string,
  extra?: { requestId?: string; details?: unknown; retryAfterSeconds?: number; headers?: Record<string, string> },
): Response {
  const headers: Record<string, string> = { "content-type": "application/json; charset=utf-8", ...extra?.headers };
  if (extra?.requestId) headers["x-request-id"] = extra.requestId;
  if (extra?.retryAfterSeconds !== undefined) headers["retry-after"] = String(extra.retryAfterSeconds);
  return new Response(JSON.stringify(errorBody(code, message, extra)), { status: ERROR_STATUS[code], headers });
}
