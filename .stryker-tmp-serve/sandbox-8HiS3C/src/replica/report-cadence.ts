/**
 * When a replica (EdgeClient) or a node (NodeReporter) sends its load reports:
 * a heartbeat one report interval after the last report, changes soon after
 * they happen, urgent changes at once, and one send at a time. The sender is a
 * callback; this module only keeps time (docs/protocol.md §1, "Cadence and
 * liveness").
 */
// @ts-nocheck


/** Coalescing window of load changes while idle, ms (the protocol's bound). */
export const CHANGE_REPORT_DELAY_MS = 250;
/**
 * Coalescing window of load changes while busy (ongoing + queued > 0 now and at
 * the last report), ms, counted from the last report. Every response's load
 * header already carries per-request freshness to the proxy that sent the
 * request, so a busy replica reports about once a second instead of ~4 times.
 * Becoming busy and going idle are told after the short window: proxies balance
 * on them.
 */
export const BUSY_CHANGE_REPORT_DELAY_MS = 1_000;
/** The heartbeat until the edge says otherwise (report_interval_ms of a register's answer). */
export const DEFAULT_REPORT_INTERVAL_MS = 1_000;

export interface ReportCadenceOptions {
  /** Sends one report (reading the load when called); a rejection is passed to onError. */
  send: () => Promise<void>;
  /** Whether the load is busy now (ongoing + queued > 0): changes while it was and is busy wait for the busy window. */
  busy: () => boolean;
  /** Idle coalescing window, ms; 0 sends every change at once. Default CHANGE_REPORT_DELAY_MS. */
  changeDelayMs?: number;
  /** Busy coalescing window, ms, from the last report. Default BUSY_CHANGE_REPORT_DELAY_MS. */
  busyChangeDelayMs?: number;
  intervalMs?: number;
  onError?: (err: unknown) => void;
}

export class ReportCadence {
  readonly #send: () => Promise<void>;
  readonly #busy: () => boolean;
  readonly #changeDelayMs: number;
  readonly #busyChangeDelayMs: number;
  readonly #onError: (err: unknown) => void;
  #intervalMs: number;
  #started = false;
  #stopped = false;
  /** When the last send started (epoch ms): the heartbeat and the busy window count from it. */
  #lastSentAt = 0;
  /** Whether the load was busy when the last send started. */
  #busyAtLastSend = false;
  /** A change not yet reported is due then (epoch ms). */
  #changeDueAt: number | undefined;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #inflight: Promise<void> | null = null;
  #again = false;
  /** Sends started (tests and logs). */
  sent = 0;

  constructor(o: ReportCadenceOptions) {
    this.#send = o.send;
    this.#busy = o.busy;
    this.#changeDelayMs = o.changeDelayMs ?? CHANGE_REPORT_DELAY_MS;
    this.#busyChangeDelayMs = o.busyChangeDelayMs ?? BUSY_CHANGE_REPORT_DELAY_MS;
    this.#intervalMs = o.intervalMs ?? DEFAULT_REPORT_INTERVAL_MS;
    this.#onError = o.onError ?? (() => undefined);
  }

  get intervalMs(): number {
    return this.#intervalMs;
  }

  set intervalMs(ms: number) {
    if (!(ms > 0) || ms === this.#intervalMs) return;
    this.#intervalMs = ms;
    this.#arm();
  }

  /** Starts the heartbeat (a report has just gone out, e.g. with the register); changes count from now on. */
  start(): void {
    if (this.#started || this.#stopped) return;
    this.#started = true;
    this.#lastSentAt = Date.now();
    this.#busyAtLastSend = this.#busy();
    this.#arm();
  }

  /** No more timed sends (now() still sends when asked). */
  stop(): void {
    this.#stopped = true;
    clearTimeout(this.#timer);
    this.#timer = undefined;
  }

  /** The load changed; `urgent` (state, model sets) is sent at once, the rest coalesced. */
  changed(urgent: boolean): void {
    if (!this.#started || this.#stopped) return;
    const now = Date.now();
    const busy = this.#busyAtLastSend && this.#busy();
    if (urgent || (!busy && this.#changeDelayMs === 0)) {
      void this.now();
      return;
    }
    const due = busy ? Math.max(now + this.#changeDelayMs, this.#lastSentAt + this.#busyChangeDelayMs) : now + this.#changeDelayMs;
    // An earlier deadline wins: going idle is worth telling sooner than the busy window.
    if (this.#changeDueAt === undefined || due < this.#changeDueAt) {
      this.#changeDueAt = due;
      this.#arm();
    }
  }

  /** Sends a report now; asked while one is in flight, one more follows it (coalesced). */
  now(): Promise<void> {
    if (this.#inflight) {
      this.#again = true;
      return this.#inflight;
    }
    clearTimeout(this.#timer);
    this.#timer = undefined;
    this.#inflight = (async () => {
      do {
        this.#again = false;
        // The send reads the load now: whatever changed so far goes with it.
        this.#changeDueAt = undefined;
        this.#lastSentAt = Date.now();
        this.#busyAtLastSend = this.#busy();
        this.sent++;
        await this.#send().catch(this.#onError);
      } while (this.#again && !this.#stopped);
    })().finally(() => {
      this.#inflight = null;
      this.#arm();
    });
    return this.#inflight;
  }

  /** Resolves once no send is in flight. */
  async settled(): Promise<void> {
    while (this.#inflight) await this.#inflight;
  }

  /** One timer: the next heartbeat or the pending change, whichever is first. */
  #arm(): void {
    clearTimeout(this.#timer);
    this.#timer = undefined;
    if (!this.#started || this.#stopped || this.#inflight) return;
    const due = Math.min(this.#changeDueAt ?? Infinity, this.#lastSentAt + this.#intervalMs);
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      void this.now();
    }, Math.max(0, due - Date.now()));
  }
}
