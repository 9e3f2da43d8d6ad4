// The edge model handler (src/proxy/serve/edge-model.ts) and the per-isolate lazy model
// (src/edge/lazy-model.ts), in Node: the model is the replica's own, on Node's
// onnxruntime-web, so these check the handler's contract; test/e2e/edge-inference.test.ts
// runs it inside workerd.
import { describe, expect, it, vi } from "vitest";
import { defineDeployment, type DeploymentInput } from "../../src/config/deployment.ts";
import { edgeModel, edgeModelIds } from "../../src/edge/catalog.ts";
import { lazyModel, provideEdgeModel } from "../../src/edge/lazy-model.ts";
import { MAX_MODEL_INPUT_BYTES, serveAtEdge } from "../../src/proxy/serve/edge-model.ts";
import { createModelById, type InferenceModel } from "../../src/models/index.ts";
import { nodeOnnxRuntime, readPackageFile } from "../../src/models/onnx-session.ts";
import { synthesizeVowel, type SileroVadOutput } from "../../src/models/silero-vad.ts";

const edgeDeployment = (over: Partial<DeploymentInput> = {}) =>
  defineDeployment({ name: "vad-edge", routePrefix: "/vad-edge", backend: { kind: "edge", model: "silero-vad-v5" }, access: { public: true }, ...over });

const fakeModel = (id: string): InferenceModel => ({
  id,
  description: "fake",
  inputExample: {},
  infer: async (x) => x,
  release: async () => undefined,
});

describe("lazyModel: one model per isolate, created on first use", () => {
  it("shares one creation between concurrent first acquires; later acquires hit", async () => {
    let creations = 0;
    let finish!: (m: InferenceModel) => void;
    const host = lazyModel(() => {
      creations++;
      return new Promise<InferenceModel>((r) => (finish = r));
    });
    expect(host.ready).toBe(false);
    const first = Array.from({ length: 5 }, () => host.acquire());
    await Promise.resolve();
    expect(creations).toBe(1);
    const model = fakeModel("m");
    finish(model);
    const leases = await Promise.all(first);
    expect(leases.every((l) => l.model === model && !l.hit)).toBe(true);
    expect(host.ready).toBe(true);
    expect(await host.acquire()).toEqual({ model, hit: true });
    expect(creations).toBe(1);
  });

  it("does not keep a failed creation: every waiter gets the error, the next acquire tries again", async () => {
    let creations = 0;
    const host = lazyModel(async () => {
      creations++;
      if (creations === 1) throw new Error("out of memory");
      return fakeModel("m");
    });
    const failed = await Promise.allSettled([host.acquire(), host.acquire()]);
    expect(failed.map((r) => r.status)).toEqual(["rejected", "rejected"]);
    expect(creations).toBe(1);
    expect((await host.acquire()).hit).toBe(false);
    expect((await host.acquire()).hit).toBe(true);
    expect(creations).toBe(2);
  });

  it("turns a synchronous throw of the factory into a rejection", async () => {
    const host = lazyModel(() => {
      throw new Error("boom");
    });
    await expect(host.acquire()).rejects.toThrow("boom");
  });
});

describe("edge catalog", () => {
  it("knows the Silero VAD versions and where their weights are", async () => {
    expect(edgeModelIds).toEqual(["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"]);
    expect(edgeModel("silero-vad-v5")?.weights).toBe("@ricky0123/vad-web/dist/silero_vad_v5.onnx");
    expect(edgeModel("tiny-lm")).toBeUndefined();
    // The entry builds the replica's model from the weights on any OnnxRuntime.
    const entry = edgeModel("silero-vad-v4")!;
    const model = await entry.create(nodeOnnxRuntime, await readPackageFile(entry.weights));
    try {
      const input = { samples: synthesizeVowel(8_000) };
      const reference = await createModelById("silero-vad-v4");
      expect(await model.infer(input)).toEqual(await reference.infer(input));
      await reference.release();
    } finally {
      await model.release();
    }
  });
});

