/**
 * The KV-cache block pool and scheduler, in the manner of vLLM's (v1 KVCacheManager,
 * BlockPool and scheduler) with automatic prefix caching, for the tiny language model
 * (which needs no real KV cache: a trigram has two tokens of context, but an engine that
 * fronts a transformer would hold one, and the proxy and the replica agent read its
 * usage and which prefixes it holds). Pure state, no clock.
 *
 * - The pool has `totalBlocks` blocks of `blockSize` token slots (vLLM: block_size 16,
 *   num_gpu_blocks). A running sequence holding T slots (prompt + generated so far)
 *   holds ceil(T / blockSize) blocks.
 * - Prefix caching: a sequence registered with its token ids names each of its full,
 *   computed blocks by its chained block key (src/prefix/block-keys.ts, with the
 *   request's extra key), once the caller commits them. A sequence being scheduled
 *   reuses the longest chain of named blocks that starts its tokens (at most all but
 *   its last token, as vLLM: the last one is recomputed to get logits) and computes only
 *   the rest. Blocks are ref-counted: one that several sequences share counts once.
 * - A freed block that has a name stays cached ("free cached") until a block is needed
 *   and no plainly free block is left: then the least recently freed is evicted (vLLM's
 *   free block queue; a freed sequence's blocks join it tail first, so a chain is
 *   evicted from its end and its start, shared by more prompts, lasts longest).
 * - New sequences wait (vLLM's waiting queue) by priority, higher first, and in FIFO
 *   order within a priority (priority-order.ts; vLLM's `--scheduling-policy priority`,
 *   in Switchyard's sense of priority) until the first of them fits; nothing overtakes
 *   the head of the queue. With every priority 0 (the default) it is plain FIFO.
 * - A running sequence that grows into a new block when none is free preempts the
 *   running sequence of the lowest priority scheduled most recently (possibly itself):
 *   the victim's blocks are freed (its named ones stay cached) and it goes back to the
 *   front of its priority in the waiting queue, to be rescheduled when blocks free up
 *   and recompute what is no longer cached (vLLM's "recompute" preemption).
 * - With `maxRunning` (vLLM's max_num_seqs), at most that many run; at the bound a
 *   waiting sequence of higher priority than a running one preempts it the same way.
 * - A sequence that needs more blocks than the pool has can never run: `acquire` throws.
 * - Usage is the blocks held by running sequences over all blocks (vLLM's
 *   kv_cache_usage): free cached blocks are free.
 */
import { blockKey, extraLanes, type BlockKey } from "../../prefix/block-keys.ts";
import { enqueueByPriority, preemptionVictim, requeueFirstInPriority } from "./priority-order.ts";

export class SequenceReleased extends Error {
  constructor(id: number) {
    super(`sequence ${id} was released while waiting`);
    this.name = "SequenceReleased";
  }
}

/** What a sequence's blocks hold, so they can be named and found again. */
export interface SequenceContent {
  /** Its token ids so far: the prompt, then what it generated. Read live: the caller appends. */
  readonly ids: readonly number[];
  /** Folded into every block key: the adapter / multiplexed model it names, "" for the base model. */
  readonly extra: string;
}

/** The pool's changes, in order (the engine publishes them as vLLM's KV events). */
export type PoolEvent =
  /** Blocks became cached: consecutive ones of one sequence, `parent` the key before the first. */
  | { type: "stored"; keys: BlockKey[]; parent: BlockKey | undefined; tokenIds: number[]; extra: string }
  /** A free cached block was evicted to make room. */
  | { type: "removed"; keys: BlockKey[] }
  /** The whole prefix cache was dropped. */
  | { type: "cleared" };

export interface KvCacheOptions {
  onEvent?: (event: PoolEvent) => void;
  /**
   * Sequences running at most (vLLM's max_num_seqs; unbounded by default). At the bound,
   * a waiting sequence of higher priority than a running one preempts the lowest-priority
   * running one (scheduled most recently of those), as vLLM's priority scheduling does;
   * one of no higher priority waits for a sequence to end.
   */
  maxRunning?: number;
}

/** What a (re)scheduling found cached: the tokens it need not compute. */
export interface Scheduling {
  cachedTokens: number;
}

interface Block {
  /** Its place in the pool, 0-based (vLLM's block id): what a KV transfer names it by. */
  readonly n: number;
  /** Set while the block is cached (named). */
  key: BlockKey | undefined;
  /** Sequences holding it. */
  ref: number;
}

