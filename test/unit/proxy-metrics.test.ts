/** Per-isolate proxy counters and their periodic delta flush. Time is injected. */
import { describe, expect, it } from "vitest";
import { emptyHistogram } from "../../src/telemetry/histogram.ts";
import { FLUSH_INTERVAL_MS, ProxyMetrics, addDelta, emptyDelta, statusClass, type RequestOutcome } from "../../src/telemetry/proxy-metrics.ts";
import { LATENCY_BUCKETS_S, type DeploymentDelta } from "../../src/telemetry/types.ts";
import { T0 } from "../fixtures/clock.ts";
import { histogramOf } from "../fixtures/telemetry.ts";

const ok = (o: Partial<RequestOutcome> = {}): RequestOutcome => ({ status: 200, attempts: 1, rejections: 0, ejections: 0, ttfbMs: 10, ...o });

/** Flushes (at a time surely due) and returns the delta of one deployment. */
function flushOne(m: ProxyMetrics, deployment: string, now = T0): DeploymentDelta {
  const f = m.takeFlush(now);
  expect(f).not.toBeNull();
  const d = f!.deltas.find((x) => x.deployment === deployment);
  expect(d).toBeDefined();
  return d!;
}

describe("statusClass", () => {
  it.each([
    [100, "2xx"],
    [199, "2xx"],
    [200, "2xx"],
    [204, "2xx"],
    [299, "2xx"],
    [300, "3xx"],
    [304, "3xx"],
    [399, "3xx"],
    [400, "4xx"],
    [429, "4xx"],
    [499, "4xx"],
    [500, "5xx"],
    [503, "5xx"],
    [599, "5xx"],
  ] as const)("%i → %s", (status, cls) => {
    expect(statusClass(status)).toBe(cls);
  });
});

describe("ProxyMetrics.recordResponse", () => {
  it("counts prompts keyed by bytes by reason", () => {
    const m = new ProxyMetrics();
    m.recordResponse("q", ok({ promptFallback: "non_text_content" }));
    m.recordResponse("q", ok({ promptFallback: "non_text_content" }));
    m.recordResponse("q", ok({ promptFallback: "template_error" }));
    m.recordResponse("q", ok());
    expect(flushOne(m, "q").promptFallbacks).toEqual({ non_text_content: 2, template_error: 1 });
  });

  it("counts requests with a TTFT objective by what their prediction said, and folds them into totals", () => {
    const m = new ProxyMetrics();
    m.recordResponse("q", ok({ slo: "predicted_met" }));
    m.recordResponse("q", ok({ slo: "predicted_met" }));
    m.recordResponse("q", ok({ slo: "refused", status: 503 }));
    m.recordResponse("q", ok());
    const delta = flushOne(m, "q");
    expect(delta.sloOutcomes).toEqual({ predicted_met: 2, refused: 1 });
    const totals = emptyDelta("q");
    addDelta(totals, delta);
    addDelta(totals, delta);
    expect(totals.sloOutcomes).toEqual({ predicted_met: 4, refused: 2 });
  });

  it("counts requests by status class", () => {
    const m = new ProxyMetrics();
    for (const status of [200, 201, 299, 301, 404, 429, 500, 502, 503]) m.recordResponse("a", ok({ status }));
    expect(flushOne(m, "a").requests).toEqual({ "2xx": 3, "3xx": 1, "4xx": 2, "5xx": 3 });
  });

  it("counts retries as attempts − 1, never negative", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok({ attempts: 1 })); // 0
    m.recordResponse("a", ok({ attempts: 3 })); // 2
    m.recordResponse("a", ok({ attempts: 2 })); // 1
    m.recordResponse("a", ok({ status: 429, attempts: 0 })); // refused before dispatch: 0, not −1
    expect(flushOne(m, "a").retries).toBe(3);
  });

  it("a request refused before any dispatch counts zero retries", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok({ status: 503, attempts: 0 }));
    const d = flushOne(m, "a");
    expect(d.retries).toBe(0);
    expect(d.requests["5xx"]).toBe(1);
  });

  it("sums rejections and ejections", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok({ attempts: 3, rejections: 2, ejections: 1 }));
    m.recordResponse("a", ok({ attempts: 2, rejections: 1, ejections: 0 }));
    m.recordResponse("a", ok({ rejections: 0, ejections: 2 }));
    const d = flushOne(m, "a");
    expect(d.rejections).toBe(3);
    expect(d.ejections).toBe(3);
  });

  it("observes ttfb in seconds (ms / 1000), exact bounds inclusive", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok({ ttfbMs: 5 })); // 0.005 → bucket le=0.005
    m.recordResponse("a", ok({ ttfbMs: 6 })); // 0.006 → le=0.01
    m.recordResponse("a", ok({ ttfbMs: 250 })); // 0.25 → le=0.25
    m.recordResponse("a", ok({ ttfbMs: 90_000 })); // 90 s → +Inf
    const d = flushOne(m, "a");
    expect(d.ttfb.buckets).toEqual(histogramOf(0.005, 0.006, 0.25, 90).buckets);
    expect(d.ttfb.buckets[0]).toBe(1);
    expect(d.ttfb.buckets[1]).toBe(1);
    expect(d.ttfb.buckets[LATENCY_BUCKETS_S.indexOf(0.25)]).toBe(1);
    expect(d.ttfb.buckets[LATENCY_BUCKETS_S.length]).toBe(1);
    expect(d.ttfb.count).toBe(4);
    expect(d.ttfb.sum).toBeCloseTo(0.005 + 0.006 + 0.25 + 90, 9);
  });

  it("does not touch the duration histogram", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok({ ttfbMs: 40 }));
    const d = flushOne(m, "a");
    expect(d.duration).toEqual(emptyHistogram());
  });
});

