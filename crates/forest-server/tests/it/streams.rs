//! Streams over raw RESP (issue 19): XADD's options, XRANGE/XREVRANGE, XDEL, XTRIM, XSETID,
//! XREAD, and the consumer groups (XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM,
//! XINFO), with the replies and error texts of redis-server 7.0.15 (each uncertain one was
//! checked against it); group state across a restart; XADD/XDEL/XTRIM/XRANGE against an
//! in-memory model.

use crate::common;

use std::collections::BTreeMap;

use common::{Client, Running, R};
use forest_server::IoModel;

fn b(s: &str) -> R {
    R::bulk(s)
}

fn arr(items: Vec<R>) -> R {
    R::Arr(items)
}

fn bulks(items: &[&str]) -> R {
    arr(items.iter().map(|s| b(s)).collect())
}

fn entry(id: &str, fields: &[&str]) -> R {
    arr(vec![b(id), bulks(fields)])
}

fn err(text: &str) -> R {
    R::Err(format!("ERR {text}"))
}

fn ok() -> R {
    R::Simple("OK".into())
}

/// The value after `name` in a flat RESP2 map reply.
fn field(reply: &R, name: &str) -> R {
    let R::Arr(items) = reply else {
        panic!("array expected: {reply:?}");
    };
    let at = items
        .iter()
        .position(|i| *i == b(name))
        .unwrap_or_else(|| panic!("no {name} in {reply:?}"));
    items[at + 1].clone()
}

fn start() -> (tempfile::TempDir, Running, Client) {
    let dir = tempfile::tempdir().expect("tempdir");
    let server = Running::start(dir.path(), IoModel::Threads);
    let client = server.client();
    (dir, server, client)
}

// Goal: XADD's options (NOMKSTREAM, MAXLEN/MINID with = or ~ and LIMIT) and their errors,
// the id edge cases, XLEN, XRANGE/XREVRANGE with COUNT and exclusive bounds, as Redis 7.0.
// Method: one scenario over raw RESP, every reply compared.
#[test]
fn xadd_options_and_ranges() {
    let (_dir, _server, mut c) = start();
    assert_eq!(c.cmd(&["XADD", "s", "1-1", "a", "1"]), b("1-1"));
    assert_eq!(
        c.cmd(&["XADD", "s", "NOMKSTREAM", "2-1", "b", "2"]),
        b("2-1")
    );
    assert_eq!(c.cmd(&["XADD", "t", "NOMKSTREAM", "2-1", "b", "2"]), R::Nil);
    assert_eq!(c.cmd(&["EXISTS", "t"]), R::Int(0));
    assert_eq!(
        c.cmd(&["XADD", "s", "MAXLEN", "2", "3-1", "c", "3"]),
        b("3-1")
    );
    assert_eq!(c.cmd(&["XLEN", "s"]), R::Int(2));
    assert_eq!(
        c.cmd(&["XADD", "s", "MAXLEN", "=", "1", "LIMIT", "10", "4-1", "d", "4"]),
        err("syntax error, LIMIT cannot be used without the special ~ option")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "LIMIT", "5", "*", "a", "1"]),
        err("syntax error, LIMIT cannot be used without specifying a trimming strategy")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "MAXLEN", "1", "MINID", "1", "*", "a", "1"]),
        err("syntax error, MAXLEN and MINID options at the same time are not compatible")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "MAXLEN", "-1", "*", "a", "1"]),
        err("The MAXLEN argument must be >= 0.")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "MAXLEN", "abc", "*", "a", "1"]),
        err("value is not an integer or out of range")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "MINID", "abc", "*", "a", "1"]),
        err("Invalid stream ID specified as stream command argument")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "MAXLEN", "~", "0", "LIMIT", "-1", "*", "a", "1"]),
        err("The LIMIT argument must be >= 0.")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "MAXLEN", "1"]),
        err("wrong number of arguments for 'xadd' command")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "6-1", "a"]),
        err("wrong number of arguments for 'xadd' command")
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "MINID", "=", "3", "4-1", "d", "4"]),
        b("4-1")
    );
    assert_eq!(
        c.cmd(&["XRANGE", "s", "-", "+"]),
        arr(vec![entry("3-1", &["c", "3"]), entry("4-1", &["d", "4"])])
    );
    assert_eq!(
        c.cmd(&["XADD", "s", "MAXLEN", "~", "1", "LIMIT", "1", "5-1", "e", "5"]),
        b("5-1")
    );
    assert_eq!(c.cmd(&["XLEN", "s"]), R::Int(2));
    // Id edge cases.
    let max = "18446744073709551615";
    assert_eq!(c.cmd(&["XADD", "m", "5-*", "a", "1"]), b("5-0"));
    assert_eq!(
        c.cmd(&["XADD", "m", &format!("5-{max}"), "a", "1"]),
        b(&format!("5-{max}"))
    );
    assert_eq!(
        c.cmd(&["XADD", "m", "5-*", "a", "1"]),
        err("Elements are too large to be stored")
    );
    assert_eq!(
        c.cmd(&["XADD", "m", "4-*", "a", "1"]),
        err("The ID specified in XADD is equal or smaller than the target stream top item")
    );
    assert_eq!(
        c.cmd(&["XADD", "m", &format!("{max}-{max}"), "a", "1"]),
        b(&format!("{max}-{max}"))
    );
    assert_eq!(
        c.cmd(&["XADD", "m", "*", "a", "1"]),
        err("The stream has exhausted the last possible ID, unable to add more items")
    );
    assert_eq!(c.cmd(&["XADD", "z", "0-*", "a", "1"]), b("0-1"));
    // The largest id is an entry like the others; group keys never show among entries.
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "m", "g", "0"]), ok());
    assert_eq!(
        c.cmd(&["XREVRANGE", "m", "+", "-", "COUNT", "1"]),
        arr(vec![entry(&format!("{max}-{max}"), &["a", "1"])])
    );
    assert_eq!(c.cmd(&["XLEN", "m"]), R::Int(3));
    // Ranges.
    c.cmd(&["DEL", "s"]);
    for id in ["1-1", "2-1", "3-1"] {
        c.cmd(&["XADD", "s", id, "f", id]);
    }
    assert_eq!(c.cmd(&["XRANGE", "s", "-", "+", "COUNT", "0"]), R::Nil);
    assert_eq!(c.cmd(&["XRANGE", "s", "-", "+", "COUNT", "-1"]), R::Nil);
    assert_eq!(
        c.cmd(&["XRANGE", "nokey", "-", "+", "COUNT", "0"]),
        arr(vec![])
    );
    assert_eq!(
        c.cmd(&["XRANGE", "s", "-", "+", "COUNT", "1", "COUNT", "2"]),
        arr(vec![
            entry("1-1", &["f", "1-1"]),
            entry("2-1", &["f", "2-1"])
        ])
    );
    assert_eq!(
        c.cmd(&["XRANGE", "s", &format!("({max}-{max}"), "+"]),
        err("invalid start ID for the interval")
    );
    assert_eq!(
        c.cmd(&["XRANGE", "s", "-", "(0-0"]),
        err("invalid end ID for the interval")
    );
    assert_eq!(
        c.cmd(&["XRANGE", "s", "(", "+"]),
        err("Invalid stream ID specified as stream command argument")
    );
    assert_eq!(
        c.cmd(&["XRANGE", "s", "(-", "+"]),
        err("Invalid stream ID specified as stream command argument")
    );
    assert_eq!(c.cmd(&["XRANGE", "s", "2", "1"]), arr(vec![]));
    assert_eq!(
        c.cmd(&["XRANGE", "s", "-", "+", "foo"]),
        err("syntax error")
    );
    assert_eq!(
        c.cmd(&["XRANGE", "s", "-", "+", "COUNT", "x"]),
        err("value is not an integer or out of range")
    );
    assert_eq!(
        c.cmd(&["XREVRANGE", "s", "(3-1", "(1-1"]),
        arr(vec![entry("2-1", &["f", "2-1"])])
    );
    assert_eq!(
        c.cmd(&["XREVRANGE", "s", "+", "-", "COUNT", "1"]),
        arr(vec![entry("3-1", &["f", "3-1"])])
    );
    assert_eq!(c.cmd(&["XREVRANGE", "nokey", "+", "-"]), arr(vec![]));
    c.cmd(&["SET", "str", "v"]);
    let wrongtype =
        R::Err("WRONGTYPE Operation against a key holding the wrong kind of value".into());
    assert_eq!(c.cmd(&["XADD", "str", "*", "a", "1"]), wrongtype);
    assert_eq!(c.cmd(&["XRANGE", "str", "-", "+"]), wrongtype);
    assert_eq!(c.cmd(&["XLEN", "str"]), wrongtype);
}

