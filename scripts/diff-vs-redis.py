#!/usr/bin/env python3
"""Differential test of forest serve's collection commands (issue 19) against redis-server.

Sends the same seeded random command sequences to both servers over raw RESP (own socket
client, so reply types such as bulk vs double vs null array are kept), in RESP2 and RESP3,
normalizes only the differences docs/PROTOCOL.md documents, and prints every other one.

  scripts/diff-vs-redis.py --forest 127.0.0.1:P1 --redis 127.0.0.1:P2 --seeds 1,2,3 -n 4000

Commands over several keys (LMOVE, LMPOP, ZMPOP, SMOVE, the STORE forms, ZUNION/ZINTER/ZDIFF,
ZINTERCARD) run over the same keys, with their destinations' states compared; lex ranges run
over zl1, whose members all score 0 (Redis leaves lex ranges over mixed scores unspecified).

Normalized (documented): SMEMBERS/HKEYS/HVALS/HGETALL/SINTER/SUNION/SDIFF reply order;
random commands (HRANDFIELD, SRANDMEMBER, ZRANDMEMBER) compared by shape and membership;
HSCAN/SSCAN/ZSCAN compared as the union of a full iteration; HSCAN NOVALUES (Redis 7.4);
CONFIG GET's pair order. A difference whose only change is a float's text (same value) is
reported under its own group ("float-text").
"""
import argparse
import random
import socket
import sys
from collections import defaultdict


# ---------------------------------------------------------------- raw RESP client
class Conn:
    def __init__(self, addr, proto):
        host, port = addr.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)))
        self.f = self.sock.makefile("rb")
        if proto == 3:
            r = self.call(b"HELLO", b"3")
            assert r[0] in ("%", "*"), r

    def call(self, *args):
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            if isinstance(a, str):
                a = a.encode()
            elif isinstance(a, int):
                a = str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(a), a))
        self.sock.sendall(b"".join(out))
        return self.read()

    def read(self):
        line = self.f.readline()
        if not line:
            raise ConnectionError("closed")
        t, rest = chr(line[0]), line[1:-2]
        if t in "+-":
            return (t, rest)
        if t == ":":
            return (t, int(rest))
        if t == ",":
            return (t, rest)
        if t == "#":
            return (t, rest)
        if t == "_":
            return ("_", None)
        if t in "$=!":
            n = int(rest)
            if n < 0:
                return ("$", None)
            data = self.f.read(n + 2)[:-2]
            return ("$", data)
        if t in "*~>":
            n = int(rest)
            if n < 0:
                return ("*", None)
            return (t, [self.read() for _ in range(n)])
        if t in "%|":
            n = int(rest)
            return ("%", [(self.read(), self.read()) for _ in range(n)])
        raise ValueError("bad reply type %r" % line)


# ---------------------------------------------------------------- normalization
def fnum(b):
    try:
        return float(b)
    except (ValueError, TypeError):
        return None


def loose(r):
    """Replies with every float-looking text replaced by its value (for the float-text group)."""
    if r is None:
        return r
    t, v = r
    if t in ("$", ",", "+") and v is not None:
        x = fnum(v)
        if x is not None and v.strip() == v and v not in (b"",):
            return ("num", x if x == x else "nan")
        return r
    if t in ("*", "~", ">") and v is not None:
        return (t, [loose(x) for x in v])
    if t == "%":
        return (t, [(loose(a), loose(b)) for a, b in v])
    return r


def rkey(r):
    return repr(r)


def sort_flat(r):
    if r[0] in ("*", "~") and r[1] is not None:
        return ("*", sorted(r[1], key=rkey))
    return r


def sort_pairs(r):
    """HGETALL / CONFIG GET: RESP2 flat pairs or RESP3 map, as a sorted pair list."""
    if r[0] == "%":
        return ("%", sorted(r[1], key=rkey))
    if r[0] == "*" and r[1] is not None and len(r[1]) % 2 == 0:
        v = r[1]
        return ("%flat", sorted(zip(v[0::2], v[1::2]), key=rkey))
    return r


ORDERLESS = {b"SMEMBERS", b"HKEYS", b"HVALS", b"SINTER", b"SUNION", b"SDIFF"}
PAIRS = {b"HGETALL", b"CONFIG"}
RANDOM = {b"HRANDFIELD", b"SRANDMEMBER", b"ZRANDMEMBER"}
SCANS = {b"HSCAN", b"SSCAN", b"ZSCAN"}


def dump(c, key):
    t = c.call(b"TYPE", key)[1]
    if t == b"list":
        return (t, c.call(b"LRANGE", key, 0, -1))
    if t == b"set":
        return (t, sort_flat(c.call(b"SMEMBERS", key)))
    if t == b"hash":
        return (t, sort_pairs(c.call(b"HGETALL", key)))
    if t == b"zset":
        return (t, c.call(b"ZRANGE", key, 0, -1, b"WITHSCORES"))
    if t == b"string":
        return (t, c.call(b"GET", key))
    return (t, None)


