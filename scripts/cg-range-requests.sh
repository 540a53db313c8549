#!/usr/bin/env bash
# cg-range-requests.sh DATADIR ROUNDS LABEL=BIN...: callgrind instructions per request of the
# range reads (issues 14 and 19) for each forest binary, alternating binaries within each round:
#   fr     FOREST.RANGE [key:__rand_int__ + LIMIT 50
#   frk    FOREST.RANGE [key:__rand_int__ + LIMIT 50 KEYSONLY
#   lr100  LRANGE mylist 0 99
#   lr600  LRANGE mylist 0 599
#   zbs    ZRANGEBYSCORE z __rand_int__ +inf LIMIT 0 100
#   zbl    ZRANGEBYLEX z [m:__rand_int__ + LIMIT 0 100
# DATADIR from scripts/load-zset-and-keys.sh (THOUSANDS=100: random starts below 99 900, R).
# Each measurement is scripts/cg-serve-request.sh (N requests, -P 1, -c 1, instrumentation on
# only for them) on a free port; prints `LABEL TEST Ir-per-request` lines, then the median per
# LABEL and TEST over the rounds. Environment: N (2000), TESTS (all six), OUT (a temp dir).
set -eu
data=$1; rounds=$2; shift 2
n=${N:-2000}; tests=${TESTS:-fr frk lr100 lr600 zbs zbl}
out=${OUT:-$(mktemp -d)}
here=$(cd "$(dirname "$0")" && pwd)
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
results=$out/results.txt; : >"$results"
for round in $(seq "$rounds"); do
  for pair in "$@"; do
    label=${pair%%=*}; bin=${pair#*=}
    for t in $tests; do
      case $t in
        fr) cmd=(FOREST.RANGE '[key:__rand_int__' + LIMIT 50) ;;
        frk) cmd=(FOREST.RANGE '[key:__rand_int__' + LIMIT 50 KEYSONLY) ;;
        lr100) cmd=(LRANGE mylist 0 99) ;;
        lr600) cmd=(LRANGE mylist 0 599) ;;
        zbs) cmd=(ZRANGEBYSCORE z __rand_int__ +inf LIMIT 0 100) ;;
        zbl) cmd=(ZRANGEBYLEX z '[m:__rand_int__' + LIMIT 0 100) ;;
        *) echo "unknown test $t" >&2; exit 2 ;;
      esac
      f=$out/cg-$label-$t-$round.out
      PORT=$(free_port) R=${R:-99900} "$here/cg-serve-request.sh" "$bin" "$data" "$f" "$n" 1 -- "${cmd[@]}" >/dev/null 2>&1
      ir=$(callgrind_annotate "$f" 2>/dev/null | grep -m1 'PROGRAM TOTALS' | awk '{gsub(",", "", $1); print $1}')
      echo "$label $t $((ir / n))" | tee -a "$results"
    done
  done
done
echo "medians of $rounds rounds, instructions per request ($n requests each):"
sort -k1,1 -k2,2 -k3,3n "$results" | awk '
  { key = $1 " " $2; v[key, ++c[key]] = $3; if (!(key in seen)) { seen[key] = 1; order[++k] = key } }
  END { for (i = 1; i <= k; i++) { key = order[i]; m = c[key]; med = v[key, int((m + 1) / 2)];
        line = ""; for (j = 1; j <= m; j++) line = line " " v[key, j]; print key ": median " med " of" line } }'
