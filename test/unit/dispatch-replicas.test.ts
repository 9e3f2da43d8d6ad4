/**
 * The dispatch stage (src/proxy/serve/dispatch.ts) against real reference replicas on
 * loopback (ReplicaServer with the echo handler, each checking the edge's signature):
 * a request reaches one, signed; a replica at capacity refuses and the request goes to
 * another; a replica that is gone is routed around; a replica that never answers runs
 * into the deadline; and (issue 51) what the replica receives, credential refusals, lying
 * and draining replicas, engine keys, requests that may not run twice, and streams. The same stage runs under workerd in the e2e tests; here it runs
 * in Node, where the unit tests (and mutation testing) can reach it.
 */
import { afterAll, beforeAll, describe, expect, it, vi } from "vitest";
import { DEFAULT_PREFIX_POLICY, defineDeployment } from "../../src/config/deployment.ts";
import { createBalancer } from "../../src/policy/balancers/index.ts";
import { deriveReplicaKey, dispatchSignature } from "../../src/protocol/index.ts";
import type { DispatchContext, DispatchSigner, DispatchTrace } from "../../src/proxy/serve/dispatch.ts";
import { attempts } from "../../src/proxy/serve/serve.ts";
import { RoutingView } from "../../src/proxy/serve/view.ts";
import { AdmissionControl } from "../../src/replica/admission.ts";
import { DispatchGuard } from "../../src/replica/dispatch-guard.ts";
import { echoHandler } from "../../src/replica/handlers.ts";
import { ReplicaServer, type ReplicaFault } from "../../src/replica/server.ts";
import { Membership } from "../../src/state/membership.ts";
import { registerMessage, reportMessage, T0 } from "../fixtures/control-messages.ts";
import "../fixtures/workerd-streams.ts";

const MASTER = "unit-test-master-secret";
const deployment = defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "echo" }, policy: { balancer: "round_robin", requestTimeoutMs: 1_500 } });

interface Running {
  id: string;
  url: string;
  server: ReplicaServer;
  admission: AdmissionControl;
}
const replicas = new Map<string, Running>();
/** The edge's signer, as IsolateState makes it. */
const sign: DispatchSigner = (p) => dispatchSignature(MASTER, p);

async function start(id: string, o: { slots?: number; fault?: ReplicaFault; master?: string; apiKeys?: string[] } = {}): Promise<Running> {
  const key = await deriveReplicaKey(o.master ?? MASTER, "hello");
  const admission = new AdmissionControl(o.slots ?? 4);
  const server = new ReplicaServer({
    replicaId: id,
    admission,
    guard: new DispatchGuard(key, "hello", id),
    handler: echoHandler(),
    ...(o.fault && { fault: o.fault }),
    ...(o.apiKeys && { apiKeys: () => o.apiKeys! }),
  });
  const { port } = await server.listen(0, "127.0.0.1");
  const r = { id, url: `http://127.0.0.1:${port}`, server, admission };
  replicas.set(id, r);
  return r;
}

beforeAll(async () => {
  await Promise.all([
    start("ok-1"),
    start("ok-2"),
    start("full", { slots: 0 }),
    start("hang", { fault: "hang" }),
    start("liar", { fault: "lie" }),
    // Signs with another secret: it refuses the edge's signature.
    start("stranger", { master: "another-master-secret" }),
    start("draining"),
    // An engine behind its agent, which takes only the key the agent registered.
    start("keyed", { apiKeys: ["engine-key-1"] }),
    start("keyed-busy", { apiKeys: ["engine-key-1"], slots: 1 }),
  ]);
  expect(replicas.get("keyed-busy")!.admission.tryAdmit()).toEqual({ admitted: true });
  replicas.get("draining")!.admission.drain();
  await start("busy", { slots: 1 });
  // Its one slot taken, as by a request in progress.
  expect(replicas.get("busy")!.admission.tryAdmit()).toEqual({ admitted: true });
  // One that is gone: its port closed.
  const gone = await start("gone");
  await gone.server.close();
});

