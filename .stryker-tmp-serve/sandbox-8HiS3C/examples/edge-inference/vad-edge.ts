// @ts-nocheck
// Silero VAD v5 run inside the edge Worker itself (onnxruntime-web, wasm), with no
// replica: for a model this small (2.3 MB, ~30 µs per 32 ms frame) a hop to a GPU
// replica costs more than it saves. Same request and answer as /vad with model v5:
// POST {"samples":[...16 kHz mono PCM in -1..1...]} → speech probability per 32 ms frame.
// The first request in each Worker isolate creates the session (~0.5 s); see docs/edge-inference.md.
//
// Opt-in (README "Models in the Worker itself"): not in functions/, because it adds
// onnxruntime-web's wasm and the weights to the Worker (~17 MiB, ~5.6 MiB gzipped) and
// needs more CPU per request than the Workers Free plan gives (10 ms). Serve it with
//   SWITCHYARD_FUNCTIONS=functions,examples/edge-inference npm start
//   SWITCHYARD_FUNCTIONS=functions,examples/edge-inference npm run deploy
import { defineDeployment } from "../../src/config/deployment.ts";

export default defineDeployment({
  name: "vad-edge",
  routePrefix: "/vad-edge",
  backend: { kind: "edge", model: "silero-vad-v5" },
  // Anyone may call it (a choice: by default a deployment needs an API key).
  access: { public: true },
});
