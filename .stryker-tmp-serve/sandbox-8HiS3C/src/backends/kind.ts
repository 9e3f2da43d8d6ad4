/**
 * What a backend kind is, in the one place a kind is defined (src/backends/<kind>.ts,
 * registered in ./index.ts): its `backend` config schema, the flags the local
 * stack starts its reference replicas with, and whether it runs in the Worker.
 * Worker-safe: the config imports it, so nothing here may pull in Node code.
 */
// @ts-nocheck

import type { z } from "zod";

/** The part of a deployment a kind's replica flags may read (a structural type: the full Deployment derives from the kinds). */
export interface DeploymentForFlags {
  multiplexing?: { models: string[]; maxModelsPerReplica: number; defaultModel?: string | undefined } | undefined;
}

export interface BackendKind<S extends z.ZodObject<{ kind: z.ZodLiteral<string> }> = z.ZodObject<{ kind: z.ZodLiteral<string> }>> {
  /** `backend` of a deployment of this kind: an object with the literal `kind`, strict. */
  schema: S;
  /** The model runs inside the edge Worker: no replicas, always ready (src/edge/). */
  runsAtEdge: boolean;
  /**
   * The reference replica's flags for this backend (src/replica/cli.ts), with
   * which the local stack starts `localReplicas` of them; null: the stack starts
   * none (the edge serves it, or replicas run elsewhere).
   */
  replicaFlags(backend: z.output<S>, deployment: DeploymentForFlags): string[] | null;
}

/** Declares a kind (the identity, typed: `replicaFlags` sees its own schema's output). */
export function defineBackendKind<S extends z.ZodObject<{ kind: z.ZodLiteral<string> }>>(kind: BackendKind<S>): BackendKind<S> {
  return kind;
}

/** Any registered kind, whatever its schema (its replicaFlags then takes `never`: call it through the registry). */
export interface AnyBackendKind {
  schema: z.ZodObject<{ kind: z.ZodLiteral<string> }>;
  runsAtEdge: boolean;
  replicaFlags(backend: never, deployment: DeploymentForFlags): string[] | null;
}
