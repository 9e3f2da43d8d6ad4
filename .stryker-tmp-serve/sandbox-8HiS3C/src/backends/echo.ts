// @ts-nocheck
import { z } from "zod";
import { defineBackendKind } from "./kind.ts";

/** Echoes the request body back as a stream (tests and benchmarks of the byte path). */
export const echo = defineBackendKind({
  schema: z.object({ kind: z.literal("echo") }).strict(),
  runsAtEdge: false,
  replicaFlags: () => ["--backend", "echo"],
});
