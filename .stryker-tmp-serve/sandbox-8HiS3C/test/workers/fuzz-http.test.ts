/**
 * Property-based fuzzing (fast-check) of the real Worker's HTTP boundary, inside
 * workerd: the replica control plane, the system routes and the proxied routes.
 *
 * What must hold for any input:
 *   - the Worker never answers 500 (nor throws);
 *   - every error answer is JSON in the one error shape { error: { code, message, type } };
 *   - unauthenticated control messages never get a 2xx, and a 2xx only ever answers
 *     a genuinely valid message (the auth scheme itself is not assumed: a message
 *     with the old Bearer secret may be refused with 401 too);
 *   - the routing Durable Objects still answer afterwards and list no replica that
 *     did not register validly.
 *
 * Deterministic for CI: fixed seed, bounded runs per property.
 *
 * Most requests call the Worker's fetch handler directly (with a test
 * ExecutionContext whose waitUntil work is awaited). Requests through the
 * service binding (`exports.default.fetch`) get slower with every call made in
 * the same workerd instance under vitest-pool-workers (cloudflare/workers-sdk#15446:
 * ~2 ms → ~250 ms per call after a thousand), so only one short property goes
 * that way, to cover the HTTP path end to end.
 */
// @ts-nocheck

import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env, exports } from "cloudflare:workers";
import fc from "fast-check";
import { afterEach, beforeAll, describe, expect, it } from "vitest";
import { deployments } from "../../.switchyard/deployments.ts";
import worker from "../../src/worker.ts";
import { DEPLOYMENT_NAME, DeregisterMessage, MODEL_ID, PROTOCOL_VERSION, REPLICA_ID, RegisterMessage, ReportMessage } from "../../src/protocol/index.ts";

const SEED = 20261130;
const RUNS = 150;
const params = (numRuns = RUNS) => ({ seed: SEED, numRuns });

const REPLICA_SECRET = "test-replica-secret";
const ADMIN_SECRET = "test-admin-secret";
const NAMES = deployments.map((d) => d.name);
const PREFIXES = deployments.map((d) => d.routePrefix);
const MUX_MODELS = deployments.flatMap((d) => d.multiplexing?.models ?? []);

// ---------------------------------------------------------------------------
// Sending requests and checking answers
// ---------------------------------------------------------------------------

interface Sent {
  method: string;
  url: string;
  headers: [string, string][];
  body?: Uint8Array | string;
}

interface Answer {
  status: number;
  contentType: string | null;
  text: string;
}

/** Builds the request as a client would; null when the client side itself refuses it (not the Worker's business). */
function build(s: Sent): Request | null {
  const headers = new Headers();
  const size = s.body === undefined ? 0 : typeof s.body === "string" ? new TextEncoder().encode(s.body).byteLength : s.body.byteLength;
  for (const [name, raw] of s.headers) {
    // "__EXACT__": the Content-Length an HTTP client would send for this body.
    const value = raw === "__EXACT__" ? String(size) : raw;
    try {
      headers.append(name, value);
    } catch {
      // A value fetch cannot send: leave the header out.
    }
  }
  try {
    return new Request(s.url, { method: s.method, headers, ...(s.body !== undefined ? { body: s.body } : {}) });
  } catch {
    return null;
  }
}

/**
 * The background work of the calls made so far (their ExecutionContexts' waitUntil),
 * awaited in batches rather than one call at a time: an isolate's metrics flush waits
 * up to 2 s in one request's waitUntil for the counts it holds to be due (serve/serve.ts, IsolateState),
 * and awaiting that after every call would make each call last 2 s.
 */
let pendingWork: Promise<unknown>[] = [];
async function settleBackground(): Promise<void> {
  const work = pendingWork;
  pendingWork = [];
  await Promise.all(work);
}

afterEach(settleBackground);

