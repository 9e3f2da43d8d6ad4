/**
 * The routing Durable Object: one per shard of a deployment (`routing.shards`,
 * one by default). Holds the membership of the nodes it owns (persisted in
 * SQLite) and their load (in memory, fed by reports), and hands relays (or
 * proxies) a routing snapshot. It never sees a request body: it is called about
 * once a second per location (per isolate without relays), not per request.
 * Shard 0 leads the autoscaling signal: the other shards tell it their load.
 */
import { DurableObject } from "cloudflare:workers";
import { ContinuationForm, LocationDemand, ReplicaRole, type ControlAck, type DeregisterMessage, type LocationDemandAsk, type NodeReportAck, type NodeReportMessage, type RegisterMessage, type ReportMessage, type RoutingSnapshot, type SummaryAsk } from "../protocol/index.ts";
import { LocationDemandBoard } from "../policy/location-demand.ts";
import { servedDeployment } from "../config/served.ts";
import { Autoscaler, shouldAnnounce, type AutoscaleDecision } from "../policy/autoscale.ts";
import { Membership, NonceGuard, REPORT_INTERVAL_MS, type ReportOutcome } from "./membership.ts";
import { boundedView } from "./bounded-view.ts";
import { decodeDigests, summaryDelta } from "./summary-delta.ts";
import { AUTOSCALE_SAMPLE_MS, SHARD_LOAD_INTERVAL_MS, fleetLoad, heldDemand, routingShardName, type ShardLoad } from "./routing-shards.ts";

/** How often the alarm sweeps silent members while there are any. */
const SWEEP_INTERVAL_MS = 5_000;

export interface RouterStats {
  deployment: string;
  snapshotCalls: number;
  reports: number;
  /** Node reports (each carries several replicas' reports, counted in `reports` too). */
  nodeReports: number;
  registrations: number;
  members: number;
  fresh: number;
  /** Signed control messages refused because their nonce was not above the replica's last (since the object started). */
  replays: number;
  /** Every call this object served (snapshots, control messages, shard loads, admin): its load. */
  calls: number;
  /** Fresh members holding a prefix-cache summary (memory only). */
  summaries: number;
  /** Reports that carried a summary (each one changed, or a resend). */
  summaryReports: number;
}

/** A relay's request for a bounded sample of a shard's replicas (src/state/bounded-view.ts). */
export interface ShardSample {
  seed: number;
  max: number;
}

/** Which shard an object is, as the edge tells it with each register. */
export interface ShardRef {
  index: number;
  count: number;
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


/** The binding of the routing objects (wrangler.toml: ROUTER). */
export interface RouterBinding {
  ROUTER: DurableObjectNamespace<DeploymentRouter>;
}

/** A routing Durable Object of a deployment: shard 0 (the deployment's own name) unless `shard` is given. */
export function routerFor(env: RouterBinding, deployment: string, shard = 0): DurableObjectStub<DeploymentRouter> {
  return env.ROUTER.get(env.ROUTER.idFromName(routingShardName(deployment, shard)));
}

export class DeploymentRouter extends DurableObject<RouterBinding> {
  readonly #membership = new Membership();
  readonly #nonces = new NonceGuard();
  readonly #startedAt = Date.now();
  #deployment = "";
  #snapshotCalls = 0;
  #reports = 0;
  #nodeReports = 0;
  #registrations = 0;
  #replays = 0;
  #calls = 0;
  #summaryReports = 0;
  #shard: ShardRef = { index: 0, count: 1 };
  /** Leader only: the other shards' latest load, by shard index. */
  readonly #shardLoads = new Map<number, ShardLoad>();
  readonly #autoscaler = new Autoscaler();
  /** Leader only: requests the edge's isolates hold now, by isolate (memory; stale after HELD_DEMAND_STALE_MS). */
  readonly #held = new Map<string, { held: number; at: number }>();
  /** Leader only: each location's admission demand, as its relay posts it with its snapshot asks (memory). */
  readonly #locations = new LocationDemandBoard();
  #lastSampleAt = 0;
  #announcedDesired: number | null = null;
  /** Replicas an operator asked to drain (memory: a restart forgets it; the operator asks again). */
  readonly #drainRequested = new Set<string>();

