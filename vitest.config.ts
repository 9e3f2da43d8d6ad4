import { defineConfig } from "vitest/config";

// Three kinds of tests (see README "Tests"):
//   unit    pure logic, in Node
//   workers the routing Durable Object and the Worker, inside workerd (Cloudflare's vitest integration)
//   e2e     the real local stack: workerd + replica processes on loopback ports
export default defineConfig({
  test: {
    projects: [
      // Generous time limits: CI runs on a machine that may be busy, and a few unit tests
      // start real onnxruntime sessions; a limit is not an assertion (nothing is timed).
      { test: { name: "unit", include: ["test/unit/**/*.test.ts"], environment: "node", testTimeout: 60_000, hookTimeout: 60_000 } },
      "test/workers/vitest.config.ts",
      {
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