def contents(c, key):
    """A collection's members -> value (score text, field value, b'' for sets/lists)."""
    t = c.call(b"TYPE", key)[1]
    if t == b"set":
        return {m[1]: b"" for m in c.call(b"SMEMBERS", key)[1]}
    if t == b"hash":
        v = c.call(b"HGETALL", key)
        if v[0] == "%":
            return {a[1]: b[1] for a, b in v[1]}
        v = v[1]
        return {v[i][1]: v[i + 1][1] for i in range(0, len(v), 2)}
    if t == b"zset":
        v = c.call(b"ZRANGE", key, 0, -1, b"WITHSCORES")[1]
        if v and v[0][0] == "*":  # RESP3 pairs
            return {p[1][0][1]: p[1][1][1] for p in v}
        return {v[i][1]: v[i + 1][1] for i in range(0, len(v), 2)}
    return {}


def rand_shape(reply, args, members):
    """HRANDFIELD/SRANDMEMBER/ZRANDMEMBER reply -> a description both servers should share."""
    t, v = reply
    if t == "-":
        return reply
    if t in ("$",):
        return ("bulk", v is None or v in members)
    if t != "*" or v is None:
        return (t, v)
    count = int(args[2]) if len(args) > 2 else None
    withv = len(args) > 3
    names, ok = [], True
    if withv and v and v[0][0] == "*":  # RESP3 pairs
        for p in v:
            m, val = p[1][0][1], p[1][1]
            names.append(m)
            ok &= m in members and (fnum(val[1]) == fnum(members[m]) or val[1] == members[m])
        kinds = sorted({p[1][1][0] for p in v})
        form = "pairs" + "".join(kinds)
    elif withv:
        for i in range(0, len(v), 2):
            m, val = v[i][1], v[i + 1][1]
            names.append(m)
            ok &= m in members and (fnum(val) == fnum(members[m]) or val == members[m])
        form = "flat"
    else:
        names = [x[1] for x in v]
        ok = all(m in members for m in names)
        form = "list"
    distinct = len(set(names)) == len(names)
    return ("arr", form, len(names), ok, distinct if count and count > 0 else None)


def full_scan(c, args):
    """Iterate a *SCAN to the end from args' cursor; the union of what it returned."""
    cmd = args[0].upper()
    first = c.call(*args)
    if first[0] != "*":
        return first
    seen = set()
    r, calls = first, 0
    while True:
        if r[0] != "*":
            return ("mid-error", r)
        cur, items = r[1][0][1], [x[1] for x in r[1][1][1]]
        if cmd == b"SSCAN" or b"NOVALUES" in [a.upper() for a in args if isinstance(a, bytes)]:
            seen.update(items)
        else:
            for i in range(0, len(items), 2):
                val = items[i + 1]
                if cmd == b"ZSCAN":
                    val = fnum(val)
                seen.add((items[i], val))
        calls += 1
        if cur == b"0" or calls > 5000:
            break
        r = c.call(*([args[0], args[1], cur] + list(args[3:])))
    return ("scan", sorted(seen, key=repr))


# ---------------------------------------------------------------- command generation
MEMBERS = [b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"", b"1", b"2", b"10", b"-1", b"x" * 40,
           b"\x00\xff", b"3.5", b"A", b"aa", b"ab"]
INTS = ["0", "1", "-1", "2", "3", "5", "10", "100", "-2", "-3", "-5", "-100", "4611686018427387904",
        "-4611686018427387905", "9223372036854775807", "-9223372036854775808",
        "9223372036854775808", "-9223372036854775809", "99999999999999999999", "abc", "1.5", "",
        " 1", "+1", "0x10", "-0", "007", "16777217", "-16777217", "4611686018427387903"]
FLOATS = ["0", "1", "-1", "1.5", "0.1", "-0.1", "2.5", "1e10", "1e308", "-1e308", "1.7976931348623157e308",
          "inf", "-inf", "+inf", "Inf", "INF", "infinity", "nan", "NaN", "abc", "", "1e400", "0x10",
          " 1", "5.0e3", "-0", "3.0000000000000004", "1e-320", "10", "100", "3", "0.5", "1.", ".5",
          "1e", "+1.5", "17", "1 ", "1e4000", "1e-4000", "9007199254740993", "123456789012345678"]
SMALLINTS = ["0", "1", "-1", "2", "3", "-2", "-3", "5", "10", "-10", "100", "-100", "7", "-7",
             "9223372036854775807", "-9223372036854775808", "99999999999999999999", "x", "1.0", ""]
HVALUES = [b"v", b"", b"1", b"2.5", b"-3", b"10", b"abc", b"1e3", b"inf", b"0.1", b"5.0",
           b"9223372036854775807", b"1.7976931348623157e308", b" 1", b"3.0000000000000004",
           b"-0", b"1e-320", b"0x10"]
SCORES = FLOATS[:]


def pick(rng, pool):
    return rng.choice(pool)


def bound(rng):
    f = pick(rng, ["0", "1", "2", "-1", "1.5", "2.5", "3", "10", "100", "inf", "-inf", "+inf",
                   "0.1", "abc", "", "nan", "1e308", "5"])
    r = rng.random()
    if r < 0.35:
        return "(" + f
    if r < 0.38:
        return pick(rng, ["(", "((1", "[1", "( 1", "(+inf", "(-inf", "-", "+"])
    return f


