/**
 * Property-based fuzzing (fast-check) of the pure parsers and validators at the
 * protocol boundary: the x-switchyard-load header, the control-plane messages,
 * the request keys read from client headers, longest-prefix routing, the error
 * shape, and replica choice / backoff.
 *
 * Deterministic for CI: every property runs with the same fixed seed and a
 * bounded number of runs (the whole file takes a few seconds). To reproduce a
 * failure, fast-check prints the seed and path; to explore further locally, set
 * FUZZ_SEED / FUZZ_RUNS_SCALE.
 */
// @ts-nocheck

import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { defineDeployment, type Deployment, type DeploymentInput } from "../../src/config/deployment.ts";
import { backoffMs, pickReplica, pickReplicaForModel, type ModelHolderChoice, type ReplicaChoice } from "../../src/policy/pick-replica.ts";
import {
  DEPLOYMENT_NAME,
  DeregisterMessage,
  ERROR_STATUS,
  Header,
  MAX_LOAD_HEADER_BYTES,
  MAX_REPLICA_MODELS,
  MODEL_ID,
  PROTOCOL_VERSION,
  REPLICA_ID,
  RegisterMessage,
  ReportMessage,
  errorBody,
  errorResponse,
  formatLoadHeader,
  parseLoadHeader,
  type ErrorCode,
  type Load,
} from "../../src/protocol/index.ts";
import { SESSION_ID, requestKeys } from "../../src/proxy/serve/request.ts";
import { RouteTable } from "../../src/proxy/serve/request.ts";

const SEED = Number(process.env.FUZZ_SEED ?? 20261130);
const SCALE = Number(process.env.FUZZ_RUNS_SCALE ?? 1);
/** Fixed seed, bounded budget: the same inputs on every CI run. */
const params = (numRuns: number): fc.Parameters<unknown> => ({ seed: SEED, numRuns: Math.max(1, Math.round(numRuns * SCALE)) });

// ---------------------------------------------------------------------------
// Shared arbitraries
// ---------------------------------------------------------------------------

const modelId = fc.stringMatching(MODEL_ID);
const replicaId = fc.stringMatching(REPLICA_ID);
const deploymentName = fc.stringMatching(DEPLOYMENT_NAME);

/** Characters a header value may carry (visible ASCII, space, tab, obs-text), trimmed as fetch does. */
const headerValue = fc
  .string({
    unit: fc.oneof(
      fc.constantFrom(" ", "\t", ",", ";", "=", "/", "@", ":", ".", "_", "-", "+"),
      fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
      fc.integer({ min: 0x80, max: 0xff }).map((c) => String.fromCharCode(c)),
    ),
    maxLength: 300,
  })
  .map((s) => s.trim());

const MAX_SAFE = Number.MAX_SAFE_INTEGER;
const isCount = (n: unknown, min: number, max: number) => typeof n === "number" && Number.isSafeInteger(n) && n >= min && n <= max;

/** The documented invariants of a parsed Load (see src/protocol/load.ts). */
function expectValidLoad(load: Load): void {
  expect(Object.keys(load).every((k) => ["seq", "ongoing", "queued", "max", "state", "kv", "models", "loading"].includes(k))).toBe(true);
  expect(isCount(load.seq, 0, MAX_SAFE)).toBe(true);
  expect(isCount(load.ongoing, 0, 1_000_000)).toBe(true);
  expect(isCount(load.queued, 0, 1_000_000)).toBe(true);
  expect(isCount(load.max, 1, 1_000_000)).toBe(true);
  expect(["ready", "draining"]).toContain(load.state);
  if ("kv" in load) {
    expect(typeof load.kv === "number" && Number.isFinite(load.kv) && load.kv >= 0 && load.kv <= 1).toBe(true);
  }
  for (const key of ["models", "loading"] as const) {
    if (!(key in load)) continue;
    const ids = load[key]!;
    expect(Array.isArray(ids)).toBe(true);
    expect(ids.length).toBeLessThanOrEqual(MAX_REPLICA_MODELS);
    for (const id of ids) expect(id).toMatch(MODEL_ID);
  }
}

