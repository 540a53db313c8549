#!/usr/bin/env bash
# cg-redis-range-requests.sh [OUTDIR]: redis-server under callgrind (instrumentation off), loaded as load-zset-and-keys.sh
# (THOUSANDS thousand zset members and string keys, list mylist of 600 xxx), then per test
# instrumentation on for redis-benchmark -n N -P 1 -c 1 -r 99900, off.
# The redis side of scripts/cg-range-requests.sh (same data, commands and request counts).
# Prints Ir per dump: one dump per test (zbl, zbs, lr100, lr600), each N requests.
set -u
outdir=${1:-$(mktemp -d)}
n=${N:-2000}; port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
dir=$(mktemp -d)
valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=$outdir/cg-redis.out redis-server --port $port --dir $dir --save '' --appendonly yes --appendfsync everysec >/dev/null 2>$outdir/cg-redis.err &
pid=$!
for _ in $(seq 600); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.5; done
python3 - ${THOUSANDS:-100} 600 <<'PY' | redis-cli -p $port --pipe | tail -1
import sys
out = sys.stdout.buffer
def cmd(args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
for c in range(int(sys.argv[1])):
    args = [b"ZADD", b"z"]
    for i in range(c * 1000, c * 1000 + 1000):
        args += [str(i).encode(), b"m:%012d" % i]
    cmd(args)
    args = [b"MSET"]
    for i in range(c * 1000, c * 1000 + 1000):
        args += [b"key:%012d" % i, b"abcdefgh"]
    cmd(args)
cmd([b"RPUSH", b"mylist"] + [b"xxx"] * int(sys.argv[2]))
PY
echo "redis zcard $(redis-cli -p $port zcard z) dbsize $(redis-cli -p $port dbsize) llen $(redis-cli -p $port llen mylist)"
bench() { name=$1; shift
  redis-benchmark -p $port -n 200 -c 1 -P 1 -r 99900 -q "$@" >/dev/null 2>&1
  callgrind_control -z $pid >/dev/null; callgrind_control -i on $pid >/dev/null
  redis-benchmark -p $port -n $n -c 1 -P 1 -r 99900 -q "$@" 2>&1 | tr '\r' '\n' | grep -v '^$' | tail -1
  callgrind_control -i off $pid >/dev/null
  callgrind_control -d redis-$name $pid >/dev/null
}
bench zbl ZRANGEBYLEX z '[m:__rand_int__' + LIMIT 0 100
bench zbs ZRANGEBYSCORE z __rand_int__ +inf LIMIT 0 100
bench lr100 LRANGE mylist 0 99
bench lr600 LRANGE mylist 0 599
redis-cli -p $port shutdown nosave >/dev/null 2>&1 || kill $pid
wait $pid
rm -rf $dir
for f in $outdir/cg-redis.out.*; do echo "$f: $(callgrind_annotate $f 2>/dev/null | grep -m1 'PROGRAM TOTALS' | awk '{print $1}') Ir for $n requests ($(grep -m1 '^desc: Trigger' $f))"; done
