#!/usr/bin/env bash
# forest serve against redis-server, both driven by redis-benchmark (issue 6 "Measured").
#
# Pairings, each with -P 16 and -P 1, and forest in each I/O model
# (--io per-core|threads|tokio):
#   forest --durability periodic:1000  vs  redis appendonly yes, appendfsync everysec
#   forest --durability group          vs  redis appendonly yes, appendfsync always
# then forest's range command (FOREST.RANGE with LIMIT 1, 10, 100, YCSB-E-like) on the
# keys the SET runs wrote. Prints one table with forest/redis ratios and, beside each
# requests/s, the server's CPU time per request in microseconds (user + system, from
# /proc/PID/stat around that test's run alone: less disturbed by other load on the
# machine than requests/s).
#
# Needs redis-server and redis-benchmark on PATH (Debian: redis-server, redis-tools); installs
# nothing. Builds forest in release mode. Uses its own ports and temporary directories and
# stops what it started.
#
# Environment: N (requests per run, default 2000000), CLIENTS (50), KEYSPACE (1000000),
# VALUE_BYTES (8), PIPELINES ("16 1"), IO_MODELS ("per-core threads tokio"), ENGINE (store
# default), FOREST_PORT (16379), REDIS_PORT (16380), RANGE_LIMITS ("1 10 100"; empty: no range
# runs), RANGE_N (N / 10),
# N_P1 (requests of the -P 1 runs, default N: with an fsync per write, `group` vs
# `always` at -P 1 runs at a few thousand requests/s, so N=2000000 takes long there).
# Example of a quick try: N=20000 scripts/bench-server.sh
set -euo pipefail

N=${N:-2000000}
CLIENTS=${CLIENTS:-50}
KEYSPACE=${KEYSPACE:-1000000}
VALUE_BYTES=${VALUE_BYTES:-8}
PIPELINES=${PIPELINES:-"16 1"}
IO_MODELS=${IO_MODELS:-"per-core threads tokio"}
ENGINE=${ENGINE:-}
FOREST_PORT=${FOREST_PORT:-16379}
REDIS_PORT=${REDIS_PORT:-16380}
RANGE_LIMITS=${RANGE_LIMITS-"1 10 100"}
RANGE_N=${RANGE_N:-$((N / 10))}
N_P1=${N_P1:-$N}

for tool in redis-server redis-benchmark redis-cli; do
    command -v "$tool" >/dev/null || { echo "bench-server: $tool not on PATH (Debian: apt-get install redis-server redis-tools)" >&2; exit 1; }
done

root=$(cd "$(dirname "$0")/.." && pwd)
echo "bench-server: building forest (release)" >&2
cargo build --release --quiet -p forest --manifest-path "$root/Cargo.toml"
forest="${CARGO_TARGET_DIR:-$root/target}/release/forest"

work=$(mktemp -d -t forest-bench-server.XXXXXX)
results="$work/results"
: >"$results"
pids=()
cleanup() {
    for pid in "${pids[@]+"${pids[@]}"}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

wait_ping() { # port
    for _ in $(seq 1 600); do
        if redis-cli -p "$1" PING 2>/dev/null | grep -q PONG; then return 0; fi
        sleep 0.1
    done
    echo "bench-server: nothing answers on port $1" >&2
    return 1
}

stop_server() { # port pid
    redis-cli -p "$1" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
    for _ in $(seq 1 300); do
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    kill "$2" 2>/dev/null || true
    wait "$2" 2>/dev/null || true
    local kept=() pid
    for pid in "${pids[@]}"; do [ "$pid" = "$2" ] || kept+=("$pid"); done
    pids=("${kept[@]}")
}

start_forest() { # durability io -> sets server_pid
    local dir="$work/forest-$1-$2"
    rm -rf "$dir"
    local engine_flag=()
    [ -n "$ENGINE" ] && engine_flag=(--engine "$ENGINE")
    "$forest" serve --port "$FOREST_PORT" --dir "$dir" --durability "$1" --io "$2" \
        "${engine_flag[@]}" >"$work/forest.log" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    wait_ping "$FOREST_PORT"
}

start_redis() { # appendfsync -> sets server_pid
    local dir="$work/redis-$1"
    rm -rf "$dir" && mkdir -p "$dir"
    redis-server --port "$REDIS_PORT" --dir "$dir" --appendonly yes --appendfsync "$1" \
        --save '' --daemonize no >"$work/redis.log" 2>&1 &
    server_pid=$!
    pids+=("$server_pid")
    wait_ping "$REDIS_PORT"
}

clock_ticks=$(getconf CLK_TCK)

cpu_ticks() { # pid -> user + system clock ticks of the process so far
    # Fields after the command name (which ends with ')'): utime and stime are 12th and 13th.
    sed 's/^.*) //' "/proc/$1/stat" | awk '{ print $12 + $13 }'
}

# Appends "scenario|test|who|rps|cpu microseconds per request" for one redis-benchmark run
# (its --csv output on stdin) that took `ticks` of the server's CPU for `n` requests.
record() { # scenario who n ticks [test name]
    awk -F'","' -v s="$1" -v w="$2" -v n="$3" -v t="$4" -v hz="$clock_ticks" -v name="${5:-}" \
        'NR > 1 { gsub(/"/, "", $1); if (name != "") $1 = name
                  printf "%s|%s|%s|%s|%.2f\n", s, $1, w, $2, t / hz / n * 1e6 }' >>"$results"
}

