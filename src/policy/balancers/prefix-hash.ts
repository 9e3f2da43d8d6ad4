/**
 * `prefix_hash`: prefix affinity with no engine cooperation. A prompt goes to the
 * first replica in rendezvous order on its anchor key (its first 16 blocks) that is
 * under the bounded-load line (src/policy/prefix-score.ts), so prompts sharing a
 * prefix meet on one replica from every isolate, and a hot prefix spills to the next
 * replica in its order instead of piling up. No prompt keys: the load-aware choice.
 */
import { pickByPrefixHash } from "../prefix-score.ts";
import { defineBalancer } from "./balancer.ts";
import { prefixAware } from "./prefix-fallback.ts";

export const prefixHash = defineBalancer({
  name: "prefix_hash",
  readsPrompt: true,
  create: ({ loadFactor }) => ({
    pick: (candidates, input) => prefixAware(candidates, input, (pool, prompt) => pickByPrefixHash(pool, prompt.keys, loadFactor)),
  }),
});
