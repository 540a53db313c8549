#!/usr/bin/env bash
# A/B of two `forest` binaries on `forest bench`, run alternately ROUNDS times so machine noise
# hits both alike. Prints each run's rows as `old|new WORKLOAD T=THREADS ENGINE: MOPS` (the
# median of the run's --runs) and `old|new process cpu s: SECONDS`, ready for
# scripts/ab-median.sh.
#
#   scripts/ab-bench.sh OLD_FOREST_BIN NEW_FOREST_BIN ROUNDS [forest bench flags...]
set -euo pipefail
old=${1:?old forest binary}
new=${2:?new forest binary}
rounds=${3:?rounds}
shift 3
for _ in $(seq "$rounds"); do
  for side in old new; do
    if [ "$side" = old ]; then bin=$old; else bin=$new; fi
    # Table rows are `workload threads engine Mops/s ...` up to the blank line before the
    # ratios. The process's CPU time (user + system, load phases included) is less
    # disturbed by other load on the machine than throughput is.
    out=$(mktemp)
    cpu=$( { TIMEFORMAT='%U %S'; time "$bin" bench "$@" >"$out" 2>/dev/null; } 2>&1 )
    awk -v side="$side" 'NR == 1 { next } NF == 0 { exit } { print side " " $1 " T=" $2 " " $3 ": " $4 }' "$out"
    echo "$cpu" | awk -v side="$side" '{ printf "%s process cpu s: %.2f\n", side, $1 + $2 }'
    rm -f "$out"
  done
done
