/**
 * The whole request path (src/proxy/serve/serve.ts: routeServer, servePath,
 * serveRequest) in Node, against real reference replicas on loopback, with an
 * IsolateState whose state comes from the state plane's own logic instead of its
 * Durable Objects (IsolateSources): snapshots from a Membership, key sets from a
 * list of hashes, rate syncs against one global bucket per key kept with the
 * RateLimiter's own functions. The same path runs under workerd in the workers and
 * e2e tests; here the unit tests and mutation testing reach it (issue 51): routes,
 * methods, headers, keys, rates, priorities, the pending caps, admission's refusals,
 * and the request's log line.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { defineDeployment, type Deployment, type DeploymentInput } from "../../src/config/deployment.ts";
import type { Env } from "../../src/env.ts";
import { chargeUse, type RateRemaining } from "../../src/policy/rate-limit-sync.ts";
import { fullBucket, type TokenBucket } from "../../src/policy/token-bucket.ts";
import { deriveReplicaKey } from "../../src/protocol/index.ts";
import { IsolateState } from "../../src/proxy/serve/isolate-state.ts";
import { AdmissionSlot } from "../../src/proxy/serve/admit.ts";
import { routeServer, servePath } from "../../src/proxy/serve/serve.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { DispatchGuard } from "../../src/replica/dispatch-guard.ts";
import { echoHandler, type RequestHandler } from "../../src/replica/handlers.ts";
import { ReplicaServer } from "../../src/replica/server.ts";
import { hashApiKey } from "../../src/state/api-key-format.ts";
import { Membership } from "../../src/state/membership.ts";
import type { TelemetryFlush } from "../../src/telemetry/types.ts";
import { registerMessage, reportMessage } from "../fixtures/control-messages.ts";
import "../fixtures/workerd-streams.ts";

const MASTER = "serve-path-master-secret";
const KEY = "sy-kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk";

const deploy = (name: string, over: Partial<DeploymentInput> = {}): Deployment =>
  defineDeployment({ name, routePrefix: `/${name}`, backend: { kind: "echo" }, access: { public: true }, policy: { balancer: "round_robin", requestTimeoutMs: 5_000 }, ...over });

const deployments = [
  deploy("pub"),
  deploy("getonly", { methods: ["GET"] }),
  deploy("priv", { access: { public: false, rateLimit: { requestsPerSecond: 0.001, burst: 2 } }, admission: { priorityHeader: "x-priority", maxPriority: 1 } }),
  deploy("small", { limits: { maxHeaderBytes: 1024 } }),
  deploy("capped", { limits: { maxPendingRequests: 4 } }),
  deploy("full", { admission: { priorityHeader: "x-priority" } }),
  deploy("empty"),
  deploy("strip", { policy: { stripPrefix: true } }),
  deploy("one", { limits: { maxPendingRequests: 1 } }),
  deploy("tokens", { access: { public: false, tokenLimit: { tokensPerMinute: 1, burst: 5 } } }),
  deploy("tokens2", { access: { public: false, tokenLimit: { tokensPerMinute: 1, burst: 5 } } }),
];

const servers: ReplicaServer[] = [];
/** One Membership per deployment, as each deployment has its own routing object. */
const memberships = new Map<string, Membership>();
const membershipOf = (deployment: string) => memberships.get(deployment) ?? memberships.set(deployment, new Membership()).get(deployment)!;
/** Each replica's load report, sent again before each snapshot as a live replica keeps reporting. */
const reports: { deployment: string; id: string; seq: number; ongoing: number }[] = [];
let state: IsolateState;
const flushes: TelemetryFlush[] = [];
const env = { SWITCHYARD_REPLICA_SECRET: MASTER, SWITCHYARD_REQUEST_LOGS: "on" } as unknown as Env;
const serve = routeServer(deployments, () => state);

