/**
 * vLLM's KV cache events on the wire (vllm/distributed/kv_events.py): the batches an
 * engine publishes when it caches blocks (BlockStored), evicts them (BlockRemoved) or
 * drops its whole prefix cache (AllBlocksCleared), and the framing of its ZMQ
 * publisher. The reference replica publishes them (src/replica/llm/kv-event-publisher.ts);
 * the replica agent decodes a real vLLM's with the same functions. SGLang publishes the
 * same batch type.
 *
 * Transport (ZmqEventPublisher): a PUB socket sends multipart [topic, seq, payload],
 * seq an unsigned 8-byte big-endian counter from 0, payload one msgpack batch. A ROUTER
 * replay socket takes [start seq as 8 bytes] (a DEALER sends ["", seq], a REQ adds the
 * empty frame itself) and answers, per buffered batch with seq >= start, ["", seq,
 * payload], then the end marker ["", 0xff×8 (-1 signed), ""].
 *
 * Payload layouts (msgspec Structs; test/fixtures/kv-events/gen.py has the history):
 * - the batch is always positional: [ts, events] in v0.9, [ts, events, data_parallel_rank]
 *   since; a map-shaped batch is accepted too, in case an engine drops array_like there.
 * - events were positional, [tag, fields…] in declaration order, until vLLM PR #42892
 *   (2026-05); since then each is a map tagged by "type". Both decode. Encoding writes
 *   the map form by default (what current engines send), `layout: "array"` the last
 *   positional one (every field, which older positional decoders read as far as they know).
 * Block hashes are unsigned 64-bit ints (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES, the
 * default; old engines' Python hash() gave signed ones, normalised here to unsigned)
 * or, with that setting off, the digest's bytes.
 *
 * Pure: no I/O; @msgpack/msgpack runs in Node and Workers.
 */
// @ts-nocheck

import { decode as msgpackDecode, encode as msgpackEncode } from "@msgpack/msgpack";
import { hexOf } from "../protocol/hex.ts";

/** A block hash: a 64-bit unsigned integer, or a digest's bytes. */
export type BlockHash = bigint | Uint8Array;

export interface BlockStored {
  type: "BlockStored";
  /** The new blocks, in chain order. */
  blockHashes: BlockHash[];
  /** The block before the first of them, null when they start a prompt. */
  parentBlockHash: BlockHash | null;
  /** The tokens of all these blocks, concatenated (blockHashes.length × blockSize). */
  tokenIds: number[];
  blockSize: number;
  /** Deprecated by vLLM in favour of loraName. */
  loraId: number | null;
  /** "GPU", or "CPU" and others for offloaded tiers; null in v0.9. */
  medium: string | null;
  loraName: string | null;
  /** Per block: the extra keys its hash covers (LoRA name, cache salt, multimodal ids), or null. */
  extraKeys: (unknown[] | null)[] | null;
  groupIdx: number | null;
  kvCacheSpecKind: string | null;
  kvCacheSpecSlidingWindow: number | null;
}

export interface BlockRemoved {
  type: "BlockRemoved";
  blockHashes: BlockHash[];
  medium: string | null;
  groupIdx: number | null;
}

export interface AllBlocksCleared {
  type: "AllBlocksCleared";
}

export type KvCacheEvent = BlockStored | BlockRemoved | AllBlocksCleared;

export interface KvEventBatch {
  /** Seconds since the epoch (float). */
  ts: number;
  events: KvCacheEvent[];
  dataParallelRank: number | null;
}

export interface DecodedKvEventBatch extends KvEventBatch {
  /** Events of a type this decoder does not know (a newer engine's), left out of `events`. */
  unknownEvents: number;
}

export type KvEventLayout = "map" | "array";

export class KvEventDecodeError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "KvEventDecodeError";
  }
}

// ---- encoding ---------------------------------------------------------------------------

const U32 = 0x1_0000_0000n;

/** A hash as msgspec writes a Python int or bytes: the smallest int form (uint64 from 2^32 up), or bin. */
function hashWire(h: BlockHash): number | bigint | Uint8Array {
  if (h instanceof Uint8Array) return h;
  const u = BigInt.asUintN(64, h);
  // @msgpack/msgpack with useBigInt64 writes every bigint as 9 bytes: small ones go as numbers.
  return u < U32 ? Number(u) : u;
}