// ---------------------------------------------------------------------------
// x-switchyard-load
// ---------------------------------------------------------------------------

/** key=value lists close to the real grammar, so the accepting paths are exercised too. */
const loadKey = fc.constantFrom("seq", "ongoing", "queued", "max", "state", "kv", "models", "loading", " seq ", "SEQ", "", "x", "__proto__", "seq=");
const loadValue = fc.oneof(
  fc.nat({ max: 20 }).map(String),
  fc.constantFrom("ready", "draining", "Ready", " ready ", "", "0", "1", "-1", "1e3", "0x10", "1.5", "007", "1000000", "1000001", "999999999999999",
    "1000000000000000", "9007199254740993", "NaN", "Infinity", "-0", "0.5", "1.0000001", " 0.3 ", "a,b", "a,,b", ",", "a b", "org/m@v1"),
  fc.double({ noNaN: false }).map(String),
  fc.array(modelId, { maxLength: 4 }).map((ids) => ids.join(",")),
  fc.string({ maxLength: 20 }),
);
const loadLike = fc
  .array(fc.tuple(loadKey, fc.constantFrom("=", "==", " = ", ""), loadValue), { maxLength: 10 })
  .chain((parts) =>
    fc.constantFrom(";", "; ", ",", ";;").map((sep) => parts.map(([k, eq, v]) => `${k}${eq}${v}`).join(sep)),
  );

const validLoad: fc.Arbitrary<Load> = fc.record(
  {
    // The header grammar takes at most 15 digits, while ReportMessage.seq goes up to
    // MAX_SAFE_INTEGER: a Load with seq >= 1e15 formats to a header parseLoadHeader refuses
    // (reported; unreachable in practice, seq counts responses of one process).
    seq: fc.integer({ min: 0, max: 999_999_999_999_999 }),
    ongoing: fc.integer({ min: 0, max: 1_000_000 }),
    queued: fc.integer({ min: 0, max: 1_000_000 }),
    max: fc.integer({ min: 1, max: 1_000_000 }),
    state: fc.constantFrom("ready" as const, "draining" as const),
    kv: fc.double({ min: 0, max: 1, noNaN: true }),
    models: fc.array(modelId, { maxLength: 8 }),
    loading: fc.array(modelId, { maxLength: 8 }),
  },
  { requiredKeys: ["seq", "ongoing", "queued", "max", "state"] },
);

