/**
 * The balancing seam's types, shaped after the Kubernetes Gateway API Inference
 * Extension's scheduler: a balancer is a profile (./profile.ts), a list of filters,
 * weighted scorers and one picker, each a registered plugin (./filters.ts,
 * ./pickers.ts, src/policy/scorers/) with a factory, named in configuration.
 *
 * Factories run once per isolate and deployment (the routing view's life), so a
 * plugin's own state (round robin's turn) and a profile's memory of its recent
 * dispatches live in the instance, not in module scope. Choosing is pure: time and
 * randomness come in with the input, and the candidates are those the routing view
 * allows (ready, fresh, not cooling down, not ejected, not already tried).
 */
import type { BlockKey } from "../../prefix/block-keys.ts";
import type { CacheSummary } from "../../prefix/cache-summary.ts";
import type { DispatchNote } from "../../protocol/messages.ts";
import type { Coordinates, LatencyCandidate, LatencySettings, TtftPrediction } from "../latency-model.ts";
import type { ModelHolderChoice } from "../pick-replica.ts";

/** What a balancer may read of a candidate (a routing view's ReplicaEntry is one). */
export interface BalancerCandidate extends ModelHolderChoice, LatencyCandidate {
  /** The replica's last reported prefix-cache summary, when it reports one. */
  cache?: CacheSummary;
  /** Epoch ms this isolate first held that summary (it was built at most SUMMARY_VIEW_LAG_MS before). */
  cacheSince?: number;
}

/** A prompt's block keys (src/prefix/block-keys.ts), in order, and the block size they were made with. */
export interface PromptKeys {
  keys: readonly BlockKey[];
  blockSize: number;
}

/** What one request brings to the choice. */
export interface BalanceInput {
  random: () => number;
  /** Epoch ms. */
  now: number;
  /** The prompt's keys: only for balancers that read the prompt, and only when the body has one. */
  prompt?: PromptKeys;
  /** The multiplexed model the request names. */
  model?: string;
  /**
   * The replicas the request's first choice was made among (tried ones included): what the
   * demand placement places on (src/policy/demand-placement.ts), so a retry's narrower
   * pool does not move homes. Unset: the candidates.
   */
  fleet?: readonly BalancerCandidate[];
  /** Where this isolate is, when it knows (Cloudflare's cf.latitude/longitude; locally SWITCHYARD_COORDINATES): trips to replicas not measured yet are estimated from geography. */
  here?: Coordinates;
  /** The request's objectives (x-slo-ttft-ms, or the deployment's `policy.latency.slo`): the `slo` filter keeps the replicas predicted to meet them. */
  slo?: RequestSlo;
  /**
   * Told, when a profile predicted the chosen replica's time to first token (it weighs
   * `latency`, or the request has an objective), that prediction and the best total
   * predicted among the candidates.
   */
  predicted?: (prediction: TtftPrediction, bestMs: number) => void;
  /**
   * Told, when a profile scored the prompt's cached prefix, what it believed: the prompt's
   * blocks it took the chosen replica to hold and the most it took any candidate to hold
   * (observability: the request's log line, and the prefix bench's belief error).
   */
  explain?: (belief: PrefixBelief) => void;
}

/** A request's latency objectives, ms. */
export interface RequestSlo {
  /** Time to first token. */
  ttftMs?: number;
  /** Time per output token (carried and counted; not yet predicted, so not filtered on). */
  tpotMs?: number;
}

/** What a prefix-scoring choice believed of the prompt's blocks (BalanceInput.explain). */
export interface PrefixBelief {
  /** The prompt's full blocks. */
  blocks: number;
  /** Tokens per block of its keys. */
  blockSize: number;
  /** Those the chosen replica was believed to hold (its summary or this isolate's and its peers' dispatches). */
  held: number;
  /** The most any candidate was believed to hold. */
  most: number;
  /** The prompt's home by demand placement, when it has one (the `home` filter). */
  home?: string;
}

