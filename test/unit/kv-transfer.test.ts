/**
 * Prefill/decode disaggregation on the reference replica (issue 56): the KV pool keeps a
 * finished prefill's blocks pinned for a decode replica and takes blocks computed
 * elsewhere (src/replica/llm/kv-cache.ts pin, unpin, importBlocks), and the engine holds a
 * transfer until it is read once or times out, freeing its blocks either way
 * (src/replica/llm/engine.ts). The HTTP legs run in test/e2e/pd-replica.test.ts.
 */
import { describe, expect, it, vi } from "vitest";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { LlmEngine, MAX_HELD_TRANSFERS, MAX_TRANSFER_WAITERS, type GenerateRequest, type GenerateResult } from "../../src/replica/llm/engine.ts";
import { KvCacheScheduler, type PoolEvent } from "../../src/replica/llm/kv-cache.ts";
import { createServer, type ServerResponse } from "node:http";
import type { AddressInfo } from "node:net";
import { bootstrapOf, prefillAnswer, readRemotePrefill, remotePrefillOf, roomTransferId } from "../../src/replica/llm/kv-transfer.ts";
import { tinyLmGenerator } from "../../src/replica/llm/tiny-lm.ts";
import { oneLetterModel } from "../fixtures/one-letter-model.ts";

const BS = 16;
const ids = (n: number, from = 2) => Array.from({ length: n }, (_, i) => 2 + ((from + i) % 90));

describe("KV pool: pins and imports", () => {
  it("keeps a released sequence's pinned prompt blocks held (not evictable) until unpinned, then cached", () => {
    const kv = new KvCacheScheduler(8, BS);
    const prompt = ids(40); // two full blocks and a partial one
    kv.acquire(1, prompt.length + 1, { ids: [...prompt, 5], extra: "" });
    kv.takeScheduling(1);
    kv.commit(1);
    const pinned = kv.pin(1, prompt.length);
    expect(pinned).toHaveLength(2);
    expect(kv.pinnedKeys(pinned)).toEqual(blockKeys(prompt));
    kv.release(1);
    // Held: 2 blocks in use, none free cached; a sequence needing the whole rest of the pool fits, one more does not.
    expect(kv.usedBlocks).toBe(2);
    expect(kv.freeCachedBlocks).toBe(0);
    expect(kv.acquire(2, 6 * BS, { ids: ids(6 * BS, 50), extra: "" })).toBeUndefined();
    kv.release(2);
    expect(kv.isCached(blockKeys(prompt)[0]!)).toBe(true);
    kv.unpin(pinned);
    expect(kv.usedBlocks).toBe(0);
    expect(kv.pinnedBlocks).toBe(0);
    // Free and still cached: the same prompt finds both blocks.
    kv.acquire(3, prompt.length, { ids: prompt, extra: "" });
    expect(kv.takeScheduling(3)!.cachedTokens).toBe(2 * BS);
  });

  it("counts two pins of a shared block apart: the first unpin leaves it held", () => {
    const kv = new KvCacheScheduler(8, BS);
    const prompt = ids(32);
    const pins: number[][] = [];
    for (const id of [1, 2]) {
      kv.acquire(id, prompt.length + 1, { ids: [...prompt, 7], extra: "" });
      kv.takeScheduling(id);
      kv.commit(id);
      pins.push(kv.pin(id, prompt.length));
      kv.release(id);
    }
    expect(pins[0]).toEqual(pins[1]);
    kv.unpin(pins[0]!);
    expect(kv.usedBlocks).toBe(2);
    expect(kv.pinnedKeys(pins[1]!)).toEqual(blockKeys(prompt));
    kv.unpin(pins[1]!);
    expect(kv.usedBlocks).toBe(0);
    expect(kv.pinnedKeys(pins[1]!)).toBeUndefined();
  });

  it("imports blocks computed elsewhere as cached, named as its own computation names them, announcing them as stored", () => {
    const events: PoolEvent[] = [];
    const kv = new KvCacheScheduler(8, BS, { onEvent: (e) => events.push(e) });
    const prompt = ids(50);
    expect(kv.importBlocks(prompt.slice(0, 3 * BS), "lora-a")).toBe(3);
    expect(events).toEqual([{ type: "stored", keys: blockKeys(prompt.slice(0, 48), { extra: "lora-a" }), parent: undefined, tokenIds: prompt.slice(0, 48), extra: "lora-a" }]);
    expect(kv.usedBlocks).toBe(0);
    kv.acquire(1, prompt.length, { ids: prompt, extra: "lora-a" });
    expect(kv.takeScheduling(1)!.cachedTokens).toBe(3 * BS);
    kv.release(1);
    // Again: nothing new to store.
    expect(kv.importBlocks(prompt.slice(0, 3 * BS), "lora-a")).toBe(3);
    expect(events.filter((e) => e.type === "stored")).toHaveLength(1);
  });

  it("imports only into free room, never evicting blocks of the chain it imports nor blocks in use", () => {
    const kv = new KvCacheScheduler(4, BS);
    const busy = ids(2 * BS, 30);
    kv.acquire(1, busy.length, { ids: busy, extra: "" });
    kv.takeScheduling(1);
    kv.commit(1);
    // Two blocks free: four of the chain asked, two imported.
    expect(kv.importBlocks(ids(4 * BS), "")).toBe(2);
    expect(kv.usedBlocks).toBe(2);
    kv.release(1);
    // Now the two busy blocks are free cached: importing the rest evicts them, not the chain's first two.
    expect(kv.importBlocks(ids(4 * BS), "")).toBe(4);
    expect(kv.isCached(blockKeys(busy)[0]!)).toBe(false);
  });
});

