/**
 * Telemetry shapes shared by the proxy isolates, the Telemetry Durable Object,
 * the /-/metrics endpoint, the dashboard and the CLI. Proxies count in memory and
 * flush deltas at most every few seconds; nothing is written per request.
 */

/** Upper bounds (seconds) of the latency histogram buckets; +Inf is implied. */
export const LATENCY_BUCKETS_S: readonly number[] = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export type StatusClass = "2xx" | "3xx" | "4xx" | "5xx";

/** A histogram: counts per bucket (same order as LATENCY_BUCKETS_S, plus one for +Inf), sum and count. */
export interface Histogram {
  buckets: number[];
  sum: number;
  count: number;
}

/** What one isolate counted for one deployment since its last flush. */
export interface DeploymentDelta {
  deployment: string;
  requests: Record<StatusClass, number>;
  /** Dispatch attempts after the first (a replica refused or was unreachable). */
  retries: number;
  /** Refusals (503 + x-switchyard-rejected) received from replicas. */
  rejections: number;
  /** Replicas ejected by this isolate's circuit breakers. */
  ejections: number;
  /** Time to the whole response (stream end), seconds. */
  duration: Histogram;
  /** Time to the response head, seconds. */
  ttfb: Histogram;
  /**
   * LLM tokens by API key label (the key's public prefix, or "public"), from the
   * replicas' `usage` on the /v1 routes. The labels are bounded by the keys issued.
   */
  tokens: Record<string, TokenCounts>;
  /**
   * Prompts keyed by bytes because the deployment's tokenizer could not render them as
   * its engine would, by reason (src/prompt/tokenizers/: a few fixed words). Absent
   * from an isolate that predates it.
   */
  promptFallbacks?: Record<string, number>;
  /**
   * Requests with a time-to-first-token objective, by what the choice predicted: met,
   * missed (served anyway: no replica was predicted to meet it), or refused early
   * (`policy.latency.slo.refuse`). Absent from an isolate that predates it.
   */
  sloOutcomes?: Partial<Record<SloOutcome, number>>;
}

/** What became of a request with a TTFT objective, by its prediction (docs/latency-choice.md). */
export type SloOutcome = "predicted_met" | "predicted_missed" | "refused";

/** Prompt (input) and completion (output) tokens. */
export interface TokenCounts {
  prompt: number;
  completion: number;
}

/** One isolate's flush. */
export interface TelemetryFlush {
  /** Random per isolate, so the object can tell isolates apart (counting them). */
  isolate: string;
  sentAt: number;
  deltas: DeploymentDelta[];
}

/** Totals since the Telemetry object started, per deployment (Prometheus counters). */
export interface DeploymentTotals extends Omit<DeploymentDelta, "deployment"> {
  deployment: string;
}

/** One point of a dashboard chart series: a 5 s window. */
export interface WindowPoint {
  /** Window start, epoch ms. */
  t: number;
  requestsPerSecond: number;
  errorsPerSecond: number;
  /** Latency percentiles over the window (from histogram buckets), ms; null without requests. */
  p50Ms: number | null;
  p99Ms: number | null;
}

/** A replica as the dashboard shows it. */
export interface ReplicaRow {
  id: string;
  url: string;
  state: "ready" | "draining";
  ongoing: number;
  queued: number;
  max: number;
  models: string[];
  loading: string[];
  /** Its region, where it declared one (register's `region`). */
  region?: string;
}

export interface DeploymentFrame {
  name: string;
  routePrefix: string;
  replicas: ReplicaRow[];
  /** Last WINDOWS_KEPT windows, oldest first. */
  series: WindowPoint[];
  totals: DeploymentTotals;
  sessionBindings: number | null;
  desiredReplicas: number | null;
}

/** What the dashboard WebSocket pushes (about once a second while it is open). */
export interface DashboardFrame {
  type: "frame";
  at: number;
  deployments: DeploymentFrame[];
}
