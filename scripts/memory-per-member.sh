#!/usr/bin/env bash
# memory-per-member.sh: bytes per member of each collection type (and of plain strings) in
# forest serve beside redis-server, from INFO memory on both (issue 19 "Measured").
#
# For each type, a fresh pair of servers (free ports, a temporary directory each) gets N
# members through `redis-cli --pipe`:
#   string  N keys (MSET, 1 000 pairs a command)      hash  one hash of N fields (HSET x 1 000)
#   list    one list of N elements (RPUSH x 1 000)     set   one set of N members (SADD x 1 000)
#   zset    one sorted set of N members (ZADD x 1 000) stream one stream of N entries (XADD *,
#           one field-value pair each, one entry a command: XADD takes one)
# Members (keys, fields, elements, set members, stream fields) are 16 bytes (`m:` and 14
# digits), values 8 bytes (`v` and 7 digits: not integers, so Redis does not store them as
# shared or pointer-embedded integers), scores the member's number; members go in a shuffled
# order (seeded), as redis-benchmark's random keys do. Each type's count is checked on both.
#
# Figures per member, each the difference after the load minus before it (on the fresh
# servers), divided by N; measured twice: right after the load, and reopened (both servers
# restarted on their files: forest recovers from its log, Redis replays its AOF), which drops
# what the load left behind (forest --durability periodic keeps its log buffers of a burst,
# up to two of 16 MiB per shard; freed memory the allocator has not returned):
# - used_memory (INFO memory):
#   redis: every byte its allocator handed out (jemalloc's usable sizes: the dict tables,
#     objects, sds strings, listpacks, skiplists, client and AOF buffers), not fragmentation;
#   forest: the index engine's own account of its structures (`Index::stats().memory_bytes`;
#     masstree, the default: node sizes, plus each key-suffix/value block's bytes and an 8-byte
#     header). It does not count the allocator's rounding to size classes, the write-ahead log's
#     buffers, memory the epoch reclaimer has not freed yet, nor the server's own tables
#     (clients, deadlines of expiring keys, the collections' meta cache).
# - RSS (VmRSS of /proc/PID/status, on both): resident pages of the process, whatever holds
#   them: allocator slack, freed memory not returned to the kernel, buffers. For forest the
#   figure that counts everything; for Redis the equivalent of used_memory_rss.
# Redis runs with its 7.0 default encodings (a 1 M-member hash, set or sorted set exceeds
# every listpack/intset limit; lists and streams stay listpacks). Redis stores a stream's field
# names once per listpack node when entries repeat them: distinct fields, as here, are its
# costliest case. Memory does not depend on load, so a busy machine gives the same figures.
#
# Environment: FOREST_BIN (default target/release/forest; not built here: `cargo build
# --release -p forest`), MEMBERS (1000000), TYPES ("string hash list set zset stream"),
# ENGINE (forest's engine; default: the store's), DURABILITY (periodic:1000, the pairing of
# bench-server.sh with redis appendonly yes, appendfsync everysec), SETTLE (seconds to wait
# after a load before reading, default 3: Redis finishes its incremental rehash, forest its
# periodic flush). Needs redis-server and redis-cli on PATH, and python3. Stops what it
# started on any exit.
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
FOREST_BIN=${FOREST_BIN:-$root/target/release/forest}
MEMBERS=${MEMBERS:-1000000}
TYPES=${TYPES:-"string hash list set zset stream"}
ENGINE=${ENGINE:-}
DURABILITY=${DURABILITY:-periodic:1000}
SETTLE=${SETTLE:-3}

for tool in redis-server redis-cli python3; do
    command -v "$tool" >/dev/null || { echo "memory-per-member: $tool not on PATH" >&2; exit 1; }
done
[ -x "$FOREST_BIN" ] || { echo "memory-per-member: no $FOREST_BIN (cargo build --release -p forest)" >&2; exit 1; }

work=$(mktemp -d -t forest-memory.XXXXXX)
pids=()
cleanup() {
    for pid in "${pids[@]+"${pids[@]}"}"; do
        kill "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_ping() { # port pid
    for _ in $(seq 1 600); do
        if redis-cli -p "$1" PING 2>/dev/null | grep -q PONG; then return 0; fi
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    echo "memory-per-member: nothing answers on port $1" >&2
    return 1
}