const request = (prompt: number[], more: Partial<GenerateRequest> = {}): GenerateRequest => ({ prompt, maxTokens: 1, sampling: { temperature: 0, topP: 1, presencePenalty: 0, frequencyPenalty: 0 }, ...more });
async function run(gen: AsyncGenerator<string, GenerateResult>): Promise<GenerateResult> {
  for (;;) {
    const step = await gen.next();
    if (step.done) return step.value;
  }
}

describe("LlmEngine: a prefill's blocks for a decode replica", () => {
  it("keeps them when a keepPrompt request finishes capped by length, frees them on the one read, and names the prompt's tokens", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 16 });
    const prompt = ids(40);
    const r = await run(engine.generate(request(prompt, { keepPrompt: true, extra: "x" })));
    expect(r.finishReason).toBe("length");
    expect(r.kept!.blockIds).toHaveLength(2);
    expect(engine.heldTransfers).toBe(1);
    expect(engine.heldTransferBlocks).toBe(2);
    expect(engine.readTransfer(r.kept!.transferId, [r.kept!.blockIds[0]!])).toBeUndefined();
    expect(engine.readTransfer("another", r.kept!.blockIds)).toBeUndefined();
    expect(engine.readTransfer(r.kept!.transferId, r.kept!.blockIds)).toEqual({ ids: prompt.slice(0, 32), extra: "x" });
    expect(engine.heldTransferBlocks).toBe(0);
    expect(engine.readTransfer(r.kept!.transferId, r.kept!.blockIds)).toBeUndefined();
    // Not kept: without keepPrompt, or when it stopped before its length.
    expect((await run(engine.generate(request(prompt)))).kept).toBeUndefined();
  });

  it("frees unread blocks after kvTransferTimeoutMs, and holds at most half the pool (the oldest go first)", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 8, kvTransferTimeoutMs: 1000 });
      const first = await run(engine.generate(request(ids(32, 2), { keepPrompt: true })));
      const second = await run(engine.generate(request(ids(32, 40), { keepPrompt: true })));
      expect(engine.heldTransferBlocks).toBe(4);
      // A third would pass half of 8 blocks: the first is let go.
      const third = await run(engine.generate(request(ids(32, 70), { keepPrompt: true })));
      expect(engine.heldTransfers).toBe(2);
      expect(engine.readTransfer(first.kept!.transferId, first.kept!.blockIds)).toBeUndefined();
      vi.advanceTimersByTime(1000);
      expect(engine.heldTransfers).toBe(0);
      expect(engine.heldTransferBlocks).toBe(0);
      expect(engine.readTransfer(second.kept!.transferId, second.kept!.blockIds)).toBeUndefined();
      expect(engine.readTransfer(third.kept!.transferId, third.kept!.blockIds)).toBeUndefined();
    } finally {
      vi.useRealTimers();
    }
  });

  it("a decode's imported prefix is found cached: only the rest is prefilled", async () => {
    const prefill = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 16 });
    const decode = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 16 });
    const prompt = ids(40);
    const r = await run(prefill.generate(request(prompt, { keepPrompt: true })));
    const read = prefill.readTransfer(r.kept!.transferId, r.kept!.blockIds)!;
    expect(decode.importPrefix(read.ids, read.extra)).toBe(32);
    const d = await run(decode.generate(request(prompt, { maxTokens: 4 })));
    expect(d.cachedTokens).toBe(32);
    expect(decode.prefillComputedTokens).toBe(8);
  });
});

