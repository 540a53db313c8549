#!/usr/bin/env bash
# load-zset-and-keys.sh BIN DIR: DIR gets sorted set z of 1 M members (member m:%012d, score i, as zrange.sh)
# and 1 M string keys key:%012d with 8-byte values (as range-vs-redis.sh), loaded natively
# (THOUSANDS=100: 100 000 of each), and a list `mylist` of LIST (600) elements `xxx` (redis-benchmark's
# LRANGE_100 / LRANGE_600 list: 3-byte elements). Then DIR serves scripts/cg-serve-request.sh.
set -eu
bin=$1; dir=$2; port=16480
rm -rf "$dir"; mkdir -p "$dir"
"$bin" serve --dir "$dir" --port $port --durability periodic:1000 --io threads >/dev/null 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
python3 - ${THOUSANDS:-1000} ${LIST:-600} <<'PY' | redis-cli -p $port --pipe | tail -1
import sys
out = sys.stdout.buffer
def cmd(args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
for c in range(int(sys.argv[1]) if len(sys.argv) > 1 else 1000):
    args = [b"ZADD", b"z"]
    for i in range(c * 1000, c * 1000 + 1000):
        args += [str(i).encode(), b"m:%012d" % i]
    cmd(args)
    args = [b"MSET"]
    for i in range(c * 1000, c * 1000 + 1000):
        args += [b"key:%012d" % i, b"abcdefgh"]
    cmd(args)
if len(sys.argv) > 2 and int(sys.argv[2]) > 0:
    cmd([b"RPUSH", b"mylist"] + [b"xxx"] * int(sys.argv[2]))
PY
echo "zcard $(redis-cli -p $port zcard z) dbsize $(redis-cli -p $port dbsize) llen $(redis-cli -p $port llen mylist)"
redis-cli -p $port shutdown >/dev/null 2>&1 || true
wait $pid || true
du -sh "$dir"
