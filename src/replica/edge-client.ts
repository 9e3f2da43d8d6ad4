/**
 * The replica's side of the control plane: registers with its deployment at the
 * edge, reports load every second and soon after every change, and deregisters
 * when it leaves. HTTP POST, so it works through any Worker deployment with no
 * connection to keep alive (docs/protocol.md explains the choice). With a
 * NodeReporter (node batching), its reports travel in the node's reports instead.
 */
import {
  ControlPath,
  NonceCounter,
  PROTOCOL_VERSION,
  importReplicaKey,
  signedHeaders,
  type ControlAck,
  type DeregisterMessage,
  type Load,
  type NodeReportEntry,
  type RegisterMessage,
  type ReportAck,
  type ReportMessage,
  type ContinuationForm,
  type ReplicaRole,
} from "../protocol/index.ts";
import { EdgeError, isBusy, postControl, refusedReportField, refusesSummaries, reportEntry, type LoadSource } from "./edge-control.ts";
import type { NodeReporter } from "./node-reporter.ts";
import { ReportCadence } from "./report-cadence.ts";
import { SummaryCadence, type CacheSummaryProvider, type SummaryField } from "./summary-cadence.ts";

interface EdgeClientBaseOptions {
  edgeUrl: string;
  /** The deployment's replica key (64 hex digits): every control POST is signed with it. */
  key: string;
  deployment: string;
  replicaId: string;
  advertiseUrl: string;
  /** Multiplexing replicas: how many models they keep loaded at once (sent as `max_models`). */
  maxModels?: number;
  /**
   * Coalescing window for load changes while idle, ms (default 250; urgent changes are
   * sent at once; while busy, changes wait up to BUSY_CHANGE_REPORT_DELAY_MS).
   */
  changeReportDelayMs?: number;
  log?: (msg: string) => void;
  /** Called once when the edge answers a report with `drain: true` (an operator asked, via the admin API). */
  onDrainRequested?: () => void;
  /**
   * Called once when the edge refuses this replica's key (401: its signature does not
   * match, as when the edge's master secret changed): reports stop, since every one
   * would be refused too. Without it, the refusal is logged like any failed report.
   */
  onKeyRefused?: (why: string) => void;
  /** The engine's bearer key (vLLM --api-key) for the edge to send with every dispatch (replica agent). */
  engineKey?: string;
  /** The stream continuations the engine takes, declared at register; absent: both (not sent, so older edges take the register). */
  continues?: ContinuationForm[];
  /** Its prefill/decode roles, declared at register; absent: both (not sent). */
  roles?: ReplicaRole[];
  /** A prefill's KV bootstrap port (SGLang's protocol), declared at register; absent: none (not sent). */
  bootstrapPort?: number;
  /** Its region's name (issue 57), declared at register; absent: not sent (older edges refuse the field). */
  region?: string;
  /** Where it is (degrees, issue 57), declared at register; absent: not sent. */
  coordinates?: { lat: number; lon: number };
  /** The node (machine) the replica runs on, sent with every message: it picks the routing shard. */
  node?: string;
  /**
   * Node batching: the node's reporter sends this replica's reports within its node
   * reports (and its nonces sign this client's messages too); this client still
   * registers and deregisters, with the reporter's node.
   */
  nodeReporter?: NodeReporter;
  /**
   * What the replica's prefix cache holds (a Bloom-filter summary, src/prefix/cache-summary.ts):
   * reports carry it when it changed since the last accepted report, and at least
   * every SUMMARY_RESEND_MS (summary-cadence.ts).
   */
  cacheSummary?: CacheSummaryProvider;
}

/** The load comes from `source`; `admission` is the same option under the reference replica's name. */
export type EdgeClientOptions = EdgeClientBaseOptions & ({ source: LoadSource; admission?: never } | { admission: LoadSource; source?: never });

export class EdgeClient {
  readonly #o: EdgeClientOptions;
  readonly #source: LoadSource;
  readonly #node: string | undefined;
  readonly #reporter: NodeReporter | undefined;
  /** Without a node reporter: this client's own report timing. */
  readonly #cadence: ReportCadence;
  #registered = false;
  #stopped = false;
  #drainAnnounced = false;
  #keyRefused = false;
  #key: Promise<CryptoKey> | undefined;
  readonly #nonces: NonceCounter;
  #engineKey: string | undefined;
  /** The next send is a register (the engine key changed). */
  #registerAgain = false;
  /** With a node reporter: this client's own messages (register, deregister), one at a time. */
  #own: Promise<unknown> = Promise.resolve();
  /** When the prefix-cache summary goes into reports (with a node reporter, the reporter asks it). */
  readonly #summary: SummaryCadence | undefined;

