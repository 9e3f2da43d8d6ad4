/**
 * The routing Durable Object: one per deployment. Holds membership (persisted
 * in SQLite) and load (in memory, fed by reports), and hands proxies a routing
 * snapshot. It never sees a request body: proxies call it about once a second
 * per isolate, not per request.
 */
import { DurableObject } from "cloudflare:workers";
import type { ControlAck, DeregisterMessage, RegisterMessage, ReportMessage, RoutingSnapshot } from "../protocol/index.ts";
import type { Env } from "../env.ts";
import { servedDeployment } from "../config/served.ts";
import { Autoscaler, shouldAnnounce, type AutoscaleDecision } from "../policy/autoscale.ts";
import { Membership, NonceGuard, REPORT_INTERVAL_MS, type ReportOutcome } from "./membership.ts";

/** How often the alarm sweeps silent members while there are any. */
const SWEEP_INTERVAL_MS = 5_000;

export interface RouterStats {
  deployment: string;
  snapshotCalls: number;
  reports: number;
  registrations: number;
  members: number;
  fresh: number;
  /** Signed control messages refused because their nonce was not above the replica's last (since the object started). */
  replays: number;
}

/** Answer of the control RPCs when the message's nonce is not above the last one accepted from that replica. */
export type Replayed = "replayed";

/** A report was accepted and an operator asked this replica to drain (it should, and then leave). */
export type DrainRequested = "drain";

/** Autoscaling status of the deployment (GET /-/deployments/:name/autoscale). */
export interface AutoscaleStatus extends AutoscaleDecision {
  deployment: string;
  enabled: boolean;
}

/** The load is sampled for autoscaling at most this often. */
const AUTOSCALE_SAMPLE_MS = 1_000;

