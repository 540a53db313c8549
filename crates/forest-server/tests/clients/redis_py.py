"""redis-py driving `forest serve` as applications do (issue 15 "Real client libraries").

Usage: python3 redis_py.py HOST PORT [--enable NAME,...] [--list]

Every check compares a reply, as redis-py returns it, with what Redis returns for the same
calls. The groups in TESTS run always; those in PENDING need features of other branches
(transactions, expiry, pub/sub, scripting) and run only when named with --enable (see
client_libraries.rs). Prints one line per group and exits 1 if any check failed.
"""

import sys
import threading
import time

import warnings

import redis

# setex is deprecated in redis-py, yet applications call it.
warnings.simplefilter("ignore", DeprecationWarning)

FAILURES = []


def check(name, got, want):
    if got != want:
        FAILURES.append(f"{name}: got {got!r}, want {want!r}")


def raises(name, fn, text):
    """fn() must raise a ResponseError whose message contains text."""
    try:
        got = fn()
    except redis.ResponseError as e:
        if text not in str(e):
            FAILURES.append(f"{name}: error {str(e)!r} lacks {text!r}")
        return
    FAILURES.append(f"{name}: returned {got!r}, want an error containing {text!r}")


# ---- groups that run now -------------------------------------------------------------


def strings(r):
    check("set", r.set("s:a", "1"), True)
    check("get", r.get("s:a"), b"1")
    check("set nx", r.set("s:a", "2", nx=True), None)
    check("set xx get", r.set("s:a", "3", xx=True, get=True), b"1")
    check("mset", r.mset({"s:b": "2", "s:c": "3"}), True)
    check("mget", r.mget("s:a", "s:b", "s:c", "s:none"), [b"3", b"2", b"3", None])
    check("incr", r.incr("s:n"), 1)
    check("incrby", r.incrby("s:n", 41), 42)
    check("decr", r.decr("s:n"), 41)
    check("append", r.append("s:a", "xyz"), 4)
    check("strlen", r.strlen("s:a"), 4)
    check("setnx", r.setnx("s:a", "no"), False)
    check("getset", r.getset("s:a", "new"), b"3xyz")
    check("exists", r.exists("s:a", "s:b", "s:none"), 2)
    check("delete", r.delete("s:b", "s:none"), 1)
    raises("incr not int", lambda: r.incr("s:a"), "value is not an integer")