describe("fuzz: parseLoadHeader", () => {
  it("never throws on arbitrary strings; returns null or a Load satisfying the invariants", () => {
    const input = fc.oneof(
      fc.string({ unit: "binary", maxLength: 200 }),
      fc.string({ unit: "grapheme", maxLength: 200 }),
      loadLike,
      // Huge inputs, around and beyond the 8 KiB bound.
      fc.tuple(loadLike, fc.integer({ min: 7000, max: 20_000 }), fc.constantFrom("a", ";", "=", "a,")).map(([s, n, c]) => s + c.repeat(n)),
      validLoad.map(formatLoadHeader),
    );
    fc.assert(
      fc.property(input, (s) => {
        const load = parseLoadHeader(s);
        if (load === null) return;
        expect(s.length).toBeLessThanOrEqual(8192);
        expectValidLoad(load);
      }),
      params(3000),
    );
  });

  it("accepts null/undefined/empty as 'no load'", () => {
    expect(parseLoadHeader(null)).toBeNull();
    expect(parseLoadHeader(undefined)).toBeNull();
    expect(parseLoadHeader("")).toBeNull();
  });

  it("parse(format(load)) deep-equals load for arbitrary valid loads", () => {
    fc.assert(
      fc.property(validLoad, (load) => {
        const header = formatLoadHeader(load);
        const parsed = parseLoadHeader(header);
        expect(parsed).toEqual(load);
        // And the header round-trips as text.
        expect(formatLoadHeader(parsed!)).toBe(header);
      }),
      params(1000),
    );
  });

  it("a replica's header always parses: model sets that fit in 8 KiB travel in it, longer ones are left out (issue 16: 300 models dropped every header)", () => {
    const shortId = fc.stringMatching(/^[a-z0-9]{1,12}$/);
    fc.assert(
      fc.property(fc.array(shortId, { minLength: 0, maxLength: MAX_REPLICA_MODELS }), fc.constantFrom("models" as const, "loading" as const), (ids, key) => {
        const load: Load = { seq: 1, ongoing: 0, queued: 0, max: 1, state: "ready", [key]: ids };
        const header = formatLoadHeader(load);
        const parsed = parseLoadHeader(header);
        expect(header.length).toBeLessThanOrEqual(MAX_LOAD_HEADER_BYTES);
        const { [key]: _sets, ...counts } = load;
        expect(parsed).toEqual(header.includes(`;${key}=`) ? load : counts);
        // Left out only when it could not fit.
        if (!header.includes(`;${key}=`)) expect(`${header};${key}=${ids.join(",")}`.length).toBeGreaterThan(MAX_LOAD_HEADER_BYTES);
      }),
      params(300),
    );
  });

  it(`a header naming more than ${MAX_REPLICA_MODELS} models is refused (what no replica sends)`, () => {
    const ids = Array.from({ length: MAX_REPLICA_MODELS + 1 }, (_, i) => `m${i % 10}`);
    expect(parseLoadHeader(`seq=1;ongoing=0;queued=0;max=1;state=ready;models=${ids.join(",")}`)).toBeNull();
    expect(parseLoadHeader(`seq=1;ongoing=0;queued=0;max=1;state=ready;models=${ids.slice(1).join(",")}`)?.models).toHaveLength(MAX_REPLICA_MODELS);
  });

  it("a parsed header survives format → parse unchanged (normalisation is idempotent)", () => {
    fc.assert(
      fc.property(loadLike, (s) => {
        const load = parseLoadHeader(s);
        if (load === null) return;
        expect(parseLoadHeader(formatLoadHeader(load))).toEqual(load);
      }),
      params(2000),
    );
  });
});

// ---------------------------------------------------------------------------
// Control-plane messages (zod, strict)
// ---------------------------------------------------------------------------

const httpUrl = fc
  .tuple(
    fc.constantFrom("http", "https", "HTTP", "Https"),
    fc.oneof(fc.domain(), fc.ipV4(), fc.constantFrom("127.0.0.1", "localhost", "[::1]", "gpu-7.example.com")),
    fc.option(fc.integer({ min: 1, max: 65535 }), { nil: undefined }),
    fc.array(fc.stringMatching(/^[A-Za-z0-9._~-]{1,10}$/), { maxLength: 3 }),
  )
  .map(([scheme, host, port, segs]) => `${scheme}://${host}${port === undefined ? "" : `:${port}`}${segs.length ? "/" + segs.join("/") : ""}`);

const badUrl = fc.oneof(
  fc.constantFrom(
    "file:///etc/passwd",
    "ftp://example.com/",
    "javascript:alert(1)",
    "data:text/plain,hi",
    "http://user:pw@example.com/",
    "http://user@example.com/",
    "https://example.com/?q=1",
    "https://example.com/#frag",
    "https://example.com?",
    "http//example.com",
    "example.com",
    "",
    "http://",
    "ws://example.com/",
    "http://exa mple.com/",
  ),
  httpUrl.map((u) => `${u}?x=1`),
  httpUrl.map((u) => `${u}#y`),
  httpUrl.map((u) => u.replace("://", "://u:p@")),
  fc.string({ maxLength: 40 }),
  fc.webUrl({ withQueryParameters: true, withFragments: true }),
  fc.constant(`https://example.com/${"a".repeat(2050)}`),
);

const validRegister = fc.record(
  {
    protocol: fc.constant(PROTOCOL_VERSION),
    deployment: deploymentName,
    replica_id: replicaId,
    url: httpUrl,
    max_ongoing_requests: fc.integer({ min: 1, max: 100_000 }),
    max_models: fc.integer({ min: 1, max: 1024 }),
  },
  { requiredKeys: ["protocol", "deployment", "replica_id", "url", "max_ongoing_requests"] },
);

