// ioredis (Node.js) driving `forest serve` as applications do (issue 15 "Real client
// libraries").
//
// Usage: node ioredis.js HOST PORT [--enable NAME,...]
//
// Every check compares a reply, as ioredis returns it, with what Redis returns for the same
// calls. The groups in TESTS run always; those in PENDING need features of other branches
// (transactions, expiry, pub/sub) and run only when named with --enable (see
// client_libraries.rs). Prints one line per group and exits 1 if any check failed.
"use strict";

const assert = require("node:assert");
const Redis = require("ioredis");

const failures = [];

function check(name, got, want) {
  try {
    assert.deepStrictEqual(got, want);
  } catch (e) {
    failures.push(`${name}: got ${JSON.stringify(got)}, want ${JSON.stringify(want)}`);
  }
}

async function raises(name, promise, text) {
  try {
    const got = await promise;
    failures.push(`${name}: returned ${JSON.stringify(got)}, want an error containing ${text}`);
  } catch (e) {
    if (!String(e.message).includes(text)) {
      failures.push(`${name}: error ${JSON.stringify(e.message)} lacks ${text}`);
    }
  }
}

// ---- groups that run now --------------------------------------------------------------

async function strings(r) {
  check("set", await r.set("s:a", "1"), "OK");
  check("get", await r.get("s:a"), "1");
  check("set nx", await r.set("s:a", "2", "NX"), null);
  check("mset", await r.mset({ "s:b": "2", "s:c": "3" }), "OK");
  check("mget", await r.mget("s:a", "s:b", "s:none"), ["1", "2", null]);
  check("incr", await r.incr("s:n"), 1);
  check("incrby", await r.incrby("s:n", 41), 42);
  check("append", await r.append("s:a", "xyz"), 4);
  check("getBuffer", await r.getBuffer("s:a"), Buffer.from("1xyz"));
  check("del", await r.del("s:b", "s:none"), 1);
  await raises("incr not int", r.incr("s:a"), "value is not an integer");
}

async function newStrings(r) {
  await r.set("n:k", "Hello World");
  check("getrange", await r.getrange("n:k", 0, 4), "Hello");
  check("getrange neg", await r.getrange("n:k", -5, -1), "World");
  check("substr", await r.substr("n:k", 6, -1), "World");
  check("setrange", await r.setrange("n:k", 6, "Redis"), 11);
  check("getdel", await r.getdel("n:k"), "Hello Redis");
  check("getdel gone", await r.getdel("n:k"), null);
  await raises("setrange neg", r.setrange("n:k", -1, "x"), "offset is out of range");
  await r.set("n:f", "10.50");
  check("incrbyfloat", await r.incrbyfloat("n:f", "0.1"), "10.6");
  check("incrbyfloat neg", await r.incrbyfloat("n:f", -5), "5.6");
  await r.set("n:e", "5.0e3");
  check("incrbyfloat exp", await r.incrbyfloat("n:e", "2.0e2"), "5200");
  await raises("incrbyfloat inf", r.incrbyfloat("n:f", "inf"), "NaN or Infinity");
  check("setbit", await r.setbit("n:b", 7, 1), 0);
  check("getbit", await r.getbit("n:b", 7), 1);
  await r.set("n:fb", "foobar");
  check("bitcount", await r.bitcount("n:fb"), 26);
  check("bitcount bit", await r.bitcount("n:fb", 5, 30, "BIT"), 17);
  await r.set("n:p", Buffer.from([0x00, 0xff, 0xf0]));
  check("bitpos", await r.bitpos("n:p", 1, 2, -1, "BYTE"), 16);
  await r.set("n:x", Buffer.from([0xff, 0x0f]));
  check("bitop", await r.bitop("NOT", "n:d", "n:x"), 2);
  check("bitop get", await r.getBuffer("n:d"), Buffer.from([0x00, 0xf0]));
  await r.mset("n:l1", "ohmytext", "n:l2", "mynewtext");
  check("lcs", await r.lcs("n:l1", "n:l2"), "mytext");
  check("lcs len", await r.lcs("n:l1", "n:l2", "LEN"), 6);
  check("lcs idx", await r.lcs("n:l1", "n:l2", "IDX", "MINMATCHLEN", 4, "WITHMATCHLEN"), [
    "matches",
    [[[4, 7], [5, 8], 4]],
    "len",
    6,
  ]);
}

