/**
 * The replica's side of the control plane: registers with its deployment at the
 * edge, reports load every second and soon after every change, and deregisters
 * when it leaves. HTTP POST, so it works through any Worker deployment with no
 * connection to keep alive (docs/protocol.md explains the choice).
 */
import {
  ControlPath,
  NonceCounter,
  PROTOCOL_VERSION,
  importReplicaKey,
  signedHeaders,
  type ControlAck,
  type Load,
  type RegisterMessage,
  type ReportAck,
  type ReportMessage,
} from "../protocol/index.ts";

/**
 * What the edge client reports: the reference replica's AdmissionControl, or the
 * replica agent's view of an external engine (src/agent/agent.ts).
 */
export interface LoadSource {
  /** Sent as max_ongoing_requests on register. */
  readonly maxOngoing: number;
  /** The load now: seq, ongoing, queued, state and, when known, kv. */
  load(): Load;
  /** Loaded model ids (multiplexing), reported on every report. */
  readonly models: string[];
  /** Model ids being loaded now. */
  readonly loading: string[];
  /** Called on every change; `urgent` for changes to report at once (state, models). */
  onChange(listener: (urgent: boolean) => void): void;
}

interface EdgeClientBaseOptions {
  edgeUrl: string;
  /** The deployment's replica key (64 hex digits): every control POST is signed with it. */
  key: string;
  deployment: string;
  replicaId: string;
  advertiseUrl: string;
  /** Multiplexing replicas: how many models they keep loaded at once (sent as `max_models`). */
  maxModels?: number;
  /** Coalescing window for load changes, ms (default 250; urgent changes are sent at once). */
  changeReportDelayMs?: number;
  log?: (msg: string) => void;
  /** Called once when the edge answers a report with `drain: true` (an operator asked, via the admin API). */
  onDrainRequested?: () => void;
  /** The engine's bearer key (vLLM --api-key) for the edge to send with every dispatch (replica agent). */
  engineKey?: string;
}

/** The load comes from `source`; `admission` is the same option under the reference replica's name. */
export type EdgeClientOptions = EdgeClientBaseOptions & ({ source: LoadSource; admission?: never } | { admission: LoadSource; source?: never });

export class EdgeClient {
  readonly #o: EdgeClientOptions;
  readonly #source: LoadSource;
  #intervalMs = 1_000;
  #heartbeat: ReturnType<typeof setInterval> | undefined;
  #pending: ReturnType<typeof setTimeout> | undefined;
  #registered = false;
  #stopped = false;
  #drainAnnounced = false;
  #inflight: Promise<void> | null = null;
  #again = false;
  #key: Promise<CryptoKey> | undefined;
  readonly #nonces = new NonceCounter();
  #engineKey: string | undefined;
  /** The next send is a register (the engine key changed). */
  #registerAgain = false;

  constructor(options: EdgeClientOptions) {
    this.#o = options;
    this.#source = (options.source ?? options.admission)!;
    this.#engineKey = options.engineKey;
    this.#source.onChange((urgent) => this.#scheduleReport(urgent ? 0 : (options.changeReportDelayMs ?? 250)));
  }

  /** Whether the edge has accepted this replica's register (and it has not deregistered since). */
  get registered(): boolean {
    return this.#registered && !this.#stopped;
  }

