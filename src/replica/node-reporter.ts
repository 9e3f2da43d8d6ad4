/**
 * Node batching (docs/protocol.md §1, "Node reports"): one process per node, an
 * agent fronting several engines, sends ONE signed NodeReportMessage per
 * heartbeat or coalesced change for all its replicas instead of one report per
 * replica. It owns the node's nonce counter (every message of the process is
 * signed with it, so they all carry increasing nonces), the heartbeat and the
 * coalescing (report-cadence.ts, busy when any replica is), and the per-entry
 * outcomes: unknown_replica → that replica registers again; drain → that
 * replica's drain callback, once. Each replica still registers and deregisters
 * on its own (EdgeClient with `nodeReporter`), naming the node.
 */
import {
  ControlPath,
  MAX_NODE_REPLICAS,
  MAX_NODE_REPORT_BYTES,
  MAX_NODE_REPORT_SUMMARY_BYTES,
  NonceCounter,
  PROTOCOL_VERSION,
  importReplicaKey,
  type NodeReportAck,
  type NodeReportEntry,
  type NodeReportMessage,
} from "../protocol/index.ts";
import { isBusy, postControl, refusedReportField, refusesSummaries, reportEntry, type LoadSource } from "./edge-control.ts";
import { ReportCadence } from "./report-cadence.ts";
import type { SummaryCadence, SummaryField } from "./summary-cadence.ts";

/** A replica of the node, as the reporter sees it. */
export interface NodeMember {
  readonly replicaId: string;
  readonly source: LoadSource;
  /** The edge does not know the replica (unknown_replica): register it again. The reporter reports it once this resolves. */
  registerAgain(): Promise<void>;
  /** The edge answered `drain` for it (an operator asked, via the admin API). Called once. */
  onDrainRequested?(): void;
  /** When its prefix-cache summary goes into the node's reports (the replica's EdgeClient owns it). */
  readonly summary?: SummaryCadence;
}

export interface NodeReporterOptions {
  edgeUrl: string;
  /** The deployment's replica key (64 hex digits). */
  key: string;
  deployment: string;
  node: string;
  /** Coalescing window for load changes while idle, ms (default 250); busy: BUSY_CHANGE_REPORT_DELAY_MS. */
  changeReportDelayMs?: number;
  /** The heartbeat, ms; a replica's register answer (report_interval_ms) sets it. Default 1,000. */
  intervalMs?: number;
  log?: (msg: string) => void;
}

type Outcome = NodeReportAck["outcomes"][number];

interface Member {
  readonly member: NodeMember;
  /** Registering again after unknown_replica: left out of node reports until that is done. */
  registering: boolean;
  drainAnnounced: boolean;
}

/**
 * The summary fields a node report carries, one per member (undefined: none this
 * time). Each due field goes if it fits in `budget` bytes, longest waiting first;
 * the others wait for the next node report, so the node report stays one message
 * (MAX_NODE_REPORT_SUMMARY_BYTES) however many of the node's caches changed. A
 * `null` (no summary any more) is small and always goes.
 */
export function summaryFields(
  due: readonly { field: SummaryField; since: number | undefined }[],
  budget = MAX_NODE_REPORT_SUMMARY_BYTES,
): SummaryField[] {
  const out: SummaryField[] = due.map(() => undefined);
  const order = due.map((d, i) => ({ ...d, i })).filter((d) => d.field !== undefined);
  order.sort((a, b) => (a.since ?? 0) - (b.since ?? 0) || a.i - b.i);
  let left = budget;
  for (const d of order) {
    const size = d.field === null ? 0 : d.field!.bits.length + 64;
    if (size > left) continue;
    left -= size;
    out[d.i] = d.field;
  }
  return out;
}

/**
 * Splits a node's entries into node reports of at most `maxEntries` entries and
 * `maxBytes` bytes each (in order; an entry too large alone still goes alone, and
 * the edge refuses that one message). `start`: the index of its first entry.
 */
export function nodeReportBatches(
  deployment: string,
  node: string,
  entries: readonly NodeReportEntry[],
  maxBytes = MAX_NODE_REPORT_BYTES,
  maxEntries = MAX_NODE_REPLICAS,
): { message: NodeReportMessage; start: number }[] {
  const size = (v: unknown) => new TextEncoder().encode(JSON.stringify(v)).byteLength;
  const envelope = (reports: NodeReportEntry[]): NodeReportMessage => ({ protocol: PROTOCOL_VERSION, deployment, node, reports });
  const empty = size(envelope([]));
  const out: { message: NodeReportMessage; start: number }[] = [];
  let batch: NodeReportEntry[] = [];
  let bytes = empty;
  let start = 0;
  entries.forEach((entry, i) => {
    const n = size(entry);
    // Each entry after the first adds a comma.
    if (batch.length > 0 && (batch.length >= maxEntries || bytes + 1 + n > maxBytes)) {
      out.push({ message: envelope(batch), start });
      batch = [];
      bytes = empty;
      start = i;
    }
    bytes += n + (batch.length > 0 ? 1 : 0);
    batch.push(entry);
  });
  if (batch.length > 0) out.push({ message: envelope(batch), start });
  return out;
}

export class NodeReporter {
  readonly node: string;
  /** The process's nonces: node reports and the replicas' own messages. */
  readonly nonces = new NonceCounter();
  readonly #o: NodeReporterOptions;
  readonly #log: (msg: string) => void;
  readonly #members = new Map<string, Member>();
  readonly #cadence: ReportCadence;
  #key: Promise<CryptoKey> | undefined;
  /** The edge refused prefix-cache summaries (an older edge): no member sends them, members that join later included. */
  #summariesRefused = false;
  /** Node reports the edge accepted (tests and logs). */
  accepted = 0;

