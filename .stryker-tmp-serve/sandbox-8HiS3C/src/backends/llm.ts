// @ts-nocheck
import { z } from "zod";
import { defineBackendKind } from "./kind.ts";
import { ModelId } from "./model-id.ts";

/**
 * A generative language model served OpenAI-style (/v1/completions,
 * /v1/chat/completions, /v1/embeddings) by the reference replica, token by
 * token with real ONNX inference; see README ("The tiny language model").
 */
export const llm = defineBackendKind({
  schema: z.object({ kind: z.literal("llm"), model: ModelId.default("tiny-lm") }).strict(),
  runsAtEdge: false,
  replicaFlags: (b) => ["--backend", "llm", "--model", b.model],
});