// Goal: XDEL, XTRIM and XSETID with Redis's replies and errors, and the numbers XINFO
// STREAM reports after them (entries-added, max-deleted-entry-id, recorded-first-entry-id).
// Method: one scenario; XINFO STREAM compared whole.
#[test]
fn xdel_xtrim_xsetid() {
    let (_dir, _server, mut c) = start();
    for id in ["1-1", "2-1", "3-1"] {
        c.cmd(&["XADD", "s", id, "f", "v"]);
    }
    assert_eq!(c.cmd(&["XDEL", "s", "2-1", "9-9", "2-1"]), R::Int(1));
    assert_eq!(
        c.cmd(&["XDEL", "s"]),
        err("wrong number of arguments for 'xdel' command")
    );
    assert_eq!(
        c.cmd(&["XDEL", "s", "abc"]),
        err("Invalid stream ID specified as stream command argument")
    );
    assert_eq!(c.cmd(&["XDEL", "nokey", "abc"]), R::Int(0));
    assert_eq!(c.cmd(&["XDEL", "s", "1"]), R::Int(0));
    assert_eq!(c.cmd(&["XLEN", "s"]), R::Int(2));
    assert_eq!(
        c.cmd(&["XTRIM", "s"]),
        err("wrong number of arguments for 'xtrim' command")
    );
    assert_eq!(c.cmd(&["XTRIM", "s", "foo", "1"]), err("syntax error"));
    assert_eq!(
        c.cmd(&["XTRIM", "s", "MAXLEN", "0", "LIMIT", "1"]),
        err("syntax error, LIMIT cannot be used without the special ~ option")
    );
    assert_eq!(
        c.cmd(&["XTRIM", "nokey", "MAXLEN", "abc"]),
        err("value is not an integer or out of range")
    );
    assert_eq!(c.cmd(&["XTRIM", "nokey", "MAXLEN", "0"]), R::Int(0));
    assert_eq!(c.cmd(&["XTRIM", "s", "MAXLEN", "1"]), R::Int(1));
    assert_eq!(c.cmd(&["XTRIM", "s", "MINID", "0"]), R::Int(0));
    assert_eq!(
        c.cmd(&["XTRIM", "s", "MAXLEN", "~", "0", "LIMIT", "1"]),
        R::Int(1)
    );
    assert_eq!(c.cmd(&["EXISTS", "s"]), R::Int(1));
    assert_eq!(
        c.cmd(&["XINFO", "STREAM", "s"]),
        arr(vec![
            b("length"),
            R::Int(0),
            b("radix-tree-keys"),
            R::Int(0),
            b("radix-tree-nodes"),
            R::Int(1),
            b("last-generated-id"),
            b("3-1"),
            b("max-deleted-entry-id"),
            b("2-1"),
            b("entries-added"),
            R::Int(3),
            b("recorded-first-entry-id"),
            b("0-0"),
            b("groups"),
            R::Int(0),
            b("first-entry"),
            R::Nil,
            b("last-entry"),
            R::Nil,
        ])
    );
    assert_eq!(c.cmd(&["XSETID", "s", "1-1"]), ok());
    assert_eq!(
        c.cmd(&[
            "XSETID",
            "s",
            "9-9",
            "ENTRIESADDED",
            "10",
            "MAXDELETEDID",
            "10-1"
        ]),
        err("The ID specified in XSETID is smaller than the provided max_deleted_entry_id")
    );
    assert_eq!(c.cmd(&["XSETID", "nokey", "1-1"]), err("no such key"));
    assert_eq!(
        c.cmd(&["XSETID", "s", "10-0", "ENTRIESADDED", "-1"]),
        err("entries_added must be positive")
    );
    assert_eq!(c.cmd(&["XSETID", "s", "10-0", "foo"]), err("syntax error"));
    assert_eq!(
        c.cmd(&[
            "XSETID",
            "s",
            "10-0",
            "ENTRIESADDED",
            "10",
            "MAXDELETEDID",
            "1-1"
        ]),
        ok()
    );
    let info = c.cmd(&["XINFO", "STREAM", "s"]);
    assert_eq!(field(&info, "last-generated-id"), b("10-0"));
    assert_eq!(field(&info, "entries-added"), R::Int(10));
    assert_eq!(field(&info, "max-deleted-entry-id"), b("1-1"));
    c.cmd(&["XADD", "s", "11-0", "f", "v"]);
    c.cmd(&["XADD", "s", "12-0", "f", "v"]);
    assert_eq!(
        c.cmd(&["XSETID", "s", "11-5"]),
        err("The ID specified in XSETID is smaller than the target stream top item")
    );
    assert_eq!(
        c.cmd(&["XSETID", "s", "13-0", "ENTRIESADDED", "1"]),
        err("The entries_added specified in XSETID is smaller than the target stream length")
    );
    let info = c.cmd(&["XINFO", "STREAM", "s"]);
    assert_eq!(field(&info, "recorded-first-entry-id"), b("11-0"));
    assert_eq!(field(&info, "first-entry"), entry("11-0", &["f", "v"]));
    assert_eq!(field(&info, "last-entry"), entry("12-0", &["f", "v"]));
    assert_eq!(field(&info, "radix-tree-keys"), R::Int(1));
    // An XADD that trims to nothing keeps the stream, as Redis.
    assert_eq!(
        c.cmd(&["XADD", "e", "MAXLEN", "0", "1-1", "a", "1"]),
        b("1-1")
    );
    assert_eq!(c.cmd(&["XLEN", "e"]), R::Int(0));
    assert_eq!(c.cmd(&["EXISTS", "e"]), R::Int(1));
    assert_eq!(c.cmd(&["TYPE", "e"]), R::Simple("stream".into()));
}

