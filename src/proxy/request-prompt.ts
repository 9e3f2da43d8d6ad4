/**
 * The prompt keys of a request whose deployment's balancer reads them: computed
 * from a body the edge holds (the /v1 routes read it to route; a path-routed
 * request's small body is held for replay), with the deployment's tokenizer and, on a
 * multiplexed deployment, the model as the extra key. Nothing runs for balancers that
 * do not read the prompt (the caller asks only for those).
 */
import { DEFAULT_PREFIX_POLICY, type Deployment } from "../config/deployment.ts";
import type { PromptKeys } from "../policy/balancers/index.ts";
import { promptEndpointOf, promptKeys } from "../prefix/prompt-keys.ts";
import { promptTokenizer, type PromptTokenizer } from "../prompt/tokenizers/index.ts";

/** The deployment's prompt tokenizer: "auto" is tiny-lm's for the reference LLM backend, bytes for anything else. */
export function tokenizerFor(deployment: Deployment): PromptTokenizer {
  const name = (deployment.policy.prefix ?? DEFAULT_PREFIX_POLICY).tokenizer;
  if (name !== "auto") return promptTokenizer(name);
  return promptTokenizer(deployment.backend.kind === "llm" && deployment.backend.model === "tiny-lm" ? "tiny-lm" : "bytes");
}

/** The request's prompt keys, or undefined when its path or body has no prompt. */
export function requestPromptKeys(deployment: Deployment, path: string, body: ArrayBuffer, model: string | undefined): PromptKeys | undefined {
  const endpoint = promptEndpointOf(path);
  if (!endpoint) return undefined;
  return promptKeys(new Uint8Array(body), endpoint, { tokenizer: tokenizerFor(deployment), extra: model ?? "" });
}