def new_strings(r):
    r.set("n:k", "Hello World")
    check("getrange", r.getrange("n:k", 0, 4), b"Hello")
    check("getrange neg", r.getrange("n:k", -5, -1), b"World")
    check("substr", r.substr("n:k", 6), b"World")
    check("setrange", r.setrange("n:k", 6, "Redis"), 11)
    check("setrange get", r.get("n:k"), b"Hello Redis")
    check("setrange pad", r.setrange("n:pad", 2, "x"), 3)
    check("setrange pad get", r.get("n:pad"), b"\x00\x00x")
    raises("setrange neg", lambda: r.setrange("n:k", -1, "x"), "offset is out of range")
    raises(
        "setrange huge",
        lambda: r.setrange("n:k", 1 << 40, "x"),
        "string exceeds maximum allowed size",
    )
    check("getdel", r.getdel("n:k"), b"Hello Redis")
    check("getdel gone", r.getdel("n:k"), None)
    r.set("n:f", "10.50")
    check("incrbyfloat", r.incrbyfloat("n:f", 0.1), 10.6)
    check("incrbyfloat neg", r.incrbyfloat("n:f", -5), 5.6)
    check("incrbyfloat text", r.get("n:f"), b"5.6")
    r.set("n:e", "5.0e3")
    check("incrbyfloat exp", r.incrbyfloat("n:e", 2.0e2), 5200.0)
    check("incrbyfloat new", r.incrbyfloat("n:new", 3), 3.0)
    raises("incrbyfloat inf", lambda: r.incrbyfloat("n:f", float("inf")), "NaN or Infinity")
    r.set("n:bad", "abc")
    raises("incrbyfloat bad", lambda: r.incrbyfloat("n:bad", 1), "not a valid float")
    check("setbit", r.setbit("n:b", 7, 1), 0)
    check("setbit again", r.setbit("n:b", 7, 0), 1)
    check("getbit", r.getbit("n:b", 7), 0)
    r.set("n:fb", "foobar")
    check("bitcount", r.bitcount("n:fb"), 26)
    check("bitcount range", r.bitcount("n:fb", 1, 1), 6)
    check("bitcount bit", r.bitcount("n:fb", 5, 30, "BIT"), 17)
    r.set("n:p", b"\xff\xf0\x00")
    check("bitpos 0", r.bitpos("n:p", 0), 12)
    r.set("n:p", b"\x00\xff\xf0")
    check("bitpos 1", r.bitpos("n:p", 1, 0), 8)
    check("bitpos range", r.bitpos("n:p", 1, 2, -1, "BYTE"), 16)
    check("bitpos bit", r.bitpos("n:p", 1, 7, 15, "BIT"), 8)
    r.set("n:x", b"\xff\x0f")
    r.set("n:y", b"\x0f")
    check("bitop and", r.bitop("AND", "n:d", "n:x", "n:y"), 2)
    check("bitop and get", r.get("n:d"), b"\x0f\x00")
    check("bitop not", r.bitop("NOT", "n:d", "n:x"), 2)
    check("bitop not get", r.get("n:d"), b"\x00\xf0")
    r.mset({"n:l1": "ohmytext", "n:l2": "mynewtext"})
    check("lcs", r.lcs("n:l1", "n:l2"), b"mytext")
    check("lcs len", r.lcs("n:l1", "n:l2", len=True), 6)
    idx = r.lcs("n:l1", "n:l2", idx=True, minmatchlen=4, withmatchlen=True)
    if isinstance(idx, dict):  # RESP3: a map; RESP2: a flat list
        idx = [x for kv in idx.items() for x in kv]
    check("lcs idx", idx, [b"matches", [[[4, 7], [5, 8], 4]], b"len", 6])


def keyspace(r):
    r.set("k:s", "v")
    r.rpush("k:l", "a", "b")
    check("type string", r.type("k:s"), b"string")
    check("type list", r.type("k:l"), b"list")
    check("type none", r.type("k:none"), b"none")
    check("rename", r.rename("k:s", "k:s2"), True)
    check("renamed", (r.get("k:s"), r.get("k:s2")), (None, b"v"))
    raises("rename missing", lambda: r.rename("k:none", "k:x"), "no such key")
    check("rename list", r.rename("k:l", "k:l2"), True)
    check("renamed list", r.lrange("k:l2", 0, -1), [b"a", b"b"])
    check("renamenx", r.renamenx("k:s2", "k:l2"), False)
    check("renamenx ok", r.renamenx("k:s2", "k:s3"), True)
    check("copy", r.copy("k:l2", "k:l3"), True)
    check("copy exists", r.copy("k:l2", "k:l3"), False)
    check("copy replace", r.copy("k:s3", "k:l3", replace=True), True)
    check("copied", r.get("k:l3"), b"v")
    check("copy list", r.lrange("k:l2", 0, -1), [b"a", b"b"])
    raises("copy db", lambda: r.copy("k:l2", "k:x", destination_db=1), "DB index is out of range")
    check("touch", r.touch("k:l2", "k:s3", "k:none"), 2)
    check("randomkey", r.exists(r.randomkey()), 1)
    check("object encoding int", (r.set("k:i", 12345), r.object("encoding", "k:i")), (True, b"int"))
    check("object encoding str", r.object("encoding", "k:s3"), b"embstr")
    check("object encoding list", r.object("encoding", "k:l2"), b"listpack")
    check("function flush", r.function_flush(), True)
    check("flushall", r.flushall(), True)
    check("dbsize", r.dbsize(), 0)
    check("randomkey empty", r.randomkey(), None)


