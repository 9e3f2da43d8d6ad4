import { defineConfig } from "vitest/config";
import { nodeResolve } from "./vitest.config.ts";

// Mutation testing (`npm run mutation`, StrykerJS): the unit project alone. The modules
// mutated are pure logic, and the unit tests are what must notice a change to them;
// the workers and e2e projects need runtimes Stryker's per-test runs cannot share.
// Modules resolve as in the unit project (`cloudflare:workers` stood in for).
export default defineConfig({
  resolve: nodeResolve,
  test: { include: ["test/unit/**/*.test.ts"], environment: "node", testTimeout: 60_000, hookTimeout: 60_000 },
});
