// @ts-nocheck
import { z } from "zod";
import { defineBackendKind } from "./kind.ts";
import { ModelId } from "./model-id.ts";

/**
 * Runs ONNX models (onnxruntime-web) on a JSON body: `model` for one model, or
 * no `model` and the deployment's `multiplexing.models` for several (the
 * deployment schema checks that one of the two is there).
 */
export const onnx = defineBackendKind({
  schema: z.object({ kind: z.literal("onnx"), model: ModelId.optional() }).strict(),
  runsAtEdge: false,
  replicaFlags: (b, d) => {
    if (b.model) return ["--backend", "onnx", "--model", b.model];
    const mux = d.multiplexing!;
    const flags = ["--backend", "onnx", "--models", mux.models.join(","), "--max-models-per-replica", String(mux.maxModelsPerReplica)];
    return mux.defaultModel ? [...flags, "--default-model", mux.defaultModel] : flags;
  },
});