interface Seq {
  readonly id: number;
  /** Its place in the waiting queue: higher first (priority-order.ts). */
  readonly priority: number;
  /** Token slots wanted (prompt + generated). */
  tokens: number;
  /** Held blocks, in token order (empty while waiting). */
  blocks: Block[];
  state: "waiting" | "running";
  waiter?: { resolve: () => void; reject: (err: Error) => void };
  content?: SequenceContent & { lanes: [number, number] };
  /** Keys of its full blocks computed so far (a chain: extended, never changed). */
  keys: BlockKey[];
  /** Blocks [0, committed) are computed (named, or the same as a named one). */
  committed: number;
  /** Scheduled once already: a rescheduling after preemption is not a new cache query (vLLM counts those apart). */
  started: boolean;
  /** The last (re)scheduling, until the caller takes it. */
  scheduling?: Scheduling;
}

export class KvCacheScheduler {
  readonly totalBlocks: number;
  readonly blockSize: number;
  readonly #onEvent: ((event: PoolEvent) => void) | undefined;
  /** Blocks never handed out yet (made on first use: a pool may be large). */
  #unborn: number;
  /** Plainly free blocks (no name). */
  readonly #plain: Block[] = [];
  /** Free cached blocks, least recently freed first: the eviction order. */
  readonly #evictable = new Set<Block>();
  /** Every named block by key, least recently used first (touched when named, hit or freed). */
  readonly #cached = new Map<BlockKey, Block>();
  /** In scheduling order: of the lowest priority, the last one is preempted first. */
  readonly #running: Seq[] = [];
  /** By priority, FIFO within one; preempted sequences go back to the front of their priority. */
  readonly #waiting: Seq[] = [];
  readonly #seqs = new Map<number, Seq>();
  /** Blocks held by a `pin` (a finished prefill's, until a decode replica reads them), by id. */
  readonly #pinned = new Map<number, { block: Block; pins: number }>();
  #preemptions = 0;
  readonly #maxRunning: number;
  #queries = 0;
  #hits = 0;

  constructor(totalBlocks: number, blockSize = 16, options: KvCacheOptions = {}) {
    if (!Number.isInteger(totalBlocks) || totalBlocks < 1) throw new RangeError(`totalBlocks must be a positive integer, got ${totalBlocks}`);
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new RangeError(`blockSize must be a positive integer, got ${blockSize}`);
    this.totalBlocks = totalBlocks;
    this.blockSize = blockSize;
    this.#unborn = totalBlocks;
    this.#onEvent = options.onEvent;
    this.#maxRunning = options.maxRunning ?? Infinity;
  }

  /** Blocks that `tokens` token slots take. */
  blocksFor(tokens: number): number {
    return Math.ceil(Math.max(tokens, 1) / this.blockSize);
  }

  /** The most tokens one sequence can ever hold: the whole cache. */
  get maxTokens(): number {
    return this.totalBlocks * this.blockSize;
  }