def scan(r):
    r.mset({f"scan:{i:03}": i for i in range(250)})
    r.sadd("scan:set", "m")
    r.hset("scan:hash", "f", "v")
    got = sorted(r.scan_iter(match="scan:*", count=17))
    want = sorted([f"scan:{i:03}".encode() for i in range(250)] + [b"scan:set", b"scan:hash"])
    check("scan_iter", got, want)
    check("scan_iter type", list(r.scan_iter(match="scan:*", _type="set")), [b"scan:set"])
    check("keys", len(r.keys("scan:*")), 252)


def pipeline(r):
    p = r.pipeline(transaction=False)
    p.set("p:a", 1).incr("p:a").get("p:a").rpush("p:l", "x", "y").lrange("p:l", 0, -1)
    p.hset("p:h", mapping={"f": "v"}).hgetall("p:h").getrange("p:a", 0, 0)
    check("pipeline", p.execute(), [True, 2, b"2", 2, [b"x", b"y"], 1, {b"f": b"v"}, b"2"])
    p = r.pipeline(transaction=False)
    for i in range(500):
        p.set(f"p:k{i}", i)
    check("pipeline 500", all(p.execute()), True)
    check("pipeline mget", r.mget([f"p:k{i}" for i in range(500)])[499], b"499")
    p = r.pipeline(transaction=False)
    p.set("p:s", "x").lpush("p:s", "y").get("p:s")
    res = p.execute(raise_on_error=False)
    check("pipeline error", (res[0], type(res[1]).__name__, res[2]), (True, "ResponseError", b"x"))


def collections(r):
    check("hset", r.hset("c:h", mapping={"a": "1", "b": "2"}), 2)
    check("hget", r.hget("c:h", "a"), b"1")
    check("hgetall", r.hgetall("c:h"), {b"a": b"1", b"b": b"2"})
    check("hmget", r.hmget("c:h", ["a", "z"]), [b"1", None])
    check("hincrby", r.hincrby("c:h", "a", 5), 6)
    check("hexists", r.hexists("c:h", "b"), True)
    check("hlen", r.hlen("c:h"), 2)
    check("hdel", r.hdel("c:h", "b", "z"), 1)
    check("rpush", r.rpush("c:l", "a", "b", "c"), 3)
    check("lpush", r.lpush("c:l", "z"), 4)
    check("lrange", r.lrange("c:l", 0, -1), [b"z", b"a", b"b", b"c"])
    check("lindex", r.lindex("c:l", -1), b"c")
    check("lpop", r.lpop("c:l"), b"z")
    check("rpop count", r.rpop("c:l", 2), [b"c", b"b"])
    check("llen", r.llen("c:l"), 1)
    check("sadd", r.sadd("c:s", "x", "y", "x"), 2)
    check("smembers", r.smembers("c:s"), {b"x", b"y"})
    check("sismember", r.sismember("c:s", "x"), True)
    check("scard", r.scard("c:s"), 2)
    check("srem", r.srem("c:s", "x"), 1)
    check("spop", r.spop("c:s"), b"y")
    check("zadd", r.zadd("c:z", {"one": 1, "two": 2, "three": 3}), 3)
    check("zrange", r.zrange("c:z", 0, -1), [b"one", b"two", b"three"])
    # RESP3 pairs come as lists, RESP2 ones as tuples (redis-py's own difference).
    pairs = r.zrange("c:z", 0, 0, withscores=True)
    check("zrange scores", [tuple(p) for p in pairs], [(b"one", 1.0)])
    check("zscore", r.zscore("c:z", "two"), 2.0)
    check("zcard", r.zcard("c:z"), 3)
    popped = r.zpopmin("c:z")
    if popped and not isinstance(popped[0], (list, tuple)):
        popped = [popped]
    check("zpopmin", [tuple(p) for p in popped], [(b"one", 1.0)])
    check("zrem", r.zrem("c:z", "two"), 1)
    check("xadd", r.xadd("c:x", {"f": "v"}, id="1-1"), b"1-1")
    check("xlen", r.xlen("c:x"), 1)
    check("xrange", r.xrange("c:x"), [(b"1-1", {b"f": b"v"})])
    raises("wrongtype", lambda: r.get("c:h"), "WRONGTYPE")
    check("object encoding hash", r.object("encoding", "c:h"), b"listpack")
    check("object encoding zset", r.object("encoding", "c:z"), b"listpack")