/** Calls the Worker's fetch handler directly; its background work is awaited with the batch's (settleBackground). */
async function callWorker(req: Request): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(req as Parameters<typeof worker.fetch>[0], env, ctx);
  const body = await res.arrayBuffer();
  pendingWork.push(waitOnExecutionContext(ctx));
  if (pendingWork.length >= 64) await settleBackground();
  return new Response(res.status === 101 || res.status === 204 || res.status === 304 ? null : body, { status: res.status, headers: res.headers });
}

async function send(s: Sent, via: "handler" | "binding" = "handler"): Promise<Answer | null> {
  const req = build(s);
  if (!req) return null;
  const res = via === "handler" ? await callWorker(req) : await exports.default.fetch(req);
  return { status: res.status, contentType: res.headers.get("content-type"), text: await res.text() };
}

const describeSent = (s: Sent) =>
  `${s.method} ${s.url} ${JSON.stringify(s.headers)}${s.body === undefined ? "" : ` body(${typeof s.body === "string" ? s.body.length : s.body.byteLength})`}`;

/** Never a 500; error answers are JSON in the error shape. */
function expectWellFormed(s: Sent, a: Answer): void {
  const where = `${describeSent(s)} → ${a.status} ${a.contentType} ${a.text.slice(0, 300)}`;
  expect(a.status, where).not.toBe(500);
  expect(a.status >= 200 && a.status <= 599, where).toBe(true);
  if (a.status < 400) return;
  expect(a.contentType ?? "", where).toMatch(/^application\/json/);
  if (s.method === "HEAD") {
    expect(a.text, where).toBe("");
    return;
  }
  const body = JSON.parse(a.text) as Record<string, unknown>;
  const path = new URL(s.url).pathname;
  if (path === "/-/healthz" && a.status === 503 && s.method === "GET") {
    // The health check's own shape: no replica is ready.
    expect(body, where).toMatchObject({ status: "no_ready_replica" });
    return;
  }
  const error = body.error as Record<string, unknown> | undefined;
  expect(error, where).toBeTypeOf("object");
  expect(error!.code, where).toBeTypeOf("string");
  expect(error!.message, where).toBeTypeOf("string");
  expect(error!.type, where).toBeTypeOf("string");
  expect(error!.type as string, where).toMatch(/_error$/);
}

// ---------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------

/**
 * Header values: visible ASCII, spaces and separators. (Non-ASCII values are sent
 * UTF-8 encoded by workerd with a warning per request; they reach the Worker as
 * the same bytes as obs-text, which the unit fuzz of requestKeys covers.)
 */
const headerValue = fc
  .string({
    unit: fc.oneof(
      fc.constantFrom(" ", "\t", ",", ";", "=", "/", "@", ":", ".", "_", "-", "+", "%", "\"", "\\"),
      fc.integer({ min: 0x21, max: 0x7e }).map((c) => String.fromCharCode(c)),
    ),
    maxLength: 200,
  })
  .map((s) => s.trim());

const hex = (n: number) => fc.stringMatching(new RegExp(`^[0-9a-f]{${n}}$`));

/** Things that look like credentials; none is valid for the routes they are sent to unless noted. */
const randomAuth = fc.oneof(
  headerValue,
  headerValue.map((v) => `Bearer ${v}`),
  fc.constantFrom("Bearer", "Bearer ", "bearer test-replica-secret", `Bearer ${REPLICA_SECRET}x`, `Bearer  ${REPLICA_SECRET}`, "Basic dGVzdDp0ZXN0", `Bearer ${ADMIN_SECRET}`),
  hex(64).map((h) => `Bearer ${h}`),
  fc.stringMatching(/^sk-sy-[A-Za-z0-9_-]{1,60}$/).map((k) => `Bearer ${k}`),
);

