/**
 * The dispatch stage (src/proxy/serve/dispatch.ts) against real reference replicas on
 * loopback (ReplicaServer with the echo handler, each checking the edge's signature):
 * a request reaches one, signed; a replica at capacity refuses and the request goes to
 * another; a replica that is gone is routed around; a replica that never answers runs
 * into the deadline. The same stage runs under workerd in the e2e tests; here it runs
 * in Node, where the unit tests (and mutation testing) can reach it.
 */
import { afterAll, beforeAll, describe, expect, it } from "vitest";
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

// workerd's byte-identity stream, which dispatch.ts pipes answers through: Node's
// TransformStream with no transform passes the same bytes.
(globalThis as { IdentityTransformStream?: unknown }).IdentityTransformStream ??= class extends TransformStream<Uint8Array, Uint8Array> {};

const MASTER = "unit-test-master-secret";
const deployment = defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "echo" }, policy: { balancer: "round_robin", requestTimeoutMs: 1_500 } });

interface Running {
  id: string;
  url: string;
  server: ReplicaServer;
}
const replicas = new Map<string, Running>();
/** The edge's signer, as IsolateState makes it. */
const sign: DispatchSigner = (p) => dispatchSignature(MASTER, p);

async function start(id: string, o: { slots?: number; fault?: ReplicaFault } = {}): Promise<Running> {
  const key = await deriveReplicaKey(MASTER, "hello");
  const server = new ReplicaServer({
    replicaId: id,
    admission: new AdmissionControl(o.slots ?? 4),
    guard: new DispatchGuard(key, "hello", id),
    handler: echoHandler(),
    ...(o.fault && { fault: o.fault }),
  });
  const { port } = await server.listen(0, "127.0.0.1");
  const r = { id, url: `http://127.0.0.1:${port}`, server };
  replicas.set(id, r);
  return r;
}

beforeAll(async () => {
  await Promise.all([start("ok-1"), start("ok-2"), start("full", { slots: 0 }), start("hang", { fault: "hang" })]);
  // One that is gone: its port closed.
  const gone = await start("gone");
  await gone.server.close();
});

afterAll(async () => {
  for (const r of replicas.values()) if (r.id !== "gone") await r.server.close().catch(() => undefined);
});

/** A view of `ids`, all ready and idle as far as their reports say. */
function viewOf(ids: string[]): RoutingView {
  const m = new Membership();
  for (const id of ids) {
    m.register(registerMessage(id, { deployment: "hello", url: replicas.get(id)!.url }), T0);
    m.report(reportMessage(id, 1, { deployment: "hello" }), T0);
  }
  const view = new RoutingView();
  view.applySnapshot(m.snapshot("hello", T0), Date.now());
  return view;
}

async function send(ids: string[], path = "/hello/x"): Promise<{ status: number; text: string; trace: DispatchTrace; replica: string | null }> {
  const trace: DispatchTrace = { attempts: 0, rejections: 0, ejections: 0 };
  const background: Promise<unknown>[] = [];
  const ctx: DispatchContext = {
    deployment,
    routePrefix: "/hello",
    target: { path, search: "" },
    headers: new Headers(),
    sign,
    view: viewOf(ids),
    balancer: createBalancer("round_robin", DEFAULT_PREFIX_POLICY),
    requestId: crypto.randomUUID(),
    background: (p) => background.push(p),
    client: "ip:127.0.0.1",
    trace,
  };
  const res = await attempts(new Request(`http://edge${path}`), ctx, undefined);
  const text = await res.text();
  await Promise.allSettled(background);
  return { status: res.status, text, trace, replica: trace.replica ?? null };
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
