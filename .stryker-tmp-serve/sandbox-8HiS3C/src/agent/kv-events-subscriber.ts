/**
 * The replica agent's side of an engine's KV events (vLLM's ZmqEventPublisher;
 * SGLang publishes the same batches): a SUB socket on the engine's `endpoint`
 * receives multipart [topic, 8-byte big-endian seq, msgpack batch], decoded by
 * src/prefix/kv-events.ts. Batches must be applied in order, so:
 *
 * - on start, the agent asks the engine's replay socket (a ROUTER; we speak to
 *   it as a DEALER: ["", start seq] → ["", seq, batch]… then the end marker) for
 *   everything from seq 0, so an agent that starts after the engine learns what
 *   the engine's replay buffer still has (vLLM keeps 10,000 steps by default)
 *   without waiting for the engine's next step; live batches it already got
 *   that way are skipped;
 * - a gap (seq beyond the last + 1) asks the replay socket for the missed
 *   batches and applies them before the new one (without a replay socket, the
 *   first batch seen counts as a gap from 0, lost);
 * - what the replay no longer has is lost: counted and logged (the index then
 *   misses those stores, and keeps blocks whose removal it missed, which only
 *   costs a replica some prefill when an edge trusts them);
 * - a seq at or below the last one means the engine started over (a restarted
 *   engine counts from 0 again): `onRestart` (its cache is empty), then as from
 *   the start.
 *
 * Node only: zeromq's native addon, loaded when the first subscriber starts.
 */
// @ts-nocheck

import type { Dealer, Subscriber } from "zeromq";
import { KvEventDecodeError, decodeKvEventBatch, decodeSeq, replayRequest, type DecodedKvEventBatch } from "../prefix/kv-events.ts";

/** Where an engine publishes its KV events (vLLM's --kv-events-config endpoint, replay_endpoint, topic). */
export interface KvEventsSource {
  /** The PUB socket, e.g. tcp://127.0.0.1:5557 (vLLM's default port). */
  endpoint: string;
  /** The replay ROUTER socket, e.g. tcp://127.0.0.1:5558; without it, missed batches are lost. */
  replayEndpoint?: string;
  /** The topic (vLLM's default ""). */
  topic?: string;
}

export interface KvEventsSubscriberOptions extends KvEventsSource {
  /** Each batch, in sequence order. */
  onBatch(batch: DecodedKvEventBatch, seq: bigint): void;
  /** The engine's stream started over: whatever was applied before is gone. */
  onRestart?(): void;
  log?: (msg: string) => void;
  /** How long to wait for each replay reply, ms (default 2,000). */
  replayTimeoutMs?: number;
}

export interface KvEventsStats {
  /** Batches applied (live and replayed). */
  batches: number;
  /** Of those, from the replay socket. */
  replayed: number;
  /** Gaps seen (the first batch's catch-up from 0 excluded). */
  gaps: number;
  /** Batches missed that no replay recovered. */
  lost: number;
  decodeErrors: number;
  /** The engine's seq went back (a restarted engine). */
  restarts: number;
}

