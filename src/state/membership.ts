/**
 * The routing Durable Object's decisions, apart from storage and runtime:
 * which replicas are members, which are fresh, what the snapshot holds.
 * Pure, with time passed in, so it is unit-tested without workerd.
 */
import type { CacheSummaryWire } from "../prefix/cache-summary.ts";
import { REPORT_STALE_AFTER_MS, SIGNATURE_WINDOW_MS, SUMMARY_MAX_AGE_MS, type ContinuationForm, type ReplicaRole, type ReplicaCoordinates, type Load, type RegisterMessage, type ReportMessage, type ReplicaView, type RoutingSnapshot } from "../protocol/index.ts";
import { summaryDigest } from "./summary-delta.ts";

/** Replicas report at least this often. */
export const REPORT_INTERVAL_MS = 1_000;
/** A replica whose last report is older than this leaves the snapshot (the bound is 3 s). */
export const STALE_AFTER_MS = REPORT_STALE_AFTER_MS;
/** A member that has not reported for this long is forgotten (deleted from storage). */
export const FORGET_AFTER_MS = 60_000;

export interface Member {
  id: string;
  url: string;
  maxOngoing: number;
  registeredAt: number;
  /** In memory only: 0 until the first report after a (re)start of the object. */
  lastReportAt: number;
  load: Load;
  models: string[];
  loading: string[];
  /** Multiplexing capacity the replica announced, if any. */
  maxModels?: number;
  /** The engine's bearer key (RegisterMessage.engine_key), persisted with the identity. */
  engineKey?: string;
  /**
   * The replica's latest prefix-cache summary (`prefix_cache` of its reports), in
   * memory only like the load: never written to storage (reports are many, writes
   * fsync-bound), so a restarted object learns it again from the replica's next
   * resend (≤ SUMMARY_RESEND_MS). `at`: when it was last sent.
   */
  cache?: { digest: string; wire: CacheSummaryWire; at: number };
  /** The continuation forms it declared at register (absent: both). */
  continues?: ContinuationForm[];
  /** Its prefill/decode roles, declared at register (absent: both). */
  roles?: ReplicaRole[];
  /** Its KV bootstrap port (SGLang's protocol), declared at register. */
  bootstrapPort?: number;
  /** Its region's name, declared at register (issue 57). */
  region?: string;
  /** Where it is (degrees), declared at register (issue 57). */
  coordinates?: ReplicaCoordinates;
  /** Draining with a deadline: when it stops serving, on this object's clock (memory only). */
  drainsAt?: number;
  /**
   * Restored from storage at a restart and not heard from since: it may be dead (a
   * local stack killed with its replicas). Routing keeps it (see restore); the
   * autoscaler does not take its count as settled until it reports or goes stale.
   */
  restored?: true;
}

export type ReportOutcome = "ok" | "unknown_replica" | "stale_seq";

export class Membership {
  readonly members = new Map<string, Member>();

  /**
   * Restores a persisted member after the object restarted, as heard from at
   * the restart (`now`): a live replica reports within its next heartbeat (1 s),
   * a dead one goes stale after STALE_AFTER_MS like any silent replica. Treating
   * restored members as stale instead made the first snapshots after a restart
   * empty, and proxies that applied one dropped every replica (an e2e run saw
   * 3,423 of 8,812 requests fail with no_ready_replica for ~1 s).
   */
  restore(
    m: { id: string; url: string; maxOngoing: number; registeredAt: number; engineKey?: string; continues?: ContinuationForm[]; roles?: ReplicaRole[]; bootstrapPort?: number; region?: string; coordinates?: ReplicaCoordinates },
    now: number,
  ): void {
    this.members.set(m.id, {
      ...m,
      lastReportAt: now,
      load: { seq: -1, ongoing: 0, queued: 0, max: m.maxOngoing, state: "ready" },
      models: [],
      loading: [],
      restored: true,
    });
  }

