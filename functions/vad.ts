// A real model: Silero VAD v5 (voice activity detection, 2.3 MB ONNX, shipped in
// the @ricky0123/vad-web npm package), run by onnxruntime-web in the replica.
// POST {"samples":[...16 kHz mono PCM in -1..1...]} → speech probability per 32 ms frame.
import { defineDeployment } from "../src/config/deployment.ts";

export default defineDeployment({
  name: "vad",
  routePrefix: "/vad",
  backend: { kind: "onnx", model: "silero-vad" },
  localReplicas: 2,
  maxOngoingRequests: 4,
  // Inference is a pure function of its input: safe to run again elsewhere.
  policy: { idempotent: true },
});
