/**
 * A replica's admission control and load state: it enforces
 * max_ongoing_requests, with an optional bounded FIFO queue in front of the
 * slots (max_queued, like an engine's waiting queue: vLLM, Ray Serve's
 * max_queued_requests), rejects before accepting beyond both, and produces the
 * load it reports (`queued` counts the waiting requests). Pure state (no I/O);
 * the server and the edge client observe it.
 */
import { MAX_PREFILL_RATE, MAX_PREFILL_WAIT_MS, type Load, type RejectReason, type ReplicaState } from "../protocol/index.ts";

export type Admission = { admitted: true } | { admitted: false; reason: RejectReason };

/** A request accepted into the queue: it gets a slot when one frees, in arrival order. */
export interface QueuedAdmission {
  admitted: "queued";
  /**
   * Resolves true when the request holds a slot (it then counts as ongoing, and
   * is released like any admitted request), false when it left the queue.
   */
  readonly started: Promise<boolean>;
  /**
   * Leaves the queue (the client went away); `started` resolves false. Returns
   * false, doing nothing, when the request already holds a slot: the caller then
   * releases it.
   */
  leave(): boolean;
}

interface Waiter {
  start: (got: boolean) => void;
  priority: number;
}

export class AdmissionControl {
  readonly maxOngoing: number;
  /** How many requests may wait for a slot; 0: reject at maxOngoing. */
  readonly maxQueued: number;
  #ongoing = 0;
  /** Requests in flight by priority (the dispatch's x-switchyard-priority; 0 without one). */
  readonly #byPriority = new Map<number, number>();
  /** Whether the engine behind pauses a lower-priority running request for a higher one (enablePriorityPreemption). */
  #preempts = false;
  /** Waiting requests, oldest first. Non-empty only while every slot is taken. */
  readonly #queue: Waiter[] = [];
  #admitted = 0;
  #rejected = 0;
  #state: ReplicaState = "ready";
  #drainDeadline: number | undefined;
  #seq = 0;
  #models: string[] = [];
  #loading: string[] = [];
  /** Set by the first setModels: only multiplexing replicas report models in their load. */
  #multiplexing = false;
  #listeners: ((urgent: boolean) => void)[] = [];
  #idleWaiters: (() => void)[] = [];
  #kvSource: (() => number | undefined) | undefined;
  #prefillSource: (() => { waitMs: number; rate: number | undefined }) | undefined;
  #external: number | undefined;

  constructor(maxOngoing: number, maxQueued = 0) {
    this.maxOngoing = maxOngoing;
    this.maxQueued = maxQueued;
  }

  /** Called on every change; `urgent` for state and model changes that should be reported at once. */
  onChange(listener: (urgent: boolean) => void): void {
    this.#listeners.push(listener);
  }

  /**
   * The engine behind this replica runs at most maxOngoing requests at a time and pauses
   * the lowest-priority running one for a higher one that arrives (the reference LLM
   * engine's max_num_seqs preemption, kv-cache.ts; vLLM's `--scheduling-policy
   * priority` preempts in the same order). Then a request is admitted past maxOngoing
   * while fewer than maxOngoing requests of its priority or higher are in flight, up to
   * twice maxOngoing in all: a critical request never waits at a replica for a batch
   * request's completion, and the batch it pauses resumes when a slot frees
   * (docs/protocol.md, "Admission: reject before accepting", "By priority").
   */
  enablePriorityPreemption(): void {
    this.#preempts = true;
  }