const hashesWire = (hs: readonly BlockHash[]) => hs.map(hashWire);
const orNull = <T>(v: T | null | undefined): T | null => (v === undefined ? null : v);

/** One event in the chosen layout, fields in vLLM's declaration order. */
function eventWire(e: KvCacheEvent, layout: KvEventLayout): unknown {
  switch (e.type) {
    case "BlockStored": {
      const fields: [string, unknown, boolean][] = [
        // [name, value, has a default (so the map form omits it when null)]
        ["block_hashes", hashesWire(e.blockHashes), false],
        ["parent_block_hash", e.parentBlockHash === null ? null : hashWire(e.parentBlockHash), false],
        ["token_ids", e.tokenIds, false],
        ["block_size", e.blockSize, false],
        ["lora_id", orNull(e.loraId), false],
        ["medium", orNull(e.medium), false],
        ["lora_name", orNull(e.loraName), false],
        ["extra_keys", orNull(e.extraKeys), true],
        ["group_idx", orNull(e.groupIdx), true],
        ["kv_cache_spec_kind", orNull(e.kvCacheSpecKind), true],
        ["kv_cache_spec_sliding_window", orNull(e.kvCacheSpecSlidingWindow), true],
      ];
      return tagged("BlockStored", fields, layout);
    }
    case "BlockRemoved":
      return tagged(
        "BlockRemoved",
        [
          ["block_hashes", hashesWire(e.blockHashes), false],
          ["medium", orNull(e.medium), false],
          ["group_idx", orNull(e.groupIdx), true],
        ],
        layout,
      );
    case "AllBlocksCleared":
      return tagged("AllBlocksCleared", [], layout);
  }
}

function tagged(tag: string, fields: [string, unknown, boolean][], layout: KvEventLayout): unknown {
  if (layout === "array") return [tag, ...fields.map(([, v]) => v)];
  const out: Record<string, unknown> = { type: tag };
  for (const [name, value, hasDefault] of fields) if (!(hasDefault && value === null)) out[name] = value;
  return out;
}

/**
 * The msgpack payload of one batch, byte for byte as vLLM's msgspec encoder writes it
 * (map-shaped events unless `layout` is "array").
 */
export function encodeKvEventBatch(batch: KvEventBatch, options: { layout?: KvEventLayout } = {}): Uint8Array {
  const layout = options.layout ?? "map";
  // ts is a Python float, always float64; @msgpack/msgpack would write an integral
  // number as an int, so the batch's array head and ts are written here.
  const head = new Uint8Array(10);
  head[0] = 0x93; // fixarray of 3
  head[1] = 0xcb; // float 64
  new DataView(head.buffer).setFloat64(2, batch.ts);
  const events = msgpackEncode(
    batch.events.map((e) => eventWire(e, layout)),
    { useBigInt64: true },
  );
  const rank = msgpackEncode(batch.dataParallelRank);
  const out = new Uint8Array(head.length + events.length + rank.length);
  out.set(head, 0);
  out.set(events, head.length);
  out.set(rank, head.length + events.length);
  return out;
}

// ---- decoding ---------------------------------------------------------------------------

const fail = (where: string, what: string): never => {
  throw new KvEventDecodeError(`${where}: ${what}`);
};

function hashOf(v: unknown, where: string): BlockHash {
  if (typeof v === "bigint") return BigInt.asUintN(64, v);
  if (typeof v === "number" && Number.isSafeInteger(v)) return BigInt.asUintN(64, BigInt(v));
  if (v instanceof Uint8Array) return new Uint8Array(v);
  return fail(where, "a block hash must be an integer or bytes");
}

function hashesOf(v: unknown, where: string): BlockHash[] {
  if (!Array.isArray(v)) return fail(where, "block_hashes must be an array");
  return v.map((h, i) => hashOf(h, `${where}.block_hashes[${i}]`));
}

function intOf(v: unknown, where: string, min = 0): number {
  const n = typeof v === "bigint" && v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
  if (typeof n !== "number" || !Number.isSafeInteger(n) || n < min) return fail(where, `expected an integer >= ${min}`);
  return n;
}

const intOrNull = (v: unknown, where: string, min = 0): number | null => (v === null || v === undefined ? null : intOf(v, where, min));

function strOrNull(v: unknown, where: string): string | null {
  if (v === null || v === undefined) return null;
  if (typeof v !== "string") return fail(where, "expected a string or nil");
  return v;
}

