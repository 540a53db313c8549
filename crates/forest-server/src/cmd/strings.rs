//! GETDEL, GETRANGE (SUBSTR), SETRANGE, INCRBYFLOAT and LCS, with Redis's replies and error
//! texts (Redis's src/t_string.c; docs/PROTOCOL.md "Strings"). Each write holds its key's
//! stripe lock ([`coll::string_write`]) and is one read-modify-write of the store, so it is
//! atomic against every other write of the key.
//!
//! The value limit is the store's ([`forest_core::VALUE_BYTES_MAX`], 1 MiB) where Redis's is
//! `proto-max-bulk-len` (512 MB): SETRANGE past it answers Redis's own error text.

use forest_core::VALUE_BYTES_MAX;
use forest_store::Rmw;

use super::{coll, float80, int_arg, is_word, syntax_error, Ctx, Reply};
use crate::frame::Frame;

/// Redis's error when a write would make a string longer than the limit.
pub fn too_long() -> Frame {
    Frame::err("string exceeds maximum allowed size (proto-max-bulk-len)")
}

/// The string at `key` (None if absent), or WRONGTYPE if it is a collection.
pub fn read_string(ctx: &mut Ctx<'_, '_>, key: &[u8]) -> Result<Option<Vec<u8>>, Frame> {
    let mut value = Vec::new();
    if ctx.read(key, &mut value) {
        return Ok(Some(value));
    }
    match coll::kind_of(ctx, key)? {
        None => Ok(None),
        Some(_) => Err(coll::wrongtype()),
    }
}

/// GETDEL key: the value, removed in the same atomic step; null if absent.
pub fn getdel(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let key = argv[1];
    let _guard = coll::string_write(ctx, key)?;
    let remove = |ctx: &mut Ctx<'_, '_>| {
        ctx.read_modify_write(key, |old| {
            Ok(if old.is_some() {
                Rmw::Remove
            } else {
                Rmw::Keep
            })
        })
    };
    let old = if ctx.deadline(key).is_none() {
        remove(ctx)?
    } else {
        // The deadline goes with the value, in the same batch.
        super::expire::in_unit(ctx, |ctx| {
            let old = remove(ctx)?;
            if old.is_some() {
                super::expire::stage_deadline(ctx, key, None)?;
            }
            Ok(old)
        })?
    };
    Ok(old.map_or(Frame::Null, Frame::Bulk))
}

/// Redis's GETRANGE rule: negative indexes count from the end, the range is clamped, an
/// empty or inverted range is empty.
pub fn byte_range(value: &[u8], start: i64, end: i64) -> &[u8] {
    let len = value.len() as i64;
    let start = if start < 0 { start + len } else { start };
    let end = if end < 0 { end + len } else { end };
    if len == 0 || start >= len || end < 0 || start > end {
        return &[];
    }
    let (start, end) = (start.max(0) as usize, end.min(len - 1) as usize);
    &value[start..=end]
}

/// GETRANGE key start end (and SUBSTR): the bytes in the inclusive range.
pub fn getrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let start = int_arg(argv[2])?;
    let end = int_arg(argv[3])?;
    let value = read_string(ctx, argv[1])?.unwrap_or_default();
    Ok(Frame::bulk(byte_range(&value, start, end)))
}

/// SETRANGE key offset value: overwrites from `offset`, padding with zero bytes; the new
/// length.
pub fn setrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let offset = int_arg(argv[2])?;
    if offset < 0 {
        return Err(Frame::err("offset is out of range"));
    }
    let value = argv[3];
    let _guard = coll::string_write(ctx, argv[1])?;
    let mut outcome: Result<usize, Frame> = Ok(0);
    ctx.read_modify_write(argv[1], |old| {
        if value.is_empty() {
            // Nothing to set: the current length, and an absent key stays absent.
            outcome = Ok(old.map_or(0, <[u8]>::len));
            return Ok(Rmw::Keep);
        }
        let end = (offset as u64).saturating_add(value.len() as u64);
        if end > VALUE_BYTES_MAX as u64 {
            outcome = Err(too_long());
            return Ok(Rmw::Keep);
        }
        let (offset, end) = (offset as usize, end as usize);
        let mut new = old.map(<[u8]>::to_vec).unwrap_or_default();
        if new.len() < end {
            new.resize(end, 0);
        }
        new[offset..end].copy_from_slice(value);
        outcome = Ok(new.len());
        Ok(Rmw::Put(new))
    })?;
    outcome.map(|len| Frame::Integer(len as i64))
}

