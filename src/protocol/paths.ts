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

/** The POST endpoints whose body the edge reads (to route it, to key its prompt), by path: each endpoint's one name. */
export const OPENAI_ENDPOINTS = {
  [OpenAIPath.chat]: "chat",
  [OpenAIPath.completions]: "completions",
  [OpenAIPath.embeddings]: "embeddings",
  [OpenAIPath.responses]: "responses",
} as const;

export type OpenAIEndpoint = (typeof OPENAI_ENDPOINTS)[keyof typeof OPENAI_ENDPOINTS];

const ENDPOINT_PATHS = Object.entries(OPENAI_ENDPOINTS) as [string, OpenAIEndpoint][];

/** The endpoint a request path ends in (`/v1/chat/completions`, a deployment's `/llm/v1/completions`, ...), if any. */
export function openaiEndpointOf(path: string): OpenAIEndpoint | undefined {
  for (const [suffix, endpoint] of ENDPOINT_PATHS) if (path.endsWith(suffix)) return endpoint;
  return undefined;
}

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

/**
 * Where a decode replica reads a prefill replica's KV blocks (prefill/decode
 * disaggregation on the reference replica, §2d): a signed POST between replicas, under
 * the system prefix, so the edge never forwards a client's request there.
 */
export const KV_TRANSFER_PATH = "/-/kv-transfer";

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
  // vLLM's LoRA and weight-update routes (VLLM_ALLOW_RUNTIME_LORA_UPDATING, the RL weight transfer).
  "/v1/load_lora_adapter",
  "/v1/unload_lora_adapter",
  "/update_weights",
  "/update_weights_from_ipc",
  "/init_weight_transfer_engine",
  "/get_world_size",
  // SGLang's admin routes.
  "/load_lora_adapter",
  "/unload_lora_adapter",
  "/get_model_info",
  "/model_info",
  "/set_internal_state",
  "/get_internal_state",
  "/get_load",
  "/v1/loads",
  "/init_weights_update_group",
  "/destroy_weights_update_group",
  "/update_weight_version",
  "/get_weight_version",
  "/weight_version",
  "/start_expert_distribution_record",
  "/stop_expert_distribution_record",
  "/dump_expert_distribution_record",
  "/open_session",
  "/close_session",
  "/slow_down",
  "/flush_cache",
  "/update_weights_from_disk",
  "/update_weights_from_tensor",
  "/update_weights_from_distributed",
  "/release_memory_occupation",
  "/resume_memory_occupation",
  "/abort_request",
  "/configure_logging",
]);

/** Operational routes that are a family of paths (SGLang's `/dumper/{method}`). */
export const REPLICA_OPERATIONAL_PREFIXES: readonly string[] = [REPLICA_SYSTEM_PREFIX, "/dumper/"];

/** A dispatched path as the operational routes are compared: no `;` parameters, no trailing slashes (some servers ignore both). */
export function operationalPathOf(path: string): string {
  const semi = path.indexOf(";");
  return (semi >= 0 ? path.slice(0, semi) : path).replace(/\/+$/, "");
}

/**
 * Whether a dispatched path is one of a replica's operational routes. Compared
 * without trailing slashes and without `;` parameters, which some servers ignore
 * (`/metrics/`, `/metrics;x` reach `/metrics` there).
 */
export function isReplicaOperationalPath(path: string): boolean {
  const bare = operationalPathOf(path);
  if (REPLICA_OPERATIONAL_PREFIXES.some((p) => path.startsWith(p) || `${bare}/` === p)) return true;
  return REPLICA_OPERATIONAL_PATHS.has(bare);
}
