/**
 * An engine's prefill compute as one lane: prefills run one at a time, higher priority
 * first and first come first served within a priority (priority-order.ts), each holding
 * the lane for its own time on a timer (no CPU is spent). This is
 * how a GPU's prefill contends (a busy engine queues the prompts it has to compute,
 * while its decoding requests keep their pace), which makes a prefix-cache hit, with
 * fewer tokens to compute, both shorter and less in the way of others.
 */
import { enqueueByPriority } from "./priority-order.ts";

export class PrefillLaneAborted extends Error {
  constructor() {
    super("prefill aborted");
    this.name = "PrefillLaneAborted";
  }
}

interface Turn {
  readonly priority: number;
  start(): void;
}

export class PrefillLane {
  readonly #queue: Turn[] = [];
  #busy = false;
  /** Settles when the prefill on the lane now ends (undefined while none is). */
  #turnEnd: { promise: Promise<void>; resolve: () => void } | undefined;

  /** Resolves when the prefill holding the lane now ends: at once when none does. */
  whenTurnEnds(): Promise<void> {
    return this.#turnEnd?.promise ?? Promise.resolve();
  }

  /** Prefills waiting for the lane (not counting the one on it). */
  get queued(): number {
    return this.#queue.length;
  }

  /** Whether a prefill holds the lane now. */
  get busy(): boolean {
    return this.#busy;
  }

  /**
   * Waits for the lane (behind the prefills queued of `priority` or higher), then holds
   * it for `ms`. An abort leaves the queue, or frees the lane at once, and rejects with
   * PrefillLaneAborted. A prefill on the lane is never interrupted for a higher priority.
   */
  run(ms: number, signal?: AbortSignal, priority = 0): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      if (signal?.aborted) return reject(new PrefillLaneAborted());
      let state: "queued" | "running" | "done" = "queued";
      let timer: ReturnType<typeof setTimeout> | undefined;
      const finish = () => {
        state = "done";
        signal?.removeEventListener("abort", onAbort);
        this.#next();
      };
      const turn: Turn = {
        priority,
        start: () => {
          state = "running";
          timer = setTimeout(() => {
            finish();
            resolve();
          }, ms);
        },
      };
      const onAbort = () => {
        if (state === "queued") {
          state = "done";
          this.#queue.splice(this.#queue.indexOf(turn), 1);
          reject(new PrefillLaneAborted());
        } else if (state === "running") {
          clearTimeout(timer);
          finish();
          reject(new PrefillLaneAborted());
        }
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      enqueueByPriority(this.#queue, turn);
      if (!this.#busy) this.#next();
    });
  }

  #next(): void {
    const ended = this.#turnEnd;
    const turn = this.#queue.shift();
    this.#busy = turn !== undefined;
    if (turn) {
      let resolve!: () => void;
      const promise = new Promise<void>((r) => (resolve = r));
      this.#turnEnd = { promise, resolve };
    } else {
      this.#turnEnd = undefined;
    }
    ended?.resolve();
    turn?.start();
  }
}
