#!/usr/bin/env bash
# The suite under stress, as CI runs it but on a busy machine: clones this
# repository's HEAD (or --ref) into a fresh directory for every run, starts K
# busy-loop processes competing for the CPUs, and runs `CI=true bash .ci/run`
# there N times. Prints each run's result and time, keeps the logs, and exits 1
# if any run failed.
#
#   bash scripts/stress-test.sh [--runs N] [--busy K] [--ref REF] [--keep]
#
# Defaults: 3 runs, 2 busy loops, HEAD. Logs go to a temporary directory
# (printed); --keep keeps the clones too. Busy loops are `node -e` processes
# started here and ended here, by PID.
set -euo pipefail
runs=3 busy=2 ref=HEAD keep=0
while [ $# -gt 0 ]; do
  case "$1" in
    --runs) runs=$2; shift 2 ;;
    --busy) busy=$2; shift 2 ;;
    --ref) ref=$2; shift 2 ;;
    --keep) keep=1; shift ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    *) echo "stress-test.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
repo=$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)
commit=$(git -C "$repo" rev-parse --short "$ref")
work=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-stress-XXXXXX")
pids=()
stop_busy() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; pids=(); }
trap stop_busy EXIT
for _ in $(seq 1 "$busy"); do
  node -e 'for (;;) {}' &
  pids+=($!)
done
echo "stress: $runs run(s) of $commit with $busy busy loop(s); logs in $work"
failed=0
for r in $(seq 1 "$runs"); do
  clone="$work/run-$r"
  git clone -q "$repo" "$clone"
  git -C "$clone" checkout -q "$commit"
  started=$(date +%s)
  if (cd "$clone" && CI=true bash .ci/run) >"$work/run-$r.log" 2>&1; then result=passed; else result=FAILED; failed=$((failed + 1)); fi
  took=$(( $(date +%s) - started ))
  summary=$(sed 's/\x1b\[[0-9;]*m//g' "$work/run-$r.log" | grep -E "^ +Tests " | tail -1 | tr -s ' ' || true)
  echo "run $r: $result in ${took} s (load average $(cut -d' ' -f1-3 /proc/loadavg));${summary}"
  if [ "$result" = FAILED ]; then grep -E "FAIL|×" "$work/run-$r.log" | sed 's/\x1b\[[0-9;]*m//g' | head -20 || true; fi
  [ "$keep" = 1 ] || rm -rf "$clone"
done
stop_busy
echo "stress: $((runs - failed)) of $runs run(s) passed; logs in $work"
[ "$failed" = 0 ]
