import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";

// Mutation testing (`npm run mutation`, StrykerJS): the unit project alone. The modules
// mutated are pure logic, and the unit tests are what must notice a change to them;
// the workers and e2e projects need runtimes Stryker's per-test runs cannot share.
// `cloudflare:workers` is stood in for as in the unit project (vitest.config.ts).
export default defineConfig({
  resolve: { alias: [{ find: /^cloudflare:workers$/, replacement: fileURLToPath(new URL("./test/fixtures/cloudflare-workers-node.ts", import.meta.url)) }] },
  test: { include: ["test/unit/**/*.test.ts"], environment: "node", testTimeout: 60_000, hookTimeout: 60_000 },
});
