/**
 * `switchyard drain DEPLOYMENT REPLICA_ID [--wait] [--timeout S]`:
 * POST /-/deployments/NAME/replicas/ID/drain (admin). The edge answers
 * 200 {ok: true, replica, draining: true} and the replica drains itself; 404 when
 * the deployment or the replica does not exist. --wait polls the deployment's
 * routing table until the replica has left it.
 */
// @ts-nocheck

import type { Context } from "../context.ts";
import { EdgeHttpError } from "../edge.ts";
import { CliError } from "../errors.ts";
import { deploymentPath, type DeploymentAnswer } from "./status.ts";

export interface DrainOptions {
  wait: boolean;
  timeoutS: number;
  /** Between two looks at the routing table, ms. */
  pollMs?: number;
}

export async function drainCommand(ctx: Context, deployment: string, replica: string, o: DrainOptions): Promise<number> {
  const path = `${deploymentPath(deployment)}/replicas/${encodeURIComponent(replica)}/drain`;
  try {
    await ctx.edge.postJson<Record<string, unknown>>(path, { admin: true });
  } catch (err) {
    if (err instanceof EdgeHttpError && err.status === 404 && !err.endpointMissing) {
      throw new CliError(`drain: ${err.edgeMessage ?? `no replica "${replica}" in deployment "${deployment}"`} (see switchyard status ${deployment})`, 1);
    }
    throw err;
  }
  const started = Date.now();
  if (!o.wait) {
    if (ctx.json) ctx.outJson({ deployment, replica, draining: true });
    else ctx.out(`${replica}: draining (it finishes its in-flight requests, deregisters and exits)\n`);
    return 0;
  }
  if (!ctx.json) ctx.out(`${replica}: draining; waiting until it has left the routing table (at most ${o.timeoutS} s)\n`);
  const deadline = started + o.timeoutS * 1000;
  for (;;) {
    const state = await ctx.edge.getJson<DeploymentAnswer>(deploymentPath(deployment), { admin: true });
    const replicas = Array.isArray(state.snapshot?.replicas) ? (state.snapshot.replicas as { id?: unknown }[]) : [];
    const waitedMs = Date.now() - started;
    if (!replicas.some((r) => r.id === replica)) {
      if (ctx.json) ctx.outJson({ deployment, replica, draining: true, left: true, waitedMs });
      else ctx.out(`${replica}: left the routing table after ${(waitedMs / 1000).toFixed(1)} s\n`);
      return 0;
    }
    const left = deadline - Date.now();
    if (left <= 0) throw new CliError(`${replica} is still in the routing table of "${deployment}" after ${o.timeoutS} s (it may be finishing long requests)`, 1);
    if (!(await ctx.sleep(Math.min(o.pollMs ?? 500, left)))) throw new CliError("interrupted; the replica goes on draining", 130);
  }
}
