// @ts-nocheck
// Edge inference end to end: the opt-in example examples/edge-inference/vad-edge.ts
// (a deployment of backend kind "edge") runs Silero VAD v5 inside the Worker on the
// real local stack (workerd, onnxruntime-web's wasm as a compiled module, the weights
// as a data module), next to the same model served by a reference replica through the
// proxy (test/e2e/fixtures/edge/), as `SWITCHYARD_FUNCTIONS=…,examples/edge-inference`
// serves it.
import { join } from "node:path";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { createModelById, type InferenceModel } from "../../src/models/index.ts";
import { synthesizeVowel, type SileroVadOutput } from "../../src/models/silero-vad.ts";
import { startStack } from "./stack-fixture.ts";

let stack: Awaited<ReturnType<typeof startStack>>;
let local: InferenceModel;

beforeAll(async () => {
  [stack, local] = await Promise.all([startStack({ functionsDir: [join(import.meta.dirname, "fixtures/edge"), join(import.meta.dirname, "../../examples/edge-inference")] }), createModelById("silero-vad-v5")]);
});
afterAll(async () => {
  await Promise.all([stack?.dispose(), local?.release()]);
});

interface Answer {
  status: number;
  headers: Headers;
  body: unknown;
}

async function call(path: string, init: RequestInit = {}): Promise<Answer> {
  // workerd's own port: HTTP/1.1 keep-alive, as a deployed Worker is reached.
  const res = await fetch(`${stack.workerdUrl}${path}`, init);
  const text = await res.text();
  let body: unknown = text;
  try {
    body = JSON.parse(text);
  } catch {
    // not JSON: the assertions say so
  }
  return { status: res.status, headers: res.headers, body };
}

const post = (path: string, body: string, headers: Record<string, string> = {}) =>
  call(path, { method: "POST", body, headers: { "content-type": "application/json", ...headers } });

/** Equal up to float noise: same keys and strings, numbers within `tol`. */
function expectClose(got: unknown, want: unknown, tol = 1e-4): void {
  if (typeof want === "number") {
    expect(typeof got).toBe("number");
    expect(Math.abs((got as number) - want)).toBeLessThanOrEqual(tol);
  } else if (Array.isArray(want)) {
    expect(Array.isArray(got)).toBe(true);
    expect((got as unknown[]).length).toBe(want.length);
    want.forEach((w, i) => expectClose((got as unknown[])[i], w, tol));
  } else if (want !== null && typeof want === "object") {
    expect(got).toBeTypeOf("object");
    expect(Object.keys(got as object).sort()).toEqual(Object.keys(want).sort());
    for (const [k, w] of Object.entries(want)) expectClose((got as Record<string, unknown>)[k], w, tol);
  } else {
    expect(got).toEqual(want);
  }
}

const speech = { samples: synthesizeVowel(16_000) };