const methodArb = fc.oneof(
  { weight: 4, arbitrary: fc.constantFrom("GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS") },
  { weight: 1, arbitrary: fc.stringMatching(/^[A-Za-z!#$%&'*+.^_`|~-]{1,12}$/).filter((m) => !["CONNECT", "TRACE", "TRACK"].includes(m.toUpperCase())) },
);

const segment = fc.oneof(
  fc.constantFrom("", ".", "..", "-", "a", "v1", "chat", "completions", "keys", "router", "restart", "register", "report", "deregister", "%2F", "%2e%2e", "%ZZ", "%", "%00", "é", "☃", "a b", ";x", "~"),
  fc.constantFrom(...NAMES, "nope", "HELLO", "hello-", "a".repeat(70)),
  fc.string({ maxLength: 12 }).map((s) => s.replaceAll("?", "").replaceAll("#", "")),
);

const basePath = fc.constantFrom(
  "/",
  "/-",
  "/-/",
  "/-/healthz",
  "/-/routes",
  "/-/deployments",
  "/-/replicas",
  "/-/replicas/register",
  "/-/replicas/report",
  ...PREFIXES,
  ...PREFIXES.map((p) => `/-/deployments${p}`),
  ...PREFIXES.map((p) => `/-/deployments${p}/keys`),
);
const pathArb = fc
  .tuple(
    basePath,
    fc.oneof(fc.constant([]), fc.array(segment, { minLength: 1, maxLength: 4 })),
    fc.option(fc.string({ maxLength: 20 }).map((q) => q.replaceAll("#", "")), { nil: undefined }),
  )
  .map(([base, segs, query]) => {
    const path = base + (segs.length ? "/" + segs.join("/") : "");
    return path + (query === undefined ? "" : `?${query}`);
  });

const modelValue = fc.oneof(headerValue, fc.stringMatching(MODEL_ID), fc.constantFrom(...MUX_MODELS, "silero-vad-v7", "a".repeat(129), "x,y", "bad id"));
const sessionValue = fc.oneof(headerValue, fc.stringMatching(/^[\x21-\x7e]{1,40}$/), fc.constantFrom("s".repeat(256), "s".repeat(257)));
const contentLength = fc.oneof(fc.constant("__EXACT__"), fc.nat({ max: 1 << 20 }).map(String), fc.constantFrom("-1", "1e3", "0x10", " 12", "99999999999999999", "1,1", "abc", ""), headerValue);

// ---------------------------------------------------------------------------
// State of the routing objects before and after
// ---------------------------------------------------------------------------

const router = (name: string) => env.ROUTER.get(env.ROUTER.idFromName(name));

/** Replicas per deployment before the fuzz runs (another test file may share storage). */
const before = new Map<string, { ids: Set<string>; members: number }>();
/** Replicas a 2xx register answered for, minus those a 2xx deregister removed. */
const validlyRegistered = new Map<string, Set<string>>(NAMES.map((n) => [n, new Set<string>()]));
/** API keys created through the admin API (when it exists), to get past client auth. */
const apiKeys = new Map<string, string>();

beforeAll(async () => {
  for (const name of NAMES) {
    const snap = await router(name).snapshot();
    const stats = await router(name).stats();
    before.set(name, { ids: new Set(snap.replicas.map((r) => r.id)), members: stats.members });
    const res = await callWorker(
      new Request(`http://edge/-/deployments/${name}/keys`, {
        method: "POST",
        headers: { authorization: `Bearer ${ADMIN_SECRET}`, "content-type": "application/json" },
        body: JSON.stringify({ name: "fuzz" }),
      }),
    );
    if (res.ok) {
      const created = (await res.json()) as { key?: unknown };
      if (typeof created.key === "string") apiKeys.set(name, created.key);
    } else {
      await res.body?.cancel();
    }
  }
});

async function expectRoutingStateIntact(): Promise<void> {
  for (const name of NAMES) {
    const stub = router(name);
    const snap = await stub.snapshot();
    const stats = await stub.stats();
    const allowed = new Set([...before.get(name)!.ids, ...validlyRegistered.get(name)!]);
    for (const r of snap.replicas) expect(allowed.has(r.id), `${name}: unexpected replica ${r.id}`).toBe(true);
    expect(stats.members).toBeLessThanOrEqual(before.get(name)!.members + validlyRegistered.get(name)!.size);
  }
}

// ---------------------------------------------------------------------------
// Proxied and system routes
// ---------------------------------------------------------------------------

describe("fuzz: HTTP routes of the Worker", () => {
  /** Arbitrary method, path (with query), protocol headers, credentials and body. */
  const routeFuzz = (via: "handler" | "binding", counter: { sent: number }) =>
    fc.asyncProperty(
      methodArb,
      pathArb,
      fc.record(
        {
          "x-switchyard-model": modelValue,
          serve_multiplexed_model_id: modelValue,
          "x-session-id": sessionValue,
          "x-request-id": fc.oneof(headerValue, fc.stringMatching(/^[A-Za-z0-9._:-]{1,128}$/), fc.constant("r".repeat(129))),
          "content-length": contentLength,
          "content-type": fc.constantFrom("application/json", "text/plain", "application/octet-stream", "multipart/form-data; boundary=x"),
          authorization: fc.oneof(randomAuth, fc.constantFrom(`Bearer ${ADMIN_SECRET}`, "__API_KEY__")),
          "x-huge": fc.constant("h".repeat(40 * 1024)),
          connection: fc.constantFrom("close", "keep-alive, x-session-id", "x-switchyard-model"),
        },
        { requiredKeys: [] },
      ),
      fc.option(fc.oneof(fc.uint8Array({ maxLength: 256 }), fc.json({ maxDepth: 2 })), { nil: undefined }),
      async (method, path, hdrs, body) => {
        const url = `http://edge${path}`;
        const pathname = new URL(url).pathname;
        const routed = deployments.find((d) => pathname === d.routePrefix || pathname.startsWith(d.routePrefix + "/"));
        const headers = Object.entries(hdrs)
          // Through the binding, workerd itself rejects a Content-Length that does not match the body.
          .filter(([k]) => via === "handler" || k !== "content-length")
          .map(([k, v]): [string, string] => [k, v === "__API_KEY__" ? `Bearer ${apiKeys.get(routed?.name ?? "") ?? "none"}` : v]);
        const withBody = method !== "GET" && method !== "HEAD" && body !== undefined;
        const s: Sent = { method, url, headers, ...(withBody ? { body } : {}) };
        const a = await send(s, via);
        if (!a) return;
        counter.sent++;
        expectWellFormed(s, a);
      },
    );

  it("arbitrary paths, methods and headers: never a 500, errors are JSON in the error shape", async () => {
    const counter = { sent: 0 };
    await fc.assert(routeFuzz("handler", counter), params(250));
    expect(counter.sent).toBeGreaterThan(200);
  });

  it("the same through the Worker's service binding (real HTTP request handling), fewer runs", async () => {
    const counter = { sent: 0 };
    await fc.assert(routeFuzz("binding", counter), params(60));
    expect(counter.sent).toBeGreaterThan(45);
  });

  it("arbitrary content-length values and bodies on the proxied routes: never a 500, errors are JSON", async () => {
    let sent = 0;
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom("POST", "PUT", "PATCH", "DELETE"),
        fc.constantFrom(...PREFIXES).chain((p) => fc.constantFrom(p, `${p}/`, `${p}/x`, `${p}/v1/infer`)),
        contentLength,
        fc.oneof(fc.uint8Array({ maxLength: 512 }), fc.string({ maxLength: 200 })),
        fc.boolean(),
        fc.oneof(fc.constant(undefined), modelValue),
        async (method, path, length, body, authed, model) => {
          const url = `http://edge${path}`;
          const name = deployments.find((d) => path === d.routePrefix || path.startsWith(d.routePrefix + "/"))!.name;
          const headers: [string, string][] = [["content-length", length]];
          if (authed && apiKeys.has(name)) headers.push(["authorization", `Bearer ${apiKeys.get(name)}`]);
          if (model !== undefined) headers.push(["x-switchyard-model", model]);
          const s: Sent = { method, url, headers, body };
          const a = await send(s);
          if (!a) return;
          sent++;
          expectWellFormed(s, a);
        },
      ),
      params(150),
    );
    expect(sent).toBeGreaterThan(100);
  });

  it("system routes answer their documented shapes under fuzzed names and methods", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.oneof(fc.constantFrom(...NAMES), fc.stringMatching(DEPLOYMENT_NAME), segment),
        fc.constantFrom(`Bearer ${ADMIN_SECRET}`, undefined, "Bearer wrong"),
        async (name, auth) => {
          const url = `http://edge/-/deployments/${name}`;
          const s: Sent = { method: "GET", url, headers: auth ? [["authorization", auth]] : [] };
          const a = await send(s);
          if (!a) return;
          expectWellFormed(s, a);
          const decoded = new URL(url).pathname.slice("/-/deployments/".length);
          if (a.status === 200) {
            // Only the admin, and only for a served deployment.
            expect(auth).toBe(`Bearer ${ADMIN_SECRET}`);
            expect(NAMES).toContain(decoded);
            const body = JSON.parse(a.text) as { snapshot?: { replicas?: unknown[] } };
            expect(Array.isArray(body.snapshot?.replicas)).toBe(true);
          } else {
            expect(a.status).toBeGreaterThanOrEqual(400);
            expect(a.status).toBeLessThan(500);
          }
        },
      ),
      params(100),
    );
    const routes = await callWorker(new Request("http://edge/-/routes"));
    expect(await routes.json()).toEqual(Object.fromEntries(deployments.map((d) => [d.routePrefix, d.name])));
    // No replica registered: the readiness check says so, in its own JSON shape; it is
    // ready only if every deployment's model runs in the Worker (backend kind edge).
    const edge = deployments.filter((d) => d.backend.kind === "edge" && d.access.public).map((d) => d.name);
    const replicated = deployments.filter((d) => d.backend.kind !== "edge");
    const waiting = [...new Set(replicated.map((d) => (d.access.public ? d.name : "(private)")))];
    const health = await callWorker(new Request("http://edge/-/healthz"));
    expect(health.status).toBe(replicated.length === 0 ? 200 : 503);
    const healthBody = (await health.json()) as { status: string; ready_replicas: Record<string, number>; edge_deployments: string[]; waiting_for?: string[] };
    expect(healthBody.status).toBe(replicated.length === 0 ? "ok" : "no_ready_replica");
    expect(healthBody.edge_deployments).toEqual(edge);
    expect(healthBody.waiting_for ?? []).toEqual(waiting);
    expect(Object.values(healthBody.ready_replicas).every((n) => n === 0)).toBe(true);
  });

  it("leaves the routing objects intact: snapshots answer and list no replica that did not register", async () => {
    await expectRoutingStateIntact();
    for (const name of NAMES) expect(validlyRegistered.get(name)!.size).toBe(0);
  });
});

