/**
 * `npm run bench`: a quick version of every benchmark scenario, one after the
 * other (each starts and stops its own stack), then the charts. About 8 minutes;
 * each script's full mode is in bench/README.md.
 *
 *   npx tsx bench/all.ts [--only seed,streaming,dispatch,state-cost,affinity,state-plane,prefix-cache]
 *
 * Scenarios: the Ray Serve seed (bench/seed/seed.ts --quick), the Llumnix seed
 * (bench/streaming/streaming.ts, 4 s per arm), dispatch quality (--quick), hot-path state
 * cost (3 s per phase), multiplexing and affinity (4 s), the state plane at
 * 2,048 simulated replicas per deployment (--quick: 3 rounds, 5 s window), prefix-cache-aware
 * routing (--quick: 8 s windows, ~2.5 min), the slow-client attacks (--quick), the
 * edge files one warm request of each kind runs through (request-path), admission,
 * the paced view refresh, the agent's proxy-mode hop (proxy-agent), and prefill/decode
 * disaggregation (pd: 10 s per arm, ~45 s). Each
 * writes bench/results/quick/<name>.json; then bench/shared/chart.ts draws those into
 * bench/results/charts/ (the charts in docs/ are drawn from bench/published/ only).
 * A scenario that fails is reported and the others still run; the exit status says
 * whether all passed.
 */
import { spawnSync } from "node:child_process";
import { parseArgs } from "node:util";

const SCENARIOS: Record<string, string[]> = {
  seed: ["bench/seed/seed.ts", "--quick"],
  streaming: ["bench/streaming/streaming.ts", "--quick"],
  dispatch: ["bench/dispatch-quality/dispatch-quality.ts", "--quick"],
  "state-cost": ["bench/state-cost/state-cost.ts", "--quick"],
  affinity: ["bench/affinity/affinity.ts", "--quick"],
  "state-plane": ["bench/state-plane/state-plane.ts", "--quick"],
  "prefix-cache": ["bench/prefix-cache/prefix-cache.ts", "--quick"],
  "slow-clients": ["bench/slow-clients/slow-clients.ts", "--quick"],
  "request-path": ["bench/request-path/request-path.ts", "--quick"],
  admission: ["bench/admission/admission.ts", "--quick"],
  "view-refresh": ["bench/view-refresh/view-refresh.ts", "--quick"],
  "proxy-agent": ["bench/proxy-agent/proxy-agent.ts", "--quick"],
  tokenizers: ["bench/tokenizers/tokenizers.ts", "--quick"],
  pd: ["bench/pd/pd.ts", "--quick"],
};

const { values } = parseArgs({ options: { only: { type: "string" } } });
const chosen = values.only ? values.only.split(",").map((s) => s.trim()) : Object.keys(SCENARIOS);
for (const name of chosen) if (!(name in SCENARIOS)) throw new Error(`unknown scenario "${name}"; known: ${Object.keys(SCENARIOS).join(", ")}`);

const failed: string[] = [];
for (const name of chosen) {
  const started = Date.now();
  console.log(`\n## ${name}: npx tsx ${SCENARIOS[name]!.join(" ")}\n`);
  const r = spawnSync(process.execPath, ["--import", "tsx", ...SCENARIOS[name]!], { stdio: "inherit", env: process.env });
  console.log(`\n(${name}: ${((Date.now() - started) / 1000).toFixed(0)} s, exit ${r.status ?? r.signal})`);
  if (r.status !== 0) failed.push(name);
}
// Quick runs go to bench/results/quick/ and their charts to bench/results/charts/: the committed charts
// in docs/ and the README's figures come from full runs published in bench/published/ only.
spawnSync(process.execPath, ["--import", "tsx", "bench/shared/chart.ts", "--from", "bench/results/quick", "--into", "bench/results/charts"], { stdio: "inherit" });
if (failed.length > 0) {
  console.error(`\nfailed: ${failed.join(", ")}`);
  process.exit(1);
}
