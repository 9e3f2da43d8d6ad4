/**
 * What an engine's prefix cache holds, rebuilt from its KV events (vLLM's, or
 * SGLang's, which are the same batches; src/prefix/kv-events.ts decodes them),
 * under Switchyard's block keys. The engine names a block by its own hash (sha256
 * with a per-process seed by default), which no edge could compute; a
 * BlockStored event carries the blocks' token ids, so the index renames each
 * block: key_i = blockKey(key of its parent, its tokens, extraLanes(lora_name ?? "")),
 * the same key an edge computes from the prompt (src/prefix/block-keys.ts). It
 * keeps a map engine hash → key:
 *
 * - a block whose parent is null starts a chain; one whose parent the index does
 *   not know (stored before the agent listened, or under extra keys it cannot
 *   name) is skipped, with the rest of its event: its key cannot be computed;
 * - blocks with extra keys beyond the LoRA name (multimodal inputs, a cache salt)
 *   are skipped too: an edge names the prompt's text, so their key would claim
 *   blocks a request without those inputs cannot reuse; so are an adapter's blocks
 *   named only by lora_id (older engines), which would pass for the base model's;
 * - BlockRemoved deletes (per medium: a block offloaded to CPU is still held
 *   while its CPU copy is), AllBlocksCleared clears;
 * - only the first KV cache group is indexed (hybrid models publish one per group;
 *   a prefix hit needs the full-attention group, group 0);
 * - a block size other than BLOCK_TOKENS (16) disables the index for good: the
 *   edge's keys would never match (`disabled` says why, `summary()` gives none).
 *
 * Order is least recently stored first (a re-store touches), bounded by
 * `maxBlocks`; the summary takes the most recent ones. Pure: no I/O.
 */
// @ts-nocheck

import { BLOCK_TOKENS, blockKey, extraLanes, type BlockKey } from "../prefix/block-keys.ts";
import { buildCacheSummary, type CacheSummaryWire } from "../prefix/cache-summary.ts";
import { blockHashText, type BlockStored, type KvCacheEvent, type KvEventBatch } from "../prefix/kv-events.ts";

/** Most blocks the index keeps (an engine with a larger cache keeps its most recent ones here). */
export const INDEX_MAX_BLOCKS = 200_000;

interface Held {
  key: BlockKey;
  /** Media holding it, one bit each (GPU, CPU, ...). */
  media: number;
}

export interface EnginePrefixIndexStats {
  stored: number;
  removed: number;
  cleared: number;
  /** Blocks left out because their parent was unknown. */
  unknownParent: number;
  /** Blocks left out for extra keys an edge cannot name. */
  extraKeys: number;
  /** Events of other KV cache groups, left out. */
  otherGroups: number;
  /** Events whose token ids did not match their blocks. */
  malformed: number;
}

export class EnginePrefixIndex {
  readonly #maxBlocks: number;
  readonly #log: (msg: string) => void;
  /** Engine hash (blockHashText) → what it holds; Map order is least recently stored first. */
  readonly #blocks = new Map<string, Held>();
  readonly #media = new Map<string, number>();
  readonly #lanes = new Map<string, readonly [number, number]>();
  #disabled: string | undefined;
  #summary: CacheSummaryWire | undefined;
  #dirty = true;
  readonly #said = new Set<string>();
  readonly stats: EnginePrefixIndexStats = { stored: 0, removed: 0, cleared: 0, unknownParent: 0, extraKeys: 0, otherGroups: 0, malformed: 0 };

  constructor(options: { maxBlocks?: number; log?: (msg: string) => void } = {}) {
    this.#maxBlocks = options.maxBlocks ?? INDEX_MAX_BLOCKS;
    this.#log = options.log ?? (() => undefined);
  }

  /** Why the index gives no summary (set once, for good), or undefined. */
  get disabled(): string | undefined {
    return this.#disabled;
  }

  /** Blocks held. */
  get size(): number {
    return this.#blocks.size;
  }

  /** The key a block of the engine has here, if held. */
  keyOf(engineHash: bigint | Uint8Array): BlockKey | undefined {
    return this.#blocks.get(blockHashText(engineHash))?.key;
  }

