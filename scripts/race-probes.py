#!/usr/bin/env python3
"""Race probes: torn reads in forest commands that read a collection in more than one step
without its stripe lock (SRANDMEMBER count >= size, SMISMEMBER, ZMSCORE, ZRANK).
  scripts/race-probes.py PORT   (a running forest serve; redis-server shows 0 for each)"""
import sys

# ---- diff-race.py
def probe_diff_race():
    import threading, time, redis
    P=int(sys.argv[1])
    stop=False
    def writer():
        r=redis.Redis(port=P)
        while not stop:
            r.sadd("race", "m1","m2","m3")
            r.sadd("race", "n1","n2","n3","n4")
            r.srem("race", "n1","n2","n3","n4")
    bad=[0,0]
    def reader():
        r=redis.Redis(port=P)
        while not stop:
            v=r.srandmember("race", 4)
            bad[1]+=1
            if len(v)>4 or len(set(v))!=len(v):
                bad[0]+=1
                if bad[0]<4: print("SRANDMEMBER race 4 ->", len(v), v)
    ts=[threading.Thread(target=writer),threading.Thread(target=reader)]
    for t in ts: t.start()
    time.sleep(20); stop=True
    for t in ts: t.join()
    print("bad", bad[0], "of", bad[1])

# ---- diff-race2.py
def probe_diff_race2():
    import threading, time, redis
    P=int(sys.argv[1])
    stop=False
    def writer():
        r=redis.Redis(port=P)
        while not stop:
            r.sadd("race2", "a","b"); r.srem("race2","a","b")
            r.zadd("racez", {"x":1,"y":2,"m":1.5}); r.zadd("racez", {"x":3,"y":0})
    bad={"smis":0,"zrank":0}; n=[0]
    def reader():
        r=redis.Redis(port=P)
        while not stop:
            v=r.smismember("race2", ["a","b"]); n[0]+=1
            if v[0]!=v[1]:
                bad["smis"]+=1
                if bad["smis"]<3: print("SMISMEMBER race2 a b ->", v)
            k=r.zrank("racez","m")
            if k not in (None,1):
                bad["zrank"]+=1
                if bad["zrank"]<3: print("ZRANK racez m ->", k, "(always 1 in any committed state)")
    ts=[threading.Thread(target=writer),threading.Thread(target=reader)]
    for t in ts: t.start()
    time.sleep(15); stop=True
    for t in ts: t.join()
    print(bad, "of", n[0])

# ---- diff-race3.py
def probe_diff_race3():
    import threading, time, redis
    P=int(sys.argv[1])
    stop=False
    def writer():
        r=redis.Redis(port=P)
        r.zadd("rz", {"a":1,"b":2,"m":5})
        while not stop:
            r.zadd("rz", {"m":0}); r.zadd("rz", {"m":5})
            r.zadd("rm", {"a":1,"b":1}); r.zrem("rm","a","b")
    bad={"zrank":0,"zmscore":0}; n=[0]
    def reader():
        r=redis.Redis(port=P)
        while not stop:
            k=r.zrank("rz","m"); n[0]+=1
            if k not in (0,2):
                bad["zrank"]+=1
                if bad["zrank"]<3: print("ZRANK rz m ->", k, "(0 or 2 in any committed state)")
            v=r.zmscore("rm",["a","b"])
            if (v[0] is None)!=(v[1] is None):
                bad["zmscore"]+=1
                if bad["zmscore"]<3: print("ZMSCORE rm a b ->", v)
    ts=[threading.Thread(target=writer),threading.Thread(target=reader)]
    for t in ts: t.start()
    time.sleep(15); stop=True
    for t in ts: t.join()
    print(bad, "of", n[0])

for p in [probe_diff_race, probe_diff_race2, probe_diff_race3]:
    p()
