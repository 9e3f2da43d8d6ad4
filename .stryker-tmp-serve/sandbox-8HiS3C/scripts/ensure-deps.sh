#!/usr/bin/env bash
# Installs what `npm start` and `npm test` need, once: npm packages from the
# lockfile (Node 24 itself among them: the devDependency "node", which npm scripts
# run from node_modules/.bin whatever Node runs npm), ApacheBench (Debian's
# apache2-utils) for the seed's load test with --with-ab, and Debian's chromium for
# the dashboard browser test with --with-chromium (without it that test is
# skipped, not failed).
set -euo pipefail
cd "$(dirname "$0")/.."
with_ab=0 with_chromium=0
for arg in "$@"; do
  case "$arg" in
    --with-ab) with_ab=1 ;;
    --with-chromium) with_chromium=1 ;;
    *) echo "ensure-deps.sh: unknown option $arg" >&2; exit 2 ;;
  esac
done
can_apt() { [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=0
apt_install() {
  if [ "$apt_updated" = 0 ]; then apt-get update -qq; apt_updated=1; fi
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null
}
if [ ! -f node_modules/.package-lock.json ] || [ package-lock.json -nt node_modules/.package-lock.json ]; then
  echo "installing npm packages (npm ci)…"
  npm ci --no-audit --no-fund
fi
# The project's Node: the "node" package fetches the binary for this platform from
# the npm registry in its install script. Check that it runs and is new enough.
node_ok() { [ -x node_modules/.bin/node ] && node_modules/.bin/node -e 'process.exit(Number(process.versions.node.split(".")[0]) >= 22 ? 0 : 1)' 2>/dev/null; }
if ! node_ok; then
  echo "installing the project's Node (npm rebuild node)…"
  npm rebuild node --no-audit --no-fund
  if ! node_ok; then
    echo "ensure-deps.sh: node_modules/.bin/node (the devDependency \"node\") does not run; npm's install scripts may be turned off (ignore-scripts)" >&2
    exit 1
  fi
fi
if [ "$with_ab" = 1 ] && ! command -v ab >/dev/null 2>&1; then
  if can_apt; then
    echo "installing ApacheBench (apache2-utils)…"
    apt_install apache2-utils
  else
    echo "ApacheBench (ab) is needed for the seed load test: sudo apt-get install apache2-utils" >&2
    exit 1
  fi
fi
if [ "$with_chromium" = 1 ] && [ ! -x /usr/bin/chromium ] && [ ! -x /usr/bin/chromium-browser ]; then
  if can_apt; then
    echo "installing Chromium for the dashboard browser test (a few minutes, once)…"
    apt_install chromium
  else
    echo "note: no Chromium; the dashboard browser test will be skipped (sudo apt-get install chromium)" >&2
  fi
fi
