/**
 * vLLM's KV events from the reference replica, over ZMQ the way vLLM's ZmqEventPublisher
 * sends them (vllm/distributed/kv_events.py; the wire format is src/prefix/kv-events.ts),
 * so whatever subscribes to a vLLM engine (the replica agent, llm-d, Dynamo) can
 * subscribe to this replica too:
 *
 * - PUB socket, bound at `endpoint`: one multipart message [topic, seq (8 bytes,
 *   big-endian, from 0), msgpack batch] per engine step. Here a step is one turn of the
 *   event loop: the pool's events of that turn travel as one batch.
 * - ROUTER socket, bound at `replayEndpoint` (optional): a request [start seq, 8 bytes]
 *   (from a REQ, or a DEALER sending ["", seq]) is answered with ["", seq, batch] for
 *   each of the last `bufferSteps` batches with seq >= start, then ["", 0xff×8, ""].
 *
 * Block hashes are the replica's block keys as unsigned 64-bit ints (as with vLLM's
 * VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES): keyToBigInt(key). Unlike vLLM, which connects
 * when the endpoint names no wildcard, both sockets always bind: the replica is the
 * stable side and its subscribers come and go. Node only (zeromq's native addon).
 */
// @ts-nocheck

import { Publisher, Router } from "zeromq";
import { keyToBigInt } from "../../prefix/block-keys.ts";
import { REPLAY_END_SEQ, encodeKvEventBatch, encodeSeq, type KvCacheEvent, type KvEventLayout } from "../../prefix/kv-events.ts";
import type { PoolEvent } from "./kv-cache.ts";

/** vLLM's KVEventsConfig defaults. */
export const DEFAULT_KV_EVENTS_TOPIC = "";
export const DEFAULT_KV_EVENTS_BUFFER_STEPS = 10_000;
const DEFAULT_HWM = 100_000;

export interface KvEventPublisherOptions {
  /** PUB bind address, e.g. tcp://127.0.0.1:5557 (port 0: any free port; see `endpoint`). */
  endpoint: string;
  /** ROUTER bind address for replays; none when absent. */
  replayEndpoint?: string;
  /** The topic frame (vLLM's default ""). */
  topic?: string;
  /** Batches kept for replay (vLLM's buffer_steps). */
  bufferSteps?: number;
  /** Tokens per block, as the pool's. */
  blockSize: number;
  /** The batch's data_parallel_rank (vLLM stamps its rank; one engine here: 0). */
  dataParallelRank?: number;
  /** Event layout (default "map", vLLM's since PR #42892; "array" for older subscribers). */
  layout?: KvEventLayout;
  log?: (msg: string) => void;
}

/** A pool event as vLLM names it. */
export function poolEventToKvEvent(event: PoolEvent, blockSize: number): KvCacheEvent {
  switch (event.type) {
    case "stored":
      return {
        type: "BlockStored",
        blockHashes: event.keys.map(keyToBigInt),
        parentBlockHash: event.parent === undefined ? null : keyToBigInt(event.parent),
        tokenIds: event.tokenIds,
        blockSize,
        loraId: null,
        medium: "GPU",
        loraName: event.extra === "" ? null : event.extra,
        // vLLM's per-block extra keys: the LoRA name when there is one.
        extraKeys: event.keys.map(() => (event.extra === "" ? null : [event.extra])),
        groupIdx: 0,
        kvCacheSpecKind: "full_attention",
        kvCacheSpecSlidingWindow: null,
      };
    case "removed":
      return { type: "BlockRemoved", blockHashes: event.keys.map(keyToBigInt), medium: "GPU", groupIdx: 0 };
    case "cleared":
      return { type: "AllBlocksCleared" };
  }
}

export class KvEventPublisher {
  /** The PUB socket's address as bound (the real port when 0 was asked). */
  readonly endpoint: string;
  /** The replay socket's address as bound, if any. */
  readonly replayEndpoint: string | undefined;
  readonly #pub: Publisher;
  readonly #replay: Router | undefined;
  readonly #topic: Uint8Array;
  readonly #bufferSteps: number;
  readonly #blockSize: number;
  readonly #rank: number;
  readonly #layout: KvEventLayout;
  readonly #log: (msg: string) => void;
  /** Last batches sent, oldest first: [seq, payload]. */
  readonly #buffer: [bigint, Uint8Array][] = [];
  #pending: KvCacheEvent[] = [];
  #flushScheduled = false;
  #nextSeq = 0n;
  /** zeromq.js allows one send at a time per socket: sends are chained. */
  #pubChain: Promise<void> = Promise.resolve();
  #closed = false;

