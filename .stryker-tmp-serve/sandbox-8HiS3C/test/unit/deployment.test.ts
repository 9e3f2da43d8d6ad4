/** defineDeployment validation and defaults; checkDeployments clash detection. */
// @ts-nocheck

import { describe, it, expect } from "vitest";
import { checkDeployments, defineDeployment, type Deployment, type DeploymentInput } from "../../src/config/deployment.ts";

const minimal: DeploymentInput = { name: "hello", routePrefix: "/hello", backend: { kind: "text", text: "hi" } };

/** Calls defineDeployment with input the types would refuse. */
const defineLoose = (input: unknown) => defineDeployment(input as DeploymentInput);

describe("defineDeployment", () => {
  it("fills every default", () => {
    expect(defineDeployment(minimal)).toEqual({
      name: "hello",
      routePrefix: "/hello",
      backend: { kind: "text", text: "hi" },
      localReplicas: 2,
      maxOngoingRequests: 5,
      methods: ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"],
      access: { public: false, replicaRoutes: false },
      replicaOrigins: [],
      policy: {
        maxAttempts: 3,
        backoffBaseMs: 5,
        backoffCapMs: 250,
        requestTimeoutMs: 60_000,
        stripPrefix: false,
        idempotent: false,
        ejectAfterFailures: 3,
        ejectBaseMs: 5_000,
        balancer: "load_aware",
      },
      admission: { hold: true, maxWaitMs: 30_000, defaultPriority: 0, maxPriority: 0 },
      sessionAffinity: { enabled: true, ttlSeconds: 600, shards: 8, rebindAtLoad: 1, bindOnRequest: 2, maxNewBindingsPerSecond: 10, maxNewBindingsBurst: 100 },
      routing: { shards: 1, relay: true, refreshEveryRequests: 20 },
      limits: {
        maxRequestBodyBytes: 10 * 1024 * 1024,
        replayableBodyBytes: 64 * 1024,
        maxHeaderBytes: 32 * 1024,
        maxPendingRequests: 1024,
        uploadIdleTimeoutMs: 10_000,
        uploadMinBytesPerSecond: 1024,
        duplexUploads: false,
        duplexUploadsPerClient: 4,
      },
    });
    // Private unless the file says otherwise.
    expect(defineDeployment(minimal).access.public).toBe(false);
    // Multiplexing is off unless declared.
    expect("multiplexing" in defineDeployment(minimal)).toBe(false);
  });

  it("fills defaults inside a partly given policy and limits", () => {
    const d = defineDeployment({ ...minimal, policy: { maxAttempts: 1 }, limits: { replayableBodyBytes: 0 } });
    expect(d.policy).toEqual({
      maxAttempts: 1,
      backoffBaseMs: 5,
      backoffCapMs: 250,
      requestTimeoutMs: 60_000,
      stripPrefix: false,
      idempotent: false,
      ejectAfterFailures: 3,
      ejectBaseMs: 5_000,
      balancer: "load_aware",
    });
    expect(d.limits).toEqual({
      maxRequestBodyBytes: 10 * 1024 * 1024,
      replayableBodyBytes: 0,
      maxHeaderBytes: 32 * 1024,
      maxPendingRequests: 1024,
      uploadIdleTimeoutMs: 10_000,
      uploadMinBytesPerSecond: 1024,
      duplexUploads: false,
      duplexUploadsPerClient: 4,
    });
  });

  it("keeps given values", () => {
    const d = defineDeployment({
      name: "vad",
      routePrefix: "/v1/vad",
      backend: { kind: "onnx", model: "silero-vad-v5" },
      localReplicas: 0,
      maxOngoingRequests: 100_000,
      policy: { maxAttempts: 10, backoffBaseMs: 0, backoffCapMs: 60_000, requestTimeoutMs: 1, stripPrefix: true, idempotent: true },
      limits: { maxRequestBodyBytes: 0, replayableBodyBytes: 1024 * 1024 },
    });
    expect(d.localReplicas).toBe(0);
    expect(d.policy.stripPrefix).toBe(true);
    expect(d.limits.replayableBodyBytes).toBe(1024 * 1024);
  });

  it("accepts every balancer", () => {
    for (const balancer of ["load_aware", "round_robin", "random"] as const) {
      expect(defineDeployment({ ...minimal, policy: { balancer } }).policy.balancer).toBe(balancer);
    }
  });

  it("accepts every backend kind", () => {
    for (const backend of [{ kind: "text", text: "" }, { kind: "onnx", model: "m" }, { kind: "echo" }, { kind: "external" }] as const) {
      expect(defineDeployment({ ...minimal, backend }).backend).toEqual(backend);
    }
  });

  it("accepts the catch-all and nested prefixes", () => {
    for (const routePrefix of ["/", "/a", "/a/b/c", "/v1.0/x_y~z-w"]) expect(defineDeployment({ ...minimal, routePrefix }).routePrefix).toBe(routePrefix);
  });

  const invalid: [string, unknown][] = [
    ["upper-case name", { ...minimal, name: "Hello" }],
    ["name starting with a digit", { ...minimal, name: "1hello" }],
    ["name with underscore", { ...minimal, name: "hel_lo" }],
    ["overlong name", { ...minimal, name: "h".repeat(64) }],
    ["prefix without leading slash", { ...minimal, routePrefix: "hello" }],
    ["prefix with trailing slash", { ...minimal, routePrefix: "/hello/" }],
    ["prefix with double slash", { ...minimal, routePrefix: "/a//b" }],
    ["prefix with a query", { ...minimal, routePrefix: "/a?b" }],
    ["prefix with a space", { ...minimal, routePrefix: "/a b" }],
    ["empty prefix", { ...minimal, routePrefix: "" }],
    ["unknown top-level key", { ...minimal, replicas: 3 }],
    ["unknown policy key", { ...minimal, policy: { retries: 2 } }],
    ["unknown limits key", { ...minimal, limits: { maxBody: 1 } }],
    ["unknown backend kind", { ...minimal, backend: { kind: "python" } }],
    ["backend with extra key", { ...minimal, backend: { kind: "echo", text: "x" } }],
    ["onnx backend with an empty model", { ...minimal, backend: { kind: "onnx", model: "" } }],
    ["onnx backend without model or multiplexing", { ...minimal, backend: { kind: "onnx" } }],
    ["onnx backend with an invalid model id", { ...minimal, backend: { kind: "onnx", model: "has space" } }],
    ["unknown multiplexing key", { ...minimal, multiplexing: { maxModels: 2 } }],
    ["invalid model id in multiplexing.models", { ...minimal, multiplexing: { models: ["ok", "-bad"] } }],
    ["more than 1024 multiplexed models", { ...minimal, multiplexing: { models: Array.from({ length: 1025 }, (_, i) => `m${i}`) } }],
    ["maxModelsPerReplica 0", { ...minimal, multiplexing: { maxModelsPerReplica: 0 } }],
    ["maxModelsPerReplica 1025", { ...minimal, multiplexing: { maxModelsPerReplica: 1025 } }],
    ["fractional maxModelsPerReplica", { ...minimal, multiplexing: { maxModelsPerReplica: 1.5 } }],
    ["invalid defaultModel id", { ...minimal, multiplexing: { defaultModel: "a b" } }],
    ["defaultModel outside multiplexing.models", { ...minimal, multiplexing: { models: ["a", "b"], defaultModel: "c" } }],
    ["onnx single model and multiplexing together", { ...minimal, backend: { kind: "onnx", model: "a" }, multiplexing: { models: ["a", "b"] } }],
    ["onnx single model and an empty multiplexing section", { ...minimal, backend: { kind: "onnx", model: "a" }, multiplexing: {} }],
    ["onnx without model and multiplexing without models", { ...minimal, backend: { kind: "onnx" }, multiplexing: { defaultModel: "a" } }],
    ["unknown sessionAffinity key", { ...minimal, sessionAffinity: { ttl: 5 } }],
    ["sessionAffinity.enabled not boolean", { ...minimal, sessionAffinity: { enabled: "yes" } }],
    ["routing.shards zero", { ...minimal, routing: { shards: 0 } }],
    ["routing.shards above the most", { ...minimal, routing: { shards: 257 } }],
    ["unknown routing key", { ...minimal, routing: { relays: true } }],
    ["ttlSeconds below 10", { ...minimal, sessionAffinity: { ttlSeconds: 9 } }],
    ["ttlSeconds above a week", { ...minimal, sessionAffinity: { ttlSeconds: 7 * 24 * 3600 + 1 } }],
    ["fractional ttlSeconds", { ...minimal, sessionAffinity: { ttlSeconds: 60.5 } }],
    ["shards 0", { ...minimal, sessionAffinity: { shards: 0 } }],
    ["shards 1025", { ...minimal, sessionAffinity: { shards: 1025 } }],
    ["fractional shards", { ...minimal, sessionAffinity: { shards: 2.5 } }],
    ["rebindAtLoad below 0.1", { ...minimal, sessionAffinity: { rebindAtLoad: 0.09 } }],
    ["rebindAtLoad above 10", { ...minimal, sessionAffinity: { rebindAtLoad: 10.01 } }],
    ["bindOnRequest 0", { ...minimal, sessionAffinity: { bindOnRequest: 0 } }],
    ["maxNewBindingsBurst 0", { ...minimal, sessionAffinity: { maxNewBindingsBurst: 0 } }],
    ["missing backend", { name: "hello", routePrefix: "/hello" }],
    ["missing prefix", { name: "hello", backend: { kind: "echo" } }],
    ["localReplicas above 256", { ...minimal, localReplicas: 257 }],
    ["negative localReplicas", { ...minimal, localReplicas: -1 }],
    ["maxOngoingRequests 0", { ...minimal, maxOngoingRequests: 0 }],
    ["fractional maxOngoingRequests", { ...minimal, maxOngoingRequests: 2.5 }],
    ["maxAttempts 0", { ...minimal, policy: { maxAttempts: 0 } }],
    ["maxAttempts 11", { ...minimal, policy: { maxAttempts: 11 } }],
    ["requestTimeoutMs 0", { ...minimal, policy: { requestTimeoutMs: 0 } }],
    ["stripPrefix not boolean", { ...minimal, policy: { stripPrefix: "yes" } }],
    ["unknown balancer", { ...minimal, policy: { balancer: "least_latency" } }],
    ["body limit above 100 MiB", { ...minimal, limits: { maxRequestBodyBytes: 100 * 1024 * 1024 + 1 } }],
    ["replayable limit above 1 MiB", { ...minimal, limits: { replayableBodyBytes: 1024 * 1024 + 1 } }],
  ];
  for (const [what, input] of invalid) {
    it(`throws for ${what}, naming the deployment`, () => {
      const name = (input as { name?: unknown }).name;
      expect(() => defineLoose(input)).toThrow(`invalid deployment "${String(name)}"`);
    });
  }

  it("names the offending field in the message", () => {
    expect(() => defineLoose({ ...minimal, policy: { maxAttempts: 0 } })).toThrow(/maxAttempts/);
    expect(() => defineLoose({ ...minimal, routePrefix: "/x/" })).toThrow(/route prefixes look like \/a\/b/);
  });

  it("uses '?' when there is no name to show", () => {
    expect(() => defineLoose({ routePrefix: "/x", backend: { kind: "echo" } })).toThrow('invalid deployment "?"');
    expect(() => defineLoose(null)).toThrow('invalid deployment "?"');
    expect(() => defineLoose("hello")).toThrow('invalid deployment "?"');
  });
});