const validReport = fc.record(
  {
    protocol: fc.constant(PROTOCOL_VERSION),
    deployment: deploymentName,
    replica_id: replicaId,
    seq: fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
    ts: fc.integer({ min: 0, max: 4_102_444_800_000 }),
    state: fc.constantFrom("ready" as const, "draining" as const),
    ongoing: fc.integer({ min: 0, max: 1_000_000 }),
    queued: fc.integer({ min: 0, max: 1_000_000 }),
    kv_cache_usage: fc.double({ min: 0, max: 1, noNaN: true }),
    models: fc.array(modelId, { maxLength: 5 }),
    loading: fc.array(modelId, { maxLength: 5 }),
  },
  { requiredKeys: ["protocol", "deployment", "replica_id", "seq", "ts", "state", "ongoing", "queued"] },
);

const validDeregister = fc.record({ protocol: fc.constant(PROTOCOL_VERSION), deployment: deploymentName, replica_id: replicaId });

type Obj = Record<string, unknown>;

/** One structural mutation of a (valid) message: delete, replace, add, or break a field. */
function mutate(valid: fc.Arbitrary<Obj>): fc.Arbitrary<unknown> {
  const value = fc.oneof(
    fc.anything({ maxDepth: 2 }),
    fc.jsonValue({ maxDepth: 2 }),
    badUrl,
    fc.constantFrom(-1, 0, 1, 1.5, 2 ** 53, Number.NaN, Infinity, -Infinity, "1", "", null, true, [], {}, "ready", "READY", "a b", "A-Za", "-x", "x".repeat(200)),
  );
  return fc
    .tuple(valid, fc.nat(), value, fc.string({ maxLength: 12 }), fc.constantFrom("delete", "replace", "add", "many"))
    .chain(([msg, pick, v, extraKey, op]) => {
      const keys = Object.keys(msg);
      const key = keys[pick % keys.length]!;
      const out: Obj = { ...msg };
      if (op === "delete") delete out[key];
      else if (op === "replace") out[key] = v;
      else if (op === "add") out[extraKey] = v;
      else {
        // Several replacements at once.
        return fc.array(fc.tuple(fc.constantFrom(...keys), value), { minLength: 1, maxLength: 4 }).map((changes) => {
          const o: Obj = { ...msg };
          for (const [k, val] of changes) o[k] = val;
          return o;
        });
      }
      return fc.constant(out);
    });
}

const REGISTER_KEYS = ["protocol", "deployment", "replica_id", "url", "max_ongoing_requests", "max_models"];
const REPORT_KEYS = ["protocol", "deployment", "replica_id", "seq", "ts", "state", "ongoing", "queued", "kv_cache_usage", "models", "loading"];
const DEREGISTER_KEYS = ["protocol", "deployment", "replica_id"];

function expectIds(m: Obj): void {
  expect(m.protocol).toBe(PROTOCOL_VERSION);
  expect(typeof m.deployment === "string" && DEPLOYMENT_NAME.test(m.deployment)).toBe(true);
  expect(typeof m.replica_id === "string" && REPLICA_ID.test(m.replica_id)).toBe(true);
}

function expectReplicaUrl(raw: unknown): void {
  expect(typeof raw).toBe("string");
  const s = raw as string;
  expect(s.length).toBeLessThanOrEqual(2048);
  expect(s.includes("?") || s.includes("#")).toBe(false);
  const u = new URL(s);
  expect(["http:", "https:"]).toContain(u.protocol);
  expect(u.username).toBe("");
  expect(u.password).toBe("");
  expect(u.search).toBe("");
  expect(u.hash).toBe("");
  expect(u.hostname).not.toBe("");
}

function expectRegisterInvariants(m: Obj): void {
  expect(Object.keys(m).every((k) => REGISTER_KEYS.includes(k))).toBe(true);
  expectIds(m);
  expectReplicaUrl(m.url);
  expect(isCount(m.max_ongoing_requests, 1, 100_000)).toBe(true);
  if ("max_models" in m) expect(isCount(m.max_models, 1, 1024)).toBe(true);
}

