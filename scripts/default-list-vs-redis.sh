#!/usr/bin/env bash
# redis-benchmark's whole default test list (-t omitted) against forest serve and against
# redis-server, one after the other on the same machine (issue 15 "Measured"): prints each
# test's requests/s on both and forest's ratio, and fails if forest answered a test with
# an error. forest runs with --durability periodic:1000, redis with appendonly yes,
# appendfsync everysec (the pairing of scripts/bench-server.sh).
#
#   scripts/default-list-vs-redis.sh FOREST_BIN [N] [PIPELINE] [TESTS]
#
# TESTS (optional) is redis-benchmark's -t list, e.g. lpush,rpush,lpop,rpop,lrange_100, for a
# shorter run of some tests (a loaded machine's A/B); omitted, the whole default list.
#
# Needs redis-server, redis-benchmark and redis-cli on PATH (Debian: redis-server,
# redis-tools). Uses ports 16391/16392 and temporary directories; stops what it started.
set -euo pipefail
bin=${1:?forest binary}
n=${2:-100000}
pipeline=${3:-1}
tests=${4:-}
fport=16391
rport=16392
fdir=$(mktemp -d)
rdir=$(mktemp -d)
"$bin" serve --dir "$fdir" --port "$fport" --durability periodic:1000 >/dev/null 2>&1 &
fpid=$!
redis-server --port "$rport" --dir "$rdir" --appendonly yes --appendfsync everysec \
  --save '' --daemonize no >/dev/null 2>&1 &
rpid=$!
trap 'kill $fpid $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$fdir" "$rdir"' EXIT
for port in $fport $rport; do
  for _ in $(seq 100); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
done
run() {
  # CSV lines: "TEST","rps",...
  redis-benchmark -p "$1" -n "$n" -P "$pipeline" ${tests:+-t "$tests"} --csv 2>&1 | tr -d '\r'
}
forest=$(run $fport)
redis=$(run $rport)
if echo "$forest" | grep -qiE '^(ERR|Error)|error:'; then
  echo "forest answered a test with an error:" >&2
  echo "$forest" | grep -iE '^(ERR|Error)|error:' >&2
  exit 1
fi
printf 'redis-benchmark -n %s -P %s, default tests; requests/s\n' "$n" "$pipeline"
printf '%-40s %14s %14s %7s\n' test redis forest ratio
echo "$redis" | awk -F',' 'NR > 1 { gsub(/"/, ""); print $1 "\t" $2 }' >"$rdir/r.tsv"
echo "$forest" | awk -F',' 'NR > 1 { gsub(/"/, ""); print $1 "\t" $2 }' >"$fdir/f.tsv"
awk -F'\t' 'NR == FNR { r[$1] = $2; next } ($1 in r) {
  printf "%-40s %14.2f %14.2f %7.2f\n", $1, r[$1], $2, $2 / r[$1] }' "$rdir/r.tsv" "$fdir/f.tsv"