class Gen:
    def __init__(self, rng):
        self.rng = rng
        self.keys = {
            "hash": [b"h1", b"h2"], "set": [b"s1", b"s2", b"s3"], "list": [b"l1", b"l2"],
            "zset": [b"z1", b"z2"],
        }
        self.all = [k for ks in self.keys.values() for k in ks] + [b"str", b"nokey"]

    def key(self, kind):
        if self.rng.random() < 0.1:
            return self.rng.choice(self.all)
        return self.rng.choice(self.keys[kind])

    def mem(self):
        return pick(self.rng, MEMBERS)

    def mems(self, lo=1, hi=5):
        return [self.mem() for _ in range(self.rng.randint(lo, hi))]

    def hashcmd(self):
        r, k = self.rng, self.key("hash")
        c = r.choice(["HSET", "HSET", "HMSET", "HSETNX", "HKEYS", "HVALS", "HSTRLEN", "HINCRBYFLOAT",
                      "HINCRBYFLOAT", "HRANDFIELD", "HRANDFIELD", "HSCAN", "HDEL", "HGETALL",
                      "HGET", "HINCRBY", "HLEN", "HMGET", "HEXISTS"])
        f = self.mem
        v = lambda: pick(r, HVALUES)
        if c in ("HSET", "HMSET"):
            a = []
            for _ in range(r.randint(1, 4)):
                a += [f(), v()]
            if r.random() < 0.05:
                a = a[:-1]
            return [c, k] + a
        if c == "HSETNX":
            return [c, k, f(), v()]
        if c in ("HKEYS", "HVALS", "HGETALL", "HLEN"):
            return [c, k]
        if c in ("HSTRLEN", "HGET", "HEXISTS"):
            return [c, k, f()]
        if c == "HMGET":
            return [c, k] + self.mems()
        if c == "HDEL":
            return [c, k] + self.mems(1, 2)
        if c == "HINCRBYFLOAT":
            return [c, k, f(), pick(r, FLOATS)]
        if c == "HINCRBY":
            return [c, k, f(), pick(r, INTS)]
        if c == "HRANDFIELD":
            a = [c, k]
            if r.random() < 0.8:
                a.append(pick(r, INTS))
                if r.random() < 0.5:
                    a.append(r.choice(["WITHVALUES", "withvalues", "WITHSCORES", "x"]))
            return a
        if c == "HSCAN":
            return self.scanargs(c, k, novalues=True)

    def scanargs(self, c, k, novalues=False):
        r = self.rng
        a = [c, k, r.choice(["0"] * 12 + ["abc", "-1", "18446744073709551616"])]
        for _ in range(r.randint(0, 2)):
            o = r.random()
            if o < 0.4:
                a += ["MATCH", pick(r, ["*", "a*", "?", "[a-c]", "*a*", "x", "[", "\\*", "1*", "",
                                         "[^a]*", "a?"])]
            elif o < 0.8:
                a += ["COUNT", pick(r, ["1", "2", "3", "10", "100", "0", "-1", "abc",
                                         "9223372036854775807", "1000000"])]
            elif o < 0.88 and novalues:
                a += ["NOVALUES"]
            else:
                a += [pick(r, ["MATCH", "COUNT", "junk", "TYPE"])]
        return a

    def setcmd(self):
        r, k = self.rng, self.key("set")
        c = r.choice(["SADD", "SADD", "SREM", "SMISMEMBER", "SRANDMEMBER", "SRANDMEMBER", "SSCAN",
                      "SINTER", "SUNION", "SDIFF", "SINTERCARD", "SINTERCARD", "SMEMBERS",
                      "SCARD", "SISMEMBER"])
        if c == "SADD":
            return [c, k] + self.mems(1, 6)
        if c == "SREM":
            return [c, k] + self.mems(1, 3)
        if c == "SMISMEMBER":
            return [c, k] + self.mems(0 if r.random() < 0.05 else 1, 5)
        if c == "SRANDMEMBER":
            a = [c, k]
            if r.random() < 0.8:
                a.append(pick(r, INTS))
            if r.random() < 0.05:
                a.append("x")
            return a
        if c == "SSCAN":
            return self.scanargs(c, k, novalues=r.random() < 0.2)
        if c in ("SINTER", "SUNION", "SDIFF"):
            return [c] + [self.key("set") for _ in range(r.randint(0 if r.random() < 0.03 else 1, 4))]
        if c == "SINTERCARD":
            ks = [self.key("set") for _ in range(r.randint(1, 3))]
            n = str(len(ks))
            x = r.random()
            if x < 0.15:
                n = pick(r, ["0", "-1", "abc", str(len(ks) + 1), "9999", "1.5", ""])
            a = [c, n] + ks
            if r.random() < 0.5:
                a += [r.choice(["LIMIT", "limit", "LIMIT", "junk"]), pick(r, SMALLINTS)]
            if r.random() < 0.05:
                a += ["LIMIT"]
            return a
        if c in ("SMEMBERS", "SCARD"):
            return [c, k]
        return [c, k, self.mem()]

    def listcmd(self):
        r, k = self.rng, self.key("list")
        c = r.choice(["RPUSH", "LPUSH", "LPUSHX", "RPUSHX", "LSET", "LTRIM", "LREM", "LREM",
                      "LINSERT", "LINSERT", "LPOS", "LPOS", "LPOS", "LRANGE", "LINDEX", "LPOP",
                      "RPOP", "LLEN"])
        idx = lambda: pick(r, SMALLINTS + ["-1", "0", "1", "2", "-2", "4", "-4", "6"])
        if c in ("RPUSH", "LPUSH", "LPUSHX", "RPUSHX"):
            return [c, k] + self.mems(1 if r.random() > 0.03 else 0, 4)
        if c == "LSET":
            return [c, k, idx(), self.mem()]
        if c in ("LTRIM", "LRANGE"):
            return [c, k, idx(), idx()]
        if c == "LREM":
            return [c, k, idx(), self.mem()]
        if c == "LINSERT":
            return [c, k, r.choice(["BEFORE", "AFTER", "before", "after", "middle"]), self.mem(), self.mem()]
        if c == "LINDEX":
            return [c, k, idx()]
        if c in ("LPOP", "RPOP"):
            return [c, k] + ([idx()] if r.random() < 0.5 else [])
        if c == "LLEN":
            return [c, k]
        a = [c, k, self.mem()]
        opts = ["RANK", "COUNT", "MAXLEN"]
        for _ in range(r.randint(0, 3)):
            o = r.choice(opts + ["rank", "junk"])
            a += [o, pick(r, SMALLINTS + ["1", "2", "-1", "-2", "0", "0", "3"])]
        if r.random() < 0.05:
            a.append("RANK")
        return a

    def zsetcmd(self):
        r, k = self.rng, self.key("zset")
        c = r.choice(["ZADD", "ZADD", "ZADD", "ZINCRBY", "ZMSCORE", "ZRANK", "ZREVRANK", "ZCOUNT",
                      "ZRANGE", "ZRANGE", "ZRANGE", "ZRANGEBYSCORE", "ZREVRANGEBYSCORE",
                      "ZREVRANGE", "ZREMRANGEBYSCORE", "ZREMRANGEBYRANK", "ZPOPMAX", "ZPOPMIN",
                      "ZSCAN", "ZRANDMEMBER", "ZRANDMEMBER", "ZSCORE", "ZCARD", "ZREM"])
        sc = lambda: pick(r, SCORES) if r.random() < 0.5 else str(r.randint(-3, 12))
        idx = lambda: pick(r, SMALLINTS + ["0", "1", "-1", "2", "-2", "3", "5"])
        if c == "ZADD":
            a = [c, k]
            for o in ["NX", "XX", "GT", "LT", "CH", "INCR"]:
                if r.random() < 0.15:
                    a.append(o if r.random() < 0.8 else o.lower())
            if r.random() < 0.05:
                r.shuffle(a[2:])
            n = 1 if r.random() < 0.5 else r.randint(1, 4)
            for _ in range(n):
                a += [sc(), self.mem()]
            if r.random() < 0.04:
                a = a[:-1]
            return a
        if c == "ZINCRBY":
            return [c, k, sc(), self.mem()]
        if c == "ZMSCORE":
            return [c, k] + self.mems(0 if r.random() < 0.05 else 1, 4)
        if c in ("ZRANK", "ZREVRANK", "ZSCORE"):
            return [c, k, self.mem()]
        if c in ("ZCOUNT", "ZREMRANGEBYSCORE"):
            return [c, k, bound(r), bound(r)]
        if c in ("ZREVRANGE", "ZREMRANGEBYRANK"):
            a = [c, k, idx(), idx()]
            if c == "ZREVRANGE" and r.random() < 0.5:
                a.append(r.choice(["WITHSCORES", "withscores", "junk"]))
            return a
        if c in ("ZRANGEBYSCORE", "ZREVRANGEBYSCORE"):
            a = [c, k, bound(r), bound(r)]
            opts = []
            if r.random() < 0.5:
                opts.append(["WITHSCORES"])
            if r.random() < 0.5:
                opts.append(["LIMIT", idx(), idx()] if r.random() > 0.05 else ["LIMIT", idx()])
            if r.random() < 0.04:
                opts.append([r.choice(["junk", "REV", "BYSCORE"])])
            r.shuffle(opts)
            for o in opts:
                a += o
            return a
        if c == "ZRANGE":
            by = r.random() < 0.5
            a = [c, k] + ([bound(r), bound(r)] if by else [idx(), idx()])
            opts = []
            if by or r.random() < 0.05:
                opts.append(["BYSCORE"])
            if r.random() < 0.4:
                opts.append(["REV"])
            if r.random() < 0.4:
                opts.append(["LIMIT", idx(), idx()] if r.random() > 0.05 else ["LIMIT", idx()])
            if r.random() < 0.4:
                opts.append(["WITHSCORES"])
            if r.random() < 0.03:
                opts.append([r.choice(["junk", "BYSCORE", "REV"])])
            r.shuffle(opts)
            for o in opts:
                a += o
            return a
        if c in ("ZPOPMAX", "ZPOPMIN"):
            return [c, k] + ([idx()] if r.random() < 0.6 else [])
        if c == "ZSCAN":
            return self.scanargs(c, k, novalues=r.random() < 0.1)
        if c == "ZRANDMEMBER":
            a = [c, k]
            if r.random() < 0.8:
                a.append(pick(r, INTS))
                if r.random() < 0.5:
                    a.append(r.choice(["WITHSCORES", "withscores", "WITHVALUES", "x"]))
            return a
        if c == "ZCARD":
            return [c, k]
        return [c, k] + self.mems(1, 3)

    TUNING = ["hash-max-listpack-entries", "hash-max-listpack-value", "hash-max-ziplist-entries",
              "hash-max-ziplist-value", "list-max-listpack-size", "list-max-ziplist-size",
              "list-compress-depth", "set-max-intset-entries", "set-max-listpack-entries",
              "set-max-listpack-value", "zset-max-listpack-entries", "zset-max-listpack-value",
              "zset-max-ziplist-entries", "zset-max-ziplist-value", "stream-node-max-bytes",
              "stream-node-max-entries", "hll-sparse-max-bytes", "activerehashing",
              "lazyfree-lazy-eviction", "lazyfree-lazy-expire", "lazyfree-lazy-server-del",
              "lazyfree-lazy-user-del", "lazyfree-lazy-user-flush", "replica-lazy-flush",
              "maxmemory-samples", "hz", "dynamic-hz"]
    TVALUES = ["0", "1", "128", "64", "-1", "-2", "-5", "-6", "abc", "1k", "1kb", "1K", "1mb",
               "1gb", "yes", "no", "YES", "4096", "2147483647", "2147483648", "99999999999", "",
               "1.5", "-0", "512", "100", "10", "3000", " 1", "0x10", "500", "501", "64", "65"]

    def configcmd(self):
        r = self.rng
        x = r.random()
        if x < 0.35:
            n = r.choice(self.TUNING)
            a = ["CONFIG", "SET", n, pick(r, self.TVALUES)]
            if r.random() < 0.15:
                a += [r.choice(self.TUNING), pick(r, self.TVALUES)]
            return a
        if x < 0.6:
            pats = [r.choice(self.TUNING + ["*max-*-entries", "hash-*", "*ziplist*", "lazyfree-*",
                                            "client-output-buffer-limit", "nosuch", "*listpack*",
                                            "hz", "list-*", "zset-max-*", "set-*"])
                    for _ in range(r.randint(1, 2))]
            return ["CONFIG", "GET"] + pats
        # client-output-buffer-limit; only pubsub with small limits (normal/replica with
        # small ones would make redis drop this very connection)
        groups = []
        for _ in range(r.randint(1, 2)):
            cls = r.choice(["pubsub", "pubsub", "normal", "replica", "slave", "PUBSUB", "bogus"])
            if cls.lower() == "pubsub":
                vals = [pick(r, ["0", "32mb", "33554432", "8mb", "1kb", "1gb", "-1", "abc", "1",
                                  "10mb"]) for _ in range(2)]
                vals.append(pick(r, ["60", "0", "10", "-1", "abc"]))
            elif cls == "normal":
                vals = r.choice([["0", "0", "0"], ["1gb", "1gb", "0"], ["0", "0", "1"]])
            else:
                vals = r.choice([["256mb", "64mb", "60"], ["268435456", "67108864", "60"],
                                 ["512mb", "64mb", "60"]])
            g = [cls] + vals
            if r.random() < 0.05:
                g = g[:-1]
            groups += g
        return ["CONFIG", "SET", "client-output-buffer-limit", " ".join(groups)]

    def lexbound(self):
        r = self.rng
        x = r.random()
        if x < 0.15:
            return r.choice(["-", "+"])
        if x < 0.18:
            return r.choice(["", "a", "-x", "+x", "["])
        return r.choice(["[", "("]).encode() + self.mem()

    def multicmd(self):
        """Commands over several keys (issue 19's multi-key brief), and lex ranges over zl1,
        whose members all score 0 (Redis leaves lex ranges over mixed scores unspecified)."""
        r = self.rng
        lk, sk, zk = (lambda: self.key("list")), (lambda: self.key("set")), (lambda: self.key("zset"))
        end = lambda words: r.choice(words + [w.lower() for w in words] + (["up"] if r.random() < 0.03 else []))
        c = r.choice(["LMOVE", "LMOVE", "RPOPLPUSH", "LMPOP", "ZMPOP", "SMOVE", "SMOVE", "SINTERSTORE",
                      "SUNIONSTORE", "SDIFFSTORE", "ZADD", "ZADD", "ZRANGEBYLEX", "ZREVRANGEBYLEX",
                      "ZLEXCOUNT", "ZREMRANGEBYLEX", "ZRANGE", "ZRANGESTORE", "ZUNION", "ZINTER",
                      "ZDIFF", "ZUNIONSTORE", "ZINTERSTORE", "ZDIFFSTORE", "ZINTERCARD"])
        zl = b"zl1" if r.random() < 0.9 else self.rng.choice(self.all)
        idx = lambda: pick(r, SMALLINTS + ["0", "1", "-1", "2", "-2", "3", "5"])
        count = lambda: (["COUNT", pick(r, ["1", "2", "5", "0", "-1", "x"])] if r.random() < 0.5 else [])
        if c == "LMOVE":
            return [c, lk(), lk(), end(["LEFT", "RIGHT"]), end(["LEFT", "RIGHT"])]
        if c == "RPOPLPUSH":
            return [c, lk(), lk()]
        if c in ("LMPOP", "ZMPOP"):
            keys = [lk() if c == "LMPOP" else zk() for _ in range(r.randint(1, 3))]
            n = str(len(keys)) if r.random() < 0.9 else pick(r, ["0", "-1", "5", "x"])
            words = ["LEFT", "RIGHT"] if c == "LMPOP" else ["MIN", "MAX"]
            return [c, n] + keys + [end(words)] + count()
        if c == "SMOVE":
            return [c, sk(), sk(), self.mem()]
        if c.startswith("S"):
            return [c, sk()] + [sk() for _ in range(r.randint(1, 3))]
        if c == "ZADD":
            return [c, zl, "0", self.mem()]
        if c in ("ZRANGEBYLEX", "ZREVRANGEBYLEX", "ZLEXCOUNT", "ZREMRANGEBYLEX"):
            a = [c, zl, self.lexbound(), self.lexbound()]
            if c in ("ZRANGEBYLEX", "ZREVRANGEBYLEX") and r.random() < 0.4:
                a += ["LIMIT", idx(), idx()]
            if r.random() < 0.05:
                a.append(r.choice(["WITHSCORES", "REV", "BYLEX", "junk"]))
            return a
        if c in ("ZRANGE", "ZRANGESTORE"):
            a = [c] + ([zk() if r.random() < 0.5 else zl] if c == "ZRANGESTORE" else []) + [zl]
            by = r.choice(["BYLEX", "BYLEX", "BYSCORE", None])
            if by == "BYLEX":
                a += [self.lexbound(), self.lexbound(), by]
            elif by == "BYSCORE":
                a += [bound(r), bound(r), by]
            else:
                a += [idx(), idx()]
            if r.random() < 0.3:
                a.append("REV")
            if by and r.random() < 0.4:
                a += ["LIMIT", idx(), idx()]
            if r.random() < 0.1:
                a.append("WITHSCORES")
            return a
        store = c.endswith("STORE")
        keys = [r.choice([zk(), zk(), sk(), zl]) for _ in range(r.randint(1, 3))]
        n = str(len(keys)) if r.random() < 0.92 else pick(r, ["0", "-1", "5", "x"])
        a = [c] + ([zk()] if store else []) + [n] + keys
        if c == "ZINTERCARD":
            if r.random() < 0.4:
                a += ["LIMIT", pick(r, ["0", "1", "2", "-1", "x"])]
            return a
        if "DIFF" not in c and r.random() < 0.4:
            a += ["WEIGHTS"] + [pick(r, ["1", "2", "-1", "0", "0.5", "inf", "-inf", "x"]) for _ in keys]
        if "DIFF" not in c and r.random() < 0.4:
            a += ["AGGREGATE", r.choice(["SUM", "MIN", "MAX", "min", "foo"])]
        if not store and r.random() < 0.5:
            a.append("WITHSCORES")
        return a

    def generic(self):
        r = self.rng
        k = r.choice(self.all)
        return r.choice([["DEL", k], ["TYPE", k], ["EXISTS", k], ["SET", b"str", "value"]])

    def next(self):
        x = self.rng.random()
        if x < 0.22:
            a = self.hashcmd()
        elif x < 0.42:
            a = self.setcmd()
        elif x < 0.6:
            a = self.listcmd()
        elif x < 0.8:
            a = self.zsetcmd()
        elif x < 0.92:
            a = self.multicmd()
        elif x < 0.96:
            a = self.configcmd()
        else:
            a = self.generic()
        if self.rng.random() < 0.02 and len(a) > 1:  # arity and syntax edges
            if self.rng.random() < 0.5:
                a = a[: self.rng.randint(1, len(a) - 1)]
            else:
                a = a + ["extra"]
        return [x if isinstance(x, bytes) else str(x).encode() for x in a]