export class DeploymentRouter extends DurableObject<Env> {
  readonly #membership = new Membership();
  readonly #nonces = new NonceGuard();
  readonly #startedAt = Date.now();
  #deployment = "";
  #snapshotCalls = 0;
  #reports = 0;
  #registrations = 0;
  #replays = 0;
  readonly #autoscaler = new Autoscaler();
  #lastSampleAt = 0;
  #announcedDesired: number | null = null;
  /** Replicas an operator asked to drain (memory: a restart forgets it; the operator asks again). */
  readonly #drainRequested = new Set<string>();

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    sql.exec(`CREATE TABLE IF NOT EXISTS replicas (
      id TEXT PRIMARY KEY, url TEXT NOT NULL, max_ongoing INTEGER NOT NULL, registered_at INTEGER NOT NULL)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`);
    // Storage written before engine keys existed has no such column.
    if (!sql.exec<{ name: string }>("PRAGMA table_info(replicas)").toArray().some((c) => c.name === "engine_key")) {
      sql.exec("ALTER TABLE replicas ADD COLUMN engine_key TEXT");
    }
    const restoredAt = Date.now();
    for (const row of sql.exec<{ id: string; url: string; max_ongoing: number; registered_at: number; engine_key: string | null }>(
      "SELECT id, url, max_ongoing, registered_at, engine_key FROM replicas",
    )) {
      this.#membership.restore(
        { id: row.id, url: row.url, maxOngoing: row.max_ongoing, registeredAt: row.registered_at, ...(row.engine_key !== null ? { engineKey: row.engine_key } : {}) },
        restoredAt,
      );
    }
    const name = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'deployment'").toArray()[0];
    if (name) this.#deployment = name.value;
  }

  /**
   * The control RPCs take the message's signed nonce (the edge verified the
   * signature and timestamp); a nonce not above the replica's last is a replay.
   */
  async register(msg: RegisterMessage, nonce: number): Promise<ControlAck | Replayed> {
    if (!this.#fresh(msg.replica_id, nonce)) return "replayed";
    this.#registrations++;
    this.#rememberName(msg.deployment);
    if (this.#membership.register(msg, Date.now())) {
      this.ctx.storage.sql.exec(
        "INSERT OR REPLACE INTO replicas (id, url, max_ongoing, registered_at, engine_key) VALUES (?, ?, ?, ?, ?)",
        msg.replica_id,
        msg.url,
        msg.max_ongoing_requests,
        Date.now(),
        msg.engine_key ?? null,
      );
    }
    await this.#ensureSweep();
    return { ok: true, report_interval_ms: REPORT_INTERVAL_MS };
  }

  /** Load report: memory only, no storage write (reports arrive every second from every replica). */
  report(msg: ReportMessage, nonce: number): ReportOutcome | Replayed | DrainRequested {
    if (!this.#fresh(msg.replica_id, nonce)) return "replayed";
    this.#reports++;
    const now = Date.now();
    const outcome = this.#membership.report(msg, now);
    this.#sampleLoad(now);
    if (outcome !== "unknown_replica" && this.#drainRequested.has(msg.replica_id)) return "drain";
    return outcome;
  }

  /**
   * Asks a replica to drain: its next report's answer says so, and the replica
   * drains itself (stops taking requests, finishes in-flight ones, deregisters).
   */
  requestDrain(replicaId: string): boolean {
    if (!this.#membership.members.has(replicaId)) return false;
    this.#drainRequested.add(replicaId);
    return true;
  }

  /** The autoscaling signal now (decided on the load sampled from reports). */
  autoscale(): AutoscaleStatus {
    return this.#decideAutoscale(Date.now());
  }

  deregister(msg: DeregisterMessage, nonce: number): boolean | Replayed {
    if (!this.#fresh(msg.replica_id, nonce)) return "replayed";
    const removed = this.#membership.deregister(msg.replica_id);
    this.#drainRequested.delete(msg.replica_id);
    if (removed) this.ctx.storage.sql.exec("DELETE FROM replicas WHERE id = ?", msg.replica_id);
    return removed;
  }

  snapshot(): RoutingSnapshot {
    this.#snapshotCalls++;
    return this.#membership.snapshot(this.#deployment, Date.now());
  }

  stats(): RouterStats {
    const now = Date.now();
    let fresh = 0;
    for (const m of this.#membership.members.values()) if (this.#membership.isFresh(m, now)) fresh++;
    return {
      deployment: this.#deployment,
      snapshotCalls: this.#snapshotCalls,
      reports: this.#reports,
      registrations: this.#registrations,
      members: this.#membership.members.size,
      fresh,
      replays: this.#replays,
    };
  }

  /** Restarts the object (admin API, fault tests): memory is lost, SQLite survives. The call itself fails. */
  restart(): void {
    this.ctx.abort("restart requested");
  }

  /** Sweeps members that went silent; idempotent, so at-least-once alarm delivery is harmless. */
  override async alarm(): Promise<void> {
    const now = Date.now();
    this.#nonces.prune(now);
    for (const id of this.#membership.forgettable(now, this.#startedAt)) {
      this.#membership.deregister(id);
      this.ctx.storage.sql.exec("DELETE FROM replicas WHERE id = ?", id);
    }
    const decision = this.#decideAutoscale(now);
    if (decision.enabled) {
      const announce = shouldAnnounce(this.#announcedDesired, decision);
      this.#announcedDesired = decision.desired;
      const hook = servedDeployment(this.#deployment)?.autoscaling?.webhook;
      if (hook && announce) await this.#notify(hook, decision);
    }
    if (this.#membership.members.size > 0) await this.ctx.storage.setAlarm(now + SWEEP_INTERVAL_MS);
  }

  #sampleLoad(now: number): void {
    const cfg = servedDeployment(this.#deployment)?.autoscaling;
    if (!cfg || now - this.#lastSampleAt < AUTOSCALE_SAMPLE_MS) return;
    this.#lastSampleAt = now;
    let total = 0;
    for (const m of this.#membership.members.values()) if (this.#membership.isFresh(m, now)) total += m.load.ongoing + m.load.queued;
    this.#autoscaler.sample(now, total, cfg.lookBackPeriodS);
  }

  #decideAutoscale(now: number): AutoscaleStatus {
    let current = 0;
    for (const m of this.#membership.members.values()) if (this.#membership.isFresh(m, now) && m.load.state === "ready") current++;
    const cfg = servedDeployment(this.#deployment)?.autoscaling;
    if (!cfg) return { deployment: this.#deployment, enabled: false, current, desired: current, raw: current, averageOngoing: 0, pendingSince: null };
    return { deployment: this.#deployment, enabled: true, ...this.#autoscaler.decide(now, current, cfg) };
  }

  /** Tells the configured autoscaler webhook about a new desired count (best effort, bounded). */
  async #notify(url: string, d: AutoscaleStatus): Promise<void> {
    try {
      await fetch(url, {
        method: "POST",
        headers: { "content-type": "application/json" },
        body: JSON.stringify({ deployment: d.deployment, desired: d.desired, current: d.current, average_ongoing: d.averageOngoing, at: Date.now() }),
        signal: AbortSignal.timeout(5_000),
      });
    } catch (err) {
      console.error(JSON.stringify({ msg: "autoscale webhook failed", deployment: d.deployment, error: String(err) }));
    }
  }

  async #ensureSweep(): Promise<void> {
    if ((await this.ctx.storage.getAlarm()) === null) await this.ctx.storage.setAlarm(Date.now() + SWEEP_INTERVAL_MS);
  }

  #fresh(replicaId: string, nonce: number): boolean {
    if (this.#nonces.accept(replicaId, nonce, Date.now())) return true;
    this.#replays++;
    return false;
  }

  #rememberName(deployment: string): void {
    if (this.#deployment === deployment) return;
    this.#deployment = deployment;
    this.ctx.storage.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('deployment', ?)", deployment);
  }
}
