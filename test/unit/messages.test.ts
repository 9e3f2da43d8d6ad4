/**
 * Control-plane messages (replica → edge): strict zod schemas. Valid messages
 * pass; anything off-protocol is refused with an issue, never accepted.
 */
import { describe, it, expect } from "vitest";
import { T0 } from "../fixtures/clock.ts";
import { DeregisterMessage, MODEL_ID, PROTOCOL_VERSION, RegisterMessage, ReportMessage } from "../../src/protocol/index.ts";

const register = { protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: "hello-123", url: "http://127.0.0.1:8001", max_ongoing_requests: 5 };
const report = {
  protocol: PROTOCOL_VERSION,
  deployment: "hello",
  replica_id: "hello-123",
  seq: 7,
  ts: T0,
  state: "ready",
  ongoing: 2,
  queued: 0,
};
const deregister = { protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: "hello-123" };

/** safeParse must answer, never throw: a bad message from a replica is a 400, not a 500. */
function accepts(schema: { safeParse: (v: unknown) => { success: boolean } }, value: unknown): boolean {
  return schema.safeParse(value).success;
}

const schemas = [
  ["RegisterMessage", RegisterMessage, register],
  ["ReportMessage", ReportMessage, report],
  ["DeregisterMessage", DeregisterMessage, deregister],
] as const;

const GOOD_IDS = ["a", "A", "0", "hello-123", "gpu-7.us-east:8001", "r_1", "x".repeat(128), "Z9._:-"];
const BAD_IDS = ["", "-lead", ".lead", "_lead", ":lead", "x".repeat(129), "has space", "slash/id", "uni\u00e9", "semi;colon", "new\nline", 42, null];
const GOOD_MODEL_IDS = ["a", "9", "m1", "org/name", "meta-llama/Llama-3.1-8B-Instruct", "lora:adapter@v2", "a+b", "a.b_c-d:e", "x".repeat(128)];
const BAD_MODEL_IDS = ["", "x".repeat(129), "-lead", ".lead", "/lead", "_lead", "@lead", "has space", "a,b", "a;b", "a=b", "mod\u00e8le", "new\nline", "tab\there", 'quo"te', "a#b", "a?b", "a\\b"];
const GOOD_NAMES = ["a", "hello", "hello-world", "h3", "a-", "a" + "b".repeat(62)];
const BAD_NAMES = ["", "Hello", "1abc", "-abc", "a_b", "a.b", "a b", "a" + "b".repeat(63), "héllo", 7, null];

for (const [name, schema, valid] of schemas) {
  describe(`${name}: shared fields`, () => {
    it("accepts a valid message", () => {
      const parsed = schema.safeParse(valid);
      expect(parsed.success).toBe(true);
    });

    it("rejects a wrong protocol version", () => {
      for (const protocol of [0, 2, PROTOCOL_VERSION + 1, String(PROTOCOL_VERSION), null]) {
        expect(accepts(schema, { ...valid, protocol }), String(protocol)).toBe(false);
      }
      const { protocol: _p, ...without } = valid;
      expect(accepts(schema, without)).toBe(false);
    });

    it("rejects unknown fields (strict)", () => {
      expect(accepts(schema, { ...valid, extra: 1 })).toBe(false);
      expect(accepts(schema, { ...valid, replicaId: "typo" })).toBe(false);
    });

    it("accepts well-formed replica ids", () => {
      for (const replica_id of GOOD_IDS) expect(accepts(schema, { ...valid, replica_id }), replica_id).toBe(true);
    });

    it("rejects bad replica ids", () => {
      for (const replica_id of BAD_IDS) expect(accepts(schema, { ...valid, replica_id }), String(replica_id)).toBe(false);
    });

    it("accepts well-formed deployment names", () => {
      for (const deployment of GOOD_NAMES) expect(accepts(schema, { ...valid, deployment }), deployment).toBe(true);
    });

    it("rejects bad deployment names", () => {
      for (const deployment of BAD_NAMES) expect(accepts(schema, { ...valid, deployment }), String(deployment)).toBe(false);
    });

    it("rejects non-objects", () => {
      for (const v of [null, undefined, 1, "x", [], true]) expect(accepts(schema, v)).toBe(false);
    });
  });
}

