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
  readonly ms: number;
  start(): void;
}

export class PrefillLane {
  readonly #queue: Turn[] = [];
  #busy = false;
  /** Settles when the prefill on the lane now ends (undefined while none is). */
  #turnEnd: { promise: Promise<void>; resolve: () => void } | undefined;
  /** The queued turns' time, ms (what a prefill queued now waits for after the running one). */
  #queuedMs = 0;
  /** Epoch ms the running turn ends (0 while none runs). */
  #runningEndsAt = 0;

  /**
   * How long a prefill of priority 0 queued now would wait for the lane, ms: the rest of
   * the running turn and every queued turn's time (a higher priority queued later would
   * go first; the replica reports the wait as it stands: Load.prefillWaitMs).
   */
  waitMs(now = Date.now()): number {
    return Math.max(0, this.#runningEndsAt - now) + this.#queuedMs;
  }

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
        ms,
        start: () => {
          state = "running";
          this.#runningEndsAt = Date.now() + ms;
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
          this.#queuedMs -= ms;
          reject(new PrefillLaneAborted());
        } else if (state === "running") {
          clearTimeout(timer);
          finish();
          reject(new PrefillLaneAborted());
        }
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      enqueueByPriority(this.#queue, turn);
      this.#queuedMs += ms;
      if (!this.#busy) this.#next();
    });
  }

  #next(): void {
    const ended = this.#turnEnd;
    const turn = this.#queue.shift();
    this.#busy = turn !== undefined;
    this.#runningEndsAt = 0;
    if (turn) this.#queuedMs -= turn.ms;
    // Sums of floats drift: an empty queue waits for nothing.
    if (this.#queue.length === 0) this.#queuedMs = 0;
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
