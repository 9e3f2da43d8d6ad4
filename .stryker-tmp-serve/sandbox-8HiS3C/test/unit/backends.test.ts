/**
 * The backend kinds' registry (src/backends/): the config's `backend` union is
 * the registered kinds, and each kind's replica flags are what the local stack
 * starts the reference replica with.
 */
// @ts-nocheck

import { describe, expect, it } from "vitest";
import { BACKEND_KINDS, Backend, replicaFlags, runsAtEdge } from "../../src/backends/index.ts";
import { defineDeployment } from "../../src/config/deployment.ts";

describe("backend kinds", () => {
  it("the config's backend union is the registered kinds, each once", () => {
    const names = BACKEND_KINDS.map((k) => k.schema.shape.kind.value);
    expect(names).toEqual(["text", "onnx", "echo", "llm", "edge", "external"]);
    expect(new Set(names).size).toBe(names.length);
    for (const kind of names) expect(Backend.options.map((o) => o.shape.kind.value)).toContain(kind);
    expect(() => defineDeployment({ name: "x", routePrefix: "/x", backend: { kind: "nope" } as never })).toThrow(/invalid deployment "x"/);
  });

  it("turns each kind into the reference replica's flags, or none", () => {
    const d = (backend: Parameters<typeof defineDeployment>[0]["backend"], extra = {}) => defineDeployment({ name: "x", routePrefix: "/x", backend, ...extra });
    const flags = (x: ReturnType<typeof d>) => replicaFlags(x.backend, x);
    expect(flags(d({ kind: "text", text: "hi" }))).toEqual(["--backend", "text", "--text", "hi"]);
    expect(flags(d({ kind: "echo" }))).toEqual(["--backend", "echo"]);
    expect(flags(d({ kind: "onnx", model: "silero-vad-v5" }))).toEqual(["--backend", "onnx", "--model", "silero-vad-v5"]);
    expect(flags(d({ kind: "onnx" }, { multiplexing: { models: ["a", "b"], maxModelsPerReplica: 2, defaultModel: "a" } }))).toEqual([
      "--backend", "onnx", "--models", "a,b", "--max-models-per-replica", "2", "--default-model", "a",
    ]);
    expect(flags(d({ kind: "llm" }))).toEqual(["--backend", "llm", "--model", "tiny-lm"]);
    expect(flags(d({ kind: "edge", model: "silero-vad-v5" }))).toBeNull();
    expect(flags(d({ kind: "external" }))).toBeNull();
  });

  it("only the edge kind runs in the Worker", () => {
    expect(BACKEND_KINDS.filter((k) => k.runsAtEdge).map((k) => k.schema.shape.kind.value)).toEqual(["edge"]);
    expect(runsAtEdge({ kind: "edge", model: "m" })).toBe(true);
    expect(runsAtEdge({ kind: "text", text: "" })).toBe(false);
  });
});
