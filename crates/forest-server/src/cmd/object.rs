//! OBJECT ENCODING and HELP, and FUNCTION FLUSH and LIST as Redis answers with no function
//! loaded (forest runs no scripts).
//!
//! OBJECT ENCODING answers the encoding Redis 7.2 would use for a key of the same type and
//! content, under Redis's default thresholds (src/object.c, t_string.c, t_list.c, t_set.c,
//! t_hash.c, t_zset.c): forest stores every type the same way (entries of one ordered map),
//! so the answer is what a client that tunes by encoding expects, not how forest stores
//! it. Redis's answer also depends on a key's history (a set converted to a hash table
//! stays one when it shrinks; APPEND and SETRANGE leave a string `raw`); forest's depends
//! on the content only (docs/PROTOCOL.md "Keys").

use std::ops::{Bound, ControlFlow};

use forest_core::Order;

use super::{coll, is_word, unknown_subcommand, wrong_arity, Ctx, Reply};
use crate::collection::{member_prefix, Kind, RESERVED_BYTE};
use crate::frame::Frame;
use crate::parse::parse_int;

/// Redis's defaults: `list-max-listpack-size -2` (8 KiB), `set-max-intset-entries`,
/// `set-max-listpack-entries`/`-value`, `hash-max-listpack-entries`/`-value`,
/// `zset-max-listpack-entries`/`-value`.
const LIST_LISTPACK_BYTES_MAX: usize = 8192;
const SET_INTSET_ENTRIES_MAX: usize = 512;
const LISTPACK_ENTRIES_MAX: usize = 128;
const LISTPACK_VALUE_BYTES_MAX: usize = 64;
/// Strings up to this length are `embstr` (OBJ_ENCODING_EMBSTR_SIZE_LIMIT).
const EMBSTR_BYTES_MAX: usize = 44;

/// OBJECT ENCODING key | OBJECT HELP.
pub fn object(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sub = argv[1];
    if is_word(sub, "help") && argv.len() == 2 {
        let lines = [
            "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "HELP",
            "    Print this help.",
        ];
        return Ok(Frame::Array(
            lines.iter().map(|l| Frame::Simple((*l).into())).collect(),
        ));
    }
    if !is_word(sub, "encoding") {
        return Err(unknown_subcommand("object", sub));
    }
    if argv.len() != 3 {
        return Err(wrong_arity("object|encoding"));
    }
    let key = argv[2];
    if key.first() == Some(&RESERVED_BYTE) {
        return Err(coll::reserved_key());
    }
    let mut value = Vec::new();
    if ctx.read(key, &mut value) {
        return Ok(Frame::bulk(string_encoding(&value)));
    }
    let Some(meta) = coll::read_meta(ctx, key)? else {
        return Ok(Frame::Null);
    };
    let encoding = match meta.kind {
        Kind::List => list_encoding(ctx, key),
        Kind::Set => set_encoding(ctx, key),
        Kind::Hash => hash_encoding(ctx, key),
        Kind::ZSet => zset_encoding(ctx, key),
        Kind::Stream => "stream",
    };
    Ok(Frame::bulk(encoding))
}

/// `int` for what Redis stores as a long (a canonical integer of up to 20 bytes),
/// `embstr` up to 44 bytes, else `raw`.
pub fn string_encoding(value: &[u8]) -> &'static str {
    if value.len() <= 20 && parse_int(value).is_some() {
        "int"
    } else if value.len() <= EMBSTR_BYTES_MAX {
        "embstr"
    } else {
        "raw"
    }
}

/// Called with each member's suffix and value; breaks to stop.
type Visitor<'f> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'f;

/// Visits up to `limit` member entries of `key` (suffix, value); stops when `f` says so.
fn visit_members(
    ctx: &Ctx<'_, '_>,
    key: &[u8],
    sub_prefix: &[u8],
    limit: usize,
    f: &mut Visitor<'_>,
) {
    let mut prefix = member_prefix(key);
    prefix.extend_from_slice(sub_prefix);
    let end = coll::prefix_upper(&prefix);
    ctx.scan_up_to(
        Bound::Included(prefix.as_slice()),
        Bound::Excluded(end.as_slice()),
        Order::Ascending,
        limit,
        &mut |k, v| f(&k[prefix.len()..], v),
    );
}

