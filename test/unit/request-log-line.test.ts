/** requestLogLine (serve/serve.ts, observe): the same JSON as JSON.stringify of the log line's object, written as one string. */
import { describe, expect, it } from "vitest";
import { requestLogLine, type RequestLogFields } from "../../src/proxy/serve/serve.ts";

/** The object the line used to be built from (serve/serve.ts, observe), stringified. */
function asObject(f: RequestLogFields): string {
  return JSON.stringify({
    msg: "request",
    request_id: f.requestId,
    deployment: f.deployment,
    method: f.method,
    status: f.status,
    replica: f.replica,
    attempts: f.attempts,
    ttfb_ms: f.ttfbMs,
    total_ms: f.totalMs,
    ...(f.tokens ? { key: f.tokens.key, prompt_tokens: f.tokens.prompt, completion_tokens: f.tokens.completion } : {}),
    ...(f.prefix ? { prefix_blocks: f.prefix.blocks, prefix_held: f.prefix.held, prefix_most: f.prefix.most, ...(f.prefix.home !== undefined ? { prefix_home: f.prefix.home } : {}) } : {}),
  });
}

const base: RequestLogFields = { requestId: "3b1f0c9e-8a7d-4c2b-9f1e-2d3c4b5a6f70", deployment: "hello", method: "GET", status: 200, replica: "hello-1", attempts: 1, ttfbMs: 3, totalMs: 4 };

describe("requestLogLine", () => {
  it("writes what JSON.stringify writes, with and without tokens, a prefix belief and a replica", () => {
    for (const f of [base, { ...base, replica: null, attempts: 0, status: 503 }, { ...base, tokens: { key: "sy-abc", prompt: 12, completion: 40 } }, { ...base, tokens: null }, { ...base, prefix: { blocks: 40, blockSize: 16, held: 12, most: 38 } }, { ...base, prefix: { blocks: 40, blockSize: 16, held: 12, most: 38, home: 'r"1' } }, { ...base, tokens: { key: "k", prompt: 1, completion: 2 }, prefix: { blocks: 1, blockSize: 16, held: 0, most: 0 } }]) {
      expect(requestLogLine(f)).toBe(asObject(f));
      expect(JSON.parse(requestLogLine(f))).toEqual(JSON.parse(asObject(f)));
    }
  });

  it("escapes strings that need it exactly as JSON.stringify does", () => {
    const odd = ['a"b', "a\\b", "tab\there", "nl\n", "\u0000\u001f", "é", "\u2028", "\ud800", "😀", ""];
    for (const s of odd) {
      for (const f of [{ ...base, requestId: s }, { ...base, deployment: s }, { ...base, method: s }, { ...base, replica: s }, { ...base, tokens: { key: s, prompt: 1, completion: 2 } }]) {
        expect(requestLogLine(f)).toBe(asObject(f));
      }
    }
  });

  it("writes numbers as JSON.stringify does, non-finite ones as null", () => {
    for (const n of [0, -0, 1.5, 1e21, 2 ** 53, NaN, Infinity, -Infinity]) {
      const f = { ...base, ttfbMs: n, totalMs: n, tokens: { key: "k", prompt: n, completion: n } };
      expect(requestLogLine(f)).toBe(asObject(f));
    }
  });
});