function expectReportInvariants(m: Obj): void {
  expect(Object.keys(m).every((k) => REPORT_KEYS.includes(k))).toBe(true);
  expectIds(m);
  expect(isCount(m.seq, 0, MAX_SAFE)).toBe(true);
  expect(isCount(m.ts, 0, Number.MAX_VALUE)).toBe(true);
  expect(["ready", "draining"]).toContain(m.state);
  expect(isCount(m.ongoing, 0, 1_000_000)).toBe(true);
  expect(isCount(m.queued, 0, 1_000_000)).toBe(true);
  if ("kv_cache_usage" in m) {
    const kv = m.kv_cache_usage;
    expect(typeof kv === "number" && Number.isFinite(kv) && kv >= 0 && kv <= 1).toBe(true);
  }
  for (const key of ["models", "loading"]) {
    const ids = m[key];
    expect(Array.isArray(ids)).toBe(true);
    expect((ids as unknown[]).length).toBeLessThanOrEqual(1024);
    for (const id of ids as unknown[]) expect(typeof id === "string" && MODEL_ID.test(id)).toBe(true);
  }
}

function expectDeregisterInvariants(m: Obj): void {
  expect(Object.keys(m).every((k) => DEREGISTER_KEYS.includes(k))).toBe(true);
  expectIds(m);
}

const schemas = [
  { name: "RegisterMessage", schema: RegisterMessage, valid: validRegister as fc.Arbitrary<Obj>, check: expectRegisterInvariants },
  { name: "ReportMessage", schema: ReportMessage, valid: validReport as fc.Arbitrary<Obj>, check: expectReportInvariants },
  { name: "DeregisterMessage", schema: DeregisterMessage, valid: validDeregister as fc.Arbitrary<Obj>, check: expectDeregisterInvariants },
] as const;

describe("fuzz: control-plane messages", () => {
  for (const { name, schema, valid, check } of schemas) {
    it(`${name}.safeParse never throws; whatever parses satisfies the invariants`, () => {
      const input = fc.oneof(
        fc.anything({ maxDepth: 3 }),
        fc.jsonValue({ maxDepth: 3 }),
        mutate(valid),
        mutate(valid).chain((m) => mutate(fc.constant(m as Obj))).filter((m) => typeof m === "object" && m !== null),
      );
      let accepted = 0;
      fc.assert(
        fc.property(input, (raw) => {
          const r = schema.safeParse(raw);
          if (!r.success) return;
          accepted++;
          check(r.data as Obj);
        }),
        params(1500),
      );
      // The mutated inputs include plenty of still-valid ones: the accepting path was exercised.
      expect(accepted).toBeGreaterThan(0);
    });

    it(`${name}: arbitrary valid messages parse, unchanged apart from defaults`, () => {
      fc.assert(
        fc.property(valid, (msg) => {
          const r = schema.safeParse(msg);
          if (!r.success) throw new Error(`valid ${name} rejected: ${JSON.stringify(msg)}: ${JSON.stringify(r.error.issues)}`);
          expect(r.data).toMatchObject(msg);
          check(r.data as Obj);
          // Survives a JSON round trip (it travels as JSON).
          expect(schema.safeParse(JSON.parse(JSON.stringify(msg))).success).toBe(true);
        }),
        params(500),
      );
    });

    it(`${name}: an unknown key is never accepted (strict)`, () => {
      const known = new Set(name === "RegisterMessage" ? REGISTER_KEYS : name === "ReportMessage" ? REPORT_KEYS : DEREGISTER_KEYS);
      fc.assert(
        fc.property(valid, fc.string({ maxLength: 16 }).filter((k) => !known.has(k)), fc.jsonValue({ maxDepth: 1 }), (msg, key, v) => {
          expect(schema.safeParse({ ...msg, [key]: v }).success).toBe(false);
        }),
        params(300),
      );
    });
  }

  it("RegisterMessage rejects every URL that is not plain http(s) without credentials, query or fragment", () => {
    fc.assert(
      fc.property(validRegister, badUrl, (msg, url) => {
        const r = RegisterMessage.safeParse({ ...msg, url });
        if (r.success) expectReplicaUrl(r.data.url);
      }),
      params(1000),
    );
  });
});

