/**
 * The backend kinds, registered: adding one is its module (./kind.ts says
 * what it defines) plus its line here. The deployment config's `backend` union
 * and the local stack's replica flags derive from this list.
 */
// @ts-nocheck

import { z } from "zod";
import { echo } from "./echo.ts";
import { edge } from "./edge.ts";
import { external } from "./external.ts";
import type { AnyBackendKind, DeploymentForFlags } from "./kind.ts";
import { llm } from "./llm.ts";
import { onnx } from "./onnx.ts";
import { text } from "./text.ts";

export const BACKEND_KINDS = [text, onnx, echo, llm, edge, external] as const;

type Schemas<T extends readonly AnyBackendKind[]> = { [I in keyof T]: T[I]["schema"] };

/** A deployment's `backend`: one of the registered kinds' schemas, by `kind`. */
export const Backend = z.discriminatedUnion("kind", BACKEND_KINDS.map((k) => k.schema) as unknown as Schemas<typeof BACKEND_KINDS>);
export type BackendSpec = z.output<typeof Backend>;
export type BackendKindName = BackendSpec["kind"];

const byName = new Map<string, AnyBackendKind>(BACKEND_KINDS.map((k) => [k.schema.shape.kind.value, k]));

function kindOf(backend: BackendSpec): AnyBackendKind {
  const kind = byName.get(backend.kind);
  if (!kind) throw new Error(`unknown backend kind "${backend.kind}"`);
  return kind;
}

/** Whether the backend's model runs in the edge Worker (no replicas). */
export const runsAtEdge = (backend: BackendSpec): boolean => kindOf(backend).runsAtEdge;

/** The reference replica's flags for a deployment's backend; null when the local stack starts no replicas for it. */
export function replicaFlags(backend: BackendSpec, deployment: DeploymentForFlags): string[] | null {
  // The kind was found by this backend's own `kind`, so its output type is the one replicaFlags takes.
  return (kindOf(backend).replicaFlags as (b: BackendSpec, d: DeploymentForFlags) => string[] | null)(backend, deployment);
}