describe("defineDeployment: multiplexing", () => {
  it("fills its defaults when declared empty", () => {
    expect(defineDeployment({ ...minimal, multiplexing: {} }).multiplexing).toEqual({ models: [], maxModelsPerReplica: 3 });
  });

  it("keeps given values", () => {
    const d = defineDeployment({
      name: "vad",
      routePrefix: "/v1/vad",
      backend: { kind: "onnx" },
      multiplexing: { models: ["silero-vad-v4", "silero-vad-v5", "org/name@v1"], maxModelsPerReplica: 2, defaultModel: "silero-vad-v5" },
    });
    expect(d.backend).toEqual({ kind: "onnx" });
    expect(d.multiplexing).toEqual({ models: ["silero-vad-v4", "silero-vad-v5", "org/name@v1"], maxModelsPerReplica: 2, defaultModel: "silero-vad-v5" });
  });

  it("maxModelsPerReplica accepts 1 and 1024", () => {
    for (const v of [1, 1024]) expect(defineDeployment({ ...minimal, multiplexing: { maxModelsPerReplica: v } }).multiplexing!.maxModelsPerReplica).toBe(v);
  });

  it("a defaultModel without a model list is allowed (any id passes)", () => {
    expect(defineDeployment({ ...minimal, multiplexing: { defaultModel: "anything" } }).multiplexing).toEqual({ models: [], maxModelsPerReplica: 3, defaultModel: "anything" });
  });

  it("an onnx backend takes either one model or multiplexing.models", () => {
    expect(defineDeployment({ ...minimal, backend: { kind: "onnx", model: "silero-vad-v5" } }).backend).toEqual({ kind: "onnx", model: "silero-vad-v5" });
    expect(defineDeployment({ ...minimal, backend: { kind: "onnx" }, multiplexing: { models: ["a"] } }).multiplexing!.models).toEqual(["a"]);
  });

  it("other backends may multiplex without a model list", () => {
    for (const backend of [{ kind: "echo" }, { kind: "external" }, { kind: "text", text: "x" }] as const) {
      expect(defineDeployment({ ...minimal, backend, multiplexing: {} }).multiplexing).toEqual({ models: [], maxModelsPerReplica: 3 });
    }
  });

  it("names the offending field of a cross-field check", () => {
    expect(() => defineLoose({ ...minimal, backend: { kind: "onnx" } })).toThrow(/an onnx backend needs `model`/);
    expect(() => defineLoose({ ...minimal, backend: { kind: "onnx" } })).toThrow(/backend\.model/);
    expect(() => defineLoose({ ...minimal, backend: { kind: "onnx", model: "a" }, multiplexing: {} })).toThrow(/cannot also multiplex/);
    expect(() => defineLoose({ ...minimal, multiplexing: { models: ["a"], defaultModel: "b" } })).toThrow(/defaultModel must be one of multiplexing\.models/);
  });
});

