/**
 * A location's share of per-key rate limits, as its relay keeps it (pure; the
 * SnapshotRelay Durable Object holds one per RateLimiter shard). The
 * location's isolates report their uses to the relay instead of to the
 * RateLimiter shard; the relay adds them up and reports the sum to the shard at
 * most every RATE_SYNC_INTERVAL_MS, so a shard sees about one sync per
 * location per second, whatever the number of isolates. An isolate is answered
 * with the key's global remainder as of the relay's last sync, less what the
 * location let through since, which is the same correction a direct sync
 * gives, at most one more interval old.
 */
// @ts-nocheck

import type { RateRemaining, RateUse } from "./rate-limit-sync.ts";

interface Pending {
  used: number;
  since: number;
}

export class RateRelayLedger {
  readonly #pending = new Map<string, Pending>();
  /** The key's global remainder after the last sync that reported it. */
  readonly #known = new Map<string, number>();
  #nextSyncAt = 0;

  /** Adds an isolate's uses to what the location has let through since the last sync. */
  add(uses: readonly RateUse[]): void {
    for (const u of uses) {
      const p = this.#pending.get(u.key);
      if (!p) this.#pending.set(u.key, { used: u.used, since: u.since });
      else {
        p.used += u.used;
        p.since = Math.min(p.since, u.since);
      }
    }
  }

  /** Whether a sync with the RateLimiter shard is due; when it is, the next one is due `intervalMs` later. */
  due(now: number, intervalMs: number): boolean {
    if (now < this.#nextSyncAt) return false;
    this.#nextSyncAt = now + intervalMs;
    return true;
  }

  /** The location's uses since the last sync, to send to the shard (taken out of the ledger). */
  take(): RateUse[] {
    const out = [...this.#pending].map(([key, p]) => ({ key, used: p.used, since: p.since }));
    this.#pending.clear();
    return out;
  }

  /** A sync failed: its uses count again in the next one. */
  giveBack(uses: readonly RateUse[]): void {
    this.add(uses);
  }

  /** The shard's answer to a sync: the keys' global remainders. */
  adopt(remaining: readonly RateRemaining[]): void {
    for (const r of remaining) this.#known.set(r.key, r.tokens);
  }

  /** What to tell an isolate about `keys`: the remainder less the location's uses since the sync (keys never synced are left out). */
  answer(keys: readonly string[]): RateRemaining[] {
    const out: RateRemaining[] = [];
    for (const key of keys) {
      const known = this.#known.get(key);
      if (known === undefined) continue;
      out.push({ key, tokens: known - (this.#pending.get(key)?.used ?? 0) });
    }
    return out;
  }

  /** Forgets keys with nothing pending (called after a sync, so the ledger does not grow with every key ever seen). */
  prune(keep: (key: string) => boolean): void {
    for (const key of this.#known.keys()) if (!this.#pending.has(key) && !keep(key)) this.#known.delete(key);
  }
}
