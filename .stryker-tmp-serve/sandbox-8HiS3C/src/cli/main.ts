/**
 * Entry point of `switchyard` (bin/switchyard.mjs loads it through tsx).
 * SIGINT/SIGTERM end `metrics --follow` (exit 0) and `drain --wait` (exit 130);
 * a second one exits at once. `replica` forwards them to the replica instead.
 */
// @ts-nocheck

import { replicaRunning } from "./commands/replica.ts";
import { run } from "./run.ts";

const controller = new AbortController();
let interrupted = false;
const onSignal = (signal: NodeJS.Signals) => {
  if (replicaRunning()) return; // `replica` forwards it to the replica, and exits when the replica does
  if (interrupted) process.exit(130);
  interrupted = true;
  controller.abort();
};
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);

// `switchyard status | head -1`: a closed pipe is not an error.
process.stdout.on("error", (err: NodeJS.ErrnoException) => {
  if (err.code === "EPIPE") process.exit(0);
  throw err;
});

const code = await run(process.argv.slice(2), {
  stdout: process.stdout,
  stderr: process.stderr,
  env: process.env,
  signal: controller.signal,
});
process.off("SIGINT", onSignal);
process.off("SIGTERM", onSignal);
process.exitCode = code;
