/**
 * The observe stage (observeRequest, src/proxy/serve/serve.ts): what one request did,
 * counted in the isolate's metrics (read back through the flush they send) and logged
 * as one line, sampled for routine requests; a stream is counted whole at its end.
 */
import { afterEach, describe, expect, it, vi } from "vitest";
import type { Env } from "../../src/env.ts";
import type { DispatchTrace } from "../../src/proxy/serve/dispatch.ts";
import { observeRequest, ROUTINE_REQUEST_MS, type MetricsHolder, type UsageWatch } from "../../src/proxy/serve/serve.ts";
import { ProxyMetrics } from "../../src/telemetry/proxy-metrics.ts";

const env = (logs?: string) => ({ ...(logs !== undefined && { SWITCHYARD_REQUEST_LOGS: logs }) }) as unknown as Env;

/** A metrics holder whose flushes are counted, and the deltas read back. */
function holder(): MetricsHolder & { flushes: number; deltas: () => ReturnType<ProxyMetrics["takeFlush"]> } {
  const metrics = new ProxyMetrics();
  const h = {
    metrics,
    flushes: 0,
    flushMetrics: () => {
      h.flushes++;
    },
    deltas: () => metrics.takeFlush(Date.now() + 60_000),
  };
  return h;
}

const trace = (o: Partial<DispatchTrace> = {}): DispatchTrace => ({ attempts: 1, rejections: 0, ejections: 0, replica: "r1", ...o });
const logged = () => vi.spyOn(console, "log").mockImplementation(() => undefined);

afterEach(() => vi.restoreAllMocks());

describe("observe", () => {
  it("counts a request's status class, retries, refusals, ejections, fallback and durations", () => {
    const h = holder();
    const log = logged();
    observeRequest(env(), h, "d", "POST", 503, "req-1", Date.now(), trace({ attempts: 3, rejections: 2, ejections: 1, promptFallback: "render_budget" }), () => undefined);
    const d = h.deltas()!.deltas.find((x) => x.deployment === "d")!;
    expect(d.requests).toEqual({ "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 1 });
    expect([d.retries, d.rejections, d.ejections]).toEqual([2, 2, 1]);
    expect(d.promptFallbacks).toEqual({ render_budget: 1 });
    expect(d.ttfb.count).toBe(1);
    expect(d.duration.count).toBe(1);
    expect(h.flushes).toBe(1);
    // The one line: the request, its replica and its attempts.
    expect(log).toHaveBeenCalledTimes(1);
    expect(JSON.parse(log.mock.calls[0]![0] as string)).toMatchObject({ msg: "request", request_id: "req-1", deployment: "d", method: "POST", status: 503, replica: "r1", attempts: 3 });
  });

  it("a stream is counted whole at its end: its duration, its tokens under the key, and a second flush", async () => {
    const h = holder();
    const log = logged();
    let end!: () => void;
    const ended = new Promise<void>((r) => (end = r));
    const waited: Promise<unknown>[] = [];
    const usage: UsageWatch = { key: "sk-abc", ended, usage: () => ({ prompt: 7, completion: 5 }) };
    observeRequest(env(), h, "d", "POST", 200, "req-2", Date.now(), trace({ streamEnd: ended }), (p) => waited.push(p), usage);
    expect(log).not.toHaveBeenCalled();
    expect(h.flushes).toBe(1);
    end();
    await Promise.all(waited);
    expect(h.flushes).toBe(2);
    const d = h.deltas()!.deltas.find((x) => x.deployment === "d")!;
    expect(d.duration.count).toBe(1);
    expect(d.tokens).toEqual({ "sk-abc": { prompt: 7, completion: 5 } });
    expect(JSON.parse(log.mock.calls[0]![0] as string)).toMatchObject({ key: "sk-abc", prompt_tokens: 7, completion_tokens: 5 });
  });

  it("SWITCHYARD_REQUEST_LOGS: 'off' writes no line, a fraction samples routine requests and keeps every other", () => {
    const h = holder();
    const log = logged();
    observeRequest(env("off"), h, "d", "GET", 500, "a", Date.now(), trace(), () => undefined);
    expect(log).not.toHaveBeenCalled();
    vi.spyOn(Math, "random").mockReturnValue(0.5);
    // Routine (below 400, first attempt, quick): kept when random() < 0.6, not when < 0.4.
    observeRequest(env("0.4"), h, "d", "GET", 200, "b", Date.now(), trace(), () => undefined);
    expect(log).toHaveBeenCalledTimes(0);
    observeRequest(env("0.6"), h, "d", "GET", 200, "c", Date.now(), trace(), () => undefined);
    expect(log).toHaveBeenCalledTimes(1);
    // Not routine, whatever the draw: an error, a retry, a refusal, an ejection, a slow one.
    for (const [status, t, started] of [
      [404, trace(), Date.now()],
      [200, trace({ attempts: 2 }), Date.now()],
      [200, trace({ rejections: 1 }), Date.now()],
      [200, trace({ ejections: 1 }), Date.now()],
      [200, trace(), Date.now() - ROUTINE_REQUEST_MS - 5],
    ] as const) {
      observeRequest(env("0"), h, "d", "GET", status, "e", started, t, () => undefined);
    }
    expect(log).toHaveBeenCalledTimes(6);
    // Every request is counted, logged or not.
    expect(h.deltas()!.deltas.find((x) => x.deployment === "d")!.requests).toEqual({ "2xx": 6, "3xx": 0, "4xx": 1, "5xx": 1 });
  });
});
