/**
 * The SessionRouter Durable Object: session → replica bindings for one shard of
 * one deployment's sessions (a deployment's sessions are spread over
 * `sessionAffinity.shards` objects by a hash of the session id). Proxies call it
 * when they first see a session and then every few seconds per session while it
 * is in use (they cache bindings), never once per request.
 */
// @ts-nocheck

import { DurableObject } from "cloudflare:workers";
import { rebindBinding, resolveBinding, sessionObjectName, sessionShardName, type BindingDecision, type StoredBinding } from "./session-binding.ts";

/** Expired bindings are swept this often while any exist. */
const SWEEP_INTERVAL_MS = 60_000;

export interface SessionBindingAnswer {
  replica: string;
}

export interface SessionRouterStats {
  bindings: number;
  resolves: number;
  rebinds: number;
  writes: number;
}

/** The binding of the SessionRouter objects (wrangler.toml: SESSIONS). */
export interface SessionsBinding {
  SESSIONS: DurableObjectNamespace<SessionRouter>;
}

/** The SessionRouter shard holding a session's binding. */
export function sessionRouterFor(env: SessionsBinding, deployment: string, session: string, shards: number): DurableObjectStub<SessionRouter> {
  return env.SESSIONS.get(env.SESSIONS.idFromName(sessionObjectName(deployment, session, shards)));
}

/** A deployment's session counters, summed over its SessionRouter shards (admin and metrics; calls every shard). */
export async function sessionStatsFor(env: SessionsBinding, deployment: string, shards: number): Promise<SessionRouterStats> {
  const all = await Promise.all(Array.from({ length: shards }, (_, i) => env.SESSIONS.get(env.SESSIONS.idFromName(sessionShardName(deployment, i))).stats()));
  const sum: SessionRouterStats = { bindings: 0, resolves: 0, rebinds: 0, writes: 0 };
  for (const s of all) for (const k of Object.keys(sum) as (keyof SessionRouterStats)[]) sum[k] += s[k];
  return sum;
}

export class SessionRouter extends DurableObject<SessionsBinding> {
  #resolves = 0;
  #rebinds = 0;
  #writes = 0;
  #sweepArmed = false;

  constructor(ctx: DurableObjectState, env: SessionsBinding) {
    super(ctx, env);
    ctx.storage.sql.exec(`CREATE TABLE IF NOT EXISTS sessions (
      id TEXT PRIMARY KEY, replica TEXT NOT NULL, expires_at INTEGER NOT NULL)`);
  }

  /** The session's replica: its live binding, or `proposal`, which becomes the binding. */
  async resolve(session: string, proposal: string, ttlMs: number): Promise<SessionBindingAnswer> {
    this.#resolves++;
    return this.#apply(session, resolveBinding(this.#read(session), proposal, Date.now(), ttlMs));
  }

  /** Moves the session off `from` to `to`, unless another proxy already moved it (then that wins). */
  async rebind(session: string, from: string, to: string, ttlMs: number): Promise<SessionBindingAnswer> {
    this.#rebinds++;
    return this.#apply(session, rebindBinding(this.#read(session), from, to, Date.now(), ttlMs));
  }

  stats(): SessionRouterStats {
    const row = this.ctx.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM sessions").one();
    return { bindings: row.n, resolves: this.#resolves, rebinds: this.#rebinds, writes: this.#writes };
  }

  override async alarm(): Promise<void> {
    this.#sweepArmed = false;
    this.ctx.storage.sql.exec("DELETE FROM sessions WHERE expires_at <= ?", Date.now());
    await this.#armSweep();
  }

  #read(session: string): StoredBinding | null {
    const row = this.ctx.storage.sql
      .exec<{ replica: string; expires_at: number }>("SELECT replica, expires_at FROM sessions WHERE id = ?", session)
      .toArray()[0];
    return row ? { replica: row.replica, expiresAt: row.expires_at } : null;
  }

  async #apply(session: string, decision: BindingDecision): Promise<SessionBindingAnswer> {
    if (decision.write) {
      this.#writes++;
      this.ctx.storage.sql.exec(
        "INSERT OR REPLACE INTO sessions (id, replica, expires_at) VALUES (?, ?, ?)",
        session,
        decision.write.replica,
        decision.write.expiresAt,
      );
      await this.#armSweep();
    }
    return { replica: decision.replica };
  }

  async #armSweep(): Promise<void> {
    if (this.#sweepArmed) return;
    const any = this.ctx.storage.sql.exec<{ n: number }>("SELECT count(*) AS n FROM sessions").one().n > 0;
    if (!any) return;
    if ((await this.ctx.storage.getAlarm()) === null) await this.ctx.storage.setAlarm(Date.now() + SWEEP_INTERVAL_MS);
    this.#sweepArmed = true;
  }
}
