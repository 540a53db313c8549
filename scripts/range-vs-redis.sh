#!/usr/bin/env bash
# Ordered ranges over the network (issue 14 "Measured"): forest serve's FOREST.RANGE against
# redis-server's ZRANGEBYLEX on a sorted set of the same keys, the way Redis users do ordered
# ranges.
#
#   scripts/range-vs-redis.sh [ROUNDS]
#
# Both servers hold the same KEYS keys `key:000000000000` .. (12 digits, as redis-benchmark's
# __rand_int__ writes them): forest as string keys with VALUE_BYTES-byte values, redis as the
# members of one sorted set `zset`, all scores 0 (redis: appendonly yes, appendfsync everysec;
# forest: --durability periodic:1000, its counterpart). Loaded once, through redis-cli --pipe
# (MSET and ZADD of LOAD_BATCH keys per command). Then ROUNDS rounds, each measuring, with -P 1
# and with -P 16, alternately:
#   redis            ZRANGEBYLEX zset [key:__rand_int__ + LIMIT 0 LIMIT   (members only)
#   forest           FOREST.RANGE [key:__rand_int__ + LIMIT LIMIT         (key-value pairs)
#   forest-keysonly  FOREST.RANGE [key:__rand_int__ + LIMIT LIMIT KEYSONLY (keys only)
# each with redis-benchmark, CLIENTS clients, N requests (N_P1 at -P 1), a random start key per
# request. Prints every measurement as `LABEL: requests/s`, with the ratios to redis of the
# same round and the machine's load, and the server's CPU time per request as `cpu-us LABEL:
# microseconds` (user + system time of the server process over the measurement, from
# /proc/PID/stat, divided by the requests: on a loaded machine a steadier figure than
# requests/s), then per label the median over rounds
# (scripts/ab-median.sh) and the ratios of the medians. The bars: forest >= 1.5x redis at
# -P 16 and >= 1.0x at -P 1.
#
# Needs redis-server, redis-cli and redis-benchmark (Debian: apt-get install redis-server
# redis-tools). Uses FOREST_BIN, default target/release/forest, built (cargo build --release
# -p forest) when missing or when BUILD=1. Starts both servers on free ports in a fresh
# temporary directory and stops them (and removes it) on exit.
#
# Environment: KEYS (1000000), VALUE_BYTES (8), LIMIT (50), CLIENTS (50), N (200000), N_P1
# (100000), PIPELINES ("1 16"), LOAD_BATCH (1000), ENGINE (store default), IO (threads),
# FOREST_BIN, BUILD. FOREST_B_BIN: a second forest binary, served and loaded alike and measured
# in every round right after the first (labels forest-b, forest-b-keysonly): an A/B of two
# builds against the same redis.
set -euo pipefail

rounds=${1:-3}
KEYS=${KEYS:-1000000}
VALUE_BYTES=${VALUE_BYTES:-8}
LIMIT=${LIMIT:-50}
CLIENTS=${CLIENTS:-50}
N=${N:-200000}
N_P1=${N_P1:-100000}
PIPELINES=${PIPELINES:-"1 16"}
LOAD_BATCH=${LOAD_BATCH:-1000}
ENGINE=${ENGINE:-}
IO=${IO:-threads}

for tool in redis-server redis-cli redis-benchmark; do
    command -v "$tool" >/dev/null || {
        echo "range-vs-redis: $tool not on PATH (apt-get install redis-server redis-tools)" >&2
        exit 1
    }
done

root=$(cd "$(dirname "$0")/.." && pwd)
forest=${FOREST_BIN:-${CARGO_TARGET_DIR:-$root/target}/release/forest}
if [ "${BUILD:-0}" = 1 ] || [ ! -x "$forest" ]; then
    echo "range-vs-redis: building forest (release)" >&2
    cargo build --release --quiet -p forest --manifest-path "$root/Cargo.toml"
fi

work=$(mktemp -d -t forest-range-vs-redis.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]+"${pids[@]}"}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ping() { # port
    for _ in $(seq 1 600); do
        if redis-cli -p "$1" PING 2>/dev/null | grep -q PONG; then return 0; fi
        sleep 0.1
    done
    echo "range-vs-redis: nothing answers on port $1" >&2
    return 1
}

