// @ts-nocheck
import { z } from "zod";
import { defineBackendKind } from "./kind.ts";

/** Answers every request with a fixed text: the seed's "hi" deployment. */
export const text = defineBackendKind({
  schema: z.object({ kind: z.literal("text"), text: z.string() }).strict(),
  runsAtEdge: false,
  replicaFlags: (b) => ["--backend", "text", "--text", b.text],
});
