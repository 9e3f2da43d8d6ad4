/**
 * A vLLM fleet serving Gemma 3, routed by the blocks its engines hold: the edge renders
 * each chat with Gemma 3's chat template and tokenizes it as its engines do (the
 * `gemma3` family: its 262,144-token vocabulary travels as the merges engine's spec,
 * src/prompt/tokenizers/merge-bpe.ts, under 2 MB gzipped). Opt in with
 * SWITCHYARD_FUNCTIONS=functions,examples/model-family-gemma3.
 */
import { defineDeployment } from "../../src/config/deployment.ts";

export default defineDeployment({
  name: "gemma3",
  routePrefix: "/gemma3",
  backend: { kind: "external" },
  openai: { models: ["google/gemma-3-12b-it"] },
  policy: { balancer: "prefix_cache", prefix: { tokenizer: "gemma3" } },
});
