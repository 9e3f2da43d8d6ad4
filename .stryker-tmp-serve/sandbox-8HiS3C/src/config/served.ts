/**
 * The deployments this Worker serves, for code that runs in the Worker but is
 * not handed them per request (the Durable Objects' alarms). src/worker.ts
 * registers them when the module loads, before any request or alarm.
 */
// @ts-nocheck

import type { Deployment } from "./deployment.ts";

let served: ReadonlyMap<string, Deployment> = new Map();

export function registerServedDeployments(deployments: readonly Deployment[]): void {
  served = new Map(deployments.map((d) => [d.name, d]));
}

export function servedDeployment(name: string): Deployment | undefined {
  return served.get(name);
}

export function servedDeployments(): Deployment[] {
  return [...served.values()];
}
