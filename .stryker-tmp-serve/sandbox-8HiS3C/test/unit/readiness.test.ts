/** The edge's readiness per deployment (src/proxy/readiness.ts, /-/healthz; issue 52). */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import { deploymentReadiness } from "../../src/proxy/readiness.ts";

const local = defineDeployment({ name: "hello", routePrefix: "/hello", backend: { kind: "text", text: "hi" } });
const zero = defineDeployment({ name: "zero", routePrefix: "/zero", backend: { kind: "text", text: "hi" }, autoscaling: { minReplicas: 0, maxReplicas: 2 } });
const external = defineDeployment({ name: "ext", routePrefix: "/ext", backend: { kind: "external" } });

describe("deploymentReadiness", () => {
  it("is ready with a ready replica, whatever the deployment", () => {
    for (const d of [local, zero, external]) expect(deploymentReadiness(d, 1)).toBe("ready");
  });

  it("keeps the edge ready for a deployment scaled to zero (it holds requests) and one waiting for its first agent (listed)", () => {
    expect(deploymentReadiness(zero, 0)).toBe("scaled_to_zero");
    expect(deploymentReadiness(external, 0)).toBe("waiting_for_external");
  });

  it("is not ready without a replica the stack or platform starts, nor where the deployment asks to block", () => {
    expect(deploymentReadiness(local, 0)).toBe("no_ready_replica");
    for (const d of [zero, external]) expect(deploymentReadiness(defineDeployment({ ...d, policy: { requireReadyReplica: true } }), 0)).toBe("no_ready_replica");
  });
});
