//! The command table ([`COMMAND_SPECS`]) and COMMAND, COMMAND COUNT / INFO / DOCS / LIST,
//! enough for redis-cli's hints and for client libraries that read key positions.
//!
//! COMMAND DOCS builds each command's `arguments` from its usage line: `key` is a key,
//! `[...]` optional, `A|B` a choice of tokens, an upper-case word a token, `TOKEN name` a
//! token with a value, `...` repeats the item before it. Flags are simple strings: redis-cli
//! asserts that they are.

use super::{
    asof, blocking, client, config, connection, dbsize, del, exists, expire, flush, get, hash,
    incr, info, is_word, keys, keyspace, list, mget, multi, pubsub, range, save, scan, script, set,
    sets, shutdown, stream, strlen, time, unknown_subcommand, zset, Ctx, Reply, Spec,
};
use crate::frame::Frame;

const W: &[&str] = &["write", "denyoom"];
const WF: &[&str] = &["write", "denyoom", "fast"];
const R: &[&str] = &["readonly"];
const RF: &[&str] = &["readonly", "fast"];
const DEL: &[&str] = &["write"];
const CONN: &[&str] = &["noscript", "loading", "stale", "fast"];
/// Connection commands Redis lets scripts call (ECHO, SELECT).
const CONN_SCRIPT: &[&str] = &["loading", "stale", "fast"];
/// EVAL and EVALSHA: Redis's flags, `movablekeys` from their `numkeys` key spec.
const EVAL: &[&str] = &[
    "noscript",
    "stale",
    "skip_monitor",
    "may_replicate",
    "no_mandatory_keys",
    "movablekeys",
];
const EVAL_RO: &[&str] = &[
    "readonly",
    "noscript",
    "stale",
    "skip_monitor",
    "no_mandatory_keys",
    "movablekeys",
];
/// Commands whose keys follow a `numkeys` argument: `movablekeys` makes EXEC take every
/// stripe lock for them (`multi::keyspace_wide`), since their key positions are not fixed.
const MPOP: &[&str] = &["write", "movablekeys"];
const MOVABLE_R: &[&str] = &["readonly", "movablekeys"];
const MOVABLE_W: &[&str] = &["write", "denyoom", "movablekeys"];
const ADMIN: &[&str] = &["admin", "noscript"];
const TXN: &[&str] = &["noscript", "loading", "stale", "fast", "allow_busy"];
/// Blocking pops: Redis 7.0 refuses them in scripts.
const BLOCKING: &[&str] = &["write", "noscript", "blocking"];
const BLOCKING_FAST: &[&str] = &["write", "noscript", "blocking", "fast"];
const BLOCKING_MOVE: &[&str] = &["write", "denyoom", "noscript", "blocking"];
const BLOCKING_MPOP: &[&str] = &["write", "noscript", "blocking", "movablekeys"];
const PUBSUB: &[&str] = &["pubsub", "noscript", "loading", "stale"];

macro_rules! spec {
    ($name:literal, $arity:expr, $flags:expr, ($first:expr, $last:expr, $step:expr), $group:literal,
     $since:literal, $summary:literal, $usage:literal, $run:expr) => {
        Spec {
            name: $name,
            arity: $arity,
            flags: $flags,
            first_key: $first,
            last_key: $last,
            step: $step,
            group: $group,
            since: $since,
            summary: $summary,
            usage: $usage,
            run: $run,
        }
    };
}

