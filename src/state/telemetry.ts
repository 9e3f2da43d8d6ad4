/**
 * The Telemetry Durable Object, in two roles by name. A shard ("telemetry/<k>",
 * TELEMETRY_SHARDS of them) sums the counters of the proxy isolates that hash
 * to it (each flushes every few seconds) and keeps 5 minutes of 5 s windows.
 * The "global" object holds only the dashboards' hibernatable WebSockets and,
 * once a second while any is open, asks every shard for its totals and windows
 * and pushes the merged frame.
 *
 * A shard's totals (the counters and histograms /-/metrics shows) are persisted
 * with every flush it takes in: an idle object is evicted from memory after a
 * few seconds, and counters kept only in memory went back to 0 then (issue 30:
 * `requests_total` read 50, then 0 while the process lived). One storage write per
 * flush, coalesced by the runtime, at most isolates ÷ 2 s ÷ TELEMETRY_SHARDS a
 * second. The 5 s windows (the dashboard's last five minutes) stay in memory.
 */
import { DurableObject } from "cloudflare:workers";
import { servedDeployments } from "../config/served.ts";
import { TELEMETRY_SHARDS, mergeReports, telemetryShardName, telemetryShardOf, type ShardReport } from "../telemetry/telemetry-shards.ts";
import type { DashboardFrame, DeploymentFrame, DeploymentTotals, TelemetryFlush } from "../telemetry/types.ts";
import { TelemetryWindows, seriesOf } from "../telemetry/windows.ts";
import type { RouterBinding } from "./deployment-router.ts";
import { autoscaleStatus, mergedSnapshot } from "./routing-plane.ts";

const FRAME_INTERVAL_MS = 1_000;
/** The subprotocol the dashboard speaks; the server picks it. */
export const DASHBOARD_PROTOCOL = "switchyard.v1";

/** The storage key of a shard's persisted totals (every deployment's, one value). */
const TOTALS_KEY = "totals";

/** The binding of the Telemetry objects (wrangler.toml: TELEMETRY). */
export interface TelemetryBinding {
  TELEMETRY: DurableObjectNamespace<Telemetry>;
}

/** The "global" Telemetry object (the dashboards' frames). */
export function telemetryFor(env: TelemetryBinding): DurableObjectStub<Telemetry> {
  return env.TELEMETRY.get(env.TELEMETRY.idFromName("global"));
}

/** Telemetry shard `k` (0 ≤ k < TELEMETRY_SHARDS): the counters of the isolates that hash to it. */
export function telemetryShardFor(env: TelemetryBinding, k: number): DurableObjectStub<Telemetry> {
  return env.TELEMETRY.get(env.TELEMETRY.idFromName(telemetryShardName(k)));
}

/** Sends an isolate's flush to its shard (the same shard every time for that isolate). */
export function sendFlush(env: TelemetryBinding, flush: TelemetryFlush): Promise<void> {
  return telemetryShardFor(env, telemetryShardOf(flush.isolate)).ingest(flush);
}

/**
 * The fleet's telemetry for `deployments`: every shard's totals (and windows,
 * when asked) summed. A shard that does not answer fails the whole read: a
 * scrape missing a shard would show counters going down, which Prometheus
 * takes for a reset; a failed scrape is only a gap.
 */
export async function fleetTelemetry(env: TelemetryBinding, deployments: string[], withWindows: boolean): Promise<ShardReport> {
  const reports = await Promise.all(Array.from({ length: TELEMETRY_SHARDS }, (_, k) => telemetryShardFor(env, k).report(deployments, withWindows)));
  return mergeReports(deployments, reports);
}

/** Restarts every shard (their in-memory state goes; their persisted totals come back when they load again). */
export async function restartTelemetry(env: TelemetryBinding): Promise<void> {
  await Promise.all(
    Array.from({ length: TELEMETRY_SHARDS }, (_, k) =>
      telemetryShardFor(env, k)
        .restart()
        // The abort rejects the call that caused it: the object is gone, which is what was asked.
        .catch(() => undefined),
    ),
  );
}

/** What the Telemetry object calls: its own shards and, for the dashboard's frames, the routing shards. */
type TelemetryEnv = TelemetryBinding & RouterBinding;