describe("defineDeployment: sessionAffinity", () => {
  it("is on by default with the documented defaults", () => {
    expect(defineDeployment(minimal).sessionAffinity).toEqual({ enabled: true, ttlSeconds: 600, shards: 8, rebindAtLoad: 1, bindOnRequest: 2, maxNewBindingsPerSecond: 10, maxNewBindingsBurst: 100 });
  });

  it("fills defaults inside a partly given section", () => {
    expect(defineDeployment({ ...minimal, sessionAffinity: { enabled: false } }).sessionAffinity).toEqual({ enabled: false, ttlSeconds: 600, shards: 8, rebindAtLoad: 1, bindOnRequest: 2, maxNewBindingsPerSecond: 10, maxNewBindingsBurst: 100 });
    expect(defineDeployment({ ...minimal, sessionAffinity: { shards: 1 } }).sessionAffinity).toEqual({ enabled: true, ttlSeconds: 600, shards: 1, rebindAtLoad: 1, bindOnRequest: 2, maxNewBindingsPerSecond: 10, maxNewBindingsBurst: 100 });
  });

  it("accepts its bounds", () => {
    const d = (sa: NonNullable<DeploymentInput["sessionAffinity"]>) => defineDeployment({ ...minimal, sessionAffinity: sa }).sessionAffinity;
    expect(d({ ttlSeconds: 10, shards: 1, rebindAtLoad: 0.1 })).toEqual({ enabled: true, ttlSeconds: 10, shards: 1, rebindAtLoad: 0.1, bindOnRequest: 2, maxNewBindingsPerSecond: 10, maxNewBindingsBurst: 100 });
    expect(d({ ttlSeconds: 7 * 24 * 3600, shards: 1024, rebindAtLoad: 10 })).toEqual({ enabled: true, ttlSeconds: 7 * 24 * 3600, shards: 1024, rebindAtLoad: 10, bindOnRequest: 2, maxNewBindingsPerSecond: 10, maxNewBindingsBurst: 100 });
    expect(d({ rebindAtLoad: 1.5 }).rebindAtLoad).toBe(1.5);
  });
});