  /** Whether a request of `priority` fits now: a free slot, or (preempting) a lower-priority request to pause. */
  #fits(priority: number): boolean {
    if (this.#ongoing < this.maxOngoing) return true;
    if (!this.#preempts || this.#ongoing >= 2 * this.maxOngoing) return false;
    let atOrAbove = 0;
    for (const [p, n] of this.#byPriority) if (p >= priority) atOrAbove += n;
    return atOrAbove < this.maxOngoing;
  }

  #count(priority: number, delta: 1 | -1): void {
    const n = (this.#byPriority.get(priority) ?? 0) + delta;
    if (n <= 0) this.#byPriority.delete(priority);
    else this.#byPriority.set(priority, n);
  }

  /**
   * Admits into a free slot (or past a lower priority, preempting), or rejects (never queues).
   * `priority`: the dispatch's. `limit`: its x-switchyard-load-limit, the most load (ongoing +
   * queued, as reported) at which it is still admitted; over it, rejected as `over_limit`.
   */
  tryAdmit(priority = 0, limit?: number): Admission {
    const over = this.#overLimit(limit);
    if (this.#state === "draining" || over || !this.#fits(priority)) {
      this.#rejected++;
      return { admitted: false, reason: this.#state === "draining" ? "draining" : over ? "over_limit" : "capacity" };
    }
    this.#ongoing++;
    this.#count(priority, 1);
    this.#admitted++;
    this.#changed(false);
    return { admitted: true };
  }

  /**
   * Admits into a free slot, else queues (FIFO, up to maxQueued waiting), else
   * rejects. With maxQueued 0 it is tryAdmit. A draining replica queues nothing
   * new; what it already queued still runs.
   */
  admitOrQueue(priority = 0, limit?: number): Admission | QueuedAdmission {
    if (this.#state === "draining" || this.#overLimit(limit) || this.#fits(priority) || this.#queue.length >= this.maxQueued) return this.tryAdmit(priority, limit);
    let start!: (got: boolean) => void;
    const started = new Promise<boolean>((r) => (start = r));
    const waiter: Waiter = { start, priority };
    this.#queue.push(waiter);
    this.#changed(false);
    return {
      admitted: "queued",
      started,
      leave: () => {
        const i = this.#queue.indexOf(waiter);
        if (i < 0) return false;
        this.#queue.splice(i, 1);
        this.#changed(false);
        waiter.start(false);
        return true;
      },
    };
  }

  /** Frees the slot of a request of `priority`: the oldest queued request takes it, else it stays free. */
  release(priority = 0): void {
    if (this.#ongoing === 0) return;
    this.#count(priority, -1);
    const next = this.#ongoing <= this.maxOngoing ? this.#queue.shift() : undefined;
    if (next) {
      // The slot passes on: ongoing stays, the queue shrinks.
      this.#count(next.priority, 1);
      this.#admitted++;
      this.#changed(false);
      next.start(true);
      return;
    }
    this.#ongoing--;
    this.#changed(false);
    if (this.#ongoing === 0) for (const w of this.#idleWaiters.splice(0)) w();
  }

  /** Stops admitting; `deadlineAt` (epoch ms), when given, is when the replica stops serving (reported to the edge). */
  drain(deadlineAt?: number): void {
    if (deadlineAt !== undefined) this.#drainDeadline = deadlineAt;
    if (this.#state === "draining") return;
    this.#state = "draining";
    this.#changed(true);
  }

  drainDeadline(): number | undefined {
    return this.#drainDeadline;
  }

  /** Loaded and loading models (multiplexing replicas); an urgent change. */
  setModels(models: readonly string[], loading: readonly string[]): void {
    this.#models = [...models];
    this.#loading = [...loading];
    this.#multiplexing = true;
    this.#changed(true);
  }

  /** Resolves when no request is in flight (queued ones included: they run first). */
  idle(): Promise<void> {
    return this.#ongoing === 0 ? Promise.resolve() : new Promise((r) => this.#idleWaiters.push(r));
  }

  get ongoing(): number {
    return this.#ongoing;
  }

  /** Requests waiting in the queue now. */
  get queued(): number {
    return this.#queue.length;
  }

  /** Requests admitted (given a slot, queued ones when they start) and rejected since start. */
  get counts(): { admitted: number; rejected: number } {
    return { admitted: this.#admitted, rejected: this.#rejected };
  }

  /**
   * KV-cache usage (0..1) to report in every load (replicas whose engine has a KV cache);
   * `source` is read each time a load is produced.
   */
  setKvSource(source: () => number | undefined): void {
    this.#kvSource = source;
  }

  /**
   * The engine's prefill queue and rate to report in every load (Load.prefillWaitMs,
   * Load.prefillRate; engines with a prefill queue); `source` is read each time a load is produced.
   */
  setPrefillSource(source: () => { waitMs: number; rate: number | undefined }): void {
    this.#prefillSource = source;
  }

  /**
   * The requests the server behind this replica says it holds (an app's own queue
   * metric, src/replica/backends/proxy.ts), or undefined where it says none. Those beyond
   * the requests in flight here (other clients of the same server) count as queued.
   */
  setExternalQueue(held: number | undefined): void {
    if (held === this.#external) return;
    const before = this.#externalExtra();
    this.#external = held;
    if (this.#externalExtra() !== before) this.#changed(false);
  }

  /** Whether the load now (ongoing + queued, as load() reports it) is over a dispatch's `limit`. */
  #overLimit(limit: number | undefined): boolean {
    return limit !== undefined && this.#ongoing + this.#queue.length + this.#externalExtra() > limit;
  }

  #externalExtra(): number {
    return this.#external === undefined ? 0 : Math.max(0, this.#external - this.#ongoing);
  }

  get state(): ReplicaState {
    return this.#state;
  }

  get models(): string[] {
    return this.#models;
  }

  get loading(): string[] {
    return this.#loading;
  }

  /**
   * Load as reported; `excluding` leaves out requests the caller is finishing. It carries
   * `models` and `loading` once setModels has been called (replicas that serve no models
   * never call it, and their load header stays without them).
   */
  load(excluding = 0): Load {
    const load: Load = { seq: this.#seq, ongoing: Math.max(0, this.#ongoing - excluding), queued: this.#queue.length + this.#externalExtra(), max: this.maxOngoing, state: this.#state };
    const kv = this.#kvSource?.();
    if (kv !== undefined) load.kv = kv;
    const prefill = this.#prefillSource?.();
    if (prefill) {
      load.prefillWaitMs = Math.min(MAX_PREFILL_WAIT_MS, prefill.waitMs);
      if (prefill.rate !== undefined) load.prefillRate = Math.min(MAX_PREFILL_RATE, prefill.rate);
    }
    if (this.#multiplexing) {
      load.models = [...this.#models];
      load.loading = [...this.#loading];
    }
    return load;
  }

  #changed(urgent: boolean): void {
    this.#seq++;
    for (const l of this.#listeners) l(urgent);
  }
}
