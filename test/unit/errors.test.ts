/** The one error shape: status per code, OpenAI-compatible JSON, headers. */
import { describe, it, expect } from "vitest";
import { ERROR_STATUS, errorBody, errorResponse, type ErrorCode } from "../../src/protocol/index.ts";

const EXPECTED: Record<ErrorCode, { status: number; type: string }> = {
  bad_request: { status: 400, type: "invalid_request_error" },
  invalid_message: { status: 400, type: "invalid_request_error" },
  payload_too_large: { status: 413, type: "invalid_request_error" },
  unauthorized: { status: 401, type: "authentication_error" },
  route_not_found: { status: 404, type: "not_found_error" },
  model_not_found: { status: 404, type: "invalid_request_error" },
  kv_blocks_not_found: { status: 404, type: "not_found_error" },
  header_too_large: { status: 431, type: "invalid_request_error" },
  rate_limited: { status: 429, type: "rate_limit_error" },
  token_limited: { status: 429, type: "rate_limit_error" },
  queue_full: { status: 503, type: "overloaded_error" },
  queue_timeout: { status: 503, type: "overloaded_error" },
  shed: { status: 429, type: "rate_limit_error" },
  auth_unavailable: { status: 503, type: "server_error" },
  method_not_allowed: { status: 405, type: "invalid_request_error" },
  unknown_replica: { status: 409, type: "invalid_request_error" },
  no_ready_replica: { status: 503, type: "overloaded_error" },
  all_replicas_busy: { status: 503, type: "overloaded_error" },
  deadline_exceeded: { status: 504, type: "timeout_error" },
  request_timeout: { status: 408, type: "timeout_error" },
  upstream_failed: { status: 502, type: "server_error" },
  stream_handover: { status: 503, type: "overloaded_error" },
  slo_unattainable: { status: 503, type: "overloaded_error" },
  internal_error: { status: 500, type: "server_error" },
};
const CODES = Object.keys(EXPECTED) as ErrorCode[];

describe("ERROR_STATUS", () => {
  it("covers exactly the documented codes", () => {
    expect(Object.keys(ERROR_STATUS).sort()).toEqual([...CODES].sort());
  });
});

describe("errorResponse", () => {
  for (const code of CODES) {
    it(`${code} → ${EXPECTED[code].status} with type ${EXPECTED[code].type}`, async () => {
      const res = errorResponse(code, `message for ${code}`);
      expect(res.status).toBe(EXPECTED[code].status);
      expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
      expect(await res.json()).toEqual({ error: { code, message: `message for ${code}`, type: EXPECTED[code].type } });
    });
  }

  it("sets x-request-id and puts request_id in the body", async () => {
    const res = errorResponse("bad_request", "nope", { requestId: "req-1" });
    expect(res.headers.get("x-request-id")).toBe("req-1");
    expect(await res.json()).toEqual({ error: { code: "bad_request", message: "nope", type: "invalid_request_error", request_id: "req-1" } });
  });

  it("omits x-request-id and request_id when there is none (or it is empty)", async () => {
    for (const extra of [undefined, {}, { requestId: "" }]) {
      const res = errorResponse("bad_request", "nope", extra);
      expect(res.headers.has("x-request-id")).toBe(false);
      const body = (await res.json()) as { error: Record<string, unknown> };
      expect("request_id" in body.error).toBe(false);
    }
  });

  it("sets Retry-After when asked (including 0)", () => {
    expect(errorResponse("no_ready_replica", "x", { retryAfterSeconds: 1 }).headers.get("retry-after")).toBe("1");
    expect(errorResponse("all_replicas_busy", "x", { retryAfterSeconds: 0 }).headers.get("retry-after")).toBe("0");
    expect(errorResponse("all_replicas_busy", "x", { retryAfterSeconds: 30 }).headers.get("retry-after")).toBe("30");
  });

  it("has no Retry-After unless asked", () => {
    expect(errorResponse("no_ready_replica", "x").headers.has("retry-after")).toBe(false);
    expect(errorResponse("bad_request", "x", { requestId: "r" }).headers.has("retry-after")).toBe(false);
  });

  it("includes details when given, even falsy ones, and drops undefined", async () => {
    const withDetails = (await errorResponse("all_replicas_busy", "x", { details: { attempts: 3 } }).json()) as { error: Record<string, unknown> };
    expect(withDetails.error.details).toEqual({ attempts: 3 });
    const zero = (await errorResponse("bad_request", "x", { details: 0 }).json()) as { error: Record<string, unknown> };
    expect(zero.error.details).toBe(0);
    const none = (await errorResponse("bad_request", "x", { details: undefined }).json()) as { error: Record<string, unknown> };
    expect("details" in none.error).toBe(false);
  });

  it("adds extra headers; requestId and retryAfterSeconds take precedence over them", () => {
    const res = errorResponse("no_ready_replica", "x", {
      headers: { "x-extra": "1", "x-request-id": "from-headers", "retry-after": "99" },
      requestId: "from-option",
      retryAfterSeconds: 2,
    });
    expect(res.headers.get("x-extra")).toBe("1");
    expect(res.headers.get("x-request-id")).toBe("from-option");
    expect(res.headers.get("retry-after")).toBe("2");
  });

  it("serialises messages with quotes and unicode safely", async () => {
    const msg = 'deployment "h\u00e9llo" \n has </script> no replica';
    const body = (await errorResponse("no_ready_replica", msg).json()) as { error: { message: string } };
    expect(body.error.message).toBe(msg);
  });
});

describe("errorBody", () => {
  it("is the same object the response carries", async () => {
    const extra = { requestId: "abc", details: ["d"] };
    expect(await errorResponse("upstream_failed", "m", extra).json()).toEqual(errorBody("upstream_failed", "m", extra));
  });

  it("has only code, message and type without extras", () => {
    expect(errorBody("internal_error", "boom")).toEqual({ error: { code: "internal_error", message: "boom", type: "server_error" } });
  });
});
