/**
 * The reference replica's side of each backend kind, by the kind's name (the
 * config side, src/backends/, is Worker-safe and cannot hold Node code): a kind
 * the replica serves is its module here plus its line below. Kinds the edge
 * serves ("edge") or that run elsewhere ("external") have none. "proxy" is the
 * replica's own: any HTTP app behind it, for a deployment whose replicas run
 * elsewhere (`external`): the agent's proxy mode (docs/agent.md).
 */
// @ts-nocheck

import type { BackendKindName } from "../../backends/index.ts";
import type { ReplicaBackend } from "./context.ts";
import { echo } from "./echo.ts";
import { llm } from "./llm.ts";
import { onnx } from "./onnx.ts";
import { proxy } from "./proxy.ts";
import { text } from "./text.ts";

export const REPLICA_BACKENDS: Partial<Record<BackendKindName | "proxy", ReplicaBackend>> = { text, echo, onnx, llm, proxy };

/** The kind's builder, or undefined for a name the replica does not serve. */
export function replicaBackend(name: string): ReplicaBackend | undefined {
  return Object.hasOwn(REPLICA_BACKENDS, name) ? REPLICA_BACKENDS[name as keyof typeof REPLICA_BACKENDS] : undefined;
}