# RESP of the load: MSET k v k v ... for forest, ZADD zset 0 k 0 k ... for redis.
resp() { # forest|redis
    awk -v keys="$KEYS" -v batch="$LOAD_BATCH" -v vbytes="$VALUE_BYTES" -v who="$1" 'BEGIN {
        value = ""
        for (i = 0; i < vbytes; i++) value = value sprintf("%c", 97 + i % 26)
        for (start = 0; start < keys; start += batch) {
            n = (keys - start < batch) ? keys - start : batch
            if (who == "forest") {
                printf "*%d\r\n$4\r\nMSET\r\n", 1 + 2 * n
            } else {
                printf "*%d\r\n$4\r\nZADD\r\n$4\r\nzset\r\n", 2 + 2 * n
            }
            for (i = start; i < start + n; i++) {
                key = sprintf("key:%012d", i)
                if (who == "forest") {
                    printf "$%d\r\n%s\r\n$%d\r\n%s\r\n", length(key), key, vbytes, value
                } else {
                    printf "$1\r\n0\r\n$%d\r\n%s\r\n", length(key), key
                }
            }
        }
    }'
}

forest_port=$(free_port)
forest_b_port=$(free_port)
redis_port=$(free_port)
engine_flag=()
[ -n "$ENGINE" ] && engine_flag=(--engine "$ENGINE")
mkdir -p "$work/redis"
redis-server --port "$redis_port" --dir "$work/redis" --appendonly yes \
    --appendfsync everysec --save '' --daemonize no >"$work/redis.log" 2>&1 &
pids+=($!)
"$forest" serve --port "$forest_port" --dir "$work/forest" --durability periodic:1000 \
    --io "$IO" "${engine_flag[@]}" >"$work/forest.log" 2>&1 &
pids+=($!)
if [ -n "${FOREST_B_BIN:-}" ]; then
    "$FOREST_B_BIN" serve --port "$forest_b_port" --dir "$work/forest-b" \
        --durability periodic:1000 --io "$IO" "${engine_flag[@]}" >"$work/forest-b.log" 2>&1 &
    pids+=($!)
    wait_ping "$forest_b_port"
fi
wait_ping "$redis_port"
wait_ping "$forest_port"

echo "range-vs-redis: loading $KEYS keys into both ($VALUE_BYTES-byte values in forest)" >&2
resp forest | redis-cli -p "$forest_port" --pipe >"$work/load-forest.log"
resp redis | redis-cli -p "$redis_port" --pipe >"$work/load-redis.log"
if [ -n "${FOREST_B_BIN:-}" ]; then
    resp forest | redis-cli -p "$forest_b_port" --pipe >"$work/load-forest-b.log"
    [ "$(redis-cli -p "$forest_b_port" DBSIZE)" = "$KEYS" ] || {
        echo "range-vs-redis: forest-b did not load $KEYS keys" >&2
        exit 1
    }
fi
forest_keys=$(redis-cli -p "$forest_port" DBSIZE)
redis_keys=$(redis-cli -p "$redis_port" ZCARD zset)
if [ "$forest_keys" != "$KEYS" ] || [ "$redis_keys" != "$KEYS" ]; then
    echo "range-vs-redis: loaded $forest_keys keys into forest, $redis_keys into redis, not $KEYS" >&2
    cat "$work/load-forest.log" "$work/load-redis.log" >&2
    exit 1
fi
# The reply of one request of each, as a check that both return LIMIT items from the key.
first=$(redis-cli -p "$forest_port" FOREST.RANGE '[key:000000000100' + LIMIT "$LIMIT" KEYSONLY | head -1)
zfirst=$(redis-cli -p "$redis_port" ZRANGEBYLEX zset '[key:000000000100' + LIMIT 0 "$LIMIT" | head -1)
[ "$first" = key:000000000100 ] && [ "$zfirst" = key:000000000100 ] || {
    echo "range-vs-redis: unexpected first keys: forest $first, redis $zfirst" >&2
    exit 1
}
echo "range-vs-redis: $(head -1 "$work/forest.log"); redis $(redis-server --version | awk '{ print $3 }') on port $redis_port" >&2

hz=$(getconf CLK_TCK)
cpu_ticks() { # pid -> user + system time in clock ticks (all threads)
    awk '{ sub(/.*\) /, ""); print $12 + $13 }' "/proc/$1/stat"
}
redis_pid=${pids[0]}
forest_pid=${pids[1]}
forest_b_pid=${pids[2]:-}

