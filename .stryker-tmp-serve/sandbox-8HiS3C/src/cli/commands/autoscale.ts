/**
 * `switchyard autoscale [DEPLOYMENT]`: GET /-/deployments/NAME/autoscale (admin),
 * which answers {deployment, current, desired, ...}.
 */
// @ts-nocheck

import type { Context } from "../context.ts";
import { CliError } from "../errors.ts";
import { renderTable, type Cell } from "../table.ts";
import { deploymentPath, listDeployments } from "./status.ts";

export type AutoscaleAnswer = Record<string, unknown> & { deployment?: unknown; current?: unknown; desired?: unknown };

export interface AutoscaleDocument {
  edge: string;
  deployments: AutoscaleAnswer[];
}

const cell = (v: unknown): string => (v === undefined || v === null ? "-" : typeof v === "string" ? v : JSON.stringify(v));

/** DEPLOYMENT, CURRENT, DESIRED, and every other field of the answer as key=value in DETAILS. */
export function renderAutoscaleTable(doc: AutoscaleDocument, colour = false): string {
  const rows: Cell[][] = doc.deployments.map((a) => {
    const details = Object.entries(a)
      .filter(([k]) => k !== "deployment" && k !== "current" && k !== "desired")
      .map(([k, v]) => `${k}=${cell(v)}`)
      .join(" ");
    const differs = typeof a.current === "number" && typeof a.desired === "number" && a.current !== a.desired;
    return [cell(a.deployment), cell(a.current), differs ? { text: cell(a.desired), colour: "yellow" } : cell(a.desired), details || "-"];
  });
  return renderTable(["DEPLOYMENT", "CURRENT", "DESIRED", "DETAILS"], rows, { colour, alignRight: [1, 2] });
}

export async function autoscaleCommand(ctx: Context, positionals: string[]): Promise<number> {
  const names = positionals[0] !== undefined ? [positionals[0]] : (await listDeployments(ctx)).map((d) => d.name);
  const deployments = await Promise.all(
    names.map(async (name) => {
      const a = await ctx.edge.getJson<AutoscaleAnswer>(`${deploymentPath(name)}/autoscale`, { admin: true });
      if (typeof a !== "object" || a === null || Array.isArray(a)) throw new CliError(`GET ${deploymentPath(name)}/autoscale: expected a JSON object`, 1);
      // The name asked for is the one to show (first in the document), whatever the edge echoes.
      const out: AutoscaleAnswer = { deployment: name, ...a };
      out.deployment = name;
      return out;
    }),
  );
  const doc: AutoscaleDocument = { edge: ctx.edge.baseUrl, deployments };
  if (ctx.json) ctx.outJson(doc);
  else ctx.out(renderAutoscaleTable(doc, ctx.colour));
  return 0;
}
