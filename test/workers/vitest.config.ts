import { cloudflareTest } from "@cloudflare/vitest-plugin";
import { fileURLToPath } from "node:url";
import { defineConfig } from "vitest/config";
import { generateDeploymentsModule } from "../../src/local/build.ts";

// The repository root is this project's root, not this folder: the vitest plugin
// loads non-JavaScript modules (the edge runtime's .wasm, a model's .onnx; see
// wrangler.toml's [[rules]]) by joining the project root with Vite's id for the
// file, and for a file outside the root that id is an unusable "/@fs/..." path.
const root = fileURLToPath(new URL("../..", import.meta.url));

// The Worker under test serves functions/, the opt-in edge-inference example
// (examples/edge-inference/, test/workers/edge-inference.test.ts) and the model-family
// ones (examples/model-family*/, test/workers/model-family.test.ts): its own generated
// deployments module, in place of .switchyard/deployments.ts (functions/ alone, what
// `wrangler deploy` ships by default) wherever the Worker or a test imports that.
const deployments = await generateDeploymentsModule([`${root}functions`, `${root}examples/edge-inference`, `${root}examples/model-family`, `${root}examples/model-family-gemma3`, `${root}examples/model-family-gpt-oss`], `${root}.switchyard/workers-test`);

export default defineConfig({
  plugins: [
    cloudflareTest({
      main: `${root}src/worker.ts`,
      wrangler: { configPath: `${root}wrangler.toml` },
      miniflare: {
        // Local mode: replicas may register loopback and private URLs (production rules are unit-tested in test/unit/replica-url.test.ts).
        bindings: { SWITCHYARD_REPLICA_SECRET: "test-replica-secret", SWITCHYARD_ADMIN_SECRET: "test-admin-secret", SWITCHYARD_MODE: "local" },
      },
    }),
  ],
  resolve: {
    alias: [{ find: /^(?:\.\.\/)+\.switchyard\/deployments\.ts$/, replacement: deployments }],
  },
  test: {
    root,
    name: "workers",
    include: ["test/workers/**/*.test.ts"],
    // A busy CI machine: a limit is not an assertion (nothing here is timed).
    testTimeout: 60_000,
    hookTimeout: 60_000,
  },
});
