/**
 * Registry of the models the reference replica can serve. Each model is loaded lazily
 * (creating an ONNX session costs a wasm instantiation) and only once per process.
 */
import type { InferenceModel } from "./model.ts";
import { loadModel as loadSileroVad, SILERO_VAD_ID } from "./silero-vad.ts";

export { ModelInputError, type InferenceModel } from "./model.ts";

const loaders: Readonly<Record<string, () => Promise<InferenceModel>>> = {
  [SILERO_VAD_ID]: loadSileroVad,
};

export const modelIds: readonly string[] = Object.freeze(Object.keys(loaders));

const loaded = new Map<string, Promise<InferenceModel>>();

/** Loads (once) the model with this id; rejects with an Error for an unknown id. */
export function loadModelById(id: string): Promise<InferenceModel> {
  const loader = Object.hasOwn(loaders, id) ? loaders[id] : undefined;
  if (!loader) {
    return Promise.reject(new Error(`unknown model "${id}"; known models: ${modelIds.join(", ")}`));
  }
  let model = loaded.get(id);
  if (!model) {
    model = loader();
    loaded.set(id, model);
    // A failed load is not cached: the next call tries again.
    model.catch(() => loaded.delete(id));
  }
  return model;
}
