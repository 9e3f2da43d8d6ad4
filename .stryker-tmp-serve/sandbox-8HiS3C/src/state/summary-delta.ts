/**
 * Prefix-cache summaries on their way from the routing shards to the isolates,
 * without sending an unchanged one twice. Each summary is named by a digest of
 * its content; every hop (relay, isolate) keeps the summaries it holds by
 * replica, and tells the hop before it which digests it holds. The answer then
 * carries every replica's digest, and the summary itself only for digests the
 * asker lacks, within a byte budget per answer, visiting replicas from a
 * rotating start so a tight budget still reaches every replica in turn. A hop
 * that is sent a new digest without its summary (over budget) keeps the one it
 * has until a later answer brings it. Pure.
 *
 * Why digests and not versions: a digest is the same in every shard, relay and
 * isolate with nothing to coordinate, survives restarts, and a replica re-sending
 * the same summary (every SUMMARY_RESEND_MS) changes nothing downstream.
 */
// @ts-nocheck

import type { CacheSummaryWire } from "../prefix/cache-summary.ts";
import type { ReplicaView, RoutingSnapshot } from "../protocol/index.ts";

/** A digest: 16 lowercase hex digits (64 bits). */
export const DIGEST_CHARS = 16;
/** Most digests an ask is read for (a view holds at most VIEW_MAX_REPLICAS, a relay RELAY_MAX_REPLICAS). */
export const MAX_ASK_DIGESTS = 16_384;

/**
 * Summary bytes one answer to an isolate may carry (relay → isolate every 250 ms,
 * or all shards together → isolate every 1 s without relays): ~35 of the largest
 * summaries. An isolate that joins a fleet of 1,000 replicas with full summaries
 * has them all after ~29 refreshes (~7 s behind a relay).
 */
export const VIEW_SUMMARY_BYTES = 512 * 1024;
/** Summary bytes the shards may send a relay per refresh, all together (each its share). */
export const RELAY_SUMMARY_BYTES = 4 * 1024 * 1024;
/**
 * Most summary bytes a relay holds: ~2,200 of the largest summaries. Beyond it a
 * relay keeps the summaries it has and declines new replicas' (those route on the
 * hash tier in its location); docs/scaling.md §6.
 */
export const RELAY_MAX_SUMMARY_BYTES = 32 * 1024 * 1024;

const hex8 = (n: number) => (n >>> 0).toString(16).padStart(8, "0");

/** The content digest of a summary: two 32-bit FNV-1a lanes (different offsets) over its fields, 64 bits. */
export function summaryDigest(w: CacheSummaryWire): string {
  const text = `${w.v}:${w.k}:${w.n}:${w.block}:${w.bits}`;
  let a = 0x811c9dc5;
  let b = 0x6a09e667;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    a = Math.imul(a ^ c, 0x01000193);
    b = Math.imul(b ^ c, 0x01000193) ^ (b >>> 15);
  }
  return hex8(a) + hex8(b);
}

/** About what a summary adds to an answer, bytes (its base64 plus the small fields). */
export function summaryBytes(w: CacheSummaryWire): number {
  return w.bits.length + 48;
}

/** The digests an asker holds, as it sends them: concatenated (16 characters each). */
export function encodeDigests(digests: Iterable<string>): string {
  let out = "";
  for (const d of digests) if (d.length === DIGEST_CHARS) out += d;
  return out;
}

/** The digests of an ask (at most MAX_ASK_DIGESTS; a malformed tail is ignored). */
export function decodeDigests(have: string): Set<string> {
  const out = new Set<string>();
  const n = Math.min(Math.floor(have.length / DIGEST_CHARS), MAX_ASK_DIGESTS);
  for (let i = 0; i < n; i++) out.add(have.slice(i * DIGEST_CHARS, (i + 1) * DIGEST_CHARS));
  return out;
}

/**
 * The answer to an asker holding `have`: every replica keeps its digest; its
 * summary stays only when the asker lacks that digest, the answer does not carry
 * it for another replica already, and the budget has room. Replicas are visited
 * from index `rotation` (mod their count), so that successive answers under a
 * tight budget reach different replicas. Replicas are copied, never changed.
 */
export function summaryDelta(s: RoutingSnapshot, have: ReadonlySet<string>, maxBytes: number, rotation = 0): RoutingSnapshot {
  const n = s.replicas.length;
  if (!s.replicas.some((r) => r.cache !== undefined)) return s;
  const replicas: ReplicaView[] = new Array(n);
  const sent = new Set<string>();
  let budget = maxBytes;
  const start = n === 0 ? 0 : ((rotation % n) + n) % n;
  for (let j = 0; j < n; j++) {
    const i = (start + j) % n;
    const r = s.replicas[i]!;
    const d = r.cacheDigest;
    if (r.cache === undefined || d === undefined) {
      replicas[i] = r;
      continue;
    }
    const size = summaryBytes(r.cache);
    if (!have.has(d) && !sent.has(d) && size <= budget) {
      budget -= size;
      sent.add(d);
      replicas[i] = r;
      continue;
    }
    const { cache: _left, ...rest } = r;
    replicas[i] = rest;
  }
  return { ...s, replicas };
}

/** Summary bytes an answer carries (what summaryDelta let through). */
export function answerSummaryBytes(s: RoutingSnapshot): number {
  let n = 0;
  for (const r of s.replicas) if (r.cache) n += summaryBytes(r.cache);
  return n;
}