async function keyspace(r) {
  await r.set("k:s", "v");
  await r.rpush("k:l", "a", "b");
  check("type", [await r.type("k:s"), await r.type("k:l"), await r.type("k:none")], [
    "string",
    "list",
    "none",
  ]);
  check("rename", await r.rename("k:l", "k:l2"), "OK");
  check("renamed", await r.lrange("k:l2", 0, -1), ["a", "b"]);
  await raises("rename missing", r.rename("k:none", "k:x"), "no such key");
  check("renamenx", await r.renamenx("k:s", "k:l2"), 0);
  check("copy", await r.copy("k:l2", "k:l3"), 1);
  check("copy replace", await r.copy("k:s", "k:l3", "REPLACE"), 1);
  check("copied", await r.get("k:l3"), "v");
  check("touch", await r.touch("k:s", "k:l2", "k:none"), 2);
  check("randomkey", await r.exists(await r.randomkey()), 1);
  check("object encoding", await r.object("ENCODING", "k:l2"), "listpack");
  check("function flush", await r.function("FLUSH"), "OK");
  check("flushall", await r.flushall(), "OK");
  check("randomkey empty", await r.randomkey(), null);
}

async function scan(r) {
  const pairs = [];
  for (let i = 0; i < 250; i++) pairs.push(`scan:${String(i).padStart(3, "0")}`, String(i));
  await r.mset(...pairs);
  await r.sadd("scan:set", "m");
  const keys = [];
  await new Promise((resolve, reject) => {
    const stream = r.scanStream({ match: "scan:*", count: 17 });
    stream.on("data", (batch) => keys.push(...batch));
    stream.on("end", resolve);
    stream.on("error", reject);
  });
  check("scanStream", keys.length, 251);
  check("scanStream distinct", new Set(keys).size, 251);
}

async function pipeline(r) {
  const replies = await r
    .pipeline()
    .set("p:a", 1)
    .incr("p:a")
    .get("p:a")
    .rpush("p:l", "x", "y")
    .lrange("p:l", 0, -1)
    .hset("p:h", "f", "v")
    .hgetall("p:h")
    .lpush("p:a", "oops")
    .exec();
  check(
    "pipeline",
    replies.slice(0, 7).map(([err, value]) => [err, value]),
    [
      [null, "OK"],
      [null, 2],
      [null, "2"],
      [null, 2],
      [null, ["x", "y"]],
      [null, 1],
      [null, { f: "v" }],
    ],
  );
  check("pipeline error", String(replies[7][0]).includes("WRONGTYPE"), true);
  const many = r.pipeline();
  for (let i = 0; i < 500; i++) many.set(`p:k${i}`, i);
  check("pipeline 500", (await many.exec()).every(([err]) => err === null), true);
}

async function collections(r) {
  check("hset", await r.hset("c:h", { a: "1", b: "2" }), 2);
  check("hgetall", await r.hgetall("c:h"), { a: "1", b: "2" });
  check("hincrby", await r.hincrby("c:h", "a", 5), 6);
  check("rpush", await r.rpush("c:l", "a", "b", "c"), 3);
  check("lpop", await r.lpop("c:l"), "a");
  check("lrange", await r.lrange("c:l", 0, -1), ["b", "c"]);
  check("sadd", await r.sadd("c:s", "x", "y"), 2);
  check("smembers", (await r.smembers("c:s")).sort(), ["x", "y"]);
  check("zadd", await r.zadd("c:z", 2, "two", 1, "one"), 2);
  check("zrange", await r.zrange("c:z", 0, -1, "WITHSCORES"), ["one", "1", "two", "2"]);
  check("zscore", await r.zscore("c:z", "two"), "2");
  check("xadd", await r.xadd("c:x", "1-1", "f", "v"), "1-1");
  check("xrange", await r.xrange("c:x", "-", "+"), [["1-1", ["f", "v"]]]);
  await raises("wrongtype", r.get("c:h"), "WRONGTYPE");
}

