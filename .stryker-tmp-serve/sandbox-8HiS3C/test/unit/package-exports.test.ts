/**
 * The package as a user imports it: each path of package.json's `exports`,
 * resolved by the package's own name (Node's self-reference), has the named
 * exports the README promises.
 */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { describe, expect, it, vi } from "vitest";

// The Worker's modules import workerd's built-in module; in Node a stand-in base class will do for checking names.
vi.mock("cloudflare:workers", () => ({ DurableObject: class {} }));

const pkg = JSON.parse(readFileSync(new URL("../../package.json", import.meta.url), "utf8")) as { name: string; exports: Record<string, unknown> };

describe(`${pkg.name} exports`, () => {
  it("has a scoped name and the documented export paths", () => {
    expect(pkg.name).toBe("@switchyard-edge/switchyard");
    expect(Object.keys(pkg.exports)).toEqual([".", "./durable-objects", "./protocol", "./protocol.schema.json", "./package.json"]);
  });

  it(".: defineDeployment, createEdgeApp, registerServedDeployments", async () => {
    const m = await import("@switchyard-edge/switchyard");
    expect(Object.keys(m).sort()).toEqual(["createEdgeApp", "defineDeployment", "registerServedDeployments"]);
    const d = m.defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "text", text: "hi" } });
    expect(typeof m.createEdgeApp([d]).app.fetch).toBe("function");
  });

  it("./durable-objects: the six Durable Object classes", async () => {
    const m = await import("@switchyard-edge/switchyard/durable-objects");
    expect(Object.keys(m).sort()).toEqual(["AccessKeys", "DeploymentRouter", "RateLimiter", "SessionRouter", "SnapshotRelay", "Telemetry"]);
    for (const cls of Object.values(m)) expect(typeof cls).toBe("function");
  });

  it("./protocol: the message schemas, signing and the control paths", async () => {
    const m = await import("@switchyard-edge/switchyard/protocol");
    for (const name of ["RegisterMessage", "ReportMessage", "DeregisterMessage", "NodeReportMessage", "PROTOCOL_VERSION", "ControlPath", "signedHeaders", "deriveReplicaKey"]) {
      expect(m, name).toHaveProperty(name);
    }
    expect(m.RegisterMessage.safeParse({ protocol: m.PROTOCOL_VERSION, deployment: "hello", replica_id: "r1", url: "http://127.0.0.1:1", max_ongoing_requests: 1 }).success).toBe(true);
  });

  it("./protocol.schema.json: the generated JSON Schema", async () => {
    const m = (await import("@switchyard-edge/switchyard/protocol.schema.json", { with: { type: "json" } })) as { default: { $defs: object } };
    expect(Object.keys(m.default.$defs)).toContain("RegisterMessage");
  });
});
