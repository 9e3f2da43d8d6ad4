/**
 * The Worker's fetch handler (EdgeApp.fetch) serves deployment routes without Hono
 * and hands every other path to the Hono app: whichever way a request goes, the
 * answer is the one `app.fetch` gives. Requests here never reach a replica (no
 * route, wrong method, bad path, system routes), so no bindings are needed.
 */
// @ts-nocheck

import { describe, expect, it, vi } from "vitest";

vi.mock("cloudflare:workers", () => ({ DurableObject: class {} }));

const { createEdgeApp } = await import("../../src/proxy/app.ts");
const { defineDeployment } = await import("../../src/config/deployment.ts");

const deployments = [
  defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "text", text: "hi" }, methods: ["GET"] }),
  defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "llm", model: "tiny-lm" }, openai: { models: ["tiny-lm"] } }),
];
const env = {} as never;
const ctx = { waitUntil: () => {}, passThroughOnException: () => {}, props: {} } as never;

const answer = async (res: Response) => ({ status: res.status, allow: res.headers.get("allow"), body: await res.text() });

describe("EdgeApp.fetch", () => {
  const cases: [string, RequestInit?][] = [
    ["http://edge.test/nothing/here"],
    ["http://edge.test/nothing/here", { method: "HEAD" }],
    ["http://edge.test/hello", { method: "HEAD" }],
    ["http://edge.test//", { method: "HEAD" }],
    ["http://edge.test/hello", { method: "POST", body: "x" }],
    ["http://edge.test/hello/%zz"],
    ["http://edge.test/hello/../secret"],
    ["http://edge.test/-/livez"],
    ["http://edge.test/-/routes"],
    ["http://edge.test/-/nope"],
    ["http://edge.test/-/livez", { method: "POST" }],
    ["http://edge.test/%2D/livez"],
    ["http://edge.test/v1/models"],
    ["http://edge.test/v1/nothing"],
  ];
  it.each(cases)("answers %s as the Hono app does", async (url, init) => {
    const edge = createEdgeApp(deployments);
    const headers = { "x-request-id": "req-1" };
    const direct = await answer(await edge.fetch(new Request(url, { ...init, headers }), env, ctx));
    const viaHono = await answer(await edge.app.fetch(new Request(url, { ...init, headers }), env, ctx));
    expect(direct).toEqual(viaHono);
  });

  it("answers a path no deployment serves with the proxy's own 404", async () => {
    const res = await createEdgeApp(deployments).fetch(new Request("http://edge.test/nothing", { headers: { "x-request-id": "req-2" } }), env, ctx);
    expect(res.status).toBe(404);
    expect(await res.json()).toMatchObject({ error: { code: "route_not_found" } });
  });
});
