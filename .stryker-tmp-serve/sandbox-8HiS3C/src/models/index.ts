/**
 * Registry of the models the reference replica can serve. `createModelById` creates a
 * fresh model (a new ONNX session, which costs a wasm instantiation) on every call:
 * lifetime and sharing belong to the caller, normally a ModelCache (model-cache.ts).
 */
// @ts-nocheck

import { UnknownModelError, type InferenceModel } from "./model.ts";
import { nodeOnnxRuntime, readPackageFile } from "./onnx-session.ts";
import { createSileroVad, SILERO_VAD_SPECS } from "./silero-vad.ts";

export { ModelInputError, UnknownModelError, type InferenceModel } from "./model.ts";

const factories: ReadonlyMap<string, () => Promise<InferenceModel>> = new Map(
  SILERO_VAD_SPECS.map((spec) => [spec.id, async () => createSileroVad(spec, nodeOnnxRuntime, await readPackageFile(spec.file))] as const),
);

/** Ids of every model this replica can serve, e.g. "silero-vad-v5". */
export const modelIds: readonly string[] = Object.freeze([...factories.keys()]);

/** Creates a new instance of the model with this id; rejects with UnknownModelError for an unknown id. */
export function createModelById(id: string): Promise<InferenceModel> {
  const factory = factories.get(id);
  if (!factory) return Promise.reject(new UnknownModelError(id, modelIds));
  return factory();
}
