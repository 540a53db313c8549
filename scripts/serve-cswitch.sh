#!/usr/bin/env bash
# Context switches, migrations and CPU (perf stat -p) of a server per redis-benchmark GET
# -P 1 -c 50 request, after 200,000 SETs at -P 16. Issue 15, session 15.
#   scripts/serve-cswitch.sh redis|FOREST_BIN [forest serve flags...]   (N=50000; port 17395)
set -uo pipefail
who=$1; shift; n=${N:-50000}; d=$(mktemp -d)
if [ "$who" = redis ]; then redis-server --port 17395 --dir "$d" --appendonly yes --appendfsync everysec --save '' --daemonize no >/dev/null 2>&1 & p=$!
else $who serve --port 17395 --dir "$d" --durability periodic:1000 "$@" >/dev/null 2>&1 & p=$!; fi
for _ in $(seq 100); do redis-cli -p 17395 ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p 17395 -q -n 200000 -r 1000000 -c 50 -P 16 -d 8 -t set >/dev/null 2>&1
perf stat -x, -e context-switches,cpu-migrations,task-clock -p $p -o /tmp/h-get/pstat.$$.txt & s=$!
sleep 0.3
rps=$(redis-benchmark -p 17395 -n $n -r 1000000 -c 50 -P 1 -d 8 -t get --csv 2>/dev/null | tail -1 | cut -d, -f2)
kill -INT $s; wait $s
kill $p; wait $p 2>/dev/null; rm -rf "$d"
awk -F, -v n=$n -v w="$who $*" -v r="$rps" '$3 ~ /context|migr|task/ { v[$3]=$1 } END { printf "%-40s rps %s  cs/req %.3f  migrations/req %.4f  task-clock us/req %.2f\n", w, r, v["context-switches"]/n, v["cpu-migrations"]/n, v["task-clock"]/n*1000 }' /tmp/h-get/pstat.$$.txt