  constructor(ctx: DurableObjectState, env: RouterBinding) {
    super(ctx, env);
    const sql = ctx.storage.sql;
    sql.exec(`CREATE TABLE IF NOT EXISTS replicas (
      id TEXT PRIMARY KEY, url TEXT NOT NULL, max_ongoing INTEGER NOT NULL, registered_at INTEGER NOT NULL)`);
    sql.exec(`CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`);
    // Storage written before engine keys (or continuation forms, roles, bootstrap ports, regions, coordinates) existed has no such column.
    const columns = new Set(sql.exec<{ name: string }>("PRAGMA table_info(replicas)").toArray().map((c) => c.name));
    if (!columns.has("engine_key")) sql.exec("ALTER TABLE replicas ADD COLUMN engine_key TEXT");
    if (!columns.has("continues")) sql.exec("ALTER TABLE replicas ADD COLUMN continues TEXT");
    if (!columns.has("roles")) sql.exec("ALTER TABLE replicas ADD COLUMN roles TEXT");
    if (!columns.has("bootstrap_port")) sql.exec("ALTER TABLE replicas ADD COLUMN bootstrap_port INTEGER");
    if (!columns.has("region")) sql.exec("ALTER TABLE replicas ADD COLUMN region TEXT");
    if (!columns.has("lat")) sql.exec("ALTER TABLE replicas ADD COLUMN lat REAL");
    if (!columns.has("lon")) sql.exec("ALTER TABLE replicas ADD COLUMN lon REAL");
    const restoredAt = Date.now();
    for (const row of sql.exec<{
      id: string;
      url: string;
      max_ongoing: number;
      registered_at: number;
      engine_key: string | null;
      continues: string | null;
      roles: string | null;
      bootstrap_port: number | null;
      region: string | null;
      lat: number | null;
      lon: number | null;
    }>("SELECT id, url, max_ongoing, registered_at, engine_key, continues, roles, bootstrap_port, region, lat, lon FROM replicas")) {
      const continues = row.continues === null ? undefined : ContinuationForm.array().safeParse(JSON.parse(row.continues));
      const roles = row.roles === null ? undefined : ReplicaRole.array().safeParse(JSON.parse(row.roles));
      this.#membership.restore(
        {
          id: row.id,
          url: row.url,
          maxOngoing: row.max_ongoing,
          registeredAt: row.registered_at,
          ...(row.engine_key !== null ? { engineKey: row.engine_key } : {}),
          ...(continues?.success ? { continues: continues.data } : {}),
          ...(roles?.success ? { roles: roles.data } : {}),
          ...(row.bootstrap_port !== null ? { bootstrapPort: row.bootstrap_port } : {}),
          ...(row.region !== null ? { region: row.region } : {}),
          // Written together (one register's coordinates): both or neither.
          ...(row.lat !== null && row.lon !== null ? { coordinates: { lat: row.lat, lon: row.lon } } : {}),
        },
        restoredAt,
      );
    }
    const name = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'deployment'").toArray()[0];
    if (name) this.#deployment = name.value;
    const shard = sql.exec<{ value: string }>("SELECT value FROM meta WHERE key = 'shard'").toArray()[0];
    if (shard) this.#shard = JSON.parse(shard.value) as ShardRef;
  }