describe("LlmEngine: SGLang's room (both legs at once)", () => {
  it("a decode's read that comes before its prefill waits for it, and gets the prompt's full blocks once", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 16 });
    const prompt = ids(40);
    const read = engine.awaitTransfer("room:7", 60_000);
    expect(engine.transferWaiters).toBe(1);
    const r = await run(engine.generate(request(prompt, { keepAs: "room:7", extra: "x" })));
    expect(r.kept).toBeUndefined();
    expect(await read).toEqual({ ids: prompt.slice(0, 32), extra: "x" });
    // Handed over, not held: nothing pinned, nothing to read again.
    expect(engine.transferWaiters).toBe(0);
    expect(engine.heldTransfers).toBe(0);
    expect(engine.heldTransferBlocks).toBe(0);
  });

  it("a read after its prefill finished gets the held blocks at once and frees them; a prompt under one block holds an empty transfer", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 16 });
    const prompt = ids(40);
    await run(engine.generate(request(prompt, { keepAs: "room:1" })));
    expect(engine.heldTransferBlocks).toBe(2);
    expect(await engine.awaitTransfer("room:1", 60_000)).toEqual({ ids: prompt.slice(0, 32), extra: "" });
    expect(engine.heldTransferBlocks).toBe(0);
    // A short prompt: no full block, but the decode learns so at once instead of waiting out its timeout.
    await run(engine.generate(request(ids(5), { keepAs: "room:2" })));
    expect(await engine.awaitTransfer("room:2", 60_000)).toEqual({ ids: [], extra: "" });
  });

  it("a wait ends with its timeout or its reader's signal; one reader per room; at most MAX_TRANSFER_WAITERS wait", async () => {
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 16 });
      const timed = engine.awaitTransfer("room:3", 500);
      expect(await engine.awaitTransfer("room:3", 500)).toBeUndefined();
      vi.advanceTimersByTime(500);
      expect(await timed).toBeUndefined();
      const left = new AbortController();
      const leaving = engine.awaitTransfer("room:4", 60_000, left.signal);
      left.abort();
      expect(await leaving).toBeUndefined();
      expect(engine.transferWaiters).toBe(0);
      const waits = Array.from({ length: MAX_TRANSFER_WAITERS }, (_, i) => engine.awaitTransfer(`room:w${i}`, 1000));
      expect(engine.transferWaiters).toBe(MAX_TRANSFER_WAITERS);
      expect(await engine.awaitTransfer("room:one-more", 1000)).toBeUndefined();
      vi.advanceTimersByTime(1000);
      expect(await Promise.all(waits)).toEqual(waits.map(() => undefined));
      expect(engine.transferWaiters).toBe(0);
    } finally {
      vi.useRealTimers();
    }
  });

  it("holds at most half the pool's blocks under rooms, as under vLLM's transfers (the oldest go first)", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 8 });
    for (const [room, from] of [["room:a", 2], ["room:b", 40], ["room:c", 70]] as const) await run(engine.generate(request(ids(32, from), { keepAs: room })));
    expect(engine.heldTransfers).toBe(2);
    expect(engine.heldTransferBlocks).toBe(4);
    expect(await engine.awaitTransfer("room:c", 10)).toEqual({ ids: ids(32, 70), extra: "" });
    expect(await engine.awaitTransfer("room:b", 10)).toEqual({ ids: ids(32, 40), extra: "" });
  });

  it("holds at most MAX_HELD_TRANSFERS transfers (the oldest go first)", async () => {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 16 });
    for (let i = 0; i <= MAX_HELD_TRANSFERS; i++) await run(engine.generate(request(ids(3), { keepAs: `room:${i}` })));
    expect(engine.heldTransfers).toBe(MAX_HELD_TRANSFERS);
    vi.useFakeTimers({ toFake: ["setTimeout", "clearTimeout"] });
    try {
      const oldest = engine.awaitTransfer("room:0", 10);
      vi.advanceTimersByTime(10);
      expect(await oldest).toBeUndefined();
    } finally {
      vi.useRealTimers();
    }
    expect(await engine.awaitTransfer(`room:${MAX_HELD_TRANSFERS}`, 10)).toEqual({ ids: [], extra: "" });
  });

  it("a decode leg's bootstrap fields are complete or ignored", () => {
    expect(bootstrapOf({ bootstrap_host: "[::1]", bootstrap_port: 8998, bootstrap_room: 5 })).toEqual({ protocol: "sglang", room: 5, host: "::1", port: 8998 });
    expect(bootstrapOf({ bootstrap_host: "10.0.0.2", bootstrap_port: null, bootstrap_room: 5 })).toBeUndefined();
    expect(bootstrapOf({ bootstrap_host: "10.0.0.2", bootstrap_port: 1 })).toBeUndefined();
    expect(roomTransferId(2 ** 53 - 1)).toBe("room:9007199254740991");
  });
});

