// @ts-nocheck
import { z } from "zod";
import { defineBackendKind } from "./kind.ts";

/** Replicas are started elsewhere (GPU nodes running the replica CLI or the agent); none locally. */
export const external = defineBackendKind({
  schema: z.object({ kind: z.literal("external") }).strict(),
  runsAtEdge: false,
  replicaFlags: () => null,
});
