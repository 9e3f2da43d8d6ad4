/**
 * The protocol's limits, one set for every side: the replica and the agent
 * stay within them when they send, the edge and the routing object refuse
 * what goes beyond them.
 */

/**
 * Model ids travel in headers and in the comma-separated load header, so they
 * exclude separators and spaces; Hugging Face style "org/name" and LoRA names fit.
 */
export const MODEL_ID = /^[A-Za-z0-9][A-Za-z0-9._:@\/+-]{0,127}$/;
/** Largest count a load can carry (ongoing, queued, max). */
export const MAX_LOAD_COUNT = 1_000_000;
/** Longest prefill wait a load carries, ms (10 min: beyond it, the replica is not one to wait for). */
export const MAX_PREFILL_WAIT_MS = 600_000;
/** Highest prefill rate a load carries, tokens per second. */
export const MAX_PREFILL_RATE = 100_000_000;
/** Longest time a replica says it took to answer a dispatch's head (Header.replicaTime), ms. */
export const MAX_REPLICA_TIME_MS = 3_600_000;
/** Most milliseconds a client may ask as an SLO (x-slo-ttft-ms, x-slo-tpot-ms): an hour. */
export const MAX_SLO_MS = 3_600_000;
/** Most model ids a replica reports (loaded, and loading): reports, the load header, max_models. */
export const MAX_REPLICA_MODELS = 1024;
/**
 * Longest load header, bytes: what a proxy parses on every response. A replica
 * whose model sets do not fit leaves them out of the header (formatLoadHeader);
 * they still travel in its reports.
 */
export const MAX_LOAD_HEADER_BYTES = 8192;
/**
 * A replica's report goes stale this long after the routing object received it: the
 * snapshot's `expiresInMs` counts down from it, so an isolate reads a report's age as
 * REPORT_STALE_AFTER_MS − expiresInMs (its routing view dates the load by it).
 */
export const REPORT_STALE_AFTER_MS = 2_500;
/** Largest control message body, bytes (register, report, deregister). */
export const MAX_CONTROL_BODY_BYTES = 64 * 1024;
/** Most routing shards (Durable Objects) one deployment's replicas spread over (`routing.shards`). */
export const MAX_ROUTING_SHARDS = 256;
/** Most replicas one node report carries (one agent per node reports for all its engines). */
export const MAX_NODE_REPLICAS = 64;
/** Largest node report body, bytes: up to MAX_NODE_REPLICAS reports in one message. */
export const MAX_NODE_REPORT_BYTES = 256 * 1024;

/**
 * Tokens per prefix block: the edge's block keys (src/prefix/block-keys.ts) and an
 * engine's KV blocks (vLLM --block-size) must use the same size to match.
 */
export const BLOCK_TOKENS = 16;
/**
 * Prefix-cache summaries (src/prefix/cache-summary.ts, a Bloom filter over the
 * block keys a replica holds) ride in reports as `prefix_cache`.
 * Largest filter, bytes before base64 (~14.7 KiB on the wire: a report stays under 16 KiB).
 */
export const MAX_CACHE_SUMMARY_FILTER_BYTES = 11 * 1024;
/** The filter's base64 length at that size (15,020 characters). */
export const MAX_CACHE_SUMMARY_BITS_CHARS = 4 * Math.ceil(MAX_CACHE_SUMMARY_FILTER_BYTES / 3);
/** Most keys a summary says it holds (the builder's cap: 8 bits per key at the largest filter). */
export const MAX_CACHE_SUMMARY_KEYS = (MAX_CACHE_SUMMARY_FILTER_BYTES * 8) / 8;
/** A report carrying the largest summary stays within this (a unit test checks it with 10,000 cached blocks). */
export const MAX_REPORT_WITH_SUMMARY_BYTES = 16 * 1024;
/**
 * A sender includes a summary only when it changed since the last report the edge
 * accepted, and at least this often (so a restarted routing object learns it again).
 */
export const SUMMARY_RESEND_MS = 10_000;
/** The edge drops a summary not sent again for this long (three resends missed: the sender lost track). */
export const SUMMARY_MAX_AGE_MS = 35_000;
/**
 * Most summary bytes (their JSON) one node report carries. 64 replicas × 15 KiB
 * would be ~1 MiB: the node reporter sends the changed summaries that fit, longest
 * waiting first, and the rest with the next reports, so a node report stays one
 * message within MAX_NODE_REPORT_BYTES (docs/protocol.md, "Prefix-cache summaries").
 */
export const MAX_NODE_REPORT_SUMMARY_BYTES = 192 * 1024;
/**
 * Peer dispatches (src/state/dispatch-board.ts): most block keys one dispatch note
 * carries (a prompt's every 16th key and its last: 64 covers ~16,000 tokens; longer
 * prompts keep their first 63 and their last).
 */
export const MAX_DISPATCH_NOTE_KEYS = 64;
/** Most dispatch notes an isolate posts to its relay per refresh (its outbox keeps the newest). */
export const MAX_DISPATCH_NOTES_PER_POST = 256;
/** Most peers' dispatch notes one relay answer carries (the newest), ~100 KiB at most and ~200 bytes each usually. */
export const MAX_PEER_NOTES_PER_ANSWER = 512;

/** Most learnt trips an isolate posts to its relay per ask, and a relay's answer carries (src/state/trip-board.ts). */
export const MAX_TRIP_NOTES = 256;
/** The longest trip a note may carry, ms. */
export const MAX_TRIP_MS = 60_000;

/** The furthest drain deadline a report may announce (drain_deadline_ms): a day. */
export const MAX_DRAIN_DEADLINE_MS = 86_400_000;

/** Flows an isolate names in one admission demand post (the rest go as one entry). */
export const MAX_DEMAND_FLOWS = 64;
