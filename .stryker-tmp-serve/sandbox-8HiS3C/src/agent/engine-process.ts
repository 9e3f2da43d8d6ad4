/**
 * The engine process a replica agent owns: the command after `--` on the agent's
 * command line (`vllm serve …`, `python -m sglang.launch_server …`), spawned with
 * the agent's stdout and stderr. It runs in its own process group, so a Ctrl-C in
 * the terminal reaches the agent alone and the agent decides when the engine stops
 * (after draining and deregistering); SIGKILL goes to the whole group, so an
 * engine's worker processes do not outlive it.
 */
// @ts-nocheck

import { spawn } from "node:child_process";
import type { EngineProcess } from "./agent.ts";

export interface SpawnedEngine extends EngineProcess {
  readonly pid: number | undefined;
}

/** Environment variables the engine does not get: the deployment's replica key is the agent's alone. */
const WITHHELD_ENV = ["SWITCHYARD_REPLICA_KEY", "SWITCHYARD_REPLICA_SECRET"];

export function spawnEngine(command: readonly string[]): SpawnedEngine {
  const [file, ...args] = command;
  if (file === undefined) throw new Error("empty engine command");
  const env = { ...process.env };
  for (const name of WITHHELD_ENV) delete env[name];
  const child = spawn(file, args, { stdio: ["ignore", "inherit", "inherit"], detached: true, env });
  let running = true;
  const exited = new Promise<string>((resolve) => {
    child.once("exit", (code, signal) => resolve(signal ? `signal ${signal}` : `code ${code}`));
    child.once("error", (err) => resolve(`could not start: ${err.message}`));
  }).finally(() => {
    running = false;
  });
  const send = (signal: NodeJS.Signals, group: boolean) => {
    if (!running || child.pid === undefined) return;
    try {
      process.kill(group ? -child.pid : child.pid, signal);
    } catch {
      try {
        child.kill(signal);
      } catch {
        // already gone
      }
    }
  };
  // The agent exiting by any path (an uncaught error included) must not leave the engine behind.
  const onExit = () => send("SIGKILL", true);
  process.once("exit", onExit);
  void exited.then(() => process.off("exit", onExit));
  return {
    pid: child.pid,
    exited,
    terminate: () => send("SIGTERM", false),
    kill: () => send("SIGKILL", true),
  };
}
