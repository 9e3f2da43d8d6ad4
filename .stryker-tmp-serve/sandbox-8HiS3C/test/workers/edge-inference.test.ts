// @ts-nocheck
// Edge inference inside workerd through Cloudflare's vitest integration, which
// bundles the Worker with wrangler.toml's [[rules]] (the runtime's .wasm as a
// CompiledWasm module, the weights as a Data module), as `wrangler deploy` does:
// examples/edge-inference/vad-edge.ts (the opt-in example, added to this project by
// test/workers/vitest.config.ts) runs Silero VAD v5 in the Worker with no replica.
// test/e2e/edge-inference.test.ts compares the answers with the Node replica's.
import { createExecutionContext, waitOnExecutionContext } from "cloudflare:test";
import { env } from "cloudflare:workers";
import { describe, expect, it } from "vitest";
import { deployments } from "../../.switchyard/deployments.ts";
import { synthesizeVowel, type SileroVadOutput } from "../../src/models/silero-vad.ts";
import worker from "../../src/worker.ts";

async function call(path: string, init: RequestInit = {}): Promise<{ status: number; headers: Headers; body: unknown }> {
  const ctx = createExecutionContext();
  const res = await worker.fetch(new Request(`http://edge${path}`, init) as Parameters<typeof worker.fetch>[0], env, ctx);
  const text = await res.text();
  await waitOnExecutionContext(ctx);
  return { status: res.status, headers: res.headers, body: JSON.parse(text) as unknown };
}

const post = (body: unknown) => call("/vad-edge", { method: "POST", body: JSON.stringify(body), headers: { "content-type": "application/json" } });

describe("edge inference in workerd (examples/edge-inference/vad-edge.ts)", () => {
  it("is a served deployment of kind edge", () => {
    expect(deployments.find((d) => d.name === "vad-edge")?.backend).toEqual({ kind: "edge", model: "silero-vad-v5" });
  });

  it("runs the model in the Worker: concurrent first requests share one creation and agree", async () => {
    const input = { samples: synthesizeVowel(16_000) };
    const answers = await Promise.all(Array.from({ length: 4 }, () => post(input)));
    for (const a of answers) {
      expect(a.status).toBe(200);
      expect(a.headers.get("x-switchyard-replica")).toBe("edge");
      expect(a.headers.get("x-request-id")).toBeTruthy();
    }
    const out = answers[0]!.body as SileroVadOutput;
    expect(out).toMatchObject({ model: "silero-vad-v5", speech: true, sampleRate: 16000, frameSamples: 512 });
    expect(out.probabilities).toHaveLength(32);
    for (const a of answers) expect(a.body).toEqual(out);
    const after = await post(input);
    expect(after.headers.get("x-switchyard-model-cache")).toBe("hit");
    expect(after.body).toEqual(out);
    // The first load is slow here only: vitest-pool-workers hands the 14 MB .wasm module to workerd as a JSON array.
  }, 240_000); // ~17 s idle here (the ORT wasm compiles in workerd); CPU-bound, so a busy machine takes a multiple of it

  it("tells silence from speech and rejects bad input with a JSON 400", async () => {
    const silence = (await post({ samples: new Array(4_096).fill(0) })).body as SileroVadOutput;
    expect(silence.speech).toBe(false);
    expect(silence.maxProbability).toBeLessThan(0.1);
    const bad = await post({ samples: [0.5] });
    expect(bad.status).toBe(400);
    expect((bad.body as { error: { code: string } }).error.code).toBe("bad_request");
    const example = await call("/vad-edge/example");
    expect(((await post(example.body)).body as SileroVadOutput).speech).toBe(true);
  });
});
