import { cloudflareTest } from "@cloudflare/vitest-pool-workers";
import { defineConfig } from "vitest/config";

export default defineConfig({
  plugins: [
    cloudflareTest({
      main: "../../src/worker.ts",
      wrangler: { configPath: "../../wrangler.toml" },
      miniflare: {
        // Local mode: replicas may register loopback and private URLs (production rules are unit-tested in test/unit/replica-url.test.ts).
        bindings: { SWITCHYARD_REPLICA_SECRET: "test-replica-secret", SWITCHYARD_ADMIN_SECRET: "test-admin-secret", SWITCHYARD_MODE: "local" },
      },
    }),
  ],
  test: {
    name: "workers",
    include: ["**/*.test.ts"],
  },
});