// Goal: XREAD over several streams with `$`, COUNT, missing keys, its errors, BLOCK (data
// there: answered; none: a null array at the timeout), and RESP3's map reply.
// Method: raw RESP in both protocols.
#[test]
fn xread_replies() {
    let (_dir, _server, mut c) = start();
    for id in ["1-1", "2-1", "3-1"] {
        c.cmd(&["XADD", "s", id, "f", id]);
    }
    c.cmd(&["XADD", "t", "5-0", "g", "x"]);
    let all_s = arr(vec![
        entry("1-1", &["f", "1-1"]),
        entry("2-1", &["f", "2-1"]),
        entry("3-1", &["f", "3-1"]),
    ]);
    assert_eq!(
        c.cmd(&["XREAD", "STREAMS", "s", "0"]),
        arr(vec![arr(vec![b("s"), all_s.clone()])])
    );
    assert_eq!(
        c.cmd(&["XREAD", "COUNT", "1", "STREAMS", "s", "t", "1-1", "0"]),
        arr(vec![
            arr(vec![b("s"), arr(vec![entry("2-1", &["f", "2-1"])])]),
            arr(vec![b("t"), arr(vec![entry("5-0", &["g", "x"])])]),
        ])
    );
    assert_eq!(
        c.cmd(&["XREAD", "STREAMS", "s", "nokey", "0", "0"]),
        arr(vec![arr(vec![b("s"), all_s.clone()])])
    );
    assert_eq!(c.cmd(&["XREAD", "STREAMS", "s", "$"]), R::Nil);
    assert_eq!(c.cmd(&["XREAD", "STREAMS", "s", "3-1"]), R::Nil);
    assert_eq!(
        c.cmd(&["XREAD", "COUNT", "0", "STREAMS", "s", "0"]),
        arr(vec![arr(vec![b("s"), all_s.clone()])])
    );
    assert_eq!(
        c.cmd(&["XREAD", "COUNT", "-1", "STREAMS", "s", "0"]),
        arr(vec![arr(vec![b("s"), all_s.clone()])])
    );
    let invalid = err("Invalid stream ID specified as stream command argument");
    assert_eq!(c.cmd(&["XREAD", "STREAMS", "s", "+"]), invalid);
    assert_eq!(
        c.cmd(&["XREAD", "STREAMS", "s"]),
        err("wrong number of arguments for 'xread' command")
    );
    assert_eq!(
        c.cmd(&["XREAD", "STREAMS", "s", "t", "0"]),
        err(
            "Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."
        )
    );
    assert_eq!(
        c.cmd(&["XREAD", "COUNT", "x", "STREAMS", "s", "0"]),
        err("value is not an integer or out of range")
    );
    assert_eq!(
        c.cmd(&["XREAD", "foo", "STREAMS", "s", "0"]),
        err("syntax error")
    );
    assert_eq!(
        c.cmd(&["XREAD", "BLOCK", "-1", "STREAMS", "s", "0"]),
        err("timeout is negative")
    );
    assert_eq!(
        c.cmd(&["XREAD", "BLOCK", "x", "STREAMS", "s", "0"]),
        err("timeout is not an integer or out of range")
    );
    assert_eq!(
        c.cmd(&["XREAD", "STREAMS", "s", ">"]),
        err("The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.")
    );
    assert_eq!(
        c.cmd(&["XREAD", "NOACK", "STREAMS", "s", "0"]),
        err("The NOACK option is only supported by XREADGROUP. You called XREAD instead.")
    );
    assert_eq!(
        c.cmd(&["XREAD", "GROUP", "g", "c", "STREAMS", "s", "0"]),
        err("The GROUP option is only supported by XREADGROUP. You called XREAD instead.")
    );
    // BLOCK: data there is answered as without BLOCK; none waits, here until the timeout
    // (tests/stream_blocking.rs has the wake-ups).
    assert_eq!(
        c.cmd(&["XREAD", "BLOCK", "0", "STREAMS", "s", "0"]),
        arr(vec![arr(vec![b("s"), all_s.clone()])])
    );
    assert_eq!(
        c.cmd(&["XREAD", "BLOCK", "100", "STREAMS", "s", "$"]),
        R::Nil
    );
    // Inside MULTI, BLOCK does not block in Redis: a null array.
    assert_eq!(c.cmd(&["MULTI"]), ok());
    assert_eq!(
        c.cmd(&["XREAD", "BLOCK", "100", "STREAMS", "s", "$"]),
        R::Simple("QUEUED".into())
    );
    assert_eq!(c.cmd(&["EXEC"]), arr(vec![R::Nil]));
    c.cmd(&["SET", "str", "v"]);
    assert_eq!(
        c.cmd(&["XREAD", "STREAMS", "s", "str", "0", "0"]),
        R::Err("WRONGTYPE Operation against a key holding the wrong kind of value".into())
    );
    // RESP3: a map of key to entries.
    c.cmd(&["HELLO", "3"]);
    assert_eq!(
        c.cmd(&["XREAD", "COUNT", "1", "STREAMS", "s", "t", "0", "0"]),
        R::Map(vec![
            (b("s"), arr(vec![entry("1-1", &["f", "1-1"])])),
            (b("t"), arr(vec![entry("5-0", &["g", "x"])])),
        ])
    );
    assert_eq!(c.cmd(&["XREAD", "STREAMS", "s", "$"]), R::Nil);
}

