#!/usr/bin/env bash
# Instructions per pipelined request in the server process (every thread), under callgrind
# with instrumentation on only while the measured requests run: redis-server (appendfsync
# everysec) and each forest binary (periodic:1000, default I/O model). Issue 15, session 19.
# Per server: KEYS keys loaded first (-P 16 SETs over a keyspace of KEYS, enough of them that
# nearly every key exists; LOAD=ex loads them with SET EX, so that a later `setex` overwrites
# a string that has a deadline, as in a run of SET EX alone, rather than moving one from its raw
# key), then for each test in TESTS one window of N requests
# (redis-benchmark -P $P -c $CLIENTS -r $KEYS -d $VALUE_BYTES), each its own callgrind dump:
#   set   SET key:__rand_int__ <value>
#   get   GET key:__rand_int__
#   setex SET key:__rand_int__ <value> EX 100000
#
#   scripts/cg-pipelined-vs-redis.sh OUTDIR redis|FOREST_BIN... [-- forest serve flags]
#   (N=100000 P=16 CLIENTS=50 KEYS=100000 VALUE_BYTES=8 TESTS="set get setex" LOAD=plain
#   CACHE_SIM=0; CACHE_SIM=1 adds callgrind's cache simulation and prints data-read misses per
#   request at L1 and the last level: the simulator ignores prefetch instructions, so it
#   counts misses, not how many of them overlap)
# The servers' background tasks (forest's active expiry, redis's serverCron) tick by wall time,
# which callgrind stretches ~50x: their share is larger here than natively.
# Prints "who test Ir per request"; OUTDIR keeps the dumps for callgrind_annotate.
set -u
out=$1; shift
whos=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do whos+=("$1"); shift; done
[ "${1:-}" = -- ] && shift
n=${N:-100000}; p=${P:-16}; c=${CLIENTS:-50}; keys=${KEYS:-100000}; d=${VALUE_BYTES:-8}
tests=${TESTS:-"set get setex"}; port=${PORT:-17411}
cg=(valgrind --tool=callgrind --instr-atstart=no)
[ "${CACHE_SIM:-0}" = 1 ] && cg+=(--cache-sim=yes)
mkdir -p "$out"
value=$(head -c "$d" /dev/zero | tr '\0' v)
i=0
for who in "${whos[@]}"; do
    i=$((i + 1))
    tag=$i.$(basename "$who")
    dir=$(mktemp -d)
    if [ "$who" = redis ]; then
        "${cg[@]}" --callgrind-out-file="$out/cg.$tag" \
            redis-server --port "$port" --dir "$dir" --appendonly yes --appendfsync everysec \
            --save '' >/dev/null 2>"$out/$tag.err" &
    else
        "${cg[@]}" --callgrind-out-file="$out/cg.$tag" \
            "$who" serve --port "$port" --dir "$dir" --durability periodic:1000 "$@" \
            >/dev/null 2>"$out/$tag.err" &
    fi
    pid=$!
    for _ in $(seq 1200); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.5; done
    load=(SET key:__rand_int__ "$value")
    [ "${LOAD:-plain}" = ex ] && load+=(EX 100000)
    redis-benchmark -p "$port" -q -n $((keys * 8)) -r "$keys" -c "$c" -P 16 "${load[@]}" >/dev/null 2>&1
    for t in $tests; do
        case $t in
            set) cmd=(SET key:__rand_int__ "$value") ;;
            get) cmd=(GET key:__rand_int__) ;;
            setex) cmd=(SET key:__rand_int__ "$value" EX 100000) ;;
            *) echo "unknown test $t" >&2; exit 1 ;;
        esac
        # Warm up: a short run, uncounted.
        redis-benchmark -p "$port" -q -n 2000 -r "$keys" -c "$c" -P "$p" "${cmd[@]}" >/dev/null 2>&1
        callgrind_control -z "$pid" >/dev/null 2>&1
        callgrind_control -i on "$pid" >/dev/null 2>&1
        redis-benchmark -p "$port" -q -n "$n" -r "$keys" -c "$c" -P "$p" "${cmd[@]}" >/dev/null 2>&1
        callgrind_control -i off "$pid" >/dev/null 2>&1
        callgrind_control --dump="$t" "$pid" >/dev/null 2>&1
    done
    redis-cli -p "$port" shutdown nosave >/dev/null 2>&1 || kill "$pid"
    wait "$pid" 2>/dev/null
    rm -rf "$dir"
    for t in $tests; do
        f=$(grep -l "^desc: Trigger: .*$t\$" "$out"/cg."$tag".* 2>/dev/null | head -1)
        # The totals without their "(100.0%)" columns.
        totals=$(callgrind_annotate "$f" 2>/dev/null | grep -m1 'PROGRAM TOTALS' | tr -d , |
            sed 's/([^)]*)//g')
        ir=$(echo "$totals" | awk '{print $1}')
        printf '%-32s %-6s Ir %12s for %d requests = %6d per request (%s)\n' \
            "$who" "$t" "$ir" "$n" $((ir / n)) "$f"
        if [ "${CACHE_SIM:-0}" = 1 ]; then
            # callgrind's columns: Ir Dr Dw I1mr D1mr D1mw ILmr DLmr DLmw.
            echo "$totals" | awk -v n="$n" -v who="$who" -v t="$t" \
                '{printf "%-32s %-6s per request: D1 read misses %.2f, LL read misses %.2f\n", who, t, $5 / n, $8 / n}'
        fi
    done
done
