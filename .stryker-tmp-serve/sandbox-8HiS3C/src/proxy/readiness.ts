/**
 * The edge's readiness (`/-/healthz`), deployment by deployment: whether it can serve
 * or hold a request now. A platform routes to an edge only when it is ready
 * (docs/production.md), so a deployment that is merely idle must not make it unready.
 * Pure.
 */
// @ts-nocheck

import type { Deployment } from "../config/deployment.ts";
import { holdsAtZero } from "./serve/admit.ts";

/**
 * - `ready`: a replica can take a request now.
 * - `scaled_to_zero`: none is ready, and the deployment holds requests until one
 *   starts (autoscaling.minReplicas 0): ready.
 * - `waiting_for_external`: none yet, and its replicas are external (agents join when
 *   they will): listed, not blocking.
 * - `no_ready_replica`: none, and one is expected: not ready.
 * `policy.requireReadyReplica` makes the middle two `no_ready_replica`.
 */
export type DeploymentReadiness = "ready" | "scaled_to_zero" | "waiting_for_external" | "no_ready_replica";

export function deploymentReadiness(d: Deployment, readyReplicas: number): DeploymentReadiness {
  if (readyReplicas > 0) return "ready";
  if (d.policy.requireReadyReplica === true) return "no_ready_replica";
  if (holdsAtZero(d)) return "scaled_to_zero";
  if (d.backend.kind === "external") return "waiting_for_external";
  return "no_ready_replica";
}
