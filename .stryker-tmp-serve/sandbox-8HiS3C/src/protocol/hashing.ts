/**
 * Stable hashing that every isolate computes alike, with no shared state:
 * FNV-1a over UTF-16 code units, finished with murmur3's fmix32 so that keys
 * differing in one character still spread. Used for rendezvous (highest random
 * weight) choices: a session's first replica, a node's routing shard, an
 * isolate's sample of a large view; and under the block keys (src/prefix/) that
 * the edge and every replica must compute alike. Part of the protocol for that.
 */
// @ts-nocheck


/** FNV-1a, 32 bit, continuing from `seed` (the offset basis by default). */
export function fnv1a(text: string, seed = 0x811c9dc5): number {
  let h = seed;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** murmur3's fmix32 avalanche. */
export function mix(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  h ^= h >>> 16;
  return h >>> 0;
}

/** The rendezvous weight of `member` for `key` (higher wins). */
export function rendezvousWeight(key: string, member: string): number {
  return mix(fnv1a(member, fnv1a(key)));
}
