/**
 * `switchyard replica [REPLICA OPTIONS]`: runs the reference replica
 * (src/replica-entry.ts) as a child process with these options, forwards SIGTERM,
 * SIGINT and SIGHUP to it (the replica drains on the first two) and exits with
 * its exit status (128 + the signal's number when a signal ended it).
 */
// @ts-nocheck

import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { createRequire } from "node:module";
import { constants } from "node:os";
import { fileURLToPath, pathToFileURL } from "node:url";

const REPLICA_CLI = fileURLToPath(new URL("../../replica-entry.ts", import.meta.url));
// Bundled (dist/cli.mjs, scripts/build.ts) this module's URL is dist/cli.mjs: the replica's bundle is beside it.
const REPLICA_BUNDLE = fileURLToPath(new URL("./replica.mjs", import.meta.url));

/** The node arguments that run the replica: its bundle next to the CLI's, or else its TypeScript entry point through tsx's loader (from any cwd). */
export function replicaCommandLine(args: readonly string[]): string[] {
  if (import.meta.url.endsWith(".mjs") && existsSync(REPLICA_BUNDLE)) return [REPLICA_BUNDLE, ...args];
  const tsxLoader = pathToFileURL(createRequire(import.meta.url).resolve("tsx")).href;
  return ["--import", tsxLoader, REPLICA_CLI, ...args];
}

const FORWARDED = ["SIGTERM", "SIGINT", "SIGHUP"] as const;

let running = 0;
/** Whether a replica child runs (signals are then the replica's business). */
export const replicaRunning = () => running > 0;

export function replicaCommand(args: readonly string[], env: NodeJS.ProcessEnv = process.env): Promise<number> {
  const child = spawn(process.execPath, replicaCommandLine(args), { stdio: "inherit", env });
  running++;
  const forward = (signal: NodeJS.Signals) => () => {
    // A terminal's Ctrl-C reaches both processes; the replica drains once either way.
    if (child.exitCode === null && child.signalCode === null) child.kill(signal);
  };
  const handlers = FORWARDED.map((s) => [s, forward(s)] as const);
  for (const [s, h] of handlers) process.on(s, h);
  return new Promise((resolve) => {
    const done = (code: number) => {
      running--;
      for (const [s, h] of handlers) process.off(s, h);
      resolve(code);
    };
    child.once("error", (err) => {
      process.stderr.write(`switchyard: cannot start the replica: ${err.message}\n`);
      done(1);
    });
    child.once("exit", (code, signal) => done(code ?? (signal ? 128 + (constants.signals[signal] ?? 0) : 1)));
  });
}
