/**
 * The seam every balancing rule plugs into, shaped after the Kubernetes Gateway API
 * Inference Extension's scheduler plugins: each rule is one module that exports a
 * plugin (its type name, what it reads, a factory), and one registration place
 * (./index.ts) maps names to plugins; the names a deployment's `policy.balancer`
 * accepts come from there.
 *
 * A plugin's factory runs once per isolate and deployment (the routing view's life),
 * so a balancer's own state (round robin's turn, prefix_cache's memory of its recent
 * dispatches) lives in its instance, not in module scope. `pick` is pure: time and
 * randomness come in with the input, and the candidates are those the routing view
 * allows (ready, fresh, not cooling down, not ejected, not already tried).
 */
import type { BlockKey } from "../../prefix/block-keys.ts";
import type { CacheSummary } from "../../prefix/cache-summary.ts";
import type { DispatchNote } from "../../protocol/messages.ts";
import type { ModelHolderChoice } from "../pick-replica.ts";

/** What a balancer may read of a candidate (a routing view's ReplicaEntry is one). */
export interface BalancerCandidate extends ModelHolderChoice {
  /** The replica's last reported prefix-cache summary, when it reports one. */
  cache?: CacheSummary;
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
}

/** One balancer instance (per isolate and deployment). */
export interface Balancer {
  /** The replica to try among `candidates`; undefined only when there are none. */
  pick<T extends BalancerCandidate>(candidates: readonly T[], input: BalanceInput): T | undefined;
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
  /** Weight of the uncached-prefill fraction against fullness (prefix_cache), unless `scorers` weighs `prefill`. */
  prefillWeight: number;
  /** prefix_cache: weights of its cost terms by name (src/policy/scorers/); unnamed terms keep their defaults. */
  scorers?: Readonly<Partial<Record<string, number>>>;
}

/** A balancing rule as registered: its name, whether it needs the prompt's keys, its factory. */
export interface BalancerPlugin<N extends string = string> {
  readonly name: N;
  /**
   * The dispatch computes the prompt's block keys for it (parsing and tokenizing the
   * body). False for every balancer that does not use them: no per-request work.
   */
  readonly readsPrompt: boolean;
  create(settings: BalancerSettings): Balancer;
}

/** Declares a plugin, checking its shape where it is written (the compile-time check of Go's `var _ Picker = …`). */
export function defineBalancer<const N extends string>(plugin: BalancerPlugin<N>): BalancerPlugin<N> {
  return plugin;
}