def more_collections(r):
    """Issue 19's commands as applications call them: a session hash, a queue list, tag
    sets, a leaderboard."""
    check("hsetnx", r.hsetnx("m:h", "user", "ann"), True)
    check("hsetnx again", r.hsetnx("m:h", "user", "bob"), False)
    check("hincrbyfloat", r.hincrbyfloat("m:h", "balance", "10.5"), 10.5)
    check("hkeys", r.hkeys("m:h"), [b"balance", b"user"])
    check("hvals", r.hvals("m:h"), [b"10.5", b"ann"])
    check("hstrlen", r.hstrlen("m:h", "user"), 3)
    check("hscan_iter", dict(r.hscan_iter("m:h", count=1)), {b"user": b"ann", b"balance": b"10.5"})
    check("hrandfield", r.hrandfield("m:h") in (b"user", b"balance"), True)
    check("rpush", r.rpush("m:l", "a", "b", "a", "c"), 4)
    check("lrem", r.lrem("m:l", 0, "a"), 2)
    check("linsert", r.linsert("m:l", "before", "c", "x"), 3)
    check("lset", r.lset("m:l", 0, "B"), True)
    check("lpos", r.lpos("m:l", "c"), 2)
    check("ltrim", r.ltrim("m:l", 1, -1), True)
    check("lrange", r.lrange("m:l", 0, -1), [b"x", b"c"])
    check("rpushx", r.rpushx("m:none", "v"), 0)
    r.sadd("m:s1", "a", "b", "c")
    r.sadd("m:s2", "b", "c", "d")
    check("sinter", r.sinter("m:s1", "m:s2"), {b"b", b"c"})
    check("sunion", r.sunion("m:s1", "m:s2"), {b"a", b"b", b"c", b"d"})
    check("sdiff", r.sdiff("m:s1", "m:s2"), {b"a"})
    check("sintercard", r.sintercard(2, ["m:s1", "m:s2"]), 2)
    check("smismember", r.smismember("m:s1", ["a", "d"]), [1, 0])
    check("sscan_iter", set(r.sscan_iter("m:s1", count=1)), {b"a", b"b", b"c"})
    check("srandmember", len(r.srandmember("m:s1", 2)), 2)
    check("zadd nx", r.zadd("m:z", {"ann": 10, "bob": 20, "cy": 30}, nx=True), 3)
    check("zadd gt ch", r.zadd("m:z", {"ann": 5, "bob": 25}, gt=True, ch=True), 1)
    check("zincrby", r.zincrby("m:z", 15, "ann"), 25.0)
    check("zrank", r.zrank("m:z", "cy"), 2)
    check("zrevrank", r.zrevrank("m:z", "cy"), 0)
    check("zcount", r.zcount("m:z", "(25", "+inf"), 1)
    check("zrangebyscore", r.zrangebyscore("m:z", 20, 30), [b"ann", b"bob", b"cy"])
    check(
        "zrevrange",
        [tuple(p) for p in r.zrevrange("m:z", 0, 0, withscores=True)],
        [(b"cy", 30.0)],
    )
    check("zmscore", r.zmscore("m:z", ["ann", "nobody"]), [25.0, None])
    check("zremrangebyscore", r.zremrangebyscore("m:z", "-inf", "(25"), 0)
    check("zremrangebyrank", r.zremrangebyrank("m:z", 0, 0), 1)
    popped = r.zpopmax("m:z")
    if popped and not isinstance(popped[0], (list, tuple)):
        popped = [popped]
    check("zpopmax", [tuple(p) for p in popped], [(b"cy", 30.0)])