# ---------------------------------------------------------------- the run
def keys_of(args):
    c = args[0].upper()
    if c in (b"SINTER", b"SUNION", b"SDIFF", b"SINTERSTORE", b"SUNIONSTORE", b"SDIFFSTORE",
             b"LMOVE", b"RPOPLPUSH", b"SMOVE", b"ZRANGESTORE", b"ZUNIONSTORE", b"ZINTERSTORE",
             b"ZDIFFSTORE", b"LMPOP", b"ZMPOP"):
        return [a for a in args[1:] if a in KEYSET]
    if c == b"SINTERCARD":
        return [a for a in args[2:] if a in KEYSET]
    if c == b"CONFIG":
        return []
    return args[1:2]


KEYSET = {b"h1", b"h2", b"s1", b"s2", b"s3", b"l1", b"l2", b"z1", b"z2", b"zl1", b"str", b"nokey"}


def documented(args, rf, rr):
    """Differences docs/PROTOCOL.md documents, recognized per command."""
    up = [a.upper() for a in args]
    if up[0] in SCANS and b"NOVALUES" in up:
        return True  # Redis 7.4's option; 7.0.15 says syntax error
    if up[0] in SCANS and up[2] != b"0":
        return True  # cursors differ by design
    if up[0] == b"CONFIG" and len(up) > 3 and up[2] == b"CLIENT-OUTPUT-BUFFER-LIMIT" and (
            b"NORMAL" in up[3].split() or b"REPLICA" in up[3].split() or b"SLAVE" in up[3].split()):
        return True  # only the defaults for the non-pubsub classes
    if up[0] in RANDOM and rf[0] == "-" and b"16777216" in rf[1]:
        return True
    return False