// ---------------------------------------------------------------------------
// requestKeys
// ---------------------------------------------------------------------------

const base: DeploymentInput = { name: "fuzz", routePrefix: "/fuzz", backend: { kind: "echo" } };
const LISTED = ["m1", "org/m2", "lora:x@v1", "silero-vad-v5"];
const deployments: Deployment[] = [
  defineDeployment(base),
  defineDeployment({ ...base, sessionAffinity: { enabled: false } }),
  defineDeployment({ ...base, multiplexing: {} }),
  defineDeployment({ ...base, multiplexing: { models: LISTED } }),
  defineDeployment({ ...base, multiplexing: { models: LISTED, defaultModel: "org/m2" } }),
  defineDeployment({ ...base, multiplexing: { defaultModel: "fallback" }, sessionAffinity: { enabled: false } }),
];

/** A header value that is sometimes valid and sometimes hostile. */
const keyValue = fc.oneof(headerValue, modelId, fc.constantFrom(...LISTED, "M1", "m1 ", "m1,m2", "x".repeat(128), "x".repeat(129), "a".repeat(257), "-a", "é"), fc.stringMatching(SESSION_ID));

describe("fuzz: requestKeys", () => {
  it("never throws; ok keys match MODEL_ID/SESSION_ID; errors are bad_request or model_not_found", () => {
    const headerArb = fc.record(
      { [Header.model]: keyValue, [Header.rayModel]: keyValue, [Header.clientSession]: keyValue, other: headerValue },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(fc.constantFrom(...deployments), headerArb, (d, init) => {
        const headers = new Headers(init as Record<string, string>);
        const r = requestKeys(headers, d);
        const mux = d.multiplexing;
        const named = headers.get(Header.model) ?? headers.get(Header.rayModel);
        const wanted = mux ? (named ?? mux.defaultModel) : undefined;
        const session = d.sessionAffinity.enabled ? headers.get(Header.clientSession) : null;
        // Oracle for acceptance, straight from the documented rules.
        const modelOk = wanted === undefined || (MODEL_ID.test(wanted) && (mux!.models.length === 0 || mux!.models.includes(wanted)));
        const sessionOk = session === null || SESSION_ID.test(session);
        expect(r.ok).toBe(modelOk && sessionOk);
        if (r.ok) {
          expect(r.keys.model).toBe(wanted);
          expect(r.keys.session ?? null).toBe(session);
          if (r.keys.model !== undefined) expect(r.keys.model).toMatch(MODEL_ID);
          if (r.keys.session !== undefined) expect(r.keys.session).toMatch(SESSION_ID);
          if (!mux) expect(r.keys.model).toBeUndefined();
          if (!d.sessionAffinity.enabled) expect(r.keys.session).toBeUndefined();
        } else {
          expect(["bad_request", "model_not_found"]).toContain(r.code);
          expect(typeof r.message).toBe("string");
          if (r.code === "model_not_found") expect(mux!.models.length).toBeGreaterThan(0);
        }
      }),
      params(3000),
    );
  });
});

// ---------------------------------------------------------------------------
// RouteTable
// ---------------------------------------------------------------------------

const segment = fc.constantFrom("a", "b", "ab", "a.b", "a-b", "x~", "-", "_", "hello", "hello2", "1");
const routePrefix = fc.oneof(
  { weight: 1, arbitrary: fc.constant("/") },
  { weight: 6, arbitrary: fc.array(segment, { minLength: 1, maxLength: 3 }).map((s) => "/" + s.join("/")) },
);
const routePath = fc.oneof(
  fc.array(fc.oneof(segment, fc.constantFrom("", "..", ".", "%2F", "a%2Fb")), { maxLength: 5 }).chain((s) =>
    fc.constantFrom("", "/").map((tail) => "/" + s.join("/") + tail),
  ),
  fc.string({ maxLength: 30 }),
  fc.string({ maxLength: 30 }).map((s) => "/" + s),
);

