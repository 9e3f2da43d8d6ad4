// @ts-nocheck
// Real models: three versions of Silero VAD (voice activity detection, pre-trained,
// MIT; the ONNX weights ship in the @ricky0123/vad-web npm package), run by
// onnxruntime-web in the replicas and multiplexed: a request names its model with
// the header `serve_multiplexed_model_id` or `x-switchyard-model` (default: v5).
// POST {"samples":[...16 kHz mono PCM in -1..1...]} → speech probability per 32 ms frame.
import { defineDeployment } from "../src/config/deployment.ts";

export default defineDeployment({
  name: "vad",
  routePrefix: "/vad",
  // Anyone may call it (a choice: by default a deployment needs an API key).
  access: { public: true },
  backend: { kind: "onnx" },
  multiplexing: {
    models: ["silero-vad-v4", "silero-vad-v5", "silero-vad-v6"],
    // Each replica keeps two of the three loaded; the proxy routes to holders first.
    maxModelsPerReplica: 2,
    defaultModel: "silero-vad-v5",
  },
  localReplicas: 3,
  maxOngoingRequests: 4,
  // Inference is a pure function of its input: safe to run again elsewhere.
  policy: { idempotent: true },
});
