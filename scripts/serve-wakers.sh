#!/usr/bin/env bash
# Who wakes whom during unpipelined GETs (redis-benchmark -P 1 -c 50 -t get, issue 15):
# records sched:sched_wakeup system-wide while N requests run against one server (forest
# serve with the flags given, or redis-server with `redis`), and counts wake-ups per 1,000
# requests by waker thread -> woken thread (the waker is the thread running when the
# wake-up is issued; "swapper" is an idle CPU's interrupt, e.g. a timer).
#   scripts/serve-wakers.sh redis|FOREST_BIN [flags...]   (N=50000; port 17395)
set -uo pipefail
who=$1; shift
n=${N:-50000}; port=${PORT:-17395}; out=$(mktemp -d); d=$(mktemp -d)
if [ "$who" = redis ]; then
    redis-server --port $port --dir "$d" --appendonly yes --appendfsync everysec --save '' --daemonize no >/dev/null 2>&1 & p=$!
else
    "$who" serve --port $port --dir "$d" --durability periodic:1000 "$@" >/dev/null 2>&1 & p=$!
fi
for _ in $(seq 200); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p $port -q -n 100000 -r 100000 -c 50 -P 16 -d 8 -t set >/dev/null 2>&1
perf record -q -e sched:sched_wakeup -a -o $out/perf.data -- \
    redis-benchmark -p $port -n $n -r 100000 -c 50 -P 1 -d 8 -t get -q >/dev/null 2>&1
tids=$(ls /proc/$p/task | tr '\n' ' ')
kill $p; wait $p 2>/dev/null; rm -rf "$d"
# Lines: "COMM TID EVENT: comm=WOKEN pid=TID prio=.. target_cpu=.."; only wake-ups of the
# server's threads, or by them.
perf script -i $out/perf.data -F comm,tid,event,trace 2>/dev/null | awk -v n=$n -v tids="$tids" '
    BEGIN { split(tids, t, " "); for (i in t) ours[t[i]] = 1 }
    { waker = $1; wtid = $2; woken = ""; wokentid = ""
      for (i = 3; i <= NF; i++) { if ($i ~ /^comm=/) woken = substr($i, 6); if ($i ~ /^pid=/) wokentid = substr($i, 5) }
      if ((wtid in ours) || (wokentid in ours)) c[waker " -> " woken]++ }
    END { for (k in c) printf "%8.2f  %s\n", c[k]*1000/n, k }' | sort -rn | head -20
rm -rf "$out"
