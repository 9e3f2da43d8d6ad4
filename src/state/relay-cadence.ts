/**
 * How often a location's relay asks the objects behind it, and how much it
 * merges: constants of the relay (snapshot-relay.ts), apart from the Durable
 * Object so that pure code and bench/scaling-sim/scaling-sim.ts can use them.
 */

/**
 * The relay asks the shards again once its merged snapshot is this old: each
 * shard sees about one call per location per second (docs/scaling.md §4).
 */
export const RELAY_TTL_MS = 1_000;
/** The same while the snapshot has no ready replica (scale from zero, or a first replica starting). */
export const RELAY_AT_ZERO_TTL_MS = 250;
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