async function scripting(r) {
  await r.script("FLUSH");
  r.defineCommand("bump", { numberOfKeys: 1, lua: "return redis.call('incrby', KEYS[1], ARGV[1])" });
  check("defineCommand (EVALSHA, EVAL on NOSCRIPT)", await r.bump("sc:n", 5), 5);
  check("defineCommand again (EVALSHA)", await r.bump("sc:n", 2), 7);
  check("eval array", await r.eval("return {KEYS[1], ARGV[1], 3}", 1, "sc:k", "a"), ["sc:k", "a", 3]);
  check("eval nil", await r.eval("return redis.call('get', 'sc:none')", 0), null);
  check("eval status", await r.eval("return redis.status_reply('FINE')", 0), "FINE");
  const sha = await r.script("LOAD", "return 'loaded'");
  check("script exists", await r.script("EXISTS", sha), [1]);
  check("evalsha", await r.evalsha(sha, 0), "loaded");
  await raises("eval error", r.eval("return redis.call('nope')", 0), "Unknown Redis command called from script");
  await raises("evalsha noscript", r.evalsha("0".repeat(40), 0), "NOSCRIPT");
}

const TESTS = { strings, newStrings, keyspace, scan, pipeline, collections, scripting };

// ---- groups awaiting other branches (enabled by name from client_libraries.rs) -----------

async function transaction(r) {
  check("multi", await r.multi().set("t:a", 1).incr("t:a").exec(), [
    [null, "OK"],
    [null, 2],
  ]);
  const other = r.duplicate();
  await r.watch("t:a");
  await other.set("t:a", "changed");
  check("watch abort", await r.multi().set("t:a", "mine").exec(), null);
  check("watch kept", await r.get("t:a"), "changed");
  other.disconnect();
}

async function expiry(r) {
  check("setex", await r.setex("e:a", 100, "v"), "OK");
  const ttl = await r.ttl("e:a");
  check("ttl", ttl > 0 && ttl <= 100, true);
  check("set px", await r.set("e:b", "v", "PX", 300), "OK");
  check("expire", await r.expire("e:a", 1), 1);
  await new Promise((resolve) => setTimeout(resolve, 1300));
  check("expired", [await r.get("e:a"), await r.get("e:b")], [null, null]);
}

async function pubsub(r) {
  const sub = r.duplicate();
  const got = new Promise((resolve) => sub.on("message", (channel, message) => resolve([channel, message])));
  await sub.subscribe("ps:ch");
  check("publish", await r.publish("ps:ch", "hello"), 1);
  check("message", await got, ["ps:ch", "hello"]);
  sub.disconnect();
}

const PENDING = { transaction, expiry, pubsub };

async function main() {
  const args = process.argv.slice(2);
  const [host, port] = [args[0], Number(args[1])];
  const at = args.indexOf("--enable");
  // "lock" is redis-py's Lock: nothing of ioredis's to run for it.
  const enabled = at >= 0 ? args[at + 1].split(",").filter((n) => n && n !== "lock") : [];
  const unknown = enabled.filter((n) => !(n in PENDING));
  if (unknown.length) {
    console.log(`unknown pending groups: ${unknown}`);
    return 2;
  }
  const version = require("ioredis/package.json").version;
  const r = new Redis({ host, port, maxRetriesPerRequest: 1, commandTimeout: 30000 });
  await r.flushall();
  const groups = Object.entries(TESTS).concat(enabled.map((n) => [n, PENDING[n]]));
  for (const [name, group] of groups) {
    const before = failures.length;
    try {
      await group(r);
    } catch (e) {
      failures.push(`${name}: ${e.name}: ${e.message}`);
    }
    console.log(`ioredis ${version} ${name}: ${failures.length === before ? "ok" : "FAILED"}`);
  }
  r.disconnect();
  for (const failure of failures) console.log(`  ${failure}`);
  return failures.length ? 1 : 0;
}

main().then(
  (code) => process.exit(code),
  (e) => {
    console.log(`ioredis: ${e.stack}`);
    process.exit(1);
  },
);