// Goal: XGROUP's subcommands with Redis's replies and errors.
// Method: one scenario; XINFO GROUPS shows the effect.
#[test]
fn xgroup_subcommands() {
    let (_dir, _server, mut c) = start();
    let requires = err("The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.");
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "s", "g", "$"]), requires);
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]),
        ok()
    );
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]),
        R::Err("BUSYGROUP Consumer Group name already exists".into())
    );
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "s", "g2", "0", "ENTRIESREAD", "5"]),
        ok()
    );
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "s", "g3", "0", "ENTRIESREAD", "-5"]),
        err("value for ENTRIESREAD must be positive or -1")
    );
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "s", "g3", "0", "ENTRIESREAD", "-1"]),
        ok()
    );
    let invalid = err("Invalid stream ID specified as stream command argument");
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "s", "g4", "abc"]), invalid);
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "s", "g4", "+"]), invalid);
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "s", "g4", "-"]), invalid);
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "s", "g4", "0", "foo"]),
        err("unknown subcommand or wrong number of arguments for 'CREATE'. Try XGROUP HELP.")
    );
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "s"]),
        err("wrong number of arguments for 'xgroup|create' command")
    );
    assert_eq!(
        c.cmd(&["XGROUP", "foo"]),
        err("unknown subcommand 'foo'. Try XGROUP HELP.")
    );
    let R::Arr(help) = c.cmd(&["XGROUP", "HELP"]) else {
        panic!("array expected");
    };
    assert_eq!(help.len(), 17);
    assert_eq!(
        help[0],
        R::Simple("XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:".into())
    );
    assert_eq!(
        c.cmd(&["XGROUP", "CREATECONSUMER", "s", "g", "c1"]),
        R::Int(1)
    );
    assert_eq!(
        c.cmd(&["XGROUP", "CREATECONSUMER", "s", "g", "c1"]),
        R::Int(0)
    );
    let nogroup = R::Err("NOGROUP No such consumer group 'nog' for key name 's'".into());
    assert_eq!(
        c.cmd(&["XGROUP", "CREATECONSUMER", "s", "nog", "c1"]),
        nogroup
    );
    assert_eq!(
        c.cmd(&["XGROUP", "CREATECONSUMER", "nokey", "g", "c1"]),
        requires
    );
    assert_eq!(c.cmd(&["XGROUP", "DELCONSUMER", "s", "g", "c1"]), R::Int(0));
    assert_eq!(c.cmd(&["XGROUP", "DELCONSUMER", "s", "g", "c9"]), R::Int(0));
    assert_eq!(c.cmd(&["XGROUP", "DELCONSUMER", "s", "nog", "c9"]), nogroup);
    assert_eq!(c.cmd(&["XGROUP", "SETID", "s", "g", "5-5"]), ok());
    assert_eq!(
        c.cmd(&["XGROUP", "SETID", "s", "g", "5-5", "ENTRIESREAD", "3"]),
        ok()
    );
    assert_eq!(c.cmd(&["XGROUP", "SETID", "s", "nog", "5-5"]), nogroup);
    assert_eq!(c.cmd(&["XGROUP", "SETID", "s", "g", "$"]), ok());
    assert_eq!(c.cmd(&["XGROUP", "DESTROY", "s", "g"]), R::Int(1));
    assert_eq!(c.cmd(&["XGROUP", "DESTROY", "s", "g"]), R::Int(0));
    assert_eq!(c.cmd(&["XGROUP", "DESTROY", "nokey", "g"]), requires);
    assert_eq!(
        c.cmd(&["XINFO", "GROUPS", "s"]),
        arr(vec![
            arr(vec![
                b("name"),
                b("g2"),
                b("consumers"),
                R::Int(0),
                b("pending"),
                R::Int(0),
                b("last-delivered-id"),
                b("0-0"),
                b("entries-read"),
                R::Int(5),
                b("lag"),
                R::Int(0),
            ]),
            arr(vec![
                b("name"),
                b("g3"),
                b("consumers"),
                R::Int(0),
                b("pending"),
                R::Int(0),
                b("last-delivered-id"),
                b("0-0"),
                b("entries-read"),
                R::Nil,
                b("lag"),
                R::Int(0),
            ]),
        ])
    );
    c.cmd(&["SET", "str", "v"]);
    let wrongtype =
        R::Err("WRONGTYPE Operation against a key holding the wrong kind of value".into());
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "str", "g", "$"]), wrongtype);
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "str", "g", "$", "MKSTREAM"]),
        wrongtype
    );
}

