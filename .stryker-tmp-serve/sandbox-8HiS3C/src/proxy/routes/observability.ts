/**
 * Admin observability routes: Prometheus metrics (GET /-/metrics, and POST
 * /-/metrics/restart to restart the Telemetry shards) and the dashboard's live
 * WebSocket (GET /-/dashboard/live), all behind the admin secret. Browsers cannot set headers on a WebSocket, so the dashboard sends
 * the secret as a subprotocol: "auth." + base64url(secret).
 */
// @ts-nocheck

import { Hono } from "hono";
import type { Deployment } from "../../config/deployment.ts";
import type { Env } from "../../env.ts";
import { sessionStatsFor } from "../../state/session-router.ts";
import { telemetryFor, fleetTelemetry, restartTelemetry, DASHBOARD_PROTOCOL } from "../../state/telemetry.ts";
import { autoscaleStatus, mergedSnapshot } from "../../state/routing-plane.ts";
import { errorResponse, SystemPath } from "../../protocol/index.ts";
import { renderPrometheus, type DeploymentMetrics } from "../../telemetry/prometheus.ts";
import { TELEMETRY_SHARDS } from "../../telemetry/telemetry-shards.ts";
import { adminRefusal, bearerMatches } from "../serve/access.ts";

function secretFromSubprotocols(header: string | undefined): string | null {
  for (const p of (header ?? "").split(",")) {
    const t = p.trim();
    if (!t.startsWith("auth.")) continue;
    try {
      const b64 = t.slice(5).replaceAll("-", "+").replaceAll("_", "/");
      const bin = atob(b64 + "=".repeat((4 - (b64.length % 4)) % 4));
      return new TextDecoder().decode(Uint8Array.from(bin, (ch) => ch.charCodeAt(0)));
    } catch {
      return null;
    }
  }
  return null;
}

export function observabilityRoutes(deployments: readonly Deployment[]): Hono<{ Bindings: Env }> {
  const app = new Hono<{ Bindings: Env }>();

  app.get(SystemPath.metrics, async (c) => {
    const refused = adminRefusal(c.env, c.req.header("authorization"));
    if (refused) return refused;
    // Counters from every Telemetry shard, summed; gauges from the routing and session objects.
    const telemetry = await fleetTelemetry(c.env, deployments.map((d) => d.name), false);
    const metrics = await Promise.all(
      deployments.map(async (d, i): Promise<DeploymentMetrics> => {
        const [snapshot, autoscale, sessions] = await Promise.all([
          mergedSnapshot(c.env, d.name, d.routing.shards),
          autoscaleStatus(c.env, d),
          d.sessionAffinity.enabled ? sessionStatsFor(c.env, d.name, d.sessionAffinity.shards) : null,
        ]);
        return {
          totals: telemetry.totals[i]!,
          replicas: snapshot.replicas,
          sessionBindings: sessions?.bindings ?? null,
          desiredReplicas: autoscale.enabled ? autoscale.desired : null,
        };
      }),
    );
    return c.text(renderPrometheus(metrics, telemetry.liveIsolates), 200, { "content-type": "text/plain; version=0.0.4; charset=utf-8" });
  });

  /** Restarts every Telemetry shard (operators; the test that the counters outlive an object's eviction). */
  app.post(SystemPath.metricsRestart, async (c) => {
    const refused = adminRefusal(c.env, c.req.header("authorization"));
    if (refused) return refused;
    await restartTelemetry(c.env);
    return c.json({ ok: true, restarted: TELEMETRY_SHARDS });
  });

  app.get(SystemPath.dashboardLive, async (c) => {
    if (c.req.header("upgrade")?.toLowerCase() !== "websocket") {
      return errorResponse("bad_request", "this is the dashboard's WebSocket; open /-/dashboard in a browser");
    }
    const offered = c.req.header("sec-websocket-protocol");
    const secret = secretFromSubprotocols(offered);
    if (secret === null || !bearerMatches(`Bearer ${secret}`, c.env.SWITCHYARD_ADMIN_SECRET)) {
      return errorResponse("unauthorized", "admin secret missing or wrong");
    }
    if (!(offered ?? "").split(",").some((p) => p.trim() === DASHBOARD_PROTOCOL)) {
      return errorResponse("bad_request", `offer the "${DASHBOARD_PROTOCOL}" subprotocol`);
    }
    return telemetryFor(c.env).fetch(c.req.raw);
  });

  return app;
}
