/**
 * Session → replica bindings: the decisions of the SessionRouter Durable Object,
 * apart from storage. Pure, with time passed in.
 *
 * A binding expires `ttlMs` after its last use. Proxies re-resolve a cached
 * binding every few seconds while the session is in use, so "use" reaches the
 * object without a call per request; the expiry is written back only when less
 * than half of the TTL is left, which bounds writes to about two per binding per
 * TTL instead of one per resolve.
 */
// @ts-nocheck

import { fnv1a } from "../protocol/hashing.ts";

export interface StoredBinding {
  replica: string;
  /** Epoch ms after which the binding is forgotten. */
  expiresAt: number;
}

export interface BindingDecision {
  /** The replica the session is bound to after this call. */
  replica: string;
  /** What to persist, or null when storage already holds it closely enough. */
  write: StoredBinding | null;
}

function keep(existing: StoredBinding, now: number, ttlMs: number): BindingDecision {
  const refreshed = existing.expiresAt - now < ttlMs / 2;
  return { replica: existing.replica, write: refreshed ? { replica: existing.replica, expiresAt: now + ttlMs } : null };
}

function bind(replica: string, now: number, ttlMs: number): BindingDecision {
  return { replica, write: { replica, expiresAt: now + ttlMs } };
}

const live = (b: StoredBinding | null, now: number): b is StoredBinding => b !== null && b.expiresAt > now;

/** Returns the session's live binding, or binds it to `proposal` (the caller's best replica now). */
export function resolveBinding(existing: StoredBinding | null, proposal: string, now: number, ttlMs: number): BindingDecision {
  return live(existing, now) ? keep(existing, now, ttlMs) : bind(proposal, now, ttlMs);
}

/**
 * Moves the session from `from` (which the caller found draining, dead or full)
 * to `to`. Compare-and-set: if another proxy already moved it elsewhere, that
 * binding wins and is returned, so all proxies converge on one replica.
 */
export function rebindBinding(existing: StoredBinding | null, from: string, to: string, now: number, ttlMs: number): BindingDecision {
  if (live(existing, now) && existing.replica !== from) return keep(existing, now, ttlMs);
  return bind(to, now, ttlMs);
}

/** FNV-1a, 32 bit: a stable, cheap hash for picking a session's shard. */
export function sessionShard(sessionId: string, shards: number): number {
  return fnv1a(sessionId) % shards;
}

/** Name of a deployment's SessionRouter shard. */
export function sessionShardName(deployment: string, shard: number): string {
  return `${deployment}/sessions/${shard}`;
}

/** Name of the SessionRouter object holding a session's binding. */
export function sessionObjectName(deployment: string, sessionId: string, shards: number): string {
  return sessionShardName(deployment, sessionShard(sessionId, shards));
}
