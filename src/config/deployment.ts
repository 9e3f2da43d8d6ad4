/**
 * The typed API a user's `functions/*.ts` files use to declare a served
 * deployment: its route, its backend pool, its dispatch policy and limits.
 * Everything a user may set is defined and documented here, with its default.
 */
import { z } from "zod";
import { Backend as BackendUnion } from "../backends/index.ts";
import { ModelId } from "../backends/model-id.ts";
import { DEPLOYMENT_NAME } from "../protocol/messages.ts";
import { MAX_PREFILL_RATE, MAX_ROUTING_SHARDS, MAX_SLO_MS } from "../protocol/limits.ts";
import { PD_PROTOCOL_NAMES } from "../protocol/disaggregation.ts";

/**
 * `openai.disaggregation.minUncachedTokens` by default: 16 blocks of 16 tokens. Below it a
 * prefill is a few milliseconds of a GPU's time (about 10 ms at 25,000 tokens/s), no more
 * than the second hop and the KV transfer a split adds, and too short to stall the
 * decode replica's batch; above it the stall grows with the prompt (docs/pd.md).
 */
export const DEFAULT_PD_MIN_UNCACHED_TOKENS = 256;
import { BALANCER_NAMES, FILTER_NAMES, PICKER_NAMES } from "../policy/balancers/index.ts";
import { DEFAULT_LATENCY_SETTINGS } from "../policy/latency-model.ts";
import { DEFAULT_LOAD_FACTOR, DEFAULT_PREFILL_WEIGHT } from "../policy/prefix-score.ts";
import { SCORER_NAMES } from "../policy/scorers/index.ts";
import { PROMPT_TOKENIZER_NAMES, type PromptTokenizerName } from "../prompt/tokenizers/index.ts";

/** A built-in profile by name (src/policy/balancers/index.ts). */
const BalancerName = z.enum(BALANCER_NAMES);
/** A profile of the deployment's own, in the registered plugins' names. */
const BalancerProfile = z
  .object({
    /** Filters in the order they run, each narrowing the pool (never emptying it). */
    filters: z.array(z.enum(FILTER_NAMES)).max(8).default([]),
    /** Weights of the cost terms the picker reads (src/policy/scorers/); unset: `prefix.scorers` over the defaults. */
    scorers: z.partialRecord(z.enum(SCORER_NAMES), z.number().min(0).max(100)).optional(),
    picker: z.enum(PICKER_NAMES),
  })
  .strict()
  .refine((p) => p.scorers === undefined || p.picker === "cheapest", { message: 'only the "cheapest" picker reads scorers', path: ["scorers"] });
/**
 * `policy.balancer`: a name or a profile, each checked by its own schema so that an
 * error names the field at fault (a zod union would say only "invalid input").
 */
const Balancer = z
  .custom<z.input<typeof BalancerName> | z.input<typeof BalancerProfile>>()
  .transform((value, ctx): z.output<typeof BalancerName> | z.output<typeof BalancerProfile> => {
    const parsed = (typeof value === "string" ? BalancerName : BalancerProfile).safeParse(value);
    if (parsed.success) return parsed.data;
    for (const issue of parsed.error.issues) ctx.addIssue({ ...issue, path: [...issue.path] });
    return z.NEVER;
  });
/** Methods a deployment may serve (the default: all of them). */

/** `routing.refreshEveryRequests`' default: at 10 req/s per isolate, a view ask every ~2 s (src/proxy/serve/view.ts). */
export const DEFAULT_REFRESH_EVERY_REQUESTS = 20;
export const SERVABLE_METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"] as const;

/** What serves the deployment: one of the registered backend kinds (src/backends/). */
const Backend = BackendUnion;