describe("RegisterMessage", () => {
  it("keeps the message as sent", () => {
    const parsed = RegisterMessage.parse(register);
    expect(parsed).toEqual(register);
  });

  it("accepts http and https urls, with port and path", () => {
    for (const url of ["http://127.0.0.1:8001", "https://gpu-1.example.com", "http://[::1]:9000", "https://example.com/base", "http://localhost:1/"]) {
      expect(accepts(RegisterMessage, { ...register, url }), url).toBe(true);
    }
  });

  it("rejects non-http(s) urls", () => {
    for (const url of ["ftp://example.com/", "ws://example.com", "file:///etc/passwd", "mailto:a@b.c", "javascript:alert(1)", "data:text/plain,hi"]) {
      expect(accepts(RegisterMessage, { ...register, url }), url).toBe(false);
    }
  });

  it("rejects urls with credentials", () => {
    for (const url of ["http://user:pass@example.com", "http://user@example.com", "https://:secret@example.com"]) {
      expect(accepts(RegisterMessage, { ...register, url }), url).toBe(false);
    }
  });

  it("rejects urls with a query or a fragment", () => {
    for (const url of ["http://example.com/?a=1", "http://example.com?x", "http://example.com/#frag", "http://example.com/p?q#f"]) {
      expect(accepts(RegisterMessage, { ...register, url }), url).toBe(false);
    }
  });

  // Regression (fixed): new URL("http://h/?").search and .hash of "http://h/#" are "", so the
  // refine lets an empty query / fragment through; the proxy then builds
  // `${url}${path}` = "http://h/?/hello", sending the path as a query string.
  it("rejects urls with an empty query or fragment marker", () => {
    expect(accepts(RegisterMessage, { ...register, url: "http://example.com/?" })).toBe(false);
    expect(accepts(RegisterMessage, { ...register, url: "http://example.com/#" })).toBe(false);
  });

  it("rejects urls that are not strings or too long", () => {
    for (const url of [42, null, undefined, { href: "http://x" }]) expect(accepts(RegisterMessage, { ...register, url })).toBe(false);
    expect(accepts(RegisterMessage, { ...register, url: `http://example.com/${"a".repeat(2048)}` })).toBe(false);
  });

  // Regression (fixed): for a string that is not a URL at all, zod still runs the refine
  // after .url() failed, and its `new URL(raw)` throws TypeError out of safeParse
  // (routes/control.ts then answers 500 instead of 400 invalid_message).
  it("answers (does not throw) for strings that are not URLs", () => {
    for (const url of ["not a url", "", "http://", "//example.com"]) {
      expect(() => RegisterMessage.safeParse({ ...register, url })).not.toThrow();
      expect(accepts(RegisterMessage, { ...register, url })).toBe(false);
    }
  });

  it("max_ongoing_requests is an integer in 1..100,000", () => {
    for (const v of [1, 5, 100_000]) expect(accepts(RegisterMessage, { ...register, max_ongoing_requests: v }), String(v)).toBe(true);
    for (const v of [0, -1, 100_001, 1.5, NaN, Infinity, "5", null]) {
      expect(accepts(RegisterMessage, { ...register, max_ongoing_requests: v }), String(v)).toBe(false);
    }
  });

  it("max_models is optional: an integer in 1..1024", () => {
    expect(RegisterMessage.parse(register).max_models).toBeUndefined();
    expect("max_models" in RegisterMessage.parse(register)).toBe(false);
    for (const v of [1, 3, 1024]) expect(RegisterMessage.parse({ ...register, max_models: v }).max_models, String(v)).toBe(v);
    for (const v of [0, -1, 1025, 2.5, NaN, Infinity, "3", null]) {
      expect(accepts(RegisterMessage, { ...register, max_models: v }), String(v)).toBe(false);
    }
  });

  it("region is optional: a name of 1-64 of [A-Za-z0-9._-], starting with a letter or digit (issue 57)", () => {
    expect("region" in RegisterMessage.parse(register)).toBe(false);
    for (const v of ["us-east-1", "eu-central", "fra", "EU_West.2", "9", "r".repeat(64)]) expect(RegisterMessage.parse({ ...register, region: v }).region, v).toBe(v);
    for (const v of ["", "-us", ".us", "_us", "r".repeat(65), "us east", "us/east", "région", "us\nx", 1, null]) {
      expect(accepts(RegisterMessage, { ...register, region: v }), JSON.stringify(v)).toBe(false);
    }
  });

  it("coordinates are optional: finite degrees, lat -90..90 and lon -180..180, nothing else (issue 57)", () => {
    expect("coordinates" in RegisterMessage.parse(register)).toBe(false);
    for (const c of [{ lat: 50.11, lon: 8.68 }, { lat: -90, lon: -180 }, { lat: 90, lon: 180 }, { lat: 0, lon: 0 }, { lat: -33.92, lon: 18.42 }]) {
      expect(RegisterMessage.parse({ ...register, coordinates: c }).coordinates, JSON.stringify(c)).toEqual(c);
    }
    const bad: unknown[] = [
      { lat: 90.01, lon: 0 },
      { lat: -91, lon: 0 },
      { lat: 0, lon: 180.5 },
      { lat: 0, lon: -181 },
      { lat: NaN, lon: 0 },
      { lat: 0, lon: NaN },
      { lat: Infinity, lon: 0 },
      { lat: 0, lon: -Infinity },
      { lat: "50", lon: 8 },
      { lat: 50 },
      { lon: 8 },
      { lat: 50, lon: 8, alt: 100 },
      [50, 8],
      "50,8",
      null,
    ];
    for (const c of bad) expect(accepts(RegisterMessage, { ...register, coordinates: c }), String(JSON.stringify(c))).toBe(false);
  });

  it("has no models or loading fields (those belong to reports)", () => {
    expect(accepts(RegisterMessage, { ...register, models: [] })).toBe(false);
    expect(accepts(RegisterMessage, { ...register, loading: [] })).toBe(false);
    expect(accepts(RegisterMessage, { ...register, maxModels: 3 })).toBe(false);
  });

  it("requires every field", () => {
    for (const key of Object.keys(register)) {
      const copy: Record<string, unknown> = { ...register };
      delete copy[key];
      expect(accepts(RegisterMessage, copy), key).toBe(false);
    }
  });
});

