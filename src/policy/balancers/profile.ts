/**
 * A balancer is a profile: filters, then weighted scorers, then one picker, as the
 * Inference Extension's scheduler profile runs them. This module turns a profile's
 * names into one balancer instance and holds what every profile shares:
 * - A multiplexed model narrows the pool to its holders with room first; with none,
 *   the model is placed by pickReplicaForModel (it may load it elsewhere) and the
 *   profile is not asked, so a cached prefix never costs a model load.
 * - A profile whose stages read the prompt chooses as the `load_aware` profile (room,
 *   then two choices) when the request has no prompt keys.
 * - A profile whose picker scores keeps the memory its scorers read: the prefixes this
 *   instance sent lately (recent-prefixes.ts) and those its location's peers sent,
 *   shared through the relay (served / shareDispatches / learnDispatches).
 * Scores are costs and are not clamped: `slots` passes 1 on a full replica, and the
 * weighted sum is the cost the precise tier had before this seam.
 */
import { hasRoom, pickReplica, pickReplicaForModel } from "../pick-replica.ts";
import { anchorKey, rendezvousOrder } from "../prefix-score.ts";
import { DemandPlacement } from "../demand-placement.ts";
import { DEFAULT_LATENCY_SETTINGS, poolPriors, predictTtft, type PoolPriors, type TtftPrediction } from "../latency-model.ts";
import { DispatchOutbox } from "../dispatch-outbox.ts";
import { RECENT_PREFIX_MAX_KEYS, RECENT_PREFIX_STRIDE, RECENT_PREFIX_TTL_MS, RecentPrefixes, SUMMARY_VIEW_LAG_MS, keptKeys } from "../recent-prefixes.ts";
import { DEFAULT_SCORER_WEIGHTS, costOf, scorers, type ScorerName, type WeightedScore } from "../scorers/index.ts";
import type { BalanceInput, Balancer, BalancerCandidate, BalancerSettings, FilterPlugin, PickerPlugin, PrefixBelief, StageContext } from "./balancer.ts";

/** A profile by plugin names, as configuration writes it. */
export interface ProfileSpec<F extends string = string, P extends string = string> {
  readonly filters: readonly F[];
  readonly picker: P;
  /** Weights of the cost terms the picker reads; unset: `prefix.scorers` over the defaults. */
  readonly scorers?: Readonly<Partial<Record<ScorerName, number>>>;
}

/** A balancer instance with what the dispatch needs to know of its profile. */
export interface ActiveBalancer extends Balancer {
  /** The built-in profile's name, or "custom". */
  readonly name: string;
  /** The dispatch computes the prompt's block keys for it (parsing and tokenizing the body) only when true. */
  readonly readsPrompt: boolean;
}

const holds = (c: BalancerCandidate, model: string) => c.models.includes(model) || c.loading.includes(model);

/** Whether any stage of a profile made of `filters` and `picker` needs the prompt's keys. */
export function readsPrompt(filters: readonly FilterPlugin[], picker: PickerPlugin): boolean {
  return picker.readsPrompt || filters.some((f) => f.readsPrompt);
}

/** The weighted terms a profile's picker reads: its own weights, else `prefix.scorers` over the defaults (prefill at `prefix.prefillWeight`). */
export function profileTerms(weights: ProfileSpec["scorers"], settings: BalancerSettings): WeightedScore[] {
  return scorers.resolve(weights ?? { ...DEFAULT_SCORER_WEIGHTS, prefill: settings.prefillWeight, ...settings.scorers });
}

/**
 * One instance of the profile made of these plugins (one per isolate and deployment).
 * `terms`: the weighted scorers (profileTerms), read only by a picker that scores.
 */