/// Every command forest answers (docs/PROTOCOL.md lists the same).
pub static COMMAND_SPECS: &[Spec] = &[
    spec!("ping", -1, &["fast"], (0, 0, 0), "connection", "1.0.0", "Returns the server's liveliness response.", "[message]", connection::ping),
    spec!("echo", 2, CONN_SCRIPT, (0, 0, 0), "connection", "1.0.0", "Returns the given string.", "message", connection::echo),
    spec!("hello", -1, CONN, (0, 0, 0), "connection", "6.0.0", "Handshakes with the server: protocol version, authentication, name.", "[protover [AUTH username password] [SETNAME clientname]]", connection::hello),
    spec!("auth", -2, CONN, (0, 0, 0), "connection", "1.0.0", "Authenticates the connection.", "[username] password", connection::auth),
    spec!("select", 2, CONN_SCRIPT, (0, 0, 0), "connection", "1.0.0", "Changes the selected database (forest has only database 0).", "index", connection::select),
    spec!("quit", -1, CONN, (0, 0, 0), "connection", "1.0.0", "Closes the connection.", "", connection::quit),
    spec!("client", -2, &["noscript", "loading", "stale"], (0, 0, 0), "connection", "2.4.0", "Client connection commands: SETNAME, GETNAME, ID, LIST, INFO, SETINFO, UNBLOCK.", "SETNAME|GETNAME|ID|LIST|INFO|SETINFO|UNBLOCK [arg ...]", client::client),
    spec!("get", 2, RF, (1, 1, 1), "string", "1.0.0", "Returns the string value of a key.", "key", get::get),
    spec!("set", -3, W, (1, 1, 1), "string", "1.0.0", "Sets the string value of a key; NX only if absent, XX only if present, GET returns the old value; EX/PX/EXAT/PXAT set a deadline, KEEPTTL keeps it.", "key value [NX|XX] [GET] [EX seconds] [PX milliseconds] [EXAT unix-time-seconds] [PXAT unix-time-milliseconds] [KEEPTTL]", set::set),
    spec!("setex", 4, W, (1, 1, 1), "string", "2.0.0", "Sets a key with a deadline in seconds.", "key seconds value", expire::setex),
    spec!("psetex", 4, W, (1, 1, 1), "string", "2.6.0", "Sets a key with a deadline in milliseconds.", "key milliseconds value", expire::psetex),
    spec!("getex", -2, WF, (1, 1, 1), "string", "6.2.0", "Returns a string and sets or clears its deadline.", "key [EX seconds] [PX milliseconds] [EXAT unix-time-seconds] [PXAT unix-time-milliseconds] [PERSIST]", expire::getex),
    spec!("setnx", 3, WF, (1, 1, 1), "string", "1.0.0", "Sets a key only if it does not exist.", "key value", set::setnx),
    spec!("getset", 3, WF, (1, 1, 1), "string", "1.0.0", "Sets a key and returns its old value.", "key value", set::getset),
    spec!("mget", -2, RF, (1, -1, 1), "string", "1.0.0", "Returns the values of one or more keys.", "key ...", mget::mget),
    spec!("mset", -3, W, (1, -1, 2), "string", "1.0.1", "Sets one or more keys (each atomic, the whole not).", "key value ...", set::mset),
    spec!("msetnx", -3, W, (1, -1, 2), "string", "1.0.1", "Sets keys only if none exists (checked key by key).", "key value ...", set::msetnx),
    spec!("append", 3, W, (1, 1, 1), "string", "2.0.0", "Appends to a key's value; returns the new length.", "key value", set::append),
    spec!("strlen", 2, RF, (1, 1, 1), "string", "2.2.0", "Returns the length of a value.", "key", strlen::strlen),
    spec!("incr", 2, WF, (1, 1, 1), "string", "1.0.0", "Increments an integer value by one.", "key", incr::incr),
    spec!("decr", 2, WF, (1, 1, 1), "string", "1.0.0", "Decrements an integer value by one.", "key", incr::decr),
    spec!("incrby", 3, WF, (1, 1, 1), "string", "1.0.0", "Increments an integer value by a number.", "key increment", incr::incrby),
    spec!("decrby", 3, WF, (1, 1, 1), "string", "1.0.0", "Decrements an integer value by a number.", "key decrement", incr::decrby),
    spec!("getdel", 2, WF, (1, 1, 1), "string", "6.2.0", "Returns the string value of a key and removes the key.", "key", super::strings::getdel),
    spec!("getrange", 4, R, (1, 1, 1), "string", "2.4.0", "Returns a substring of a string value.", "key start end", super::strings::getrange),
    spec!("substr", 4, R, (1, 1, 1), "string", "1.0.0", "Returns a substring of a string value (GETRANGE).", "key start end", super::strings::getrange),
    spec!("setrange", 4, W, (1, 1, 1), "string", "2.2.0", "Overwrites part of a string value from an offset; returns the new length.", "key offset value", super::strings::setrange),
    spec!("incrbyfloat", 3, WF, (1, 1, 1), "string", "2.6.0", "Increments a value by a decimal number.", "key increment", super::strings::incrbyfloat),
    spec!("lcs", -3, R, (1, 2, 1), "string", "7.0.0", "Finds the longest common subsequence of two strings.", "key1 key2 [LEN] [IDX] [MINMATCHLEN min-match-len] [WITHMATCHLEN]", super::strings::lcs),
    spec!("setbit", 4, W, (1, 1, 1), "bitmap", "2.2.0", "Sets or clears a bit of a string value; returns the old bit.", "key offset value", super::bits::setbit),
    spec!("getbit", 3, RF, (1, 1, 1), "bitmap", "2.2.0", "Returns a bit of a string value.", "key offset", super::bits::getbit),
    spec!("bitcount", -2, R, (1, 1, 1), "bitmap", "2.6.0", "Counts the set bits of a string value, or of a byte or bit range.", "key [start end [BYTE|BIT]]", super::bits::bitcount),
    spec!("bitpos", -3, R, (1, 1, 1), "bitmap", "2.8.7", "Finds the first set or clear bit in a string value.", "key bit [start [end [BYTE|BIT]]]", super::bits::bitpos),
    spec!("bitop", -4, W, (2, -1, 1), "bitmap", "2.6.0", "Stores the AND, OR, XOR or NOT of strings in a key.", "AND|OR|XOR|NOT destkey key ...", super::bits::bitop),
    spec!("rename", 3, &["write"], (1, 2, 1), "generic", "1.0.0", "Renames a key of any type, replacing the destination.", "key newkey", super::rename::rename),
    spec!("renamenx", 3, WF, (1, 2, 1), "generic", "1.0.0", "Renames a key only if the new name does not exist.", "key newkey", super::rename::renamenx),
    spec!("copy", -3, W, (1, 2, 1), "generic", "6.2.0", "Copies a key of any type (database 0 only).", "source destination [DB destination-db] [REPLACE]", super::rename::copy),
    spec!("randomkey", 1, R, (0, 0, 0), "generic", "1.0.0", "Returns a random key (not uniformly random).", "", super::randomkey::randomkey),
    spec!("touch", -2, RF, (1, -1, 1), "generic", "3.2.1", "Counts the given keys that exist (forest keeps no access times).", "key ...", exists::exists),
    spec!("object", -2, R, (0, 0, 0), "generic", "2.2.3", "Inspects keys: ENCODING (Redis's encoding for the key's type and size), HELP.", "ENCODING|HELP [key]", super::object::object),
    spec!("eval", -3, EVAL, (0, 0, 0), "scripting", "2.6.0", "Runs a Lua script as one atomic batch.", "script numkeys [key ...] [arg ...]", script::eval),
    spec!("evalsha", -3, EVAL, (0, 0, 0), "scripting", "2.6.0", "Runs a cached Lua script by its SHA1 digest.", "sha1 numkeys [key ...] [arg ...]", script::evalsha),
    spec!("eval_ro", -3, EVAL_RO, (0, 0, 0), "scripting", "7.0.0", "Runs a read-only Lua script.", "script numkeys [key ...] [arg ...]", script::eval_ro),
    spec!("evalsha_ro", -3, EVAL_RO, (0, 0, 0), "scripting", "7.0.0", "Runs a cached read-only Lua script by its SHA1 digest.", "sha1 numkeys [key ...] [arg ...]", script::evalsha_ro),
    spec!("script", -2, &["noscript"], (0, 0, 0), "scripting", "2.6.0", "Script cache commands: LOAD, EXISTS, FLUSH, KILL, HELP.", "LOAD|EXISTS|FLUSH|KILL|HELP [arg ...]", script::script),
    spec!("function", -2, &["noscript"], (0, 0, 0), "scripting", "7.0.0", "Functions: FLUSH and LIST (forest loads no functions).", "FLUSH|LIST [arg ...]", super::object::function),
    spec!("del", -2, DEL, (1, -1, 1), "generic", "1.0.0", "Deletes keys; returns how many existed.", "key ...", del::del),
    spec!("unlink", -2, DEL, (1, -1, 1), "generic", "4.0.0", "Deletes keys (same as DEL in forest).", "key ...", del::del),
    spec!("exists", -2, RF, (1, -1, 1), "generic", "1.0.0", "Counts the given keys that exist.", "key ...", exists::exists),
    spec!("type", 2, RF, (1, 1, 1), "generic", "1.0.0", "Returns a key's type: string, list, set, hash, zset, stream or none.", "key", keyspace::type_),
    spec!("ttl", 2, RF, (1, 1, 1), "generic", "1.0.0", "Returns a key's time to live in seconds, -1 without a deadline, -2 if absent.", "key", expire::ttl),
    spec!("pttl", 2, RF, (1, 1, 1), "generic", "2.6.0", "Returns a key's time to live in milliseconds, -1 without a deadline, -2 if absent.", "key", expire::pttl),
    spec!("expiretime", 2, RF, (1, 1, 1), "generic", "7.0.0", "Returns a key's deadline as a Unix time in seconds, -1 without one, -2 if absent.", "key", expire::expiretime),
    spec!("pexpiretime", 2, RF, (1, 1, 1), "generic", "7.0.0", "Returns a key's deadline as a Unix time in milliseconds, -1 without one, -2 if absent.", "key", expire::pexpiretime),
    spec!("expire", -3, WF, (1, 1, 1), "generic", "1.0.0", "Sets a key's deadline in seconds from now; NX, XX, GT, LT compare with the current one.", "key seconds [NX|XX|GT|LT]", expire::expire),
    spec!("pexpire", -3, WF, (1, 1, 1), "generic", "2.6.0", "Sets a key's deadline in milliseconds from now; NX, XX, GT, LT compare with the current one.", "key milliseconds [NX|XX|GT|LT]", expire::pexpire),
    spec!("expireat", -3, WF, (1, 1, 1), "generic", "1.2.0", "Sets a key's deadline as a Unix time in seconds.", "key unix-time-seconds [NX|XX|GT|LT]", expire::expireat),
    spec!("pexpireat", -3, WF, (1, 1, 1), "generic", "2.6.0", "Sets a key's deadline as a Unix time in milliseconds.", "key unix-time-milliseconds [NX|XX|GT|LT]", expire::pexpireat),
    spec!("persist", 2, WF, (1, 1, 1), "generic", "2.2.0", "Removes a key's deadline.", "key", expire::persist),
    spec!("scan", -2, R, (0, 0, 0), "generic", "2.8.0", "Iterates over keys in key order.", "cursor [MATCH pattern] [COUNT count] [TYPE type]", scan::scan),
    spec!("keys", 2, R, (0, 0, 0), "generic", "1.0.0", "Returns the keys matching a pattern, in key order.", "pattern", keys::keys),
    spec!("dbsize", 1, RF, (0, 0, 0), "server", "1.0.0", "Returns the number of keys.", "", dbsize::dbsize),
    spec!("flushdb", -1, W, (0, 0, 0), "server", "1.0.0", "Removes every key.", "[ASYNC|SYNC]", flush::flushdb),
    spec!("flushall", -1, W, (0, 0, 0), "server", "1.0.0", "Removes every key.", "[ASYNC|SYNC]", flush::flushdb),
    spec!("info", -1, &["loading", "stale"], (0, 0, 0), "server", "1.0.0", "Returns information and statistics about the server.", "[section ...]", info::info),
    spec!("config", -2, &["admin", "noscript", "loading", "stale"], (0, 0, 0), "server", "2.0.0", "Reads the configuration (GET), accepts harmless SETs, RESETSTAT.", "GET|SET|RESETSTAT [arg ...]", config::config),
    spec!("command", -1, &["loading", "stale"], (0, 0, 0), "server", "2.8.13", "Returns information about commands: COUNT, INFO, DOCS, LIST.", "[COUNT|INFO|DOCS|LIST [command-name ...]]", command),
    spec!("shutdown", -1, &["admin", "noscript", "loading", "stale"], (0, 0, 0), "server", "1.0.0", "Stops the server after making the log durable; SAVE also checkpoints.", "[NOSAVE|SAVE] [NOW] [FORCE]", shutdown::shutdown),
    spec!("save", 1, ADMIN, (0, 0, 0), "server", "1.0.0", "Writes a checkpoint and waits for it.", "", save::save),
    spec!("bgsave", -1, ADMIN, (0, 0, 0), "server", "1.0.0", "Writes a checkpoint in the background.", "[SCHEDULE]", save::bgsave),
    spec!("debug", -2, ADMIN, (0, 0, 0), "server", "1.0.0", "Debugging: SET-ACTIVE-EXPIRE 0|1 turns the background deletion of expired keys off or on.", "SET-ACTIVE-EXPIRE 0|1", expire::debug),
    spec!("lastsave", 1, &["loading", "stale", "fast"], (0, 0, 0), "server", "1.0.0", "Returns the Unix time of the last successful checkpoint.", "", save::lastsave),
    spec!("time", 1, &["loading", "stale", "fast"], (0, 0, 0), "server", "2.6.0", "Returns the server time.", "", time::time),
    spec!("lpush", -3, WF, (1, 1, 1), "list", "1.0.0", "Prepends elements to a list; returns its length.", "key element ...", list::lpush),
    spec!("rpush", -3, WF, (1, 1, 1), "list", "1.0.0", "Appends elements to a list; returns its length.", "key element ...", list::rpush),
    spec!("blpop", -3, BLOCKING, (1, -2, 1), "list", "2.0.0", "Removes and returns the first element of the first non-empty list, or blocks until one is available.", "key [key ...] timeout", blocking::blpop),
    spec!("brpop", -3, BLOCKING, (1, -2, 1), "list", "2.0.0", "Removes and returns the last element of the first non-empty list, or blocks until one is available.", "key [key ...] timeout", blocking::brpop),
    spec!("bzpopmin", -3, BLOCKING_FAST, (1, -2, 1), "sorted-set", "5.0.0", "Removes and returns the member with the lowest score of the first non-empty sorted set, or blocks until one is available.", "key [key ...] timeout", blocking::bzpopmin),
    spec!("bzpopmax", -3, BLOCKING_FAST, (1, -2, 1), "sorted-set", "5.0.0", "Removes and returns the member with the highest score of the first non-empty sorted set, or blocks until one is available.", "key [key ...] timeout", blocking::bzpopmax),
    spec!("lpop", -2, WF, (1, 1, 1), "list", "1.0.0", "Removes and returns the first elements of a list.", "key [count]", list::lpop),
    spec!("rpop", -2, WF, (1, 1, 1), "list", "1.0.0", "Removes and returns the last elements of a list.", "key [count]", list::rpop),
    spec!("lrange", 4, R, (1, 1, 1), "list", "1.0.0", "Returns a range of elements of a list by index.", "key start stop", list::lrange),
    spec!("llen", 2, RF, (1, 1, 1), "list", "1.0.0", "Returns the length of a list.", "key", list::llen),
    spec!("lindex", 3, R, (1, 1, 1), "list", "1.0.0", "Returns an element of a list by index.", "key index", list::lindex),
    spec!("lpushx", -3, WF, (1, 1, 1), "list", "2.2.0", "Prepends elements to a list only if it exists.", "key element [element ...]", list::lpushx),
    spec!("rpushx", -3, WF, (1, 1, 1), "list", "2.2.0", "Appends elements to a list only if it exists.", "key element [element ...]", list::rpushx),
    spec!("lset", 4, W, (1, 1, 1), "list", "1.0.0", "Sets the element at an index of a list.", "key index element", list::lset),
    spec!("ltrim", 4, W, (1, 1, 1), "list", "1.0.0", "Keeps only the elements in an index range of a list.", "key start stop", list::ltrim),
    spec!("lrem", 4, W, (1, 1, 1), "list", "1.0.0", "Removes elements equal to a value from a list.", "key count element", list::lrem),
    spec!("linsert", 5, W, (1, 1, 1), "list", "2.2.0", "Inserts an element before or after a pivot element of a list.", "key BEFORE|AFTER pivot element", list::linsert),
    spec!("lpos", -3, R, (1, 1, 1), "list", "6.0.6", "Returns the indexes of matching elements of a list.", "key element [RANK rank] [COUNT num-matches] [MAXLEN len]", list::lpos),
    spec!("blmove", 6, BLOCKING_MOVE, (1, 2, 1), "list", "6.2.0", "Pops an element from one end of a list and pushes it at an end of another (or the same) list, or blocks until one is available.", "source destination LEFT|RIGHT LEFT|RIGHT timeout", blocking::blmove),
    spec!("brpoplpush", 4, BLOCKING_MOVE, (1, 2, 1), "list", "2.2.0", "Pops the last element of a list and pushes it at the head of another (or the same) list, or blocks until one is available.", "source destination timeout", blocking::brpoplpush),
    spec!("blmpop", -5, BLOCKING_MPOP, (0, 0, 0), "list", "7.0.0", "Pops elements from the first non-empty list of several, or blocks until one is available.", "timeout numkeys key [key ...] LEFT|RIGHT [COUNT count]", blocking::blmpop),
    spec!("lmove", 5, W, (1, 2, 1), "list", "6.2.0", "Pops an element from one end of a list and pushes it at an end of another (or the same) list.", "source destination LEFT|RIGHT LEFT|RIGHT", super::lmove::lmove),
    spec!("rpoplpush", 3, W, (1, 2, 1), "list", "1.2.0", "Pops the last element of a list and pushes it at the head of another (or the same) list.", "source destination", super::lmove::rpoplpush),
    spec!("lmpop", -4, MPOP, (0, 0, 0), "list", "7.0.0", "Pops elements from the first non-empty list of several.", "numkeys key [key ...] LEFT|RIGHT [COUNT count]", super::lmove::lmpop),
    spec!("sadd", -3, WF, (1, 1, 1), "set", "1.0.0", "Adds members to a set; returns how many were new.", "key member ...", sets::sadd),
    spec!("srem", -3, &["write", "fast"], (1, 1, 1), "set", "1.0.0", "Removes members from a set; returns how many were there.", "key member ...", sets::srem),
    spec!("spop", -2, &["write", "fast"], (1, 1, 1), "set", "1.0.0", "Removes and returns random members of a set.", "key [count]", sets::spop),
    spec!("smembers", 2, R, (1, 1, 1), "set", "1.0.0", "Returns every member of a set, in member order.", "key", sets::smembers),
    spec!("scard", 2, RF, (1, 1, 1), "set", "1.0.0", "Returns the number of members of a set.", "key", sets::scard),
    spec!("sismember", 3, RF, (1, 1, 1), "set", "1.0.0", "Tells whether a member is in a set.", "key member", sets::sismember),
    spec!("smismember", -3, RF, (1, 1, 1), "set", "6.2.0", "Tells for each member whether it is in a set.", "key member [member ...]", sets::smismember),
    spec!("srandmember", -2, R, (1, 1, 1), "set", "1.0.0", "Returns random members of a set.", "key [count]", sets::srandmember),
    spec!("sscan", -3, R, (1, 1, 1), "set", "2.8.0", "Iterates over the members of a set.", "key cursor [MATCH pattern] [COUNT count]", sets::sscan),
    spec!("sinter", -2, R, (1, -1, 1), "set", "1.0.0", "Returns the members in every given set.", "key [key ...]", sets::sinter),
    spec!("sintercard", -3, R, (0, 0, 0), "set", "7.0.0", "Counts the members in every given set, up to a limit.", "numkeys key [key ...] [LIMIT limit]", sets::sintercard),
    spec!("sunion", -2, R, (1, -1, 1), "set", "1.0.0", "Returns the members of any given set.", "key [key ...]", sets::sunion),
    spec!("sdiff", -2, R, (1, -1, 1), "set", "1.0.0", "Returns the members of the first set in none of the others.", "key [key ...]", sets::sdiff),
    spec!("smove", 4, &["write", "fast"], (1, 2, 1), "set", "1.0.0", "Moves a member from one set to another.", "source destination member", super::setops::smove),
    spec!("sinterstore", -3, W, (1, -1, 1), "set", "1.0.0", "Stores the members in every given set in a key.", "destination key [key ...]", super::setops::sinterstore),
    spec!("sunionstore", -3, W, (1, -1, 1), "set", "1.0.0", "Stores the members of any given set in a key.", "destination key [key ...]", super::setops::sunionstore),
    spec!("sdiffstore", -3, W, (1, -1, 1), "set", "1.0.0", "Stores the members of the first set in none of the others in a key.", "destination key [key ...]", super::setops::sdiffstore),
    spec!("hset", -4, WF, (1, 1, 1), "hash", "2.0.0", "Sets fields of a hash; returns how many were new.", "key field value ...", hash::hset),
    spec!("hget", 3, RF, (1, 1, 1), "hash", "2.0.0", "Returns the value of a field of a hash.", "key field", hash::hget),
    spec!("hmget", -3, RF, (1, 1, 1), "hash", "2.0.0", "Returns the values of fields of a hash.", "key field ...", hash::hmget),
    spec!("hgetall", 2, R, (1, 1, 1), "hash", "2.0.0", "Returns every field and value of a hash, in field order.", "key", hash::hgetall),
    spec!("hdel", -3, &["write", "fast"], (1, 1, 1), "hash", "2.0.0", "Removes fields from a hash; returns how many were there.", "key field ...", hash::hdel),
    spec!("hlen", 2, RF, (1, 1, 1), "hash", "2.0.0", "Returns the number of fields of a hash.", "key", hash::hlen),
    spec!("hexists", 3, RF, (1, 1, 1), "hash", "2.0.0", "Tells whether a field exists in a hash.", "key field", hash::hexists),
    spec!("hincrby", 4, WF, (1, 1, 1), "hash", "2.0.0", "Increments the integer value of a field of a hash.", "key field increment", hash::hincrby),
    spec!("hmset", -4, WF, (1, 1, 1), "hash", "2.0.0", "Sets fields of a hash (deprecated form of HSET); replies OK.", "key field value ...", hash::hmset),
    spec!("hsetnx", 4, WF, (1, 1, 1), "hash", "2.0.0", "Sets a field of a hash only if it does not exist.", "key field value", hash::hsetnx),
    spec!("hkeys", 2, R, (1, 1, 1), "hash", "2.0.0", "Returns every field of a hash, in field order.", "key", hash::hkeys),
    spec!("hvals", 2, R, (1, 1, 1), "hash", "2.0.0", "Returns every value of a hash, in field order.", "key", hash::hvals),
    spec!("hstrlen", 3, RF, (1, 1, 1), "hash", "3.2.0", "Returns the length of the value of a field of a hash.", "key field", hash::hstrlen),
    spec!("hincrbyfloat", 4, WF, (1, 1, 1), "hash", "2.6.0", "Increments the floating-point value of a field of a hash.", "key field increment", hash::hincrbyfloat),
    spec!("hrandfield", -2, R, (1, 1, 1), "hash", "6.2.0", "Returns random fields of a hash, optionally with their values.", "key [count [WITHVALUES]]", hash::hrandfield),
    spec!("hscan", -3, R, (1, 1, 1), "hash", "2.8.0", "Iterates over the fields and values of a hash.", "key cursor [MATCH pattern] [COUNT count] [NOVALUES]", hash::hscan),
    spec!("zadd", -4, WF, (1, 1, 1), "sorted-set", "1.2.0", "Adds members with scores to a sorted set, or updates their scores; NX/XX/GT/LT/CH/INCR as Redis.", "key [NX|XX] [GT|LT] [CH] [INCR] score member [score member ...]", zset::zadd),
    spec!("zincrby", 4, WF, (1, 1, 1), "sorted-set", "1.2.0", "Increments the score of a member of a sorted set.", "key increment member", zset::zincrby),
    spec!("zpopmax", -2, &["write", "fast"], (1, 1, 1), "sorted-set", "5.0.0", "Removes and returns the members with the highest scores.", "key [count]", zset::zpopmax),
    spec!("zrevrange", -4, R, (1, 1, 1), "sorted-set", "1.2.0", "Returns members of a sorted set by rank, highest first.", "key start stop [WITHSCORES]", zset::zrevrange),
    spec!("zrangebyscore", -4, R, (1, 1, 1), "sorted-set", "1.0.5", "Returns members of a sorted set within a score range.", "key min max [WITHSCORES] [LIMIT offset count]", zset::zrangebyscore),
    spec!("zrevrangebyscore", -4, R, (1, 1, 1), "sorted-set", "2.2.0", "Returns members of a sorted set within a score range, highest first.", "key max min [WITHSCORES] [LIMIT offset count]", zset::zrevrangebyscore),
    spec!("zcount", 4, RF, (1, 1, 1), "sorted-set", "2.0.0", "Counts the members of a sorted set within a score range.", "key min max", zset::zcount),
    spec!("zrank", 3, RF, (1, 1, 1), "sorted-set", "2.0.0", "Returns the rank of a member, lowest score first.", "key member", zset::zrank),
    spec!("zrevrank", 3, RF, (1, 1, 1), "sorted-set", "2.0.0", "Returns the rank of a member, highest score first.", "key member", zset::zrevrank),
    spec!("zmscore", -3, RF, (1, 1, 1), "sorted-set", "6.2.0", "Returns the scores of members of a sorted set.", "key member [member ...]", zset::zmscore),
    spec!("zremrangebyscore", 4, W, (1, 1, 1), "sorted-set", "1.2.0", "Removes the members within a score range.", "key min max", zset::zremrangebyscore),
    spec!("zremrangebyrank", 4, W, (1, 1, 1), "sorted-set", "2.0.0", "Removes the members within a rank range.", "key start stop", zset::zremrangebyrank),
    spec!("zscan", -3, R, (1, 1, 1), "sorted-set", "2.8.0", "Iterates over the members and scores of a sorted set, in member order.", "key cursor [MATCH pattern] [COUNT count]", zset::zscan),
    spec!("zrandmember", -2, R, (1, 1, 1), "sorted-set", "6.2.0", "Returns random members of a sorted set, optionally with their scores.", "key [count [WITHSCORES]]", zset::zrandmember),
    spec!("zpopmin", -2, &["write", "fast"], (1, 1, 1), "sorted-set", "5.0.0", "Removes and returns the members with the lowest scores.", "key [count]", zset::zpopmin),
    spec!("zrange", -4, R, (1, 1, 1), "sorted-set", "1.2.0", "Returns members of a sorted set by rank or score range, either direction, with LIMIT.", "key start stop [BYSCORE] [REV] [LIMIT offset count] [WITHSCORES]", zset::zrange),
    spec!("zcard", 2, RF, (1, 1, 1), "sorted-set", "1.2.0", "Returns the number of members of a sorted set.", "key", zset::zcard),
    spec!("zscore", 3, RF, (1, 1, 1), "sorted-set", "1.2.0", "Returns the score of a member of a sorted set.", "key member", zset::zscore),
    spec!("zrem", -3, &["write", "fast"], (1, 1, 1), "sorted-set", "1.2.0", "Removes members from a sorted set; returns how many were there.", "key member ...", zset::zrem),
    spec!("bzmpop", -5, BLOCKING_MPOP, (0, 0, 0), "sorted-set", "7.0.0", "Pops members with the lowest or highest scores from the first non-empty sorted set of several, or blocks until one is available.", "timeout numkeys key [key ...] MIN|MAX [COUNT count]", blocking::bzmpop),
    spec!("zmpop", -4, MPOP, (0, 0, 0), "sorted-set", "7.0.0", "Pops members with the lowest or highest scores from the first non-empty sorted set of several.", "numkeys key [key ...] MIN|MAX [COUNT count]", super::zsetops::zmpop),
    spec!("zrangebylex", -4, R, (1, 1, 1), "sorted-set", "2.8.9", "Returns members of a sorted set within a lex range (members of equal score).", "key min max [LIMIT offset count]", super::zlex::zrangebylex),
    spec!("zrevrangebylex", -4, R, (1, 1, 1), "sorted-set", "2.8.9", "Returns members of a sorted set within a lex range, last first.", "key max min [LIMIT offset count]", super::zlex::zrevrangebylex),
    spec!("zlexcount", 4, RF, (1, 1, 1), "sorted-set", "2.8.9", "Counts the members of a sorted set within a lex range.", "key min max", super::zlex::zlexcount),
    spec!("zremrangebylex", 4, &["write"], (1, 1, 1), "sorted-set", "2.8.9", "Removes the members within a lex range.", "key min max", super::zlex::zremrangebylex),
    spec!("zrangestore", -5, W, (1, 2, 1), "sorted-set", "6.2.0", "Stores a range of a sorted set (by rank, score or lex) in a key.", "dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]", super::zsetops::zrangestore),
    spec!("zunion", -3, MOVABLE_R, (0, 0, 0), "sorted-set", "6.2.0", "Returns the union of sorted sets (or sets), with WEIGHTS and AGGREGATE.", "numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]", super::zsetops::zunion),
    spec!("zinter", -3, MOVABLE_R, (0, 0, 0), "sorted-set", "6.2.0", "Returns the intersection of sorted sets (or sets), with WEIGHTS and AGGREGATE.", "numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX] [WITHSCORES]", super::zsetops::zinter),
    spec!("zdiff", -3, MOVABLE_R, (0, 0, 0), "sorted-set", "6.2.0", "Returns the members of the first sorted set in none of the others.", "numkeys key [key ...] [WITHSCORES]", super::zsetops::zdiff),
    spec!("zunionstore", -4, MOVABLE_W, (0, 0, 0), "sorted-set", "2.0.0", "Stores the union of sorted sets (or sets) in a key.", "destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX]", super::zsetops::zunionstore),
    spec!("zinterstore", -4, MOVABLE_W, (0, 0, 0), "sorted-set", "2.0.0", "Stores the intersection of sorted sets (or sets) in a key.", "destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM|MIN|MAX]", super::zsetops::zinterstore),
    spec!("zdiffstore", -4, MOVABLE_W, (0, 0, 0), "sorted-set", "6.2.0", "Stores the members of the first sorted set in none of the others in a key.", "destination numkeys key [key ...]", super::zsetops::zdiffstore),
    spec!("zintercard", -3, MOVABLE_R, (0, 0, 0), "sorted-set", "7.0.0", "Counts the members in every given sorted set, up to a limit.", "numkeys key [key ...] [LIMIT limit]", super::zsetops::zintercard),
    spec!("xadd", -5, WF, (1, 1, 1), "stream", "5.0.0", "Appends an entry to a stream, optionally trimming it; returns its id.", "key [NOMKSTREAM] [MAXLEN|MINID [=|~] threshold [LIMIT count]] id field value ...", stream::xadd),
    spec!("xlen", 2, RF, (1, 1, 1), "stream", "5.0.0", "Returns the number of entries of a stream.", "key", stream::xlen),
    spec!("xrange", -4, R, (1, 1, 1), "stream", "5.0.0", "Returns the entries of a stream between two ids.", "key start end [COUNT count]", stream::xrange),
    spec!("xrevrange", -4, R, (1, 1, 1), "stream", "5.0.0", "Returns the entries of a stream between two ids, newest first.", "key end start [COUNT count]", stream::xrevrange),
    spec!("xdel", -3, &["write", "fast"], (1, 1, 1), "stream", "5.0.0", "Removes entries of a stream; returns how many were there.", "key id ...", stream::xdel),
    spec!("xtrim", -4, &["write"], (1, 1, 1), "stream", "5.0.0", "Removes a stream's oldest entries beyond a length or below an id; returns how many.", "key MAXLEN|MINID [=|~] threshold [LIMIT count]", stream::xtrim),
    spec!("xsetid", -3, WF, (1, 1, 1), "stream", "5.0.0", "Sets a stream's last id (and entries-added, max-deleted-id).", "key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]", stream::xsetid),
    spec!("xread", -4, &["readonly", "blocking", "movablekeys"], (0, 0, 0), "stream", "5.0.0", "Returns entries of streams after the given ids; with BLOCK, waits for some.", "[COUNT count] [BLOCK milliseconds] STREAMS key ... id ...", stream::xread),
    spec!("xreadgroup", -7, &["write", "blocking", "movablekeys"], (0, 0, 0), "stream", "5.0.0", "Reads streams as a consumer of a group: new entries (>) or the consumer's pending history.", "GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key ... id ...", super::stream_group::xreadgroup),
    spec!("xgroup", -2, &["write"], (2, 2, 1), "stream", "5.0.0", "Consumer groups: CREATE, SETID, DESTROY, CREATECONSUMER, DELCONSUMER, HELP.", "CREATE|SETID|DESTROY|CREATECONSUMER|DELCONSUMER|HELP [arg ...]", super::stream_group::xgroup),
    spec!("xack", -4, &["write", "fast"], (1, 1, 1), "stream", "5.0.0", "Acknowledges entries of a group's pending list; returns how many were pending.", "key group id ...", super::stream_group::xack),
    spec!("xpending", -3, R, (1, 1, 1), "stream", "5.0.0", "Summarizes a group's pending entries, or lists them within a range.", "key group [[IDLE min-idle-time] start end count [consumer]]", super::stream_group::xpending),
    spec!("xclaim", -6, &["write", "fast"], (1, 1, 1), "stream", "5.0.0", "Transfers pending entries to a consumer.", "key group consumer min-idle-time id ... [IDLE ms] [TIME unix-time-milliseconds] [RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]", super::stream_group::xclaim),
    spec!("xautoclaim", -6, &["write", "fast"], (1, 1, 1), "stream", "6.2.0", "Transfers pending entries idle long enough to a consumer, scanning from a cursor.", "key group consumer min-idle-time start [COUNT count] [JUSTID]", super::stream_group::xautoclaim),
    spec!("xinfo", -2, R, (2, 2, 1), "stream", "5.0.0", "Stream introspection: STREAM [FULL], GROUPS, CONSUMERS, HELP.", "STREAM|GROUPS|CONSUMERS|HELP [arg ...]", super::stream_group::xinfo),
    spec!("multi", 1, TXN, (0, 0, 0), "transactions", "1.2.0", "Starts a transaction: the commands after it are queued until EXEC.", "", multi::multi),
    spec!("exec", 1, &["noscript", "loading", "stale", "skip_slowlog"], (0, 0, 0), "transactions", "1.2.0", "Runs the queued commands as one atomic batch; null if a watched key changed.", "", multi::exec),
    spec!("discard", 1, TXN, (0, 0, 0), "transactions", "2.0.0", "Discards the queued commands and unwatches every key.", "", multi::discard),
    spec!("watch", -2, TXN, (1, -1, 1), "transactions", "2.2.0", "Makes the next EXEC fail if any of these keys is written before it.", "key ...", multi::watch),
    spec!("unwatch", 1, TXN, (0, 0, 0), "transactions", "2.2.0", "Forgets every watched key.", "", multi::unwatch),
    spec!("reset", 1, TXN, (0, 0, 0), "connection", "6.2.0", "Resets the connection: leaves MULTI and subscriptions, unwatches, RESP2, no name.", "", multi::reset),
    spec!("subscribe", -2, PUBSUB, (0, 0, 0), "pubsub", "2.0.0", "Listens for messages published to channels.", "channel ...", pubsub::subscribe),
    spec!("unsubscribe", -1, PUBSUB, (0, 0, 0), "pubsub", "2.0.0", "Stops listening to channels (all if none is named).", "[channel ...]", pubsub::unsubscribe),
    spec!("psubscribe", -2, PUBSUB, (0, 0, 0), "pubsub", "2.0.0", "Listens for messages published to channels matching glob patterns.", "pattern ...", pubsub::psubscribe),
    spec!("punsubscribe", -1, PUBSUB, (0, 0, 0), "pubsub", "2.0.0", "Stops listening to patterns (all if none is named).", "[pattern ...]", pubsub::punsubscribe),
    spec!("publish", 3, &["pubsub", "loading", "stale", "fast"], (0, 0, 0), "pubsub", "2.0.0", "Posts a message to a channel; returns how many clients received it.", "channel message", pubsub::publish),
    spec!("pubsub", -2, &["pubsub", "loading", "stale"], (0, 0, 0), "pubsub", "2.8.0", "Pub/Sub introspection: CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS, SHARDNUMSUB.", "CHANNELS|NUMSUB|NUMPAT|SHARDCHANNELS|SHARDNUMSUB [arg ...]", pubsub::pubsub),
    spec!("forest.range", -3, R, (0, 0, 0), "forest", "0.1.0", "Returns key-value pairs (or keys) between two lex bounds, ascending or REV descending, at most LIMIT count.", "min max [REV] [LIMIT count] [KEYSONLY]", range::range),
    spec!("forest.count", 3, R, (0, 0, 0), "forest", "0.1.0", "Counts the keys between two lex bounds.", "min max", range::count),
    spec!("forest.delrange", 3, DEL, (0, 0, 0), "forest", "0.1.0", "Removes the keys between two lex bounds; returns how many.", "min max", range::delrange),
    spec!("asof.now", 1, RF, (0, 0, 0), "forest", "0.1.0", "Returns the newest timestamp whose as-of answers can no longer change (temporal engines).", "", asof::now),
    spec!("asof.get", 3, RF, (1, 1, 1), "forest", "0.1.0", "Returns the value of a string key as of a timestamp.", "key timestamp", asof::get),
    spec!("asof.range", -4, R, (0, 0, 0), "forest", "0.1.0", "Returns key-value pairs (or keys) between two lex bounds as of a timestamp, ascending or REV descending, at most LIMIT count.", "min max timestamp [REV] [LIMIT count] [KEYSONLY]", asof::range),
    spec!("asof.count", 4, R, (0, 0, 0), "forest", "0.1.0", "Counts the keys between two lex bounds as of a timestamp.", "min max timestamp", asof::count),
    spec!("asof.history", -2, R, (1, 1, 1), "forest", "0.1.0", "Returns a string key's versions as timestamp and value (nil: deleted or expired) pairs.", "key [FROM timestamp] [TO timestamp] [REV] [LIMIT count]", asof::history),
    spec!("asof.retain", -1, ADMIN, (0, 0, 0), "forest", "0.1.0", "Returns the retention threshold, or raises it to a timestamp: history before it is discarded and reads before it are refused.", "[timestamp]", asof::retain),
];