// ---------------------------------------------------------------------------
// Replica control plane
// ---------------------------------------------------------------------------

const CONTROL = [
  { path: "/-/replicas/register", schema: RegisterMessage },
  { path: "/-/replicas/report", schema: ReportMessage },
  { path: "/-/replicas/deregister", schema: DeregisterMessage },
] as const;

const deploymentField = fc.oneof({ weight: 4, arbitrary: fc.constantFrom(...NAMES) }, { weight: 1, arbitrary: fc.stringMatching(DEPLOYMENT_NAME) });
/** Replica ids of this test are prefixed, so the final check can tell them apart. */
const replicaIdField = fc.stringMatching(/^[A-Za-z0-9._:-]{1,20}$/).map((s) => `fz-${s}`).filter((s) => REPLICA_ID.test(s));

/** Valid-looking messages; URLs point at a closed loopback port so nothing is ever dialled for real. */
const validMessage = (path: string): fc.Arbitrary<Record<string, unknown>> => {
  const common = { protocol: fc.constant(PROTOCOL_VERSION), deployment: deploymentField, replica_id: replicaIdField };
  if (path.endsWith("/register")) {
    return fc.record(
      { ...common, url: replicaIdField.map((id) => `http://127.0.0.1:9/${id}`), max_ongoing_requests: fc.integer({ min: 1, max: 100_000 }), max_models: fc.integer({ min: 1, max: 1024 }) },
      { requiredKeys: ["protocol", "deployment", "replica_id", "url", "max_ongoing_requests"] },
    );
  }
  if (path.endsWith("/report")) {
    return fc.record(
      {
        ...common,
        seq: fc.nat(),
        ts: fc.constant(Date.now()),
        state: fc.constantFrom("ready", "draining"),
        ongoing: fc.nat({ max: 1_000_000 }),
        queued: fc.nat({ max: 1_000_000 }),
        kv_cache_usage: fc.double({ min: 0, max: 1, noNaN: true }),
        models: fc.array(fc.stringMatching(MODEL_ID), { maxLength: 3 }),
        loading: fc.array(fc.stringMatching(MODEL_ID), { maxLength: 3 }),
      },
      { requiredKeys: ["protocol", "deployment", "replica_id", "seq", "ts", "state", "ongoing", "queued"] },
    );
  }
  return fc.record(common);
};

