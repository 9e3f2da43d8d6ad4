/** defineDeployment validation and defaults; checkDeployments clash detection. */
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
      policy: { maxAttempts: 3, backoffBaseMs: 5, backoffCapMs: 250, requestTimeoutMs: 60_000, stripPrefix: false, idempotent: false },
      limits: { maxRequestBodyBytes: 10 * 1024 * 1024, replayableBodyBytes: 64 * 1024 },
    });
  });

  it("fills defaults inside a partly given policy and limits", () => {
    const d = defineDeployment({ ...minimal, policy: { maxAttempts: 1 }, limits: { replayableBodyBytes: 0 } });
    expect(d.policy).toEqual({ maxAttempts: 1, backoffBaseMs: 5, backoffCapMs: 250, requestTimeoutMs: 60_000, stripPrefix: false, idempotent: false });
    expect(d.limits).toEqual({ maxRequestBodyBytes: 10 * 1024 * 1024, replayableBodyBytes: 0 });
  });

  it("keeps given values", () => {
    const d = defineDeployment({
      name: "vad",
      routePrefix: "/v1/vad",
      backend: { kind: "onnx", model: "silero-vad" },
      localReplicas: 0,
      maxOngoingRequests: 100_000,
      policy: { maxAttempts: 10, backoffBaseMs: 0, backoffCapMs: 60_000, requestTimeoutMs: 1, stripPrefix: true, idempotent: true },
      limits: { maxRequestBodyBytes: 0, replayableBodyBytes: 1024 * 1024 },
    });
    expect(d.localReplicas).toBe(0);
    expect(d.policy.stripPrefix).toBe(true);
    expect(d.limits.replayableBodyBytes).toBe(1024 * 1024);
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
    ["onnx backend without model", { ...minimal, backend: { kind: "onnx", model: "" } }],
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
