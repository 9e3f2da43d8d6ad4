/**
 * What the reference replica's side of a backend kind gets and gives
 * (src/replica/backends/<kind>.ts, registered in ./index.ts; the kind's config
 * side is src/backends/<kind>.ts). Node only: the Worker never imports it.
 */
import type { AdmissionControl } from "../admission.ts";
import type { RequestHandler } from "../handlers.ts";
import type { LlmService } from "../llm/openai-handler.ts";
import type { ModelCache } from "../../models/model-cache.ts";
import type { CacheSummaryProvider } from "../summary-cadence.ts";
import type { ContinuationForm, ReplicaRole, ReplicaRoleFlag } from "../../protocol/index.ts";

export interface ReplicaBackendContext {
  /** The backend's own flags as given (validated by the kind). */
  flags: {
    text?: string | undefined;
    model?: string | undefined;
    models?: string | undefined;
    "max-models-per-replica"?: string | undefined;
    "default-model"?: string | undefined;
    /** proxy: the app's URL, and where it serves Prometheus metrics. */
    upstream?: string | undefined;
    "upstream-metrics"?: string | undefined;
    /** llm: usage carries prompt_tokens_details.cached_tokens (vLLM's --enable-prompt-tokens-details). */
    "enable-prompt-tokens-details"?: boolean | undefined;
    /** llm: a part in prefill/decode disaggregation (vLLM's kv_role): serves kv_transfer_params (src/replica/llm/kv-transfer.ts). */
    role?: ReplicaRoleFlag | undefined;
  };
  /** Benchmark knobs, validated by the CLI (each belongs to one kind). */
  knobs: {
    serviceMs: number;
    kvBlocks: number;
    prefillMs: number;
    prefillTokenUs: number;
    /** llm: a decode step waits for the prefill on the lane to end (engine.ts prefillStallsDecode). */
    prefillStallsDecode?: boolean;
    decodeMs: number;
    /** vLLM's KV events over ZMQ (llm): where to bind, and the topic. */
    kvEvents?: { endpoint: string; replayEndpoint?: string; topic: string };
  };
  admission: AdmissionControl;
  log(msg: string): void;
  /** Exits 2 with the message and the usage. */
  fail(msg: string): never;
  /** Sends a load report now (nothing before the edge client exists, and for standalone replicas). */
  reportNow(): Promise<void>;
  /** Who the replica is: its id, deployment and replica key (absent: standalone), and its URL once it listens. */
  identity: { replicaId: string; deployment: string; key?: string; url: () => string };
}

export interface ReplicaBackendParts {
  handler: RequestHandler;
  /** Multiplexing replicas: the model cache (reported in register and /-/replica). */
  cache?: ModelCache;
  /** Language models: what the server answers before admission, and the state it describes. */
  llm?: { unadmitted: LlmService["unadmitted"]; describe: () => Record<string, unknown>; handOver?: LlmService["handOver"] };
  /** Backends with a prefix cache: its summary, carried by load reports when it changed. */
  cacheSummary?: CacheSummaryProvider;
  /** The stream continuations it takes, declared at register (docs/migration.md); absent: both. */
  continues?: ContinuationForm[];
  /** Its prefill/decode roles, declared at register (docs/protocol.md §2d); absent: both, as a unified engine. */
  roles?: ReplicaRole[];
}


/** Builds a kind's handler (and loads its model) before the replica listens. */
export type ReplicaBackend = (ctx: ReplicaBackendContext) => Promise<ReplicaBackendParts>;