describe("fuzz: RouteTable", () => {
  it("match returns the longest whole-segment prefix (brute-force oracle)", () => {
    fc.assert(
      fc.property(fc.uniqueArray(routePrefix, { maxLength: 8 }), fc.array(routePath, { minLength: 1, maxLength: 10 }), (prefixes, paths) => {
        const table = new RouteTable(prefixes.map((prefix, i) => ({ prefix, target: i })));
        for (const path of paths) {
          const matching = prefixes.filter((p) => p === "/" || path === p || path.startsWith(p + "/"));
          const longest = matching.sort((a, b) => b.length - a.length)[0];
          const got = table.match(path);
          if (longest === undefined) {
            expect(got).toBeUndefined();
          } else {
            expect(got?.prefix).toBe(longest);
            expect(got?.target).toBe(prefixes.indexOf(longest));
          }
        }
        expect(table.list().map((e) => e.prefix).sort()).toEqual([...prefixes].sort());
      }),
      params(1000),
    );
  });
});

// ---------------------------------------------------------------------------
// Error shape
// ---------------------------------------------------------------------------

const ERROR_CODES = Object.keys(ERROR_STATUS) as ErrorCode[];
/** OpenAI's error classes (plus the Anthropic-style overloaded/timeout ones Switchyard also uses). */
const OPENAI_TYPES = [
  "invalid_request_error",
  "authentication_error",
  "permission_error",
  "not_found_error",
  "rate_limit_error",
  "server_error",
  "api_error",
  "overloaded_error",
  "timeout_error",
];
const requestIdArb = fc.option(fc.stringMatching(/^[A-Za-z0-9._:-]{1,128}$/), { nil: undefined });

describe("fuzz: errorBody / errorResponse", () => {
  it("every code maps to a 4xx/5xx status and an OpenAI-shaped JSON body, for arbitrary messages", async () => {
    expect(ERROR_CODES.length).toBeGreaterThan(10);
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...ERROR_CODES),
        fc.string({ unit: "binary", maxLength: 200 }),
        requestIdArb,
        fc.option(fc.jsonValue({ maxDepth: 2 }), { nil: undefined }),
        fc.option(fc.nat({ max: 3600 }), { nil: undefined }),
        async (code, message, requestId, details, retryAfterSeconds) => {
          const extra = { ...(requestId ? { requestId } : {}), ...(details !== undefined ? { details } : {}) };
          const body = errorBody(code, message, extra);
          expect(body.error.code).toBe(code);
          expect(body.error.message).toBe(message);
          expect(OPENAI_TYPES).toContain(body.error.type);

          const res = errorResponse(code, message, { ...extra, ...(retryAfterSeconds !== undefined ? { retryAfterSeconds } : {}) });
          expect(res.status).toBeGreaterThanOrEqual(400);
          expect(res.status).toBeLessThanOrEqual(599);
          expect(res.status).toBe(ERROR_STATUS[code]);
          expect(res.headers.get("content-type")).toMatch(/^application\/json/);
          if (requestId) expect(res.headers.get("x-request-id")).toBe(requestId);
          if (retryAfterSeconds !== undefined) expect(res.headers.get("retry-after")).toBe(String(retryAfterSeconds));
          const json = (await res.json()) as { error: Record<string, unknown> };
          expect(json.error.code).toBe(code);
          expect(json.error.message).toBe(message);
          expect(json.error.type).toBe(body.error.type);
          expect(JSON.parse(JSON.stringify(body))).toEqual(json);
        },
      ),
      params(500),
    );
  });
});

// ---------------------------------------------------------------------------
// Replica choice and backoff
// ---------------------------------------------------------------------------

/** Injected randomness: a cycle of values in [0, 1). */
const randomSource = fc
  .array(fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }), { minLength: 1, maxLength: 8 })
  .map((values) => {
    let i = 0;
    return () => values[i++ % values.length]!;
  });

const choice = fc.record({ load: fc.nat({ max: 12 }), capacity: fc.integer({ min: 1, max: 8 }) });
const candidates = fc.array(choice, { maxLength: 8 }).map((cs) => cs.map((c, i): ReplicaChoice => ({ id: `r${i}`, ...c })));

