/**
 * How often a location's relay asks the objects behind it, and how much it
 * merges: constants of the relay (snapshot-relay.ts), apart from the Durable
 * Object so that pure code and bench/scaling-sim.ts can use them.
 */

/**
 * The relay asks the shards again once its merged snapshot is this old: each
 * shard sees about 1.3 calls per location per second (docs/scaling.md §4).
 * Shorter views age (a change reaches every isolate within ~1.25 s of its
 * report) at the cost of that fixed term on every shard: 1 s would leave more
 * room for reports (fewer shards) and add 250 ms to every change.
 */
export const RELAY_TTL_MS = 750;
/**
 * Most replicas a relay asks the shards for in all (each shard sends a sample
 * of its share): a relay merges at most this many per refresh, and its
 * isolates draw their own bounded views (VIEW_MAX_REPLICAS) from it. Across
 * locations the relays' samples differ, so the fleet is covered.
 */
export const RELAY_MAX_REPLICAS = 8_192;
/** The relay syncs a RateLimiter shard at most this often (what each isolate did before relays). */
export const RELAY_RATE_SYNC_INTERVAL_MS = 1_000;
/** The relay asks the AccessKeys object again once its key set is this old. */
export const RELAY_KEY_SET_TTL_MS = 5_000;
