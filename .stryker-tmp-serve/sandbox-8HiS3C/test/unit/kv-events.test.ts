/**
 * vLLM's KV event codec (src/prefix/kv-events.ts) against batches in every layout vLLM
 * has published, written by Python's msgpack following msgspec's rules
 * (test/fixtures/kv-events/gen.py), not by this encoder: what the replica agent will
 * read off a real engine, and what the reference replica must write.
 */
// @ts-nocheck

import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { bigIntToKey, blockKeys, keyToBigInt } from "../../src/prefix/block-keys.ts";
import {
  KvEventDecodeError,
  REPLAY_END_SEQ,
  blockHashText,
  decodeKvEventBatch,
  decodeSeq,
  encodeKvEventBatch,
  encodeSeq,
  parseKvEventMessage,
  parseReplayReply,
  type BlockStored,
  type KvEventBatch,
} from "../../src/prefix/kv-events.ts";

const fixture = (name: string) => new Uint8Array(readFileSync(join(import.meta.dirname, "../fixtures/kv-events", name)));

const FIRST = [128000, 128006, 9125, 128007, 271, 0, 1, 127, 128, 255, 256, 65535, 65536, 128255, 42, 2];
const SECOND = Array.from({ length: 16 }, (_, i) => 100 + i);
const ROOT = 0xdeadbeef12345678n;
const TOP = 0xffffffffffffffffn;

const stored = (o: Partial<BlockStored>): BlockStored => ({
  type: "BlockStored",
  blockHashes: [],
  parentBlockHash: null,
  tokenIds: [],
  blockSize: 16,
  loraId: null,
  medium: null,
  loraName: null,
  extraKeys: null,
  groupIdx: null,
  kvCacheSpecKind: null,
  kvCacheSpecSlidingWindow: null,
  ...o,
});