def safe_count(args):
    try:
        n = int(args[2])
    except ValueError:
        return True
    if n >= -100000:
        return True
    if n < -(1 << 63) or n > (1 << 63) - 1 or n == -(1 << 63):
        return True  # an error in both
    return len(args) > 3 and n < -(1 << 62)  # WITHVALUES's range error


# Arguments on which forest and Redis 7.0 are known to differ (see the report); --no-quirks
# skips commands carrying them so that deeper differences surface.
QUIRKS = {b"infinity", b"Infinity", b"INF", b"Inf", b"0x10", b"1e400", b"1e-4000", b"1e4000",
          b"(", b"", b"-0", b"(0x10", b"(1e400", b"99999999999999999999", b"1.0", b"x", b"abc",
          b"-9223372036854775808", b"junk", b"TYPE", b"extra", b"1e-320"}
SKIP_QUIRKS = False


def run(forest, redis_addr, seed, n, proto, show, groups, totals):
    rng = random.Random(seed * 10 + proto)
    F, R = Conn(forest, proto), Conn(redis_addr, proto)
    Fs, Rs = Conn(forest, 2), Conn(redis_addr, 2)
    for c in (Fs, Rs):
        c.call(b"DEL", *sorted(KEYSET))
    gen = Gen(rng)
    diffs = 0
    for i in range(n):
        args = gen.next()
        cmd = args[0].upper()
        if SKIP_QUIRKS and (cmd == b"CONFIG" or any(a in QUIRKS for a in args[1:])):
            continue
        if cmd in RANDOM and len(args) > 2 and not safe_count(args):
            continue  # Redis would build a reply of ~2^62 members (documented difference)
        if cmd in SCANS:
            rf, rr = full_scan(F, args), full_scan(R, args)
        else:
            rf, rr = F.call(*args), R.call(*args)
        nf, nr = rf, rr
        if cmd in ORDERLESS:
            nf, nr = sort_flat(rf), sort_flat(rr)
        elif cmd in PAIRS:
            nf, nr = sort_pairs(rf), sort_pairs(rr)
        elif cmd in RANDOM and len(args) > 1:
            nf = rand_shape(rf, args, contents(Fs, args[1]))
            nr = rand_shape(rr, args, contents(Rs, args[1]))
        totals["cmds"] += 1
        if nf != nr and not documented(args, rf, rr):
            group = "float-text" if loose(nf) == loose(nr) else "reply"
            report(groups, group, cmd, args, proto, seed, i, rf, rr)
            diffs += 1
        # state check: a difference here means a write went differently
        for k in keys_of(args):
            if k not in KEYSET:
                continue
            df, dr = dump(Fs, k), dump(Rs, k)
            if df != dr:
                if loose(df[1]) == loose(dr[1]) and df[0] == dr[0]:
                    # scores stored alike, printed differently: the replies show it already
                    totals["float-text states"] += 1
                    continue
                report(groups, "state", cmd, args, proto, seed, i, df, dr)
                diffs += 1
                resync(Fs, Rs, k)
    totals["diffs"] += diffs
    # leave redis's CONFIG as it was so later seeds start alike
    return diffs


