/** safeToRepeat (serve/body.ts): may a request whose connection was lost run again elsewhere? */
import { describe, it, expect } from "vitest";
import { safeToRepeat } from "../../src/proxy/serve/body.ts";

const none = new Headers();

describe("safeToRepeat", () => {
  it("allows idempotent methods", () => {
    for (const m of ["GET", "HEAD", "OPTIONS", "PUT", "DELETE"]) expect(safeToRepeat(m, none, false), m).toBe(true);
  });

  it("refuses non-idempotent methods without a key", () => {
    for (const m of ["POST", "PATCH", "CONNECT", "TRACE", "PROPFIND"]) expect(safeToRepeat(m, none, false), m).toBe(false);
  });

  it("compares methods exactly (Request normalises standard ones to upper case)", () => {
    expect(safeToRepeat("get", none, false)).toBe(false);
    expect(new Request("http://x/", { method: "get" }).method).toBe("GET");
  });

  it("allows any method with an Idempotency-Key header, any case, even empty", () => {
    expect(safeToRepeat("POST", new Headers({ "Idempotency-Key": "k1" }), false)).toBe(true);
    expect(safeToRepeat("PATCH", new Headers({ "idempotency-key": "k2" }), false)).toBe(true);
    expect(safeToRepeat("POST", new Headers({ "idempotency-key": "" }), false)).toBe(true);
  });

  it("ignores similar-looking headers", () => {
    expect(safeToRepeat("POST", new Headers({ "x-idempotency-key": "k" }), false)).toBe(false);
    expect(safeToRepeat("POST", new Headers({ "idempotency": "k" }), false)).toBe(false);
  });

  it("allows everything on an idempotent deployment", () => {
    for (const m of ["POST", "PATCH", "GET"]) expect(safeToRepeat(m, none, true), m).toBe(true);
  });
});