// Goal: XREADGROUP (`>`, history, NOACK, COUNT, errors), XACK and XPENDING's two forms as
// Redis 7.0 answers them, with the group's entries-read and lag.
// Method: one scenario; idle times (which depend on the clock) checked for range only.
#[test]
fn xreadgroup_xack_xpending() {
    let (_dir, _server, mut c) = start();
    for id in ["1-1", "2-1", "3-1"] {
        c.cmd(&["XADD", "s", id, "f", id]);
    }
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "s", "g", "0"]), ok());
    assert_eq!(
        c.cmd(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "COUNT",
            "1",
            "STREAMS",
            "s",
            ">"
        ]),
        arr(vec![arr(vec![
            b("s"),
            arr(vec![entry("1-1", &["f", "1-1"])])
        ])])
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0"]),
        arr(vec![arr(vec![
            b("s"),
            arr(vec![entry("1-1", &["f", "1-1"])])
        ])])
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">"]),
        arr(vec![arr(vec![
            b("s"),
            arr(vec![
                entry("2-1", &["f", "2-1"]),
                entry("3-1", &["f", "3-1"])
            ])
        ])])
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">"]),
        R::Nil
    );
    // A consumer that read nothing new is not created.
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "carol", "STREAMS", "s", ">"]),
        R::Nil
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0"]),
        arr(vec![arr(vec![b("s"), arr(vec![])])])
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "nog", "alice", "STREAMS", "s", ">"]),
        R::Err(
            "NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option"
                .into()
        )
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "nokey", ">"]),
        R::Err(
            "NOGROUP No such key 'nokey' or consumer group 'g' in XREADGROUP with GROUP option"
                .into()
        )
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "$"]),
        err("The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.")
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "+"]),
        err("Invalid stream ID specified as stream command argument")
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "STREAMS", "s", ">"]),
        err("wrong number of arguments for 'xreadgroup' command")
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "COUNT", "1", "NOACK", "STREAMS", "s", ">"]),
        err("Missing GROUP option for XREADGROUP")
    );
    assert_eq!(
        c.cmd(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "BLOCK",
            "10",
            "STREAMS",
            "s",
            ">"
        ]),
        R::Nil
    );
    // History reads count as deliveries, NOACK or not.
    c.cmd(&[
        "XREADGROUP",
        "GROUP",
        "g",
        "alice",
        "NOACK",
        "STREAMS",
        "s",
        "0",
    ]);
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g"]),
        arr(vec![
            R::Int(3),
            b("1-1"),
            b("3-1"),
            arr(vec![arr(vec![b("alice"), b("3")])])
        ])
    );
    let R::Arr(rows) = c.cmd(&["XPENDING", "s", "g", "-", "+", "10"]) else {
        panic!("array expected");
    };
    let counts: Vec<(R, R, R)> = rows
        .iter()
        .map(|r| match r {
            R::Arr(f) => (f[0].clone(), f[1].clone(), f[3].clone()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(
        counts,
        vec![
            (b("1-1"), b("alice"), R::Int(3)),
            (b("2-1"), b("alice"), R::Int(2)),
            (b("3-1"), b("alice"), R::Int(2)),
        ]
    );
    for row in &rows {
        let R::Arr(f) = row else { panic!() };
        assert!(
            matches!(f[2], R::Int(idle) if (0..60_000).contains(&idle)),
            "{row:?}"
        );
    }
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g", "IDLE", "1000000", "-", "+", "10"]),
        arr(vec![])
    );
    assert_eq!(c.cmd(&["XPENDING", "s", "g", "-", "+", "-1"]), arr(vec![]));
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g", "-", "+", "10", "nobody"]),
        arr(vec![])
    );
    let R::Arr(two) = c.cmd(&["XPENDING", "s", "g", "(1-1", "+", "2", "alice"]) else {
        panic!("array expected");
    };
    assert_eq!(two.len(), 2);
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g", "-", "+"]),
        err("syntax error")
    );
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g", "IDLE", "5"]),
        err("syntax error")
    );
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g", "IDLE", "x", "-", "+", "10"]),
        err("value is not an integer or out of range")
    );
    assert_eq!(
        c.cmd(&["XPENDING", "s", "nog"]),
        R::Err("NOGROUP No such key 's' or consumer group 'nog'".into())
    );
    assert_eq!(
        c.cmd(&["XPENDING", "nokey", "g"]),
        R::Err("NOGROUP No such key 'nokey' or consumer group 'g'".into())
    );
    assert_eq!(c.cmd(&["XACK", "s", "g", "1-1", "9-9"]), R::Int(1));
    assert_eq!(c.cmd(&["XACK", "s", "g", "1-1"]), R::Int(0));
    assert_eq!(c.cmd(&["XACK", "s", "nog", "1-1"]), R::Int(0));
    assert_eq!(c.cmd(&["XACK", "nokey", "g", "1-1"]), R::Int(0));
    assert_eq!(
        c.cmd(&["XACK", "s", "g", "abc"]),
        err("Invalid stream ID specified as stream command argument")
    );
    assert_eq!(c.cmd(&["XACK", "s", "g", "2-1", "3-1"]), R::Int(2));
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g"]),
        arr(vec![R::Int(0), R::Nil, R::Nil, R::Nil])
    );
    // A deleted entry read from history: its id and a null array; entries-read and lag.
    c.cmd(&["XADD", "s", "4-1", "f", "4-1"]);
    c.cmd(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">"]);
    c.cmd(&["XDEL", "s", "4-1"]);
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0"]),
        arr(vec![arr(vec![
            b("s"),
            arr(vec![arr(vec![b("4-1"), R::Nil])])
        ])])
    );
    let groups = c.cmd(&["XINFO", "GROUPS", "s"]).items();
    assert_eq!(field(&groups[0], "entries-read"), R::Int(4));
    assert_eq!(field(&groups[0], "lag"), R::Int(0));
    assert_eq!(field(&groups[0], "pending"), R::Int(1));
    assert_eq!(field(&groups[0], "consumers"), R::Int(2));
    let consumers = c.cmd(&["XINFO", "CONSUMERS", "s", "g"]).items();
    assert_eq!(consumers.len(), 2);
    assert_eq!(field(&consumers[0], "name"), b("alice"));
    assert_eq!(field(&consumers[0], "pending"), R::Int(0));
    assert_eq!(field(&consumers[1], "name"), b("bob"));
    assert_eq!(field(&consumers[1], "pending"), R::Int(1));
    // SETID back: `>` delivers again, moving the PEL entry to the reader with count 1.
    c.cmd(&["XADD", "s", "5-1", "f", "5-1"]);
    c.cmd(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">"]);
    assert_eq!(c.cmd(&["XGROUP", "SETID", "s", "g", "4-1"]), ok());
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "dave", "STREAMS", "s", ">"]),
        arr(vec![arr(vec![
            b("s"),
            arr(vec![entry("5-1", &["f", "5-1"])])
        ])])
    );
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g"]),
        arr(vec![
            R::Int(2),
            b("4-1"),
            b("5-1"),
            arr(vec![
                arr(vec![b("bob"), b("1")]),
                arr(vec![b("dave"), b("1")])
            ])
        ])
    );
    let groups = c.cmd(&["XINFO", "GROUPS", "s"]).items();
    assert_eq!(field(&groups[0], "entries-read"), R::Int(5));
    // DELCONSUMER drops the consumer's pending entries.
    assert_eq!(
        c.cmd(&["XGROUP", "DELCONSUMER", "s", "g", "dave"]),
        R::Int(1)
    );
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g"]),
        arr(vec![
            R::Int(1),
            b("4-1"),
            b("4-1"),
            arr(vec![arr(vec![b("bob"), b("1")])])
        ])
    );
}