stop() { # port pid [shutdown words: default SHUTDOWN NOSAVE]
    # shellcheck disable=SC2086
    redis-cli -p "$1" ${3:-SHUTDOWN NOSAVE} >/dev/null 2>&1 || true
    for _ in $(seq 1 300); do
        kill -0 "$2" 2>/dev/null || break
        sleep 0.1
    done
    kill "$2" 2>/dev/null || true
    wait "$2" 2>/dev/null || true
    local kept=() pid
    for pid in "${pids[@]}"; do [ "$pid" = "$2" ] || kept+=("$pid"); done
    pids=("${kept[@]+"${kept[@]}"}")
}

info_field() { # port field
    redis-cli -p "$1" INFO "$3" | tr -d '\r' | awk -F: -v f="$2" '$1 == f { print $2 }'
}

rss_bytes() { # pid
    awk '$1 == "VmRSS:" { print $2 * 1024 }' "/proc/$1/status"
}

# The RESP commands that load N members of one type.
generate() { # type n
    python3 - "$1" "$2" <<'PY'
import random, sys
kind, n = sys.argv[1], int(sys.argv[2])
out = sys.stdout.buffer
order = list(range(n))
random.Random(19).shuffle(order)
def cmd(args):
    out.write(b"*%d\r\n" % len(args))
    for a in args:
        out.write(b"$%d\r\n%s\r\n" % (len(a), a))
member = lambda i: b"m:%014d" % i
value = lambda i: b"v%07d" % (i % 10_000_000)
head = {"string": [b"MSET"], "hash": [b"HSET", b"h"], "list": [b"RPUSH", b"l"],
        "set": [b"SADD", b"s"], "zset": [b"ZADD", b"z"]}
if kind == "stream":
    for i in order:
        cmd([b"XADD", b"x", b"*", member(i), value(i)])
else:
    for start in range(0, n, 1000):
        args = list(head[kind])
        for i in order[start:start + 1000]:
            if kind in ("string", "hash"):
                args += [member(i), value(i)]
            elif kind == "zset":
                args += [str(i).encode(), member(i)]
            else:
                args.append(member(i))
        cmd(args)
PY
}

count_command() { # type -> the command that counts its members
    case $1 in
        string) echo DBSIZE ;;
        hash) echo "HLEN h" ;;
        list) echo "LLEN l" ;;
        set) echo "SCARD s" ;;
        zset) echo "ZCARD z" ;;
        stream) echo "XLEN x" ;;
    esac
}

# Waits until Redis runs no AOF rewrite nor RDB save (a fork child's pages are not the
# parent's, but its buffers are), then SETTLE seconds.
settle_redis() { # port
    for _ in $(seq 1 600); do
        if [ "$(info_field "$1" aof_rewrite_in_progress persistence)" = 0 ] &&
            [ "$(info_field "$1" rdb_bgsave_in_progress persistence)" = 0 ]; then
            break
        fi
        sleep 0.1
    done
}

engine_flag=()
[ -n "$ENGINE" ] && engine_flag=(--engine "$ENGINE")

start_forest() { # kind port -> fpid
    "$FOREST_BIN" serve --port "$2" --dir "$work/forest-$1" --durability "$DURABILITY" \
        "${engine_flag[@]+"${engine_flag[@]}"}" >>"$work/forest-$1.log" 2>&1 &
    fpid=$!
    pids+=("$fpid")
    wait_ping "$2" "$fpid"
}

start_redis() { # kind port -> rpid
    redis-server --port "$2" --dir "$work/redis-$1" --appendonly yes \
        --appendfsync everysec --save '' --daemonize no >>"$work/redis-$1.log" 2>&1 &
    rpid=$!
    pids+=("$rpid")
    wait_ping "$2" "$rpid"
}

