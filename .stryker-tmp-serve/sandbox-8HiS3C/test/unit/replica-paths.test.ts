/** A replica's operational paths (src/protocol/paths.ts): what the edge does not forward from a client unless the deployment asks. */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { defineDeployment } from "../../src/config/deployment.ts";
import { REPLICA_OPERATIONAL_PATHS, isReplicaOperationalPath } from "../../src/protocol/index.ts";
import { replicaRouteForwarded } from "../../src/proxy/serve/request.ts";

describe("isReplicaOperationalPath", () => {
  it("covers the replica's own /-/ routes, probes and scrapers, and the engines' admin routes", () => {
    for (const p of ["/-/healthz", "/-/anything/deeper", "/-", "/health", "/healthz", "/metrics", "/ping", "/version", "/load", "/health_generate", "/reset_prefix_cache", "/sleep", "/wake_up", "/flush_cache", "/update_weights_from_disk", "/start_profile"]) {
      expect(isReplicaOperationalPath(p), p).toBe(true);
    }
  });

  it("sees through a trailing slash and a ; parameter, which some servers ignore", () => {
    for (const p of ["/metrics/", "/metrics//", "/metrics;x", "/health;jsessionid=1", "/-/healthz/"]) expect(isReplicaOperationalPath(p), p).toBe(true);
  });

  it("leaves every other path alone: the API itself, and paths that only look alike", () => {
    for (const p of ["/", "/v1/chat/completions", "/v1/models", "/metrics-report", "/my/metrics", "/healthy", "/x/-/healthz", "/-x", "/pinged", "/loads"]) {
      expect(isReplicaOperationalPath(p), p).toBe(false);
    }
  });

  it("is one list: every listed path is operational, and each is an absolute path", () => {
    for (const p of REPLICA_OPERATIONAL_PATHS) {
      expect(p.startsWith("/"), p).toBe(true);
      expect(isReplicaOperationalPath(p), p).toBe(true);
    }
  });
});

describe("engine admin routes (issue 50)", () => {
  const admin = ["/v1/load_lora_adapter", "/v1/unload_lora_adapter", "/load_lora_adapter", "/update_weights", "/update_weights_from_ipc", "/init_weight_transfer_engine", "/get_model_info", "/set_internal_state", "/dumper/dump", "/dumper"];

  it("are operational: the edge does not forward them", () => {
    for (const p of admin) expect(isReplicaOperationalPath(p), p).toBe(true);
    const d = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "external" }, policy: { stripPrefix: true } });
    for (const p of admin) expect(replicaRouteForwarded(d, p), p).toBe(false);
    expect(replicaRouteForwarded(d, "/v1/chat/completions")).toBe(true);
  });

  it("are forwarded where the deployment names them (and only those), or all with replicaRoutes: true", () => {
    const named = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "external" }, access: { replicaRoutes: ["/v1/load_lora_adapter"] } });
    expect(replicaRouteForwarded(named, "/v1/load_lora_adapter")).toBe(true);
    expect(replicaRouteForwarded(named, "/v1/load_lora_adapter/")).toBe(true);
    expect(replicaRouteForwarded(named, "/v1/unload_lora_adapter")).toBe(false);
    expect(replicaRouteForwarded(named, "/metrics")).toBe(false);
    const all = defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "external" }, access: { replicaRoutes: true } });
    for (const p of admin) expect(replicaRouteForwarded(all, p), p).toBe(true);
    expect(() => defineDeployment({ name: "llm", routePrefix: "/llm", backend: { kind: "external" }, access: { replicaRoutes: ["metrics"] } })).toThrow(/a path as dispatched/);
  });
});