export class Telemetry extends DurableObject<TelemetryEnv> {
  /** A shard's counters (empty on the "global" object, which no isolate flushes to). */
  readonly #windows = new TelemetryWindows();

  constructor(ctx: DurableObjectState, env: TelemetryEnv) {
    super(ctx, env);
    // The totals as this shard last persisted them, before any flush or scrape is served.
    void ctx.blockConcurrencyWhile(async () => {
      const stored = await ctx.storage.get<DeploymentTotals[]>(TOTALS_KEY);
      if (stored) this.#windows.restoreTotals(stored);
    });
  }

  /** A shard: one isolate's flush, and its totals persisted (the flush's answer waits for the write). */
  ingest(flush: TelemetryFlush): void {
    this.#windows.ingest(flush, Date.now());
    void this.ctx.storage.put(TOTALS_KEY, this.#windows.allTotals());
  }

  /** Ends this object's in-memory life (the admin route that restarts the shards): the next call loads it again. */
  restart(): void {
    this.ctx.abort("restart requested");
  }

  /** A shard: its totals per deployment (in the order asked), live isolates, and its windows when asked. */
  report(deployments: string[], withWindows: boolean): ShardReport {
    return {
      totals: deployments.map((d) => this.#windows.totals(d)),
      liveIsolates: this.#windows.liveIsolates(Date.now()),
      windows: withWindows ? deployments.map((d) => this.#windows.windows(d)) : null,
    };
  }

  /** "global": a dashboard WebSocket (the Worker authenticated it before forwarding the upgrade). */
  override async fetch(request: Request): Promise<Response> {
    if (request.headers.get("upgrade")?.toLowerCase() !== "websocket") return new Response("expected a WebSocket upgrade", { status: 426 });
    const { 0: client, 1: server } = new WebSocketPair();
    this.ctx.acceptWebSocket(server);
    server.send(JSON.stringify(await this.#frame()));
    if ((await this.ctx.storage.getAlarm()) === null) await this.ctx.storage.setAlarm(Date.now() + FRAME_INTERVAL_MS);
    return new Response(null, { status: 101, webSocket: client, headers: { "sec-websocket-protocol": DASHBOARD_PROTOCOL } });
  }

  override async alarm(): Promise<void> {
    const sockets = this.ctx.getWebSockets();
    if (sockets.length === 0) return;
    const frame = JSON.stringify(await this.#frame());
    for (const ws of sockets) {
      try {
        ws.send(frame);
      } catch {
        // Closed meanwhile; the runtime drops it.
      }
    }
    await this.ctx.storage.setAlarm(Date.now() + FRAME_INTERVAL_MS);
  }

  override webSocketMessage(): void {
    // The dashboard only listens.
  }

  override webSocketClose(ws: WebSocket, code: number): void {
    try {
      ws.close(code === 1005 ? 1000 : code, "bye");
    } catch {
      // Already closed.
    }
  }

  /** One frame for every open dashboard: TELEMETRY_SHARDS calls for the counters, whatever the number of dashboards. */
  async #frame(): Promise<DashboardFrame> {
    const now = Date.now();
    const served = servedDeployments();
    const fleet = await fleetTelemetry(this.env, served.map((d) => d.name), true);
    const deployments = await Promise.all(
      served.map(async (d, i): Promise<DeploymentFrame> => {
        const [snapshot, autoscale] = await Promise.all([mergedSnapshot(this.env, d.name, d.routing.shards), autoscaleStatus(this.env, d)]);
        return {
          name: d.name,
          routePrefix: d.routePrefix,
          replicas: snapshot.replicas.map((r) => ({
            id: r.id,
            url: r.url,
            state: r.load.state,
            ongoing: r.load.ongoing,
            queued: r.load.queued,
            max: r.load.max,
            models: r.models,
            loading: r.loading,
            ...(r.region !== undefined && { region: r.region }),
          })),
          series: seriesOf(fleet.windows?.[i] ?? [], now),
          totals: fleet.totals[i]!,
          sessionBindings: null,
          desiredReplicas: autoscale.enabled ? autoscale.desired : null,
        };
      }),
    );
    return { type: "frame", at: now, deployments };
  }
}
