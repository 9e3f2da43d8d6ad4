/**
 * A vLLM fleet serving Qwen3, routed by the blocks its engines hold: the edge renders
 * and tokenizes each chat as vLLM does (the `qwen3` family, src/prompt/tokenizers/),
 * so its block keys match the KV events the agents report. Opt in with
 * SWITCHYARD_FUNCTIONS=functions,examples/model-family (the Worker then bundles
 * Qwen3's tokenizer: docs/prefix-routing.md gives its size and cost).
 */
// @ts-nocheck

import { defineDeployment } from "../../src/config/deployment.ts";

export default defineDeployment({
  name: "qwen3",
  routePrefix: "/qwen3",
  backend: { kind: "external" },
  openai: { models: ["Qwen/Qwen3-8B"] },
  policy: { balancer: "prefix_cache", prefix: { tokenizer: "qwen3" } },
});
