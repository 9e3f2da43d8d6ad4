/**
 * Prometheus text exposition (format 0.0.4) of a deployment's metrics: the
 * proxy counters summed over isolates by the Telemetry object, and gauges read
 * from the routing state at scrape time. Pure.
 */
import type { ReplicaView } from "../protocol/index.ts";
import type { DeploymentTotals, Histogram } from "./types.ts";
import { LATENCY_BUCKETS_S } from "./types.ts";

export interface DeploymentMetrics {
  totals: DeploymentTotals;
  replicas: ReplicaView[];
  sessionBindings: number | null;
  desiredReplicas: number | null;
}

/** A label value as the exposition format writes it: backslash, double quote and newline escaped. */
export const escapeLabelValue = (v: string) => v.replaceAll("\\", "\\\\").replaceAll('"', '\\"').replaceAll("\n", "\\n");
const labels = (l: Record<string, string>) =>
  `{${Object.entries(l)
    .map(([k, v]) => `${k}="${escapeLabelValue(v)}"`)
    .join(",")}}`;

class Families {
  readonly #lines = new Map<string, { help: string; type: string; samples: string[] }>();

  add(name: string, type: "counter" | "gauge" | "histogram", help: string, sample: string): void {
    let f = this.#lines.get(name);
    if (!f) {
      f = { help, type, samples: [] };
      this.#lines.set(name, f);
    }
    f.samples.push(sample);
  }

  text(): string {
    let out = "";
    for (const [name, f] of this.#lines) out += `# HELP ${name} ${f.help}\n# TYPE ${name} ${f.type}\n${f.samples.join("\n")}\n`;
    return out;
  }
}

function histogram(fam: Families, name: string, help: string, base: Record<string, string>, h: Histogram): void {
  let cumulative = 0;
  for (let i = 0; i < LATENCY_BUCKETS_S.length; i++) {
    cumulative += h.buckets[i] ?? 0;
    fam.add(name, "histogram", help, `${name}_bucket${labels({ ...base, le: String(LATENCY_BUCKETS_S[i]) })} ${cumulative}`);
  }
  fam.add(name, "histogram", help, `${name}_bucket${labels({ ...base, le: "+Inf" })} ${h.count}`);
  // Sums of many float seconds: round away the binary noise (microsecond precision).
  fam.add(name, "histogram", help, `${name}_sum${labels(base)} ${Math.round(h.sum * 1e6) / 1e6}`);
  fam.add(name, "histogram", help, `${name}_count${labels(base)} ${h.count}`);
}

export function renderPrometheus(deployments: DeploymentMetrics[], liveIsolates: number): string {
  const fam = new Families();
  fam.add("switchyard_proxy_isolates", "gauge", "Proxy isolates that flushed metrics in the last 30 s.", `switchyard_proxy_isolates ${liveIsolates}`);
  for (const d of deployments) {
    const dep = { deployment: d.totals.deployment };
    for (const cls of ["2xx", "3xx", "4xx", "5xx"] as const) {
      fam.add("switchyard_requests_total", "counter", "Requests answered by the proxy, by status class.", `switchyard_requests_total${labels({ ...dep, code: cls })} ${d.totals.requests[cls]}`);
    }
    fam.add("switchyard_retries_total", "counter", "Dispatch attempts after the first (a replica refused or was unreachable).", `switchyard_retries_total${labels(dep)} ${d.totals.retries}`);
    fam.add("switchyard_replica_rejections_total", "counter", "Requests replicas refused before accepting (503 + x-switchyard-rejected).", `switchyard_replica_rejections_total${labels(dep)} ${d.totals.rejections}`);
    fam.add("switchyard_replica_ejections_total", "counter", "Replicas ejected by proxy circuit breakers.", `switchyard_replica_ejections_total${labels(dep)} ${d.totals.ejections}`);
    for (const [key, t] of Object.entries(d.totals.tokens ?? {})) {
      for (const kind of ["prompt", "completion"] as const) {
        fam.add("switchyard_tokens_total", "counter", "LLM tokens on the /v1 routes, from the replicas' usage, by API key prefix (\"public\" without a key).", `switchyard_tokens_total${labels({ ...dep, key, kind })} ${t[kind]}`);
      }
    }
    for (const [reason, n] of Object.entries(d.totals.promptFallbacks ?? {})) {
      fam.add("switchyard_prompt_key_fallbacks_total", "counter", "Prompts not keyed in full as their engine would tokenize them, by reason: keyed by bytes because the deployment's tokenizer could not render them, or (tokenize_budget) by the head its tokenizing budget allowed.", `switchyard_prompt_key_fallbacks_total${labels({ ...dep, reason })} ${n}`);
    }
    for (const [outcome, n] of Object.entries(d.totals.sloOutcomes ?? {})) {
      fam.add("switchyard_slo_requests_total", "counter", "Requests with a time-to-first-token objective, by what the latency choice predicted: predicted_met, predicted_missed (served though no replica was predicted to meet it), refused (policy.latency.slo.refuse).", `switchyard_slo_requests_total${labels({ ...dep, outcome })} ${n}`);
    }
    histogram(fam, "switchyard_request_duration_seconds", "Time to the whole response (stream end).", dep, d.totals.duration);
    histogram(fam, "switchyard_time_to_first_byte_seconds", "Time to the response head.", dep, d.totals.ttfb);
    const byState = { ready: 0, draining: 0 };
    for (const r of d.replicas) byState[r.load.state]++;
    for (const state of ["ready", "draining"] as const) {
      fam.add("switchyard_replicas", "gauge", "Replicas with a fresh report, by state.", `switchyard_replicas${labels({ ...dep, state })} ${byState[state]}`);
    }
    for (const r of d.replicas) {
      const rl = { ...dep, replica: r.id };
      fam.add("switchyard_replica_ongoing_requests", "gauge", "Requests a replica reports executing.", `switchyard_replica_ongoing_requests${labels(rl)} ${r.load.ongoing}`);
      fam.add("switchyard_replica_queued_requests", "gauge", "Requests a replica reports queued.", `switchyard_replica_queued_requests${labels(rl)} ${r.load.queued}`);
      fam.add("switchyard_replica_max_ongoing_requests", "gauge", "A replica's capacity (max_ongoing_requests).", `switchyard_replica_max_ongoing_requests${labels(rl)} ${r.load.max}`);
      fam.add("switchyard_replica_models_loaded", "gauge", "Models a replica has loaded (multiplexing).", `switchyard_replica_models_loaded${labels(rl)} ${r.models.length}`);
      for (const m of r.models) fam.add("switchyard_model_loaded", "gauge", "1 for each model loaded on each replica.", `switchyard_model_loaded${labels({ ...rl, model: m })} 1`);
    }
    if (d.sessionBindings !== null) {
      fam.add("switchyard_session_bindings", "gauge", "Session → replica bindings stored.", `switchyard_session_bindings${labels(dep)} ${d.sessionBindings}`);
    }
    if (d.desiredReplicas !== null) {
      fam.add("switchyard_desired_replicas", "gauge", "The autoscaling signal: replicas the deployment should have.", `switchyard_desired_replicas${labels(dep)} ${d.desiredReplicas}`);
    }
  }
  return fam.text();
}