afterAll(async () => {
  for (const r of replicas.values()) if (r.id !== "gone") await r.server.close().catch(() => undefined);
});

/** A view of `ids`, all ready and idle as far as their reports say. */
function viewOf(ids: string[], urlOf: (id: string) => string = (id) => replicas.get(id)!.url): RoutingView {
  const m = new Membership();
  for (const id of ids) {
    m.register(registerMessage(id, { deployment: "hello", url: urlOf(id), ...(id.startsWith("keyed") ? { engine_key: "engine-key-1" } : {}) }), T0);
    m.report(reportMessage(id, 1, { deployment: "hello" }), T0);
  }
  const view = new RoutingView();
  view.applySnapshot(m.snapshot("hello", T0), Date.now());
  return view;
}

async function send(
  ids: string[],
  path = "/hello/x",
  o: { req?: Request; ctx?: Partial<DispatchContext>; search?: string; view?: RoutingView } = {},
): Promise<{ status: number; text: string; trace: DispatchTrace; replica: string | null; headers: Headers; view: RoutingView }> {
  const trace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
  const background: Promise<unknown>[] = [];
  const view = o.view ?? viewOf(ids);
  const ctx: DispatchContext = {
    deployment,
    routePrefix: "/hello",
    target: { path, search: o.search ?? "" },
    headers: new Headers(),
    sign,
    view,
    balancer: createBalancer("round_robin", DEFAULT_PREFIX_POLICY),
    requestId: crypto.randomUUID(),
    background: (p) => background.push(p),
    client: "ip:127.0.0.1",
    trace,
    ...o.ctx,
  };
  const res = await attempts(o.req ?? new Request(`http://edge${path}${o.search ?? ""}`), ctx, undefined);
  const text = await res.text();
  await Promise.allSettled(background);
  return { status: res.status, text, trace, replica: trace.replica ?? null, headers: res.headers, view };
}

describe("dispatch to real replicas", () => {
  it("reaches a replica with a signed request and passes its answer back", async () => {
    const r = await send(["ok-1"]);
    expect(r).toMatchObject({ status: 200, text: "chunk 0\n", replica: "ok-1" });
    expect(r.trace.attempts).toBe(1);
  });

  it("a replica at capacity refuses: the request goes to another, counted as a refusal", async () => {
    const r = await send(["full", "ok-2"]);
    expect(r).toMatchObject({ status: 200, replica: "ok-2" });
    // Round robin may try ok-2 first; when it tried the full one, that was a refusal and a second attempt.
    expect(r.trace.attempts).toBe(r.trace.rejections + 1);
    const both = await Promise.all([send(["full", "ok-2"]), send(["full", "ok-2"])]);
    expect(both.every((b) => b.status === 200 && b.replica === "ok-2")).toBe(true);
  });

  it("only replicas at capacity: a JSON 503 of the edge's own, after trying each", async () => {
    const r = await send(["full"]);
    expect(r.status).toBe(503);
    expect(JSON.parse(r.text)).toMatchObject({ error: { code: expect.any(String) } });
    expect(r.trace.rejections).toBeGreaterThanOrEqual(1);
  });

  it("a replica that is gone (its connection refused) is routed around", async () => {
    for (let i = 0; i < 3; i++) {
      const r = await send(["gone", "ok-1"]);
      expect(r).toMatchObject({ status: 200, replica: "ok-1" });
    }
  });

  it("a replica that never answers runs into the deadline: 504, not a hang", async () => {
    const r = await send(["hang"]);
    expect(r.status).toBe(504);
    expect(JSON.parse(r.text)).toMatchObject({ error: { code: expect.any(String) } });
  });
});

