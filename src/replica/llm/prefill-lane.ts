/**
 * An engine's prefill compute as one lane: prefills run one at a time, first come first
 * served, each holding the lane for its own time on a timer (no CPU is spent). This is
 * how a GPU's prefill contends (a busy engine queues the prompts it has to compute,
 * while its decoding requests keep their pace), which makes a prefix-cache hit, with
 * fewer tokens to compute, both shorter and less in the way of others.
 */
export class PrefillLaneAborted extends Error {
  constructor() {
    super("prefill aborted");
    this.name = "PrefillLaneAborted";
  }
}

interface Turn {
  start(): void;
}

export class PrefillLane {
  readonly #queue: Turn[] = [];
  #busy = false;

  /** Prefills waiting for the lane (not counting the one on it). */
  get queued(): number {
    return this.#queue.length;
  }

  /** Whether a prefill holds the lane now. */
  get busy(): boolean {
    return this.#busy;
  }

  /**
   * Waits for the lane, then holds it for `ms`. An abort leaves the queue, or frees the
   * lane at once, and rejects with PrefillLaneAborted.
   */
  run(ms: number, signal?: AbortSignal): Promise<void> {
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
      this.#queue.push(turn);
      if (!this.#busy) this.#next();
    });
  }

  #next(): void {
    const turn = this.#queue.shift();
    this.#busy = turn !== undefined;
    turn?.start();
  }
}