describe("ReportMessage", () => {
  it("defaults models to [] and leaves kv_cache_usage absent", () => {
    const parsed = ReportMessage.parse(report);
    expect(parsed.models).toEqual([]);
    expect(parsed.loading).toEqual([]);
    expect(parsed.kv_cache_usage).toBeUndefined();
  });

  it("accepts the optional fields", () => {
    const parsed = ReportMessage.parse({ ...report, kv_cache_usage: 0.5, models: ["m1", "m2"], state: "draining" });
    expect(parsed).toMatchObject({ kv_cache_usage: 0.5, models: ["m1", "m2"], state: "draining" });
  });

  it("seq is a safe non-negative integer", () => {
    for (const seq of [0, 1, Number.MAX_SAFE_INTEGER]) expect(accepts(ReportMessage, { ...report, seq }), String(seq)).toBe(true);
    for (const seq of [-1, 1.5, Number.MAX_SAFE_INTEGER + 2, NaN, Infinity, "1"]) expect(accepts(ReportMessage, { ...report, seq }), String(seq)).toBe(false);
  });

  it("ts is a non-negative integer", () => {
    expect(accepts(ReportMessage, { ...report, ts: 0 })).toBe(true);
    for (const ts of [-1, 1.5, "now", null]) expect(accepts(ReportMessage, { ...report, ts }), String(ts)).toBe(false);
  });

  it("state is ready or draining", () => {
    for (const state of ["busy", "READY", "", null]) expect(accepts(ReportMessage, { ...report, state }), String(state)).toBe(false);
  });

  it("ongoing and queued are integers in 0..1,000,000", () => {
    for (const key of ["ongoing", "queued"]) {
      for (const v of [0, 1_000_000]) expect(accepts(ReportMessage, { ...report, [key]: v }), `${key}=${v}`).toBe(true);
      for (const v of [-1, 1_000_001, 0.5, NaN, "3"]) expect(accepts(ReportMessage, { ...report, [key]: v }), `${key}=${v}`).toBe(false);
    }
  });

  it("kv_cache_usage is a fraction in 0..1", () => {
    for (const v of [0, 0.25, 1]) expect(accepts(ReportMessage, { ...report, kv_cache_usage: v }), String(v)).toBe(true);
    for (const v of [-0.01, 1.01, NaN, Infinity, "0.5", null]) expect(accepts(ReportMessage, { ...report, kv_cache_usage: v }), String(v)).toBe(false);
  });

  it("models and loading are lists of model ids, at most 1024 of them", () => {
    for (const key of ["models", "loading"] as const) {
      expect(accepts(ReportMessage, { ...report, [key]: ["m".repeat(128)] }), key).toBe(true);
      expect(accepts(ReportMessage, { ...report, [key]: Array.from({ length: 1024 }, (_, i) => `m${i}`) }), key).toBe(true);
      expect(accepts(ReportMessage, { ...report, [key]: [] }), key).toBe(true);
      expect(accepts(ReportMessage, { ...report, [key]: [""] }), key).toBe(false);
      expect(accepts(ReportMessage, { ...report, [key]: ["m".repeat(129)] }), key).toBe(false);
      expect(accepts(ReportMessage, { ...report, [key]: Array.from({ length: 1025 }, (_, i) => `m${i}`) }), key).toBe(false);
      expect(accepts(ReportMessage, { ...report, [key]: "m1" }), key).toBe(false);
      expect(accepts(ReportMessage, { ...report, [key]: [1] }), key).toBe(false);
      expect(accepts(ReportMessage, { ...report, [key]: null }), key).toBe(false);
    }
  });

  it("model ids must match MODEL_ID (they travel in headers and the comma-separated load header)", () => {
    for (const id of GOOD_MODEL_IDS) {
      expect(MODEL_ID.test(id), id).toBe(true);
      expect(accepts(ReportMessage, { ...report, models: [id] }), id).toBe(true);
      expect(accepts(ReportMessage, { ...report, loading: [id] }), id).toBe(true);
    }
    for (const id of BAD_MODEL_IDS) {
      expect(MODEL_ID.test(id), id).toBe(false);
      expect(accepts(ReportMessage, { ...report, models: [id] }), id).toBe(false);
      expect(accepts(ReportMessage, { ...report, loading: [id] }), id).toBe(false);
      // One bad id spoils the whole list.
      expect(accepts(ReportMessage, { ...report, models: ["ok", id] }), id).toBe(false);
    }
  });

  it("defaults loading to [] and keeps it as sent", () => {
    expect(ReportMessage.parse(report).loading).toEqual([]);
    expect(ReportMessage.parse({ ...report, models: ["a"], loading: ["b", "c"] })).toMatchObject({ models: ["a"], loading: ["b", "c"] });
  });

  it("has no url or capacity fields (those belong to register)", () => {
    expect(accepts(ReportMessage, { ...report, url: "http://127.0.0.1:1" })).toBe(false);
    expect(accepts(ReportMessage, { ...report, max: 5 })).toBe(false);
  });
});

describe("DeregisterMessage", () => {
  it("parses to exactly its three fields", () => {
    expect(DeregisterMessage.parse(deregister)).toEqual(deregister);
  });

  it("rejects report fields", () => {
    expect(accepts(DeregisterMessage, { ...deregister, seq: 1 })).toBe(false);
  });
});
