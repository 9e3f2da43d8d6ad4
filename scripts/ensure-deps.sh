#!/usr/bin/env bash
# Installs what `npm start` and `npm test` need, once: npm packages from the
# lockfile, and ApacheBench (Debian's apache2-utils) for the seed's load test.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "installing npm packages (npm ci)…"
  npm ci --no-audit --no-fund
fi
if [ "${1:-}" = "--with-ab" ] && ! command -v ab >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    echo "installing ApacheBench (apache2-utils)…"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq apache2-utils >/dev/null
  else
    echo "ApacheBench (ab) is needed for the seed load test: sudo apt-get install apache2-utils" >&2
    exit 1
  fi
fi