  /**
   * The control RPCs take the message's signed nonce (the edge verified the
   * signature and timestamp); a nonce not above the replica's last is a replay.
   */
  async register(msg: RegisterMessage, nonce: number, shard: ShardRef = { index: 0, count: 1 }): Promise<ControlAck | Replayed> {
    this.#calls++;
    if (!this.#fresh(msg.replica_id, nonce)) return "replayed";
    this.#registrations++;
    this.#rememberName(msg.deployment, shard);
    if (this.#membership.register(msg, Date.now())) {
      this.ctx.storage.sql.exec(
        "INSERT OR REPLACE INTO replicas (id, url, max_ongoing, registered_at, engine_key, continues, roles, bootstrap_port, region, lat, lon) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        msg.replica_id,
        msg.url,
        msg.max_ongoing_requests,
        Date.now(),
        msg.engine_key ?? null,
        msg.continues === undefined ? null : JSON.stringify(msg.continues),
        msg.roles === undefined ? null : JSON.stringify(msg.roles),
        msg.bootstrap_port ?? null,
        msg.region ?? null,
        msg.coordinates?.lat ?? null,
        msg.coordinates?.lon ?? null,
      );
    }
    await this.#ensureSweep();
    return { ok: true, report_interval_ms: REPORT_INTERVAL_MS };
  }

  /** Load report: memory only, no storage write (reports arrive every second from every replica). */
  report(msg: ReportMessage, nonce: number): ReportOutcome | Replayed | DrainRequested {
    this.#calls++;
    if (!this.#fresh(msg.replica_id, nonce)) return "replayed";
    const now = Date.now();
    const outcome = this.#apply(msg, now);
    this.#sampleLoad(now);
    return outcome;
  }

  /**
   * A node's reports for all its replicas in one call (node batching): each
   * entry is applied as a report of its own. The nonce guards the node's
   * messages as a whole (its agent signs them in order).
   */
  reportNode(msg: NodeReportMessage, nonce: number): NodeReportAck["outcomes"] | Replayed {
    this.#calls++;
    if (!this.#fresh(`\u0000node:${msg.node}`, nonce)) return "replayed";
    this.#nodeReports++;
    const now = Date.now();
    const outcomes = msg.reports.map((r) => this.#apply({ protocol: msg.protocol, deployment: msg.deployment, ...r }, now));
    this.#sampleLoad(now);
    return outcomes;
  }

  #apply(msg: ReportMessage, now: number): ReportOutcome | DrainRequested {
    this.#reports++;
    if (msg.prefix_cache) this.#summaryReports++;
    const outcome = this.#membership.report(msg, now);
    if (outcome !== "unknown_replica" && this.#drainRequested.has(msg.replica_id)) return "drain";
    return outcome;
  }

  /** Leader only (shard 0): another shard's load, for the autoscaling signal over the whole deployment. */
  shardLoad(deployment: string, shard: ShardRef, load: ShardLoad): void {
    this.#calls++;
    // A leader with no replicas of its own learns its deployment from its shards.
    this.#rememberName(deployment, { index: 0, count: shard.count });
    this.#shardLoads.set(shard.index, load);
    this.#sampleLoad(Date.now(), true);
  }

  /**
   * Leader only (shard 0): an isolate holds `held` requests for want of a free replica
   * (admission, src/proxy/serve/admit.ts). They count as ongoing for the autoscaler,
   * as requests queued in Ray Serve's handles do; at zero replicas they want the first
   * one at once, and the webhook hears so now rather than at the next alarm.
   */
  async demand(deployment: string, isolate: string, held: number): Promise<AutoscaleStatus> {
    this.#calls++;
    this.#rememberName(deployment, { index: 0, count: this.#shard.count });
    const now = Date.now();
    this.#held.set(isolate, { held, at: now });
    this.#sampleLoad(now);
    let decision = this.#decideAutoscale(now);
    const cfg = servedDeployment(this.#deployment)?.autoscaling;
    if (cfg && decision.current === 0 && held > 0) {
      // At zero, within a second of the last sample: this demand must not wait for the next
      // (nothing else samples while no replica reports; the calls come at most 1/s per isolate).
      this.#autoscaler.sample(now, heldDemand(this.#held, now), cfg.lookBackPeriodS);
      decision = this.#decideAutoscale(now);
    }
    if (decision.enabled && decision.settled && shouldAnnounce(this.#announcedDesired, decision)) {
      this.#announcedDesired = decision.desired;
      const hook = servedDeployment(this.#deployment)?.autoscaling?.webhook;
      if (hook) this.ctx.waitUntil(this.#notify(hook, decision));
    }
    await this.#ensureSweep();
    return decision;
  }

  /**
   * Asks a replica to drain: its next report's answer says so, and the replica
   * drains itself (stops taking requests, finishes in-flight ones, deregisters).
   */
  requestDrain(replicaId: string): boolean {
    this.#calls++;
    if (!this.#membership.members.has(replicaId)) return false;
    this.#drainRequested.add(replicaId);
    return true;
  }

  /** The autoscaling signal now (decided on the load sampled from reports). */
  autoscale(): AutoscaleStatus {
    this.#calls++;
    return this.#decideAutoscale(Date.now());
  }

  deregister(msg: DeregisterMessage, nonce: number): boolean | Replayed {
    this.#calls++;
    if (!this.#fresh(msg.replica_id, nonce)) return "replayed";
    const removed = this.#membership.deregister(msg.replica_id);
    this.#drainRequested.delete(msg.replica_id);
    if (removed) this.ctx.storage.sql.exec("DELETE FROM replicas WHERE id = ?", msg.replica_id);
    return removed;
  }

  /**
   * The shard's snapshot. `summaries`: the asker's held summary digests and byte
   * budget; the answer carries only the summaries it lacks, within the budget.
   * Without it (admin, metrics, dashboard) the answer carries digests only.
   * `demand` (the leader only; a relay's ask): its location's admission demand, and the
   * answer carries the other locations' (src/policy/location-demand.ts).
   */
  snapshot(sample?: ShardSample, summaries?: SummaryAsk, demand?: LocationDemandAsk): RoutingSnapshot {
    this.#calls++;
    this.#snapshotCalls++;
    const now = Date.now();
    const all = this.#membership.snapshot(this.#deployment, now);
    const view = sample ? boundedView(all, sample.seed, now, sample.max, Math.ceil(sample.max / 4)) : all;
    const answer = summaryDelta(view, decodeDigests(summaries?.have ?? ""), summaries?.maxBytes ?? 0, this.#snapshotCalls);
    if (demand === undefined || this.#shard.index !== 0) return answer;
    const post = LocationDemand.safeParse(demand.demand);
    // Only relays call this: a malformed post is a bug; the snapshot is still answered.
    if (!post.success || typeof demand.location !== "string" || demand.location.length > 256) return answer;
    this.#locations.post(demand.location, post.data, now);
    return { ...answer, admissionElsewhere: this.#locations.others(demand.location, now) };
  }

  stats(): RouterStats {
    const now = Date.now();
    let fresh = 0;
    let summaries = 0;
    for (const m of this.#membership.members.values()) {
      if (!this.#membership.isFresh(m, now)) continue;
      fresh++;
      if (m.cache !== undefined) summaries++;
    }
    return {
      deployment: this.#deployment,
      snapshotCalls: this.#snapshotCalls,
      reports: this.#reports,
      nodeReports: this.#nodeReports,
      registrations: this.#registrations,
      members: this.#membership.members.size,
      fresh,
      replays: this.#replays,
      calls: this.#calls,
      summaries,
      summaryReports: this.#summaryReports,
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
    // Nothing is announced on a guess (members restored at a restart, not heard from yet).
    if (decision.enabled && decision.settled) {
      const announce = shouldAnnounce(this.#announcedDesired, decision);
      this.#announcedDesired = decision.desired;
      const hook = servedDeployment(this.#deployment)?.autoscaling?.webhook;
      if (hook && announce) await this.#notify(hook, decision);
    }
    // Requests held at the edge keep the alarm too: at zero there is no member yet.
    const holding = heldDemand(this.#held, now) > 0;
    if (this.#membership.members.size > 0 || fleetLoad({ ready: 0, ongoing: 0 }, this.#shardLoads.values(), now).ready > 0 || holding) {
      await this.ctx.storage.setAlarm(now + SWEEP_INTERVAL_MS);
    }
  }

  /**
   * Samples the load for the autoscaler at most every AUTOSCALE_SAMPLE_MS. The
   * leader samples the whole deployment (its own shard plus the others' latest);
   * another shard sends its own load to the leader instead, at most every
   * SHARD_LOAD_INTERVAL_MS.
   */
  #sampleLoad(now: number, fromShard = false): void {
    const cfg = servedDeployment(this.#deployment)?.autoscaling;
    const leader = this.#shard.index === 0;
    if (!cfg || now - this.#lastSampleAt < (leader ? AUTOSCALE_SAMPLE_MS : SHARD_LOAD_INTERVAL_MS)) return;
    this.#lastSampleAt = now;
    const own = this.#ownLoad(now);
    if (!leader) {
      const load: ShardLoad = { ...own, at: now };
      this.ctx.waitUntil(
        routerFor(this.env, this.#deployment)
          .shardLoad(this.#deployment, this.#shard, load)
          .catch((err: unknown) => console.error(JSON.stringify({ msg: "shard load to leader failed", deployment: this.#deployment, error: String(err) }))),
      );
      return;
    }
    this.#autoscaler.sample(now, fleetLoad(own, this.#shardLoads.values(), now).ongoing + heldDemand(this.#held, now), cfg.lookBackPeriodS);
    // The leader decides on its alarm: a leader with no members of its own has none armed yet.
    if (fromShard) this.ctx.waitUntil(this.#ensureSweep());
  }

  /** This shard's fresh ready replicas and their ongoing + queued requests. */
  #ownLoad(now: number): { ready: number; ongoing: number } {
    let ready = 0;
    let ongoing = 0;
    for (const m of this.#membership.members.values()) {
      if (!this.#membership.isFresh(m, now)) continue;
      ongoing += m.load.ongoing + m.load.queued;
      if (m.load.state === "ready") ready++;
    }
    return { ready, ongoing };
  }

  #decideAutoscale(now: number): AutoscaleStatus {
    const current = fleetLoad(this.#ownLoad(now), this.#shardLoads.values(), now).ready;
    const cfg = servedDeployment(this.#deployment)?.autoscaling;
    if (!cfg) return { deployment: this.#deployment, enabled: false, current, desired: current, raw: current, averageOngoing: 0, pendingSince: null, settled: true };
    return { deployment: this.#deployment, enabled: true, ...this.#autoscaler.decide(now, current, cfg, !this.#membership.unconfirmed(now)) };
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

  #rememberName(deployment: string, shard: ShardRef): void {
    if (this.#deployment !== deployment) {
      this.#deployment = deployment;
      this.ctx.storage.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('deployment', ?)", deployment);
    }
    if (this.#shard.index !== shard.index || this.#shard.count !== shard.count) {
      this.#shard = shard;
      this.ctx.storage.sql.exec("INSERT OR REPLACE INTO meta (key, value) VALUES ('shard', ?)", JSON.stringify(shard));
    }
  }
}