/** Requests sent with `?hold` wait at the replica until the test lets them go: a request held in flight without a clock. */
const holds: (() => void)[] = [];
/** Lets the held requests go once `n` of them have reached the replica (a release before then would leave one waiting). */
async function releaseHeld(n = 1): Promise<void> {
  await vi.waitFor(() => expect(holds.length).toBe(n), { timeout: 30_000 });
  holds.splice(0).forEach((go) => go());
}
function heldEcho(): RequestHandler {
  const echo = echoHandler();
  return async (req, res, loadHeaders) => {
    if (new URL(req.url ?? "/", "http://replica").searchParams.has("hold")) await new Promise<void>((go) => holds.push(go));
    return echo(req, res, loadHeaders);
  };
}

async function replicaFor(deployment: string, id: string, o: { slots?: number; reportFull?: boolean } = {}): Promise<void> {
  const server = new ReplicaServer({
    replicaId: id,
    admission: new AdmissionControl(o.slots ?? 4),
    guard: new DispatchGuard(await deriveReplicaKey(MASTER, deployment), deployment, id),
    handler: heldEcho(),
  });
  const { port } = await server.listen(0, "127.0.0.1");
  servers.push(server);
  const now = Date.now();
  const membership = membershipOf(deployment);
  membership.register(registerMessage(id, { deployment, url: `http://127.0.0.1:${port}`, max_ongoing_requests: o.slots ?? 4 }), now);
  const report = { deployment, id, seq: 1, ongoing: o.reportFull ? (o.slots ?? 4) : 0 };
  reports.push(report);
  membership.report(reportMessage(id, 1, { deployment, ts: now, ongoing: report.ongoing }), now);
}

/** The deployment's snapshot as its routing object answers it, its replicas having just reported. */
function snapshotOf(deployment: string) {
  const now = Date.now();
  const membership = membershipOf(deployment);
  for (const r of reports) if (r.deployment === deployment) membership.report(reportMessage(r.id, ++r.seq, { deployment, ts: now, ongoing: r.ongoing }), now);
  return membership.snapshot(deployment, now);
}

beforeAll(async () => {
  for (const d of ["pub", "getonly", "priv", "small", "capped", "one", "tokens", "tokens2"]) await replicaFor(d, `${d}-r1`);
  // Full as its report says: every slot taken by other isolates' requests.
  await replicaFor("full", "full-r1", { slots: 2, reportFull: true });
  const keyHash = await hashApiKey(KEY);
  /** One global bucket per key, kept with the RateLimiter object's own functions. */
  const buckets = new Map<string, TokenBucket>();
  state = new IsolateState(env, {
    snapshots: async (name) => snapshotOf(name),
    keys: async (name) => (["priv", "tokens", "tokens2"].includes(name) ? [{ hash: keyHash }] : []) as never,
    rates: async (deployment, _shard, limits, uses) =>
      uses.map((use): RateRemaining => {
        const id = `${deployment}/${use.key}`;
        const b = buckets.get(id) ?? fullBucket(limits, use.since);
        buckets.set(id, b);
        return { key: use.key, tokens: chargeUse(b, limits, use, Date.now()) };
      }),
    flush: async (f) => void flushes.push(f),
  });
});

afterAll(async () => {
  for (const s of servers) await s.close().catch(() => undefined);
});

interface Sent {
  status: number;
  headers: Headers;
  body: { error?: { code: string; message: string; request_id?: string } } & Record<string, unknown>;
  text: string;
}

async function send(path: string, init: RequestInit & { duplex?: "half" } = {}): Promise<Sent> {
  const url = new URL(path, "http://edge");
  const background: Promise<unknown>[] = [];
  const res = await serve(new Request(url, init), env, { waitUntil: (p) => void background.push(p) }, { path: url.pathname, search: url.search });
  const text = await res.text();
  await Promise.allSettled(background);
  let body: Sent["body"] = {};
  try {
    body = JSON.parse(text) as Sent["body"];
  } catch {
    // Not JSON: the replica's own answer.
  }
  return { status: res.status, headers: res.headers, body, text };
}