function tokensOf(v: unknown, where: string): number[] {
  if (!Array.isArray(v)) return fail(where, "token_ids must be an array");
  return v.map((t, i) => intOf(t, `${where}.token_ids[${i}]`));
}

function extraKeysOf(v: unknown, where: string): (unknown[] | null)[] | null {
  if (v === null || v === undefined) return null;
  if (!Array.isArray(v)) return fail(where, "extra_keys must be an array or nil");
  return v.map((k, i) => (k === null ? null : Array.isArray(k) ? k : fail(`${where}.extra_keys[${i}]`, "expected an array or nil")));
}

/** Positional fields after the tag, by name, in vLLM's declaration order (a newer engine appends). */
const ARRAY_FIELDS: Record<string, readonly string[]> = {
  BlockStored: ["block_hashes", "parent_block_hash", "token_ids", "block_size", "lora_id", "medium", "lora_name", "extra_keys", "group_idx", "kv_cache_spec_kind", "kv_cache_spec_sliding_window"],
  BlockRemoved: ["block_hashes", "medium", "group_idx"],
  AllBlocksCleared: [],
};
/** Fields every layout has had (v0.9's); the rest may be absent. */
const REQUIRED: Record<string, readonly string[]> = {
  BlockStored: ["block_hashes", "parent_block_hash", "token_ids", "block_size"],
  BlockRemoved: ["block_hashes"],
  AllBlocksCleared: [],
};

function isMap(v: unknown): v is Record<string, unknown> {
  return typeof v === "object" && v !== null && !Array.isArray(v) && !(v instanceof Uint8Array);
}

/** An event's fields by name, whichever its layout; undefined for a tag this decoder does not know. */
function eventFields(raw: unknown, where: string): { tag: string; f: Record<string, unknown> } | undefined {
  let tag: unknown;
  let f: Record<string, unknown>;
  if (Array.isArray(raw)) {
    tag = raw[0];
    if (typeof tag !== "string") return fail(where, "a positional event must start with its type name");
    const names = ARRAY_FIELDS[tag];
    if (!names) return undefined;
    f = {};
    names.forEach((name, i) => {
      if (i + 1 < raw.length) f[name] = raw[i + 1];
    });
  } else if (isMap(raw)) {
    tag = raw.type;
    if (typeof tag !== "string") return fail(where, 'a map event must have a string "type"');
    if (!ARRAY_FIELDS[tag]) return undefined;
    f = raw;
  } else {
    return fail(where, "an event must be an array or a map");
  }
  for (const name of REQUIRED[tag]!) if (!(name in f)) fail(where, `${tag} has no ${name}`);
  return { tag, f };
}

function eventOf(raw: unknown, where: string): KvCacheEvent | undefined {
  const fields = eventFields(raw, where);
  if (!fields) return undefined;
  const { tag, f } = fields;
  if (tag === "BlockStored") {
    return {
      type: "BlockStored",
      blockHashes: hashesOf(f.block_hashes, where),
      parentBlockHash: f.parent_block_hash === null ? null : hashOf(f.parent_block_hash, `${where}.parent_block_hash`),
      tokenIds: tokensOf(f.token_ids, where),
      blockSize: intOf(f.block_size, `${where}.block_size`, 1),
      loraId: intOrNull(f.lora_id, `${where}.lora_id`, Number.MIN_SAFE_INTEGER),
      medium: strOrNull(f.medium, `${where}.medium`),
      loraName: strOrNull(f.lora_name, `${where}.lora_name`),
      extraKeys: extraKeysOf(f.extra_keys, where),
      groupIdx: intOrNull(f.group_idx, `${where}.group_idx`),
      kvCacheSpecKind: strOrNull(f.kv_cache_spec_kind, `${where}.kv_cache_spec_kind`),
      kvCacheSpecSlidingWindow: intOrNull(f.kv_cache_spec_sliding_window, `${where}.kv_cache_spec_sliding_window`),
    };
  }
  if (tag === "BlockRemoved") {
    return { type: "BlockRemoved", blockHashes: hashesOf(f.block_hashes, where), medium: strOrNull(f.medium, `${where}.medium`), groupIdx: intOrNull(f.group_idx, `${where}.group_idx`) };
  }
  return { type: "AllBlocksCleared" };
}