// Goal: XCLAIM's and XAUTOCLAIM's options, replies and errors as Redis 7.0.
// Method: one scenario with three consumers; XPENDING shows owners and counts.
#[test]
fn xclaim_and_xautoclaim() {
    let (_dir, _server, mut c) = start();
    for id in ["1-1", "2-1", "3-1"] {
        c.cmd(&["XADD", "s", id, "f", id]);
    }
    c.cmd(&["XGROUP", "CREATE", "s", "g", "0"]);
    c.cmd(&["XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">"]);
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "bob", "0", "2-1"]),
        arr(vec![entry("2-1", &["f", "2-1"])])
    );
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "bob", "0", "2-1", "JUSTID"]),
        bulks(&["2-1"])
    );
    assert_eq!(
        c.cmd(&[
            "XCLAIM",
            "s",
            "g",
            "bob",
            "0",
            "2-1",
            "RETRYCOUNT",
            "5",
            "IDLE",
            "100000"
        ]),
        arr(vec![entry("2-1", &["f", "2-1"])])
    );
    let rows = c.cmd(&["XPENDING", "s", "g", "2-1", "2-1", "1"]).items();
    let R::Arr(row) = &rows[0] else { panic!() };
    assert_eq!(row[1], b("bob"));
    assert!(matches!(row[2], R::Int(idle) if idle >= 100_000), "{row:?}");
    assert_eq!(row[3], R::Int(5));
    // Not idle long enough: nothing claimed.
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "carol", "3600000", "1-1"]),
        arr(vec![])
    );
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "bob", "0", "9-9", "FORCE"]),
        arr(vec![])
    );
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "bob", "0", "2-1", "LASTID", "100-0"]),
        arr(vec![entry("2-1", &["f", "2-1"])])
    );
    let groups = c.cmd(&["XINFO", "GROUPS", "s"]).items();
    assert_eq!(field(&groups[0], "last-delivered-id"), b("100-0"));
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "bob", "x", "2-1"]),
        err("Invalid min-idle-time argument for XCLAIM")
    );
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "bob", "0", "2-1", "IDLE", "x"]),
        err("Invalid IDLE option argument for XCLAIM")
    );
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "bob", "0", "2-1", "foo"]),
        err("Unrecognized XCLAIM option 'foo'")
    );
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "bob", "0", "abc"]),
        err("Unrecognized XCLAIM option 'abc'")
    );
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "nog", "bob", "0", "2-1"]),
        R::Err("NOGROUP No such key 's' or consumer group 'nog'".into())
    );
    assert_eq!(
        c.cmd(&["XCLAIM", "nokey", "g", "bob", "0", "2-1"]),
        R::Err("NOGROUP No such key 'nokey' or consumer group 'g'".into())
    );
    // FORCE creates a PEL entry for an entry never delivered.
    c.cmd(&["XADD", "s", "4-1", "f", "4-1"]);
    c.cmd(&["XGROUP", "SETID", "s", "g", "3-1"]);
    assert_eq!(
        c.cmd(&["XCLAIM", "s", "g", "erin", "0", "4-1", "FORCE", "JUSTID"]),
        bulks(&["4-1"])
    );
    // XAUTOCLAIM: a cursor, the claimed entries, the ids deleted since.
    c.cmd(&["XDEL", "s", "3-1"]);
    assert_eq!(
        c.cmd(&["XAUTOCLAIM", "s", "g", "carol", "0", "0", "COUNT", "1"]),
        arr(vec![
            b("2-1"),
            arr(vec![entry("1-1", &["f", "1-1"])]),
            arr(vec![])
        ])
    );
    assert_eq!(
        c.cmd(&["XAUTOCLAIM", "s", "g", "carol", "0", "2-1", "JUSTID"]),
        arr(vec![b("0-0"), bulks(&["2-1", "4-1"]), bulks(&["3-1"])])
    );
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g"]),
        arr(vec![
            R::Int(3),
            b("1-1"),
            b("4-1"),
            arr(vec![arr(vec![b("carol"), b("3")])])
        ])
    );
    assert_eq!(
        c.cmd(&["XAUTOCLAIM", "s", "g", "carol", "0", "0", "COUNT", "0"]),
        err("COUNT must be > 0")
    );
    assert_eq!(
        c.cmd(&["XAUTOCLAIM", "s", "g", "carol", "0", "0", "COUNT", "x"]),
        err("COUNT must be > 0")
    );
    assert_eq!(
        c.cmd(&["XAUTOCLAIM", "s", "g", "carol", "0", "0", "foo"]),
        err("syntax error")
    );
    assert_eq!(
        c.cmd(&["XAUTOCLAIM", "s", "nog", "carol", "0", "0"]),
        R::Err("NOGROUP No such key 's' or consumer group 'nog'".into())
    );
    // XINFO CONSUMERS: alice, bob and erin hold nothing now.
    let consumers = c.cmd(&["XINFO", "CONSUMERS", "s", "g"]).items();
    let names: Vec<R> = consumers.iter().map(|c| field(c, "name")).collect();
    assert_eq!(names, vec![b("alice"), b("bob"), b("carol"), b("erin")]);
    let pending: Vec<R> = consumers.iter().map(|c| field(c, "pending")).collect();
    assert_eq!(pending, vec![R::Int(0), R::Int(0), R::Int(3), R::Int(0)]);
}

