#!/usr/bin/env bash
# Where a server's CPU goes under pipelined requests (issue 15, session 19): perf record
# (cpu-clock, call graphs) of the server process only, while redis-benchmark sends N requests
# of TEST at -P 16 -c 50, after 500,000 SETs at -P 16 over 1,000,000 random keys (as
# scripts/bench-server.sh's -P 16 pairing). Prints the shares by binary and the top symbols.
#   scripts/perf-serve-pipelined.sh redis|FOREST_BIN TEST [OUTDIR]   (N=500000; port 17421)
set -u
who=$1; test=$2; out=${3:-$(mktemp -d)}; n=${N:-500000}; port=${PORT:-17421}; d=$(mktemp -d)
mkdir -p "$out"
if [ "$who" = redis ]; then
    redis-server --port $port --dir "$d" --appendonly yes --appendfsync everysec --save '' --daemonize no >/dev/null 2>&1 & p=$!
else
    "$who" serve --port $port --dir "$d" --durability periodic:1000 >/dev/null 2>&1 & p=$!
fi
for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
redis-benchmark -p $port -q -n 500000 -r 1000000 -c 50 -P 16 -d 8 -t set >/dev/null 2>&1
tag=$(basename "$who").$test
perf record -q -e cpu-clock -g -p $p -o "$out/perf.$tag.data" 2>/dev/null & s=$!
sleep 0.3
redis-benchmark -p $port -q -n "$n" -r 1000000 -c 50 -P 16 -d 8 -t "$test" 2>&1 | tr '\r' '\n' | grep -a "per second" | tail -1
kill -INT $s; wait $s
kill $p; wait $p 2>/dev/null; rm -rf "$d"
echo "== $who $test: samples by binary"
perf report -i "$out/perf.$tag.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep '%' | grep -v '^#' | head -6
echo "== $who $test: top symbols"
perf report -i "$out/perf.$tag.data" --no-children --sort symbol --stdio -g none 2>/dev/null | grep '%' | grep -v '^#' | head -${TOP:-16} | sed 's/ *-  *- *$//'
