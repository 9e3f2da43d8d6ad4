/** requestLogRate (serve/serve.ts, observe): how SWITCHYARD_REQUEST_LOGS reads. */
import { describe, expect, it } from "vitest";
import { requestLogRate } from "../../src/proxy/serve/serve.ts";

describe("requestLogRate", () => {
  it("logs every line by default and for anything that is not off or a fraction", () => {
    for (const v of [undefined, "on", "", "yes", "2", "-0.1", "0.5x", "1e-2", "0,5"]) expect(requestLogRate(v), String(v)).toBe(1);
  });

  it("logs no line when off", () => {
    expect(requestLogRate("off")).toBe("off");
  });

  it("reads a decimal fraction from 0 to 1", () => {
    expect(requestLogRate("0")).toBe(0);
    expect(requestLogRate("0.05")).toBe(0.05);
    expect(requestLogRate(".5")).toBe(0.5);
    expect(requestLogRate("1")).toBe(1);
    expect(requestLogRate("1.0")).toBe(1);
    // Read again after another value: not stuck on the first one read.
    expect(requestLogRate("0.25")).toBe(0.25);
    expect(requestLogRate("on")).toBe(1);
  });
});