// Goal: XINFO's subcommands, HELP and errors, and STREAM FULL's shape.
// Method: a stream with one group and two consumers; times checked for range only.
#[test]
fn xinfo_replies() {
    let (_dir, _server, mut c) = start();
    c.cmd(&["XADD", "s", "1-1", "a", "1"]);
    c.cmd(&["XADD", "s", "2-1", "b", "2"]);
    c.cmd(&["XGROUP", "CREATE", "s", "g", "0"]);
    c.cmd(&[
        "XREADGROUP",
        "GROUP",
        "g",
        "alice",
        "COUNT",
        "1",
        "STREAMS",
        "s",
        ">",
    ]);
    c.cmd(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">"]);
    let full = c.cmd(&["XINFO", "STREAM", "s", "FULL"]);
    assert_eq!(field(&full, "length"), R::Int(2));
    assert_eq!(
        field(&full, "entries"),
        arr(vec![entry("1-1", &["a", "1"]), entry("2-1", &["b", "2"])])
    );
    let groups = field(&full, "groups").items();
    assert_eq!(groups.len(), 1);
    let g = &groups[0];
    assert_eq!(field(g, "name"), b("g"));
    assert_eq!(field(g, "last-delivered-id"), b("2-1"));
    assert_eq!(field(g, "entries-read"), R::Int(2));
    assert_eq!(field(g, "lag"), R::Int(0));
    assert_eq!(field(g, "pel-count"), R::Int(2));
    let pel = field(g, "pending").items();
    let R::Arr(first) = &pel[0] else { panic!() };
    assert_eq!(first[0], b("1-1"));
    assert_eq!(first[1], b("alice"));
    assert!(
        matches!(first[2], R::Int(t) if t > 1_600_000_000_000),
        "{first:?}"
    );
    assert_eq!(first[3], R::Int(1));
    let consumers = field(g, "consumers").items();
    assert_eq!(field(&consumers[1], "name"), b("bob"));
    assert_eq!(field(&consumers[1], "pel-count"), R::Int(1));
    assert!(matches!(field(&consumers[1], "seen-time"), R::Int(t) if t > 1_600_000_000_000));
    let own = field(&consumers[1], "pending").items();
    let R::Arr(own) = &own[0] else { panic!() };
    assert_eq!(own[0], b("2-1"));
    assert_eq!(own[2], R::Int(1));
    let one = c.cmd(&["XINFO", "STREAM", "s", "FULL", "COUNT", "1"]);
    assert_eq!(field(&one, "entries"), arr(vec![entry("1-1", &["a", "1"])]));
    assert_eq!(
        c.cmd(&["XINFO", "STREAM", "s", "FULL", "COUNT", "x"]),
        err("value is not an integer or out of range")
    );
    assert_eq!(
        c.cmd(&["XINFO", "STREAM", "s", "foo"]),
        err("unknown subcommand or wrong number of arguments for 'STREAM'. Try XINFO HELP.")
    );
    assert_eq!(c.cmd(&["XINFO", "GROUPS", "nokey"]), err("no such key"));
    assert_eq!(
        c.cmd(&["XINFO", "CONSUMERS", "s", "nog"]),
        R::Err("NOGROUP No such consumer group 'nog' for key name 's'".into())
    );
    assert_eq!(
        c.cmd(&["XINFO", "foo"]),
        err("unknown subcommand 'foo'. Try XINFO HELP.")
    );
    assert_eq!(
        c.cmd(&["XINFO", "GROUPS"]),
        err("wrong number of arguments for 'xinfo|groups' command")
    );
    assert_eq!(c.cmd(&["XINFO", "HELP"]).items().len(), 9);
    let short = c.cmd(&["XINFO", "STREAM", "s"]);
    assert_eq!(field(&short, "groups"), R::Int(1));
    assert_eq!(field(&short, "first-entry"), entry("1-1", &["a", "1"]));
    // RESP3: maps.
    c.cmd(&["HELLO", "3"]);
    let R::Arr(groups) = c.cmd(&["XINFO", "GROUPS", "s"]) else {
        panic!("array expected");
    };
    assert!(matches!(&groups[0], R::Map(pairs) if pairs.len() == 6));
}

/// The group state a test expects after a restart, read back.
fn group_state(c: &mut Client) -> (R, R, R) {
    (
        c.cmd(&["XPENDING", "s", "g"]),
        c.cmd(&["XINFO", "GROUPS", "s"]),
        c.cmd(&["XRANGE", "s", "-", "+"]),
    )
}

// Goal: consumer groups are durable: last-delivered id, entries-read, the PEL with its
// delivery counts and owners, and the consumers survive a restart of `forest serve`, and the
// restart's repair pass leaves them alone.
// Method: build group state, stop the server, start a new one on the same directory,
// compare XPENDING / XINFO GROUPS / XRANGE, then keep using the group.
#[test]
fn group_state_survives_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let before = {
        let server = Running::start(dir.path(), IoModel::Threads);
        let mut c = server.client();
        for i in 1..=5 {
            c.cmd(&["XADD", "s", &format!("{i}-0"), "f", &i.to_string()]);
        }
        c.cmd(&["XGROUP", "CREATE", "s", "g", "0"]);
        c.cmd(&["XGROUP", "CREATE", "s", "other", "$"]);
        c.cmd(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "alice",
            "COUNT",
            "2",
            "STREAMS",
            "s",
            ">",
        ]);
        c.cmd(&[
            "XREADGROUP",
            "GROUP",
            "g",
            "bob",
            "COUNT",
            "2",
            "STREAMS",
            "s",
            ">",
        ]);
        c.cmd(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0"]);
        c.cmd(&["XACK", "s", "g", "1-0"]);
        c.cmd(&["XDEL", "s", "5-0"]);
        c.cmd(&["XGROUP", "CREATE", "e", "eg", "$", "MKSTREAM"]);
        group_state(&mut c)
    };
    let server = Running::start(dir.path(), IoModel::Threads);
    let mut c = server.client();
    assert_eq!(group_state(&mut c), before);
    assert_eq!(
        before.0,
        arr(vec![
            R::Int(3),
            b("2-0"),
            b("4-0"),
            arr(vec![
                arr(vec![b("alice"), b("1")]),
                arr(vec![b("bob"), b("2")])
            ])
        ])
    );
    let rows = c
        .cmd(&["XPENDING", "s", "g", "-", "+", "10", "bob"])
        .items();
    let counts: Vec<R> = rows
        .iter()
        .map(|r| match r {
            R::Arr(f) => f[3].clone(),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(counts, vec![R::Int(2), R::Int(2)]);
    assert_eq!(c.cmd(&["XLEN", "e"]), R::Int(0));
    assert_eq!(c.cmd(&["XINFO", "GROUPS", "e"]).items().len(), 1);
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "carol", "STREAMS", "s", ">"]),
        R::Nil
    );
    c.cmd(&["XADD", "s", "6-0", "f", "6"]);
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "carol", "STREAMS", "s", ">"]),
        arr(vec![arr(vec![
            b("s"),
            arr(vec![entry("6-0", &["f", "6"])])
        ])])
    );
    assert_eq!(
        c.cmd(&["XACK", "s", "g", "2-0", "3-0", "4-0", "6-0"]),
        R::Int(4)
    );
    assert_eq!(
        c.cmd(&["XPENDING", "s", "g"]),
        arr(vec![R::Int(0), R::Nil, R::Nil, R::Nil])
    );
    assert_eq!(c.cmd(&["DEL", "s", "e"]), R::Int(2));
    assert_eq!(c.cmd(&["DBSIZE"]), R::Int(0));
}