fn text(s: &str) -> Frame {
    Frame::bulk(s.as_bytes())
}

/// COMMAND INFO's entry for a command.
fn info_entry(spec: &Spec) -> Frame {
    Frame::Array(vec![
        text(spec.name),
        Frame::Integer(i64::from(spec.arity)),
        Frame::Array(
            spec.flags
                .iter()
                .map(|f| Frame::Simple((*f).to_string()))
                .collect(),
        ),
        Frame::Integer(i64::from(spec.first_key)),
        Frame::Integer(i64::from(spec.last_key)),
        Frame::Integer(i64::from(spec.step)),
        Frame::Array(vec![Frame::Simple(format!("@{}", spec.group))]),
        Frame::Array(vec![]),
        Frame::Array(vec![]),
        Frame::Array(vec![]),
    ])
}

/// Splits a usage line at top-level spaces (brackets kept together).
fn split_usage(usage: &str) -> Vec<&str> {
    let mut items = Vec::new();
    let mut depth = 0usize;
    let mut start = 0;
    for (i, c) in usage.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ' ' if depth == 0 => {
                if i > start {
                    items.push(&usage[start..i]);
                }
                start = i + 1;
            }
            _ => {}
        }
    }
    if start < usage.len() {
        items.push(&usage[start..]);
    }
    items
}