/// The bytes a listpack entry takes for `value` (lpEncodeBacklen and lpEncodeString /
/// lpEncodeIntegerGetType): its encoding, its data and its back length.
fn listpack_entry_bytes(value: &[u8]) -> usize {
    let body = match parse_int(value) {
        Some(n) if (0..=127).contains(&n) => 1,
        Some(n) if (-4096..=4095).contains(&n) => 2,
        Some(n) if i16::try_from(n).is_ok() => 3,
        Some(n) if (-(1 << 23)..(1 << 23)).contains(&n) => 4,
        Some(n) if i32::try_from(n).is_ok() => 5,
        Some(_) => 9,
        None if value.len() < 64 => 1 + value.len(),
        None if value.len() < 4096 => 2 + value.len(),
        None => 5 + value.len(),
    };
    let back = match body {
        0..=127 => 1,
        128..=16383 => 2,
        16384..=2_097_151 => 3,
        2_097_152..=268_435_455 => 4,
        _ => 5,
    };
    body + back
}

/// `listpack` while the elements fit one 8 KiB listpack, else `quicklist`.
fn list_encoding(ctx: &Ctx<'_, '_>, key: &[u8]) -> &'static str {
    // The listpack's header (6 bytes) and end byte.
    let mut bytes = 7usize;
    visit_members(ctx, key, b"", usize::MAX, &mut |_, v| {
        bytes += listpack_entry_bytes(v);
        if bytes > LIST_LISTPACK_BYTES_MAX {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    });
    if bytes > LIST_LISTPACK_BYTES_MAX {
        "quicklist"
    } else {
        "listpack"
    }
}

/// `intset` for up to 512 integer members, `listpack` for up to 128 members of up to 64
/// bytes, else `hashtable`.
fn set_encoding(ctx: &Ctx<'_, '_>, key: &[u8]) -> &'static str {
    let (mut count, mut all_ints, mut all_short) = (0usize, true, true);
    visit_members(ctx, key, b"", SET_INTSET_ENTRIES_MAX + 1, &mut |m, _| {
        count += 1;
        all_ints &= parse_int(m).is_some();
        all_short &= m.len() <= LISTPACK_VALUE_BYTES_MAX;
        ControlFlow::Continue(())
    });
    if all_ints && count <= SET_INTSET_ENTRIES_MAX {
        "intset"
    } else if all_short && count <= LISTPACK_ENTRIES_MAX {
        "listpack"
    } else {
        "hashtable"
    }
}

/// `listpack` for up to 128 fields whose fields and values are up to 64 bytes, else
/// `hashtable`.
fn hash_encoding(ctx: &Ctx<'_, '_>, key: &[u8]) -> &'static str {
    let (mut count, mut all_short) = (0usize, true);
    visit_members(ctx, key, b"", LISTPACK_ENTRIES_MAX + 1, &mut |f, v| {
        count += 1;
        all_short &= f.len() <= LISTPACK_VALUE_BYTES_MAX && v.len() <= LISTPACK_VALUE_BYTES_MAX;
        ControlFlow::Continue(())
    });
    if all_short && count <= LISTPACK_ENTRIES_MAX {
        "listpack"
    } else {
        "hashtable"
    }
}

/// `listpack` for up to 128 members of up to 64 bytes, else `skiplist`.
fn zset_encoding(ctx: &Ctx<'_, '_>, key: &[u8]) -> &'static str {
    let (mut count, mut all_short) = (0usize, true);
    // The by-member entries ('n' + member): one per member.
    visit_members(ctx, key, b"n", LISTPACK_ENTRIES_MAX + 1, &mut |m, _| {
        count += 1;
        all_short &= m.len() <= LISTPACK_VALUE_BYTES_MAX;
        ControlFlow::Continue(())
    });
    if all_short && count <= LISTPACK_ENTRIES_MAX {
        "listpack"
    } else {
        "skiplist"
    }
}

