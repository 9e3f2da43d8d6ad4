/**
 * bench/prefix-cache/prefix-cache.ts's oracle arm: a longest-prefix router with perfect, instant
 * knowledge of every cache, under the same load line as the edge's prefix tiers. It
 * is a reference, not an upper bound: it takes the longest cached prefix under the
 * line and nothing else into account (not the prefix each choice leaves for later
 * turns, nor queue lengths beyond the line), and prefix_cache, which weighs load
 * against the cached share, has scored above it (1.007 of its hit ratio, 2026-12-02).
 * One global exact index of every replica's KV cache
 * (block keys, kept from the replicas' own KV events), consulted at the moment of
 * each request; the request goes to the replica holding its longest cached prefix,
 * under the same bounded-load rule as the edge's prefix tiers
 * (src/policy/prefix-score.ts: underLoadBound, then rendezvous order on the anchor
 * key for ties), with fullness from the bench's own exact in-flight counts. It
 * dispatches straight to the replica, signed as the edge signs
 * (src/protocol/signing.ts), so it skips the edge hop (~1–2 ms on this machine).
 */
import { Header, PROTOCOL_VERSION, importReplicaKey, signedDispatchHeaders } from "../../src/protocol/index.ts";
import { EnginePrefixIndex } from "../../src/agent/engine-prefix-index.ts";
import type { BlockKey } from "../../src/prefix/block-keys.ts";
import { blockHashText, parseKvEventMessage, type KvCacheEvent } from "../../src/prefix/kv-events.ts";
import { DEFAULT_LOAD_FACTOR, anchorKey, rendezvousOrder, underLoadBound } from "../../src/policy/prefix-score.ts";

/** Which blocks each replica holds now (stored and not yet removed). */
export class ExactPrefixIndex {
  readonly #held = new Map<string, Set<BlockKey>>();

  #of(replica: string): Set<BlockKey> {
    let s = this.#held.get(replica);
    if (!s) this.#held.set(replica, (s = new Set()));
    return s;
  }

  stored(replica: string, keys: Iterable<BlockKey>): void {
    const s = this.#of(replica);
    for (const k of keys) s.add(k);
  }

  removed(replica: string, keys: Iterable<BlockKey>): void {
    const s = this.#of(replica);
    for (const k of keys) s.delete(k);
  }

  cleared(replica: string): void {
    this.#of(replica).clear();
  }

  /** How many leading blocks of `keys` the replica holds (a chain: the first missing block ends the prefix). */
  heldPrefix(replica: string, keys: readonly BlockKey[]): number {
    const s = this.#held.get(replica);
    if (!s) return 0;
    let n = 0;
    while (n < keys.length && s.has(keys[n]!)) n++;
    return n;
  }

  blocks(replica: string): number {
    return this.#held.get(replica)?.size ?? 0;
  }
}

export interface OracleCandidate {
  id: string;
  /** The bench's exact in-flight requests to it. */
  load: number;
  /** Its max_ongoing. */
  capacity: number;
}

/**
 * The replica with the longest cached prefix among those under the bounded-load
 * line; equal prefixes go to the earlier in rendezvous order on the anchor (so a
 * new prefix's concurrent requests meet on one replica, as with the edge's tiers).
 */
export function oracleChoice<T extends OracleCandidate>(
  candidates: readonly T[],
  keys: readonly BlockKey[],
  held: (c: T) => number,
  epsilon = DEFAULT_LOAD_FACTOR,
): { choice: T; heldBlocks: number } {
  if (candidates.length === 0) throw new Error("no candidates");
  const anchor = anchorKey(keys);
  const eligible = underLoadBound(candidates, epsilon);
  const ranked = anchor === undefined ? [...eligible].sort((a, b) => a.load - b.load) : rendezvousOrder(eligible, anchor);
  let choice = ranked[0]!;
  let best = held(choice);
  for (const c of ranked.slice(1)) {
    const h = held(c);
    if (h > best) {
      choice = c;
      best = h;
    }
  }
  return { choice, heldBlocks: best };
}