fn is_token(word: &str) -> bool {
    word.chars().any(|c| c.is_ascii_uppercase())
        && word.chars().all(|c| c.is_ascii_uppercase() || c == '-')
}

/// COMMAND DOCS's `arguments` for a usage line (see the module doc).
fn usage_arguments(usage: &str) -> Vec<Frame> {
    let items = split_usage(usage);
    let mut args = Vec::new();
    let mut i = 0;
    while i < items.len() {
        let mut item = items[i];
        let mut flags = Vec::new();
        if items.get(i + 1) == Some(&"...") {
            flags.push(Frame::Simple("multiple".into()));
            i += 1;
        }
        i += 1;
        if let Some(inner) = item.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            flags.push(Frame::Simple("optional".into()));
            let nested = split_usage(inner);
            if nested.len() == 2 && is_token(nested[0]) && !is_token(nested[1]) {
                args.push(argument(
                    nested[1],
                    kind_of(nested[1]),
                    Some(nested[0]),
                    flags,
                    None,
                ));
                continue;
            }
            if nested.len() > 1 {
                args.push(argument(
                    "options",
                    "block",
                    None,
                    flags,
                    Some(usage_arguments(inner)),
                ));
                continue;
            }
            item = inner;
        }
        if item.contains('|') {
            let choices = item
                .split('|')
                .map(|t| argument(&t.to_ascii_lowercase(), "pure-token", Some(t), vec![], None))
                .collect();
            args.push(argument("choice", "oneof", None, flags, Some(choices)));
        } else if is_token(item) {
            args.push(argument(
                &item.to_ascii_lowercase(),
                "pure-token",
                Some(item),
                flags,
                None,
            ));
        } else {
            args.push(argument(item, kind_of(item), None, flags, None));
        }
    }
    args
}