describe("LlmEngine: a prefill stalls decoding (--prefill-stalls-decode)", () => {
  /** Tokens request A decodes while request B's prefill (500 tokens at 2 ms each: a second) holds the lane. */
  async function tokensDuringPrefill(prefillStallsDecode: boolean): Promise<number> {
    const engine = new LlmEngine({ model: tinyLmGenerator(oneLetterModel("fixed")), kvBlocks: 128, prefillTokenUs: 2000, decodeMs: 1, prefillStallsDecode });
    const a = engine.generate(request(ids(8), { maxTokens: 400 }));
    await a.next(); // A is decoding
    let during = 0;
    let bDone = false;
    const b = run(engine.generate(request(ids(500, 30), { maxTokens: 1 }))).then(() => (bDone = true));
    while (!bDone) {
      const step = await a.next();
      if (step.done) break;
      if (!bDone) during++;
    }
    await b;
    await a.return(undefined as never);
    return during;
  }

  it("off: decoding keeps its pace beside a prefill; on: a decode step waits for the prefill to end", async () => {
    // A second of prefill at 1 ms a token: off, A decodes on (hundreds of tokens, tens on a loaded machine); on, at most the step in flight when B's prefill began.
    expect(await tokensDuringPrefill(false)).toBeGreaterThan(20);
    expect(await tokensDuringPrefill(true)).toBeLessThanOrEqual(2);
  });
});

describe("a decode's read of a prefill's blocks", () => {
  it("gives up on a prefill that never answers after its timeout (the decode then computes the prompt)", async () => {
    const held: ServerResponse[] = [];
    const server = createServer((_req, res) => void held.push(res));
    await new Promise<void>((r) => server.listen(0, "127.0.0.1", r));
    try {
      const { port } = server.address() as AddressInfo;
      const got = await readRemotePrefill({ protocol: "vllm", engineId: "p1", blockIds: [1], requestId: "t", host: "127.0.0.1", port }, { deployment: "d" }, "req-1", undefined, 100);
      expect(got).toBeUndefined();
      expect(held).toHaveLength(1);
    } finally {
      for (const r of held) r.destroy();
      server.close();
    }
  });
});

describe("kv_transfer_params as vLLM's NixlConnector writes them", () => {
  it("a prefill answers where its blocks are; a decode's parameters are complete or ignored", () => {
    const answer = prefillAnswer({ transferId: "t-1", blockIds: [4, 9] }, { engineId: "pd-p1", url: () => "http://127.0.0.1:8123" })!;
    expect(answer).toEqual({ do_remote_prefill: true, do_remote_decode: false, remote_block_ids: [4, 9], remote_engine_id: "pd-p1", remote_request_id: "t-1", remote_host: "127.0.0.1", remote_port: 8123, tp_size: 1 });
    expect(remotePrefillOf(answer)).toEqual({ protocol: "vllm", engineId: "pd-p1", blockIds: [4, 9], requestId: "t-1", host: "127.0.0.1", port: 8123 });
    expect(prefillAnswer(undefined, { engineId: "x", url: () => "http://[::1]:9" })).toBeNull();
    expect(prefillAnswer({ transferId: "t", blockIds: [1] }, { engineId: "x", url: () => "http://[::1]:9" })).toMatchObject({ remote_host: "::1", remote_port: 9 });
    // The request a router sends a prefill: no remote fields.
    expect(remotePrefillOf({ do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null })).toBeUndefined();
    expect(remotePrefillOf({ ...answer, remote_port: null } as never)).toBeUndefined();
  });
});