def normalize(cmd, args, rf, rr, Fs, Rs):
    """The replies of one command as compared (documented order and randomness removed)."""
    if cmd in ORDERLESS:
        return sort_flat(rf), sort_flat(rr)
    if cmd in PAIRS:
        return sort_pairs(rf), sort_pairs(rr)
    if cmd in RANDOM and len(args) > 1:
        return rand_shape(rf, args, contents(Fs, args[1])), rand_shape(rr, args, contents(Rs, args[1]))
    return rf, rr


# Scripts of --mode eval: run every command but the last, then return the last one's reply,
# so that the last must read what the earlier ones wrote in the same script.
UNIT_SCRIPT = (b"local n = tonumber(ARGV[1]); local i = 2; local r\n"
               b"while i <= #ARGV do local c = tonumber(ARGV[i]); local a = {}\n"
               b"for j = 1, c do a[j] = ARGV[i + j] end; r = redis.pcall(unpack(a)); i = i + c + 1 end\n"
               b"return r")


def run_units(forest, redis_addr, seed, n, proto, mode, size, groups, totals):
    """--mode multi: groups of `size` random commands in MULTI/EXEC, each queued reply
    compared; --mode eval: each group in one EVAL returning the last command's reply. Either
    way a command reads what the ones before it in its unit wrote (review rev-coll F1)."""
    rng = random.Random(seed * 10 + proto + 7)
    F, R = Conn(forest, proto), Conn(redis_addr, proto)
    Fs, Rs = Conn(forest, 2), Conn(redis_addr, 2)
    for c in (Fs, Rs):
        c.call(b"DEL", *sorted(KEYSET))
    gen = Gen(rng)
    diffs = 0
    i = 0
    while i < n:
        unit = []
        while len(unit) < size:
            args = gen.next()
            cmd = args[0].upper()
            if cmd in SCANS or cmd == b"CONFIG" or cmd.startswith(b"B"):
                continue
            if SKIP_QUIRKS and any(a in QUIRKS for a in args[1:]):
                continue
            if cmd in RANDOM and len(args) > 2 and not safe_count(args):
                continue
            unit.append(args)
        i += len(unit)
        if mode == "multi":
            for c in (F, R):
                c.call(b"MULTI")
            queued = [(F.call(*a), R.call(*a)) for a in unit]
            ef, er = F.call(b"EXEC"), R.call(b"EXEC")
            if ef == er and not isinstance(ef[1], list):
                continue  # both aborted alike (EXECABORT: a queuing error)
            if [q[0][0] for q in queued] != [q[1][0] for q in queued] or ef[0] != er[0] \
                    or not isinstance(ef[1], list) or not isinstance(er[1], list):
                report(groups, "exec", b"EXEC", unit[0], proto, seed, i, (queued, ef), (queued, er))
                diffs += 1
                continue
            pairs = list(zip(unit, ef[1], er[1]))
        else:
            flat = [str(len(unit)).encode()]
            for a in unit:
                flat += [str(len(a)).encode()] + list(a)
            rf = F.call(b"EVAL", UNIT_SCRIPT, b"0", *flat)
            rr = R.call(b"EVAL", UNIT_SCRIPT, b"0", *flat)
            pairs = [(unit[-1], rf, rr)]
        for args, rf, rr in pairs:
            cmd = args[0].upper()
            totals["cmds"] += 1
            nf, nr = normalize(cmd, args, rf, rr, Fs, Rs)
            if nf != nr and not documented(args, rf, rr):
                group = "float-text" if loose(nf) == loose(nr) else "reply"
                report(groups, group + "-" + mode, cmd, args, proto, seed, i, rf, rr)
                diffs += 1
        for k in {k for a in unit for k in keys_of(a) if k in KEYSET}:
            df, dr = dump(Fs, k), dump(Rs, k)
            if df != dr:
                if loose(df[1]) == loose(dr[1]) and df[0] == dr[0]:
                    totals["float-text states"] += 1
                    continue
                report(groups, "state-" + mode, unit[-1][0].upper(), unit[-1], proto, seed, i, df, dr)
                diffs += 1
                resync(Fs, Rs, k)
    totals["diffs"] += diffs
    return diffs