describe("dispatch to real replicas: what the replica receives, and each way an attempt ends (issue 51)", () => {
  const errorOf = (text: string) => (JSON.parse(text) as { error: { code: string; message: string; details?: unknown } }).error;

  it("sends the protocol's headers, signed, with the request's model, priority and migratable flag, and the replica's answer names it", async () => {
    const r = await send(["ok-1"], "/hello/x", {
      search: "?headers=1",
      ctx: { model: "m-1", priority: 2, migratable: true, deadline: Date.now() + 60_000 },
    });
    expect(r.status).toBe(200);
    const got = JSON.parse(r.text) as Record<string, string>;
    expect(got["x-switchyard-protocol"]).toBe("1");
    expect(got["x-switchyard-deployment"]).toBe("hello");
    expect(got["x-switchyard-attempt"]).toBe("1");
    expect(got["x-switchyard-model"]).toBe("m-1");
    expect(got["x-switchyard-priority"]).toBe("2");
    expect(got["x-switchyard-migratable"]).toBe("1");
    expect(Number(got["x-switchyard-deadline"])).toBeGreaterThan(Date.now());
    expect(got["x-request-id"]).toBeTruthy();
    expect(got["x-switchyard-load-limit"]).toBeUndefined();
    expect(r.headers.get("x-switchyard-replica")).toBe("ok-1");
    expect(r.headers.get("x-request-id")).toBe(got["x-request-id"]);
    // Without them, none is sent.
    const plain = JSON.parse((await send(["ok-1"], "/hello/x", { search: "?headers=1" })).text) as Record<string, string>;
    for (const h of ["x-switchyard-model", "x-switchyard-session", "x-switchyard-priority", "x-switchyard-migratable", "x-switchyard-body-sha256"]) expect(plain[h], h).toBeUndefined();
  });

  it("a POST body reaches the replica whole, covered by its digest (the replica checks it)", async () => {
    const body = "x".repeat(5000);
    const r = await send(["ok-1"], "/hello/x", { req: new Request("http://edge/hello/x", { method: "POST", body, headers: { "content-type": "text/plain" } }) });
    expect(r.status).toBe(200);
    expect(r.text).toBe(body);
  });

  it("a replica that refuses the edge's signature is passed by for another; alone, the edge answers 503 after trying it", async () => {
    for (let i = 0; i < 2; i++) expect(await send(["stranger", "ok-2"])).toMatchObject({ status: 200, replica: "ok-2" });
    const alone = await send(["stranger"]);
    expect(alone.status).toBe(503);
    expect(errorOf(alone.text)).toMatchObject({ code: "all_replicas_busy", details: { attempts: 1 } });
    expect(alone.trace.rejections).toBe(0);
  });

  it("a refusal's failures eject the replica: one that refuses the edge's credentials, and one that refuses while claiming room", async () => {
    for (const id of ["stranger", "liar"]) {
      const view = viewOf([id]);
      let ejections = 0;
      for (let i = 0; i < 3; i++) ejections += (await send([id], "/hello/x", { view })).trace.ejections;
      expect(ejections, id).toBe(1);
    }
    // A replica full in earnest (its one slot taken, and its load header says so) is not ejected however often it refuses.
    const view = viewOf(["busy"]);
    let ejections = 0;
    let rejections = 0;
    for (let i = 0; i < 4; i++) {
      const r = await send(["busy"], "/hello/x", { view });
      ejections += r.trace.ejections;
      rejections += r.trace.rejections;
    }
    expect(rejections).toBe(4);
    expect(ejections).toBe(0);
  });

  it("a draining replica is gone for new requests: they go elsewhere", async () => {
    for (let i = 0; i < 2; i++) expect(await send(["draining", "ok-1"])).toMatchObject({ status: 200, replica: "ok-1" });
    const alone = await send(["draining"]);
    expect(alone.status).toBe(503);
    expect(alone.trace.rejections).toBe(1);
  });

  it("the engine's own key replaces the client's credential for an engine that has one, and only there", async () => {
    const req = () => new Request("http://edge/hello/x?headers=1", { headers: { authorization: "Bearer client" } });
    const headers = () => {
      const h = new Headers();
      h.set("authorization", "Bearer client");
      return h;
    };
    const keyed = await send(["keyed"], "/hello/x", { req: req(), search: "?headers=1", ctx: { headers: headers() } });
    expect(keyed.status).toBe(200);
    expect((JSON.parse(keyed.text) as Record<string, string>).authorization).toBe("Bearer engine-key-1");
    const other = await send(["ok-1"], "/hello/x", { req: req(), search: "?headers=1", ctx: { headers: headers() } });
    expect((JSON.parse(other.text) as Record<string, string>).authorization).toBe("Bearer client");
  });

  it("a request that may not run twice is not sent again after a lost connection: 502", async () => {
    const post = () => new Request("http://edge/hello/x", { method: "POST", body: "once" });
    const r = await send(["gone", "ok-1"], "/hello/x", { req: post(), ctx: { balancer: createBalancer("round_robin", DEFAULT_PREFIX_POLICY) } });
    // Round robin may start on ok-1; when it started on the gone one, the POST was not repeated.
    if (r.trace.attempts === 1 && r.replica === null) {
      expect(r.status).toBe(502);
      expect(errorOf(r.text).code).toBe("upstream_failed");
    } else expect(r).toMatchObject({ status: 200, replica: "ok-1" });
    const alone = await send(["gone"], "/hello/x", { req: post() });
    expect(alone.status).toBe(502);
    expect(errorOf(alone.text)).toMatchObject({ code: "upstream_failed", message: "the connection to the replica was lost" });
    // A GET may: alone, the edge tried the one replica there was.
    const get = await send(["gone"]);
    expect(get.status).toBe(503);
    expect(errorOf(get.text).code).toBe("all_replicas_busy");
  });

  it("a client that has left is not the replica's fault; an edge that cannot sign says so; no replica at all is no_ready_replica", async () => {
    const gone = new AbortController();
    gone.abort();
    const left = await send(["hang"], "/hello/x", { ctx: { clientSignal: gone.signal } });
    expect(left.status).toBe(400);
    expect(errorOf(left.text).message).toBe("the request body ended early: the client's connection was lost");
    const unsigned = await send(["ok-1"], "/hello/x", { ctx: { sign: async () => Promise.reject(new Error("no secret")) } });
    expect(unsigned.status).toBe(500);
    expect(errorOf(unsigned.text)).toMatchObject({ code: "internal_error", message: "the edge cannot sign dispatches" });
    const none = await send([]);
    expect(none.status).toBe(503);
    expect(errorOf(none.text).code).toBe("no_ready_replica");
    expect(none.headers.get("retry-after")).toBe("1");
    expect(none.trace.attempts).toBe(0);
  });

  it("a stream counts in flight on its replica until it ends, and its end is traced", async () => {
    const view = viewOf(["ok-2"]);
    const trace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
    const ctx: DispatchContext = {
      deployment,
      routePrefix: "/hello",
      target: { path: "/hello/x", search: "?chunks=3&interval_ms=20" },
      headers: new Headers(),
      sign,
      view,
      balancer: createBalancer("round_robin", DEFAULT_PREFIX_POLICY),
      requestId: "stream-1",
      background: () => undefined,
      client: "ip:127.0.0.1",
      trace,
    };
    const res = await attempts(new Request("http://edge/hello/x?chunks=3&interval_ms=20"), ctx, undefined);
    expect(res.status).toBe(200);
    expect(trace.streamEnd).toBeInstanceOf(Promise);
    expect(view.get("ok-2")!.inflight).toBe(1);
    expect(await res.text()).toBe("chunk 0\nchunk 1\nchunk 2\n");
    await trace.streamEnd;
    expect(view.get("ok-2")!.inflight).toBe(0);
    // A sized answer is done when its head comes.
    const sized = await send(["ok-2"], "/hello/x", { search: "?headers=1", view });
    expect(sized.trace.streamEnd).toBeUndefined();
    expect(view.get("ok-2")!.inflight).toBe(0);
  });
});

