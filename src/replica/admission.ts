/**
 * A replica's admission control and load state: it enforces
 * max_ongoing_requests by rejecting before accepting, and produces the load it
 * reports. Pure state (no I/O); the server and the edge client observe it.
 */
import type { Load, RejectReason, ReplicaState } from "../protocol/index.ts";

export type Admission = { admitted: true } | { admitted: false; reason: RejectReason };

export class AdmissionControl {
  readonly maxOngoing: number;
  #ongoing = 0;
  #admitted = 0;
  #rejected = 0;
  #state: ReplicaState = "ready";
  #seq = 0;
  #models: string[] = [];
  #loading: string[] = [];
  /** Set by the first setModels: only multiplexing replicas report models in their load. */
  #multiplexing = false;
  #listeners: ((urgent: boolean) => void)[] = [];
  #idleWaiters: (() => void)[] = [];

  constructor(maxOngoing: number) {
    this.maxOngoing = maxOngoing;
  }

  /** Called on every change; `urgent` for state and model changes that should be reported at once. */
  onChange(listener: (urgent: boolean) => void): void {
    this.#listeners.push(listener);
  }

  tryAdmit(): Admission {
    if (this.#state === "draining" || this.#ongoing >= this.maxOngoing) {
      this.#rejected++;
      return { admitted: false, reason: this.#state === "draining" ? "draining" : "capacity" };
    }
    this.#ongoing++;
    this.#admitted++;
    this.#changed(false);
    return { admitted: true };
  }

  release(): void {
    if (this.#ongoing === 0) return;
    this.#ongoing--;
    this.#changed(false);
    if (this.#ongoing === 0) for (const w of this.#idleWaiters.splice(0)) w();
  }

  drain(): void {
    if (this.#state === "draining") return;
    this.#state = "draining";
    this.#changed(true);
  }

  /** Loaded and loading models (multiplexing replicas); an urgent change. */
  setModels(models: readonly string[], loading: readonly string[]): void {
    this.#models = [...models];
    this.#loading = [...loading];
    this.#multiplexing = true;
    this.#changed(true);
  }

  /** Resolves when no request is in flight. */
  idle(): Promise<void> {
    return this.#ongoing === 0 ? Promise.resolve() : new Promise((r) => this.#idleWaiters.push(r));
  }

  get ongoing(): number {
    return this.#ongoing;
  }

  /** Requests admitted and rejected since start. */
  get counts(): { admitted: number; rejected: number } {
    return { admitted: this.#admitted, rejected: this.#rejected };
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
    const load: Load = { seq: this.#seq, ongoing: Math.max(0, this.#ongoing - excluding), queued: 0, max: this.maxOngoing, state: this.#state };
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
