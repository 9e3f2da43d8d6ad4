/**
 * KV-cache accounting and scheduling in the manner of vLLM's scheduler, for the tiny
 * language model (which has no real KV cache: a trigram needs two tokens of context,
 * but an engine that fronts a transformer would hold one, and the proxy and the replica
 * agent read its usage). Pure state, no clock.
 *
 * - The cache has `totalBlocks` blocks of `blockSize` token slots (vLLM: block_size 16,
 *   num_gpu_blocks). A running sequence holding T tokens (prompt + generated so far)
 *   holds ceil(T / blockSize) blocks.
 * - New sequences wait in FIFO order (vLLM's waiting queue) until the first of them
 *   fits; nothing overtakes the head of the queue.
 * - A running sequence that grows into a new block when none is free preempts the most
 *   recently scheduled running sequence (possibly itself): the victim's blocks are
 *   freed and it goes back to the front of the waiting queue, to be rescheduled (and its
 *   tokens recomputed, vLLM's "recompute" preemption) when blocks free up.
 * - A sequence that needs more blocks than the cache has can never run: `acquire` throws.
 */

export class SequenceReleased extends Error {
  constructor(id: number) {
    super(`sequence ${id} was released while waiting`);
    this.name = "SequenceReleased";
  }
}

interface Seq {
  readonly id: number;
  /** Token slots wanted (prompt + generated). */
  tokens: number;
  /** Blocks held (0 while waiting). */
  blocks: number;
  state: "waiting" | "running";
  waiter?: { resolve: () => void; reject: (err: Error) => void };
}

export class KvCacheScheduler {
  readonly totalBlocks: number;
  readonly blockSize: number;
  #free: number;
  /** In scheduling order: the last one is preempted first. */
  readonly #running: Seq[] = [];
  /** FIFO; preempted sequences go back to the front. */
  readonly #waiting: Seq[] = [];
  readonly #seqs = new Map<number, Seq>();
  #preemptions = 0;

  constructor(totalBlocks: number, blockSize = 16) {
    if (!Number.isInteger(totalBlocks) || totalBlocks < 1) throw new RangeError(`totalBlocks must be a positive integer, got ${totalBlocks}`);
    if (!Number.isInteger(blockSize) || blockSize < 1) throw new RangeError(`blockSize must be a positive integer, got ${blockSize}`);
    this.totalBlocks = totalBlocks;
    this.blockSize = blockSize;
    this.#free = totalBlocks;
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
   * (it was running and had or got the room), else a promise that resolves when it has
   * been scheduled (or rejects with SequenceReleased if it is released first). A new id
   * joins the waiting queue. Throws RangeError when `tokens` can never fit.
   */
  acquire(id: number, tokens: number): Promise<void> | undefined {
    if (this.blocksFor(tokens) > this.totalBlocks) {
      throw new RangeError(`${tokens} tokens need ${this.blocksFor(tokens)} blocks of ${this.blockSize}; the KV cache has ${this.totalBlocks}`);
    }
    let seq = this.#seqs.get(id);
    if (!seq) {
      seq = { id, tokens, blocks: 0, state: "waiting" };
      this.#seqs.set(id, seq);
      this.#waiting.push(seq);
    }
    seq.tokens = tokens;
    const isRunning = (s: Seq) => s.state === "running";
    if (isRunning(seq)) {
      const need = this.blocksFor(tokens) - seq.blocks;
      if (need <= 0) return undefined;
      while (this.#free < need) {
        const victim = this.#running[this.#running.length - 1]!;
        this.#preempt(victim);
        if (victim === seq) break;
      }
      if (isRunning(seq)) {
        this.#free -= need;
        seq.blocks += need;
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

  /** Frees the sequence's blocks (or takes it out of the queue) and schedules waiting ones. Idempotent. */
  release(id: number): void {
    const seq = this.#seqs.get(id);
    if (!seq) return;
    this.#seqs.delete(id);
    if (seq.state === "running") {
      this.#running.splice(this.#running.indexOf(seq), 1);
      this.#free += seq.blocks;
      seq.blocks = 0;
    } else {
      this.#waiting.splice(this.#waiting.indexOf(seq), 1);
    }
    const waiter = seq.waiter;
    seq.waiter = undefined;
    waiter?.reject(new SequenceReleased(id));
    this.#schedule();
  }

  /** Sequences holding blocks. */
  get running(): number {
    return this.#running.length;
  }

  /** Sequences waiting for blocks (new or preempted). */
  get waiting(): number {
    return this.#waiting.length;
  }

  get usedBlocks(): number {
    return this.totalBlocks - this.#free;
  }

  /** Fraction of blocks in use, 0..1 (vLLM's kv_cache_usage_perc). */
  get usage(): number {
    return this.usedBlocks / this.totalBlocks;
  }

  /** Preemptions since start. */
  get preemptions(): number {
    return this.#preemptions;
  }

  #preempt(seq: Seq): void {
    this.#running.splice(this.#running.indexOf(seq), 1);
    this.#free += seq.blocks;
    seq.blocks = 0;
    seq.state = "waiting";
    this.#waiting.unshift(seq);
    this.#preemptions++;
  }

  #schedule(): void {
    while (this.#waiting.length > 0) {
      const head = this.#waiting[0]!;
      const need = this.blocksFor(head.tokens);
      if (need > this.#free) return;
      this.#waiting.shift();
      this.#free -= need;
      head.blocks = need;
      head.state = "running";
      this.#running.push(head);
      const waiter = head.waiter;
      head.waiter = undefined;
      waiter?.resolve();
    }
  }
}