describe("dispatch to real replicas: deadlines, lost connections and credentials across attempts (issue 51)", () => {
  const errorOf = (text: string) => (JSON.parse(text) as { error: { code: string; message: string } }).error;
  const quick = defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "echo" }, policy: { balancer: "round_robin", requestTimeoutMs: 150 } });

  it("a hung replica: 504 in the edge's words each time, and ejected after three in a row", async () => {
    const view = viewOf(["hang"]);
    const outcomes = [];
    for (let i = 0; i < 3; i++) outcomes.push(await send(["hang"], "/hello/x", { view, ctx: { deployment: quick } }));
    for (const r of outcomes) {
      expect(r.status).toBe(504);
      expect(errorOf(r.text)).toEqual({ code: "deadline_exceeded", message: "the replica did not answer before the deadline", type: expect.any(String), request_id: expect.any(String) });
    }
    expect(outcomes.map((r) => r.trace.ejections)).toEqual([0, 0, 1]);
  });

  it("a replica whose connection is refused is marked down in the view: the next requests do not try it", async () => {
    const view = viewOf(["gone", "ok-1"]);
    const balancer = createBalancer("round_robin", DEFAULT_PREFIX_POLICY);
    // Round robin alternates: within two requests one tries the gone replica first.
    let sawGone = false;
    for (let i = 0; i < 2 && !sawGone; i++) {
      const r = await send(["gone", "ok-1"], "/hello/x", { view, ctx: { balancer } });
      expect(r).toMatchObject({ status: 200, replica: "ok-1" });
      sawGone = r.trace.attempts === 2;
    }
    expect(sawGone).toBe(true);
    for (let i = 0; i < 3; i++) expect((await send(["gone", "ok-1"], "/hello/x", { view, ctx: { balancer } })).trace.attempts).toBe(1);
  });

  it("a client that leaves while the replica works aborts the wait for its answer: 400, and the replica is not blamed", async () => {
    const client = new AbortController();
    const view = viewOf(["hang"]);
    const pending = send(["hang"], "/hello/x", { view, ctx: { clientSignal: client.signal, deadline: Date.now() + 60_000 } });
    await new Promise((r) => setTimeout(r, 30));
    client.abort();
    const r = await pending;
    expect(r.status).toBe(400);
    expect(r.trace.ejections).toBe(0);
    expect(view.candidates(Date.now()).map((c) => c.id)).toEqual(["hang"]);
  });

  it("after an engine with its own key refused, the next replica gets the client's credential back, or none", async () => {
    for (const auth of ["Bearer client", null]) {
      let seen: Record<string, string> | undefined;
      for (let i = 0; i < 20 && seen === undefined; i++) {
        const headers = new Headers();
        if (auth !== null) headers.set("authorization", auth);
        const r = await send(["keyed-busy", "ok-1"], "/hello/x", { search: "?headers=1", ctx: { headers, balancer: createBalancer("round_robin", DEFAULT_PREFIX_POLICY) } });
        expect(r.status).toBe(200);
        // Only a run whose first attempt went to the engine shows the hand-back.
        if (r.trace.attempts === 2) seen = JSON.parse(r.text) as Record<string, string>;
      }
      expect(seen, String(auth)).toBeDefined();
      expect(seen!.authorization).toBe(auth ?? undefined);
    }
  });

  it("refuses a path that would leave the replica's base path, and sends nothing", async () => {
    const errors: string[] = [];
    const spy = vi.spyOn(console, "error").mockImplementation((m: string) => void errors.push(m));
    const r = await send(["ok-1"], "/hello/../../x", { view: viewOf(["ok-1"], (id) => `${replicas.get(id)!.url}/base`) });
    spy.mockRestore();
    expect(r.status).toBe(500);
    expect(errorOf(r.text)).toMatchObject({ code: "internal_error", message: "internal error" });
    expect(errors.some((e) => JSON.parse(e).msg === "dispatch target refused")).toBe(true);
    expect(r.replica).toBeNull();
  });
});
