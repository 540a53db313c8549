#!/usr/bin/env bash
# Instructions per unpipelined GET (redis-benchmark -P 1 -c 50 -t get -n N, 100,000 keys
# loaded first) in the server, under callgrind with instrumentation on only during the GETs:
# redis-server and forest serve (default I/O model, flags given). Issue 15, session 17.
#   scripts/cg-get-p1-vs-redis.sh FOREST_BIN OUTDIR [forest serve flags...]   (N=20000)
set -u
bin=$1; out=$2; shift 2; n=${N:-20000}; port=${PORT:-17398}; mkdir -p "$out"
for who in redis forest; do
    d=$(mktemp -d)
    if [ $who = redis ]; then
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out/cg.$who redis-server --port $port --dir "$d" --appendonly yes --appendfsync everysec --save '' >/dev/null 2>$out/$who.err & p=$!
    else
        valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$out/cg.$who "$bin" serve --port $port --dir "$d" --durability periodic:1000 "$@" >/dev/null 2>$out/$who.err & p=$!
    fi
    for _ in $(seq 600); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.5; done
    redis-benchmark -p $port -q -n 100000 -r 100000 -c 50 -P 16 -d 8 -t set >/dev/null 2>&1
    redis-benchmark -p $port -q -n 2000 -r 100000 -c 50 -P 1 -d 8 -t get >/dev/null 2>&1
    callgrind_control -i on $p >/dev/null
    redis-benchmark -p $port -q -n $n -r 100000 -c 50 -P 1 -d 8 -t get >/dev/null 2>&1
    callgrind_control -i off $p >/dev/null
    redis-cli -p $port shutdown nosave >/dev/null 2>&1 || kill $p
    wait $p; rm -rf "$d"
    ir=$(callgrind_annotate $out/cg.$who* 2>/dev/null | grep -m1 'PROGRAM TOTALS' | awk '{gsub(",","",$1); print $1}')
    echo "$who: Ir $ir for $n GETs = $((ir / n)) per GET"
done
