import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

export default defineConfig({
  plugins: [
    cloudflareTest({
      main: "../../src/worker.ts",
      wrangler: { configPath: "../../wrangler.toml" },
      miniflare: {
        bindings: { SWITCHYARD_REPLICA_SECRET: "test-replica-secret", SWITCHYARD_ADMIN_SECRET: "test-admin-secret" },
      },
    }),
  ],
  test: {
    name: "workers",
    include: ["**/*.test.ts"],
  },
});
