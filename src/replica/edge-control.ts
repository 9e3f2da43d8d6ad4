/**
 * How a replica (or a node's agent) talks to the edge's control plane, for both
 * senders (edge-client.ts, one replica; node-reporter.ts, a node's batch): what
 * it reports, the signed POST, and the edge's refusals.
 */
import { MAX_DRAIN_DEADLINE_MS, MAX_PREFILL_RATE, MAX_PREFILL_WAIT_MS, signedHeaders, type Load, type NodeReportEntry, type NonceCounter } from "../protocol/index.ts";
import type { SummaryField } from "./summary-cadence.ts";

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
  /** While draining with a deadline: when the replica stops serving, epoch ms (reported as drain_deadline_ms). */
  drainDeadline?(): number | undefined;
}

/**
 * Report fields newer than some edges: an edge from before one refuses a report that
 * carries it (400, its schema's unknown key). Once refused, every report of this
 * process goes without that field.
 */
export const OPTIONAL_REPORT_FIELDS = ["drain_deadline_ms", "prefill_wait_ms", "prefill_rate"] as const;
export type OptionalReportField = (typeof OPTIONAL_REPORT_FIELDS)[number];
const refusedFields = new Set<OptionalReportField>();

/**
 * The optional report field (OPTIONAL_REPORT_FIELDS) a refusal names, the first time it
 * names it: from then on reports leave it out. Undefined for any other error, and for a
 * field already learnt.
 */
export function refusedReportField(err: unknown): OptionalReportField | undefined {
  if (!(err instanceof EdgeError) || err.status !== 400) return undefined;
  for (const f of OPTIONAL_REPORT_FIELDS) {
    if (refusedFields.has(f) || !err.body.includes(`"${f}"`)) continue;
    refusedFields.add(f);
    return f;
  }
  return undefined;
}

/** Busy: requests running or waiting (changes then wait for the busy window, report-cadence.ts). */
export function isBusy(source: LoadSource): boolean {
  const l = source.load();
  return l.ongoing + l.queued > 0;
}

/**
 * One replica's report as it is now: the body of a ReportMessage, or one entry of
 * a node report. `prefixCache`: the summary field to carry (summary-cadence.ts), if any.
 */
export function reportEntry(replicaId: string, source: LoadSource, prefixCache?: SummaryField): NodeReportEntry {
  const load = source.load();
  const deadline = load.state === "draining" && !refusedFields.has("drain_deadline_ms") ? source.drainDeadline?.() : undefined;
  return {
    replica_id: replicaId,
    seq: load.seq,
    ts: Date.now(),
    state: load.state,
    ongoing: load.ongoing,
    queued: load.queued,
    ...(load.kv !== undefined && { kv_cache_usage: load.kv }),
    ...(load.prefillWaitMs !== undefined && !refusedFields.has("prefill_wait_ms") && { prefill_wait_ms: Math.min(MAX_PREFILL_WAIT_MS, load.prefillWaitMs) }),
    ...(load.prefillRate !== undefined && !refusedFields.has("prefill_rate") && { prefill_rate: Math.min(MAX_PREFILL_RATE, load.prefillRate) }),
    models: source.models,
    loading: source.loading,
    ...(prefixCache !== undefined && { prefix_cache: prefixCache }),
    ...(deadline !== undefined && { drain_deadline_ms: Math.min(MAX_DRAIN_DEADLINE_MS, Math.max(0, Math.round(deadline - Date.now()))) }),
  };
}

/** POSTs a control message, signed over the exact bytes sent (docs/protocol.md §1); a non-2xx answer throws EdgeError. */
export async function postControl(edgeUrl: string, key: CryptoKey, nonces: NonceCounter, path: string, message: unknown): Promise<Response> {
  // Appended, not resolved: an edge mounted under a prefix (`https://host/ml`) takes control messages at `/ml/-/replicas/...`.
  const url = new URL(`${edgeUrl.replace(/\/+$/, "")}${path}`);
  const body = new TextEncoder().encode(JSON.stringify(message));
  const signature = await signedHeaders(key, { timestamp: Date.now(), nonce: nonces.next(), path: url.pathname, body });
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...signature },
    body,
    signal: AbortSignal.timeout(5_000),
  });
  if (!res.ok) throw new EdgeError(res.status, await res.text());
  return res;
}

export class EdgeError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`edge answered ${status}: ${body.slice(0, 300)}`);
  }
}

/**
 * An edge from before prefix-cache summaries refuses a report carrying one (400,
 * unknown field `prefix_cache`): the sender then reports without them.
 */
export function refusesSummaries(err: unknown): boolean {
  return err instanceof EdgeError && err.status === 400 && err.body.includes('"prefix_cache"');
}
