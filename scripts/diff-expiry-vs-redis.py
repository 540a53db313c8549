#!/usr/bin/env python3
"""Differential test of forest serve's string expiry commands (issue 15) against redis-server.

Sends the same seeded random sequences of SET (EX/PX/EXAT/PXAT/KEEPTTL/NX/XX/GET), SETEX,
PSETEX, GETEX, EXPIRE/PEXPIRE/EXPIREAT (NX/XX/GT/LT), PERSIST, TTL/PTTL/EXPIRETIME, GET,
MGET, MSET, DEL, GETDEL, APPEND, INCR, SETRANGE, RENAME, COPY, EXISTS, TYPE, STRLEN, KEYS,
a full SCAN to both servers and prints every reply that differs (DBSIZE is checked against
forest's own KEYS: Redis's counts expired keys not yet deleted, docs/PROTOCOL.md "Expiry"). Times left are
compared loosely (both positive and within a few seconds of each other, the test being a
few seconds long); deadlines in the past (negative EXPIRE, EXAT 1) make keys gone at once.

  scripts/diff-expiry-vs-redis.py --forest 127.0.0.1:P1 --redis 127.0.0.1:P2 --seeds 1,2,3 -n 3000

Reuses the raw RESP client of diff-vs-redis.py.
"""
import argparse
import importlib.util
import os
import random
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("diffvs", os.path.join(here, "diff-vs-redis.py"))
diffvs = importlib.util.module_from_spec(spec)
spec.loader.exec_module(diffvs)

KEYS = ["k%d" % i for i in range(8)]
TIME_COMMANDS = {"TTL", "PTTL", "EXPIRETIME", "PEXPIRETIME"}


def command(r):
    k = r.choice(KEYS)
    c = r.choice(["SET", "SET", "SET", "SETEX", "PSETEX", "GETEX", "EXPIRE", "PEXPIRE",
                  "EXPIREAT", "PERSIST", "TTL", "PTTL", "GET", "GET", "MGET", "MSET", "DEL",
                  "GETDEL", "APPEND", "INCR", "SETRANGE", "RENAME", "COPY", "EXISTS", "TYPE",
                  "STRLEN", "EXPIRETIME"])
    now = int(time.time())
    if c == "SET":
        a = ["SET", k, r.choice(["1", "v", "abc", "10"])]
        for o in r.sample(["NX", "XX", "GET", "TIME", "KEEPTTL"], r.randint(0, 2)):
            if o == "TIME":
                a += r.choice([["EX", str(r.randint(100, 1000))], ["PX", str(r.randint(100000, 900000))],
                               ["EXAT", str(now + r.randint(100, 1000))], ["EXAT", "1"],
                               ["PXAT", str((now + 500) * 1000)], ["EX", "0"], ["EX", "x"]])
            else:
                a.append(o)
        return a
    if c == "SETEX":
        return [c, k, r.choice(["100", "500", "0", "-1"]), "sx"]
    if c == "PSETEX":
        return [c, k, r.choice(["100000", "500000", "0"]), "psx"]
    if c == "GETEX":
        return [c, k] + r.choice([[], ["PERSIST"], ["EX", "300"], ["PX", "300000"],
                                  ["EXAT", str(now + 300)], ["EXAT", "1"], ["EX", "-5"]])
    if c in ("EXPIRE", "PEXPIRE"):
        t = r.choice(["100", "700", "-1", "0"]) if c == "EXPIRE" else r.choice(["100000", "-5"])
        return [c, k, t] + r.choice([[], [], ["NX"], ["XX"], ["GT"], ["LT"]])
    if c == "EXPIREAT":
        return [c, k, r.choice([str(now + 400), "1"])]
    if c == "MGET":
        return ["MGET"] + r.sample(KEYS, 3)
    if c == "MSET":
        return ["MSET", k, "m", r.choice(KEYS), "n"]
    if c == "APPEND":
        return [c, k, "+"]
    if c == "SETRANGE":
        return [c, k, "1", "Z"]
    if c in ("RENAME", "COPY"):
        return [c, k, r.choice(KEYS)] + (["REPLACE"] if c == "COPY" and r.random() < 0.5 else [])
    return [c, k]


# Collection writes and reads mixed in by --mode multi/eval, so that string and expiry
# commands in a unit meet keys that an earlier command of the unit made a collection.
MIXED = [["HSET", "f", "v"], ["LPUSH", "x"], ["SADD", "m"], ["ZADD", "1", "m"], ["HGET", "f"],
         ["LLEN"], ["SCARD"], ["HLEN"], ["ZSCORE", "m"], ["LRANGE", "0", "-1"]]


def unit_command(r):
    if r.random() < 0.25:
        m = r.choice(MIXED)
        return [m[0], r.choice(KEYS)] + m[1:]
    return command(r)


