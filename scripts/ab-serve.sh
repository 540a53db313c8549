#!/usr/bin/env bash
# A/B of two `forest` binaries serving redis-benchmark (SET, GET, MSET of 10 keys; -P 16,
# 50 clients, 1,000,000 requests over 1,000,000 random keys, periodic:1000, masstree), run
# alternately ROUNDS times so machine noise hits both alike. Prints each run's line; compare
# medians. Needs redis-benchmark and redis-cli (Debian: redis-tools).
#
#   scripts/ab-serve.sh OLD_FOREST_BIN NEW_FOREST_BIN [ROUNDS]
set -euo pipefail
old=${1:?old forest binary}
new=${2:?new forest binary}
rounds=${3:-3}
run() { # bin label port
  local bin=$1 label=$2 port=$3 dir
  dir=$(mktemp -d)
  "$bin" serve --dir "$dir" --port "$port" --durability periodic:1000 --engine masstree \
    >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-benchmark -p "$port" -q -n 1000000 -r 1000000 -c 50 -P 16 -t set,get,mset 2>/dev/null |
    tr '\r' '\n' | grep -E "requests per second" | sed "s/^/$label /"
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  rm -rf "$dir"
}
for _ in $(seq "$rounds"); do
  run "$old" old 17001
  run "$new" new 17002
done