const brokenValue = fc.oneof(
  fc.jsonValue({ maxDepth: 2 }),
  fc.constantFrom(-1, 0, 1.5, 2 ** 53, "1", "", null, true, [], {}, "file:///etc/passwd", "http://u:p@127.0.0.1:9/", "http://127.0.0.1:9/?q", "http://127.0.0.1:9/#f", "ftp://x/", "x".repeat(300)),
);

/** A valid-looking message with 0-3 fields deleted, replaced by garbage, or added. */
const mutatedMessage = (path: string) =>
  fc
    .tuple(validMessage(path), fc.array(fc.tuple(fc.constantFrom("delete", "replace", "add"), fc.nat(), brokenValue, fc.string({ maxLength: 10 })), { maxLength: 3 }))
    .map(([msg, ops]) => {
      const out: Record<string, unknown> = { ...msg };
      for (const [op, pick, value, extra] of ops) {
        const keys = Object.keys(out);
        const key = keys.length ? keys[pick % keys.length]! : "protocol";
        if (op === "delete") delete out[key];
        else if (op === "replace") out[key] = value;
        else out[extra] = value;
      }
      return out;
    });

const controlBody = (path: string) =>
  fc.oneof(
    { weight: 2, arbitrary: fc.uint8Array({ maxLength: 300 }) },
    { weight: 2, arbitrary: fc.json({ maxDepth: 3 }) },
    { weight: 1, arbitrary: fc.string({ unit: "binary", maxLength: 100 }) },
    { weight: 5, arbitrary: mutatedMessage(path).map((m) => JSON.stringify(m)) },
    { weight: 1, arbitrary: fc.constant(" ".repeat(70 * 1024)) },
  );