/// FUNCTION FLUSH [ASYNC|SYNC] | FUNCTION LIST: there are no functions to flush or list.
pub fn function(_ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let sub = argv[1];
    if is_word(sub, "flush") {
        return match argv.len() {
            2 => Ok(Frame::ok()),
            3 if is_word(argv[2], "async") || is_word(argv[2], "sync") => Ok(Frame::ok()),
            3 => Err(Frame::err("FUNCTION FLUSH only supports SYNC|ASYNC option")),
            _ => Err(Frame::err(format!(
                "unknown subcommand or wrong number of arguments for '{}'. Try FUNCTION HELP.",
                super::printable(sub, 128)
            ))),
        };
    }
    if is_word(sub, "list") {
        // LIBRARYNAME pattern and WITHCODE filter nothing out of nothing.
        return Ok(Frame::Array(Vec::new()));
    }
    Err(unknown_subcommand("function", sub))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    fn encoding(h: &mut Harness, key: &str) -> Frame {
        h.run(&["OBJECT", "ENCODING", key])
    }

    // Goal: OBJECT ENCODING answers Redis 7.2's encodings at its default thresholds, for
    // every type, on both sides of each threshold. Method: keys built just under and just
    // over each limit.
    #[test]
    fn encodings() {
        let mut h = Harness::new();
        h.run(&["SET", "int", "12345"]);
        h.run(&["SET", "neg", "-1"]);
        h.run(&["SET", "notint", "012"]);
        h.run(&["SET", "emb", &"x".repeat(44)]);
        h.run(&["SET", "raw", &"x".repeat(45)]);
        h.run(&["SET", "bigint", "123456789012345678901"]);
        for (key, want) in [
            ("int", "int"),
            ("neg", "int"),
            ("notint", "embstr"),
            ("emb", "embstr"),
            ("raw", "raw"),
            ("bigint", "embstr"),
        ] {
            assert_eq!(encoding(&mut h, key), bulk(want), "{key}");
        }
        assert_eq!(encoding(&mut h, "none"), Frame::Null);

        h.run(&["RPUSH", "l", "a", "b"]);
        assert_eq!(encoding(&mut h, "l"), bulk("listpack"));
        let big = "v".repeat(1000);
        for _ in 0..9 {
            h.run(&["RPUSH", "lbig", &big]);
        }
        assert_eq!(encoding(&mut h, "lbig"), bulk("quicklist"));

        let ints: Vec<String> = (0..512).map(|i| i.to_string()).collect();
        let mut sadd = vec!["SADD", "si"];
        sadd.extend(ints.iter().map(String::as_str));
        h.run(&sadd);
        assert_eq!(encoding(&mut h, "si"), bulk("intset"));
        h.run(&["SADD", "si", "512"]);
        assert_eq!(encoding(&mut h, "si"), bulk("hashtable"));
        h.run(&["SADD", "sl", "a", "1"]);
        assert_eq!(encoding(&mut h, "sl"), bulk("listpack"));
        h.run(&["SADD", "sl", &"m".repeat(65)]);
        assert_eq!(encoding(&mut h, "sl"), bulk("hashtable"));

        h.run(&["HSET", "h", "f", "v"]);
        assert_eq!(encoding(&mut h, "h"), bulk("listpack"));
        h.run(&["HSET", "h", "g", &"v".repeat(65)]);
        assert_eq!(encoding(&mut h, "h"), bulk("hashtable"));
        let fields: Vec<String> = (0..129).map(|i| format!("f{i}")).collect();
        for f in &fields[..128] {
            h.run(&["HSET", "h128", f, "v"]);
        }
        assert_eq!(encoding(&mut h, "h128"), bulk("listpack"));
        h.run(&["HSET", "h128", &fields[128], "v"]);
        assert_eq!(encoding(&mut h, "h128"), bulk("hashtable"));

        h.run(&["ZADD", "z", "1", "a"]);
        assert_eq!(encoding(&mut h, "z"), bulk("listpack"));
        h.run(&["ZADD", "z", "2", &"m".repeat(65)]);
        assert_eq!(encoding(&mut h, "z"), bulk("skiplist"));

        h.run(&["XADD", "x", "1-1", "f", "v"]);
        assert_eq!(encoding(&mut h, "x"), bulk("stream"));

        assert_eq!(
            h.run(&["OBJECT", "ENCODING"]),
            Frame::Error("ERR wrong number of arguments for 'object|encoding' command".into())
        );
        assert_eq!(
            h.run(&["OBJECT", "NOPE", "k"]),
            Frame::Error("ERR unknown subcommand 'NOPE'. Try OBJECT HELP.".into())
        );
        assert!(matches!(h.run(&["OBJECT", "HELP"]), Frame::Array(_)));
        assert_eq!(
            h.run_bytes(&[b"OBJECT", b"ENCODING", b"\xfftk"]),
            Frame::Error("ERR keys beginning with byte 0xff are reserved by forest".into())
        );
    }

    // Goal: FUNCTION FLUSH and LIST answer as Redis with no functions loaded.
    // Method: each form, and the errors of bad ones.
    #[test]
    fn function() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["FUNCTION", "FLUSH"]), Frame::ok());
        assert_eq!(h.run(&["FUNCTION", "FLUSH", "ASYNC"]), Frame::ok());
        assert_eq!(h.run(&["function", "flush", "sync"]), Frame::ok());
        assert_eq!(
            h.run(&["FUNCTION", "FLUSH", "NOW"]),
            Frame::Error("ERR FUNCTION FLUSH only supports SYNC|ASYNC option".into())
        );
        assert_eq!(
            h.run(&["FUNCTION", "FLUSH", "SYNC", "x"]),
            Frame::Error(
                "ERR unknown subcommand or wrong number of arguments for 'FLUSH'. Try FUNCTION HELP."
                    .into()
            )
        );
        assert_eq!(h.run(&["FUNCTION", "LIST"]), Frame::Array(vec![]));
        assert_eq!(
            h.run(&["FUNCTION", "LOAD", "x"]),
            Frame::Error("ERR unknown subcommand 'LOAD'. Try FUNCTION HELP.".into())
        );
    }
}
