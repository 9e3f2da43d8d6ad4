/**
 * The Durable Object classes a Worker serving Switchyard must export (with the
 * bindings of wrangler.toml: ROUTER, RELAYS, SESSIONS, KEYS, RATE_LIMITS, TELEMETRY).
 */
// @ts-nocheck

export { DeploymentRouter } from "./state/deployment-router.ts";
export { SnapshotRelay } from "./state/snapshot-relay.ts";
export { SessionRouter } from "./state/session-router.ts";
export { AccessKeys } from "./state/access-keys.ts";
export { RateLimiter } from "./state/rate-limiter.ts";
export { Telemetry } from "./state/telemetry.ts";