  /**
   * Whether a restored member is still counted as fresh without having reported since
   * the restart: until none is, the ready count is a guess (the autoscaler must not
   * latch it as its starting point: a restart after an abrupt kill of 8 replicas
   * kept wanting 8 for the whole downscale delay).
   */
  unconfirmed(now: number): boolean {
    for (const m of this.members.values()) if (m.restored && this.isFresh(m, now)) return true;
    return false;
  }

  /** Returns true when the persisted identity (url, capacity) changed and must be written. */
  register(msg: RegisterMessage, now: number): boolean {
    const known = this.members.get(msg.replica_id);
    const changed =
      !known ||
      known.url !== msg.url ||
      known.maxOngoing !== msg.max_ongoing_requests ||
      known.engineKey !== msg.engine_key ||
      String(known.continues) !== String(msg.continues) ||
      String(known.roles) !== String(msg.roles) ||
      known.bootstrapPort !== msg.bootstrap_port ||
      known.region !== msg.region ||
      known.coordinates?.lat !== msg.coordinates?.lat ||
      known.coordinates?.lon !== msg.coordinates?.lon;
    this.members.set(msg.replica_id, {
      id: msg.replica_id,
      url: msg.url,
      maxOngoing: msg.max_ongoing_requests,
      // Every registration starts a new epoch: the process behind it restarts its seq.
      registeredAt: now,
      // Registration counts as a report: the replica is alive and ready now.
      lastReportAt: now,
      load: { seq: -1, ongoing: 0, queued: 0, max: msg.max_ongoing_requests, state: "ready" },
      // A new process has nothing loaded yet; its first report says what it has.
      models: [],
      loading: [],
      ...(msg.max_models !== undefined ? { maxModels: msg.max_models } : {}),
      ...(msg.engine_key !== undefined ? { engineKey: msg.engine_key } : {}),
      ...(msg.continues !== undefined ? { continues: msg.continues } : {}),
      ...(msg.roles !== undefined ? { roles: msg.roles } : {}),
      ...(msg.bootstrap_port !== undefined ? { bootstrapPort: msg.bootstrap_port } : {}),
      ...(msg.region !== undefined ? { region: msg.region } : {}),
      ...(msg.coordinates !== undefined ? { coordinates: msg.coordinates } : {}),
    });
    return changed;
  }

  report(msg: ReportMessage, now: number): ReportOutcome {
    const m = this.members.get(msg.replica_id);
    if (!m) return "unknown_replica";
    // Any report proves the replica alive; only one at least as new as what we hold
    // replaces its load (a heartbeat repeats the seq when nothing changed; a restarted
    // process registers again, which resets the seq).
    m.lastReportAt = now;
    delete m.restored;
    if (msg.seq < m.load.seq) return "stale_seq";
    m.load = { seq: msg.seq, ongoing: msg.ongoing, queued: msg.queued, max: m.maxOngoing, state: msg.state };
    if (msg.kv_cache_usage !== undefined) m.load.kv = msg.kv_cache_usage;
    if (msg.prefill_wait_ms !== undefined) m.load.prefillWaitMs = msg.prefill_wait_ms;
    if (msg.prefill_rate !== undefined) m.load.prefillRate = msg.prefill_rate;
    // Counted from the report's arrival (clocks differ; transit only makes it later than meant, by milliseconds).
    if (msg.state === "draining" && msg.drain_deadline_ms !== undefined) m.drainsAt = now + msg.drain_deadline_ms;
    else delete m.drainsAt;
    m.models = msg.models;
    m.loading = msg.loading;
    // Absent: unchanged. Null: the replica holds none now.
    if (msg.prefix_cache === null) delete m.cache;
    else if (msg.prefix_cache !== undefined) {
      const digest = m.cache !== undefined && sameSummary(m.cache.wire, msg.prefix_cache) ? m.cache.digest : summaryDigest(msg.prefix_cache);
      m.cache = { digest, wire: msg.prefix_cache, at: now };
    }
    return "ok";
  }

  deregister(replicaId: string): boolean {
    return this.members.delete(replicaId);
  }

