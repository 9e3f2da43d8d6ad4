#!/usr/bin/env bash
# `npm test`: installs what is missing, type-checks, runs the deploy checks, then
# runs every test (unit, workers-runtime, end-to-end against the real local stack).
# Under npm, node_modules/.bin is first on PATH: `node` there is the project's own
# Node 24 (devDependency "node"), whatever Node runs npm itself.
set -euo pipefail
cd "$(dirname "$0")/.."
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
bash scripts/ensure-deps.sh --with-ab --with-chromium
export PATH="$PWD/node_modules/.bin:$PATH"   # as npm does, for `bash scripts/test.sh` run by hand
echo "node $(node --version) ($(command -v node))"
npx tsx scripts/build.ts
# Env (worker-configuration.d.ts) is generated from wrangler.toml: fail when it is stale.
npm run --silent types -- --check
npx tsc --noEmit
npx tsc --noEmit -p test/workers
npm run --silent deploy-check
npx vitest run "$@"
