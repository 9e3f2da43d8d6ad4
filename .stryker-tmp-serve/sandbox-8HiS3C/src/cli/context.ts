/** What every command gets: where to write, the edge, and the global options. */
// @ts-nocheck

import type { EdgeClient } from "./edge.ts";

export interface Io {
  stdout: { write(chunk: string): unknown; isTTY?: boolean };
  stderr: { write(chunk: string): unknown };
  env: Record<string, string | undefined>;
  fetch?: typeof fetch;
  /** Aborted on SIGINT/SIGTERM: ends `metrics --follow` and `drain --wait`. */
  signal?: AbortSignal;
  now?: () => Date;
}

export interface Context {
  io: Io;
  edge: EdgeClient;
  json: boolean;
  /** ANSI colours in tables (stdout is a terminal, NO_COLOR unset). */
  colour: boolean;
  now(): Date;
  /** Resolves after ms, or early (false) when the signal aborts. */
  sleep(ms: number): Promise<boolean>;
  out(text: string): void;
  /** A JSON document on stdout (two-space indent, newline). */
  outJson(value: unknown): void;
}

export function sleepUnlessAborted(ms: number, signal: AbortSignal | undefined): Promise<boolean> {
  if (signal?.aborted) return Promise.resolve(false);
  return new Promise((resolve) => {
    const onAbort = () => {
      clearTimeout(timer);
      resolve(false);
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve(true);
    }, ms);
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
