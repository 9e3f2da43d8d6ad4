/**
 * What a relay hands one isolate: the deployment's merged snapshot, aged by how
 * long the relay has held it, and bounded. Up to VIEW_MAX_REPLICAS replicas an
 * isolate sees them all; above, it sees a sample: every model holder (so
 * multiplexed models still find their replicas) up to a share of the bound,
 * and the rest drawn by rendezvous on the isolate's seed and a rotating time
 * slot, so different isolates use different replicas and each isolate's sample
 * changes every VIEW_ROTATE_MS. Power of two choices needs only a sample; the
 * fleet as a whole still spreads over every replica. Pure.
 */
// @ts-nocheck

import type { ReplicaView, RoutingSnapshot } from "../protocol/index.ts";
import { fnv1a, mix } from "../protocol/hashing.ts";

/** Most replicas one isolate's view holds. */
export const VIEW_MAX_REPLICAS = 1024;
/** Of those, at most this many are there because they hold or load a model. */
export const VIEW_MAX_HOLDERS = 256;
/** A sampled view draws a new sample this often. */
export const VIEW_ROTATE_MS = 10_000;

/** The snapshot as seen `ageMs` after it was taken: expiries and drain deadlines shortened, expired replicas gone. */
export function agedSnapshot(s: RoutingSnapshot, ageMs: number): RoutingSnapshot {
  if (ageMs <= 0) return s;
  const replicas: ReplicaView[] = [];
  for (const r of s.replicas) {
    if (r.expiresInMs <= ageMs) continue;
    const aged: ReplicaView = { ...r, expiresInMs: r.expiresInMs - ageMs };
    if (r.drainsInMs !== undefined) aged.drainsInMs = Math.max(0, r.drainsInMs - ageMs);
    replicas.push(aged);
  }
  return { deployment: s.deployment, replicas };
}

/** The view for the isolate with `seed`, at most `max` replicas (see the module comment). */
export function boundedView(s: RoutingSnapshot, seed: number, now: number, max = VIEW_MAX_REPLICAS, maxHolders = VIEW_MAX_HOLDERS): RoutingSnapshot {
  if (s.replicas.length <= max) return s;
  const salt = mix((seed ^ Math.imul(Math.floor(now / VIEW_ROTATE_MS), 0x9e3779b1)) >>> 0);
  const rank = (r: ReplicaView) => mix((fnv1a(r.id) ^ salt) >>> 0);
  const holders: ReplicaView[] = [];
  const others: ReplicaView[] = [];
  for (const r of s.replicas) (r.models.length > 0 || r.loading.length > 0 ? holders : others).push(r);
  const pick = (from: ReplicaView[], n: number) => (from.length <= n ? from : from.map((r) => ({ r, w: rank(r) })).sort((a, b) => a.w - b.w).slice(0, n).map((x) => x.r));
  // Holders take up to maxHolders places, more when there are too few other replicas to fill the view.
  const kept = pick(holders, Math.max(Math.min(maxHolders, max), max - others.length));
  const rest = pick(others, max - kept.length);
  return { deployment: s.deployment, replicas: [...kept, ...rest], total: s.replicas.length };
}
