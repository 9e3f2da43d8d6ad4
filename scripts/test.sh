#!/usr/bin/env bash
# `npm test`: installs what is missing, type-checks, then runs every test
# (unit, workers-runtime, end-to-end against the real local stack).
set -euo pipefail
cd "$(dirname "$0")/.."
export WRANGLER_SEND_METRICS=false CLOUDFLARE_CF_FETCH_ENABLED=false
bash scripts/ensure-deps.sh --with-ab --with-chromium
npx tsx scripts/build.ts
npx tsc --noEmit
npx tsc --noEmit -p test/workers
npx vitest run "$@"