# Runs SET, then GET, each measured alone; uses server_pid.
run_setget() { # port scenario who pipeline
    local n=$N test before out
    [ "$4" = 1 ] && n=$N_P1
    for test in set get; do
        before=$(cpu_ticks "$server_pid")
        out=$(redis-benchmark -p "$1" -P "$4" -c "$CLIENTS" -r "$KEYSPACE" -n "$n" \
            -d "$VALUE_BYTES" -t "$test" --csv 2>/dev/null)
        record "$2" "$3" "$n" $(($(cpu_ticks "$server_pid") - before)) <<<"$out"
    done
}

run_ranges() { # port who
    local before out
    for limit in $RANGE_LIMITS; do
        before=$(cpu_ticks "$server_pid")
        out=$(redis-benchmark -p "$1" -P 16 -c "$CLIENTS" -r "$KEYSPACE" -n "$RANGE_N" --csv \
            FOREST.RANGE '[key:__rand_int__' + LIMIT "$limit" 2>/dev/null)
        record "ranges, -P 16" "$2" "$RANGE_N" $(($(cpu_ticks "$server_pid") - before)) \
            "FOREST.RANGE LIMIT $limit" <<<"$out"
    done
}

for pairing in "periodic:1000 everysec" "group always"; do
    set -- $pairing
    durability=$1 fsync=$2
    for p in $PIPELINES; do
        scenario="forest $durability vs redis $fsync, -P $p"
        echo "bench-server: $scenario" >&2
        start_redis "$fsync"
        run_setget "$REDIS_PORT" "$scenario" redis "$p"
        stop_server "$REDIS_PORT" "$server_pid"
        for io in $IO_MODELS; do
            start_forest "$durability" "$io"
            run_setget "$FOREST_PORT" "$scenario" "forest-$io" "$p"
            if [ "$durability" = "periodic:1000" ] && [ "$p" = 16 ]; then
                echo "bench-server: ranges, forest --io $io" >&2
                run_ranges "$FOREST_PORT" "forest-$io"
            fi
            stop_server "$FOREST_PORT" "$server_pid"
        done
    done
done

echo
echo "redis-benchmark -c $CLIENTS -r $KEYSPACE -n $N -d $VALUE_BYTES (-P 1: -n $N_P1; ranges: -n $RANGE_N); requests/s, server CPU us/request"
awk -F'|' -v models="$IO_MODELS" '
    BEGIN { m = split(models, io, " ") }
    {
        key = $1 "|" $2; if (!(key in seen)) { seen[key] = 1; order[++n] = key }
        rps[key "|" $3] = $4; cpu[key "|" $3] = $5
    }
    END {
        printf "%-46s %-22s %12s %6s", "scenario", "test", "redis", "us/req"
        for (i = 1; i <= m; i++) printf " %15s %6s %6s", "forest-" io[i], "ratio", "us/req"
        printf "\n"
        for (k = 1; k <= n; k++) {
            split(order[k], part, "|")
            r = rps[order[k] "|redis"]
            printf "%-46s %-22s %12s %6s", part[1], part[2], (r == "" ? "-" : r),
                (r == "" ? "-" : cpu[order[k] "|redis"])
            for (i = 1; i <= m; i++) {
                f = rps[order[k] "|forest-" io[i]]
                ratio = (r != "" && r > 0 && f != "") ? sprintf("%.2f", f / r) : "-"
                printf " %15s %6s %6s", (f == "" ? "-" : f), ratio,
                    (f == "" ? "-" : cpu[order[k] "|forest-" io[i]])
            }
            printf "\n"
        }
    }' "$results"