describe("ProxyMetrics.recordDuration", () => {
  it("observes the total duration in seconds and counts nothing else", () => {
    const m = new ProxyMetrics();
    m.recordDuration("a", 1000); // 1 s → le=1
    m.recordDuration("a", 1500); // 1.5 s → le=2.5
    m.recordDuration("a", 0.5); // 0.0005 s → le=0.005
    const d = flushOne(m, "a");
    expect(d.duration.buckets).toEqual(histogramOf(1, 1.5, 0.0005).buckets);
    expect(d.duration.buckets[LATENCY_BUCKETS_S.indexOf(1)]).toBe(1);
    expect(d.duration.count).toBe(3);
    expect(d.duration.sum).toBeCloseTo(2.5005, 12);
    expect(d.requests).toEqual({ "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 0 });
    expect(d.ttfb).toEqual(emptyHistogram());
    expect(d.retries + d.rejections + d.ejections).toBe(0);
  });
});

describe("ProxyMetrics.flushDueIn", () => {
  it("says nothing waits when nothing was recorded, else how long until the waiting counts' flush is due", () => {
    const m = new ProxyMetrics();
    expect(m.flushDueIn(T0)).toBeNull();
    m.recordResponse("a", ok());
    expect(m.flushDueIn(T0)).toBe(0);
    expect(m.takeFlush(T0)).not.toBeNull();
    expect(m.flushDueIn(T0 + 500)).toBeNull();
    m.recordResponse("a", ok());
    expect(m.flushDueIn(T0 + 500)).toBe(FLUSH_INTERVAL_MS - 500);
    expect(m.takeFlush(T0 + 500 + m.flushDueIn(T0 + 500)!)).not.toBeNull();
  });
});

describe("ProxyMetrics.takeFlush", () => {
  it("returns null when nothing was recorded", () => {
    const m = new ProxyMetrics();
    expect(m.takeFlush(T0)).toBeNull();
    expect(m.takeFlush(T0 + 10 * FLUSH_INTERVAL_MS)).toBeNull();
  });

  it("returns every deployment's delta once, then resets", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok());
    m.recordResponse("b", ok({ status: 500 }));
    m.recordDuration("c", 20);
    const f = m.takeFlush(T0);
    expect(f).not.toBeNull();
    expect(f!.isolate).toBe(m.isolate);
    expect(f!.sentAt).toBe(T0);
    expect(f!.deltas.map((d) => d.deployment).sort()).toEqual(["a", "b", "c"]);
    expect(f!.deltas.find((d) => d.deployment === "a")!.requests["2xx"]).toBe(1);
    expect(f!.deltas.find((d) => d.deployment === "b")!.requests["5xx"]).toBe(1);
    expect(f!.deltas.find((d) => d.deployment === "c")!.duration.count).toBe(1);
    // Nothing new: nothing to send, even long after.
    expect(m.takeFlush(T0 + 60_000)).toBeNull();
  });

  it("returns null before FLUSH_INTERVAL_MS since the last flush, then flushes", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok());
    expect(m.takeFlush(T0)).not.toBeNull();
    m.recordResponse("a", ok({ status: 404 }));
    expect(m.takeFlush(T0 + 1)).toBeNull();
    expect(m.takeFlush(T0 + FLUSH_INTERVAL_MS - 1)).toBeNull();
    // The counts held back are not lost: they come with the next due flush.
    m.recordResponse("a", ok({ status: 404 }));
    const f = m.takeFlush(T0 + FLUSH_INTERVAL_MS);
    expect(f).not.toBeNull();
    expect(f!.sentAt).toBe(T0 + FLUSH_INTERVAL_MS);
    expect(f!.deltas).toHaveLength(1);
    expect(f!.deltas[0]!.requests).toEqual({ "2xx": 0, "3xx": 0, "4xx": 2, "5xx": 0 });
  });

  it("measures the interval from the last successful flush, not from the last empty check", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok());
    expect(m.takeFlush(T0)).not.toBeNull();
    expect(m.takeFlush(T0 + 5_000)).toBeNull(); // nothing recorded: no flush, interval not restarted
    m.recordResponse("a", ok());
    expect(m.takeFlush(T0 + 5_001)).not.toBeNull(); // due since T0 + 2 000
    m.recordResponse("a", ok());
    expect(m.takeFlush(T0 + 5_002)).toBeNull(); // now within the interval of the flush at 5 001
    expect(m.takeFlush(T0 + 5_001 + FLUSH_INTERVAL_MS)).not.toBeNull();
  });

  it("does not flush within FLUSH_INTERVAL_MS of time zero (the initial last-flush time)", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok());
    expect(m.takeFlush(FLUSH_INTERVAL_MS - 1)).toBeNull();
    expect(m.takeFlush(FLUSH_INTERVAL_MS)).not.toBeNull();
  });

  it("hands over deltas that later recordings do not mutate", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok({ attempts: 2 }));
    const f = m.takeFlush(T0)!;
    const sent = structuredClone(f.deltas);
    m.recordResponse("a", ok({ attempts: 5, status: 500 }));
    m.recordDuration("a", 100);
    expect(f.deltas).toEqual(sent);
    const next = m.takeFlush(T0 + FLUSH_INTERVAL_MS)!;
    expect(next.deltas[0]!.retries).toBe(4);
    expect(next.deltas[0]!.requests).toEqual({ "2xx": 0, "3xx": 0, "4xx": 0, "5xx": 1 });
  });

  it("sends a deployment again only if it saw traffic since the last flush", () => {
    const m = new ProxyMetrics();
    m.recordResponse("a", ok());
    m.recordResponse("b", ok());
    m.takeFlush(T0);
    m.recordResponse("b", ok());
    const f = m.takeFlush(T0 + FLUSH_INTERVAL_MS)!;
    expect(f.deltas.map((d) => d.deployment)).toEqual(["b"]);
  });

  it("flushed deltas summed over time equal the totals recorded", () => {
    const m = new ProxyMetrics();
    let now = T0;
    let requests = 0;
    let retries = 0;
    let ttfbCount = 0;
    for (let i = 0; i < 200; i++) {
      m.recordResponse("a", ok({ attempts: 1 + (i % 3), status: i % 7 === 0 ? 502 : 200, ttfbMs: i }));
      now += 250;
      const f = m.takeFlush(now);
      if (f) {
        const d = f.deltas[0]!;
        requests += d.requests["2xx"] + d.requests["5xx"];
        retries += d.retries;
        ttfbCount += d.ttfb.count;
      }
    }
    const last = m.takeFlush(now + FLUSH_INTERVAL_MS);
    if (last) {
      const d = last.deltas[0]!;
      requests += d.requests["2xx"] + d.requests["5xx"];
      retries += d.retries;
      ttfbCount += d.ttfb.count;
    }
    expect(requests).toBe(200);
    expect(ttfbCount).toBe(200);
    // attempts cycle 1,2,3 → retries 0,1,2: 66 full cycles (198) + i=198 (0) + i=199 (1)
    expect(retries).toBe(66 * 3 + 1);
  });
});

describe("ProxyMetrics.isolate", () => {
  it("is stable across flushes and differs between isolates", () => {
    const m = new ProxyMetrics();
    const id = m.isolate;
    expect(id).toMatch(/^[0-9a-f-]{36}$/);
    m.recordResponse("a", ok());
    expect(m.takeFlush(T0)!.isolate).toBe(id);
    m.recordResponse("a", ok());
    expect(m.takeFlush(T0 + FLUSH_INTERVAL_MS)!.isolate).toBe(id);
    expect(m.isolate).toBe(id);
    expect(new ProxyMetrics().isolate).not.toBe(id);
  });
});