# measure PID PIPELINE PORT command... -> "requests/s cpu-us-per-request"
measure() {
    local pid=$1 pipeline=$2 port=$3 t0 t1 r n=$N
    shift 3
    [ "$pipeline" = 1 ] && n=$N_P1
    t0=$(cpu_ticks "$pid")
    r=$(rps "$port" "$pipeline" "$@")
    t1=$(cpu_ticks "$pid")
    awk -v r="$r" -v t="$((t1 - t0))" -v hz="$hz" -v n="$n" \
        'BEGIN { printf "%s %.2f\n", r, t / hz / n * 1e6 }'
}

rps() { # port pipeline command... -> requests per second
    local port=$1 pipeline=$2 n=$N
    shift 2
    [ "$pipeline" = 1 ] && n=$N_P1
    redis-benchmark -p "$port" -c "$CLIENTS" -n "$n" -P "$pipeline" -r "$KEYS" --csv "$@" \
        2>/dev/null | awk -F'","' 'NR == 2 { gsub(/"/, "", $2); print $2 }'
}

out="$work/results"
: >"$out"
for round in $(seq "$rounds"); do
    echo "round $round of $rounds, load average $(uptime | sed "s/.*load average: //")" | tee -a "$out"
    for p in $PIPELINES; do
        read -r r rc < <(measure "$redis_pid" "$p" "$redis_port" ZRANGEBYLEX zset '[key:__rand_int__' + LIMIT 0 "$LIMIT")
        read -r f fc < <(measure "$forest_pid" "$p" "$forest_port" FOREST.RANGE '[key:__rand_int__' + LIMIT "$LIMIT")
        read -r k kc < <(measure "$forest_pid" "$p" "$forest_port" FOREST.RANGE '[key:__rand_int__' + LIMIT "$LIMIT" KEYSONLY)
        if [ -n "${FOREST_B_BIN:-}" ]; then
            read -r fb fbc < <(measure "$forest_b_pid" "$p" "$forest_b_port" FOREST.RANGE '[key:__rand_int__' + LIMIT "$LIMIT")
            read -r kb kbc < <(measure "$forest_b_pid" "$p" "$forest_b_port" FOREST.RANGE '[key:__rand_int__' + LIMIT "$LIMIT" KEYSONLY)
            {
                echo "forest-b P=$p: $fb"
                echo "forest-b-keysonly P=$p: $kb"
                echo "cpu-us forest-b P=$p: $fbc"
                echo "cpu-us forest-b-keysonly P=$p: $kbc"
                awk -v r="$r" -v f="$fb" -v k="$kb" -v p="$p" 'BEGIN {
                    printf "ratio forest-b/redis P=%s: %.3f\n", p, f / r
                    printf "ratio forest-b-keysonly/redis P=%s: %.3f\n", p, k / r
                }'
            } | tee -a "$out"
        fi
        {
            echo "redis P=$p: $r"
            echo "forest P=$p: $f"
            echo "forest-keysonly P=$p: $k"
            echo "cpu-us redis P=$p: $rc"
            echo "cpu-us forest P=$p: $fc"
            echo "cpu-us forest-keysonly P=$p: $kc"
            awk -v r="$r" -v f="$f" -v k="$k" -v p="$p" 'BEGIN {
                printf "ratio forest/redis P=%s: %.3f\n", p, f / r
                printf "ratio forest-keysonly/redis P=%s: %.3f\n", p, k / r
            }'
        } | tee -a "$out"
    done
done

echo
echo "medians of $rounds rounds (redis-benchmark -c $CLIENTS -r $KEYS, -n $N at -P 16, -n $N_P1 at -P 1; LIMIT $LIMIT; requests/s):"
"$root/scripts/ab-median.sh" <"$out"
for p in $PIPELINES; do
    "$root/scripts/ab-median.sh" <"$out" | awk -v p="$p" '
        $0 ~ "^redis P=" p ":" { r = $4 }
        $0 ~ "^forest P=" p ":" { f = $4 }
        $0 ~ "^forest-keysonly P=" p ":" { k = $4 }
        END { if (r > 0) printf "ratio of medians P=%s: forest/redis %.3f, forest-keysonly/redis %.3f\n", p, f / r, k / r }'
done
echo "load average at the end $(uptime | sed 's/.*load average: //')"