describe("edge inference (backend kind edge)", () => {
  it("is listed as an edge deployment in /-/routes and /-/healthz", async () => {
    expect((await call("/-/routes")).body).toEqual({ "/vad": "vad", "/vad-edge": "vad-edge" });
    const health = await call("/-/healthz");
    expect(health.status).toBe(200);
    expect(health.body).toMatchObject({ status: "ok", ready_replicas: { vad: 1 }, edge_deployments: ["vad-edge"] });
  });

  it("answers concurrent first requests with one shared model creation, all correct", async () => {
    const body = JSON.stringify(speech);
    const answers = await Promise.all(Array.from({ length: 8 }, (_, i) => post("/vad-edge", body, { "x-request-id": `edge-first-${i}` })));
    const expected = (await local.infer(speech)) as SileroVadOutput;
    for (const [i, a] of answers.entries()) {
      expect(a.status).toBe(200);
      expect(a.headers.get("x-switchyard-replica")).toBe("edge");
      expect(a.headers.get("x-request-id")).toBe(`edge-first-${i}`);
      expect(a.headers.get("x-switchyard-model")).toBe("silero-vad-v5");
      expectClose(a.body, expected);
    }
    // The first of them created the model ("miss"); those that arrived while it was being
    // created waited for that same creation (test/unit/edge-serve.test.ts shows the sharing
    // deterministically); every later request finds it ready.
    const cache = answers.map((a) => a.headers.get("x-switchyard-model-cache"));
    expect(cache).toContain("miss");
    expect(cache.every((c) => c === "miss" || c === "hit")).toBe(true);
    const after = await post("/vad-edge", body);
    expect(after.headers.get("x-switchyard-model-cache")).toBe("hit");
    expect(stack.logLines.filter((l) => l.includes("edge model failed to load"))).toEqual([]);
  });

  it("gives the in-process Node result and the replica-served deployment's answer for the same input", async () => {
    const inputs = [
      speech,
      { samples: synthesizeVowel(4_000, 8000), sampleRate: 8000 },
      { samples: new Array(1_600).fill(0) },
      { samples: synthesizeVowel(12_345), threshold: 0.3 },
    ];
    for (const input of inputs) {
      const body = JSON.stringify(input);
      const [edge, replica] = await Promise.all([post("/vad-edge", body), post("/vad", body)]);
      const expected = await local.infer(input);
      expect(edge.status).toBe(200);
      expect(replica.status).toBe(200);
      expect(replica.headers.get("x-switchyard-replica")).not.toBe("edge");
      expectClose(edge.body, expected);
      expectClose(edge.body, replica.body);
    }
  });

  it("refuses a large body it has not read without resetting the client's connection", async () => {
    // workerd resets a connection whose request body the Worker left unread: the edge reads it first.
    const big = JSON.stringify({ samples: new Array(16_000).fill(0.123456) });
    const statuses: number[] = [];
    for (let i = 0; i < 25; i++) {
      const answers = await Promise.all(
        ["/vad-edge", "/vad", "/vad-edge", "/no-such-route"].map(async (path) => {
          const res = await fetch(`${stack.workerdUrl}${path}`, { method: "POST", body: big, headers: { "x-switchyard-model": "bad model" } });
          await res.json();
          return res.status;
        }),
      );
      statuses.push(...answers);
    }
    expect(statuses.filter((s) => s === 400)).toHaveLength(75);
    expect(statuses.filter((s) => s === 404)).toHaveLength(25);
  });

  it("answers bad input with the replica's JSON errors", async () => {
    const cases: { body: string; status: number; headers?: Record<string, string> }[] = [
      { body: "{not json", status: 400 },
      { body: "", status: 400 },
      { body: JSON.stringify({ samples: [0.1, 0.2] }), status: 400 },
      { body: JSON.stringify({ samples: new Array(600).fill(2) }), status: 400 },
      { body: JSON.stringify({ samples: new Array(600).fill(0), sampleRate: 44100 }), status: 400 },
      { body: JSON.stringify({ samples: new Array(600).fill(0), extra: 1 }), status: 400 },
      { body: JSON.stringify(speech), status: 404, headers: { "x-switchyard-model": "silero-vad-v4" } },
      { body: JSON.stringify(speech), status: 400, headers: { "x-switchyard-model": "bad model" } },
    ];
    for (const c of cases) {
      const [edge, replica] = await Promise.all([post("/vad-edge", c.body, c.headers), post("/vad", c.body, c.headers)]);
      expect(edge.status).toBe(c.status);
      expect(edge.headers.get("content-type")).toMatch(/^application\/json/);
      expect(edge.headers.get("x-request-id")).toBeTruthy();
      expect((edge.body as { error: { code: string } }).error.code).toBe(c.status === 404 ? "model_not_found" : "bad_request");
      // Same status and the same error object as the replica behind the proxy.
      expect(replica.status).toBe(c.status);
      expect(edge.body).toEqual(replica.body);
    }
    const put = await call("/vad-edge", { method: "PUT", body: "{}" });
    expect(put.status).toBe(405);
    expect(put.headers.get("allow")).toBe("GET, POST");
  });

  it("describes the model on GET and returns a valid input on GET …/example, as the replica does", async () => {
    const [edge, replica] = await Promise.all([call("/vad-edge"), call("/vad")]);
    expect(edge.status).toBe(200);
    expect(edge.body).toEqual(replica.body);
    const example = await call("/vad-edge/example");
    expect(example.status).toBe(200);
    const answer = await post("/vad-edge", JSON.stringify(example.body));
    expect(answer.status).toBe(200);
    expect((answer.body as SileroVadOutput).speech).toBe(true);
  });

  it("keeps answering under concurrent load, every answer equal to the in-process one", async () => {
    const inputs = Array.from({ length: 6 }, (_, i) => ({ samples: synthesizeVowel(2_000 + 700 * i) }));
    const expected = await Promise.all(inputs.map((x) => local.infer(x)));
    const answers = await Promise.all(Array.from({ length: 48 }, (_, i) => post("/vad-edge", JSON.stringify(inputs[i % inputs.length]))));
    answers.forEach((a, i) => {
      expect(a.status).toBe(200);
      expectClose(a.body, expected[i % inputs.length]);
    });
  });
});