const MODELS = ["m1", "m2", "m3", "m4"];
const holderCandidates = fc
  .array(fc.record({ load: fc.nat({ max: 12 }), capacity: fc.integer({ min: 1, max: 8 }), models: fc.subarray(MODELS), loading: fc.subarray(MODELS) }), { maxLength: 8 })
  .map((cs) => cs.map((c, i): ModelHolderChoice => ({ id: `r${i}`, ...c })));

const ratio = (c: ReplicaChoice) => c.load / c.capacity;
/** Strictly worse by the picker's order: relative load, then absolute load. */
const worse = (a: ReplicaChoice, b: ReplicaChoice) => ratio(a) > ratio(b) || (ratio(a) === ratio(b) && a.load > b.load);

describe("fuzz: pickReplica / pickReplicaForModel / backoffMs", () => {
  it("pickReplica returns one of the candidates, with room whenever one has room, never the unique worst", () => {
    fc.assert(
      fc.property(candidates, randomSource, (cs, random) => {
        const got = pickReplica(cs, random);
        if (cs.length === 0) return void expect(got).toBeUndefined();
        expect(got).toBeDefined();
        expect(cs).toContain(got);
        const withRoom = cs.filter((c) => c.load < c.capacity);
        if (withRoom.length > 0) expect(got!.load).toBeLessThan(got!.capacity);
        const pool = withRoom.length > 0 ? withRoom : cs;
        // Two random choices keep the better of two distinct replicas: the strictly worst one can never win.
        if (pool.length >= 2) expect(pool.some((other) => other !== got && !worse(got!, other))).toBe(true);
      }),
      params(2000),
    );
  });

  it("pickReplicaForModel returns a candidate, prefers holders with room, then the emptiest replica with room", () => {
    fc.assert(
      fc.property(holderCandidates, fc.constantFrom(...MODELS, "m5"), randomSource, (cs, model, random) => {
        const got = pickReplicaForModel(cs, model, random);
        if (cs.length === 0) return void expect(got).toBeUndefined();
        expect(got).toBeDefined();
        expect(cs).toContain(got);
        const holds = (c: ModelHolderChoice) => c.models.includes(model) || c.loading.includes(model);
        const room = (c: ModelHolderChoice) => c.load < c.capacity;
        const holdersWithRoom = cs.filter((c) => holds(c) && room(c));
        const othersWithRoom = cs.filter((c) => !holds(c) && room(c));
        if (holdersWithRoom.length > 0) {
          // A holder with room is chosen whenever one exists.
          expect(holds(got!) && room(got!)).toBe(true);
        } else if (othersWithRoom.length > 0) {
          expect(room(got!)).toBe(true);
          const fewest = Math.min(...othersWithRoom.map((c) => c.models.length + c.loading.length));
          expect(got!.models.length + got!.loading.length).toBe(fewest);
        } else if (cs.some(holds)) {
          expect(holds(got!)).toBe(true);
        }
      }),
      params(2000),
    );
  });

  it("backoffMs is an integer in [0, min(cap, base*2^(k-1))), 0 when that ceiling is 0", () => {
    fc.assert(
      fc.property(
        // Retries are 1-based and bounded by policy.maxAttempts (<= 10); up to 1024 the
        // ceiling stays finite. (Beyond, base 0 gives 0 * 2^1024 = NaN: backoffMs(1025, 0, 0) is NaN.)
        fc.integer({ min: 1, max: 1024 }),
        fc.integer({ min: 0, max: 10_000 }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        (k, base, cap, r) => {
          const ceiling = Math.min(cap, base * 2 ** (k - 1));
          const got = backoffMs(k, base, cap, () => r);
          expect(Number.isInteger(got)).toBe(true);
          expect(got).toBeGreaterThanOrEqual(0);
          if (ceiling === 0) expect(got).toBe(0);
          else expect(got).toBeLessThan(ceiling);
        },
      ),
      params(2000),
    );
  });
});
