/**
 * `prefix_cache`: the precise tier. Among the replicas under the bounded-load line,
 * the cheapest by Dynamo's cost, weight × (the prompt's share still to prefill) +
 * fullness (src/policy/prefix-score.ts), ties in rendezvous order on the anchor key.
 * What a replica holds is the longer of two prefixes: the one its reported cache
 * summary shows (ReplicaEntry.cache, filled from the engine's KV events or the
 * reference replica's own cache), and the one this instance sent it lately
 * (recent-prefixes.ts), which covers the second or two before its next report
 * reaches the view. The location's other isolates learn those dispatches through
 * their relay (shareDispatches / learnDispatches, src/state/dispatch-board.ts), so the
 * memory holds theirs too. No prompt keys: the load-aware choice.
 */
import { pickByPrefixCache } from "../prefix-score.ts";
import { DEFAULT_SCORER_WEIGHTS, scorers as registry } from "../scorers/index.ts";
import { DispatchOutbox } from "../dispatch-outbox.ts";
import { RecentPrefixes, keptKeys } from "../recent-prefixes.ts";
import { defineBalancer } from "./balancer.ts";
import { prefixAware } from "./prefix-fallback.ts";

export const prefixCache = defineBalancer({
  name: "prefix_cache",
  readsPrompt: true,
  create: ({ loadFactor, prefillWeight, scorers }) => {
    const terms = registry.resolve({ ...DEFAULT_SCORER_WEIGHTS, prefill: prefillWeight, ...scorers });
    const recent = new RecentPrefixes();
    const outbox = new DispatchOutbox();
    return {
      pick: (candidates, input) =>
        prefixAware(candidates, input, (pool, { keys, blockSize }) => {
          const sent = recent.held(keys, input.now);
          const held = (c: (typeof pool)[number]) => Math.max(c.cache?.matchedBlocks(keys, blockSize) ?? 0, sent.get(c.id) ?? 0);
          return pickByPrefixCache(pool, keys, held, { epsilon: loadFactor, terms });
        }),
      served(replica, { prompt, now }) {
        if (prompt === undefined || prompt.keys.length === 0) return;
        const kept = keptKeys(prompt.keys);
        recent.recordKept(replica, kept, now);
        outbox.add(replica, kept);
      },
      shareDispatches: () => outbox.take(),
      learnDispatches(notes, now) {
        for (const n of notes) recent.recordKept(n.r, n.k, now);
      },
    };
  },
});