def blocking(r):
    """A job queue as RQ and Celery run one: a worker blocked in BRPOP is served the
    producer's LPUSHes in order; BLPOP's timeout answers None; BZPOPMIN for a schedule."""
    r.delete("b:q", "b:z")
    check("blpop timeout", r.blpop(["b:q"], timeout=0.1), None)
    jobs = []

    # The worker's BRPOP takes a connection of its own from the client's pool.
    def work():
        for _ in range(3):
            jobs.append(r.brpop(["b:q"], timeout=20))

    t = threading.Thread(target=work, daemon=True)
    t.start()
    for job in ("j1", "j2", "j3"):
        r.lpush("b:q", job)
    t.join(30)
    check("brpop jobs", [tuple(j) for j in jobs if j], [(b"b:q", b"j1"), (b"b:q", b"j2"), (b"b:q", b"j3")])
    r.zadd("b:z", {"later": 2, "soon": 1.5})
    check("bzpopmin", tuple(r.bzpopmin(["b:z"], timeout=1)), (b"b:z", b"soon", 1.5))
    check("bzpopmax", tuple(r.bzpopmax(["b:none", "b:z"], timeout=1)), (b"b:z", b"later", 2.0))
    check("blpop several", r.blpop(["b:none", "b:z2"], timeout=0.05), None)


TESTS = {
    "strings": strings,
    "new_strings": new_strings,
    "keyspace": keyspace,
    "scan": scan,
    "pipeline": pipeline,
    "collections": collections,
    "more_collections": more_collections,
    "blocking": blocking,
}

# ---- groups awaiting other branches (enabled by name from client_libraries.rs) -----------


def transaction(r):
    """The default pipeline is MULTI/EXEC; WATCH aborts it (h-txn)."""
    p = r.pipeline()
    p.set("t:a", 1).incr("t:a").get("t:a")
    check("transaction", p.execute(), [True, 2, b"2"])

    def bump(pipe):
        n = int(pipe.get("t:a"))
        pipe.multi()
        pipe.set("t:a", n + 1)

    check("transaction watch", r.transaction(bump, "t:a"), [True])
    check("transaction result", r.get("t:a"), b"3")
    with r.pipeline() as p:
        p.watch("t:a")
        r.set("t:a", "changed")
        p.multi()
        p.set("t:a", "mine")
        try:
            p.execute()
            FAILURES.append("watch: EXEC ran after the watched key changed")
        except redis.WatchError:
            pass
    check("watch kept", r.get("t:a"), b"changed")


def expiry(r):
    """SETEX, EXPIRE, TTL, SET EX/PX (h-expiry)."""
    check("setex", r.setex("e:a", 100, "v"), True)
    check("ttl", 0 < r.ttl("e:a") <= 100, True)
    check("set ex", r.set("e:b", "v", ex=100), True)
    check("expire", r.expire("e:b", 1), True)
    check("pexpire", r.pexpire("e:a", 200), True)
    check("persist", r.persist("e:b"), True)
    check("ttl persist", r.ttl("e:b"), -1)
    check("expire short", r.expire("e:b", 1), True)
    time.sleep(1.3)
    check("expired", (r.get("e:b"), r.exists("e:b")), (None, 0))
    time.sleep(0.1)
    check("pexpired", r.get("e:a"), None)


