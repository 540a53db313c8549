#!/usr/bin/env bash
# What `forest serve` spends on a fixed load, robust to other load on the machine: the
# server's CPU time (user + system, from /proc) and its memory (peak and final RSS, the part in
# transparent huge pages) after redis-benchmark's SET then GET, as scripts/ab-serve.sh sends
# them (-P 16, 50 clients, 1,000,000 requests over 1,000,000 random keys, periodic:1000,
# masstree). Prints three lines per binary and round, binaries alternating, ready for
# scripts/ab-median.sh. Linux only.
#
#   scripts/serve-cost.sh ROUNDS FOREST_BIN...
set -euo pipefail
rounds=${1:?rounds}
shift
port=17021
hz=$(getconf CLK_TCK)
for _ in $(seq "$rounds"); do
  for bin in "$@"; do
    dir=$(mktemp -d)
    "$bin" serve --dir "$dir" --port "$port" --durability periodic:1000 --engine masstree \
      >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-benchmark -p "$port" -q -n 1000000 -r 1000000 -c 50 -P 16 -t set,get >/dev/null 2>&1
    # Fields 14 and 15 of /proc/PID/stat: user and system time in clock ticks.
    ticks=$(awk '{ print $14 + $15 }' "/proc/$pid/stat")
    hwm=$(awk '/^VmHWM/ { print $2 }' "/proc/$pid/status")
    rss=$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")
    thp=$(awk '/^AnonHugePages/ { print $2 }' "/proc/$pid/smaps_rollup")
    keys=$(redis-cli -p "$port" dbsize)
    awk -v b="$bin" -v t="$ticks" -v hz="$hz" -v h="$hwm" -v r="$rss" -v p="$thp" -v k="$keys" \
      'BEGIN { printf "%s cpu s: %.2f\n%s peak MB: %.1f\n%s rss MB: %.1f (thp %.1f, keys %d)\n",
        b, t / hz, b, h / 1024, b, r / 1024, p / 1024, k }'
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    rm -rf "$dir"
  done
done
