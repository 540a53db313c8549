#!/usr/bin/env bash
# What SET EX costs `forest serve` against plain SET (issue 15's bar: SET EX at least 0.9x
# plain SET): redis-benchmark's throughput and the server's CPU seconds (user + system, from
# /proc; steadier than throughput on a shared machine) for N SETs of 10-byte values over 1M
# random keys, -P 16, 50 clients, periodic:1000, masstree. Linux only.
#
#   scripts/setex-cost.sh FOREST_BIN [N]
set -euo pipefail
bin=${1:?forest bin}; n=${2:-500000}; port=17031; hz=$(getconf CLK_TCK)
for mode in plain ex; do
  dir=$(mktemp -d)
  "$bin" serve --dir "$dir" --port "$port" --durability periodic:1000 --engine masstree >/dev/null 2>&1 &
  pid=$!
  for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  if [ $mode = plain ]; then args=(SET key:__rand_int__ vvvvvvvvvv); else args=(SET key:__rand_int__ vvvvvvvvvv EX 100000); fi
  out=$(redis-benchmark -p "$port" -q -n "$n" -r 1000000 -c 50 -P 16 "${args[@]}" 2>&1 | tr '\r' '\n' | grep -E "requests per second" | tail -1)
  ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
  echo "$mode: $out; server cpu s: $(awk -v t=$ticks -v hz=$hz 'BEGIN{printf "%.2f", t/hz}')"
  kill $pid; wait $pid 2>/dev/null || true; rm -rf "$dir"
done
