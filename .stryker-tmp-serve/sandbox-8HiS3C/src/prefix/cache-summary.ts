/**
 * A replica's prefix-cache summary: a Bloom filter over the block keys it holds
 * (block-keys.ts), small enough to ride in every signed load report and in the routing
 * snapshot. An edge isolate asks it how many of a prompt's leading blocks the replica
 * holds, with no call to anyone.
 *
 * Why a Bloom filter: 10,000 cached blocks as 64-bit keys are 80 KB; a filter of the
 * same blocks at ~9 bits each is 11 KiB and answers "held?" with ~1 % false positives.
 * A false positive only makes the edge think one more block is cached, and a prefix
 * match stops at the first miss, so it costs a little prefill, never a wrong answer.
 * When a replica holds more blocks than the filter can take at SUMMARY_MIN_BITS_PER_KEY,
 * the summary keeps the most recently used ones (the caller passes keys MRU first).
 *
 * Bit positions come straight from the key's two 32-bit lanes (double hashing,
 * h1 + i·h2 mod m): keys are already uniform hashes, so nothing is hashed again.
 *
 * Pure: no I/O. base64 through btoa/atob, which Workers and Node both have.
 */
// @ts-nocheck

import { MAX_CACHE_SUMMARY_FILTER_BYTES, type CacheSummaryWire } from "../protocol/index.ts";
import { keyLanes, type BlockKey } from "./block-keys.ts";

export type { CacheSummaryWire };
/** Largest filter, bytes before base64: the protocol's limit. */
export const SUMMARY_MAX_FILTER_BYTES = MAX_CACHE_SUMMARY_FILTER_BYTES;
/** Fewer bits per key than this and false positives pass ~2 %: the summary drops the least recently used keys instead. */
export const SUMMARY_MIN_BITS_PER_KEY = 8;
/** Bits per key when the filter has room (≈0.8 % false positives at k = 7). */
export const SUMMARY_BITS_PER_KEY = 10;
/** Smallest filter, bytes (an almost empty cache still gets a usable filter). */
export const SUMMARY_MIN_FILTER_BYTES = 64;
/** Most hash functions. */
export const SUMMARY_MAX_HASHES = 16;


function toBase64(bytes: Uint8Array): string {
  let s = "";
  for (let i = 0; i < bytes.length; i += 0x2000) s += String.fromCharCode(...bytes.subarray(i, i + 0x2000));
  return btoa(s);
}

function fromBase64(text: string): Uint8Array | undefined {
  let raw: string;
  try {
    raw = atob(text);
  } catch {
    return undefined;
  }
  const out = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) out[i] = raw.charCodeAt(i);
  return out;
}

/** The k that minimises false positives for `bitsPerKey` (ln 2 · m/n), within 1..SUMMARY_MAX_HASHES. */
function hashesFor(bitsPerKey: number): number {
  return Math.max(1, Math.min(SUMMARY_MAX_HASHES, Math.round(bitsPerKey * Math.LN2)));
}

/** The filter's bit for key lanes (a, b) and hash i. */
const position = (a: number, b: number, i: number, m: number) => ((a + Math.imul(i, b | 1)) >>> 0) % m;

/**
 * Builds the summary of `keys`, most recently used first (a Map's or an LRU's reverse
 * order). Keys that are not block keys are skipped. `blockSize` is recorded so an edge
 * with another block size does not match against it.
 */
export function buildCacheSummary(keys: Iterable<BlockKey>, blockSize: number, maxBytes = SUMMARY_MAX_FILTER_BYTES): CacheSummaryWire {
  const lanes: [number, number][] = [];
  const cap = Math.floor((maxBytes * 8) / SUMMARY_MIN_BITS_PER_KEY);
  for (const key of keys) {
    if (lanes.length >= cap) break;
    const l = keyLanes(key);
    if (l) lanes.push(l);
  }
  const wanted = Math.ceil((lanes.length * SUMMARY_BITS_PER_KEY) / 8);
  // A multiple of 8 bytes, so the filter's size carries no odd tail.
  const bytes = Math.max(SUMMARY_MIN_FILTER_BYTES, Math.min(maxBytes, Math.ceil(wanted / 8) * 8));
  const m = bytes * 8;
  const k = hashesFor(lanes.length === 0 ? SUMMARY_BITS_PER_KEY : m / lanes.length);
  const filter = new Uint8Array(bytes);
  for (const [a, b] of lanes) {
    for (let i = 0; i < k; i++) {
      const p = position(a, b, i, m);
      filter[p >>> 3]! |= 1 << (p & 7);
    }
  }
  return { v: 1, k, n: lanes.length, block: blockSize, bits: toBase64(filter) };
}

/** A parsed summary: what an edge isolate holds per replica. */
export class CacheSummary {
  readonly keys: number;
  readonly blockSize: number;
  readonly #filter: Uint8Array;
  readonly #m: number;
  readonly #k: number;

  private constructor(filter: Uint8Array, k: number, keys: number, blockSize: number) {
    this.#filter = filter;
    this.#m = filter.length * 8;
    this.#k = k;
    this.keys = keys;
    this.blockSize = blockSize;
  }

  /** The summary a wire form names, or undefined when it is malformed (the report's schema bounds its size). */
  static parse(wire: CacheSummaryWire): CacheSummary | undefined {
    if (wire.v !== 1 || !Number.isInteger(wire.k) || wire.k < 1 || wire.k > SUMMARY_MAX_HASHES) return undefined;
    const filter = fromBase64(wire.bits);
    if (!filter || filter.length === 0 || filter.length % 8 !== 0 || filter.length > SUMMARY_MAX_FILTER_BYTES) return undefined;
    return new CacheSummary(filter, wire.k, wire.n, wire.block);
  }

  /** Whether the filter (probably) holds `key`. */
  has(key: BlockKey): boolean {
    const l = keyLanes(key);
    if (!l) return false;
    const [a, b] = l;
    for (let i = 0; i < this.#k; i++) {
      const p = position(a, b, i, this.#m);
      if ((this.#filter[p >>> 3]! & (1 << (p & 7))) === 0) return false;
    }
    return true;
  }

  /**
   * How many of `keys` (a prompt's block keys in order) the replica holds as a prefix:
   * the count before the first miss. A chained key names its whole prefix, so a held
   * block k means the replica computed blocks 0..k with these tokens.
   */
  matchedBlocks(keys: readonly BlockKey[], blockSize: number): number {
    if (blockSize !== this.blockSize || this.keys === 0) return 0;
    let i = 0;
    while (i < keys.length && this.has(keys[i]!)) i++;
    return i;
  }
}