  /** Every key held, most recently stored first. */
  keysMostRecentFirst(): BlockKey[] {
    const out = Array.from(this.#blocks.values(), (h) => h.key);
    return out.reverse();
  }

  apply(batch: KvEventBatch): void {
    for (const e of batch.events) this.applyEvent(e);
  }

  applyEvent(e: KvCacheEvent): void {
    if (this.#disabled) return;
    switch (e.type) {
      case "BlockStored":
        this.#stored(e);
        return;
      case "BlockRemoved": {
        if (!this.#firstGroup(e.groupIdx)) return;
        const bit = e.medium === null ? -1 : this.#mediumBit(e.medium);
        for (const h of e.blockHashes) {
          const text = blockHashText(h);
          const held = this.#blocks.get(text);
          if (!held) continue;
          held.media &= ~bit;
          if (held.media === 0) {
            this.#blocks.delete(text);
            this.stats.removed++;
            this.#dirty = true;
          }
        }
        return;
      }
      case "AllBlocksCleared":
        this.clear();
        this.stats.cleared++;
    }
  }

  /** Forgets everything (AllBlocksCleared, or the engine restarted: its cache is empty). */
  clear(): void {
    if (this.#blocks.size > 0) this.#dirty = true;
    this.#blocks.clear();
  }

  /** The summary to report (src/prefix/cache-summary.ts), rebuilt only after a change; undefined when disabled. */
  summary(): CacheSummaryWire | undefined {
    if (this.#disabled) return undefined;
    if (this.#dirty || !this.#summary) {
      this.#summary = buildCacheSummary(this.keysMostRecentFirst(), BLOCK_TOKENS);
      this.#dirty = false;
    }
    return this.#summary;
  }

  #stored(e: BlockStored): void {
    if (e.blockSize !== BLOCK_TOKENS) {
      this.#disabled = `the engine's KV blocks are ${e.blockSize} tokens; prefix summaries need ${BLOCK_TOKENS} (vLLM --block-size ${BLOCK_TOKENS}): reporting none`;
      this.#log(this.#disabled);
      this.#blocks.clear();
      this.#summary = undefined;
      return;
    }
    if (!this.#firstGroup(e.groupIdx)) return;
    if (e.tokenIds.length !== e.blockHashes.length * e.blockSize) {
      this.stats.malformed++;
      this.#once("malformed", `a BlockStored event has ${e.tokenIds.length} token ids for ${e.blockHashes.length} blocks of ${e.blockSize}: left out`);
      return;
    }
    let parent: BlockKey | undefined;
    if (e.parentBlockHash !== null) {
      parent = this.#blocks.get(blockHashText(e.parentBlockHash))?.key;
      if (parent === undefined) {
        this.stats.unknownParent += e.blockHashes.length;
        return;
      }
    }
    // An adapter named only by its number (engines before lora_name, vLLM #27577): its
    // blocks hold the adapter's KV for the same tokens as the base model's; keyed as the
    // base model's they would claim hits a base request cannot have. Left out.
    if (e.loraName === null && e.loraId !== null) {
      this.stats.extraKeys += e.blockHashes.length;
      this.#once("lora-id", "blocks of a LoRA adapter named only by lora_id (no lora_name: an older engine) are left out of the summary: an edge names adapters by name");
      return;
    }
    const lora = e.loraName ?? "";
    const extra = this.#lanesOf(lora);
    const bit = this.#mediumBit(e.medium ?? "GPU");
    for (let i = 0; i < e.blockHashes.length; i++) {
      if (!nameable(e.extraKeys?.[i] ?? null, lora)) {
        this.stats.extraKeys += e.blockHashes.length - i;
        this.#once("extra", "blocks with extra keys beyond the LoRA name (multimodal inputs, a cache salt) are left out of the summary: an edge cannot name them");
        return;
      }
      const key = blockKey(parent, e.tokenIds, i * e.blockSize, extra, e.blockSize);
      const text = blockHashText(e.blockHashes[i]!);
      const held = this.#blocks.get(text);
      // Re-inserted: most recently stored now.
      this.#blocks.delete(text);
      this.#blocks.set(text, { key, media: (held && held.key === key ? held.media : 0) | bit });
      this.stats.stored++;
      parent = key;
    }
    this.#dirty = true;
    while (this.#blocks.size > this.#maxBlocks) this.#blocks.delete(this.#blocks.keys().next().value!);
  }

  /** Group 0 (or none named): the full-attention group a prefix hit needs. */
  #firstGroup(groupIdx: number | null): boolean {
    if (groupIdx === null || groupIdx === 0) return true;
    this.stats.otherGroups++;
    return false;
  }

  #mediumBit(medium: string): number {
    let i = this.#media.get(medium);
    if (i === undefined) {
      i = Math.min(this.#media.size, 30);
      this.#media.set(medium, i);
    }
    return 1 << i;
  }

  #lanesOf(extra: string): readonly [number, number] {
    let l = this.#lanes.get(extra);
    if (!l) {
      l = extraLanes(extra);
      if (this.#lanes.size < 1024) this.#lanes.set(extra, l);
    }
    return l;
  }

  #once(what: string, msg: string): void {
    if (this.#said.has(what)) return;
    this.#said.add(what);
    this.#log(msg);
  }
}

/** Whether a block's extra keys are what an edge names too: none, or the LoRA name alone. */
function nameable(keys: unknown[] | null, lora: string): boolean {
  if (keys === null || keys.length === 0) return true;
  return lora !== "" && keys.every((k) => k === lora);
}
