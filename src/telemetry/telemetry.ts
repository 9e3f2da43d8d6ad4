/**
 * The Telemetry Durable Object (one, named "global"): sums the counters proxy
 * isolates flush every few seconds, keeps 5 minutes of 5 s windows for the
 * dashboard, and pushes dashboard frames over hibernatable WebSockets once a
 * second while any dashboard is open. Memory only: telemetry is soft state, and
 * a restart starts the counters over (Prometheus handles counter resets).
 * In production, Workers Analytics Engine is the durable store for the same
 * data points (docs/architecture.md, "Observability").
 */
import { DurableObject } from "cloudflare:workers";
import { servedDeployments } from "../config/served.ts";
import type { Env } from "../env.ts";
import { autoscaleStatus, mergedSnapshot } from "../state/routing-plane.ts";
import type { DashboardFrame, DeploymentFrame, DeploymentTotals, TelemetryFlush } from "./types.ts";
import { TelemetryWindows } from "./windows.ts";

const FRAME_INTERVAL_MS = 1_000;
/** The subprotocol the dashboard speaks; the server picks it. */
export const DASHBOARD_PROTOCOL = "switchyard.v1";

export class Telemetry extends DurableObject<Env> {
  readonly #windows = new TelemetryWindows();
  #flushes = 0;

  ingest(flush: TelemetryFlush): void {
    this.#flushes++;
    this.#windows.ingest(flush, Date.now());
  }

  totals(deployments: string[]): { totals: DeploymentTotals[]; liveIsolates: number; flushes: number } {
    return { totals: deployments.map((d) => this.#windows.totals(d)), liveIsolates: this.#windows.liveIsolates(Date.now()), flushes: this.#flushes };
  }

  /** Dashboard WebSocket (the Worker authenticated it before forwarding the upgrade). */
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

  async #frame(): Promise<DashboardFrame> {
    const now = Date.now();
    const deployments = await Promise.all(
      servedDeployments().map(async (d): Promise<DeploymentFrame> => {
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
          })),
          series: this.#windows.series(d.name, now),
          totals: this.#windows.totals(d.name),
          sessionBindings: null,
          desiredReplicas: autoscale.enabled ? autoscale.desired : null,
        };
      }),
    );
    return { type: "frame", at: now, deployments };
  }
}
