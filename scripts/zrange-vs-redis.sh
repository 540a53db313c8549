#!/usr/bin/env bash
# zrange-vs-redis.sh FOREST_BIN [N] [P]: ZRANGEBYSCORE and ZRANGEBYLEX of 100 members at a random point
# of a 1 M-member sorted set, forest serve vs redis-server (issue 19 "Measured"). Ports:
# FOREST_PORT, REDIS_PORT (default: free ones). Fails unless both answer the same 100 members.
set -euo pipefail
bin=$1; n=${2:-20000}; p=${3:-1}
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# Free ports, not fixed ones: two helpers may run this at once.
fport=${FOREST_PORT:-$(free_port)}; rport=${REDIS_PORT:-$(free_port)}
while [ "$rport" = "$fport" ]; do rport=$(free_port); done
fdir=$(mktemp -d); rdir=$(mktemp -d)
"$bin" serve --dir "$fdir" --port $fport --durability periodic:1000 >/dev/null 2>&1 &
fpid=$!
redis-server --port $rport --dir "$rdir" --appendonly yes --appendfsync everysec --save '' --daemonize no >/dev/null 2>&1 &
rpid=$!
trap 'kill $fpid $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$fdir" "$rdir"' EXIT
for port in $fport $rport; do
  for _ in $(seq 100); do redis-cli -p $port ping >/dev/null 2>&1 && break; sleep 0.1; done
done
# 1 000 ZADDs of 1 000 members each: member m:%012d with score i (all scores distinct, so
# score order is lex order and ZRANGEBYLEX is well defined).
python3 - >"$fdir/load.resp" <<'PY'
import sys
out = sys.stdout.buffer
for c in range(1000):
    args = [b"ZADD", b"z"]
    for i in range(c * 1000, c * 1000 + 1000):
        args += [str(i).encode(), b"m:%012d" % i]
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
PY
for port in $fport $rport; do
  redis-cli -p $port --pipe <"$fdir/load.resp" | tail -1
  echo "port $port zcard $(redis-cli -p $port zcard z)"
done
# Both servers must answer the same 100 members before their speeds mean anything.
for q in "ZRANGEBYSCORE z 000000123456 +inf LIMIT 0 100" "ZRANGEBYLEX z [m:000000123456 + LIMIT 0 100"; do
  # shellcheck disable=SC2086
  f=$(redis-cli -p $fport $q | md5sum); r=$(redis-cli -p $rport $q | md5sum)
  # shellcheck disable=SC2086
  got=$(redis-cli -p $fport $q | wc -l)
  [ "$f" = "$r" ] && [ "$got" = 100 ] || { echo "zrange-vs-redis: $q: forest and redis differ or not 100 members" >&2; exit 1; }
done
for port in $fport $rport; do
  name=forest; [ $port = $rport ] && name=redis
  echo "== $name"
  redis-benchmark -p $port -n $n -P $p -r 999900 -q ZRANGEBYSCORE z __rand_int__ +inf LIMIT 0 100 2>&1 | tr '\r' '\n' | grep -v '^$' | tail -1
  redis-benchmark -p $port -n $n -P $p -r 999900 -q ZRANGEBYLEX z '[m:__rand_int__' + LIMIT 0 100 2>&1 | tr '\r' '\n' | grep -v '^$' | tail -1
done
echo "== memory: forest used_memory $(redis-cli -p $fport info memory | grep -E '^used_memory:' | tr -d '\r') ; redis $(redis-cli -p $rport info memory | grep -E '^used_memory:' | tr -d '\r')"
