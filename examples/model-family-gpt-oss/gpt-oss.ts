/**
 * A vLLM fleet serving gpt-oss, routed by the blocks its engines hold: the edge renders
 * each chat as vLLM does for gpt-oss (OpenAI's harmony format, not a chat template)
 * and tokenizes it with o200k_harmony (the `gpt-oss` family, src/prompt/tokenizers/).
 * Every prompt's system message carries the date the engine starts the conversation
 * on: pin it with VLLM_SYSTEM_START_DATE on the engines and `startDate` here (unset:
 * today's in UTC at both ends, which differ only around midnight). Opt in with
 * SWITCHYARD_FUNCTIONS=functions,examples/model-family-gpt-oss.
 */
import { defineDeployment } from "../../src/config/deployment.ts";

export default defineDeployment({
  name: "gpt-oss",
  routePrefix: "/gpt-oss",
  backend: { kind: "external" },
  openai: { models: ["openai/gpt-oss-20b"] },
  policy: { balancer: "prefix_cache", prefix: { tokenizer: "gpt-oss", startDate: "2026-08-06" } },
});