check_counts() { # kind
    local port got
    for port in $fport $rport; do
        # shellcheck disable=SC2046
        got=$(redis-cli -p "$port" $(count_command "$1"))
        [ "$got" = "$MEMBERS" ] || { echo "memory-per-member: $1 on port $port counts $got, not $MEMBERS" >&2; exit 1; }
    done
}
echo "memory-per-member: N=$MEMBERS, forest $("$FOREST_BIN" --version | awk '{ print $2 }')" \
    "(engine ${ENGINE:-default}, --durability $DURABILITY) vs $(redis-server --version | awk '{ print $3 }')" \
    "(appendonly yes, everysec)"
results="$work/results"
: >"$results"
for kind in $TYPES; do
    load="$work/load.resp"
    generate "$kind" "$MEMBERS" >"$load"
    fport=$(free_port)
    mkdir -p "$work/forest-$kind" "$work/redis-$kind"
    start_forest "$kind" "$fport"
    rport=$(free_port)
    start_redis "$kind" "$rport"
    sleep "$SETTLE"
    f_used0=$(info_field "$fport" used_memory memory); f_rss0=$(rss_bytes "$fpid")
    r_used0=$(info_field "$rport" used_memory memory); r_rss0=$(rss_bytes "$rpid")
    for port in $fport $rport; do
        reply=$(redis-cli -p "$port" --pipe <"$load" | tail -1)
        case $reply in
            *"errors: 0,"*) ;;
            *) echo "memory-per-member: $kind load on port $port: $reply" >&2; exit 1 ;;
        esac
    done
    settle_redis "$rport"
    sleep "$SETTLE"
    check_counts "$kind"
    f_used1=$(info_field "$fport" used_memory memory); f_rss1=$(rss_bytes "$fpid")
    r_used1=$(info_field "$rport" used_memory memory); r_rss1=$(rss_bytes "$rpid")
    # Reopened: each server restarted on its directory (forest recovers its log, Redis
    # replays its AOF), so neither holds buffers or freed memory of the load.
    stop "$fport" "$fpid"
    stop "$rport" "$rpid" SHUTDOWN
    start_forest "$kind" "$fport"
    start_redis "$kind" "$rport"
    settle_redis "$rport"
    sleep "$SETTLE"
    check_counts "$kind"
    f_used2=$(info_field "$fport" used_memory memory); f_rss2=$(rss_bytes "$fpid")
    r_used2=$(info_field "$rport" used_memory memory); r_rss2=$(rss_bytes "$rpid")
    echo "$kind $f_used0 $f_used1 $r_used0 $r_used1 $f_rss0 $f_rss1 $r_rss0 $r_rss1" \
        "$f_used2 $r_used2 $f_rss2 $r_rss2" >>"$results"
    stop "$fport" "$fpid"
    stop "$rport" "$rpid"
    rm -rf "$load" "$work/forest-$kind" "$work/redis-$kind"
done

echo "Bytes per member (after minus before, over N); f/r = forest / redis."
echo "After the load:                                   | reopened (restarted on its files):"
awk -v n="$MEMBERS" '
    function ratio(a, b) { return b > 0 ? a / b : 0 }
    BEGIN {
        printf "%-6s|%7s %7s %5s|%7s %7s %5s|%7s %7s %5s|%7s %7s %5s\n", "type",
            "f used", "r used", "f/r", "f RSS", "r RSS", "f/r",
            "f used", "r used", "f/r", "f RSS", "r RSS", "f/r"
    }
    {
        fu = ($3 - $2) / n; ru = ($5 - $4) / n; fr = ($7 - $6) / n; rr = ($9 - $8) / n
        fu2 = ($10 - $2) / n; ru2 = ($11 - $4) / n; fr2 = ($12 - $6) / n; rr2 = ($13 - $8) / n
        printf "%-6s|%7.1f %7.1f %5.2f|%7.1f %7.1f %5.2f|%7.1f %7.1f %5.2f|%7.1f %7.1f %5.2f\n",
            $1, fu, ru, ratio(fu, ru), fr, rr, ratio(fr, rr),
            fu2, ru2, ratio(fu2, ru2), fr2, rr2, ratio(fr2, rr2)
    }' "$results"
echo "(raw, bytes: type; forest used before, after; redis used before, after; forest RSS before,"
echo " after; redis RSS before, after; reopened: forest used, redis used, forest RSS, redis RSS)"
cat "$results"
