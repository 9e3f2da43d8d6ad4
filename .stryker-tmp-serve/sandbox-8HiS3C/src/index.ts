/**
 * The package's main entry (`@switchyard-edge/switchyard`): what a Worker of
 * the user's own needs to serve deployments. The Durable Object classes are in
 * `./durable-objects`, the replica protocol in `./protocol`.
 */
// @ts-nocheck

export { defineDeployment, type Deployment, type DeploymentInput, type BackendSpec } from "./config/deployment.ts";
// The Durable Objects' alarms read the deployments from here: a Worker calls it once at module load.
export { registerServedDeployments } from "./config/served.ts";
export { createEdgeApp, type EdgeApp } from "./proxy/app.ts";
export type { Env } from "./env.ts";