/** One balancer instance (per isolate and deployment). */
export interface Balancer {
  /** The replica to try among `candidates`; undefined only when there are none. */
  pick<T extends BalancerCandidate>(candidates: readonly T[], input: BalanceInput): T | undefined;
  /**
   * The most load at which `chosen`, picked among `candidates` for `input`, is to take the
   * request (its filters' load rules, checked by the replica: Header.loadLimit); undefined
   * for no limit. Only balancers with such a rule have it.
   */
  loadLimit?(candidates: readonly BalancerCandidate[], chosen: BalancerCandidate, input: BalanceInput): number | undefined;
  /** `replica` accepted the request `input` describes (feedback for balancers that learn). */
  served?(replica: string, input: BalanceInput): void;
  /**
   * This instance's dispatches since the last call, for the location's other isolates
   * (posted to the relay with the next view ask, src/state/dispatch-board.ts).
   */
  shareDispatches?(): DispatchNote[];
  /** Other isolates' dispatches, as the relay passed them on (`now`: when they arrived). */
  learnDispatches?(notes: readonly DispatchNote[], now: number): void;
}

/** The settings a factory gets: the deployment's `policy.prefix` (src/config/deployment.ts). */
export interface BalancerSettings {
  /** ε of the bounded-load line. */
  loadFactor: number;
  /** Weight of the uncached-prefill fraction against fullness (the `prefill` term's default), unless `scorers` weighs it. */
  prefillWeight: number;
  /** Weights of the cost terms by name (src/policy/scorers/) for a profile that names none; unnamed terms keep their defaults. */
  scorers?: Readonly<Partial<Record<string, number>>>;
  /** How long a dispatch and a replica's summary count as what it holds, ms (`prefix.beliefMs`); unset: dispatches RECENT_PREFIX_TTL_MS, a summary until the next. */
  beliefMs?: number;
  /** What the predicted time to first token assumes where a replica has not said (`policy.latency`; src/policy/latency-model.ts); unset: DEFAULT_LATENCY_SETTINGS. */
  latency?: LatencySettings;
}

/** What the stages of one choice share (./profile.ts builds it per request). */
export interface StageContext {
  readonly input: BalanceInput;
  /** The prompt's block keys, at least one: stages that read the prompt run only with them. */
  readonly keys: readonly BlockKey[] | undefined;
  /** The prompt's anchor key (src/policy/prefix-score.ts anchorKey), with the keys. */
  readonly anchor: BlockKey | undefined;
  /** A candidate's cost by the profile's weighted scorers (src/policy/scorers/); 0 when it weighs none. */
  cost(candidate: BalancerCandidate): number;
  /** The prompt's home by the demand placement (src/policy/demand-placement.ts), for a profile with a stage that reads it; undefined when its anchor has none. */
  readonly home: string | undefined;
  /** A candidate's predicted time to first token (src/policy/latency-model.ts), computed once per candidate and choice. */
  ttft(candidate: BalancerCandidate): TtftPrediction;
}

/** A filter narrows the pool; given a non-empty pool it returns a non-empty one (a rule that prefers, never empties). */
export type Filter = <T extends BalancerCandidate>(pool: readonly T[], ctx: StageContext) => T[];
/** A picker takes one of the pool; undefined only for an empty pool. */
export type Picker = <T extends BalancerCandidate>(pool: readonly T[], ctx: StageContext) => T | undefined;

/**
 * A filter's rule as a load limit for the replica to check (Header.loadLimit): the most
 * load at which `chosen` still passes the rule among `pool`; undefined for no limit.
 */
export type LoadLimit = (pool: readonly BalancerCandidate[], chosen: BalancerCandidate) => number | undefined;

/** A filter as registered (./filters.ts): its name, what it means, whether it needs the prompt's keys, its factory. */
export interface FilterPlugin<N extends string = string> {
  readonly name: N;
  readonly description: string;
  readonly readsPrompt: boolean;
  /** It reads StageContext.home: the profile keeps a demand placement (and the dispatch memory that feeds it). */
  readonly readsHome?: boolean;
  create(settings: BalancerSettings): Filter;
  /** Its rule as a load limit the chosen replica checks against its exact load, where the rule is one of load. */
  limit?(settings: BalancerSettings): LoadLimit;
}

/** A picker as registered (./pickers.ts). `scores`: it reads ctx.cost, so the profile keeps the memory its scorers read. */
export interface PickerPlugin<N extends string = string> {
  readonly name: N;
  readonly description: string;
  readonly readsPrompt: boolean;
  readonly scores: boolean;
  create(settings: BalancerSettings): Picker;
}

/** Declares a filter, checking its shape where it is written (the compile-time check of Go's `var _ Filter = …`). */
export function defineFilter<const N extends string>(plugin: FilterPlugin<N>): FilterPlugin<N> {
  return plugin;
}

/** Declares a picker, checking its shape where it is written. */
export function definePicker<const N extends string>(plugin: PickerPlugin<N>): PickerPlugin<N> {
  return plugin;
}