/** One batch's payload, any layout vLLM has sent. Throws KvEventDecodeError on anything else. */
export function decodeKvEventBatch(payload: Uint8Array): DecodedKvEventBatch {
  let raw: unknown;
  try {
    raw = msgpackDecode(payload, { useBigInt64: true });
  } catch (err) {
    throw new KvEventDecodeError(`not msgpack: ${err instanceof Error ? err.message : String(err)}`);
  }
  let ts: unknown;
  let events: unknown;
  let rank: unknown;
  if (Array.isArray(raw)) {
    if (raw.length < 2) fail("batch", "expected [ts, events, data_parallel_rank?]");
    [ts, events, rank] = raw;
  } else if (isMap(raw)) {
    ({ ts, events, data_parallel_rank: rank } = raw);
  } else {
    fail("batch", "expected an array or a map");
  }
  const tsNum = typeof ts === "bigint" ? Number(ts) : ts;
  if (typeof tsNum !== "number" || !Number.isFinite(tsNum)) fail("batch.ts", "expected a number");
  if (!Array.isArray(events)) return fail("batch.events", "expected an array");
  const out: KvCacheEvent[] = [];
  let unknownEvents = 0;
  events.forEach((e, i) => {
    const event = eventOf(e, `batch.events[${i}]`);
    if (event) out.push(event);
    else unknownEvents++;
  });
  return { ts: tsNum as number, events: out, dataParallelRank: intOrNull(rank, "batch.data_parallel_rank"), unknownEvents };
}

// ---- framing ----------------------------------------------------------------------------

/** The replay socket's end marker in the seq frame: -1 as a signed 8-byte big-endian int. */
export const REPLAY_END_SEQ: Uint8Array = new Uint8Array(8).fill(0xff);

/** A sequence number as its 8-byte big-endian frame. */
export function encodeSeq(seq: bigint | number): Uint8Array {
  const out = new Uint8Array(8);
  new DataView(out.buffer).setBigUint64(0, BigInt.asUintN(64, BigInt(seq)));
  return out;
}

/** The sequence number of an 8-byte frame (unsigned; the replay end marker reads as 2^64 - 1). */
export function decodeSeq(frame: Uint8Array): bigint {
  if (frame.length !== 8) throw new KvEventDecodeError(`a sequence frame has 8 bytes, this one ${frame.length}`);
  return new DataView(frame.buffer, frame.byteOffset, 8).getBigUint64(0);
}

export interface KvEventMessage {
  topic: string;
  seq: bigint;
  batch: DecodedKvEventBatch;
}

/** A PUB message: [topic, seq, payload]. */
export function parseKvEventMessage(frames: readonly Uint8Array[]): KvEventMessage {
  if (frames.length !== 3) throw new KvEventDecodeError(`a KV event message has 3 frames (topic, seq, payload), this one ${frames.length}`);
  const [topic, seq, payload] = frames as [Uint8Array, Uint8Array, Uint8Array];
  return { topic: new TextDecoder().decode(topic), seq: decodeSeq(seq), batch: decodeKvEventBatch(payload) };
}

/** A replay answer as a DEALER ([“”, seq, payload]) or a REQ ([seq, payload]) receives it. */
export type ReplayReply = { end: true } | { end: false; seq: bigint; batch: DecodedKvEventBatch };

export function parseReplayReply(frames: readonly Uint8Array[]): ReplayReply {
  const rest = frames.length === 3 && frames[0]!.length === 0 ? frames.slice(1) : frames;
  if (rest.length !== 2) throw new KvEventDecodeError(`a replay reply has 2 frames after the delimiter (seq, payload), this one ${rest.length}`);
  const [seq, payload] = rest as [Uint8Array, Uint8Array];
  // vLLM's own subscriber ends on the empty payload; the seq frame then holds REPLAY_END_SEQ.
  if (payload.length === 0) return { end: true };
  return { end: false, seq: decodeSeq(seq), batch: decodeKvEventBatch(payload) };
}

/** A replay request's frame: the first sequence number wanted. */
export const replayRequest = (fromSeq: bigint | number): Uint8Array => encodeSeq(fromSeq);

/**
 * A hash as a string, for maps and logs: an int as 16 lowercase hex digits (the same
 * text as a Switchyard block key, src/prefix/block-keys.ts bigIntToKey), bytes as
 * "b:" and their hex.
 */
export function blockHashText(h: BlockHash): string {
  if (h instanceof Uint8Array) return `b:${hexOf(h)}`;
  return BigInt.asUintN(64, h).toString(16).padStart(16, "0");
}