  /** Registers, retrying until the edge answers (it may start after the replica). */
  async start(): Promise<void> {
    for (let wait = 100; !this.#stopped; wait = Math.min(wait * 2, 2_000)) {
      try {
        await this.#register();
        break;
      } catch (err) {
        this.#o.log?.(`register failed (${String(err)}); retrying in ${wait} ms`);
        await new Promise((r) => setTimeout(r, wait));
      }
    }
    // Stopped before (or while) registering: no heartbeat for a replica that is leaving.
    if (this.#stopped) return;
    this.#heartbeat = setInterval(() => void this.report(), this.#intervalMs);
  }

  /** Sends a load report now; changes during a send are coalesced into one more send. */
  report(): Promise<void> {
    if (this.#pending) clearTimeout(this.#pending);
    this.#pending = undefined;
    if (this.#inflight) {
      this.#again = true;
      return this.#inflight;
    }
    this.#inflight = (async () => {
      do {
        this.#again = false;
        if (this.#registerAgain) {
          this.#registerAgain = false;
          await this.#register().catch((err: unknown) => {
            this.#registerAgain = true;
            this.#o.log?.(`register with the new engine key failed: ${String(err)}`);
          });
        } else {
          await this.#sendReport().catch((err: unknown) => this.#o.log?.(`report failed: ${String(err)}`));
        }
      } while (this.#again && !this.#stopped);
    })().finally(() => {
      this.#inflight = null;
    });
    return this.#inflight;
  }

  /**
   * A new engine key (rotation): registers again with it, so the edge sends it
   * from its next routing snapshot on (≤ ~1 s). The engine must accept both keys
   * until then (docs/agent.md, "Engine API keys").
   */
  async setEngineKey(key: string | undefined): Promise<void> {
    if (key === this.#engineKey) return;
    this.#engineKey = key;
    if (!this.#registered || this.#stopped) return;
    // Through the report queue: control messages go one at a time, so their nonces
    // arrive in order (a register overtaken by a later report would be a "replay").
    this.#registerAgain = true;
    await this.report();
  }

  async deregister(): Promise<void> {
    this.stop();
    await this.#post(ControlPath.deregister, {
      protocol: PROTOCOL_VERSION,
      deployment: this.#o.deployment,
      replica_id: this.#o.replicaId,
    });
  }

  stop(): void {
    this.#stopped = true;
    clearInterval(this.#heartbeat);
    if (this.#pending) clearTimeout(this.#pending);
  }

  #scheduleReport(delayMs: number): void {
    if (this.#stopped || !this.#registered) return;
    if (delayMs === 0) {
      void this.report();
      return;
    }
    this.#pending ??= setTimeout(() => void this.report(), delayMs);
  }

  async #register(): Promise<void> {
    const msg: RegisterMessage = {
      protocol: PROTOCOL_VERSION,
      deployment: this.#o.deployment,
      replica_id: this.#o.replicaId,
      url: this.#o.advertiseUrl,
      max_ongoing_requests: this.#source.maxOngoing,
    };
    if (this.#o.maxModels !== undefined) msg.max_models = this.#o.maxModels;
    if (this.#engineKey !== undefined) msg.engine_key = this.#engineKey;
    const res = await this.#post(ControlPath.register, msg);
    const ack = (await res.json()) as ControlAck;
    if (ack.report_interval_ms > 0) this.#intervalMs = ack.report_interval_ms;
    this.#registered = true;
    await this.#sendReport();
  }

  async #sendReport(): Promise<void> {
    if (!this.#registered) return;
    const a = this.#source;
    const load = a.load();
    const msg: ReportMessage = {
      protocol: PROTOCOL_VERSION,
      deployment: this.#o.deployment,
      replica_id: this.#o.replicaId,
      seq: load.seq,
      ts: Date.now(),
      state: load.state,
      ongoing: load.ongoing,
      queued: load.queued,
      ...(load.kv !== undefined && { kv_cache_usage: load.kv }),
      models: a.models,
      loading: a.loading,
    };
    try {
      const res = await this.#post(ControlPath.report, msg);
      const ack = (await res.json().catch(() => ({}))) as Partial<ReportAck>;
      if (ack.drain === true && !this.#drainAnnounced) {
        this.#drainAnnounced = true;
        this.#o.onDrainRequested?.();
      }
    } catch (err) {
      // The routing object forgot us (swept after a long silence): join again.
      if (err instanceof EdgeError && err.status === 409 && !this.#stopped) await this.#register();
      else throw err;
    }
  }

  /** POSTs a control message, signed over the exact bytes sent (docs/protocol.md §1). */
  async #post(path: string, message: unknown): Promise<Response> {
    this.#key ??= importReplicaKey(this.#o.key);
    const url = new URL(path, this.#o.edgeUrl);
    const body = new TextEncoder().encode(JSON.stringify(message));
    const signature = await signedHeaders(await this.#key, { timestamp: Date.now(), nonce: this.#nonces.next(), path: url.pathname, body });
    const res = await fetch(url, {
      method: "POST",
      headers: { "content-type": "application/json", ...signature },
      body,
      signal: AbortSignal.timeout(5_000),
    });
    if (!res.ok) throw new EdgeError(res.status, await res.text());
    return res;
  }
}

export class EdgeError extends Error {
  constructor(
    readonly status: number,
    body: string,
  ) {
    super(`edge answered ${status}: ${body.slice(0, 300)}`);
  }
}