/// INCRBYFLOAT key increment: the new value as a bulk string, in Redis's human form, computed
/// as Redis computes it ([`float80`]).
pub fn incrbyfloat(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let increment = argv[2];
    let _guard = coll::string_write(ctx, argv[1])?;
    let mut outcome: Result<String, Frame> = Err(not_a_float());
    ctx.read_modify_write(argv[1], |old| {
        outcome = float80::incr_by_float(old.unwrap_or(b"0"), increment).map_err(|e| match e {
            float80::Refusal::NotAFloat => not_a_float(),
            float80::Refusal::NanOrInfinity => {
                Frame::err("increment would produce NaN or Infinity")
            }
        });
        Ok(match &outcome {
            Ok(text) => Rmw::Put(text.clone().into_bytes()),
            Err(_) => Rmw::Keep,
        })
    })?;
    outcome.map(Frame::bulk)
}

fn not_a_float() -> Frame {
    Frame::err("value is not a valid float")
}

/// The largest LCS table forest builds, in bytes (Redis's bound is proto-max-bulk-len,
/// 512 MB; a table this size takes tens of milliseconds to fill).
pub const LCS_TABLE_BYTES_MAX: u64 = 64 << 20;

/// LCS key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]: the longest common
/// subsequence, its length, or its matching ranges (Redis's dynamic program and its walk
/// back from the end, so ranges come last-first as Redis's do).
pub fn lcs(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let not_strings = || Frame::err("The specified keys must contain string values");
    let a = read_string(ctx, argv[1]).map_err(|_| not_strings())?;
    let b = read_string(ctx, argv[2]).map_err(|_| not_strings())?;
    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
    let (mut get_len, mut get_idx, mut with_match_len) = (false, false, false);
    let mut min_match_len = 0i64;
    let mut i = 3;
    while i < argv.len() {
        let opt = argv[i];
        if is_word(opt, "idx") {
            get_idx = true;
        } else if is_word(opt, "len") {
            get_len = true;
        } else if is_word(opt, "withmatchlen") {
            with_match_len = true;
        } else if is_word(opt, "minmatchlen") && i + 1 < argv.len() {
            min_match_len = int_arg(argv[i + 1])?.max(0);
            i += 1;
        } else {
            return Err(syntax_error());
        }
        i += 1;
    }
    if get_len && get_idx {
        return Err(Frame::err(
            "If you want both the length and indexes, please just use IDX.",
        ));
    }
    let cells = (a.len() as u64 + 1) * (b.len() as u64 + 1);
    if cells.saturating_mul(4) > LCS_TABLE_BYTES_MAX {
        return Err(Frame::err(
            "Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len",
        ));
    }
    let width = b.len() + 1;
    let mut table = vec![0u32; cells as usize];
    for i in 1..=a.len() {
        for j in 1..=b.len() {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let total = table[a.len() * width + b.len()];
    if get_len {
        return Ok(Frame::Integer(i64::from(total)));
    }
    // Walk back from the end, collecting the common bytes and the contiguous ranges.
    let mut common = vec![0u8; total as usize];
    let mut left = total as usize;
    let mut ranges: Vec<Frame> = Vec::new();
    // The current range: (a start, a end, b start, b end), inclusive.
    let mut current: Option<(usize, usize, usize, usize)> = None;
    let (mut i, mut j) = (a.len(), b.len());
    let emit = |range: (usize, usize, usize, usize), ranges: &mut Vec<Frame>| {
        let len = range.1 - range.0 + 1;
        if len as i64 >= min_match_len {
            let pair = |s: usize, e: usize| Frame::Array(vec![int(s), int(e)]);
            let mut item = vec![pair(range.0, range.1), pair(range.2, range.3)];
            if with_match_len {
                item.push(int(len));
            }
            ranges.push(Frame::Array(item));
        }
    };
    while i > 0 && j > 0 {
        if a[i - 1] == b[j - 1] {
            left -= 1;
            common[left] = a[i - 1];
            current = Some(match current {
                None => (i - 1, i - 1, j - 1, j - 1),
                // Steps back one byte in both: the range grows at its start.
                Some((_, ae, _, be)) => (i - 1, ae, j - 1, be),
            });
            i -= 1;
            j -= 1;
            if i == 0 || j == 0 {
                if let Some(range) = current.take() {
                    emit(range, &mut ranges);
                }
            }
        } else {
            if table[(i - 1) * width + j] > table[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            if let Some(range) = current.take() {
                emit(range, &mut ranges);
            }
        }
    }
    if get_idx {
        return Ok(Frame::Map(vec![
            (Frame::bulk("matches"), Frame::Array(ranges)),
            (Frame::bulk("len"), Frame::Integer(i64::from(total))),
        ]));
    }
    Ok(Frame::Bulk(common))
}

fn int(n: usize) -> Frame {
    Frame::Integer(n as i64)
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    fn err(text: &str) -> Frame {
        Frame::Error(text.into())
    }

    // Goal: GETDEL returns and removes a string, null for a missing key, WRONGTYPE for a
    // collection (which stays). Method: each case, then GET/EXISTS.
    #[test]
    fn getdel() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "v"]);
        assert_eq!(h.run(&["GETDEL", "k"]), bulk("v"));
        assert_eq!(h.run(&["EXISTS", "k"]), Frame::Integer(0));
        assert_eq!(h.run(&["GETDEL", "k"]), Frame::Null);
        h.run(&["RPUSH", "l", "a"]);
        assert_eq!(h.run(&["GETDEL", "l"]), coll_wrongtype());
        assert_eq!(h.run(&["LLEN", "l"]), Frame::Integer(1));
    }

    fn coll_wrongtype() -> Frame {
        super::coll::wrongtype()
    }

    // Goal: GETRANGE and SUBSTR follow Redis's index rules (string.tcl's cases).
    // Method: positive, negative, clamped, inverted and out-of-range ranges.
    #[test]
    fn getrange() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "Hello World"]);
        for (start, end, want) in [
            ("0", "-1", "Hello World"),
            ("0", "3", "Hell"),
            ("-3", "-1", "rld"),
            ("5", "3", ""),
            ("5", "5000", " World"),
            ("-5000", "10000", "Hello World"),
            ("-1", "-5", ""),
            ("11", "20", ""),
            ("0", "-100", ""),
        ] {
            assert_eq!(
                h.run(&["GETRANGE", "k", start, end]),
                bulk(want),
                "{start} {end}"
            );
            assert_eq!(
                h.run(&["SUBSTR", "k", start, end]),
                bulk(want),
                "{start} {end}"
            );
        }
        assert_eq!(h.run(&["GETRANGE", "none", "0", "-1"]), bulk(""));
        h.run(&["SET", "e", ""]);
        assert_eq!(h.run(&["GETRANGE", "e", "0", "-1"]), bulk(""));
        assert_eq!(
            h.run(&["GETRANGE", "k", "a", "1"]),
            err("ERR value is not an integer or out of range")
        );
        h.run(&["SADD", "s", "m"]);
        assert_eq!(h.run(&["GETRANGE", "s", "0", "1"]), coll_wrongtype());
    }

    // Goal: SETRANGE pads, overwrites, refuses negative and too large offsets with Redis's
    // texts, and leaves a missing key missing when setting nothing.
    // Method: string.tcl's cases and the limit's edge.
    #[test]
    fn setrange() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SETRANGE", "k", "0", "foo"]), Frame::Integer(3));
        assert_eq!(h.run(&["SETRANGE", "k", "1", "b"]), Frame::Integer(3));
        assert_eq!(h.run(&["GET", "k"]), bulk("fbo"));
        assert_eq!(h.run(&["SETRANGE", "p", "3", "x"]), Frame::Integer(4));
        assert_eq!(h.run(&["GET", "p"]), Frame::bulk(&b"\0\0\0x"[..]));
        assert_eq!(h.run(&["SETRANGE", "none", "1", ""]), Frame::Integer(0));
        assert_eq!(h.run(&["EXISTS", "none"]), Frame::Integer(0));
        assert_eq!(h.run(&["SETRANGE", "k", "100", ""]), Frame::Integer(3));
        assert_eq!(
            h.run(&["SETRANGE", "k", "-1", "x"]),
            err("ERR offset is out of range")
        );
        let limit = forest_core::VALUE_BYTES_MAX;
        assert_eq!(
            h.run(&["SETRANGE", "k", &(limit - 1).to_string(), "xy"]),
            err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
        );
        assert_eq!(
            h.run(&["SETRANGE", "k", "9223372036854775807", "x"]),
            err("ERR string exceeds maximum allowed size (proto-max-bulk-len)")
        );
        assert_eq!(
            h.run(&["SETRANGE", "big", &(limit - 1).to_string(), "x"]),
            Frame::Integer(limit as i64)
        );
        assert_eq!(h.run(&["GET", "k"]), bulk("fbo"));
        h.run(&["HSET", "h", "f", "v"]);
        assert_eq!(h.run(&["SETRANGE", "h", "0", "x"]), coll_wrongtype());
    }

    // Goal: INCRBYFLOAT stores and returns Redis's text, refuses bad values and NaN/inf,
    // and leaves the value unchanged on error. Method: incr.tcl's cases.
    #[test]
    fn incrbyfloat() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["INCRBYFLOAT", "n", "1"]), bulk("1"));
        assert_eq!(h.run(&["INCRBYFLOAT", "n", "0.25"]), bulk("1.25"));
        assert_eq!(h.run(&["GET", "n"]), bulk("1.25"));
        h.run(&["SET", "n", "17179869184"]);
        assert_eq!(h.run(&["INCRBYFLOAT", "n", "1.5"]), bulk("17179869185.5"));
        h.run(&["SET", "s", " 11"]);
        let not_float = err("ERR value is not a valid float");
        assert_eq!(h.run(&["INCRBYFLOAT", "s", "1"]), not_float);
        assert_eq!(h.run(&["INCRBYFLOAT", "n", "x"]), not_float);
        assert_eq!(h.run(&["INCRBYFLOAT", "n", "nan"]), not_float);
        assert_eq!(
            h.run(&["INCRBYFLOAT", "n", "+inf"]),
            err("ERR increment would produce NaN or Infinity")
        );
        assert_eq!(h.run(&["GET", "n"]), bulk("17179869185.5"));
        h.run(&["SET", "d", "1"]);
        assert_eq!(h.run(&["INCRBYFLOAT", "d", "-1.1"]), bulk("-0.1"));
        h.run(&["RPUSH", "l", "a"]);
        assert_eq!(h.run(&["INCRBYFLOAT", "l", "1"]), coll_wrongtype());
    }

    // Goal: LCS answers as Redis's documented examples, with every option and error.
    // Method: the ohmytext/mynewtext example of the LCS page and string.tcl's cases.
    #[test]
    fn lcs() {
        let mut h = Harness::new();
        h.run(&["MSET", "key1", "ohmytext", "key2", "mynewtext"]);
        assert_eq!(h.run(&["LCS", "key1", "key2"]), bulk("mytext"));
        assert_eq!(h.run(&["LCS", "key1", "key2", "LEN"]), Frame::Integer(6));
        let range = |a: i64, b: i64| Frame::Array(vec![Frame::Integer(a), Frame::Integer(b)]);
        assert_eq!(
            h.run(&["LCS", "key1", "key2", "IDX"]),
            Frame::Map(vec![
                (
                    bulk("matches"),
                    Frame::Array(vec![
                        Frame::Array(vec![range(4, 7), range(5, 8)]),
                        Frame::Array(vec![range(2, 3), range(0, 1)]),
                    ])
                ),
                (bulk("len"), Frame::Integer(6)),
            ])
        );
        assert_eq!(
            h.run(&[
                "LCS",
                "key1",
                "key2",
                "IDX",
                "MINMATCHLEN",
                "4",
                "WITHMATCHLEN"
            ]),
            Frame::Map(vec![
                (
                    bulk("matches"),
                    Frame::Array(vec![Frame::Array(vec![
                        range(4, 7),
                        range(5, 8),
                        Frame::Integer(4)
                    ])])
                ),
                (bulk("len"), Frame::Integer(6)),
            ])
        );
        assert_eq!(h.run(&["LCS", "key1", "none"]), bulk(""));
        assert_eq!(h.run(&["LCS", "none", "none", "LEN"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["LCS", "key1", "key2", "LEN", "IDX"]),
            err("ERR If you want both the length and indexes, please just use IDX.")
        );
        assert_eq!(
            h.run(&["LCS", "key1", "key2", "BOGUS"]),
            err("ERR syntax error")
        );
        assert_eq!(
            h.run(&["LCS", "key1", "key2", "MINMATCHLEN"]),
            err("ERR syntax error")
        );
        assert_eq!(
            h.run(&["LCS", "key1", "key2", "MINMATCHLEN", "x"]),
            err("ERR value is not an integer or out of range")
        );
        h.run(&["SADD", "s", "m"]);
        assert_eq!(
            h.run(&["LCS", "key1", "s"]),
            err("ERR The specified keys must contain string values")
        );
        let big = "a".repeat(5000);
        h.run(&["MSET", "b1", &big, "b2", &big]);
        assert_eq!(
            h.run(&["LCS", "b1", "b2"]),
            err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len")
        );
    }
}
