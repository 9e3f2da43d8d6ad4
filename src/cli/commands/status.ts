/**
 * `switchyard status [DEPLOYMENT]`: GET /-/routes (public) for the deployment
 * names, then GET /-/deployments/NAME (admin) for each, printed as one table.
 */
import type { Context } from "../context.ts";
import { CliError } from "../errors.ts";
import { SystemPath } from "../../protocol/paths.ts";
import { renderTable, type Cell } from "../table.ts";

/** A replica as `status --json` prints it (field order is part of the format). */
export interface StatusReplica {
  id: string;
  url: string;
  state: string;
  ongoing: number;
  queued: number;
  max: number;
  /** KV-cache usage 0..1, when the engine reports one. */
  kv?: number;
  models: string[];
  loading: string[];
  epoch: number;
  expiresInMs: number;
  /** Its region, where it declared one (last: the fields before it keep their order). */
  region?: string;
}

export interface StatusDeployment {
  name: string;
  routePrefix: string | null;
  replicas: StatusReplica[];
  /** The routing Durable Object's counters, as the edge gives them. */
  router: Record<string, unknown> | null;
}

export interface StatusDocument {
  edge: string;
  deployments: StatusDeployment[];
}

/** The part of GET /-/deployments/NAME the CLI reads. */
export interface DeploymentAnswer {
  deployment?: { name?: string; routePrefix?: string };
  snapshot?: { replicas?: unknown };
  router?: Record<string, unknown>;
}

interface RawReplica {
  id?: unknown;
  url?: unknown;
  epoch?: unknown;
  load?: { ongoing?: unknown; queued?: unknown; max?: unknown; state?: unknown; kv?: unknown };
  models?: unknown;
  loading?: unknown;
  expiresInMs?: unknown;
  region?: unknown;
}

const num = (v: unknown) => (typeof v === "number" && Number.isFinite(v) ? v : 0);
const str = (v: unknown) => (typeof v === "string" ? v : "");
const strs = (v: unknown) => (Array.isArray(v) ? v.filter((x): x is string => typeof x === "string") : []);

/** Turns the edge's answers into the stable status document (sorted by name and id). */
export function statusDocument(edge: string, answers: readonly { name: string; routePrefix: string | null; answer: DeploymentAnswer }[]): StatusDocument {
  const deployments = answers.map(({ name, routePrefix, answer }): StatusDeployment => {
    const raw = answer.snapshot?.replicas;
    if (!Array.isArray(raw)) throw new CliError(`the edge's answer for deployment "${name}" has no snapshot.replicas; is it a Switchyard edge?`, 1);
    const replicas = (raw as RawReplica[]).map((r): StatusReplica => {
      const load = r.load ?? {};
      const replica: StatusReplica = {
        id: str(r.id),
        url: str(r.url),
        state: str(load.state) || "unknown",
        ongoing: num(load.ongoing),
        queued: num(load.queued),
        max: num(load.max),
        models: strs(r.models),
        loading: strs(r.loading),
        epoch: num(r.epoch),
        expiresInMs: num(r.expiresInMs),
      };
      if (typeof r.region === "string") replica.region = r.region;
      if (typeof load.kv === "number") {
        // Keep the documented field order: kv after max.
        const { models, loading, epoch, expiresInMs, region, ...head } = replica;
        return { ...head, kv: load.kv, models, loading, epoch, expiresInMs, ...(region !== undefined && { region }) };
      }
      return replica;
    });
    replicas.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    return { name, routePrefix: routePrefix ?? answer.deployment?.routePrefix ?? null, replicas, router: answer.router ?? null };
  });
  deployments.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  return { edge, deployments };
}

export function formatLoad(r: Pick<StatusReplica, "ongoing" | "max" | "queued">): string {
  return `${r.ongoing}/${r.max}${r.queued > 0 ? ` +${r.queued} queued` : ""}`;
}

export function formatModels(r: Pick<StatusReplica, "models" | "loading">): string {
  const all = [...r.models, ...r.loading.filter((m) => !r.models.includes(m)).map((m) => `${m}*`)];
  return all.length ? all.join(",") : "-";
}

export const STATUS_HEADERS = ["DEPLOYMENT", "REPLICA", "STATE", "LOAD", "MODELS", "URL"] as const;

/**
 * The table of `switchyard status`; a deployment without replicas gets one row of dashes.
 * A REGION column (after STATE) only when some replica declared one: fleets without
 * regions keep the table they had.
 */
export function renderStatusTable(doc: StatusDocument, colour = false): string {
  const regions = doc.deployments.some((d) => d.replicas.some((r) => r.region !== undefined));
  const withRegion = (cells: Cell[], region: Cell): Cell[] => (regions ? [...cells.slice(0, 3), region, ...cells.slice(3)] : cells);
  const rows: Cell[][] = [];
  for (const d of doc.deployments) {
    if (d.replicas.length === 0) {
      rows.push(withRegion([d.name, { text: "-", colour: "dim" }, { text: "no replicas", colour: "red" }, "-", "-", "-"], "-"));
      continue;
    }
    for (const r of d.replicas) {
      const full = r.max > 0 && r.ongoing >= r.max;
      rows.push(
        withRegion(
          [
            d.name,
            r.id,
            { text: r.state, colour: r.state === "ready" ? "green" : "yellow" },
            full ? { text: formatLoad(r), colour: "red" } : formatLoad(r),
            formatModels(r),
            r.url,
          ],
          r.region ?? "-",
        ),
      );
    }
  }
  const headers: readonly string[] = regions ? [...STATUS_HEADERS.slice(0, 3), "REGION", ...STATUS_HEADERS.slice(3)] : STATUS_HEADERS;
  return renderTable(headers, rows, { colour });
}

/** Deployment names and route prefixes from GET /-/routes ({prefix: name}). */
export async function listDeployments(ctx: Context): Promise<{ name: string; routePrefix: string }[]> {
  const routes = await ctx.edge.getJson<Record<string, unknown>>(SystemPath.routes);
  if (typeof routes !== "object" || routes === null || Array.isArray(routes)) throw new CliError("GET /-/routes: expected an object {prefix: deployment}", 1);
  return Object.entries(routes)
    .filter((e): e is [string, string] => typeof e[1] === "string")
    .map(([routePrefix, name]) => ({ name, routePrefix }))
    .sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
}

export const deploymentPath = (name: string) => `/-/deployments/${encodeURIComponent(name)}`;

export async function fetchStatus(ctx: Context, only?: string): Promise<StatusDocument> {
  const targets = only === undefined ? await listDeployments(ctx) : [{ name: only, routePrefix: null }];
  const answers = await Promise.all(
    targets.map(async (t) => ({ ...t, answer: await ctx.edge.getJson<DeploymentAnswer>(deploymentPath(t.name), { admin: true }) })),
  );
  return statusDocument(ctx.edge.baseUrl, answers);
}

export async function statusCommand(ctx: Context, positionals: string[]): Promise<number> {
  const doc = await fetchStatus(ctx, positionals[0]);
  if (ctx.json) ctx.outJson(doc);
  else ctx.out(renderStatusTable(doc, ctx.colour));
  return 0;
}
