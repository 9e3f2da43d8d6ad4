// @ts-nocheck
import { z } from "zod";
import { defineBackendKind } from "./kind.ts";
import { ModelId } from "./model-id.ts";

/**
 * A small ONNX model run inside the edge Worker itself (onnxruntime-web, src/edge/),
 * with no replica hop: for models small enough that a GPU round trip costs more
 * than it saves. Same request and response as the replica-served model of that id.
 */
export const edge = defineBackendKind({
  schema: z.object({ kind: z.literal("edge"), model: ModelId }).strict(),
  runsAtEdge: true,
  replicaFlags: () => null,
});