/** Signs dispatches to one deployment's replicas as the edge does (src/proxy/serve/dispatch.ts). */
export class DispatchSigner {
  #key: Promise<CryptoKey>;
  #nonce = Math.floor(Math.random() * 2 ** 40);
  readonly #deployment: string;

  constructor(replicaKey: string, deployment: string) {
    this.#key = importReplicaKey(replicaKey);
    this.#deployment = deployment;
  }

  /** The headers of one signed POST of `body` to `target` (path and query) on `replica`, with request id `requestId`. */
  async headers(target: string, requestId: string, replica: string, body: string): Promise<Record<string, string>> {
    const signed = await signedDispatchHeaders(await this.#key, { method: "POST", deployment: this.#deployment, target, requestId, replica, body, nonce: this.#nonce++ });
    return { [Header.protocol]: String(PROTOCOL_VERSION), ...signed };
  }
}

/**
 * Follows one replica's KV events (a ZMQ SUB on its --kv-events-endpoint) into the
 * index. The replica agent's own EnginePrefixIndex (src/agent/engine-prefix-index.ts)
 * renames the blocks into Switchyard block keys from the token ids each BlockStored
 * carries, as it does for a real vLLM, so the index does not depend on the engine's
 * own hash and the bench names blocks exactly as the agent does. Gaps in the
 * sequence numbers (a batch the subscription missed) are counted.
 */
export class KvEventFollower {
  readonly replica: string;
  batches = 0;
  gaps = 0;
  /** Stored blocks whose engine hash was already their Switchyard key. */
  sameHash = 0;
  stored = 0;
  removed = 0;
  readonly #index: ExactPrefixIndex;
  /** Engine hash → Switchyard key, and which media still hold a block (nothing else: the summary is never asked for). */
  readonly #names = new EnginePrefixIndex({ maxBlocks: Number.POSITIVE_INFINITY });
  #lastSeq: bigint | undefined;
  #socket: { close(): void } | undefined;
  #loop: Promise<void> | undefined;

  constructor(replica: string, index: ExactPrefixIndex) {
    this.replica = replica;
    this.#index = index;
  }

  /** Stored blocks whose parent block this follower never saw stored (not indexable). */
  get orphans(): number {
    return this.#names.stats.unknownParent;
  }

  /** One event into the index (public so that a test can feed events without a socket). */
  follow(e: KvCacheEvent): void {
    const names = this.#names;
    if (e.type === "AllBlocksCleared") {
      names.applyEvent(e);
      this.#index.cleared(this.replica);
    } else if (e.type === "BlockRemoved") {
      const held = e.blockHashes.map((h) => names.keyOf(h));
      names.applyEvent(e);
      // Gone only when no medium holds it any more (a block offloaded to CPU is still held).
      const gone = held.filter((k, i): k is BlockKey => k !== undefined && names.keyOf(e.blockHashes[i]!) === undefined);
      this.removed += gone.length;
      this.#index.removed(this.replica, gone);
    } else {
      names.applyEvent(e);
      const keys: BlockKey[] = [];
      for (const h of e.blockHashes) {
        const key = names.keyOf(h);
        if (key === undefined) continue;
        if (blockHashText(h) === key) this.sameHash++;
        keys.push(key);
      }
      this.stored += keys.length;
      this.#index.stored(this.replica, keys);
    }
  }

  async connect(endpoint: string): Promise<void> {
    const { Subscriber } = await import("zeromq");
    const sock = new Subscriber();
    sock.connect(endpoint);
    sock.subscribe();
    this.#socket = sock;
    this.#loop = (async () => {
      try {
        for await (const frames of sock) {
          const m = parseKvEventMessage(frames as Uint8Array[]);
          if (this.#lastSeq !== undefined && m.seq !== this.#lastSeq + 1n) this.gaps++;
          this.#lastSeq = m.seq;
          this.batches++;
          for (const e of m.batch.events) this.follow(e);
        }
      } catch (err) {
        // Closing the socket ends the loop; anything else is worth a line.
        if (!/closed|terminated/i.test(String(err))) console.error(`KV events of ${this.replica}: ${String(err)}`);
      }
    })();
  }

  async close(): Promise<void> {
    this.#socket?.close();
    await this.#loop;
  }
}
