// @ts-nocheck
// The edge app mounted under a prefix of a user's own Hono app
// (`userApp.route("/ml", createEdgeApp(deployments).app)`), inside workerd with
// the Worker's bindings: system routes, control routes (signed over the full
// path, as the replica sends it), route-prefix matching and the path checks all
// live under the prefix, and the user's other routes are left alone.
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { Hono } from "hono";
import { afterAll, describe, expect, it } from "vitest";
import { deployments } from "../../.switchyard/deployments.ts";
import { createEdgeApp } from "../../src/index.ts";
import { NonceCounter, PROTOCOL_VERSION, deriveReplicaKey, importReplicaKey, signedHeaders, type RegisterMessage } from "../../src/protocol/index.ts";
import { registerMessage, reportMessage } from "../fixtures/control-messages.ts";

const user = new Hono<{ Bindings: Env }>();
user.get("/", (c) => c.text("the user's own page"));
user.route("/ml", createEdgeApp(deployments).app);

async function request(path: string, init?: RequestInit): Promise<Response> {
  const ctx = createExecutionContext();
  const res = await user.request(`http://edge${path}`, init, env, ctx);
  await waitOnExecutionContext(ctx);
  return res;
}

const nonces = new NonceCounter();
const register = (id: string): RegisterMessage => registerMessage(id, { deployment: "hello", url: `http://127.0.0.1:9/${id}`, max_ongoing_requests: 5 });

/** POSTs a control message to `path`, signed over `signedPath` (the replica's EdgeClient signs the path it sends to). */
async function control(path: string, message: unknown, signedPath = path): Promise<Response> {
  const body = JSON.stringify(message);
  const key = await importReplicaKey(await deriveReplicaKey("test-replica-secret", "hello"));
  const headers = await signedHeaders(key, { timestamp: Date.now(), nonce: nonces.next(), path: signedPath, body });
  return request(path, { method: "POST", headers: { "content-type": "application/json", "content-length": String(body.length), ...headers }, body });
}

afterAll(async () => {
  for (const id of ["m1"]) await control("/ml/-/replicas/deregister", { protocol: PROTOCOL_VERSION, deployment: "hello", replica_id: id });
});

describe("the edge app mounted at /ml", () => {
  it("serves its system routes under the prefix, and not outside it", async () => {
    expect(await (await request("/ml/-/livez")).json()).toEqual({ status: "ok" });
    expect(await (await request("/ml/-/routes")).json()).toMatchObject({ "/hello": "hello", "/echo": "echo" });
    expect((await request("/-/livez")).status).toBe(404);
    expect(await (await request("/")).text()).toBe("the user's own page");
    const none = await request("/ml/-/nope");
    expect(none.status).toBe(404);
    expect(await none.json()).toMatchObject({ error: { code: "route_not_found" } });
  });

  it("matches route prefixes below the mount", async () => {
    const miss = await request("/ml/nowhere");
    expect(miss.status).toBe(404);
    expect(await miss.json()).toMatchObject({ error: { message: "no deployment serves /nowhere" } });
    // /ml/hello is the "hello" deployment: no ready replica here, but routed to it (not a 404).
    const hello = await request("/ml/hello/x");
    expect(hello.status).not.toBe(404);
    expect(JSON.stringify(await hello.json())).not.toMatch(/route_not_found/);
  });

  it("refuses a dot segment under the mount (the one path normalisation runs first)", async () => {
    // (The URL parser resolves "%2e%2e" itself; an encoded slash keeps this one for the edge to refuse.)
    const res = await request("/ml/hello/..%2Fsecret");
    expect(res.status).toBe(400);
    expect(await res.json()).toMatchObject({ error: { code: "bad_request" } });
  });

  it("takes control messages at /ml/-/replicas/..., signed over the full path", async () => {
    const ok = await control("/ml/-/replicas/register", register("m1"));
    expect(ok.status).toBe(200);
    expect(await ok.json()).toMatchObject({ ok: true });
    // Signed over the unmounted path but sent under the mount: not the path the replica sent.
    const bad = await control("/ml/-/replicas/register", register("m1"), "/-/replicas/register");
    expect(bad.status).toBe(401);
    expect(await bad.json()).toMatchObject({ error: { details: { reason: "bad_signature" } } });
  });
});
