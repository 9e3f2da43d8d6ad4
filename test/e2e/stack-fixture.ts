// Starts the real local stack (workerd + replica processes) for an e2e test file.
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LocalStack, type StackOptions } from "../../src/local/stack.ts";

export const fixtureFunctions = join(import.meta.dirname, "fixtures/functions");

export async function startStack(options: StackOptions = {}): Promise<LocalStack & { stateDir: string; logLines: string[]; dispose(): Promise<void> }> {
  const stateDir = mkdtempSync(join(tmpdir(), "switchyard-e2e-"));
  const lines: string[] = [];
  const stack = new LocalStack({ port: 0, stateDir, freshState: true, log: (l) => lines.push(l), ...options });
  try {
    await stack.start();
  } catch (err) {
    stack.killAll();
    throw new Error(`stack failed to start: ${String(err)}\n${lines.slice(-40).join("\n")}`);
  }
  return Object.assign(stack, {
    /** Where this stack's bundle, config and Durable Object storage live. */
    stateDir,
    /** Output of workerd and the replicas so far, one line each, prefixed with the process name. */
    logLines: lines,
    async dispose() {
      await stack.stop();
      rmSync(stateDir, { recursive: true, force: true });
    },
  });
}

export interface LoadResult {
  sent: number;
  ok: number;
  failed: { status: number; body: string }[];
  byReplica: Map<string, number>;
}

/** Runs `concurrency` loops of requests until `durationMs` has passed. */
export async function runLoad(url: string, o: { concurrency: number; durationMs: number; init?: RequestInit; expectBody?: string }): Promise<LoadResult> {
  const until = Date.now() + o.durationMs;
  const result: LoadResult = { sent: 0, ok: 0, failed: [], byReplica: new Map() };
  const worker = async () => {
    while (Date.now() < until) {
      result.sent++;
      try {
        const res = await fetch(url, o.init);
        const body = await res.text();
        const replica = res.headers.get("x-switchyard-replica") ?? "?";
        if (res.status === 200 && (o.expectBody === undefined || body === o.expectBody)) {
          result.ok++;
          result.byReplica.set(replica, (result.byReplica.get(replica) ?? 0) + 1);
        } else {
          result.failed.push({ status: res.status, body: body.slice(0, 300) });
        }
      } catch (err) {
        result.failed.push({ status: 0, body: String(err) });
      }
    }
  };
  await Promise.all(Array.from({ length: o.concurrency }, worker));
  return result;
}

export const sleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms));
