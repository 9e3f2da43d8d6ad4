/**
 * The protocol's limits, one set for every side: the replica and the agent
 * stay within them when they send, the edge and the routing object refuse
 * what goes beyond them.
 */

/** Largest count a load can carry (ongoing, queued, max). */
export const MAX_LOAD_COUNT = 1_000_000;
/** Most model ids a replica reports (loaded, and loading): reports, the load header, max_models. */
export const MAX_REPLICA_MODELS = 1024;
/**
 * Longest load header, bytes: what a proxy parses on every response. A replica
 * whose model sets do not fit leaves them out of the header (formatLoadHeader);
 * they still travel in its reports.
 */
export const MAX_LOAD_HEADER_BYTES = 8192;
/** Largest control message body, bytes (register, report, deregister). */
export const MAX_CONTROL_BODY_BYTES = 64 * 1024;
/** Most replicas one node report carries (one agent per node reports for all its engines). */
export const MAX_NODE_REPLICAS = 64;
/** Largest node report body, bytes: up to MAX_NODE_REPLICAS reports in one message. */
export const MAX_NODE_REPORT_BYTES = 256 * 1024;
