/**
 * The routing Durable Object: one per deployment. Holds membership (persisted
 * in SQLite) and load (in memory, fed by reports), and hands proxies a routing
 * snapshot. It never sees a request body: proxies call it about once a second
 * per isolate, not per request.
 */
import { DurableObject } from "cloudflare:workers";
import type { ControlAck, DeregisterMessage, RegisterMessage, ReportMessage, RoutingSnapshot } from "../protocol/index.ts";
import type { Env } from "../env.ts";
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

export class DeploymentRouter extends DurableObject<Env> {
  readonly #membership = new Membership();
  readonly #nonces = new NonceGuard();
  readonly #startedAt = Date.now();
  #deployment = "";
  #snapshotCalls = 0;
  #reports = 0;
  #registrations = 0;
  #replays = 0;

  constructor(ctx: DurableObjectState, env: Env) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    sql.exec(`CREATE TABLE IF NOT EXISTS replicas (
      id TEXT PRIMARY KEY, url TEXT NOT NULL, max_ongoing INTEGER NOT NULL, registered_at INTEGER NOT NULL)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`);
    for (const row of sql.exec<{ id: string; url: string; max_ongoing: number; registered_at: number }>(
      "SELECT id, url, max_ongoing, registered_at FROM replicas",
    )) {
      this.#membership.restore({ id: row.id, url: row.url, maxOngoing: row.max_ongoing, registeredAt: row.registered_at });
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
        "INSERT OR REPLACE INTO replicas (id, url, max_ongoing, registered_at) VALUES (?, ?, ?, ?)",
        msg.replica_id,
        msg.url,
        msg.max_ongoing_requests,
        Date.now(),
      );
    }
    await this.#ensureSweep();
    return { ok: true, report_interval_ms: REPORT_INTERVAL_MS };
  }

  /** Load report: memory only, no storage write (reports arrive every second from every replica). */
  report(msg: ReportMessage, nonce: number): ReportOutcome | Replayed {
    if (!this.#fresh(msg.replica_id, nonce)) return "replayed";
    this.#reports++;
    return this.#membership.report(msg, Date.now());
  }

  deregister(msg: DeregisterMessage, nonce: number): boolean | Replayed {
    if (!this.#fresh(msg.replica_id, nonce)) return "replayed";
    const removed = this.#membership.deregister(msg.replica_id);
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
    if (this.#membership.members.size > 0) await this.ctx.storage.setAlarm(now + SWEEP_INTERVAL_MS);
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
