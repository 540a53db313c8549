#!/usr/bin/env bash
# Syscalls per request of a server under redis-benchmark -c 50 (strace -c -f on the server
# during N requests of TEST at -P P, after 100,000 SETs at -P 16). Issue 15, sessions 15, 19.
#   scripts/serve-syscalls.sh redis|FOREST_BIN [forest serve flags...]
#   (N=20000 P=1 TEST=get by default; port 17394)
set -uo pipefail
who=$1; shift; n=${N:-20000}; p=${P:-1}; test=${TEST:-get}; d=$(mktemp -d); trace=$(mktemp)
if [ "$who" = redis ]; then redis-server --port 17394 --dir "$d" --appendonly yes --appendfsync everysec --save '' --daemonize no >/dev/null 2>&1 & pid=$!
else $who serve --port 17394 --dir "$d" --durability periodic:1000 "$@" >/dev/null 2>&1 & pid=$!; fi
for _ in $(seq 100); do redis-cli -p 17394 ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p 17394 -q -n 100000 -r 1000000 -c 50 -P 16 -d 8 -t set >/dev/null 2>&1
timeout 120 strace -c -f -p $pid -o "$trace" & s=$!
sleep 1
redis-benchmark -p 17394 -n $n -r 1000000 -c 50 -P $p -d 8 -t $test -q 2>/dev/null | tr '\r' '\n' | grep -a "per second" | tail -1
sleep 0.5; kill -INT $s; wait $s
kill $pid; wait $pid 2>/dev/null; rm -rf "$d"
echo "== $who $*: $test -P $p, calls per request (n=$n)"; awk -v n=$n 'NR>2 && $4 ~ /^[0-9]+$/ { printf "%-16s %6.3f\n", $NF, $4/n }' "$trace" | sort -k2 -nr | head -8
rm -f "$trace"
