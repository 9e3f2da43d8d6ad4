// @ts-nocheck
// The reference LLM replica's prefix cache end to end: the real replica process
// (`--backend llm --standalone`) with a small KV cache, prefill paced per uncached token,
// and vLLM's KV events on ZMQ, read as a subscriber of a vLLM engine reads them (a SUB
// socket on the PUB endpoint, a DEALER on the replay endpoint, src/prefix/kv-events.ts
// decoding). A repeated prompt hits (vllm:prefix_cache_hits), its blocks are announced
// with the keys an edge computes (blockKeys over encode(chatPrompt(messages)), the
// model header as extra key), replay from a sequence number resends what the SUB saw,
// and a full cache evicts with BlockRemoved, a chain's tail first.
import { spawn, type ChildProcess } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { Dealer, Subscriber } from "zeromq";
import { blockKeys, keyToBigInt } from "../../src/prefix/block-keys.ts";
import { blockHashText, encodeSeq, parseKvEventMessage, parseReplayReply, type BlockStored, type KvEventMessage } from "../../src/prefix/kv-events.ts";
import { chatPrompt } from "../../src/prompt/tiny-lm-chat-template.ts";
import { encode } from "../../src/prompt/tiny-lm-tokenizer.ts";
import { parsePrometheusText } from "../../src/telemetry/prometheus-parse.ts";

const ROOT = join(import.meta.dirname, "../..");
const KV_BLOCKS = 8; // 128 tokens: a few prompts fill it
const TOPIC = "kv-events";

let child: ChildProcess;
let url: string;
let pubEndpoint: string;
let replayEndpoint: string;
const logs: string[] = [];
let sub: Subscriber;
/** Every message the SUB socket received, in order. */
const received: KvEventMessage[] = [];
/** Raw payload per seq, to compare with replays. */
const payloads = new Map<bigint, Buffer>();

beforeAll(async () => {
  child = spawn(
    process.execPath,
    ["--import", "tsx", "src/replica-entry.ts", "--backend", "llm", "--model", "tiny-lm", "--standalone", "--deployment", "llm", "--port", "0",
      "--kv-blocks", String(KV_BLOCKS), "--prefill-token-us", "200", "--max-ongoing", "4",
      "--kv-events-endpoint", "tcp://127.0.0.1:0", "--kv-events-replay-endpoint", "tcp://127.0.0.1:0", "--kv-events-topic", TOPIC],
    { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, SWITCHYARD_REPLICA_KEY: "" } },
  );
  child.stderr!.on("data", (d: Buffer) => logs.push(d.toString()));
  await new Promise<void>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`replica did not start: ${logs.join("")}`)), 60_000);
    child.once("exit", (code) => reject(new Error(`replica exited (${code}): ${logs.join("")}`)));
    createInterface({ input: child.stdout! }).on("line", (line) => {
      const ev = JSON.parse(line) as { event?: string; url?: string; endpoint?: string; replay_endpoint?: string };
      if (ev.event === "kv_events") {
        pubEndpoint = ev.endpoint!;
        replayEndpoint = ev.replay_endpoint!;
      }
      if (ev.event === "listening" && ev.url) {
        clearTimeout(timer);
        url = ev.url;
        resolve();
      }
    });
  });
  expect(pubEndpoint).toMatch(/^tcp:\/\/127\.0\.0\.1:\d+$/);
  sub = new Subscriber();
  sub.connect(pubEndpoint);
  sub.subscribe(TOPIC);
  void (async () => {
    for await (const frames of sub) {
      received.push(parseKvEventMessage(frames));
      payloads.set(received.at(-1)!.seq, Buffer.from(frames[2]!));
    }
  })().catch(() => undefined);
});

afterAll(async () => {
  sub?.close();
  if (child && child.exitCode === null) {
    const exited = new Promise((r) => child.once("exit", r));
    child.kill("SIGTERM");
    await exited;
  }
});

