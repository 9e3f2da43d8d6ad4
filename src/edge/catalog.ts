/**
 * The models a deployment of backend kind "edge" can run inside the Worker: for
 * each, where its ONNX weights come from (an npm file the build makes a Data module
 * of the Worker) and how to build the model on an ONNX runtime. The model code is
 * the replica's own (src/models/), so a model answers the same at the edge
 * as on a replica. Pure: no onnxruntime import (src/local/build.ts reads it too).
 */
import type { InferenceModel } from "../models/model.ts";
import type { OnnxRuntime } from "../models/onnx-runtime.ts";
import { createSileroVad, SILERO_VAD_SPECS } from "../models/silero-vad.ts";

export interface EdgeModelEntry {
  readonly id: string;
  /** npm specifier of the ONNX weights (e.g. "@ricky0123/vad-web/dist/silero_vad_v5.onnx"). */
  readonly weights: string;
  /** Builds the model from its weights on `runtime`. */
  create(runtime: OnnxRuntime, weights: Uint8Array): Promise<InferenceModel>;
}

const entries: readonly EdgeModelEntry[] = SILERO_VAD_SPECS.map((spec) => ({
  id: spec.id,
  weights: spec.file,
  create: (runtime: OnnxRuntime, weights: Uint8Array) => createSileroVad(spec, runtime, weights),
}));

const byId: ReadonlyMap<string, EdgeModelEntry> = new Map(entries.map((e) => [e.id, e]));

/** Ids of the models the edge runtime can run. */
export const edgeModelIds: readonly string[] = Object.freeze([...byId.keys()]);

/** The catalog entry of a model, or undefined when the edge runtime cannot run it. */
export function edgeModel(id: string): EdgeModelEntry | undefined {
  return byId.get(id);
}
