#!/usr/bin/env bash
# Which server threads wake per unpipelined GET (redis-benchmark -P 1 -c 50 -t get, issue
# 15): each thread's voluntary and involuntary context switches (/proc/PID/task/*/status)
# before and after a fixed number of requests, per 1,000 requests, for redis-server and for
# forest serve with each flag set given (one server at a time, alternating per round).
# A voluntary switch is the thread going to sleep (epoll_wait, a futex, a sleep): each one
# is a later wake-up.
#   scripts/serve-thread-wakeups.sh FOREST_BIN ROUNDS 'FLAGS1' 'FLAGS2' ...  (N=50000; port 17397)
#   TEST=set runs SET instead of GET; P=16 pipelines.
set -uo pipefail
bin=$1; rounds=$2; shift 2
n=${N:-50000}; port=${PORT:-17397}; test=${TEST:-get}; pipe=${P:-1}

start() { # who flags
    d=$(mktemp -d)
    if [ "$1" = redis ]; then
        redis-server --port $port --dir "$d" --appendonly yes --appendfsync everysec --save '' --daemonize no >/dev/null 2>&1 & p=$!
    else
        # shellcheck disable=SC2086
        $bin serve --port $port --dir "$d" --durability periodic:1000 $2 >/dev/null 2>&1 & p=$!
    fi
    for _ in $(seq 200); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-benchmark -p $port -q -n 100000 -r 100000 -c 50 -P 16 -d 8 -t set >/dev/null 2>&1
}
stop() { kill $p; wait $p 2>/dev/null; rm -rf "$d"; }
snap() { # -> "tid name vol invol" lines
    for t in /proc/$p/task/*; do
        awk -v tid="${t##*/}" '/^Name:/ { name=$2 } /^voluntary_ctxt/ { v=$2 } /^nonvoluntary_ctxt/ { nv=$2 } END { print tid, name, v, nv }' "$t/status" 2>/dev/null
    done
}
one() { # label who flags
    start "$2" "$3"
    before=$(snap)
    t0=$(date +%s.%N)
    redis-benchmark -p $port -n $n -r 100000 -c 50 -P $pipe -d 8 -t $test -q >/dev/null 2>&1
    t1=$(date +%s.%N)
    after=$(snap)
    stop
    echo "-- $1 ($(awk -v a=$t0 -v b=$t1 -v n=$n 'BEGIN { printf "%.0f rps", n/(b-a) }'); per 1000 requests: thread voluntary involuntary)"
    join <(echo "$before" | sort) <(echo "$after" | sort) | awk -v n=$n '
        { dv = $6 - $3; dn = $7 - $4; k = $2; v[k] += dv; nv[k] += dn; c[k]++; tv += dv; tn += dn }
        END { for (k in v) if (v[k] + nv[k] > 0) printf "   %-16s x%-2d %8.2f %8.2f\n", k, c[k], v[k]*1000/n, nv[k]*1000/n; printf "   %-16s     %8.2f %8.2f\n", "total", tv*1000/n, tn*1000/n }'
}
for r in $(seq "$rounds"); do
    echo "== round $r ($(uptime | sed 's/.*load/load/')) $test -P $pipe"
    one redis redis ""
    for flags in "$@"; do
        one "forest $flags" forest "$flags"
    done
done