export function runProfile(name: string, filters: readonly FilterPlugin[], picker: PickerPlugin, terms: readonly WeightedScore[], settings: BalancerSettings): ActiveBalancer {
  const stages = filters.map((f) => f.create(settings));
  const limits = filters.flatMap((f) => (f.limit ? [f.limit(settings)] : []));
  const choose = picker.create(settings);
  const prompted = readsPrompt(filters, picker);
  const placesHomes = filters.some((f) => f.readsHome === true);
  // The dispatches a scoring picker or a home reads: this instance's and, through the relay, its peers'.
  const memory =
    picker.scores || placesHomes
      ? { recent: new RecentPrefixes(RECENT_PREFIX_MAX_KEYS, settings.beliefMs ?? RECENT_PREFIX_TTL_MS), outbox: new DispatchOutbox(), placement: new DemandPlacement() }
      : undefined;
  const beliefMs = settings.beliefMs;
  const noCost = () => 0;
  const weighsPrefill = terms.some((t) => t.name === "prefill" && t.weight > 0);
  const weighsLeader = terms.some((t) => t.name === "leader" && t.weight > 0);
  // A scoring picker whose weighted terms need no prompt (latency, slots) scores a request without one too.
  const scoresWithoutPrompt = picker.scores && terms.every((t) => t.weight === 0 || !t.needsPrompt);
  const weighsLatency = terms.some((t) => (t.name === "latency" || t.name === "trip") && t.weight > 0);

  /**
   * The predicted time to first token of this request on each candidate, computed at most
   * once per candidate: the prompt's blocks not believed held (`held`) at `blockSize` tokens
   * each are its uncached prefill; priors from the pool the choice began with.
   */
  const latency = settings.latency ?? DEFAULT_LATENCY_SETTINGS;
  const predictor = (input: BalanceInput, pool: readonly BalancerCandidate[], blockSize: number, blocks: number, held: ReadonlyMap<string, number> | undefined) => {
    // Built on the first prediction: a profile that predicts nothing pays nothing per choice.
    let priors: PoolPriors | undefined;
    let memo: Map<string, TtftPrediction> | undefined;
    return (c: BalancerCandidate): TtftPrediction => {
      memo ??= new Map();
      let p = memo.get(c.id);
      if (p === undefined) {
        priors ??= poolPriors(pool, latency);
        const uncached = Math.max(0, blocks - Math.min(blocks, held?.get(c.id) ?? 0)) * blockSize;
        p = predictTtft(c, uncached, input.now, input.here, priors, latency);
        memo.set(c.id, p);
      }
      return p;
    };
  };

  const balancer: ActiveBalancer = {
    name,
    readsPrompt: prompted,
    pick<T extends BalancerCandidate>(candidates: readonly T[], input: Parameters<Balancer["pick"]>[1]): T | undefined {
      const { model, random, prompt } = input;
      let pool = candidates;
      if (model !== undefined) {
        const holders = candidates.filter((c) => holds(c, model) && hasRoom(c));
        if (holders.length === 0) return pickReplicaForModel(candidates, model, random);
        pool = holders;
      }
      const keys = prompt !== undefined && prompt.keys.length > 0 ? prompt.keys : undefined;
      if (prompted && keys === undefined && !scoresWithoutPrompt) return pickReplica(pool, random);
      let cost: StageContext["cost"] = noCost;
      let believed: { held: Map<string, number>; most: number } | undefined;
      const anchor = keys && anchorKey(keys);
      if (memory && keys && anchor && prompt) {
        // A replica's summary supersedes the dispatches recorded well before this isolate got it (recent-prefixes.ts).
        const notBefore = new Map<string, number>();
        for (const c of pool) if (c.cacheSince !== undefined) notBefore.set(c.id, c.cacheSince - SUMMARY_VIEW_LAG_MS);
        const sent = memory.recent.held(keys, input.now, notBefore);
        // A summary older than beliefMs here says nothing any more (the replica's cache has turned over since).
        const summaryOf = (c: T) => (beliefMs !== undefined && c.cacheSince !== undefined && input.now - c.cacheSince > beliefMs ? undefined : c.cache);
        const held = new Map(pool.map((c) => [c.id, Math.max(summaryOf(c)?.matchedBlocks(keys, prompt.blockSize) ?? 0, sent.get(c.id) ?? 0)] as const));
        // Where the cost weighs prefill, a prompt no replica holds any of is placed in rendezvous
        // order (under the load line), as prefix_hash places it: every isolate then sends a new or
        // evicted prefix to the same replica, where least slots would scatter copies of it over the
        // fleet and, under cache pressure, evict other prefixes for them (bench/prefix-cache/prefix-cache.ts).
        const most = Math.max(0, ...held.values());
        believed = { held, most };
      }
      const ttft = predictor(input, pool, prompt?.blockSize ?? 0, keys?.length ?? 0, believed?.held);
      if (believed && keys) {
        const { held, most } = believed;
        if (!weighsPrefill || most > 0) {
          // The leader among the holders of about the most (summaries are exact, dispatch records
          // within a stride): the same one in every isolate that believes the same.
          const near = weighsLeader && most > 0 ? pool.filter((c) => held.get(c.id)! >= Math.max(1, most - RECENT_PREFIX_STRIDE)) : [];
          const first = near.length > 0 ? rendezvousOrder(near, anchor!)[0]!.id : undefined;
          const leader = first === undefined ? undefined : { id: first, held: held.get(first)! };
          cost = (c) => costOf(terms, c, { keys, held: held.get(c.id) ?? 0, leader, ttft: () => ttft(c) });
        }
      } else if (keys === undefined && scoresWithoutPrompt) {
        cost = (c) => costOf(terms, c, { keys: [], held: 0, leader: undefined, ttft: () => ttft(c) });
      }
      const home = placesHomes && memory && anchor ? memory.placement.homeOf(anchor, input.fleet ?? candidates, input.now) : undefined;
      const ctx: StageContext = { input, keys, anchor, cost, home, ttft };
      const candidatePool = pool;
      for (const stage of stages) pool = stage(pool, ctx);
      const chosen = choose(pool, ctx);
      if (believed && chosen && keys && input.explain) {
        const belief: PrefixBelief = { blocks: keys.length, blockSize: prompt!.blockSize, held: believed.held.get(chosen.id) ?? 0, most: believed.most };
        if (home !== undefined) belief.home = home;
        input.explain(belief);
      }
      if (chosen && input.predicted && (weighsLatency || input.slo?.ttftMs !== undefined)) {
        let best = Infinity;
        for (const c of candidatePool) best = Math.min(best, ttft(c).total);
        input.predicted(ttft(chosen), best);
      }
      return chosen;
    },
  };
  if (limits.length > 0) {
    // The filters' load rules hold where they chose: not for a multiplexed model's pick, nor a prompt-reading profile's pick without keys.
    balancer.loadLimit = (candidates, chosen, { model, prompt }) => {
      if (model !== undefined || (prompted && (prompt === undefined || prompt.keys.length === 0))) return undefined;
      let min: number | undefined;
      for (const limit of limits) {
        const l = limit(candidates, chosen);
        if (l !== undefined && (min === undefined || l < min)) min = l;
      }
      return min;
    };
  }
  if (!memory) return balancer;
  return {
    ...balancer,
    served(replica, { prompt, now }) {
      if (prompt === undefined || prompt.keys.length === 0) return;
      const kept = keptKeys(prompt.keys);
      memory.recent.recordKept(replica, kept, now);
      memory.outbox.add(replica, kept);
      // A prompt's first kept key is its anchor (keptKeys), and a note's too.
      if (placesHomes) memory.placement.record(kept[0]!, kept.length, now);
    },
    shareDispatches: () => memory.outbox.take(),
    learnDispatches(notes, now) {
      for (const n of notes) {
        memory.recent.recordKept(n.r, n.k, now);
        if (placesHomes && n.k.length > 0) memory.placement.record(n.k[0]!, n.k.length, now);
      }
    },
  };
}