def resync(Fs, Rs, k):
    """Copy redis's value of k into forest so one difference does not cascade."""
    Fs.call(b"DEL", k)
    t = Rs.call(b"TYPE", k)[1]
    if t == b"list":
        v = [x[1] for x in Rs.call(b"LRANGE", k, 0, -1)[1]]
        if v:
            Fs.call(b"RPUSH", k, *v)
    elif t == b"set":
        Fs.call(b"SADD", k, *[x[1] for x in Rs.call(b"SMEMBERS", k)[1]])
    elif t == b"hash":
        Fs.call(b"HSET", k, *[x[1] for x in Rs.call(b"HGETALL", k)[1]])
    elif t == b"zset":
        v = [x[1] for x in Rs.call(b"ZRANGE", k, 0, -1, b"WITHSCORES")[1]]
        a = []
        for j in range(0, len(v), 2):
            a += [v[j + 1], v[j]]
        Fs.call(b"ZADD", k, *a)
    elif t == b"string":
        Fs.call(b"SET", k, Rs.call(b"GET", k)[1])


def short(b, lim=300):
    s = repr(b)
    return s if len(s) <= lim else s[:lim] + "..."


def report(groups, group, cmd, args, proto, seed, i, rf, rr):
    key = (group, cmd.decode())
    groups[key].append((proto, seed, i, args, rf, rr))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--forest", required=True, help="host:port of forest serve")
    p.add_argument("--redis", required=True, help="host:port of redis-server")
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("-n", type=int, default=4000, help="commands per seed and protocol")
    p.add_argument("--protos", default="2,3")
    p.add_argument("--examples", type=int, default=4, help="examples printed per group")
    p.add_argument("--no-quirks", action="store_true",
                   help="skip commands with arguments already known to differ (QUIRKS) and CONFIG")
    p.add_argument("--mode", default="plain", choices=["plain", "multi", "eval"],
                   help="plain: one command at a time; multi: groups in MULTI/EXEC; eval: "
                        "groups in one EVAL returning the last reply")
    p.add_argument("--unit", type=int, default=4, help="commands per MULTI or EVAL group")
    o = p.parse_args()
    global SKIP_QUIRKS
    SKIP_QUIRKS = o.no_quirks
    groups = defaultdict(list)
    totals = defaultdict(int)
    for seed in [int(s) for s in o.seeds.split(",")]:
        for proto in [int(x) for x in o.protos.split(",")]:
            if o.mode == "plain":
                run(o.forest, o.redis, seed, o.n, proto, o.examples, groups, totals)
            else:
                run_units(o.forest, o.redis, seed, o.n, proto, o.mode, o.unit, groups, totals)
    print("commands: %d, differences: %d, groups: %d, states differing in score text only: %d"
          % (totals["cmds"], totals["diffs"], len(groups), totals["float-text states"]))
    for (group, cmd), ex in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        print("\n== %s %s: %d" % (group, cmd, len(ex)))
        for proto, seed, i, args, rf, rr in ex[: o.examples]:
            print("  RESP%d seed %d #%d: %s" % (proto, seed, i, b" ".join(
                repr(a)[2:-1].encode() if a else b"''" for a in args).decode()))
            print("    forest: %s" % short(rf))
            print("    redis:  %s" % short(rr))
    sys.exit(1 if totals["diffs"] else 0)


if __name__ == "__main__":
    main()
