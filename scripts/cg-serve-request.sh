#!/usr/bin/env bash
# cg-serve-request.sh BIN DATADIR OUT N P -- COMMAND...: forest serve BIN on a copy of DATADIR (loaded
# beforehand, natively) under callgrind uninstrumented; once it answers, instrumentation on
# (callgrind_control -i on), redis-benchmark -n N -P P -c 1 -r ${R:-999900} COMMAND, instrumentation off,
# then shutdown. OUT holds only the benchmark's requests: Ir / N is instructions per request.
set -eu
bin=$1; data=$2; out=$3; n=$4; p=$5; shift 6
port=${PORT:-16481}
dir=$(mktemp -d); cp -r "$data"/. "$dir"/
valgrind --tool=callgrind ${CG_OPTS:-} --instr-atstart=no --callgrind-out-file=$out "$bin" serve --dir "$dir" --port $port --durability periodic:1000 --io threads >/dev/null 2>$out.err &
pid=$!
for _ in $(seq 1200); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.5; done
redis-benchmark -p $port -n 200 -c 1 -P $p -r ${R:-999900} -q "$@" >/dev/null 2>&1   # warm up
callgrind_control -i on $pid >/dev/null
redis-benchmark -p $port -n $n -c 1 -P $p -r ${R:-999900} -q "$@" 2>&1 | tr '\r' '\n' | grep -v '^$' | tail -1
callgrind_control -i off $pid >/dev/null
redis-cli -p $port shutdown nosave >/dev/null 2>&1 || kill $pid
wait $pid || true
rm -rf "$dir"
echo "$out: Ir $(callgrind_annotate $out 2>/dev/null | grep -m1 'PROGRAM TOTALS' | awk '{print $1}') for $n requests"
