#!/usr/bin/env bash
# Per-request costs of an unpipelined GET (redis-benchmark -P 1 -c 50 -t get, issue 15's bar)
# on redis-server and on forest serve with each flag set given, in one run, alternating:
# context switches, migrations and CPU of the server (perf stat -p) and the client's CPU
# (redis-benchmark's own, perf stat), then syscalls per
# request (strace -c -f, a second run: strace slows the server, so its rps is not kept).
# Counts are per request of a fixed request count; rps is wall clock (noise when loaded).
#   scripts/get-p1-costs.sh FOREST_BIN ROUNDS 'FLAGS1' 'FLAGS2' ...   (N=50000; port 17396)
# e.g. scripts/get-p1-costs.sh target/release/forest 3 '--threads 2' '--threads 1'
# A flag set whose first word is an executable file runs that binary instead (an A/B of two
# builds: '/tmp/base/forest' '--busy-poll-us 50'). TEST=set measures SET, P=16 pipelines,
# STRACE=0 skips the syscall pass, REDIS=0 leaves redis-server out.
set -uo pipefail
bin=$1; rounds=$2; shift 2
n=${N:-50000}; port=${PORT:-17396}; out=$(mktemp -d)
test=${TEST:-get}; pipe=${P:-1}; trace=${STRACE:-1}; redis=${REDIS:-1}

start() { # who flags... -> pid in $p, dir in $d
    d=$(mktemp -d)
    if [ "$1" = redis ]; then
        redis-server --port $port --dir "$d" --appendonly yes --appendfsync everysec --save '' --daemonize no >/dev/null 2>&1 & p=$!
    else
        local exe=$bin flags=$2 first=${2%% *}
        if [ -n "$first" ] && [ -f "$first" ] && [ -x "$first" ]; then
            exe=$first; flags=${2#"$first"}
        fi
        # shellcheck disable=SC2086
        $exe serve --port $port --dir "$d" --durability periodic:1000 $flags >/dev/null 2>&1 & p=$!
    fi
    for _ in $(seq 200); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-benchmark -p $port -q -n 100000 -r 100000 -c 50 -P 16 -d 8 -t set >/dev/null 2>&1
}
stop() { kill $p; wait $p 2>/dev/null; rm -rf "$d"; }

one() { # label who flags
    start "$2" "$3"
    perf stat -x, -e context-switches,cpu-migrations,task-clock -p $p -o $out/pstat 2>/dev/null & s=$!
    sleep 0.3
    rps=$(perf stat -x, -e task-clock -o $out/cstat redis-benchmark -p $port -n $n -r 100000 -c 50 -P $pipe -d 8 -t $test --csv 2>/dev/null | tail -1 | cut -d, -f2 | tr -d '"')
    client=$(awk -F, -v n=$n '$3 ~ /task-clock/ { printf "%.2f", $1/n*1000 }' $out/cstat)
    kill -INT $s; wait $s
    : >$out/strace
    if [ "$trace" = 1 ]; then
        timeout 300 strace -c -f -p $p -o $out/strace 2>/dev/null & s=$!
        sleep 1
        redis-benchmark -p $port -n $n -r 100000 -c 50 -P $pipe -d 8 -t $test -q >/dev/null 2>&1
        sleep 0.3; kill -INT $s; wait $s
    fi
    stop
    sys=$(awk -v n=$n 'NR>2 && $4 ~ /^[0-9]+$/ && $NF != "total" { printf "%s %.3f ", $NF, $4/n; t += $4 } END { printf "| total %.3f", t/n }' $out/strace)
    awk -F, -v n=$n -v w="$1" -v r="$rps" -v c="$client" -v sys="$sys" '$3 ~ /context|migr|task/ { v[$3]=$1 } END { printf "%-22s rps %9s  cs/req %.3f  migr/req %.4f  cpu us/req %.2f  client cpu us/req %s  syscalls/req: %s\n", w, r, v["context-switches"]/n, v["cpu-migrations"]/n, v["task-clock"]/n*1000, c, sys }' $out/pstat
}

for r in $(seq "$rounds"); do
    echo "== round $r ($(uptime | sed 's/.*load/load/')) $test -P $pipe"
    [ "$redis" = 1 ] && one redis redis ""
    for flags in "$@"; do
        one "forest $flags" forest "$flags"
    done
done
rm -rf "$out"
