/**
 * The reference replica's KV event publisher (src/replica/llm/kv-event-publisher.ts) on
 * real ZMQ sockets over loopback: pool events as vLLM names them, one batch per event
 * loop turn on PUB with its topic and sequence, replays from a sequence on ROUTER
 * (bounded by bufferSteps, ended by vLLM's end marker), a bad replay request ignored,
 * and a bind that fails. Frames are read with the decoder the agent uses
 * (src/prefix/kv-events.ts, tested against vLLM's own encoding).
 */
import { Dealer, Subscriber } from "zeromq";
import { afterEach, describe, expect, it } from "vitest";
import { bigIntToKey, keyToBigInt } from "../../src/prefix/block-keys.ts";
import { encodeSeq, parseKvEventMessage, parseReplayReply, type DecodedKvEventBatch, type KvEventMessage } from "../../src/prefix/kv-events.ts";
import { KvEventPublisher, poolEventToKvEvent } from "../../src/replica/llm/kv-event-publisher.ts";

const A = bigIntToKey(0x0123456789abcdefn);
const B = bigIntToKey(0xfedcba9876543210n);
const C = bigIntToKey(42n);

const closing: (() => unknown)[] = [];
afterEach(async () => {
  for (const close of closing.splice(0).reverse()) await close();
});

async function publisher(options: Partial<Parameters<typeof KvEventPublisher.start>[0]> = {}): Promise<{ pub: KvEventPublisher; logs: string[] }> {
  const logs: string[] = [];
  const pub = await KvEventPublisher.start({ endpoint: "tcp://127.0.0.1:0", blockSize: 4, log: (m) => logs.push(m), ...options });
  closing.push(() => pub.close());
  return { pub, logs };
}

/** A subscriber that has seen a message (ZMQ drops what is published before a subscription joins): probes with "cleared" batches until one arrives. */
async function joined(pub: KvEventPublisher, topic = ""): Promise<{ next: () => Promise<KvEventMessage>; seq: bigint }> {
  const sub = new Subscriber({ linger: 0 });
  closing.push(() => sub.close());
  sub.connect(pub.endpoint);
  sub.subscribe(topic);
  let got: KvEventMessage | undefined;
  const first = sub.receive().then((frames) => (got = parseKvEventMessage(frames)));
  while (got === undefined) {
    pub.push({ type: "cleared" });
    await Promise.race([first, new Promise((r) => setTimeout(r, 20))]);
  }
  return { next: async () => parseKvEventMessage(await sub.receive()), seq: got.seq };
}

describe("poolEventToKvEvent", () => {
  it("names a stored run as vLLM's BlockStored, its keys as unsigned 64-bit ints", () => {
    expect(poolEventToKvEvent({ type: "stored", keys: [A, B], parent: C, tokenIds: [1, 2, 3, 4, 5, 6, 7, 8], extra: "" }, 4)).toEqual({
      type: "BlockStored",
      blockHashes: [0x0123456789abcdefn, 0xfedcba9876543210n],
      parentBlockHash: 42n,
      tokenIds: [1, 2, 3, 4, 5, 6, 7, 8],
      blockSize: 4,
      loraId: null,
      medium: "GPU",
      loraName: null,
      extraKeys: [null, null],
      groupIdx: 0,
      kvCacheSpecKind: "full_attention",
      kvCacheSpecSlidingWindow: null,
    });
  });

  it("a LoRA's blocks carry its name, per block too; a run that starts a prompt has no parent", () => {
    expect(poolEventToKvEvent({ type: "stored", keys: [A, B], parent: undefined, tokenIds: [], extra: "sql-lora" }, 16)).toMatchObject({
      parentBlockHash: null,
      loraName: "sql-lora",
      extraKeys: [["sql-lora"], ["sql-lora"]],
      blockSize: 16,
    });
  });

  it("evictions and a cleared cache", () => {
    expect(poolEventToKvEvent({ type: "removed", keys: [C] }, 4)).toEqual({ type: "BlockRemoved", blockHashes: [42n], medium: "GPU", groupIdx: 0 });
    expect(poolEventToKvEvent({ type: "cleared" }, 4)).toEqual({ type: "AllBlocksCleared" });
  });
});

