/**
 * The edge's own routes, under `/-/`: health, the routing table, metrics, the
 * admin API, the dashboard and the control plane (ControlPath, messages.ts).
 * The reference replica serves `/-/healthz` too.
 */
export const SystemPath = {
  prefix: "/-",
  healthz: "/-/healthz",
  livez: "/-/livez",
  routes: "/-/routes",
  metrics: "/-/metrics",
  metricsRestart: "/-/metrics/restart",
  deployments: "/-/deployments",
  dashboard: "/-/dashboard",
  dashboardLive: "/-/dashboard/live",
  replicas: "/-/replicas",
} as const;

/** The OpenAI-compatible paths: the edge routes the POSTs by their body's model, and replicas and engines serve them. */
export const OpenAIPath = {
  chat: "/v1/chat/completions",
  completions: "/v1/completions",
  embeddings: "/v1/embeddings",
  // OpenAI's Responses API (vLLM serves it too).
  responses: "/v1/responses",
  models: "/v1/models",
} as const;

/**
 * Paths a replica serves for its operators, not for clients: its own system
 * routes under `/-/` (the reference replica's `/-/healthz`, with its capacity,
 * admission counts and dispatch refusals), the health and metrics routes engines
 * leave open for probes and scrapers, and the admin routes engines such as vLLM
 * and SGLang serve beside their API. The edge does not forward a request whose
 * dispatched path is one of them unless its deployment asks
 * (`access.replicaRoutes`): a `stripPrefix` deployment would otherwise show
 * `/llm/-/healthz` and `/llm/metrics` to anyone (docs/security.md §5).
 */
export const REPLICA_SYSTEM_PREFIX = "/-/";

export const REPLICA_OPERATIONAL_PATHS: ReadonlySet<string> = new Set([
  // Probes and scrapers (the reference replica's LLM backend, vLLM, SGLang, TorchServe).
  "/-",
  "/health",
  "/healthz",
  "/health_generate",
  "/ping",
  "/metrics",
  "/version",
  "/load",
  "/server_info",
  "/get_server_info",
  // vLLM's development and admin routes.
  "/reset_prefix_cache",
  "/reset_mm_cache",
  "/sleep",
  "/wake_up",
  "/is_sleeping",
  "/collective_rpc",
  "/start_profile",
  "/stop_profile",
  "/scale_elastic_ep",
  "/is_scaling_elastic_ep",
  "/pause",
  "/resume",
  "/is_paused",
  // SGLang's admin routes.
  "/flush_cache",
  "/update_weights_from_disk",
  "/update_weights_from_tensor",
  "/update_weights_from_distributed",
  "/release_memory_occupation",
  "/resume_memory_occupation",
  "/abort_request",
  "/configure_logging",
]);

/**
 * Whether a dispatched path is one of a replica's operational routes. Compared
 * without trailing slashes and without `;` parameters, which some servers ignore
 * (`/metrics/`, `/metrics;x` reach `/metrics` there).
 */
export function isReplicaOperationalPath(path: string): boolean {
  if (path.startsWith(REPLICA_SYSTEM_PREFIX)) return true;
  const semi = path.indexOf(";");
  const bare = (semi >= 0 ? path.slice(0, semi) : path).replace(/\/+$/, "");
  return REPLICA_OPERATIONAL_PATHS.has(bare);
}