  private constructor(pub: Publisher, replay: Router | undefined, options: KvEventPublisherOptions) {
    this.#pub = pub;
    this.#replay = replay;
    this.endpoint = pub.lastEndpoint ?? options.endpoint;
    this.replayEndpoint = replay ? (replay.lastEndpoint ?? options.replayEndpoint) : undefined;
    this.#topic = new TextEncoder().encode(options.topic ?? DEFAULT_KV_EVENTS_TOPIC);
    this.#bufferSteps = options.bufferSteps ?? DEFAULT_KV_EVENTS_BUFFER_STEPS;
    this.#blockSize = options.blockSize;
    this.#rank = options.dataParallelRank ?? 0;
    this.#layout = options.layout ?? "map";
    this.#log = options.log ?? (() => undefined);
    if (replay) void this.#serveReplays(replay);
  }

  /** Binds the sockets. Rejects when an address cannot be bound. */
  static async start(options: KvEventPublisherOptions): Promise<KvEventPublisher> {
    const pub = new Publisher({ sendHighWaterMark: DEFAULT_HWM, linger: 0 });
    let replay: Router | undefined;
    try {
      await pub.bind(options.endpoint);
      if (options.replayEndpoint !== undefined) {
        replay = new Router({ linger: 0 });
        await replay.bind(options.replayEndpoint);
      }
    } catch (err) {
      pub.close();
      replay?.close();
      throw err;
    }
    return new KvEventPublisher(pub, replay, options);
  }

  /** The sequence number the next batch gets (batches sent so far). */
  get nextSeq(): bigint {
    return this.#nextSeq;
  }

  /** Queues a pool event into this turn's batch. */
  push(event: PoolEvent): void {
    if (this.#closed) return;
    this.#pending.push(poolEventToKvEvent(event, this.#blockSize));
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    setImmediate(() => this.#flush());
  }

  /** Sends what is queued, then closes both sockets. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#flush();
    this.#closed = true;
    await this.#pubChain;
    this.#pub.close();
    this.#replay?.close();
  }

  #flush(): void {
    this.#flushScheduled = false;
    if (this.#pending.length === 0 || this.#closed) return;
    const payload = encodeKvEventBatch({ ts: Date.now() / 1000, events: this.#pending, dataParallelRank: this.#rank }, { layout: this.#layout });
    this.#pending = [];
    const seq = this.#nextSeq++;
    this.#buffer.push([seq, payload]);
    if (this.#buffer.length > this.#bufferSteps) this.#buffer.shift();
    const frames = [this.#topic, encodeSeq(seq), payload];
    this.#pubChain = this.#pubChain
      .then(() => this.#pub.send(frames))
      .catch((err: unknown) => this.#log(`kv events: batch ${seq} not sent: ${err instanceof Error ? err.message : String(err)}`));
  }

  async #serveReplays(router: Router): Promise<void> {
    try {
      for await (const frames of router) {
        // [identity, "", start seq]: what a REQ sends, or a DEALER that adds the empty frame.
        if (frames.length !== 3 || frames[1]!.length !== 0 || frames[2]!.length !== 8) {
          this.#log(`kv events: invalid replay request (${frames.length} frames)`);
          continue;
        }
        const [identity, , start] = frames as [Buffer, Buffer, Buffer];
        const from = start.readBigUInt64BE(0);
        // A snapshot: batches published meanwhile go out on PUB.
        for (const [seq, payload] of this.#buffer.slice()) {
          if (seq >= from) await router.send([identity, "", encodeSeq(seq), payload]);
        }
        await router.send([identity, "", REPLAY_END_SEQ, ""]);
      }
    } catch (err) {
      if (!this.#closed) this.#log(`kv events: replay socket failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }
}