def run_units(o, seed, diffs):
    """--mode multi: groups of --unit commands in MULTI/EXEC, each reply compared; --mode
    eval: each group in one EVAL that returns the last command's reply. Either way a command
    must read what the earlier ones of its unit wrote (review rev-coll F1)."""
    f, rd = diffvs.Conn(o.forest, 2), diffvs.Conn(o.redis, 2)
    for conn in (f, rd):
        conn.call("FLUSHALL")
    r = random.Random(seed + 1000)
    i = 0
    while i < o.n:
        if diffs and diffs[-1][1] == i:
            # One difference would cascade: both servers start over.
            for conn in (f, rd):
                conn.call("FLUSHALL")
        unit = [unit_command(r) for _ in range(o.unit)]
        i += len(unit)
        if o.mode == "multi":
            for conn in (f, rd):
                conn.call("MULTI")
            queued = [(f.call(*a), rd.call(*a)) for a in unit]
            ef, er = f.call("EXEC"), rd.call("EXEC")
            if ef == er and not isinstance(ef[1], list):
                continue  # both aborted alike (EXECABORT: a queuing error)
            if [q[0][0] for q in queued] != [q[1][0] for q in queued] or ef[0] != er[0] \
                    or not isinstance(ef[1], list) or not isinstance(er[1], list):
                diffs.append((seed, i, ["EXEC"] + [" ".join(a) for a in unit], ef, er))
                continue
            pairs = zip(unit, ef[1], er[1])
        else:
            flat = [str(len(unit))]
            for a in unit:
                flat += [str(len(a))] + a
            rf = f.call("EVAL", diffvs.UNIT_SCRIPT, "0", *flat)
            rr = rd.call("EVAL", diffvs.UNIT_SCRIPT, "0", *flat)
            pairs = [(["EVAL:"] + [" ".join(a) for a in unit], rf, rr)]
        for args, rf, rr in pairs:
            if args[0] == "EVAL:" and same(unit[-1], rf, rr):
                continue
            if not same(args, rf, rr):
                context = ["  (unit: " + " ; ".join(" ".join(a) for a in unit) + ")"]
                diffs.append((seed, i, args + context, rf, rr))
        a, b = f.call("KEYS", "*"), rd.call("KEYS", "*")
        a, b = sorted(x[1] for x in a[1]), sorted(x[1] for x in b[1])
        if a != b:
            diffs.append((seed, i, ["KEYS", "*"], a, b))
        for k in KEYS:
            tf, tr = f.call("TYPE", k), rd.call("TYPE", k)
            if tf != tr:
                diffs.append((seed, i, ["TYPE", k], tf, tr))
            elif tf[1] == b"string":
                gf, gr = f.call("GET", k), rd.call("GET", k)
                if gf != gr:
                    diffs.append((seed, i, ["GET", k], gf, gr))
            if not same(["TTL"], f.call("TTL", k), rd.call("TTL", k)):
                diffs.append((seed, i, ["TTL", k, "(after)"], f.call("TTL", k), rd.call("TTL", k)))


def same(args, rf, rr):
    if rf == rr:
        return True
    c = args[0].upper()
    if c in TIME_COMMANDS and rf[0] == ":" and rr[0] == ":":
        f, r = rf[1], rr[1]
        if f < 0 or r < 0:
            return f == r
        slack = 5000 if c in ("PTTL", "PEXPIRETIME") else 5
        return abs(f - r) <= slack
    return False


def scan_all(conn):
    cursor, keys = b"0", []
    while True:
        reply = conn.call("SCAN", cursor, "COUNT", "3")
        cursor = reply[1][0][1]
        keys += [item[1] for item in reply[1][1][1]]
        if cursor == b"0":
            return sorted(keys)


def run(o, seed, diffs):
    f, rd = diffvs.Conn(o.forest, 2), diffvs.Conn(o.redis, 2)
    for conn in (f, rd):
        conn.call("FLUSHALL")
    r = random.Random(seed)
    for i in range(o.n):
        args = command(r)
        rf, rr = f.call(*args), rd.call(*args)
        if not same(args, rf, rr):
            diffs.append((seed, i, args, rf, rr))
        if i % 50 == 49:
            a, b = f.call("KEYS", "*"), rd.call("KEYS", "*")
            a, b = sorted(x[1] for x in a[1]), sorted(x[1] for x in b[1])
            if a != b:
                diffs.append((seed, i, ["KEYS", "*"], a, b))
            # Redis's DBSIZE counts expired keys not yet deleted, forest's does not
            # (docs/PROTOCOL.md "Expiry"): forest's is checked against its own KEYS.
            size = f.call("DBSIZE")
            if size != (":", len(a)):
                diffs.append((seed, i, ["DBSIZE"], size, (":", len(a))))
            a, b = scan_all(f), scan_all(rd)
            if a != b:
                diffs.append((seed, i, ["SCAN"], a, b))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--forest", required=True)
    p.add_argument("--redis", required=True)
    p.add_argument("--seeds", default="1,2,3")
    p.add_argument("-n", type=int, default=3000)
    p.add_argument("--mode", default="plain", choices=["plain", "multi", "eval"],
                   help="plain: one command at a time; multi: groups in MULTI/EXEC; eval: "
                        "groups in one EVAL returning the last reply")
    p.add_argument("--unit", type=int, default=4, help="commands per MULTI or EVAL group")
    o = p.parse_args()
    diffs = []
    seeds = [int(s) for s in o.seeds.split(",")]
    for seed in seeds:
        (run if o.mode == "plain" else run_units)(o, seed, diffs)
    print("commands: %d, differences: %d" % (o.n * len(seeds), len(diffs)))
    for seed, i, args, rf, rr in diffs[:40]:
        print("seed %d #%d: %s\n  forest: %r\n  redis:  %r" % (seed, i, " ".join(args), rf, rr))
    sys.exit(1 if diffs else 0)


if __name__ == "__main__":
    main()