describe("the request path in Node, against real replicas", () => {
  it("routes a request to its deployment's replica and names the replica and the request", async () => {
    const r = await send("/pub/x", { headers: { "x-request-id": "client-id-1" } });
    expect(r.status).toBe(200);
    expect(r.text).toBe("chunk 0\n");
    expect(r.headers.get("x-switchyard-replica")).toBe("pub-r1");
    expect(r.headers.get("x-request-id")).toBe("client-id-1");
  });

  it("answers 404 for no route and for a replica's operational routes, 405 with Allow for a method the deployment does not serve", async () => {
    const none = await send("/nowhere/x", { method: "POST", body: "abc", headers: { "x-request-id": "rid-404" } });
    expect(none.status).toBe(404);
    expect(none.body.error).toMatchObject({ code: "route_not_found", message: "no deployment serves /nowhere/x", request_id: "rid-404" });
    const health = await send("/strip/-/healthz");
    expect(health.status).toBe(404);
    expect(health.body.error!.code).toBe("route_not_found");
    const post = await send("/getonly/x", { method: "POST", body: "abc" });
    expect(post.status).toBe(405);
    expect(post.headers.get("allow")).toBe("GET");
    expect(post.body.error).toMatchObject({ code: "method_not_allowed", message: 'POST is not served by "getonly"' });
  });

  it("refuses headers past the deployment's limit before anything else", async () => {
    const r = await send("/small/x", { headers: { "x-big": "y".repeat(2_000) } });
    expect(r.status).toBe(431);
    expect(r.body.error!.code).toBe("header_too_large");
    expect(r.body.error!.message).toMatch(/^request headers take \d+ bytes; the limit is 1024$/);
  });

  it("a private deployment: no key 401, an unknown key 401, its key 200 until the key's rate runs out (429 with Retry-After)", async () => {
    const none = await send("/priv/x");
    expect(none.status).toBe(401);
    expect(none.headers.get("www-authenticate")).toBe('Bearer realm="switchyard"');
    const wrong = await send("/priv/x", { headers: { authorization: "Bearer sy-wrongwrongwrongwrongwrongwrongwrongwrongwro" } });
    expect(wrong.status).toBe(401);
    expect(wrong.body.error!.message).toBe("API key not valid for this deployment (unknown or revoked)");
    const auth = { authorization: `Bearer ${KEY}` };
    expect((await send("/priv/x", { headers: auth })).status).toBe(200);
    expect((await send("/priv/x", { headers: auth })).status).toBe(200);
    const limited = await send("/priv/x", { headers: auth });
    expect(limited.status).toBe(429);
    expect(limited.body.error).toMatchObject({ code: "rate_limited", message: "rate limit of 0.001 requests/s for this key exceeded" });
    expect(Number(limited.headers.get("retry-after"))).toBeGreaterThanOrEqual(1);
  });

  it("refuses a bad priority header with 400, before the request is counted", async () => {
    const r = await send("/full/x", { headers: { "x-priority": "urgent" } });
    expect(r.status).toBe(400);
    expect(r.body.error!.message).toBe("x-priority: an integer or one of critical, standard, sheddable");
  });

  it("sheds a sheddable request while every replica is full, and answers no_ready_replica for a deployment with none", async () => {
    const shed = await send("/full/x", { headers: { "x-priority": "sheddable" }, signal: new AbortController().signal });
    expect(shed.status).toBe(429);
    expect(shed.body.error).toMatchObject({ code: "shed", message: 'every replica of "full" is busy and this request is sheddable' });
    const empty = await send("/empty/x");
    expect(empty.status).toBe(503);
    expect(empty.body.error!.code).toBe("no_ready_replica");
  });

  it("caps a client's pending requests at its share, not another client's, and counts them down when they end", async () => {
    const first = send("/capped/x?hold", { headers: { "cf-connecting-ip": "198.51.100.1" } });
    await vi.waitFor(() => expect(state.pending.get("capped")).toBe(1), { timeout: 30_000 });
    const second = await send("/capped/x", { headers: { "cf-connecting-ip": "198.51.100.1" } });
    expect(second.status).toBe(429);
    expect(second.body.error).toMatchObject({ code: "rate_limited", message: 'this client has 1 requests for deployment "capped" pending here already' });
    const other = await send("/capped/x", { headers: { "cf-connecting-ip": "198.51.100.2" } });
    expect(other.status).toBe(200);
    await releaseHeld();
    expect((await first).status).toBe(200);
    expect(state.pending.get("capped")).toBe(0);
    expect((await send("/capped/x", { headers: { "cf-connecting-ip": "198.51.100.1" } })).status).toBe(200);
  });

  it("caps the deployment's pending requests in this isolate: past it, 503 queue_full with Retry-After", async () => {
    const first = send("/one/x?hold", { headers: { "cf-connecting-ip": "203.0.113.1" } });
    await vi.waitFor(() => expect(state.pending.get("one")).toBe(1), { timeout: 30_000 });
    const second = await send("/one/x", { headers: { "cf-connecting-ip": "203.0.113.2" } });
    expect(second.status).toBe(503);
    expect(second.body.error).toMatchObject({ code: "queue_full", message: 'deployment "one" has 1 requests waiting here already' });
    expect(second.headers.get("retry-after")).toBe("1");
    await releaseHeld();
    expect((await first).status).toBe(200);
  });

  it("charges a token-limited key what the answer used, once it has passed", async () => {
    const d = deployments.find((x) => x.name === "tokens")!;
    const keyHash = await hashApiKey(KEY);
    const background: Promise<unknown>[] = [];
    const bg = (p: Promise<unknown>) => void background.push(p);
    expect(state.tokenLimits.check(d, keyHash, bg).ok).toBe(true);
    // The replica's answer carries its usage (the echo replica answers the body it got): 3 + 4 tokens.
    const body = JSON.stringify({ id: "x", usage: { prompt_tokens: 3, completion_tokens: 4, total_tokens: 7 } });
    const req = new Request("http://edge/tokens/v", { method: "POST", body, headers: { authorization: `Bearer ${KEY}`, "content-type": "application/json" } });
    const res = await servePath(req, env, { deployment: d, routePrefix: "/tokens", target: { path: "/tokens/v", search: "" }, state, requestId: "tok-1", background: bg, trace: { attempts: 0, rejections: 0, ejections: 0 } }, {
      usage: { key: "sy-kkkk", strip: false, charge: { keyHash, promptBytes: body.length, stream: false } },
    });
    expect(res.status).toBe(200);
    expect(await res.text()).toBe(body);
    await Promise.allSettled(background);
    // 7 tokens charged to a bucket of 5: spent until it refills, two minutes on (one token a minute), so a busy machine cannot see it refilled.
    await vi.waitFor(() => expect(state.tokenLimits.check(d, keyHash, bg).ok).toBe(false), { timeout: 30_000 });
    // Its wait says how deep: 2 tokens under at one a minute, 180 s (less what this test took).
    expect(spentFor(d, keyHash)).toBeGreaterThan(150);
    expect(spentFor(d, keyHash)).toBeLessThanOrEqual(180);
  });

  /** The seconds a token-limited key must wait: 60 × (1 − its bucket) at one token a minute. */
  const spentFor = (d: Deployment, keyHash: string): number => {
    const r = state.tokenLimits.check(d, keyHash, () => undefined);
    return r.ok ? 0 : r.retryAfterSeconds;
  };

  const pathCtx = (d: Deployment, requestId: string, bg: (p: Promise<unknown>) => void) => ({
    deployment: d,
    routePrefix: `/${d.name}`,
    target: { path: `/${d.name}/v`, search: "" },
    state,
    requestId,
    background: bg,
    trace: { attempts: 0, rejections: 0, ejections: 0 },
  });

  it("charges a stream that ended without usage its prompt's bytes / 4 and a token for each data chunk passed on", async () => {
    const d = deployments.find((x) => x.name === "tokens2")!;
    const keyHash = await hashApiKey(KEY);
    const background: Promise<unknown>[] = [];
    const bg = (p: Promise<unknown>) => void background.push(p);
    // The echo replica answers the body it got: three data chunks and no usage, as a stream cut before its end.
    const body = 'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choices":[{"delta":{"content":"b"}}]}\n\ndata: {"choices":[{"delta":{"content":"c"}}]}\n\n';
    const req = new Request("http://edge/tokens2/v", { method: "POST", body, headers: { authorization: `Bearer ${KEY}`, "content-type": "text/event-stream" } });
    const res = await servePath(req, env, pathCtx(d, "tok-2", bg), { usage: { key: "sy-kkkk", strip: false, charge: { keyHash, promptBytes: 40, stream: true } } });
    expect(await res.text()).toBe(body);
    await Promise.allSettled(background);
    // 40 / 4 + 3 = 13 tokens from a bucket of 5: 8 under, 540 s at one a minute (10 alone would be 360 s).
    await vi.waitFor(() => expect(spentFor(d, keyHash)).toBeGreaterThan(510), { timeout: 30_000 });
    expect(spentFor(d, keyHash)).toBeLessThanOrEqual(540);
  });

  it("takes the usage chunk out of a stream whose client did not ask for it", async () => {
    const d = deployments.find((x) => x.name === "pub")!;
    const background: Promise<unknown>[] = [];
    const bg = (p: Promise<unknown>) => void background.push(p);
    const usageChunk = 'data: {"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":3,"total_tokens":12}}\n\n';
    const body = 'data: {"choices":[{"delta":{"content":"a"}}]}\n\n' + usageChunk + "data: [DONE]\n\n";
    const req = new Request("http://edge/pub/v", { method: "POST", body, headers: { "content-type": "text/event-stream" } });
    const res = await servePath(req, env, pathCtx(d, "strip-1", bg), { usage: { key: "k", strip: true } });
    expect(await res.text()).toBe(body.replace(usageChunk, ""));
    await Promise.allSettled(background);
  });

  it("frees a metered answer's admission slot only after its usage has corrected its flow's place", async () => {
    // The slot's end lets the next held request go: chosen before the correction, it would be
    // chosen by the estimate (a stress run saw test/e2e/admission.test.ts do so).
    const used = vi.spyOn(AdmissionSlot.prototype, "used");
    const end = vi.spyOn(AdmissionSlot.prototype, "end");
    try {
      const d = deployments.find((x) => x.name === "pub")!;
      const background: Promise<unknown>[] = [];
      const bg = (p: Promise<unknown>) => void background.push(p);
      const body = JSON.stringify({ id: "u", usage: { prompt_tokens: 5, completion_tokens: 6, total_tokens: 11 } });
      const req = new Request("http://edge/pub/v", { method: "POST", body, headers: { "content-type": "application/json" } });
      const res = await servePath(req, env, pathCtx(d, "used-1", bg), { usage: { key: "k", strip: false } });
      expect(await res.text()).toBe(body);
      await Promise.allSettled(background);
      await vi.waitFor(() => expect(end).toHaveBeenCalledTimes(1), { timeout: 30_000 });
      expect(used).toHaveBeenCalledExactlyOnceWith(11);
      expect(used.mock.invocationCallOrder[0]).toBeLessThan(end.mock.invocationCallOrder[0]!);
    } finally {
      used.mockRestore();
      end.mockRestore();
    }
  });

  it("writes one JSON line per request with its status, replica and attempts", async () => {
    const lines: string[] = [];
    const spy = vi.spyOn(console, "log").mockImplementation((l: string) => void lines.push(l));
    await send("/pub/x", { headers: { "x-request-id": "logged-1" } });
    await send("/empty/x", { headers: { "x-request-id": "logged-2" } });
    spy.mockRestore();
    const parsed = lines.map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => l.msg === "request");
    expect(parsed.find((l) => l.request_id === "logged-1")).toMatchObject({ deployment: "pub", method: "GET", status: 200, replica: "pub-r1", attempts: 1 });
    expect(parsed.find((l) => l.request_id === "logged-2")).toMatchObject({ deployment: "empty", status: 503, replica: null, attempts: 0 });
  });
});