fn kind_of(name: &str) -> &'static str {
    match name {
        "key" => "key",
        "count" | "increment" | "decrement" | "index" | "protover" | "cursor" | "numkeys" => {
            "integer"
        }
        "pattern" => "pattern",
        "score" => "double",
        _ => "string",
    }
}

fn argument(
    name: &str,
    kind: &str,
    token: Option<&str>,
    flags: Vec<Frame>,
    nested: Option<Vec<Frame>>,
) -> Frame {
    let mut pairs = vec![(text("name"), text(name)), (text("type"), text(kind))];
    if kind == "key" {
        pairs.push((text("key_spec_index"), Frame::Integer(0)));
    }
    if let Some(token) = token {
        pairs.push((text("token"), text(token)));
    }
    if !flags.is_empty() {
        pairs.push((text("flags"), Frame::Array(flags)));
    }
    if let Some(nested) = nested {
        pairs.push((text("arguments"), Frame::Array(nested)));
    }
    Frame::Map(pairs)
}

/// COMMAND DOCS's entry for a command.
fn docs_entry(spec: &Spec) -> Frame {
    Frame::Map(vec![
        (text("summary"), text(spec.summary)),
        (text("since"), text(spec.since)),
        (text("group"), text(spec.group)),
        (text("arguments"), Frame::Array(usage_arguments(spec.usage))),
    ])
}

