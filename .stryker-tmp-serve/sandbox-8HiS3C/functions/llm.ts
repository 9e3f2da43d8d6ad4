// @ts-nocheck
// A generative language model behind OpenAI-compatible routes: POST /v1/chat/completions,
// /v1/completions (streaming or not), /v1/embeddings, GET /v1/models. The body's
// `model` ("tiny-lm") picks this deployment; `user` (or x-session-id) keeps a
// conversation on one replica. The reference replicas run the tiny character-level
// language model (docs/tiny-lm.md) with onnxruntime-web; a vLLM or SGLang fleet uses
// `backend: { kind: "external" }` and the replica agent (docs/agent.md) instead.
import { defineDeployment } from "../src/config/deployment.ts";

export default defineDeployment({
  name: "llm",
  routePrefix: "/llm",
  // Anyone may call it (a choice: by default a deployment needs an API key).
  access: { public: true },
  backend: { kind: "llm", model: "tiny-lm" },
  // migrationLimit: a stream whose replica dies mid-answer is continued on another one, up to twice (docs/migration.md).
  openai: { models: ["tiny-lm"], migrationLimit: 2 },
  localReplicas: 2,
  // Sequences one replica generates at once (vLLM's max_num_seqs); beyond it the replica refuses and the edge retries elsewhere.
  maxOngoingRequests: 16,
  // prefix_cache: a prompt goes to the replica already holding most of it (its reported KV cache, this isolate's
  // recent dispatches), weighed against load; the edge tokenizes as tiny-lm does (docs/prefix-routing.md).
  policy: { stripPrefix: true, balancer: "prefix_cache" },
});
