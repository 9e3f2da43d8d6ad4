import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

// Three kinds of tests (see README "Tests"):
//   unit    pure logic, in Node
//   workers the routing Durable Object and the Worker, inside workerd (Cloudflare's vitest integration)
//   e2e     the real local stack: workerd + replica processes on loopback ports
/** Unit files that replace a module with vi.mock: in a shared module graph the mock would leak. */
/** Unit files with a module graph of their own: they vi.mock a module, or change a module's process-wide state. */
const MOCKING_UNIT_FILES = ["test/unit/edge-fetch.test.ts", "test/unit/package-exports.test.ts", "test/unit/replica-edge-client-older-edge.test.ts"];
/** tsconfig.json's path `#switchyard/*` (this repository's src/, for deployment files anywhere in it: examples/), as tsx and esbuild read it. */
const resolve = { alias: [{ find: /^#switchyard\/(.*)$/, replacement: `${fileURLToPath(new URL("./src/", import.meta.url))}$1` }] };
/** The unit projects' resolve (and the mutation runs', vitest.mutation.config.ts): `cloudflare:workers` is workerd's own module, stood in for by its base class (test/fixtures/cloudflare-workers-node.ts). */
export const nodeResolve = { alias: [...resolve.alias, { find: /^cloudflare:workers$/, replacement: fileURLToPath(new URL("./test/fixtures/cloudflare-workers-node.ts", import.meta.url)) }] };

export default defineConfig({
  test: {
    projects: [
      // Generous time limits: CI runs on a machine that may be busy, and a few unit tests
      // start real onnxruntime sessions; a limit is not an assertion (nothing is timed).
      // The unit files share one module graph (isolate: false: 66 s instead of 105 s here, the
      // time went to re-importing per file); the files that vi.mock a module, or learn
      // process-wide state (an older edge), keep their own.
      {
        resolve: nodeResolve,
        test: {
          name: "unit",
          include: ["test/unit/**/*.test.ts"],
          exclude: [...MOCKING_UNIT_FILES],
          environment: "node",
          isolate: false,
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      { resolve: nodeResolve, test: { name: "unit-mocks", include: [...MOCKING_UNIT_FILES], environment: "node", testTimeout: 60_000, hookTimeout: 60_000 } },
      "test/workers/vitest.config.ts",
      {
        resolve,
        test: {
          name: "e2e",
          include: ["test/e2e/**/*.test.ts"],
          environment: "node",
          // The stack uses both cores; files run one after another.
          fileParallelism: false,
          testTimeout: 120_000,
          hookTimeout: 120_000,
        },
      },
    ],
  },
});