describe("checkDeployments", () => {
  const d = (name: string, routePrefix: string): Deployment => defineDeployment({ name, routePrefix, backend: { kind: "echo" } });

  it("accepts distinct names and prefixes, including nested ones and '/'", () => {
    expect(() => checkDeployments([d("a", "/a"), d("b", "/a/b"), d("root", "/"), d("c", "/-x")])).not.toThrow();
    expect(() => checkDeployments([])).not.toThrow();
  });

  it("rejects duplicate names", () => {
    expect(() => checkDeployments([d("a", "/a"), d("a", "/b")])).toThrow('two deployments are named "a"');
  });

  it("rejects duplicate prefixes", () => {
    expect(() => checkDeployments([d("a", "/x"), d("b", "/x")])).toThrow('two deployments use route prefix "/x"');
    expect(() => checkDeployments([d("a", "/"), d("b", "/")])).toThrow('two deployments use route prefix "/"');
  });

  it("rejects prefixes reserved for system routes", () => {
    expect(() => checkDeployments([d("a", "/-")])).toThrow('route prefix "/-" is reserved for system routes');
    expect(() => checkDeployments([d("a", "/-/control")])).toThrow('route prefix "/-/control" is reserved');
    expect(() => checkDeployments([d("ok", "/ok"), d("a", "/-/x/y")])).toThrow(/reserved/);
  });
});