/// xorshift64*: a seeded sequence, enough to pick commands.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn model_range(model: &BTreeMap<(u64, u64), String>, from: (u64, u64), to: (u64, u64)) -> R {
    if from > to {
        return arr(vec![]);
    }
    arr(model
        .range(from..=to)
        .map(|((ms, seq), v)| entry(&format!("{ms}-{seq}"), &["v", v]))
        .collect())
}

// Goal: XADD (with MAXLEN/MINID), XDEL, XTRIM, XRANGE and XREVRANGE agree with an
// in-memory ordered map of the stream, across restarts of the server.
// Method: 1 500 seeded random commands (ids of few distinct ms values so that seqs and
// exclusive bounds meet); every reply compared with the model's; the server restarted
// every 500 commands.
#[test]
fn model_of_xadd_xdel_xtrim_xrange() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut model: BTreeMap<(u64, u64), String> = BTreeMap::new();
    let mut last = (0u64, 0u64);
    let mut exists = false;
    for round in 0..3 {
        let server = Running::start(dir.path(), IoModel::Threads);
        let mut c = server.client();
        for step in 0..500 {
            let value = format!("{round}-{step}");
            let id = |rng: &mut Rng| (rng.below(40), rng.below(4));
            match rng.below(7) {
                0 | 1 => {
                    let (ms, seq) = id(&mut rng);
                    let want = if (ms, seq) > last {
                        last = (ms, seq);
                        model.insert((ms, seq), value.clone());
                        exists = true;
                        b(&format!("{ms}-{seq}"))
                    } else if (ms, seq) == (0, 0) {
                        err("The ID specified in XADD must be greater than 0-0")
                    } else {
                        err("The ID specified in XADD is equal or smaller than the target stream top item")
                    };
                    let got = c.cmd(&["XADD", "s", &format!("{ms}-{seq}"), "v", &value]);
                    assert_eq!(got, want, "XADD {ms}-{seq}");
                }
                2 => {
                    // `ms-*` with a trim of either kind.
                    let ms = last.0 + rng.below(2);
                    let id = if ms == last.0 {
                        (ms, last.1 + 1)
                    } else {
                        (ms, 0)
                    };
                    last = id;
                    exists = true;
                    model.insert(id, value.clone());
                    let (how, arg) = if rng.below(2) == 0 {
                        let keep = rng.below(30) as usize;
                        while model.len() > keep {
                            model.pop_first();
                        }
                        ("MAXLEN", keep.to_string())
                    } else {
                        let min = (rng.below(40), rng.below(4));
                        model.retain(|k, _| *k >= min);
                        ("MINID", format!("{}-{}", min.0, min.1))
                    };
                    let got = c.cmd(&["XADD", "s", how, &arg, &format!("{ms}-*"), "v", &value]);
                    assert_eq!(got, b(&format!("{}-{}", id.0, id.1)));
                }
                3 => {
                    let ids: Vec<(u64, u64)> =
                        (0..1 + rng.below(3)).map(|_| id(&mut rng)).collect();
                    let mut want = 0;
                    for i in &ids {
                        if model.remove(i).is_some() {
                            want += 1;
                        }
                    }
                    let mut argv = vec!["XDEL".to_string(), "s".to_string()];
                    argv.extend(ids.iter().map(|(m, s)| format!("{m}-{s}")));
                    let argv: Vec<&str> = argv.iter().map(String::as_str).collect();
                    let got = c.cmd(&argv);
                    let want = if exists { R::Int(want) } else { R::Int(0) };
                    assert_eq!(got, want, "{argv:?}");
                }
                4 => {
                    let keep = rng.below(40) as usize;
                    let mut removed = 0;
                    while model.len() > keep {
                        model.pop_first();
                        removed += 1;
                    }
                    let got = c.cmd(&["XTRIM", "s", "MAXLEN", &keep.to_string()]);
                    assert_eq!(got, R::Int(removed), "XTRIM MAXLEN {keep}");
                }
                5 => {
                    let (a, b2) = (id(&mut rng), id(&mut rng));
                    let exclusive = rng.below(2) == 0;
                    let (from, to) = (a.min(b2), a.max(b2));
                    let (from_arg, to_arg, mf, mt) = if exclusive {
                        let mf = if from.1 == u64::MAX {
                            (from.0 + 1, 0)
                        } else {
                            (from.0, from.1 + 1)
                        };
                        let mt = if to.1 == 0 {
                            if to.0 == 0 {
                                None
                            } else {
                                Some((to.0 - 1, u64::MAX))
                            }
                        } else {
                            Some((to.0, to.1 - 1))
                        };
                        (
                            format!("({}-{}", from.0, from.1),
                            format!("({}-{}", to.0, to.1),
                            mf,
                            mt,
                        )
                    } else {
                        (
                            format!("{}-{}", from.0, from.1),
                            format!("{}-{}", to.0, to.1),
                            from,
                            Some(to),
                        )
                    };
                    let Some(mt) = mt else {
                        continue;
                    };
                    let want = model_range(&model, mf, mt);
                    assert_eq!(c.cmd(&["XRANGE", "s", &from_arg, &to_arg]), want);
                    let R::Arr(mut rev) = want else { panic!() };
                    rev.reverse();
                    assert_eq!(c.cmd(&["XREVRANGE", "s", &to_arg, &from_arg]), arr(rev));
                }
                _ => {
                    let want = if exists { model.len() as i64 } else { 0 };
                    assert_eq!(c.cmd(&["XLEN", "s"]), R::Int(want));
                }
            }
        }
        assert_eq!(
            c.cmd(&["XRANGE", "s", "-", "+"]),
            model_range(&model, (0, 0), (u64::MAX, u64::MAX))
        );
    }
}