fn named<'a>(names: &'a [&'a [u8]]) -> impl Iterator<Item = Option<&'static Spec>> + 'a {
    names.iter().map(|n| super::lookup(n))
}

pub fn command(_ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let Some(sub) = argv.get(1) else {
        return Ok(Frame::Array(COMMAND_SPECS.iter().map(info_entry).collect()));
    };
    let names = &argv[2..];
    if is_word(sub, "count") {
        Ok(Frame::Integer(COMMAND_SPECS.len() as i64))
    } else if is_word(sub, "list") {
        Ok(Frame::Array(
            COMMAND_SPECS.iter().map(|s| text(s.name)).collect(),
        ))
    } else if is_word(sub, "info") {
        if names.is_empty() {
            return Ok(Frame::Array(COMMAND_SPECS.iter().map(info_entry).collect()));
        }
        Ok(Frame::Array(
            named(names)
                .map(|s| s.map_or(Frame::Null, info_entry))
                .collect(),
        ))
    } else if is_word(sub, "docs") {
        let specs: Vec<&Spec> = if names.is_empty() {
            COMMAND_SPECS.iter().collect()
        } else {
            named(names).flatten().collect()
        };
        Ok(Frame::Map(
            specs
                .into_iter()
                .map(|s| (text(s.name), docs_entry(s)))
                .collect(),
        ))
    } else {
        Err(unknown_subcommand("command", sub))
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use super::*;

    // Goal: COMMAND COUNT/INFO/DOCS answer in Redis's shapes.
    // Method: inspect GET's INFO entry and SET's DOCS arguments.
    #[test]
    fn command_introspection() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["COMMAND", "COUNT"]),
            Frame::Integer(COMMAND_SPECS.len() as i64)
        );
        let Frame::Array(entries) = h.run(&["COMMAND", "INFO", "get", "nope"]) else {
            panic!("array expected");
        };
        assert_eq!(entries[1], Frame::Null);
        let Frame::Array(get) = &entries[0] else {
            panic!("array expected");
        };
        assert_eq!(get[0], bulk("get"));
        assert_eq!(get[1], Frame::Integer(2));
        assert_eq!(get[3], Frame::Integer(1));
        let Frame::Map(docs) = h.run(&["COMMAND", "DOCS", "set"]) else {
            panic!("map expected");
        };
        let Frame::Map(fields) = &docs[0].1 else {
            panic!("map expected");
        };
        let (_, Frame::Array(args)) = &fields[3] else {
            panic!("arguments expected");
        };
        assert_eq!(args.len(), 9, "{args:?}");
        let Frame::Array(all) = h.run(&["COMMAND"]) else {
            panic!("array expected");
        };
        assert_eq!(all.len(), COMMAND_SPECS.len());
    }

    // Goal: usage lines become argument descriptions redis-cli can read.
    // Method: SCAN's usage with tokens, optional blocks and a repeat.
    #[test]
    fn usage_parsing() {
        assert_eq!(
            split_usage("cursor [MATCH pattern] [COUNT count]"),
            vec!["cursor", "[MATCH pattern]", "[COUNT count]"]
        );
        let args = usage_arguments("key ...");
        assert_eq!(args.len(), 1);
        let Frame::Map(fields) = &args[0] else {
            panic!("map expected");
        };
        assert!(fields.contains(&(
            bulk("flags"),
            Frame::Array(vec![Frame::Simple("multiple".into())])
        )));
        for spec in COMMAND_SPECS {
            usage_arguments(spec.usage);
        }
    }
}