  isFresh(m: Member, now: number): boolean {
    return m.lastReportAt > 0 && now - m.lastReportAt < STALE_AFTER_MS;
  }

  snapshot(deployment: string, now: number): RoutingSnapshot {
    const replicas: ReplicaView[] = [];
    for (const m of this.members.values()) {
      if (!this.isFresh(m, now)) continue;
      replicas.push({
        id: m.id,
        url: m.url,
        epoch: m.registeredAt,
        load: m.load,
        models: m.models,
        loading: m.loading,
        expiresInMs: m.lastReportAt + STALE_AFTER_MS - now,
        ...(m.drainsAt !== undefined ? { drainsInMs: Math.max(0, m.drainsAt - now) } : {}),
        ...(m.continues !== undefined ? { continues: m.continues } : {}),
        ...(m.roles !== undefined ? { roles: m.roles } : {}),
        ...(m.bootstrapPort !== undefined ? { bootstrapPort: m.bootstrapPort } : {}),
        ...(m.region !== undefined ? { region: m.region } : {}),
        ...(m.coordinates !== undefined ? { coordinates: m.coordinates } : {}),
        ...(m.engineKey !== undefined ? { engineKey: m.engineKey } : {}),
        // The whole summary: answers to relays and isolates leave out what they hold (summary-delta.ts).
        ...(m.cache !== undefined && now - m.cache.at < SUMMARY_MAX_AGE_MS ? { cacheDigest: m.cache.digest, cache: m.cache.wire } : {}),
      });
    }
    return { deployment, replicas };
  }

  /** Members to delete from storage: silent for longer than FORGET_AFTER_MS (or never heard from since restart). */
  forgettable(now: number, restartedAt: number): string[] {
    const out: string[] = [];
    for (const m of this.members.values()) {
      const lastHeard = m.lastReportAt > 0 ? m.lastReportAt : restartedAt;
      if (now - lastHeard >= FORGET_AFTER_MS) out.push(m.id);
    }
    return out;
  }
}

/** Whether two summaries are the same (a resend): the filter compared last, it is the long part. */
function sameSummary(a: CacheSummaryWire, b: CacheSummaryWire): boolean {
  return a.v === b.v && a.k === b.k && a.n === b.n && a.block === b.block && a.bits === b.bits;
}

/**
 * How long the highest nonce of a replica is remembered after its last accepted
 * message. The edge accepts timestamps within ±SIGNATURE_WINDOW_MS of its clock,
 * so every message signed before the last accepted one (a lower nonce) carries a
 * timestamp at most SIGNATURE_WINDOW_MS ahead of the edge at that moment and is
 * stale 2 × SIGNATURE_WINDOW_MS later; the extra 5 s cover clock differences
 * between edge locations.
 */
export const NONCE_MEMORY_MS = 2 * SIGNATURE_WINDOW_MS + 5_000;

/**
 * Replay guard of signed control messages: the highest nonce accepted per
 * replica id, in memory only (no storage write per report). A nonce not above
 * the one held is a replay. After the object restarts the memory is empty, so a
 * captured message can be replayed once while its timestamp is within the edge's
 * window (±SIGNATURE_WINDOW_MS); docs/protocol.md §1 states that bound.
 */
export class NonceGuard {
  readonly #highest = new Map<string, { nonce: number; at: number }>();

  /** Accepts `nonce` for `replicaId` if it is above every nonce accepted before, and remembers it. */
  accept(replicaId: string, nonce: number, now: number): boolean {
    const held = this.#highest.get(replicaId);
    if (held && nonce <= held.nonce) return false;
    this.#highest.set(replicaId, { nonce, at: now });
    return true;
  }

  /** Forgets replicas silent for longer than NONCE_MEMORY_MS: their old messages are stale by now. */
  prune(now: number): void {
    for (const [id, held] of this.#highest) if (now - held.at > NONCE_MEMORY_MS) this.#highest.delete(id);
  }

  get size(): number {
    return this.#highest.size;
  }
}