const DeploymentInput = z
  .object({
    /** Deployment name: lowercase letters, digits, '-'. Also the routing Durable Object's name. */
    name: z.string().regex(DEPLOYMENT_NAME),
    /** Longest-prefix route, e.g. "/hello". "/" catches everything no other prefix takes. */
    routePrefix: z
      .string()
      .regex(/^\/([A-Za-z0-9._~-]+(\/[A-Za-z0-9._~-]+)*)?$/, "route prefixes look like /a/b, without a trailing slash"),
    backend: Backend,
    /** Replicas `npm start` launches for this deployment on this machine. */
    localReplicas: z.number().int().min(0).max(256).default(2),
    /** Requests a replica executes at once before it rejects (Ray Serve's max_ongoing_requests). */
    maxOngoingRequests: z.number().int().min(1).max(100_000).default(5),
    /**
     * HTTP methods the deployment serves; any other gets 405 (with Allow) before a
     * replica sees it. TRACE, CONNECT and unknown methods are never forwarded.
     */
    methods: z
      .array(z.enum(SERVABLE_METHODS))
      .min(1)
      .refine((m) => new Set(m).size === m.length, "a method is listed twice")
      .default([...SERVABLE_METHODS]),
    policy: z
      .object({
        /** Dispatch attempts per request, counting the first (retries happen only before a replica accepted). */
        maxAttempts: z.number().int().min(1).max(10).default(3),
        /** Backoff before retry k is min(cap, base * 2^(k-1)) with full jitter, ms. */
        backoffBaseMs: z.number().int().min(0).max(10_000).default(5),
        backoffCapMs: z.number().int().min(0).max(60_000).default(250),
        /** Time a replica has to start answering (response headers), ms; then 504. */
        requestTimeoutMs: z.number().int().min(1).max(600_000).default(60_000),
        /** Forward the path with the route prefix removed (Ray's root_path style) instead of unchanged. */
        stripPrefix: z.boolean().default(false),
        /**
         * Requests have no side effects, so one whose connection to a replica was
         * lost may run again elsewhere. workerd reports a refused connection and a
         * connection lost after the request was sent the same way, so without this
         * only idempotent methods (GET, HEAD, OPTIONS, PUT, DELETE) or requests with
         * an Idempotency-Key are retried after a connection loss (nginx's rule).
         * Rejections (503 + x-switchyard-rejected) are always retried.
         */
        idempotent: z.boolean().default(false),
        /**
         * Whether the edge's readiness (`/-/healthz`) waits for this deployment to have
         * a ready replica. Unset: it does for replicas the stack or platform starts, not
         * for a deployment that scales to zero (it holds requests until one starts) nor
         * for one whose replicas are external (agents that join when they will: listed
         * as waiting, not blocking). `true` makes either block too.
         */
        requireReadyReplica: z.boolean().optional(),
        /**
         * Outlier ejection (circuit breaker, per proxy isolate): a replica that fails
         * this many dispatches in a row (connection lost, no response head before the
         * deadline, or refusing while claiming room) is skipped for `ejectBaseMs`,
         * doubled on each ejection in a row up to 60 s; then one probe request decides.
         * 0 turns ejection off.
         */
        ejectAfterFailures: z.number().int().min(0).max(100).default(3),
        ejectBaseMs: z.number().int().min(100).max(60_000).default(5_000),
        /**
         * How a request picks its replica: a built-in profile's name, or a profile
         * of the deployment's own, `{ filters: [...], picker, scorers? }`, in the
         * plugins' names (src/policy/balancers/index.ts; docs/configuration.md).
         * The built-in profiles:
         * - "load_aware" (default): power of two random choices on load, i.e. each
         *   replica's reported ongoing + queued plus this isolate's in-flight
         *   dispatches to it, relative to its max_ongoing_requests; replicas this
         *   view believes full are avoided while others have room.
         * - "round_robin": the next candidate in a stable order (sorted by replica
         *   id), one counter per proxy isolate and deployment; ignores load.
         * - "random": a candidate chosen uniformly at random; ignores load.
         * - "prefix_hash": prompts sharing a prefix go to one replica from every
         *   isolate (rendezvous hashing on the prompt's first 16 blocks), skipping
         *   replicas above the bounded-load line (`prefix.loadFactor`); no engine
         *   cooperation needed (docs/prefix-routing.md).
         * - "prefix_cache": the replica whose prefix cache already holds most of the
         *   prompt, by its reported cache summary and this isolate's recent
         *   dispatches, weighed against its load (`prefix.prefillWeight`), under the
         *   same load line; needs the edge to tokenize as the engine does
         *   (`prefix.tokenizer`).
         * The prefix balancers read the prompt of OpenAI-style bodies (chat
         * messages, completion prompt, Responses input; on /v1 and on path-routed
         * .../v1/... requests with a body the edge holds); without one they choose as
         * "load_aware". All skip draining, stale, cooling-down and ejected replicas,
         * and a refusal is retried on another replica as usual: only the choice
         * differs. A new session is placed by the balancer too (a prefix balancer
         * places it by its prompt, the others by rendezvous on the session id), then
         * sticks (`sessionAffinity`). A multiplexed model goes to replicas holding it
         * (the prefix balancers choose by prefix among its holders with room). The
         * two load-blind balancers exist as baselines (bench/dispatch-quality/dispatch-quality.ts) and
         * for fleets of identical replicas.
         */
        balancer: Balancer.default("load_aware"),
        /** Settings of the prefix balancers (docs/prefix-routing.md); ignored by the others. Unset: DEFAULT_PREFIX_POLICY. */
        prefix: z
          .object({
            /**
             * How the edge tokenizes prompts, one of src/prompt/tokenizers/index.ts:
             * "tiny-lm" (the reference replica's model, exactly), "bytes" (UTF-8, 64
             * bytes a block: any model, hash tier), a model family ("qwen3", "llama3",
             * "deepseek-v3", "mistral-nemo": the engine's tokenizer and chat template;
             * "gemma3": Gemma 3's, as the merges engine's spec; "gpt-oss": o200k_harmony
             * and vLLM's harmony rendering; each bundled only when named;
             * docs/prefix-routing.md), or "auto": the `llm`
             * backend's model (tiny-lm, or a family's engine stand-in), else "bytes".
             * The precise tier matches engine
             * reports only with the engine's own tokenizer and chat template.
             */
            tokenizer: z.enum(["auto", ...PROMPT_TOKENIZER_NAMES]).default("auto"),
            /**
             * ε of the bounded-load line: a replica whose fullness with this request
             * exceeds (1 + ε) × the mean is skipped, so a hot prefix spills instead of
             * queueing on one replica.
             */
            loadFactor: z.number().min(0).max(10).default(DEFAULT_LOAD_FACTOR),
            /** prefix_cache: weight of the prompt's uncached share (0..1) against the replica's fullness (0..1). */
            prefillWeight: z.number().min(0).max(100).default(DEFAULT_PREFILL_WEIGHT),
            /**
             * prefix_cache: the weights of its cost terms by name, one of src/policy/scorers/index.ts
             * (`prefill`, `slots`); a term not named keeps its default (prefill: prefillWeight, slots: 1).
             */
            scorers: z.partialRecord(z.enum(SCORER_NAMES), z.number().min(0).max(100)).optional(),
            /**
             * prefix_cache: how long what the edge learnt of a replica's cache counts, ms: a
             * dispatch there (this isolate's or a peer's) and the replica's summary, from when
             * this isolate got it. Under cache pressure a replica's cache turns over in about a
             * second, and older beliefs name blocks it has evicted. Unset: dispatches count
             * RECENT_PREFIX_TTL_MS and a summary until the next (src/policy/recent-prefixes.ts).
             */
            beliefMs: z.number().int().min(100).max(600_000).optional(),
            /**
             * tokenizer "gpt-oss": the date its engines write as the conversation's start in every
             * prompt's system message (vLLM's VLLM_SYSTEM_START_DATE; pin it there and here). Unset:
             * today's date in UTC, which matches engines whose clock is in UTC (vLLM's container's)
             * except around midnight.
             */
            startDate: z.string().regex(/^\d{4}-\d{2}-\d{2}$/, "a date as YYYY-MM-DD").optional(),
          })
          .strict()
          .optional(),
        /**
         * What the predicted time to first token assumes where a replica has not said, and
         * the deployment's latency objectives (docs/latency-choice.md; the `latency` balancer,
         * the `latency` scorer and the `slo` filter read it). Unset: DEFAULT_LATENCY_SETTINGS, no SLO.
         */
        latency: z
          .object({
            /** Uncached prompt tokens a second a replica prefills, for one that reports no rate of its own (Load.prefillRate). */
            prefillTokensPerSecond: z.number().int().min(1).max(MAX_PREFILL_RATE).default(DEFAULT_LATENCY_SETTINGS.prefillTokensPerSecond),
            /** A dispatch's time at a replica, ms, until the edge has measured one there (what a queue over capacity waits per request). */
            serviceMs: z.number().int().min(1).max(600_000).default(DEFAULT_LATENCY_SETTINGS.serviceMs),
            /**
             * Objectives for requests that carry none (`x-slo-ttft-ms`, `x-slo-tpot-ms` set their
             * own): the `slo` filter keeps the replicas predicted to meet `ttftMs`. `refuse`: when
             * none is predicted to, refuse the request at once (503 `slo_unattainable`) instead
             * of serving it late.
             */
            slo: z
              .object({
                ttftMs: z.number().int().min(1).max(MAX_SLO_MS).optional(),
                tpotMs: z.number().int().min(1).max(MAX_SLO_MS).optional(),
                refuse: z.boolean().default(false),
              })
              .strict()
              .optional(),
          })
          .strict()
          .optional(),
      })
      .strict()
      .default({
        maxAttempts: 3,
        backoffBaseMs: 5,
        backoffCapMs: 250,
        requestTimeoutMs: 60_000,
        stripPrefix: false,
        idempotent: false,
        ejectAfterFailures: 3,
        ejectBaseMs: 5_000,
        balancer: "load_aware",
      }),
    /**
     * Who may call the deployment. By default a client needs one of the
     * deployment's API keys (`Authorization: Bearer sk-sy-…`, created through the
     * admin API); `public: true` serves anyone, a choice the file states.
     */
    access: z
      .object({
        public: z.boolean().default(false),
        /**
         * Forward requests for a replica's operational routes under this deployment's
         * prefix: its `/-/` routes (the reference replica's `/-/healthz`: capacity,
         * admission counts), `/health`, `/metrics` and the engines' admin routes
         * (src/protocol/paths.ts: LoRA loading, weight updates, cache flushes). `true`
         * forwards them all; a list forwards the ones it names (as dispatched, e.g.
         * `["/v1/load_lora_adapter"]`). Off: the edge answers 404 and the replica never
         * sees them; scrape replicas directly, or through the edge's `/-/metrics`.
         */
        replicaRoutes: z.union([z.boolean(), z.array(z.string().regex(/^\/[!-~]{0,255}$/, "a path as dispatched")).max(64)]).default(false),
        /** Per-API-key rate limit (token bucket); unset: unlimited. Public deployments have no key to limit by. */
        rateLimit: z
          .object({
            /** Sustained requests per second per key. */
            requestsPerSecond: z.number().positive().max(1_000_000),
            /** Bucket size: requests a key may send at once after being idle. */
            burst: z.number().int().min(1).max(1_000_000),
          })
          .strict()
          .optional(),
        /**
         * Per-API-key token limit on the /v1 routes (docs/admission.md, "Token limits"): the
         * prompt and completion tokens of each answer's usage are charged to the key's
         * bucket once the answer has passed; a key whose bucket is empty gets 429
         * `token_limited` with Retry-After before its request reaches a replica. Kept across
         * isolates like `rateLimit`. Unset: unlimited.
         */
        tokenLimit: z
          .object({
            /** Sustained tokens per minute per key. */
            tokensPerMinute: z.number().int().min(1).max(1_000_000_000),
            /** Bucket size: tokens a key may spend at once after being idle. Default: one minute's worth. */
            burst: z.number().int().min(1).max(1_000_000_000).optional(),
          })
          .strict()
          .optional(),
      })
      .strict()
      .default({ public: false, replicaRoutes: false }),
    /**
     * Origins replicas may register with, e.g. "https://gpu-7.example.com" or
     * "https://*.gpu.example.com". Empty: any origin the global rules allow
     * (never link-local or cloud metadata addresses; in production only https
     * hostnames on port 443; loopback and private addresses only in local mode).
     */
    replicaOrigins: z.array(z.string().max(256)).max(256).default([]),
    /**
     * Model multiplexing (Ray Serve's @serve.multiplexed): a request names a model
     * with the header `serve_multiplexed_model_id` or `x-switchyard-model`; the
     * proxy prefers replicas that have it loaded. Off when absent.
     */
    multiplexing: z
      .object({
        /** Model ids requests may name; any other gets 404 model_not_found at the edge. Empty: any id is passed on. */
        models: z.array(ModelId).max(1024).default([]),
        /** Models one replica keeps loaded (Ray's max_num_models_per_replica); replicas evict the least recently used above it. */
        maxModelsPerReplica: z.number().int().min(1).max(1024).default(3),
        /** Model used when a request names none; unset: such requests are routed without a model. */
        defaultModel: ModelId.optional(),
      })
      .strict()
      .optional(),
    /**
     * OpenAI-compatible routes (POST /v1/chat/completions, /v1/completions,
     * /v1/embeddings; GET /v1/models): a request whose body names one of these
     * `models` is routed to this deployment, with the body forwarded unchanged
     * to the same /v1 path on a replica. With `multiplexing` on, the model name is
     * also the multiplexed model id (replicas holding it are preferred). Model
     * names are unique across deployments. Off when absent.
     */
    openai: z
      .object({
        models: z.array(ModelId).min(1).max(1024),
        /**
         * The engines take vLLM's `priority` request field: vLLM started with
         * `--scheduling-policy priority` (src/proxy/serve/admit.ts, bodyForEngine). The edge then
         * sets the field of /v1/chat/completions and /v1/completions bodies to the request's
         * priority, negated (vLLM serves lower values first); the only change it makes to a
         * body. Unset: bodies go unchanged (an engine without priority scheduling refuses a
         * priority other than 0).
         */
        enginePriority: z.enum(["vllm"]).optional(),
        /**
         * Stream migration (docs/migration.md): a streamed chat or completion whose replica
         * fails after the first byte is continued on another replica, at most this many times
         * per request (Dynamo's migration_limit). 0 (default): off, the stream ends with an
         * error event. Leave it 0 for engines whose generation has side effects.
         */
        migrationLimit: z.number().int().min(0).max(8).default(0),
        /**
         * With migration on: a stream that sends nothing for this long, ms, has failed (its
         * replica hangs) and is continued elsewhere. Long enough for an engine's longest
         * pause between tokens (a preemption's recompute, a long prefill beside it).
         */
        migrationStallMs: z.number().int().min(100).max(600_000).default(15_000),
        /**
         * Prefill/decode disaggregation (docs/pd.md): a chat or completion whose prompt has at
         * least `minUncachedTokens` tokens not cached on the decode replica chosen for it is
         * split: its prefill leg goes to a `prefill` replica chosen for its cache, then the
         * request to the decode replica with what the prefill answered, in `protocol`'s
         * fields. Shorter (or mostly cached) prompts go whole to the decode replica. Off when absent.
         */
        disaggregation: z
          .object({
            protocol: z.enum(PD_PROTOCOL_NAMES),
            minUncachedTokens: z.number().int().min(0).max(1_000_000).default(DEFAULT_PD_MIN_UNCACHED_TOKENS),
            /**
             * Each leg's own balancer, a name or a profile as `policy.balancer` takes
             * (default: the deployment's). The decode choice decides the split: a
             * balancer that reads no prompt gives it no cache belief, and every request
             * is split. As llm-d's P/D profiles: the prefill for its cache, the decode
             * for its load (and its cache, which decides whether to split).
             */
            prefill: Balancer.optional(),
            decode: Balancer.optional(),
          })
          .strict()
          .optional(),
      })
      .strict()
      .optional(),
    /**
     * Session affinity: requests with the header `x-session-id` stick to one replica
     * while it is ready and below `rebindAtLoad` of its capacity, so per-session
     * state on the replica (a KV cache) is reused. Bindings live in sharded
     * SessionRouter Durable Objects; see docs/architecture.md.
     */
    sessionAffinity: z
      .object({
        enabled: z.boolean().default(true),
        /** A binding unused for this long is forgotten, seconds. */
        ttlSeconds: z.number().int().min(10).max(7 * 24 * 3600).default(600),
        /** SessionRouter Durable Objects this deployment's bindings are spread over (by hash of the session id). */
        shards: z.number().int().min(1).max(1024).default(8),
        /**
         * The session moves to another replica when its replica's load (ongoing +
         * queued + this proxy's in-flight) reaches this fraction of its capacity.
         * 1 = only when full; above 1 lets sessions queue on engines that queue.
         */
        rebindAtLoad: z.number().min(0.1).max(10).default(1),
        /**
         * A session is bound (one object call and write) from its N-th request
         * in a proxy isolate; the ones before are placed by rendezvous hashing of
         * the session id, with no object call, on the same replica in every
         * isolate. 2 (default) makes ids used once free; 1 binds at once.
         */
        bindOnRequest: z.number().int().min(1).max(100).default(2),
        /** New bindings one client (API key, else client IP) may create per second in one isolate... */
        maxNewBindingsPerSecond: z.number().positive().max(100_000).default(10),
        /** ...and at once after a quiet period. Sessions beyond it are placed by hash, unbound. */
        maxNewBindingsBurst: z.number().int().min(1).max(1_000_000).default(100),
      })
      .strict()
      .default({ enabled: true, ttlSeconds: 600, shards: 8, rebindAtLoad: 1, bindOnRequest: 2, maxNewBindingsPerSecond: 10, maxNewBindingsBurst: 100 }),
    /**
     * The routing state plane (docs/scaling.md §4). A deployment's replicas, and
     * their load reports, are spread over `shards` routing Durable Objects by
     * node (a replica's `node`, else its id); proxies never call them per
     * request. With `relay`, proxy isolates ask one relay object per location,
     * which merges the shards' snapshots at most every 750 ms, so each shard sees
     * about one call per location per 750 ms whatever the number of isolates.
     * Raising `shards` is a redeploy: replicas whose node moves register again in
     * their new shard on their next report, without dropping traffic.
     */
    routing: z
      .object({
        /** Routing objects; size it to about one per 100 busy nodes (docs/scaling.md). */
        shards: z.number().int().min(1).max(MAX_ROUTING_SHARDS).default(1),
        /** Isolates ask their location's relay, not the shards. Off: each isolate asks every shard (the design before relays). */
        relay: z.boolean().default(true),
        /**
         * Once its TTL (250 ms with relays, 1 s without) has passed, an isolate refreshes
         * its view every this many requests, or when the view is 2 s old, a replica in it
         * is about to lapse, or admission holds or budgets requests (src/proxy/serve/view.ts).
         * 1: at the first request past the TTL, as before (four calls a second at any rate).
         * The load header on every answer keeps the replicas an isolate uses fresh; the
         * refresh brings the others' load, new replicas and drains.
         */
        refreshEveryRequests: z.number().int().min(1).max(10_000).default(DEFAULT_REFRESH_EVERY_REQUESTS),
      })
      .strict()
      .default({ shards: 1, relay: true, refreshEveryRequests: DEFAULT_REFRESH_EVERY_REQUESTS }),
    /**
     * The autoscaling signal (Ray Serve's autoscaling_config names): the desired
     * replica count from reported load, exposed as JSON (/-/deployments/:name/autoscale),
     * as a metric, and POSTed to `webhook` when it changes, for an external
     * autoscaler (Kubernetes, a cloud API) to act on; locally, `npm start` acts on
     * it itself (src/local/actuator.ts).
     */
    autoscaling: z
      .object({
        minReplicas: z.number().int().min(0).max(10_000).default(1),
        maxReplicas: z.number().int().min(1).max(10_000).default(10),
        targetOngoingRequests: z.number().positive().max(100_000).default(2),
        lookBackPeriodS: z.number().positive().max(3600).default(30),
        upscaleDelayS: z.number().min(0).max(3600).default(30),
        downscaleDelayS: z.number().min(0).max(86_400).default(600),
        upscalingFactor: z.number().positive().max(100).default(1),
        downscalingFactor: z.number().positive().max(100).default(1),
        /** POSTed {deployment, desired, current, average_ongoing, at} whenever `desired` changes. */
        webhook: z.string().url().max(2048).optional(),
      })
      .strict()
      .refine((a) => a.minReplicas <= a.maxReplicas, "minReplicas must not exceed maxReplicas")
      .optional(),
    /**
     * Admission (docs/admission.md): a request that finds no free slot in its
     * isolate's view of the replicas (or no ready replica, when the deployment
     * scales from zero: `autoscaling.minReplicas` 0) waits in that isolate,
     * in order of priority, fair between flows, first come first served within a
     * flow, and goes as soon as a slot frees; a held request counts against
     * `limits.maxPendingRequests`. A client that disconnects leaves the queue at once.
     */
    admission: z
      .object({
        /** Hold requests that find no free slot (true), or refuse them at once with 503 (false: the behaviour before admission). */
        hold: z.boolean().default(true),
        /** The longest a request is held, ms, within its deadline (`policy.requestTimeoutMs`); then 503 queue_timeout with Retry-After. */
        maxWaitMs: z.number().int().min(1).max(600_000).default(30_000),
        /** Priority of a request that names none (ADMISSION_BANDS: critical 1, standard 0, sheddable −1; any integer). */
        defaultPriority: z.number().int().min(-1000).max(1000).default(0),
        /**
         * The highest priority a client may ask for, by `priorityHeader` or by the body's
         * `priority` on /v1; a higher one is lowered to it. Below 0 a request is sheddable:
         * refused with 429 `shed` instead of held while every replica is full.
         */
        maxPriority: z.number().int().min(-1000).max(1000).default(0),
        /** A request header that carries a priority: an integer, or critical / standard / sheddable. Unset: none is read. */
        priorityHeader: z.string().regex(/^[a-z0-9-]{1,64}$/, "a lower-case header name").optional(),
        /** A request header naming the request's flow (a tenant, a user) for fairness. Unset: the API key, else the client's address. */
        flowHeader: z.string().regex(/^[a-z0-9-]{1,64}$/, "a lower-case header name").optional(),
      })
      .strict()
      .refine((a) => a.defaultPriority <= a.maxPriority, { message: "defaultPriority is above maxPriority", path: ["defaultPriority"] })
      .default({ hold: true, maxWaitMs: 30_000, defaultPriority: 0, maxPriority: 0 }),
    limits: z
      .object({
        /** Largest request body accepted, bytes; larger gets 413 before any replica sees it. */
        maxRequestBodyBytes: z.number().int().min(0).max(100 * 1024 * 1024).default(10 * 1024 * 1024),
        /**
         * Bodies with a Content-Length up to this size are held by the proxy so a
         * dispatch a replica rejected can be replayed on another one. Larger or
         * chunked bodies stream straight through and get a single attempt.
         */
        replayableBodyBytes: z.number().int().min(0).max(1024 * 1024).default(64 * 1024),
        /** Largest total size of request header names and values, bytes; larger gets 431. */
        maxHeaderBytes: z.number().int().min(1024).max(1024 * 1024).default(32 * 1024),
        /**
         * Requests one proxy isolate holds for this deployment before a replica has
         * answered (dispatching, retrying, waiting for headers); beyond it new ones
         * get 503 queue_full with Retry-After instead of piling up.
         */
        maxPendingRequests: z.number().int().min(1).max(1_000_000).default(1024),
        /**
         * Of those, the most one client (its API key, else its address) may have
         * pending at once; beyond it its new ones get 429 rate_limited with
         * Retry-After, so one client cannot fill the deployment's cap for the
         * others. Unset: a quarter of maxPendingRequests (at least 1).
         */
        maxPendingRequestsPerClient: z.number().int().min(1).max(1_000_000).optional(),
        /**
         * A request body must keep arriving: no pause longer than this between
         * bytes, and this long a grace period before the rate below counts, ms.
         * Otherwise 408 request_timeout, and the replica is let go.
         */
        uploadIdleTimeoutMs: z.number().int().min(100).max(600_000).default(10_000),
        /** Slowest average upload accepted once the grace period is over, bytes/s; 0 turns the floor off. */
        uploadMinBytesPerSecond: z.number().int().min(0).max(1_000_000_000).default(1024),
        /**
         * Stream a request body to the replica from its first byte (full duplex: the
         * replica may answer while the client is still sending, as a streaming
         * transcription does). Off, the edge first reads a streamed body's first
         * `replayableBodyBytes` (at least 4 KiB; all of it, if shorter) at the upload
         * pace, and only then asks a replica, so a slow uploader never holds a
         * replica's slot. On, each client (API key, else address) may have at most
         * `duplexUploadsPerClient` such uploads in flight per isolate instead.
         */
        duplexUploads: z.boolean().default(false),
        duplexUploadsPerClient: z.number().int().min(1).max(10_000).default(4),
      })
      .strict()
      .default({
        maxRequestBodyBytes: 10 * 1024 * 1024,
        replayableBodyBytes: 64 * 1024,
        maxHeaderBytes: 32 * 1024,
        maxPendingRequests: 1024,
        uploadIdleTimeoutMs: 10_000,
        uploadMinBytesPerSecond: 1024,
        duplexUploads: false,
        duplexUploadsPerClient: 4,
      }),
  })
  .strict()
  .superRefine((d, ctx) => {
    const mux = d.multiplexing;
    if (d.backend.kind === "onnx" && !d.backend.model && !mux?.models.length) {
      ctx.addIssue({ code: "custom", path: ["backend", "model"], message: "an onnx backend needs `model`, or `multiplexing.models` to serve several" });
    }
    if (d.backend.kind === "onnx" && d.backend.model && mux) {
      ctx.addIssue({ code: "custom", path: ["multiplexing"], message: "a single-model onnx backend (`backend.model`) cannot also multiplex; drop one" });
    }
    if (d.backend.kind === "edge" && d.openai) {
      ctx.addIssue({ code: "custom", path: ["openai"], message: "edge deployments serve their model's own API, not the OpenAI routes" });
    }
    const outside = d.openai && mux && mux.models.length > 0 ? d.openai.models.filter((m) => !mux.models.includes(m)) : [];
    if (outside.length > 0) {
      ctx.addIssue({ code: "custom", path: ["openai", "models"], message: `with multiplexing, OpenAI models are multiplexed model ids: ${outside.join(", ")} not in multiplexing.models` });
    }
    if (mux?.defaultModel && mux.models.length > 0 && !mux.models.includes(mux.defaultModel)) {
      ctx.addIssue({ code: "custom", path: ["multiplexing", "defaultModel"], message: "defaultModel must be one of multiplexing.models" });
    }
  });

