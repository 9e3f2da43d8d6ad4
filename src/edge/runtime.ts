/**
 * The edge model runtime: onnxruntime-web in this Worker (ort-workerd.ts) and the
 * models of the catalog, one lazily created instance per model per isolate.
 *
 * Imported only by the module src/local/build.ts generates (.switchyard/deployments.ts)
 * when some deployment has backend kind "edge"; that module registers each such
 * model with a loader of its weights (a Data module of the Worker):
 *
 *   registerEdgeModel("silero-vad-v5", () => import("@ricky0123/vad-web/dist/silero_vad_v5.onnx"));
 *
 * Registering costs nothing: the weights and the runtime's wasm are imported, the
 * wasm instantiated and the ORT session created by the first request for the model
 * in each isolate (~0.3-0.6 s here), never at Worker start-up.
 */
import { edgeModel, edgeModelIds } from "./catalog.ts";
import { lazyModel } from "./lazy-model.ts";
import { workerdOnnxRuntime } from "./ort-workerd.ts";
import { provideEdgeModel } from "./lazy-model.ts";

/** The weights of a model: a dynamic import of its `.onnx` Data module. */
export type WeightsLoader = () => Promise<{ default: ArrayBuffer }>;

export function registerEdgeModel(id: string, weights: WeightsLoader): void {
  const entry = edgeModel(id);
  if (!entry) throw new Error(`the edge runtime cannot run model "${id}"; it runs: ${edgeModelIds.join(", ")}`);
  provideEdgeModel(
    id,
    lazyModel(async () => entry.create(workerdOnnxRuntime, new Uint8Array((await weights()).default))),
  );
}