  /**
   * Makes sequence `id` hold `tokens` token slots. Returns undefined when it does at once
   * (it was running and had or got the room, or it was scheduled now), else a promise
   * that resolves when it has been scheduled (or rejects with SequenceReleased if it is
   * released first). A new id joins the waiting queue, behind those of its `priority` or
   * higher; `content` and `priority` (on its first call) let its blocks be cached and
   * found, and order it. Throws RangeError when `tokens` can never fit.
   */
  acquire(id: number, tokens: number, content?: SequenceContent, priority = 0): Promise<void> | undefined {
    if (this.blocksFor(tokens) > this.totalBlocks) {
      throw new RangeError(`${tokens} tokens need ${this.blocksFor(tokens)} blocks of ${this.blockSize}; the KV cache has ${this.totalBlocks}`);
    }
    let seq = this.#seqs.get(id);
    if (!seq) {
      seq = { id, priority, tokens, blocks: [], state: "waiting", keys: [], committed: 0, started: false };
      if (content) seq.content = { ids: content.ids, extra: content.extra, lanes: extraLanes(content.extra) };
      this.#seqs.set(id, seq);
      enqueueByPriority(this.#waiting, seq);
    }
    seq.tokens = tokens;
    const isRunning = (s: Seq) => s.state === "running";
    if (isRunning(seq)) {
      const need = this.blocksFor(tokens) - seq.blocks.length;
      if (need <= 0) return undefined;
      while (this.#available() < need) {
        const victim = preemptionVictim(this.#running)!;
        this.#preempt(victim);
        if (victim === seq) break;
      }
      if (isRunning(seq)) {
        for (let i = 0; i < need; i++) seq.blocks.push(this.#allocate());
        this.#schedule();
        return undefined;
      }
    }
    this.#schedule();
    if (isRunning(seq)) return undefined;
    const waiting = seq;
    return new Promise<void>((resolve, reject) => {
      waiting.waiter = { resolve, reject };
    });
  }

  /**
   * The sequence's held slots are computed (the model ran over them): its full blocks
   * among them become cached, named by their keys. A block whose key another block
   * already has stays unnamed (one cached copy per key). No-op without content.
   */
  commit(id: number): void {
    const seq = this.#seqs.get(id);
    if (!seq || seq.state !== "running" || !seq.content) return;
    const { ids, extra } = seq.content;
    const full = Math.min(Math.floor(seq.tokens / this.blockSize), Math.floor(ids.length / this.blockSize), seq.blocks.length);
    if (full <= seq.committed) return;
    this.#keysUpTo(seq, full);
    let runStart = -1;
    const flush = (end: number) => {
      if (runStart < 0) return;
      const bs = this.blockSize;
      this.#onEvent?.({ type: "stored", keys: seq.keys.slice(runStart, end), parent: runStart === 0 ? undefined : seq.keys[runStart - 1], tokenIds: ids.slice(runStart * bs, end * bs), extra });
      runStart = -1;
    };
    for (let i = seq.committed; i < full; i++) {
      const key = seq.keys[i]!;
      const block = seq.blocks[i]!;
      if (block.key === undefined && !this.#cached.has(key)) {
        block.key = key;
        this.#cached.set(key, block);
        if (runStart < 0) runStart = i;
      } else {
        flush(i);
      }
    }
    flush(full);
    seq.committed = full;
  }

  /** What the sequence's latest (re)scheduling found cached, once: undefined when it has not been (re)scheduled since the last call. */
  takeScheduling(id: number): Scheduling | undefined {
    const seq = this.#seqs.get(id);
    const s = seq?.scheduling;
    if (seq) seq.scheduling = undefined;
    return s;
  }

  /** Frees the sequence's blocks (or takes it out of the queue) and schedules waiting ones. Idempotent. */
  release(id: number): void {
    const seq = this.#seqs.get(id);
    if (!seq) return;
    this.#seqs.delete(id);
    if (seq.state === "running") {
      this.#running.splice(this.#running.indexOf(seq), 1);
      this.#free(seq);
    } else {
      this.#waiting.splice(this.#waiting.indexOf(seq), 1);
    }
    const waiter = seq.waiter;
    seq.waiter = undefined;
    waiter?.reject(new SequenceReleased(id));
    this.#schedule();
  }

  /**
   * Drops every cached block (vLLM's reset_prefix_cache): only while no sequence holds
   * blocks, as vLLM refuses otherwise. Returns whether it did.
   */
  resetPrefixCache(): boolean {
    if (this.#running.length > 0) return false;
    for (const block of this.#evictable) {
      block.key = undefined;
      this.#plain.push(block);
    }
    this.#evictable.clear();
    this.#cached.clear();
    this.#onEvent?.({ type: "cleared" });
    return true;
  }

  /** Sequences holding blocks. */
  get running(): number {
    return this.#running.length;
  }

  /** Sequences waiting for blocks (new or preempted). */
  get waiting(): number {
    return this.#waiting.length;
  }

  /** Blocks held by running sequences (a shared one once). */
  get usedBlocks(): number {
    return this.totalBlocks - this.#available();
  }

  /** Free blocks that still hold a cached prefix (evicted last-freed last). */
  get freeCachedBlocks(): number {
    return this.#evictable.size;
  }

  /** Named blocks, in use or free. */
  get cachedBlocks(): number {
    return this.#cached.size;
  }

  /** Fraction of blocks held by running sequences, 0..1 (vLLM's kv_cache_usage_perc). */
  get usage(): number {
    return this.usedBlocks / this.totalBlocks;
  }

  /** Preemptions since start. */
  get preemptions(): number {
    return this.#preemptions;
  }

  /** Prompt tokens looked up in the prefix cache (first schedulings only; vLLM's prefix_cache_queries). */
  get prefixCacheQueries(): number {
    return this.#queries;
  }

  /** Of those, tokens found cached (vLLM's prefix_cache_hits). */
  get prefixCacheHits(): number {
    return this.#hits;
  }

  /** Keys of the cached blocks, most recently used first (for the cache summary). */
  cachedKeysMostRecentFirst(): BlockKey[] {
    return Array.from(this.#cached.keys()).reverse();
  }

  /** Whether `key` is cached (in use or free). */
  isCached(key: BlockKey): boolean {
    return this.#cached.has(key);
  }

  #available(): number {
    return this.#unborn + this.#plain.length + this.#evictable.size;
  }

  #touch(block: Block): void {
    const key = block.key!;
    this.#cached.delete(key);
    this.#cached.set(key, block);
  }

  /** A block for new tokens: a plainly free one, else a new one, else the least recently freed cached one, evicted. */
  #allocate(): Block {
    const plain = this.#plain.pop();
    if (plain) {
      plain.ref = 1;
      return plain;
    }
    if (this.#unborn > 0) {
      this.#unborn--;
      return { n: this.totalBlocks - this.#unborn - 1, key: undefined, ref: 1 };
    }
    const victim = this.#evictable.values().next().value;
    if (!victim) throw new Error("KV cache over-commit: no free block (a bug: callers check #available first)");
    this.#evictable.delete(victim);
    const key = victim.key!;
    this.#cached.delete(key);
    victim.key = undefined;
    victim.ref = 1;
    this.#onEvent?.({ type: "removed", keys: [key] });
    return victim;
  }

  /** Drops the sequence's hold on its blocks, last block first (the eviction order's tail-first rule). */
  #free(seq: Seq): void {
    this.#unref(seq.blocks);
    seq.blocks = [];
    seq.committed = 0;
  }

  /** Drops one hold on each of `blocks`, last first: a block no one holds is free (cached if named). */
  #unref(blocks: readonly Block[]): void {
    for (let i = blocks.length - 1; i >= 0; i--) {
      const block = blocks[i]!;
      if (--block.ref > 0) continue;
      if (block.key !== undefined) {
        this.#evictable.add(block);
        this.#touch(block);
      } else {
        this.#plain.push(block);
      }
    }
  }

  /**
   * Keeps the sequence's computed blocks within its first `tokens` tokens (its prompt's
   * full blocks) held past its release, for a decode replica to read (prefill/decode
   * disaggregation: vLLM's NixlConnector delays freeing a finished prefill's blocks the
   * same way). Returns their ids, in token order, or [] when none is computed. Call before
   * `release`; `unpin` with the ids ends the hold.
   */
  pin(id: number, tokens: number): number[] {
    const seq = this.#seqs.get(id);
    if (!seq || seq.state !== "running" || !seq.content) return [];
    const n = Math.min(seq.committed, Math.floor(tokens / this.blockSize));
    const blocks = seq.blocks.slice(0, n);
    for (const b of blocks) {
      b.ref++;
      const p = this.#pinned.get(b.n);
      if (p) p.pins++;
      else this.#pinned.set(b.n, { block: b, pins: 1 });
    }
    return blocks.map((b) => b.n);
  }

  /** The keys of pinned blocks `ids`, in order (undefined if one is not pinned). */
  pinnedKeys(ids: readonly number[]): BlockKey[] | undefined {
    const out: BlockKey[] = [];
    for (const n of ids) {
      const key = this.#pinned.get(n)?.block.key;
      if (key === undefined) return undefined;
      out.push(key);
    }
    return out;
  }

  /** Blocks held by pins now. */
  get pinnedBlocks(): number {
    return this.#pinned.size;
  }

  /** Ends one `pin`'s hold on blocks `ids` (the ids that pin returned; call once per pin). */
  unpin(ids: readonly number[]): void {
    const blocks: Block[] = [];
    for (const n of ids) {
      const p = this.#pinned.get(n);
      if (!p) continue;
      blocks.push(p.block);
      if (--p.pins === 0) this.#pinned.delete(n);
    }
    this.#unref(blocks);
    this.#schedule();
  }

  /**
   * Blocks computed elsewhere (a prefill replica's, read by a decode replica): the full
   * blocks of `ids` (with `extra`'s lanes) become cached here, named as this pool names
   * them, as if a sequence had computed and freed them; ones already cached are touched.
   * Imports only into free blocks (plain, new, or evicting the least recently freed), and
   * stops when none is left. Returns how many of its blocks are cached now.
   */
  importBlocks(ids: readonly number[], extra: string): number {
    const lanes = extraLanes(extra);
    const bs = this.blockSize;
    const full = Math.floor(ids.length / bs);
    const keys: BlockKey[] = [];
    for (let i = 0; i < full; i++) keys.push(blockKey(keys[i - 1], ids, i * bs, lanes, bs));
    // This chain's free blocks: a new block must not evict one of them.
    let mine = 0;
    for (const k of keys) if (this.#cached.get(k)?.ref === 0) mine++;
    let runStart = -1;
    const flush = (end: number) => {
      if (runStart < 0) return;
      this.#onEvent?.({ type: "stored", keys: keys.slice(runStart, end), parent: runStart === 0 ? undefined : keys[runStart - 1], tokenIds: ids.slice(runStart * bs, end * bs), extra });
      runStart = -1;
    };
    let i = 0;
    for (; i < full; i++) {
      const key = keys[i]!;
      const have = this.#cached.get(key);
      if (have) {
        flush(i);
        if (have.ref === 0) {
          // Last in the eviction order too.
          this.#evictable.delete(have);
          this.#evictable.add(have);
        }
        this.#touch(have);
        continue;
      }
      if (this.#available() - mine <= 0) break;
      const block = this.#allocate();
      block.ref = 0;
      block.key = key;
      this.#cached.set(key, block);
      this.#evictable.add(block);
      mine++;
      if (runStart < 0) runStart = i;
    }
    flush(i);
    return i;
  }

  #keysUpTo(seq: Seq, n: number): void {
    const { ids, lanes } = seq.content!;
    for (let i = seq.keys.length; i < n; i++) seq.keys.push(blockKey(seq.keys[i - 1], ids, i * this.blockSize, lanes, this.blockSize));
  }

  /** The cached blocks that start the sequence's tokens (at most all but its last token). */
  #hitsFor(seq: Seq): Block[] {
    if (!seq.content) return [];
    const max = Math.min(Math.floor((seq.tokens - 1) / this.blockSize), Math.floor(seq.content.ids.length / this.blockSize));
    const hits: Block[] = [];
    for (let i = 0; i < max; i++) {
      if (i === seq.keys.length) this.#keysUpTo(seq, i + 1);
      const block = this.#cached.get(seq.keys[i]!);
      if (!block) break;
      hits.push(block);
    }
    return hits;
  }

  #preempt(seq: Seq): void {
    this.#running.splice(this.#running.indexOf(seq), 1);
    this.#free(seq);
    seq.state = "waiting";
    seq.scheduling = undefined;
    requeueFirstInPriority(this.#waiting, seq);
    this.#preemptions++;
  }

  #schedule(): void {
    while (this.#waiting.length > 0) {
      const head = this.#waiting[0]!;
      if (this.#running.length >= this.#maxRunning) {
        const victim = preemptionVictim(this.#running);
        if (!victim || victim.priority >= head.priority) return;
        this.#preempt(victim); // requeued behind the head, whose priority is higher
      }
      const hits = this.#hitsFor(head);
      // Hit blocks nobody holds leave the free pool too.
      const freedByHits = hits.reduce((n, b) => n + (b.ref === 0 ? 1 : 0), 0);
      const fresh = this.blocksFor(head.tokens) - hits.length;
      if (fresh > this.#available() - freedByHits) return;
      this.#waiting.shift();
      for (const block of hits) {
        if (block.ref === 0) this.#evictable.delete(block);
        block.ref++;
        this.#touch(block);
      }
      const cachedTokens = hits.length * this.blockSize;
      head.blocks = hits;
      head.committed = hits.length;
      for (let i = 0; i < fresh; i++) head.blocks.push(this.#allocate());
      head.state = "running";
      head.scheduling = { cachedTokens };
      if (!head.started && head.content) {
        this.#queries += head.tokens;
        this.#hits += cachedTokens;
      }
      head.started = true;
      this.#running.push(head);
      const waiter = head.waiter;
      head.waiter = undefined;
      waiter?.resolve();
    }
  }
}