/** `policy.prefix` of a deployment that sets none. */
export const DEFAULT_PREFIX_POLICY = { tokenizer: "auto", loadFactor: DEFAULT_LOAD_FACTOR, prefillWeight: DEFAULT_PREFILL_WEIGHT } as const;

/**
 * The prompt tokenizer of a deployment's prefix keys: its `policy.prefix.tokenizer`, where
 * "auto" is the `llm` backend's own model (tiny-lm, or a family served by the engine
 * stand-in) and "bytes" for any other backend.
 */
export function prefixTokenizerName(d: Pick<Deployment, "backend" | "policy">): PromptTokenizerName {
  const name = (d.policy.prefix ?? DEFAULT_PREFIX_POLICY).tokenizer;
  if (name !== "auto") return name;
  const model = d.backend.kind === "llm" ? d.backend.model : undefined;
  return model !== undefined && (PROMPT_TOKENIZER_NAMES as readonly string[]).includes(model) ? (model as PromptTokenizerName) : "bytes";
}

export type DeploymentInput = z.input<typeof DeploymentInput>;
export type Deployment = z.output<typeof DeploymentInput>;
export type BackendSpec = z.output<typeof Backend>;

/** Declares a served deployment; validates it at build time and at Worker start. */
export function defineDeployment(input: DeploymentInput): Deployment {
  const parsed = DeploymentInput.safeParse(input);
  if (!parsed.success) {
    const name = typeof input === "object" && input && "name" in input ? String(input.name) : "?";
    throw new Error(`invalid deployment "${name}": ${z.prettifyError(parsed.error)}`);
  }
  return parsed.data;
}

/** Checks a whole set of deployments for clashes the router cannot resolve. */
export function checkDeployments(deployments: readonly Deployment[]): void {
  const names = new Set<string>();
  const prefixes = new Set<string>();
  const openaiModels = new Map<string, string>();
  for (const d of deployments) {
    for (const m of d.openai?.models ?? []) {
      const other = openaiModels.get(m);
      if (other !== undefined) throw new Error(`OpenAI model "${m}" is served by two deployments ("${other}" and "${d.name}")`);
      openaiModels.set(m, d.name);
    }
    if (d.routePrefix === "/v1" || d.routePrefix.startsWith("/v1/")) {
      if (openaiModels.size > 0 || deployments.some((x) => x.openai)) throw new Error(`route prefix "${d.routePrefix}" clashes with the OpenAI routes under /v1`);
    }
    if (names.has(d.name)) throw new Error(`two deployments are named "${d.name}"`);
    if (prefixes.has(d.routePrefix)) throw new Error(`two deployments use route prefix "${d.routePrefix}"`);
    if (d.routePrefix.startsWith("/-/") || d.routePrefix === "/-") throw new Error(`route prefix "${d.routePrefix}" is reserved for system routes`);
    names.add(d.name);
    prefixes.add(d.routePrefix);
  }
}
