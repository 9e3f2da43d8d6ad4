/**
 * bench/prefix-cache/prefix-cache.ts's oracle index, fed by KvEventFollower (bench/prefix-cache/prefix-cache-oracle.ts),
 * against the same vLLM-format KV event batches as the agent's own index
 * (test/fixtures/kv-events/agent-*.msgpack): the oracle must name and drop blocks
 * exactly as the replica agent does.
 */
import { readFileSync } from "node:fs";
import { describe, expect, it } from "vitest";
import { ExactPrefixIndex, KvEventFollower } from "../../bench/prefix-cache/prefix-cache-oracle.ts";
import { EnginePrefixIndex } from "../../src/agent/engine-prefix-index.ts";
import { blockKeys } from "../../src/prefix/block-keys.ts";
import { decodeKvEventBatch } from "../../src/prefix/kv-events.ts";

const fixture = (name: string) => decodeKvEventBatch(new Uint8Array(readFileSync(new URL(`../fixtures/kv-events/${name}`, import.meta.url))));

interface Meaning {
  batches: number;
  prompts: Record<string, { tokens: number[]; lora: string | null; held_blocks: number[]; evicted_blocks: number[] }>;
  held: number;
}
const meaning = JSON.parse(readFileSync(new URL("../fixtures/kv-events/agent-stream.json", import.meta.url), "utf8")) as Meaning;
const stream = Array.from({ length: meaning.batches }, (_, i) => fixture(`agent-stream-${i}.msgpack`));

function followed(): { index: ExactPrefixIndex; follower: KvEventFollower } {
  const index = new ExactPrefixIndex();
  const follower = new KvEventFollower("r1", index);
  for (const b of stream) for (const e of b.events) follower.follow(e);
  return { index, follower };
}

describe("KvEventFollower (the prefix-cache bench's oracle index)", () => {
  it("holds exactly the blocks the agent's index holds, under the keys an edge computes", () => {
    const { index } = followed();
    for (const [name, p] of Object.entries(meaning.prompts)) {
      const keys = blockKeys(p.tokens, { extra: p.lora ?? "" });
      for (const i of p.held_blocks) expect(index.heldPrefix("r1", [keys[i]!]), `${name} block ${i} held`).toBe(1);
      for (const i of p.evicted_blocks) expect(index.heldPrefix("r1", [keys[i]!]), `${name} block ${i} evicted`).toBe(0);
    }
    expect(index.blocks("r1")).toBe(meaning.held);
    const agent = new EnginePrefixIndex();
    for (const b of stream) agent.apply(b);
    expect(new Set(agent.keysMostRecentFirst()).size).toBe(index.blocks("r1"));
  });

  it("counts what it stored, removed and could not name", () => {
    const { follower, index } = followed();
    expect(follower.orphans).toBe(2);
    expect(follower.stored - follower.removed).toBeGreaterThanOrEqual(index.blocks("r1"));
    expect(follower.removed).toBeGreaterThan(0);
  });

  it("forgets the replica's blocks on AllBlocksCleared", () => {
    const { index, follower } = followed();
    follower.follow({ type: "AllBlocksCleared" });
    expect(index.blocks("r1")).toBe(0);
  });
});