  constructor(options: EdgeClientOptions) {
    this.#o = options;
    this.#source = (options.source ?? options.admission)!;
    this.#engineKey = options.engineKey;
    this.#reporter = options.nodeReporter;
    if (this.#reporter && options.node !== undefined && options.node !== this.#reporter.node) {
      throw new Error(`node "${options.node}" is not the node reporter's ("${this.#reporter.node}")`);
    }
    this.#node = this.#reporter?.node ?? options.node;
    this.#nonces = this.#reporter?.nonces ?? new NonceCounter();
    this.#summary = options.cacheSummary && new SummaryCadence(options.cacheSummary, options.log ? { log: options.log } : {});
    this.#cadence = new ReportCadence({
      send: () => this.#sendOrRegister(),
      busy: () => isBusy(this.#source),
      ...(options.changeReportDelayMs !== undefined && { changeDelayMs: options.changeReportDelayMs }),
    });
    // With a node reporter, the reporter listens (NodeReporter.add).
    if (!this.#reporter) this.#source.onChange((urgent) => this.#registered && this.#cadence.changed(urgent));
  }

  /** Whether the edge has accepted this replica's register (and it has not deregistered since). */
  get registered(): boolean {
    return this.#registered && !this.#stopped;
  }

  /** Registers, retrying until the edge answers (it may start after the replica). */
  async start(): Promise<void> {
    for (let wait = 100; !this.#stopped; wait = Math.min(wait * 2, 2_000)) {
      try {
        await this.#exclusive(() => this.#register());
        break;
      } catch (err) {
        // A key the edge refuses is refused again on every retry: said once, and the client stops.
        if (this.#refusedKey(err)) break;
        this.#o.log?.(`register failed (${String(err)}); retrying in ${wait} ms`);
        await new Promise((r) => setTimeout(r, wait));
      }
    }
    // Stopped before (or while) registering: no heartbeat for a replica that is leaving.
    if (this.#stopped) return;
    if (this.#reporter) {
      this.#reporter.add({
        replicaId: this.#o.replicaId,
        source: this.#source,
        registerAgain: () => (this.#stopped ? Promise.resolve() : this.#exclusive(() => this.#register())),
        onDrainRequested: () => this.#drainRequested(),
        ...(this.#summary && { summary: this.#summary }),
      });
      return;
    }
    this.#cadence.start();
  }

  /** Sends a load report now; changes during a send are coalesced into one more send. */
  report(): Promise<void> {
    return this.#reporter ? this.#reporter.report() : this.#cadence.now();
  }

  /** Resolves once no report of this replica is in flight. */
  settled(): Promise<void> {
    return this.#reporter ? this.#reporter.settled() : this.#cadence.settled();
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
    if (this.#reporter) {
      // A register resets the replica's load and models at the edge: the node reports it again at once.
      for (let wait = 100; !this.#stopped; wait = Math.min(wait * 2, 2_000)) {
        try {
          await this.#exclusive(() => this.#register());
          await this.#reporter.report();
          return;
        } catch (err) {
          this.#o.log?.(`register with the new engine key failed (${String(err)}); retrying in ${wait} ms`);
          await new Promise((r) => setTimeout(r, wait));
        }
      }
      return;
    }
    // Through the report queue: control messages go one at a time, so their nonces
    // arrive in order (a register overtaken by a later report would be a "replay").
    this.#registerAgain = true;
    await this.report();
  }

  async deregister(): Promise<void> {
    this.stop();
    const msg: DeregisterMessage = {
      protocol: PROTOCOL_VERSION,
      deployment: this.#o.deployment,
      replica_id: this.#o.replicaId,
      ...(this.#node !== undefined && { node: this.#node }),
    };
    if (this.#reporter) {
      // After the node report in flight, if it names us: nothing of ours arrives after the deregister.
      await this.#reporter.remove(this.#o.replicaId);
      await this.#exclusive(() => this.#post(ControlPath.deregister, msg));
      return;
    }
    await this.#post(ControlPath.deregister, msg);
  }

  stop(): void {
    this.#stopped = true;
    this.#cadence.stop();
    void this.#reporter?.remove(this.#o.replicaId);
  }

  /** With a node reporter, one own message at a time (their nonces then arrive in order); without, at once. */
  #exclusive<T>(f: () => Promise<T>): Promise<T> {
    if (!this.#reporter) return f();
    const run = this.#own.then(f, f);
    this.#own = run.catch(() => undefined);
    return run;
  }

  /** Whether `err` is the edge refusing this replica's key; the first time, reports stop and onKeyRefused hears why. */
  #refusedKey(err: unknown): boolean {
    if (!(err instanceof EdgeError) || err.status !== 401 || !this.#o.onKeyRefused) return false;
    if (this.#keyRefused) return true;
    this.#keyRefused = true;
    this.stop();
    let why = err.body.slice(0, 200);
    try {
      const body = JSON.parse(err.body) as { error?: { message?: string; details?: { reason?: string } } };
      why = body.error?.details?.reason ?? body.error?.message ?? why;
    } catch {}
    this.#o.onKeyRefused(why);
    return true;
  }

  #drainRequested(): void {
    if (this.#drainAnnounced) return;
    this.#drainAnnounced = true;
    this.#o.onDrainRequested?.();
  }

  async #sendOrRegister(): Promise<void> {
    if (!this.#registerAgain) {
      await this.#sendReport().catch((err: unknown) => {
        if (!this.#refusedKey(err)) this.#o.log?.(`report failed: ${String(err)}`);
      });
      return;
    }
    this.#registerAgain = false;
    await this.#register().catch((err: unknown) => {
      this.#registerAgain = true;
      this.#o.log?.(`register with the new engine key failed: ${String(err)}`);
    });
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
    if (this.#o.continues !== undefined) msg.continues = this.#o.continues;
    if (this.#o.roles !== undefined) msg.roles = this.#o.roles;
    if (this.#o.bootstrapPort !== undefined) msg.bootstrap_port = this.#o.bootstrapPort;
    if (this.#o.region !== undefined) msg.region = this.#o.region;
    // Only the two numbers: the edge refuses a register with any other field in them.
    if (this.#o.coordinates !== undefined) msg.coordinates = { lat: this.#o.coordinates.lat, lon: this.#o.coordinates.lon };
    if (this.#node !== undefined) msg.node = this.#node;
    const res = await this.#post(ControlPath.register, msg);
    // A register starts the replica afresh at the edge: no summary held there now.
    this.#summary?.reset();
    const ack = (await res.json()) as ControlAck;
    if (ack.report_interval_ms > 0) {
      this.#cadence.intervalMs = ack.report_interval_ms;
      if (this.#reporter) this.#reporter.intervalMs = ack.report_interval_ms;
    }
    this.#registered = true;
    // With a node reporter, the node's next report (at once) carries our load.
    if (!this.#reporter) await this.#sendReport();
  }

  async #sendReport(): Promise<void> {
    // After a key refusal every report would be refused too: none are sent (a drain's report included).
    if (!this.#registered || this.#keyRefused) return;
    const summary = this.#summary?.next();
    const msg: ReportMessage = {
      protocol: PROTOCOL_VERSION,
      deployment: this.#o.deployment,
      ...reportEntry(this.#o.replicaId, this.#source, summary),
      ...(this.#node !== undefined && { node: this.#node }),
    };
    try {
      const res = await this.#post(ControlPath.report, msg);
      const ack = (await res.json().catch(() => ({}))) as Partial<ReportAck>;
      // A stale_seq report's fields were not applied: its summary goes again.
      if (ack.outcome === "ok") this.#summary?.accepted(summary);
      if (ack.drain === true) this.#drainRequested();
    } catch (err) {
      const field = refusedReportField(err);
      // The routing object forgot us (swept after a long silence): join again.
      if (err instanceof EdgeError && err.status === 409 && !this.#stopped) await this.#register();
      else if (field !== undefined) {
        this.#o.log?.(`the edge does not take ${field} (an older edge): reporting without it`);
        await this.#sendReport();
      } else if (summary !== undefined && refusesSummaries(err) && this.#summary?.enabled) {
        this.#o.log?.("the edge does not take prefix-cache summaries (an older edge): reporting without them");
        this.#summary.disable();
        await this.#sendReport();
      } else throw err;
    }
  }

  async #post(path: string, message: unknown): Promise<Response> {
    this.#key ??= importReplicaKey(this.#o.key);
    return postControl(this.#o.edgeUrl, await this.#key, this.#nonces, path, message);
  }
}

/**
 * What a replica or agent says, once, when the edge refuses its key: the likely cause
 * (the edge's master secret changed: the local stack keeps it across restarts, and
 * `npm start -- --rotate-secrets` changes it) and what to do.
 */
export function keyRefusedMessage(deployment: string, why: string): string {
  return (
    `the edge refused this replica's key (${why}): its SWITCHYARD_REPLICA_SECRET is not the one this key was made from, ` +
    `or the key is another deployment's. Print the key again (SWITCHYARD_REPLICA_SECRET=<the edge's> npm run -s replica -- --print-key --deployment ${deployment}) and restart with it; leaving`
  );
}