  constructor(options: NodeReporterOptions) {
    this.#o = options;
    this.node = options.node;
    this.#log = options.log ?? (() => undefined);
    this.#cadence = new ReportCadence({
      send: () => this.#send(),
      busy: () => [...this.#members.values()].some((m) => !m.registering && isBusy(m.member.source)),
      ...(options.changeReportDelayMs !== undefined && { changeDelayMs: options.changeReportDelayMs }),
      ...(options.intervalMs !== undefined && { intervalMs: options.intervalMs }),
      onError: (err) => this.#log(`node report failed: ${String(err)}`),
    });
  }

  set intervalMs(ms: number) {
    this.#cadence.intervalMs = ms;
  }

  /** Replica ids reported now, in entry order. */
  get replicaIds(): string[] {
    return [...this.#members.keys()];
  }

  /** Node reports started (each one or more messages; tests and logs). */
  get sent(): number {
    return this.#cadence.sent;
  }

  /** A registered replica joins the node's reports; the next one goes at once. */
  add(member: NodeMember): void {
    if (this.#members.has(member.replicaId)) throw new Error(`replica "${member.replicaId}" is already in node "${this.node}"'s reports`);
    if (this.#members.size >= MAX_NODE_REPLICAS) throw new Error(`a node reports at most ${MAX_NODE_REPLICAS} replicas`);
    const m: Member = { member, registering: false, drainAnnounced: false };
    if (this.#summariesRefused) member.summary?.disable();
    this.#members.set(member.replicaId, m);
    // Listeners cannot be removed: this one goes quiet once the member has left.
    member.source.onChange((urgent) => {
      if (this.#members.get(member.replicaId) === m && !m.registering) this.#cadence.changed(urgent);
    });
    this.#cadence.start();
    void this.#cadence.now();
  }

  /** The replica leaves the node's reports; resolves once no node report naming it is in flight. */
  remove(replicaId: string): Promise<void> {
    this.#members.delete(replicaId);
    return this.#cadence.settled();
  }

  /** Sends a node report now (coalesced with one in flight). */
  report(): Promise<void> {
    return this.#cadence.now();
  }

  settled(): Promise<void> {
    return this.#cadence.settled();
  }

  stop(): void {
    this.#cadence.stop();
  }

  async #send(): Promise<void> {
    const members = [...this.#members.values()].filter((m) => !m.registering);
    if (members.length === 0) return;
    const fields = summaryFields(
      members.map((m) => {
        const field = m.member.summary?.next();
        return { field, since: m.member.summary?.dueSince };
      }),
    );
    const entries = members.map((m, i) => reportEntry(m.member.replicaId, m.member.source, fields[i]));
    this.#key ??= importReplicaKey(this.#o.key);
    const key = await this.#key;
    // One message at a time: their nonces arrive in order.
    for (const { message, start } of nodeReportBatches(this.#o.deployment, this.node, entries)) {
      let ack: Partial<NodeReportAck>;
      try {
        const res = await postControl(this.#o.edgeUrl, key, this.nonces, ControlPath.nodeReport, message);
        ack = (await res.json()) as Partial<NodeReportAck>;
      } catch (err) {
        const field = refusedReportField(err);
        if (field !== undefined) {
          this.#log(`the edge does not take ${field} (an older edge): reporting without it`);
          void this.#cadence.now();
          return;
        }
        if (refusesSummaries(err) && message.reports.some((r) => r.prefix_cache !== undefined)) {
          // An edge from before summaries: the node reports without them, the next one at once.
          this.#log("the edge does not take prefix-cache summaries (an older edge): reporting without them");
          this.#summariesRefused = true;
          for (const m of this.#members.values()) m.member.summary?.disable();
          void this.#cadence.now();
          return;
        }
        this.#log(`node report failed: ${String(err)}`);
        continue;
      }
      this.accepted++;
      const outcomes = ack.outcomes;
      if (!Array.isArray(outcomes) || outcomes.length !== message.reports.length) {
        this.#log(`node report answered without one outcome per entry: ${JSON.stringify(ack).slice(0, 200)}`);
        continue;
      }
      outcomes.forEach((o, i) => {
        const m = members[start + i]!;
        // "ok" and "drain" entries were applied; the others' summaries go again.
        if (o === "ok" || o === "drain") m.member.summary?.accepted(fields[start + i]);
        this.#outcome(m, o);
      });
    }
  }

  #outcome(m: Member, outcome: Outcome): void {
    // Left (or left and came back as another member) while the report was in flight.
    if (this.#members.get(m.member.replicaId) !== m) return;
    if (outcome === "drain") {
      if (m.drainAnnounced) return;
      m.drainAnnounced = true;
      this.#log(`the edge asks ${m.member.replicaId} to drain`);
      m.member.onDrainRequested?.();
      return;
    }
    if (outcome !== "unknown_replica" || m.registering) return;
    // The routing object forgot it (swept after a long silence, or never had it): join again.
    m.registering = true;
    this.#log(`the edge does not know ${m.member.replicaId}: registering it again`);
    m.member.registerAgain().then(
      () => {
        m.registering = false;
        if (this.#members.get(m.member.replicaId) === m) void this.#cadence.now();
      },
      (err: unknown) => {
        // Still unknown at the next node report, which tries again.
        m.registering = false;
        this.#log(`registering ${m.member.replicaId} again failed: ${String(err)}`);
      },
    );
  }
}