def lock(r):
    """redis.lock.Lock: SET NX PX, then EVALSHA (SCRIPT LOAD on NOSCRIPT) of its release and
    extend scripts."""
    r.script_flush()
    lk = r.lock("l:name", timeout=5, blocking_timeout=1)
    check("lock acquire", lk.acquire(), True)
    check("lock owned", lk.owned(), True)
    other = r.lock("l:name", timeout=5, blocking_timeout=0.2)
    check("lock contended", other.acquire(), False)
    check("lock extend", lk.extend(5), True)
    check("lock extended ttl", 5000 < r.pttl("l:name") <= 10000, True)
    lk.release()
    check("lock released", r.exists("l:name"), 0)
    check("lock release twice", _raises_lock_error(lk.release), True)
    with r.lock("l:ctx", timeout=5):
        check("lock ctx held", r.exists("l:ctx"), 1)
    check("lock ctx released", r.exists("l:ctx"), 0)

    # A second acquire blocks until the holder releases (from another thread: no
    # thread-local token).
    holder = r.lock("l:wait", timeout=10, thread_local=False)
    check("lock holder", holder.acquire(), True)
    threading.Timer(0.5, holder.release).start()
    waiter = r.lock("l:wait", timeout=10, blocking_timeout=10, sleep=0.05)
    started = time.time()
    check("lock waited", waiter.acquire(), True)
    check("lock waited for the release", time.time() - started >= 0.4, True)
    waiter.release()

    # An unreleased lock expires: another client takes it, the first can no longer release.
    short = r.lock("l:short", timeout=0.3)
    check("lock short", short.acquire(), True)
    time.sleep(0.5)
    check("lock expired", r.exists("l:short"), 0)
    taker = r.lock("l:short", timeout=5, blocking_timeout=0.5)
    check("lock taken after expiry", taker.acquire(), True)
    check("lock expired release", _raises_lock_error(short.release), True)
    check("lock taker owns", taker.owned(), True)
    taker.release()


def _raises_lock_error(fn):
    try:
        fn()
    except redis.exceptions.LockError:
        return True
    return False


def pubsub(r):
    """A listener thread and PUBLISH (h-txn)."""
    p = r.pubsub()
    p.subscribe("ps:ch")
    p.psubscribe("ps:*")
    got = []
    done = threading.Event()

    # A PUBLISH may land between SUBSCRIBE and PSUBSCRIBE (redis-py sends both without
    # waiting) and reach one subscription only: listen until both kinds arrived.
    def listen():
        for message in p.listen():
            if message["type"] in ("message", "pmessage"):
                got.append((message["type"], message["channel"], message["data"]))
                if {kind for kind, _, _ in got} == {"message", "pmessage"}:
                    done.set()
                    return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    deadline = time.time() + 10
    while r.publish("ps:ch", "hello") != 2 and time.time() < deadline:
        time.sleep(0.05)
    done.wait(10)
    check(
        "pubsub",
        sorted(set(got)),
        [("message", b"ps:ch", b"hello"), ("pmessage", b"ps:ch", b"hello")],
    )
    p.close()


PENDING = {"transaction": transaction, "expiry": expiry, "lock": lock, "pubsub": pubsub}


def main():
    args = sys.argv[1:]
    if "--list" in args:
        print(" ".join(TESTS), "|", " ".join(PENDING))
        return 0
    host, port = args[0], int(args[1])
    enabled = []
    if "--enable" in args:
        enabled = [n for n in args[args.index("--enable") + 1].split(",") if n]
    unknown = [n for n in enabled if n not in PENDING]
    if unknown:
        print(f"unknown pending groups: {unknown}")
        return 2
    groups = list(TESTS.items()) + [(n, PENDING[n]) for n in enabled]
    for protocol in (2, 3):
        r = redis.Redis(host=host, port=port, protocol=protocol, socket_timeout=30)
        r.flushall()
        for name, group in groups:
            before = len(FAILURES)
            try:
                group(r)
            except Exception as e:  # a client exception is a failed check, not a crash
                FAILURES.append(f"{name}: {type(e).__name__}: {e}")
            status = "ok" if len(FAILURES) == before else "FAILED"
            print(f"redis-py {redis.__version__} RESP{protocol} {name}: {status}")
        r.close()
    for failure in FAILURES:
        print("  " + failure)
    return 1 if FAILURES else 0


if __name__ == "__main__":
    sys.exit(main())
