/** A replica's operational paths (src/protocol/paths.ts): what the edge does not forward from a client unless the deployment asks. */
import { describe, expect, it } from "vitest";
import { REPLICA_OPERATIONAL_PATHS, isReplicaOperationalPath } from "../../src/protocol/index.ts";

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