describe("decodeKvEventBatch: vLLM's layouts", () => {
  it("v0.9: a two-element batch, positional events with five fields", () => {
    expect(decodeKvEventBatch(fixture("v0.9-stored.msgpack"))).toEqual({
      ts: 1757500000.25,
      events: [stored({ blockHashes: [ROOT, TOP], tokenIds: [...FIRST, ...SECOND] })],
      dataParallelRank: null,
      unknownEvents: 0,
    });
  });

  it("positional events with medium, and the batch's data_parallel_rank", () => {
    expect(decodeKvEventBatch(fixture("array-medium.msgpack"))).toEqual({
      ts: 1757500000.25,
      events: [
        stored({ blockHashes: [7n], parentBlockHash: TOP, tokenIds: SECOND, medium: "GPU" }),
        { type: "BlockRemoved", blockHashes: [0x8000000000000001n], medium: "GPU", groupIdx: null },
      ],
      dataParallelRank: 0,
      unknownEvents: 0,
    });
  });

  it("the last positional layout: LoRA name, extra keys, group, cache spec; a reset", () => {
    const batch = decodeKvEventBatch(fixture("array-full.msgpack"));
    expect(batch.dataParallelRank).toBe(1);
    expect(batch.events).toEqual([
      stored({
        blockHashes: [11n, 12n],
        tokenIds: [...FIRST, ...SECOND],
        loraId: 3,
        medium: "GPU",
        loraName: "sql-lora",
        extraKeys: [["sql-lora"], ["sql-lora"]],
        groupIdx: 0,
        kvCacheSpecKind: "full_attention",
      }),
      { type: "BlockRemoved", blockHashes: [11n], medium: "GPU", groupIdx: 0 },
      { type: "AllBlocksCleared" },
    ]);
  });

  it("old engines' signed hashes read as the same 64 bits unsigned", () => {
    const batch = decodeKvEventBatch(fixture("array-signed.msgpack"));
    expect(batch.events).toEqual([{ type: "BlockRemoved", blockHashes: [TOP, 0x8000000000000000n], medium: null, groupIdx: null }]);
    expect(batch.dataParallelRank).toBeNull();
  });

  it("bytes hashes (VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES=0)", () => {
    const [e] = decodeKvEventBatch(fixture("array-bytes.msgpack")).events as [BlockStored];
    expect(e.blockHashes).toEqual([Uint8Array.from({ length: 32 }, (_, i) => i)]);
    expect(e.parentBlockHash).toEqual(Uint8Array.from({ length: 32 }, (_, i) => 100 + i));
    expect(blockHashText(e.blockHashes[0]!)).toBe(`b:${Array.from({ length: 32 }, (_, i) => i.toString(16).padStart(2, "0")).join("")}`);
  });

  it("map events (vLLM since PR #42892): a vLLM 0.26.0 engine's own BlockStored", () => {
    expect(decodeKvEventBatch(fixture("map-stored.msgpack"))).toEqual({
      ts: 1789095808.8378847,
      events: [
        stored({
          blockHashes: [15760518052499183552n],
          tokenIds: [151644, 872, 198, 9064, 374, 279, 6722, 315, 5616, 30, 151645, 198, 151644, 77091, 198, 151667],
          medium: "GPU",
          extraKeys: [null],
          groupIdx: 0,
          kvCacheSpecKind: "full_attention",
        }),
      ],
      dataParallelRank: 0,
      unknownEvents: 0,
    });
  });

  it("map events of every kind; unknown fields ignored, unknown event types counted and left out", () => {
    const batch = decodeKvEventBatch(fixture("map-mixed.msgpack"));
    expect(batch.unknownEvents).toBe(1);
    expect(batch.events).toEqual([
      stored({
        blockHashes: [7n, TOP],
        parentBlockHash: ROOT,
        tokenIds: [...FIRST, ...SECOND],
        medium: "CPU",
        loraName: "chat-lora",
        extraKeys: [["chat-lora"], ["chat-lora"]],
        groupIdx: 0,
        kvCacheSpecKind: "full_attention",
      }),
      { type: "BlockRemoved", blockHashes: [7n], medium: "GPU", groupIdx: 0 },
      { type: "AllBlocksCleared" },
    ]);
  });

  it("a map-shaped batch decodes too", () => {
    // {"ts": 1.5, "events": [], "data_parallel_rank": 2}
    const bytes = Uint8Array.from([0x83, 0xa2, 0x74, 0x73, 0xcb, 0x3f, 0xf8, 0, 0, 0, 0, 0, 0, 0xa6, ...new TextEncoder().encode("events"), 0x90, 0xb2, ...new TextEncoder().encode("data_parallel_rank"), 0x02]);
    expect(decodeKvEventBatch(bytes)).toEqual({ ts: 1.5, events: [], dataParallelRank: 2, unknownEvents: 0 });
  });

  it("refuses what is not a batch", () => {
    expect(() => decodeKvEventBatch(Uint8Array.from([0xc1]))).toThrow(KvEventDecodeError);
    expect(() => decodeKvEventBatch(Uint8Array.from([0x91, 0x01]))).toThrow(/expected \[ts, events/);
    // [1.0, [["BlockStored", [1]]]]: a store without its tokens
    expect(() => decodeKvEventBatch(Uint8Array.from([0x92, 0x01, 0x91, 0x92, 0xab, ...new TextEncoder().encode("BlockStored"), 0x91, 0x01]))).toThrow(/BlockStored has no parent_block_hash/);
    // [1.0, [{"type": "BlockRemoved", "block_hashes": ["x"]}]]
    const bad = Uint8Array.from([0x92, 0x01, 0x91, 0x82, 0xa4, ...new TextEncoder().encode("type"), 0xac, ...new TextEncoder().encode("BlockRemoved"), 0xac, ...new TextEncoder().encode("block_hashes"), 0x91, 0xa1, 0x78]);
    expect(() => decodeKvEventBatch(bad)).toThrow(/block hash must be an integer or bytes/);
  });
});

describe("encodeKvEventBatch", () => {
  it("writes vLLM 0.26.0's batch byte for byte (map events, defaults left out, ts as float64)", () => {
    const bytes = fixture("map-stored.msgpack");
    const { unknownEvents: _, ...batch } = decodeKvEventBatch(bytes);
    expect(Buffer.from(encodeKvEventBatch(batch)).toString("hex")).toBe(Buffer.from(bytes).toString("hex"));
  });

  it("writes the last positional layout byte for byte with layout: array", () => {
    const bytes = fixture("array-full.msgpack");
    const { unknownEvents: _, ...batch } = decodeKvEventBatch(bytes);
    expect(Buffer.from(encodeKvEventBatch(batch, { layout: "array" })).toString("hex")).toBe(Buffer.from(bytes).toString("hex"));
  });

  it("round-trips a replica's batch: Switchyard block keys as int hashes, an integral ts still a float", () => {
    const tokens = Array.from({ length: 40 }, (_, i) => (i * 7) % 97);
    const keys = blockKeys(tokens, { extra: "sql-lora" });
    const batch: KvEventBatch = {
      ts: 1_800_000_000,
      events: [
        stored({ blockHashes: keys.map(keyToBigInt), tokenIds: tokens.slice(0, 32), medium: "GPU", loraName: "sql-lora", groupIdx: 0, kvCacheSpecKind: "full_attention" }),
        { type: "BlockRemoved", blockHashes: [keyToBigInt(keys[1]!)], medium: "GPU", groupIdx: 0 },
        { type: "AllBlocksCleared" },
      ],
      dataParallelRank: 0,
    };
    for (const layout of ["map", "array"] as const) {
      const bytes = encodeKvEventBatch(batch, { layout });
      expect(bytes[1]).toBe(0xcb);
      const back = decodeKvEventBatch(bytes);
      expect(back).toEqual({ ...batch, unknownEvents: 0 });
      expect((back.events[0] as BlockStored).blockHashes.map((h) => blockHashText(h))).toEqual(keys);
      expect(bigIntToKey((back.events[0] as BlockStored).blockHashes[0] as bigint)).toBe(keys[0]);
    }
  });
});

describe("framing", () => {
  it("sequence numbers are 8-byte big-endian, the replay end marker all ones", () => {
    expect(Buffer.from(encodeSeq(0)).toString("hex")).toBe("0000000000000000");
    expect(Buffer.from(encodeSeq(258n)).toString("hex")).toBe("0000000000000102");
    expect(decodeSeq(encodeSeq(2n ** 40n + 5n))).toBe(2n ** 40n + 5n);
    expect(decodeSeq(REPLAY_END_SEQ)).toBe(2n ** 64n - 1n);
    expect(() => decodeSeq(new Uint8Array(4))).toThrow(KvEventDecodeError);
  });

  it("parses a PUB message and replay replies from a DEALER or a REQ", () => {
    const payload = fixture("array-medium.msgpack");
    const msg = parseKvEventMessage([new TextEncoder().encode("kv-events"), encodeSeq(41), payload]);
    expect(msg.topic).toBe("kv-events");
    expect(msg.seq).toBe(41n);
    expect(msg.batch.events).toHaveLength(2);
    const dealer = parseReplayReply([new Uint8Array(0), encodeSeq(7), payload]);
    expect(dealer.end === false && dealer.seq).toBe(7n);
    const req = parseReplayReply([encodeSeq(8), payload]);
    expect(req.end === false && req.seq).toBe(8n);
    expect(parseReplayReply([new Uint8Array(0), REPLAY_END_SEQ, new Uint8Array(0)])).toEqual({ end: true });
    expect(() => parseKvEventMessage([payload])).toThrow(/3 frames/);
  });
});