const controlAuth = fc.oneof(
  { weight: 2, arbitrary: fc.constant(undefined) },
  { weight: 3, arbitrary: randomAuth },
  { weight: 3, arbitrary: fc.constant(`Bearer ${REPLICA_SECRET}`) },
);

/** Signature-scheme headers with values nobody signed: never credentials. */
const signatureHeaders = fc.record(
  {
    "x-switchyard-timestamp": fc.oneof(fc.constant(String(Date.now())), fc.nat().map(String), headerValue),
    "x-switchyard-nonce": fc.oneof(fc.nat().map(String), headerValue),
    "x-switchyard-signature": fc.oneof(hex(64).map((h) => `v1=${h}`), headerValue),
  },
  { requiredKeys: [] },
);

function isGenuinelyValid(schema: (typeof CONTROL)[number]["schema"], text: string): boolean {
  let raw: unknown;
  try {
    raw = JSON.parse(text);
  } catch {
    return false;
  }
  const r = schema.safeParse(raw);
  return r.success && NAMES.includes(r.data.deployment);
}

describe("fuzz: replica control plane", () => {
  for (const { path, schema } of CONTROL) {
    it(`POST ${path}: arbitrary bytes, JSON and mutated messages never crash it; 2xx only for valid, authenticated input`, async () => {
      let sent = 0;
      let unauthenticated = 0;
      await fc.assert(
        fc.asyncProperty(
          controlBody(path),
          controlAuth,
          signatureHeaders,
          fc.constantFrom("application/json", "text/plain", undefined),
          fc.oneof({ weight: 8, arbitrary: fc.constant("__EXACT__") }, { weight: 1, arbitrary: fc.constant(undefined) }, { weight: 1, arbitrary: contentLength }),
          async (body, auth, sig, contentType, length) => {
            const headers: [string, string][] = Object.entries(sig);
            if (length !== undefined) headers.push(["content-length", length]);
            if (auth !== undefined) headers.push(["authorization", auth]);
            if (contentType) headers.push(["content-type", contentType]);
            const s: Sent = { method: "POST", url: `http://edge${path}`, headers, body };
            const a = await send(s);
            if (!a) return;
            sent++;
            expectWellFormed(s, a);
            const where = `${describeSent(s)} → ${a.status} ${a.text.slice(0, 300)}`;
            // The only credential that may be accepted is the replica secret (under the Bearer
            // scheme); the signature headers here are never signed with a real key.
            const maybeAuthenticated = auth === `Bearer ${REPLICA_SECRET}`;
            if (!maybeAuthenticated) {
              unauthenticated++;
              expect(a.status >= 400 && a.status < 500, where).toBe(true);
              return;
            }
            if (a.status >= 200 && a.status < 300) {
              const text = typeof body === "string" ? body : new TextDecoder().decode(body);
              expect(isGenuinelyValid(schema, text), where).toBe(true);
              expect(a.contentType ?? "", where).toMatch(/^application\/json/);
              const msg = JSON.parse(text) as { deployment: string; replica_id: string };
              if (path.endsWith("/register")) validlyRegistered.get(msg.deployment)!.add(msg.replica_id);
              if (path.endsWith("/deregister")) validlyRegistered.get(msg.deployment)!.delete(msg.replica_id);
            } else {
              expect(a.status >= 400 && a.status < 500, where).toBe(true);
            }
          },
        ),
        params(200),
      );
      expect(sent).toBeGreaterThan(150);
      expect(unauthenticated).toBeGreaterThan(40);
    });
  }

  it("other methods and sub-paths of /-/replicas answer JSON 4xx", async () => {
    await fc.assert(
      fc.asyncProperty(methodArb, fc.constantFrom("", "/", "/register", "/report", "/deregister", "/register/x", "/REGISTER", "/nope"), controlAuth, async (method, sub, auth) => {
        fc.pre(!(method === "POST" && ["/register", "/report", "/deregister"].includes(sub)));
        const s: Sent = { method, url: `http://edge/-/replicas${sub}`, headers: auth ? [["authorization", auth]] : [] };
        const a = await send(s);
        if (!a) return;
        expectWellFormed(s, a);
        expect(a.status >= 400 && a.status < 500).toBe(true);
      }),
      params(100),
    );
  });

  it("leaves the routing objects intact: only validly registered replicas are listed", async () => {
    await expectRoutingStateIntact();
    // Clean up whatever registered validly (under the Bearer scheme).
    for (const [deployment, ids] of validlyRegistered) {
      for (const replica_id of ids) await router(deployment).deregister({ protocol: PROTOCOL_VERSION, deployment, replica_id });
    }
  });
});