/** A summary a hop holds for one replica. */
export interface HeldSummary<T> {
  digest: string;
  value: T;
  /** summaryBytes of its wire form. */
  bytes: number;
}

/**
 * The summaries one hop holds, by replica: a relay (T = the wire form) or an
 * isolate's routing view (T = the parsed CacheSummary). Folding an answer in
 * parses a summary only when its digest is new to this hop; a replica whose new
 * summary did not come (over budget) keeps its old one; a replica that reports
 * none, or is not in the answer, is forgotten.
 */
export class SummaryPool<T> {
  readonly #parse: (w: CacheSummaryWire) => T | undefined;
  readonly #maxBytes: number;
  #held = new Map<string, HeldSummary<T>>();
  /** Digests declined for room: told as held, so the hop before does not send them again until they change. */
  #declined = new Set<string>();
  #bytes = 0;
  /** Summaries parsed since the pool was made (each one a digest new to it). */
  parses = 0;

  constructor(parse: (w: CacheSummaryWire) => T | undefined, maxBytes = Number.POSITIVE_INFINITY) {
    this.#parse = parse;
    this.#maxBytes = maxBytes;
  }

  /** Folds in the replicas of an answer (all of them: a replica not among them is forgotten). */
  apply(replicas: readonly ReplicaView[]): void {
    const byDigest = new Map<string, HeldSummary<T>>();
    for (const h of this.#held.values()) byDigest.set(h.digest, h);
    // An answer carries a summary once, for the first replica with that digest; the others share it.
    const incoming = new Set<string>();
    for (const r of replicas) if (r.cache && r.cacheDigest !== undefined) incoming.add(r.cacheDigest);
    const next = new Map<string, HeldSummary<T>>();
    const wanted: { id: string; digest: string; wire: CacheSummaryWire | undefined; shared: HeldSummary<T> | undefined; old: HeldSummary<T> | undefined }[] = [];
    let bytes = 0;
    for (const r of replicas) {
      const digest = r.cacheDigest;
      if (digest === undefined) continue;
      const old = this.#held.get(r.id);
      if (old?.digest === digest) {
        next.set(r.id, old);
        bytes += old.bytes;
        continue;
      }
      const shared = byDigest.get(digest);
      if (shared || r.cache || incoming.has(digest)) {
        wanted.push({ id: r.id, digest, wire: r.cache, shared, old });
        continue;
      }
      // A new digest without its summary (over the answer's budget): keep the old one meanwhile.
      if (old) {
        next.set(r.id, old);
        bytes += old.bytes;
      }
    }
    const declined = new Set<string>();
    // Those carrying a summary first: the replicas sharing its digest find it parsed.
    wanted.sort((x, y) => (x.wire ? 0 : 1) - (y.wire ? 0 : 1));
    for (const w of wanted) {
      let got = w.shared ?? byDigest.get(w.digest);
      const size = got?.bytes ?? (w.wire ? summaryBytes(w.wire) : 0);
      if (bytes + size > this.#maxBytes) {
        declined.add(w.digest);
        if (w.old && bytes + w.old.bytes <= this.#maxBytes) {
          next.set(w.id, w.old);
          bytes += w.old.bytes;
        }
        continue;
      }
      if (!got && w.wire) {
        const value = this.#parse(w.wire);
        this.parses++;
        if (value !== undefined) {
          got = { digest: w.digest, value, bytes: size };
          byDigest.set(w.digest, got);
        }
      }
      if (got) {
        next.set(w.id, got);
        bytes += got.bytes;
      } else if (w.old) {
        next.set(w.id, w.old);
        bytes += w.old.bytes;
      }
    }
    this.#held = next;
    this.#declined = declined;
    this.#bytes = bytes;
  }

  /** What this hop holds for a replica. */
  get(replicaId: string): HeldSummary<T> | undefined {
    return this.#held.get(replicaId);
  }

  /** The digests to tell the hop before (held, and declined for room), encoded. */
  have(): string {
    const all = new Set<string>(this.#declined);
    for (const h of this.#held.values()) all.add(h.digest);
    return encodeDigests(all);
  }

  /** Replicas with a summary held. */
  get size(): number {
    return this.#held.size;
  }

  /** Summary bytes held (wire sizes; a summary shared by replicas counts once per replica). */
  get bytes(): number {
    return this.#bytes;
  }
}

/**
 * A relay's merged snapshot with the summaries it holds (`pool`, already folded
 * with this snapshot): each replica carries the held summary and its digest, which
 * may lag the replica's newest digest while that one has not come (over budget),
 * or nothing when it holds none. What it hands isolates is then consistent: a
 * digest always comes with the summary it names.
 */
export function withHeldSummaries(s: RoutingSnapshot, pool: SummaryPool<CacheSummaryWire>): RoutingSnapshot {
  return {
    ...s,
    replicas: s.replicas.map((r) => {
      const held = pool.get(r.id);
      if (held) return held.digest === r.cacheDigest && r.cache ? r : { ...r, cacheDigest: held.digest, cache: held.value };
      if (r.cacheDigest === undefined && r.cache === undefined) return r;
      const { cacheDigest: _d, cache: _c, ...rest } = r;
      return rest;
    }),
  };
}