describe("serveAtEdge", () => {
  // The real model on Node's runtime, behind the handler.
  provideEdgeModel("silero-vad-v5", lazyModel(() => createModelById("silero-vad-v5")));
  const d = edgeDeployment();
  const serve = (init: RequestInit & { path?: string; duplex?: "half" } = {}, deployment = d) =>
    serveAtEdge(new Request(`http://edge${init.path ?? "/vad-edge"}`, init), { deployment, requestId: "req-1" });

  it("answers a valid POST with the model's output and says it ran at the edge", async () => {
    const input = { samples: synthesizeVowel(4_000) };
    const res = await serve({ method: "POST", body: JSON.stringify(input) });
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toBe("application/json; charset=utf-8");
    expect(res.headers.get("x-switchyard-replica")).toBe("edge");
    expect(res.headers.get("x-request-id")).toBe("req-1");
    expect(res.headers.get("x-switchyard-model")).toBe("silero-vad-v5");
    expect(["hit", "miss"]).toContain(res.headers.get("x-switchyard-model-cache"));
    const local = await createModelById("silero-vad-v5");
    expect((await res.json()) as SileroVadOutput).toEqual(await local.infer(input));
    await local.release();
  });

  it("refuses bodies over the limits: the deployment's (before reading) and the model input's", async () => {
    const small = edgeDeployment({ limits: { maxRequestBodyBytes: 1000 } });
    const declared = await serve({ method: "POST", body: "x".repeat(2000), headers: { "content-length": "2000" } }, small);
    expect(declared.status).toBe(413);
    expect(((await declared.json()) as { error: { code: string; request_id: string } }).error).toMatchObject({ code: "payload_too_large", request_id: "req-1" });
    // A chunked body (no Content-Length) is counted while it is read.
    const stream = (n: number) =>
      new ReadableStream<Uint8Array>({
        start(c) {
          for (let i = 0; i < n; i += 65_536) c.enqueue(new Uint8Array(Math.min(65_536, n - i)).fill(32));
          c.close();
        },
      });
    const chunked = await serve({ method: "POST", body: stream(5000), duplex: "half" }, small);
    expect(chunked.status).toBe(413);
    const big = await serve({ method: "POST", body: stream(MAX_MODEL_INPUT_BYTES + 10), duplex: "half" });
    expect(big.status).toBe(413);
    expect(((await big.json()) as { error: { message: string } }).error.message).toBe(`model input over ${MAX_MODEL_INPUT_BYTES} bytes`);
    const invalid = await serve({ method: "POST", body: "{}", headers: { "content-length": "-1" } });
    expect(invalid.status).toBe(400);
  });

  it("keeps a leading BOM, as the replica does (not valid JSON)", async () => {
    const res = await serve({ method: "POST", body: "\ufeff" + JSON.stringify({ samples: synthesizeVowel(600) }) });
    expect(res.status).toBe(400);
    expect(((await res.json()) as { error: { message: string } }).error.message).toBe("body is not valid JSON");
  });

  it("returns the description on GET and a valid input on GET …/example", async () => {
    const describe = (await (await serve()).json()) as { model: string; input_example: unknown };
    expect(describe.model).toBe("silero-vad-v5");
    const example = await serve({ path: "/vad-edge/example?x=1" });
    expect(await example.json()).toEqual(describe.input_example);
  });

  it("answers 500 in the error shape when the Worker was built without the model, and refuses non-edge deployments", async () => {
    const other = edgeDeployment({ backend: { kind: "edge", model: "silero-vad-v6" } });
    const res = await serve({ method: "POST", body: "{}" }, other);
    expect(res.status).toBe(500);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("internal_error");
    const replicaServed = defineDeployment({ name: "vad", routePrefix: "/vad", backend: { kind: "onnx", model: "silero-vad-v5" } });
    await expect(serve({}, replicaServed)).rejects.toThrow("does not run at the edge");
  });

  it("answers 500 when the model fails to load, then loads it on a later request", async () => {
    let attempts = 0;
    provideEdgeModel(
      "silero-vad-v4",
      lazyModel(async () => {
        if (++attempts === 1) throw new Error("no memory");
        return createModelById("silero-vad-v4");
      }),
    );
    const v4 = edgeDeployment({ backend: { kind: "edge", model: "silero-vad-v4" } });
    const body = JSON.stringify({ samples: synthesizeVowel(600) });
    expect((await serve({ method: "POST", body }, v4)).status).toBe(500);
    const ok = await serve({ method: "POST", body }, v4);
    expect(ok.status).toBe(200);
    expect(ok.headers.get("x-switchyard-model-cache")).toBe("miss");
  });

  it("answers as the replica's handler does: 405 with Allow, 400 for a malformed model id, 404 naming the model served (issue 51)", async () => {
    const put = await serve({ method: "PUT", body: "{}" });
    expect(put.status).toBe(405);
    expect(put.headers.get("allow")).toBe("GET, POST");
    expect(put.headers.get("x-switchyard-replica")).toBe("edge");
    expect(((await put.json()) as { error: unknown }).error).toMatchObject({ code: "method_not_allowed", message: "use POST with a JSON body (GET describes the model)" });
    const malformed = await serve({ method: "POST", body: "{}", headers: { "x-switchyard-model": "../x" } });
    expect(malformed.status).toBe(400);
    expect(((await malformed.json()) as { error: { message: string } }).error.message).toMatch(/^malformed model id/);
    const unknown = await serve({ method: "POST", body: "{}", headers: { "x-switchyard-model": "other-model" } });
    expect(unknown.status).toBe(404);
    expect(unknown.headers.get("x-request-id")).toBe("req-1");
    expect(((await unknown.json()) as { error: unknown }).error).toMatchObject({ code: "model_not_found", details: { model: "other-model", known: ["silero-vad-v5"] } });
  });

  it("reads the model from x-switchyard-model before Ray's header, and a blank one as none (issue 51)", async () => {
    const both = await serve({ headers: { "x-switchyard-model": "silero-vad-v5", serve_multiplexed_model_id: "other" } });
    expect(both.status).toBe(200);
    await both.arrayBuffer();
    const ray = await serve({ headers: { "x-switchyard-model": "  ", serve_multiplexed_model_id: "other" } });
    expect(ray.status).toBe(404);
    expect(((await ray.json()) as { error: { details: { model: string } } }).error.details.model).toBe("other");
    const blank = await serve({ headers: { serve_multiplexed_model_id: " " } });
    expect(blank.status).toBe(200);
    await blank.arrayBuffer();
  });

  it("checks a declared Content-Length only on a request with a body, and answers the model's own input errors with their details (issue 51)", async () => {
    // A GET's Content-Length has no body to bound.
    const get = await serve({ headers: { "content-length": "999999999" } });
    expect(get.status).toBe(200);
    await get.arrayBuffer();
    const bad = await serve({ method: "POST", body: JSON.stringify({ samples: "not samples" }) });
    expect(bad.status).toBe(400);
    const err = ((await bad.json()) as { error: { code: string; details?: unknown } }).error;
    expect(err.code).toBe("bad_request");
    expect(err.details).toBeDefined();
    expect(bad.headers.get("x-switchyard-model")).toBe("silero-vad-v5");
  });

  it("answers a body past a deployment limit below the model's in the proxy's own words (issue 51)", async () => {
    const small = edgeDeployment({ limits: { maxRequestBodyBytes: 100 } });
    const chunked = new ReadableStream<Uint8Array>({
      start(c) {
        c.enqueue(new Uint8Array(150).fill(32));
        c.close();
      },
    });
    const res = await serve({ method: "POST", body: chunked, duplex: "half" }, small);
    expect(res.status).toBe(413);
    expect(((await res.json()) as { error: { message: string; request_id: string } }).error).toMatchObject({ message: "request body exceeds 100 bytes", request_id: "req-1" });
  });

  it("answers 500 in the error shape when inference itself fails, naming where it ran (issue 51)", async () => {
    provideEdgeModel(
      "silero-vad-v5-failing",
      lazyModel(async () => ({ ...fakeModel("silero-vad-v5-failing"), infer: async () => Promise.reject(new Error("kernel fault")) })),
    );
    const failing = edgeDeployment({ backend: { kind: "edge", model: "silero-vad-v5-failing" } });
    const errors = vi.spyOn(console, "error").mockImplementation(() => undefined);
    const res = await serve({ method: "POST", body: "{}" }, failing);
    errors.mockRestore();
    expect(res.status).toBe(500);
    expect(res.headers.get("x-switchyard-replica")).toBe("edge");
    expect(res.headers.get("x-switchyard-model")).toBe("silero-vad-v5-failing");
    expect(((await res.json()) as { error: unknown }).error).toMatchObject({ code: "internal_error", message: "edge inference failed", request_id: "req-1" });
  });

  it("never answers 500 for arbitrary bodies, headers and methods", async () => {
    const bodies = ["", "null", "[]", "{}", '{"samples":"x"}', '{"samples":[1e999]}', '{"samples":[null]}', "\u0000", '{"samples":[0.1]', '"' + "a".repeat(100) + '"'];
    for (const method of ["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH"]) {
      for (const body of bodies) {
        for (const model of [undefined, "", " ", "silero-vad-v5", "x".repeat(200), "../../etc"]) {
          const headers: Record<string, string> = model === undefined ? {} : { serve_multiplexed_model_id: model };
          const withBody = method !== "GET" && method !== "HEAD";
          const res = await serve({ method, headers, ...(withBody ? { body } : {}) });
          expect(res.status).toBeLessThan(500);
          if (res.status >= 400) expect(((await res.json()) as { error: { code: string } }).error.code).toBeTruthy();
          else await res.arrayBuffer();
        }
      }
    }
  });
});