describe("KvEventPublisher", () => {
  it("sends one batch per event loop turn, with its topic, the next sequence and the events in order", async () => {
    const { pub } = await publisher({ topic: "kv@engine-0", dataParallelRank: 3 });
    expect(pub.endpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    expect(pub.endpoint).not.toBe("tcp://127.0.0.1:0");
    expect(pub.replayEndpoint).toBeUndefined();
    const sub = await joined(pub, "kv@engine-0");
    const before = Date.now() / 1000;
    pub.push({ type: "stored", keys: [A], parent: undefined, tokenIds: [1, 2, 3, 4], extra: "" });
    pub.push({ type: "removed", keys: [B] });
    expect(pub.nextSeq).toBe(sub.seq + 1n); // not sent until the turn ends
    const msg = await sub.next();
    expect(msg.topic).toBe("kv@engine-0");
    expect(msg.seq).toBe(sub.seq + 1n);
    expect(pub.nextSeq).toBe(sub.seq + 2n);
    expect(msg.batch.dataParallelRank).toBe(3);
    expect(msg.batch.ts).toBeGreaterThanOrEqual(before - 1);
    expect(msg.batch.ts).toBeLessThanOrEqual(Date.now() / 1000 + 1);
    expect(msg.batch.events.map((e) => e.type)).toEqual(["BlockStored", "BlockRemoved"]);
    expect(msg.batch.events[0]).toMatchObject({ blockHashes: [keyToBigInt(A)], tokenIds: [1, 2, 3, 4], blockSize: 4 });
    // The next turn is the next batch.
    pub.push({ type: "cleared" });
    expect(await sub.next()).toMatchObject({ seq: sub.seq + 2n, batch: { events: [{ type: "AllBlocksCleared" }] } });
  });

  it("map layout by default, vLLM's older array layout on request: both decode to the same events", async () => {
    for (const layout of ["map", "array"] as const) {
      const { pub } = await publisher({ layout });
      const sub = await joined(pub);
      pub.push({ type: "stored", keys: [A, B], parent: C, tokenIds: [1, 2, 3, 4, 5, 6, 7, 8], extra: "x" });
      const msg = await sub.next();
      expect(msg.batch.events).toEqual([poolEventToKvEvent({ type: "stored", keys: [A, B], parent: C, tokenIds: [1, 2, 3, 4, 5, 6, 7, 8], extra: "x" }, 4)]);
    }
  });

  it("replays the kept batches from a sequence, oldest first, then vLLM's end marker; keeps only bufferSteps", async () => {
    const { pub, logs } = await publisher({ replayEndpoint: "tcp://127.0.0.1:0", bufferSteps: 3 });
    expect(pub.replayEndpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
    const sub = await joined(pub);
    // Five more batches, one per turn: seq sub.seq+1 … sub.seq+5; only the last three are kept.
    for (let i = 0; i < 5; i++) {
      pub.push({ type: "removed", keys: [bigIntToKey(BigInt(i + 1))] });
      await sub.next();
    }
    const dealer = new Dealer({ linger: 0 });
    closing.push(() => dealer.close());
    dealer.connect(pub.replayEndpoint!);
    const replay = async (from: bigint) => {
      await dealer.send(["", encodeSeq(from)]);
      const out: { seq: bigint; batch: DecodedKvEventBatch }[] = [];
      for (;;) {
        const reply = parseReplayReply(await dealer.receive());
        if (reply.end) return out;
        out.push(reply);
      }
    };
    const all = await replay(0n);
    expect(all.map((r) => r.seq)).toEqual([sub.seq + 3n, sub.seq + 4n, sub.seq + 5n]);
    expect(all.map((r) => r.batch.events)).toEqual([3, 4, 5].map((k) => [{ type: "BlockRemoved", blockHashes: [BigInt(k)], medium: "GPU", groupIdx: 0 }]));
    expect((await replay(sub.seq + 5n)).map((r) => r.seq)).toEqual([sub.seq + 5n]);
    expect(await replay(sub.seq + 6n)).toEqual([]);

    // A request that is not [identity, "", 8-byte seq] is logged and skipped; the socket serves the next one.
    await dealer.send(["", "short"]);
    expect((await replay(sub.seq + 4n)).map((r) => r.seq)).toEqual([sub.seq + 4n, sub.seq + 5n]);
    expect(logs).toContain("kv events: invalid replay request (3 frames)");
  });

  it("an address that cannot be bound rejects the start, and frees what it had bound", async () => {
    const { pub } = await publisher();
    await expect(KvEventPublisher.start({ endpoint: pub.endpoint, blockSize: 4 })).rejects.toThrow(/in use/i);
    // The PUB of a start whose replay address fails is closed: its port can be bound again.
    const free = await KvEventPublisher.start({ endpoint: "tcp://127.0.0.1:0", blockSize: 4 });
    const port = free.endpoint;
    await free.close();
    // ZeroMQ lets a closed socket's port go in its own I/O thread, a moment after close: wait for that, not for a time.
    await portFree(port);
    await expect(KvEventPublisher.start({ endpoint: port, replayEndpoint: pub.endpoint, blockSize: 4 })).rejects.toThrow(/in use/i);
    // A PUB the failed start had bound and not closed would hold the port for good: this would time out.
    await portFree(port);
    const again = await KvEventPublisher.start({ endpoint: port, blockSize: 4 });
    await again.close();
  });

  it("after close, events are dropped and nothing more is numbered", async () => {
    const { pub } = await publisher();
    pub.push({ type: "cleared" });
    await pub.close();
    const sent = pub.nextSeq;
    expect(sent).toBe(1n); // the queued batch was flushed by close
    pub.push({ type: "cleared" });
    await new Promise((r) => setImmediate(r));
    expect(pub.nextSeq).toBe(sent);
    await pub.close(); // twice is harmless
  });
});

/** Resolves once `endpoint`'s TCP port can be bound (a plain listen, closed at once); fails after 10 s. */
async function portFree(endpoint: string): Promise<void> {
  const port = Number(/:(\d+)$/.exec(endpoint)![1]);
  const { createServer } = await import("node:net");
  for (let tries = 0; tries < 1_000; tries++) {
    const bound = await new Promise<boolean>((resolve) => {
      const s = createServer();
      s.once("error", () => resolve(false));
      s.listen(port, "127.0.0.1", () => s.close(() => resolve(true)));
    });
    if (bound) return;
    await new Promise((r) => setTimeout(r, 10));
  }
  throw new Error(`${endpoint} is still bound after 10 s`);
}