const post = (path: string, body: unknown, headers: Record<string, string> = {}) =>
  fetch(`${url}${path}`, { method: "POST", headers: { "content-type": "application/json", ...headers }, body: JSON.stringify(body) }).then(async (res) => {
    expect(res.status, await res.clone().text()).toBe(200);
    return res.json();
  });

async function counter(name: string): Promise<number> {
  const text = await (await fetch(`${url}/metrics`)).text();
  const s = parsePrometheusText(text).samples.find((x) => x.name === name && x.labels.model_name === "tiny-lm" && x.labels.engine === "0");
  if (!s) throw new Error(`no ${name} in /metrics`);
  return s.value;
}

async function until(ok: () => boolean, what: string, ms = 10_000): Promise<void> {
  const deadline = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > deadline) throw new Error(`${what}: not within ${ms} ms`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** What the replay socket answers from `from` on: the batches it holds, up to its end marker. */
async function replay(from: bigint): Promise<{ seq: bigint; payload: Buffer; message: KvEventMessage }[]> {
  const dealer = new Dealer();
  dealer.connect(replayEndpoint);
  try {
    await dealer.send(["", encodeSeq(from)]);
    const out: { seq: bigint; payload: Buffer; message: KvEventMessage }[] = [];
    for (;;) {
      const frames = await dealer.receive();
      const reply = parseReplayReply(frames);
      if (reply.end) return out;
      out.push({ seq: reply.seq, payload: Buffer.from(frames[2]!), message: { topic: TOPIC, seq: reply.seq, batch: reply.batch } });
    }
  } finally {
    dealer.close();
  }
}

const storedEvents = () => received.flatMap((m) => m.batch.events.filter((e): e is BlockStored => e.type === "BlockStored").map((e) => ({ seq: m.seq, e })));
const removedHashes = () => received.flatMap((m) => m.batch.events.flatMap((e) => (e.type === "BlockRemoved" ? e.blockHashes.map(blockHashText) : [])));

// 85 tokens: five full blocks and a partial one, which the two generated tokens do not fill.
const messages = [{ role: "user", content: "Summarise the routing design of the edge proxy in two short lines!!" }];
const prompt = encode(chatPrompt(messages));

describe("LLM replica prefix cache and KV events", () => {
  it("publishes on the SUB socket once it is subscribed (ZMQ's late joiner misses what came before)", async () => {
    expect(prompt).toHaveLength(85);
    // Each warm-up caches a block and so publishes a batch; the first that arrives shows the subscription is live.
    for (let i = 0; received.length === 0; i++) {
      if (i === 100) throw new Error("the SUB socket received nothing");
      await post("/v1/completions", { model: "tiny-lm", prompt: `warm-up prompt number ${i}`, max_tokens: 1, temperature: 0 });
      await new Promise((r) => setTimeout(r, 20));
    }
    // Sequence numbers count batches from 0, one apart.
    const seqs = received.map((m) => m.seq);
    expect(seqs).toEqual(seqs.map((_, i) => seqs[0]! + BigInt(i)));
  });

  it("a repeated prompt hits the prefix cache; its blocks are announced with the edge's block keys", async () => {
    const queries0 = await counter("vllm:prefix_cache_queries_total");
    const hits0 = await counter("vllm:prefix_cache_hits_total");
    const before = received.length;
    await post("/v1/chat/completions", { model: "tiny-lm", messages, max_tokens: 2, temperature: 0 });
    const keys = blockKeys(prompt);
    expect(keys).toHaveLength(5);
    await until(() => storedEvents().some(({ e }) => blockHashText(e.blockHashes[0]!) === keys[0]), "BlockStored for the prompt");
    const { seq, e } = storedEvents().find(({ e }) => blockHashText(e.blockHashes[0]!) === keys[0])!;
    // A warm-up's batch may still have been on its way: later than what came before, not necessarily next.
    expect(seq).toBeGreaterThan(received[before - 1]!.seq);
    expect(e).toEqual({
      type: "BlockStored",
      blockHashes: keys.map(keyToBigInt),
      parentBlockHash: null,
      tokenIds: prompt.slice(0, 80),
      blockSize: 16,
      loraId: null,
      medium: "GPU",
      loraName: null,
      extraKeys: [null, null, null, null, null],
      groupIdx: 0,
      kvCacheSpecKind: "full_attention",
      kvCacheSpecSlidingWindow: null,
    });
    expect(await counter("vllm:prefix_cache_hits_total")).toBe(hits0);

    await post("/v1/chat/completions", { model: "tiny-lm", messages, max_tokens: 2, temperature: 0 });
    // The second time all five full blocks were cached: 80 of its 85 tokens were not computed.
    expect(await counter("vllm:prefix_cache_hits_total")).toBe(hits0 + 80);
    expect(await counter("vllm:prefix_cache_queries_total")).toBe(queries0 + 2 * 85);
  });

  it("the model header is the blocks' extra key: another adapter's prompt does not hit, and is announced with its name", async () => {
    const hits0 = await counter("vllm:prefix_cache_hits_total");
    await post("/v1/chat/completions", { model: "tiny-lm", messages, max_tokens: 2, temperature: 0 }, { "x-switchyard-model": "chat-lora" });
    expect(await counter("vllm:prefix_cache_hits_total")).toBe(hits0);
    const keys = blockKeys(prompt, { extra: "chat-lora" });
    await until(() => storedEvents().some(({ e }) => e.loraName === "chat-lora"), "BlockStored for the adapter's blocks");
    const { e } = storedEvents().find(({ e }) => e.loraName === "chat-lora")!;
    expect(e.blockHashes.map(blockHashText)).toEqual(keys);
    expect(e.extraKeys).toEqual(keys.map(() => ["chat-lora"]));
  });

  it("a full cache evicts least recently freed blocks with BlockRemoved, a chain's tail first", async () => {
    // Two other 100-token prompts of 7 blocks each: 14 blocks through a cache of 8 evict everything older.
    for (const c of ["q", "z"]) {
      await post("/v1/completions", { model: "tiny-lm", prompt: c.repeat(100), max_tokens: 2, temperature: 0 });
    }
    const baseKeys = blockKeys(prompt);
    await until(() => baseKeys.every((k) => removedHashes().includes(k)), "BlockRemoved for every block of the first prompt");
    // Only what was announced is removed (every batch from 0, replayed: the SUB may have joined late), and the first prompt's chain goes from its end.
    const stored = new Set((await replay(0n)).flatMap(({ message }) => message.batch.events.flatMap((e) => (e.type === "BlockStored" ? e.blockHashes.map(blockHashText) : []))));
    for (const h of removedHashes()) expect(stored.has(h), h).toBe(true);
    expect(removedHashes().filter((h) => baseKeys.includes(h))).toEqual([...baseKeys].reverse());
  });

  it("replays buffered batches from a sequence number, then the end marker, as vLLM's ROUTER socket does", async () => {
    const from = storedEvents().find(({ e }) => blockHashText(e.blockHashes[0]!) === blockKeys(prompt)[0])!.seq;
    const last = received.at(-1)!.seq;
    const replies = await replay(from);
    expect(replies[0]!.seq).toBe(from);
    expect(replies.length).toBeGreaterThanOrEqual(Number(last - from) + 1);
    expect(replies.map((r) => r.seq)).toEqual(replies.map((_, i) => from + BigInt(i)));
    // The same bytes the SUB socket got for each seq it saw.
    for (const r of replies) if (payloads.has(r.seq)) expect(r.payload.equals(payloads.get(r.seq)!)).toBe(true);
    // From 0: everything since the start, the batches the SUB missed before it joined too.
    const all = await replay(0n);
    expect(all[0]!.seq).toBe(0n);
    expect(all.at(-1)!.seq).toBeGreaterThanOrEqual(last);
  });
});
