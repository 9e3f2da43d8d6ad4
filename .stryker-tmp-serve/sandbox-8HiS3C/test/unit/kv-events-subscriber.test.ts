/**
 * The replica agent's KV events subscriber (src/agent/kv-events-subscriber.ts) over
 * real ZMQ sockets on loopback, against a publisher that sends vLLM-format batches
 * (test/e2e/fixtures/kv-events-publisher.ts, the fixture files of
 * test/fixtures/kv-events/): in order, caught up from the replay socket when it
 * starts late or misses batches, started over when the engine restarts.
 */
// @ts-nocheck

import { afterEach, describe, expect, it } from "vitest";
import { EnginePrefixIndex } from "../../src/agent/engine-prefix-index.ts";
import { KvEventsSubscriber, ZMQ_ENDPOINT } from "../../src/agent/kv-events-subscriber.ts";
import type { DecodedKvEventBatch } from "../../src/prefix/kv-events.ts";
import { FixturePublisher } from "../e2e/fixtures/kv-events-publisher.ts";

const cleanup: (() => unknown)[] = [];
afterEach(async () => {
  for (const f of cleanup.splice(0).reverse()) await f();
});

const stream = (i: number) => FixturePublisher.file(`agent-stream-${i}.msgpack`);

/** A subscriber whose batches are collected; `seen(n)` resolves once n have been applied. */
async function subscribe(source: { endpoint: string; replayEndpoint?: string }) {
  const batches: { seq: bigint; batch: DecodedKvEventBatch }[] = [];
  const waiters: { n: number; resolve: () => void }[] = [];
  let restarts = 0;
  const logs: string[] = [];
  const index = new EnginePrefixIndex();
  const s = new KvEventsSubscriber({
    ...source,
    onBatch: (batch, seq) => {
      batches.push({ seq, batch });
      index.apply(batch);
      for (const w of waiters.splice(0)) (batches.length >= w.n ? w.resolve : () => waiters.push(w))();
    },
    onRestart: () => {
      restarts++;
      index.clear();
    },
    log: (m) => logs.push(m),
  });
  await s.start();
  cleanup.push(() => s.close());
  const seen = (n: number) => (batches.length >= n ? Promise.resolve() : new Promise<void>((resolve) => waiters.push({ n, resolve })));
  return { s, batches, seen, index, logs, restarts: () => restarts };
}

async function publisher() {
  const p = new FixturePublisher();
  const where = await p.bind();
  cleanup.push(() => p.close());
  return { p, where };
}

/** Waits for `cond`, looking again every few ms (bounded). */
async function waitFor(what: string, cond: () => boolean, limitMs = 10_000): Promise<void> {
  const end = Date.now() + limitMs;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}

/**
 * Publishes until the subscriber has something (ZMQ drops what a SUB is sent
 * before its subscription reaches the publisher), then until it has applied
 * the last seq published.
 */
async function connected(p: FixturePublisher, sub: Awaited<ReturnType<typeof subscribe>>) {
  for (let tries = 0; sub.batches.length === 0; tries++) {
    await p.publish(stream(0));
    const end = Date.now() + 50;
    while (sub.batches.length === 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 2));
    expect(tries).toBeLessThan(200);
  }
  await waitFor("the subscriber to settle", () => sub.s.lastSeq === BigInt(p.next - 1));
}

describe("KvEventsSubscriber", () => {
  it("an agent starting after the engine catches up from the replay socket, in order", async () => {
    const { p, where } = await publisher();
    for (let i = 0; i < 3; i++) await p.publish(stream(i));
    const sub = await subscribe(where);
    // The first live batch it gets shows the gap from 0: the earlier ones come from the replay.
    await connected(p, sub);
    const seqs = sub.batches.map((b) => Number(b.seq));
    expect(seqs).toEqual(seqs.map((_, i) => i));
    expect(seqs.length).toBeGreaterThanOrEqual(4);
    expect(sub.s.stats.replayed).toBeGreaterThanOrEqual(3);
    expect(sub.s.stats.lost).toBe(0);
    expect(sub.index.size).toBeGreaterThan(0);
  });

  it("on start it asks the replay socket for everything from 0, without waiting for the engine's next batch; live batches go on from there", async () => {
    const { p, where } = await publisher();
    for (let i = 0; i < 4; i++) await p.publish(stream(i));
    const sub = await subscribe(where);
    await waitFor("the replayed batches", () => sub.s.lastSeq === 3n);
    expect(sub.batches.map((b) => b.seq)).toEqual([0n, 1n, 2n, 3n]);
    expect(sub.s.stats.replayed).toBe(4);
    // The next live batch follows on: neither a gap nor a restart.
    await p.publish(stream(4));
    await waitFor("the next live batch", () => sub.s.lastSeq === 4n);
    expect(sub.s.stats).toMatchObject({ restarts: 0, gaps: 0, lost: 0 });
    expect(sub.batches).toHaveLength(5);
  });

  it("a batch missed on the live socket is fetched from the replay socket before the next one", async () => {
    const { p, where } = await publisher();
    const sub = await subscribe(where);
    await connected(p, sub);
    const first = sub.batches.length;
    const base = p.next;
    await p.publish(stream(1), false);
    await p.publish(stream(2));
    await sub.seen(first + 2);
    expect(sub.batches.slice(first).map((b) => b.seq)).toEqual([BigInt(base), BigInt(base + 1)]);
    expect(sub.s.stats.gaps).toBe(1);
    expect(sub.s.stats.lost).toBe(0);
  });

  it("without a replay endpoint a missed batch is counted lost, and the stream goes on", async () => {
    const { p, where } = await publisher();
    const sub = await subscribe({ endpoint: where.endpoint });
    await connected(p, sub);
    const first = sub.batches.length;
    await p.publish(stream(1), false);
    await p.publish(stream(2));
    await waitFor("the batch after the missed one", () => sub.s.lastSeq === BigInt(p.next - 1));
    expect(sub.batches.length).toBe(first + 1);
    expect(sub.s.stats.lost).toBeGreaterThanOrEqual(1);
    expect(sub.logs.some((l) => /no replay endpoint/.test(l))).toBe(true);
  });

  it("an engine that starts over (seq back to 0) clears what was indexed", async () => {
    const { p, where } = await publisher();
    const sub = await subscribe(where);
    await connected(p, sub);
    await p.publish(stream(1));
    await waitFor("batch 1 applied", () => sub.s.lastSeq === BigInt(p.next - 1));
    expect(sub.index.size).toBeGreaterThan(0);
    p.restart();
    const before = sub.batches.length;
    await p.publish(stream(4));
    await sub.seen(before + 1);
    expect(sub.restarts()).toBe(1);
    expect(sub.s.stats.restarts).toBe(1);
    // Batch 4 stores only another KV cache group's block: nothing indexed after the restart.
    expect(sub.index.size).toBe(0);
  });

  it("takes tcp:// and ipc:// endpoints", () => {
    expect(ZMQ_ENDPOINT.test("tcp://127.0.0.1:5557")).toBe(true);
    expect(ZMQ_ENDPOINT.test("tcp://vllm-0.internal:5557")).toBe(true);
    expect(ZMQ_ENDPOINT.test("tcp://[::1]:5557")).toBe(true);
    expect(ZMQ_ENDPOINT.test("ipc:///tmp/kv.sock")).toBe(true);
    expect(ZMQ_ENDPOINT.test("http://127.0.0.1:5557")).toBe(false);
    expect(ZMQ_ENDPOINT.test("tcp://*:5557")).toBe(false);
  });
});
