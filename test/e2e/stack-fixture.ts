// Starts the real local stack (workerd + replica processes) for an e2e test file.
import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { afterAll, beforeAll, describe } from "vitest";
import { deploymentFiles } from "../../src/local/build.ts";
import type { DeploymentInput } from "../../src/config/deployment.ts";
import { LocalStack, type StackOptions } from "../../src/local/stack.ts";
import { Header, bodySha256, importReplicaKey, signDispatch } from "../../src/protocol/index.ts";

export const fixtureFunctions = join(import.meta.dirname, "fixtures/functions");
const defaultFunctions = join(import.meta.dirname, "../../functions");

type Routing = NonNullable<DeploymentInput["routing"]>;

/**
 * The routing designs the fault, multiplexing, session and key tests run
 * against: one routing object (behind its location's relay, the default), and
 * the same deployments spread over 4 routing shards.
 */
export const ROUTING_DESIGNS: readonly RoutingDesign[] = [
  { name: "one routing object" },
  { name: "4 routing shards", routing: { shards: 4, relay: true } },
];

export interface RoutingDesign {
  name: string;
  routing?: Routing;
}

export type TestStack = Awaited<ReturnType<typeof startStack>>;

/**
 * A describe block per routing design, each with its own stack: started from
 * `options` with the design's routing before the block's tests, disposed after.
 * `started` hands the stack to the file's tests, `tests` declares them, and
 * `before` (optional) runs first in each block, before the stack starts.
 */
export function forEachRoutingDesign(
  options: StackOptions,
  started: (stack: TestStack) => void,
  tests: (design: RoutingDesign) => void,
  before?: () => Promise<void>,
): void {
  for (const design of ROUTING_DESIGNS) {
    describe(`with ${design.name}`, () => {
      let own: TestStack | undefined;
      beforeAll(async () => {
        await before?.();
        own = await startStack({ ...options, ...(design.routing ? { routing: design.routing } : {}) });
        started(own);
      });
      afterAll(async () => {
        await own?.dispose();
      });
      tests(design);
    });
  }
}

/**
 * A functions folder whose deployments are those of `functionsDir` with
 * `routing` replaced: one file per deployment, re-exporting the original.
 */
export function withRouting(functionsDir: string, routing: Routing, into: string): string {
  const config = join(import.meta.dirname, "../../src/config/deployment.ts");
  for (const f of deploymentFiles(functionsDir)) {
    writeFileSync(
      join(into, f.replace(/\.(js|mjs)$/, ".ts")),
      `import { defineDeployment } from ${JSON.stringify(config)};\nimport d from ${JSON.stringify(join(functionsDir, f))};\nexport default defineDeployment({ ...d, routing: ${JSON.stringify(routing)} });\n`,
    );
  }
  return into;
}

export async function startStack(
  options: StackOptions & { routing?: Routing } = {},
): Promise<LocalStack & { stateDir: string; logLines: string[]; dispose(): Promise<void> }> {
  const stateDir = mkdtempSync(join(tmpdir(), "switchyard-e2e-"));
  const lines: string[] = [];
  const { routing, ...rest } = options;
  if (routing) {
    const dir = join(stateDir, "functions");
    mkdirSync(dir);
    const from = rest.functionsDir ?? defaultFunctions;
    if (typeof from !== "string") throw new Error("startStack: routing applies to one functions folder");
    rest.functionsDir = withRouting(from, routing, dir);
  }
  const stack = new LocalStack({ port: 0, stateDir, freshState: true, log: (l) => lines.push(l), ...rest });
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

/** Runs `concurrency` loops of requests until `durationMs` has passed, or `stop` says so (an event the test waits for). */
export async function runLoad(url: string, o: { concurrency: number; durationMs: number; init?: RequestInit; expectBody?: string; stop?: () => boolean }): Promise<LoadResult> {
  const until = Date.now() + o.durationMs;
  const result: LoadResult = { sent: 0, ok: 0, failed: [], byReplica: new Map() };
  const worker = async () => {
    while (Date.now() < until && !o.stop?.()) {
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

let nextNonce = 1;

/**
 * fetch as the deployment's edge sends a dispatch: signed with the deployment's
 * replica key for the replica at that URL, with the body's digest when the body is
 * given whole (docs/protocol.md §2). A registered replica refuses any other
 * request, so tests that talk to a replica behind the edge's back use this.
 */
export function signedFetch(stack: LocalStack, deployment: string, replicaId?: string): typeof fetch {
  return async (input, init) => {
    const url = new URL(typeof input === "string" ? input : input instanceof URL ? input.href : input.url);
    const method = init?.method ?? (input instanceof Request ? input.method : "GET");
    const headers = new Headers(init?.headers ?? (input instanceof Request ? input.headers : undefined));
    const requestId = headers.get(Header.requestId) ?? `test-${nextNonce}`;
    const timestamp = Date.now();
    const nonce = nextNonce++;
    const key = await importReplicaKey(await stack.replicaKey(deployment));
    // A replica the stack did not start (an agent) is named by the caller.
    const replica = replicaId !== undefined ? { id: replicaId } : [...stack.replicas.values()].find((r) => new URL(r.url).origin === url.origin);
    if (!replica) throw new Error(`signedFetch: no replica of the stack listens at ${url.origin}`);
    const body = init?.body;
    const whole = typeof body === "string" ? new TextEncoder().encode(body) : body instanceof Uint8Array || body instanceof ArrayBuffer ? body : undefined;
    const digest = whole !== undefined && whole.byteLength > 0 ? await bodySha256(whole as ArrayBuffer) : "";
    headers.set(Header.requestId, requestId);
    headers.set(Header.deployment, deployment);
    headers.set(Header.timestamp, String(timestamp));
    headers.set(Header.nonce, String(nonce));
    if (digest !== "") headers.set(Header.bodySha256, digest);
    headers.set(
      Header.signature,
      await signDispatch(key, { timestamp, nonce, method, deployment, target: url.pathname + url.search, requestId, replica: replica.id, bodySha256: digest }),
    );
    return fetch(input instanceof Request ? new Request(input, { headers }) : url, { ...init, method, headers });
  };
}

/** Whether a process (one the test started) is still alive. */
export function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** A loopback port that was free a moment ago (for a process the test starts on a fixed port). */
export async function freePort(): Promise<number> {
  const s = createServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const port = (s.address() as { port: number }).port;
  await new Promise<void>((r) => s.close(() => r()));
  return port;
}

/**
 * Waits for an event: polls `probe` every 25 ms until it returns something other
 * than undefined. On timeout it throws, naming `what` and adding `detail()` (a log).
 */
export async function until<T>(what: string, probe: () => Promise<T | undefined> | T | undefined, timeoutMs = 20_000, detail?: () => string): Promise<T> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}${detail ? `\n${detail()}` : ""}`);
    await sleep(25);
  }
}