/** Valid ZMQ endpoints the agent connects to: tcp://host:port or ipc://path. */
export const ZMQ_ENDPOINT = /^(?:tcp:\/\/[^\s:/*]+:\d{1,5}|tcp:\/\/\[[0-9A-Fa-f:.]+\]:\d{1,5}|ipc:\/\/\S+)$/;

export class KvEventsSubscriber {
  readonly stats: KvEventsStats = { batches: 0, replayed: 0, gaps: 0, lost: 0, decodeErrors: 0, restarts: 0 };
  readonly #o: KvEventsSubscriberOptions;
  readonly #log: (msg: string) => void;
  #sub: Subscriber | undefined;
  #dealer: Dealer | undefined;
  #zmq: typeof import("zeromq") | undefined;
  /** The last seq applied; -1 before the first. */
  #last = -1n;
  /** Live batches up to this seq were applied from a replay already (they were queued meanwhile); -1: none. */
  #dupUpTo = -1n;
  #closed = false;
  #loop: Promise<void> | undefined;
  #saidNoReplay = false;

  constructor(options: KvEventsSubscriberOptions) {
    this.#o = options;
    this.#log = options.log ?? (() => undefined);
  }

  /** The last sequence number applied (-1 before the first). */
  get lastSeq(): bigint {
    return this.#last;
  }

  /** Connects (ZMQ reconnects on its own: an engine that is not up yet, or restarts, is found when it is). */
  async start(): Promise<void> {
    this.#zmq ??= await import("zeromq");
    if (this.#closed) return;
    const sub = new this.#zmq.Subscriber({ linger: 0 });
    sub.connect(this.#o.endpoint);
    sub.subscribe(this.#o.topic ?? "");
    this.#sub = sub;
    this.#log(`subscribed to the engine's KV events at ${this.#o.endpoint}${this.#o.topic ? ` (topic "${this.#o.topic}")` : ""}${this.#o.replayEndpoint ? `, replays from ${this.#o.replayEndpoint}` : ""}`);
    this.#loop = this.#receive(sub);
  }

  /**
   * Forgets the position in the stream: the next batch is caught up from 0 like
   * the first (the agent lost sight of the engine, which may have restarted).
   */
  resync(): void {
    this.#last = -1n;
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#sub?.close();
    this.#dealer?.close();
    await this.#loop;
  }

  async #receive(sub: Subscriber): Promise<void> {
    try {
      if (this.#o.replayEndpoint !== undefined) {
        await this.#catchUp(0n);
        this.#dupUpTo = this.#last;
      }
      for await (const frames of sub) {
        if (this.#closed) break;
        await this.#message(frames);
      }
    } catch (err) {
      if (!this.#closed) this.#log(`KV events subscription failed: ${err instanceof Error ? err.message : String(err)}`);
    }
  }

  async #message(frames: Buffer[]): Promise<void> {
    if (frames.length !== 3) {
      this.stats.decodeErrors++;
      this.#log(`KV events: a message of ${frames.length} frames (expected topic, seq, batch): ignored`);
      return;
    }
    let seq: bigint;
    try {
      seq = decodeSeq(frames[1]!);
    } catch (err) {
      this.stats.decodeErrors++;
      this.#log(`KV events: ${(err as Error).message}: ignored`);
      return;
    }
    if (this.#dupUpTo >= 0n) {
      if (seq <= this.#dupUpTo) return;
      this.#dupUpTo = -1n;
    }
    if (this.#last >= 0n && seq <= this.#last) {
      if (seq === this.#last) return;
      this.stats.restarts++;
      this.#log(`KV events: seq ${seq} after ${this.#last}: the engine started over; forgetting its old cache`);
      this.#o.onRestart?.();
      this.#last = -1n;
    }
    const expected = this.#last + 1n;
    if (seq > expected) {
      if (this.#last >= 0n) {
        this.stats.gaps++;
        this.#log(`KV events: missed ${seq - expected} batch(es) (${expected}..${seq - 1n})${this.#o.replayEndpoint ? ": asking for a replay" : ""}`);
      }
      await this.#catchUp(expected, seq);
    }
    this.#apply(seq, frames[2]!, false);
  }

  #apply(seq: bigint, payload: Uint8Array, replayed: boolean): void {
    this.#last = seq;
    let batch: DecodedKvEventBatch;
    try {
      batch = decodeKvEventBatch(payload);
    } catch (err) {
      this.stats.decodeErrors++;
      this.#log(`KV events: batch ${seq} not decoded (${err instanceof KvEventDecodeError ? err.message : String(err)}); its events are lost`);
      return;
    }
    this.stats.batches++;
    if (replayed) this.stats.replayed++;
    this.#o.onBatch(batch, seq);
  }

  /** Applies batches from..until-1 from the replay socket, as far as it still has them (without `until`: all it has). */
  async #catchUp(from: bigint, until?: bigint): Promise<void> {
    const dealer = await this.#replaySocket();
    if (!dealer) {
      if (until === undefined) return;
      this.stats.lost += Number(until - from);
      if (!this.#saidNoReplay) {
        this.#saidNoReplay = true;
        this.#log(`KV events: no replay endpoint: batches before seq ${until} are not known (blocks continuing them are left out until stored again)`);
      }
      return;
    }
    /** The next seq wanted. */
    let next = from;
    let got = 0;
    try {
      await dealer.send(["", replayRequest(from)]);
      for (;;) {
        const frames = await dealer.receive();
        // ["", seq, batch] to a DEALER; the end marker's batch is empty.
        const rest = frames.length === 3 && frames[0]!.length === 0 ? frames.slice(1) : frames;
        if (rest.length !== 2) throw new KvEventDecodeError(`a replay reply of ${frames.length} frames`);
        if (rest[1]!.length === 0) break;
        const seq = decodeSeq(rest[0]!);
        // Read to the end marker whatever comes, so the next replay starts clean.
        if (seq < next || (until !== undefined && seq >= until)) continue;
        if (seq > next) this.stats.lost += Number(seq - next);
        this.#apply(seq, rest[1]!, true);
        next = seq + 1n;
        got++;
      }
    } catch (err) {
      this.#log(`KV events: replay from ${from} failed (${err instanceof Error ? err.message : String(err)})`);
      // A late reply must not be read as the next replay's: a new socket.
      this.#dealer?.close();
      this.#dealer = undefined;
    }
    if (until !== undefined && next < until) {
      this.stats.lost += Number(until - next);
      this.#log(`KV events: ${until - next} batch(es) before seq ${until} are no longer in the engine's replay buffer; their events are lost`);
    }
    if (got > 0) this.#log(`KV events: replayed ${got} batch(es) from seq ${from}`);
  }

  async #replaySocket(): Promise<Dealer | undefined> {
    if (this.#o.replayEndpoint === undefined || this.#closed) return undefined;
    if (!this.#dealer) {
      this.#zmq ??= await import("zeromq");
      const dealer = new this.#zmq.Dealer({ linger: 0, receiveTimeout: this.#o.replayTimeoutMs ?? 2_000 });
      dealer.connect(this.#o.replayEndpoint);
      this.#dealer = dealer;
    }
    return this.#dealer;
  }
}
