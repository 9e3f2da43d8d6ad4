/**
 * Build: collects functions/*.ts into .switchyard/deployments.ts (so a user adds
 * a deployment by adding a file), then bundles the edge Worker for workerd and
 * the reference replica for Node (src/local/build.ts does the work).
 *   tsx scripts/build.ts            generate + bundle (the Worker, the replica, the CLI, the library)
 *   tsx scripts/build.ts --generate generate only (wrangler's [build] step)
 *   tsx scripts/build.ts --cli      the CLI and the replica (npm's prepare)
 *   tsx scripts/build.ts --lib      those and the library: dist/lib/*.js, dist/types/ (npm pack's prepack)
 */
import { bundleCli, bundleLibrary, bundleReplica, bundleWorker, generateDeploymentsModule } from "../src/local/build.ts";

// --cli (npm's prepare): only what the `switchyard` bin runs; --lib (npm pack's prepack) adds the library.
if (process.argv.includes("--cli") || process.argv.includes("--lib")) {
  await Promise.all([bundleCli(), bundleReplica(), ...(process.argv.includes("--lib") ? [bundleLibrary()] : [])]);
} else {
  await generateDeploymentsModule();
  if (!process.argv.includes("--generate")) await Promise.all([bundleWorker(), bundleReplica(), bundleCli(), bundleLibrary()]);
}
