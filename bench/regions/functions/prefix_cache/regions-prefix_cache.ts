// bench/regions/regions.ts, arm "prefix_cache": today's prefix profile: the prompt's home, else prefill still to do and slots.
// One deployment per arm, each in its own folder: each arm runs on a stack of its own
// (an OpenAI model is served by one deployment only), with replicas of its own.
import { defineDeployment } from "../../../../src/config/deployment.ts";

export default defineDeployment({
  name: "rg-prefix",
  routePrefix: "/rg-prefix",
  access: { public: true },
  backend: { kind: "llm", model: "tiny-lm" },
  openai: { models: ["tiny-lm"] },
  localReplicas: 0,
  maxOngoingRequests: 16,
  policy: { balancer: "prefix_cache", requestTimeoutMs: 60_000 },
  // Locally every client is one client (the address workerd listens on): its share of the pending cap is the whole cap.
  limits: { maxPendingRequests: 4096, maxPendingRequestsPerClient: 4096 },
});
