//! SETBIT, GETBIT, BITCOUNT, BITPOS and BITOP over string values, with Redis's replies, its
//! range rules (BYTE and BIT units, negative indexes) and its error texts (Redis's
//! src/bitops.c). Bit 0 is the most significant bit of the first byte, as in Redis.
//!
//! Bit offsets are bounded by the store's value limit (an offset whose byte is at or past
//! [`forest_core::VALUE_BYTES_MAX`] is refused as Redis refuses one past
//! `proto-max-bulk-len`). SETBIT holds its key's stripe lock; BITOP holds the stripes of its
//! destination and every source, and writes its result (or the removal of the
//! destination, whatever its type) as one atomic batch.

use forest_core::VALUE_BYTES_MAX;
use forest_store::Rmw;

use super::strings::read_string;
use super::{coll, int_arg, is_word, not_an_integer, rename, syntax_error, Ctx, Reply};
use crate::frame::Frame;
use crate::parse::parse_int;

fn bit_offset(arg: &[u8]) -> Result<u64, Frame> {
    let err = || Frame::err("bit offset is not an integer or out of range");
    let offset = parse_int(arg).ok_or_else(err)?;
    if offset < 0 || (offset >> 3) as u64 >= VALUE_BYTES_MAX as u64 {
        return Err(err());
    }
    Ok(offset as u64)
}

/// The bit at `offset` (0 past the end).
fn bit_at(value: &[u8], offset: u64) -> bool {
    let byte = (offset >> 3) as usize;
    value
        .get(byte)
        .is_some_and(|b| b & (0x80 >> (offset & 7)) != 0)
}

/// SETBIT key offset 0|1: the bit's old value; the string grows with zero bytes.
pub fn setbit(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let offset = bit_offset(argv[2])?;
    let on = match parse_int(argv[3]) {
        Some(0) => false,
        Some(1) => true,
        _ => return Err(Frame::err("bit is not an integer or out of range")),
    };
    let _guard = coll::string_write(ctx, argv[1])?;
    let mut old_bit = false;
    ctx.read_modify_write(argv[1], |old| {
        let old = old.unwrap_or_default();
        old_bit = bit_at(old, offset);
        let byte = (offset >> 3) as usize;
        if old.len() > byte && old_bit == on {
            return Ok(Rmw::Keep);
        }
        let mut new = old.to_vec();
        if new.len() <= byte {
            new.resize(byte + 1, 0);
        }
        let mask = 0x80 >> (offset & 7);
        if on {
            new[byte] |= mask;
        } else {
            new[byte] &= !mask;
        }
        Ok(Rmw::Put(new))
    })?;
    Ok(Frame::Integer(i64::from(old_bit)))
}

/// GETBIT key offset: 0 or 1 (0 past the end or for a missing key).
pub fn getbit(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let offset = bit_offset(argv[2])?;
    let value = read_string(ctx, argv[1])?.unwrap_or_default();
    Ok(Frame::Integer(i64::from(bit_at(&value, offset))))
}

/// The optional BYTE|BIT unit: true for BIT.
fn unit(arg: Option<&&[u8]>) -> Result<bool, Frame> {
    match arg {
        None => Ok(false),
        Some(w) if is_word(w, "bit") => Ok(true),
        Some(w) if is_word(w, "byte") => Ok(false),
        Some(_) => Err(syntax_error()),
    }
}

/// Redis's range normalization over `total` units: negative indexes from the end, clamped
/// to the value. None if the range is empty.
fn clamp(start: i64, end: i64, total: i64) -> Option<(i64, i64)> {
    let start = if start < 0 { start + total } else { start }.max(0);
    let end = if end < 0 { end + total } else { end }.max(0);
    let end = end.min(total - 1);
    (start <= end).then_some((start, end))
}

/// Set bits in the inclusive bit range `[first, last]` of `value`.
fn count_bits(value: &[u8], first: u64, last: u64) -> u64 {
    let (first_byte, last_byte) = ((first >> 3) as usize, (last >> 3) as usize);
    let mut count: u64 = value[first_byte..=last_byte]
        .iter()
        .map(|b| u64::from(b.count_ones()))
        .sum();
    // Bits of the edge bytes outside the range.
    let head = value[first_byte] & !(0xffu8 >> (first & 7));
    let tail = value[last_byte] & (0x7fu8 >> (last & 7));
    count -= u64::from(head.count_ones() + tail.count_ones());
    count
}

/// BITCOUNT key [start end [BYTE|BIT]]: set bits in the whole value or the range.
pub fn bitcount(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let range = match argv.len() {
        2 => None,
        4 | 5 => {
            let start = int_arg(argv[2])?;
            let end = int_arg(argv[3])?;
            Some((start, end, unit(argv.get(4))?))
        }
        _ => return Err(syntax_error()),
    };
    let Some(value) = read_string(ctx, argv[1])? else {
        return Ok(Frame::Integer(0));
    };
    let len = value.len() as i64;
    let bits = match range {
        None => clamp(0, -1, len).map(|(s, e)| (s * 8, e * 8 + 7)),
        Some((start, end, _)) if start < 0 && end < 0 && start > end => None,
        Some((start, end, true)) => clamp(start, end, len * 8),
        Some((start, end, false)) => clamp(start, end, len).map(|(s, e)| (s * 8, e * 8 + 7)),
    };
    Ok(Frame::Integer(bits.map_or(0, |(first, last)| {
        count_bits(&value, first as u64, last as u64) as i64
    })))
}

/// BITPOS key 0|1 [start [end [BYTE|BIT]]]: the first bit of that value in the range, or
/// -1; looking for 0 without an end, the value counts as padded with zero bits on the right.
pub fn bitpos(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let bit = match parse_int(argv[2]) {
        Some(0) => false,
        Some(1) => true,
        Some(_) => return Err(Frame::err("The bit argument must be 1 or 0.")),
        None => return Err(not_an_integer()),
    };
    if argv.len() > 6 {
        return Err(syntax_error());
    }
    let start = argv.get(3).map(|a| int_arg(a)).transpose()?;
    let is_bit = unit(argv.get(5))?;
    let end = argv.get(4).map(|a| int_arg(a)).transpose()?;
    let Some(value) = read_string(ctx, argv[1])? else {
        return Ok(Frame::Integer(if bit { -1 } else { 0 }));
    };
    let len = value.len() as i64;
    let range = if is_bit {
        clamp(start.unwrap_or(0), end.unwrap_or(-1), len * 8)
    } else {
        clamp(start.unwrap_or(0), end.unwrap_or(-1), len).map(|(s, e)| (s * 8, e * 8 + 7))
    };
    let Some((first, last)) = range else {
        return Ok(Frame::Integer(-1));
    };
    let found = (first..=last).find(|&i| bit_at(&value, i as u64) == bit);
    Ok(Frame::Integer(match found {
        Some(i) => i,
        // No clear bit: past the end, unless the caller bounded the range.
        None if !bit && end.is_none() => last + 1,
        None => -1,
    }))
}

/// BITOP AND|OR|XOR|NOT destkey key [key ...]: stores the result (a missing source is
/// empty; shorter ones are padded with zero bytes) and returns its length; an empty result
/// removes the destination.
pub fn bitop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    #[derive(Clone, Copy, PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = match argv[1] {
        w if is_word(w, "and") => Op::And,
        w if is_word(w, "or") => Op::Or,
        w if is_word(w, "xor") => Op::Xor,
        w if is_word(w, "not") => Op::Not,
        _ => return Err(syntax_error()),
    };
    if op == Op::Not && argv.len() != 4 {
        return Err(Frame::err(
            "BITOP NOT must be called with a single source key.",
        ));
    }
    let (dest, sources) = (argv[2], &argv[3..]);
    let shared = ctx.shared;
    let _guards = shared.collections.lock_many(argv[2..].iter().copied());
    let mut values = Vec::with_capacity(sources.len());
    for key in sources {
        values.push(read_string(ctx, key)?.unwrap_or_default());
    }
    let max_len = values.iter().map(Vec::len).max().unwrap_or(0);
    let byte = |v: &Vec<u8>, i: usize| v.get(i).copied().unwrap_or(0);
    let result: Vec<u8> = (0..max_len)
        .map(|i| {
            let first = byte(&values[0], i);
            values[1..].iter().fold(
                if op == Op::Not { !first } else { first },
                |acc, v| match op {
                    Op::And => acc & byte(v, i),
                    Op::Or => acc | byte(v, i),
                    Op::Xor => acc ^ byte(v, i),
                    Op::Not => acc,
                },
            )
        })
        .collect();
    let value = (!result.is_empty()).then_some(result.as_slice());
    rename::replace_locked(ctx, dest, value)?;
    Ok(Frame::Integer(max_len as i64))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    fn err(text: &str) -> Frame {
        Frame::Error(text.into())
    }

    fn int(n: i64) -> Frame {
        Frame::Integer(n)
    }

    // Goal: SETBIT/GETBIT address bits as Redis does (MSB first), grow the string, return
    // the old bit, and refuse bad offsets and values with Redis's texts.
    // Method: bitops.tcl's cases and the offset limit's edge.
    #[test]
    fn setbit_getbit() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["SETBIT", "k", "1", "1"]), int(0));
        assert_eq!(h.run(&["GET", "k"]), Frame::bulk(&b"\x40"[..]));
        assert_eq!(h.run(&["SETBIT", "k", "1", "1"]), int(1));
        assert_eq!(h.run(&["SETBIT", "k", "1", "0"]), int(1));
        assert_eq!(h.run(&["GET", "k"]), Frame::bulk(&b"\x00"[..]));
        assert_eq!(h.run(&["SETBIT", "k", "15", "1"]), int(0));
        assert_eq!(h.run(&["GET", "k"]), Frame::bulk(&b"\x00\x01"[..]));
        assert_eq!(h.run(&["GETBIT", "k", "15"]), int(1));
        assert_eq!(h.run(&["GETBIT", "k", "14"]), int(0));
        assert_eq!(h.run(&["GETBIT", "k", "1000"]), int(0));
        assert_eq!(h.run(&["GETBIT", "none", "0"]), int(0));
        assert_eq!(h.run(&["SETBIT", "z", "20", "0"]), int(0));
        assert_eq!(h.run(&["GET", "z"]), Frame::bulk(&b"\0\0\0"[..]));
        let bad_offset = err("ERR bit offset is not an integer or out of range");
        let bad_bit = err("ERR bit is not an integer or out of range");
        assert_eq!(h.run(&["SETBIT", "k", "-1", "1"]), bad_offset);
        assert_eq!(h.run(&["SETBIT", "k", "x", "1"]), bad_offset);
        assert_eq!(h.run(&["GETBIT", "k", "-1"]), bad_offset);
        let limit_bits = (forest_core::VALUE_BYTES_MAX as u64) * 8;
        assert_eq!(
            h.run(&["SETBIT", "k", &limit_bits.to_string(), "1"]),
            bad_offset
        );
        assert_eq!(h.run(&["SETBIT", "k", "4294967296", "1"]), bad_offset);
        assert_eq!(
            h.run(&["SETBIT", "big", &(limit_bits - 1).to_string(), "1"]),
            int(0)
        );
        assert_eq!(
            h.run(&["STRLEN", "big"]),
            int(forest_core::VALUE_BYTES_MAX as i64)
        );
        assert_eq!(h.run(&["SETBIT", "k", "0", "2"]), bad_bit);
        assert_eq!(h.run(&["SETBIT", "k", "0", "-1"]), bad_bit);
        assert_eq!(h.run(&["SETBIT", "k", "0", "x"]), bad_bit);
        h.run(&["RPUSH", "l", "a"]);
        assert_eq!(h.run(&["SETBIT", "l", "0", "1"]), super::coll::wrongtype());
        assert_eq!(h.run(&["GETBIT", "l", "0"]), super::coll::wrongtype());
    }

    // Goal: BITCOUNT counts in byte and bit ranges with Redis's negative-index rules.
    // Method: the BITCOUNT page's "foobar" examples and bitops.tcl's edge cases.
    #[test]
    fn bitcount() {
        let mut h = Harness::new();
        h.run(&["SET", "k", "foobar"]);
        assert_eq!(h.run(&["BITCOUNT", "k"]), int(26));
        assert_eq!(h.run(&["BITCOUNT", "k", "0", "0"]), int(4));
        assert_eq!(h.run(&["BITCOUNT", "k", "1", "1"]), int(6));
        assert_eq!(h.run(&["BITCOUNT", "k", "1", "1", "BYTE"]), int(6));
        assert_eq!(h.run(&["BITCOUNT", "k", "5", "30", "BIT"]), int(17));
        assert_eq!(h.run(&["BITCOUNT", "k", "0", "-1"]), int(26));
        assert_eq!(h.run(&["BITCOUNT", "k", "-2", "-1"]), int(7));
        assert_eq!(h.run(&["BITCOUNT", "k", "-1", "-2"]), int(0));
        assert_eq!(h.run(&["BITCOUNT", "k", "2", "1"]), int(0));
        assert_eq!(h.run(&["BITCOUNT", "k", "-100", "100"]), int(26));
        assert_eq!(h.run(&["BITCOUNT", "k", "0", "-1", "bit"]), int(26));
        assert_eq!(h.run(&["BITCOUNT", "k", "1", "1", "bit"]), int(1));
        assert_eq!(h.run(&["BITCOUNT", "none"]), int(0));
        assert_eq!(h.run(&["BITCOUNT", "none", "0", "5"]), int(0));
        assert_eq!(h.run(&["BITCOUNT", "k", "0"]), err("ERR syntax error"));
        assert_eq!(
            h.run(&["BITCOUNT", "k", "0", "1", "NOPE"]),
            err("ERR syntax error")
        );
        assert_eq!(
            h.run(&["BITCOUNT", "k", "0", "1", "BIT", "x"]),
            err("ERR syntax error")
        );
        assert_eq!(
            h.run(&["BITCOUNT", "k", "a", "1"]),
            err("ERR value is not an integer or out of range")
        );
        h.run(&["SET", "e", ""]);
        assert_eq!(h.run(&["BITCOUNT", "e", "0", "-1"]), int(0));
    }

    // Goal: BITPOS finds bits as the BITPOS page's examples and bitops.tcl's cases say.
    // Method: the \xff\xf0\x00 and \x00\xff\xf0 examples, bit ranges, the padding rule.
    #[test]
    fn bitpos() {
        let mut h = Harness::new();
        h.run_bytes(&[b"SET", b"k", b"\xff\xf0\x00"]);
        assert_eq!(h.run(&["BITPOS", "k", "0"]), int(12));
        h.run_bytes(&[b"SET", b"k", b"\x00\xff\xf0"]);
        assert_eq!(h.run(&["BITPOS", "k", "1", "0"]), int(8));
        assert_eq!(h.run(&["BITPOS", "k", "1", "2"]), int(16));
        assert_eq!(h.run(&["BITPOS", "k", "1", "2", "-1", "BYTE"]), int(16));
        assert_eq!(h.run(&["BITPOS", "k", "1", "7", "15", "BIT"]), int(8));
        assert_eq!(h.run(&["BITPOS", "k", "1", "7", "-3", "BIT"]), int(8));
        h.run_bytes(&[b"SET", b"ones", b"\xff\xff\xff"]);
        assert_eq!(h.run(&["BITPOS", "ones", "0"]), int(24));
        assert_eq!(h.run(&["BITPOS", "ones", "0", "0"]), int(24));
        assert_eq!(h.run(&["BITPOS", "ones", "0", "0", "-1"]), int(-1));
        assert_eq!(h.run(&["BITPOS", "ones", "0", "0", "-1", "BIT"]), int(-1));
        assert_eq!(h.run(&["BITPOS", "none", "0"]), int(0));
        assert_eq!(h.run(&["BITPOS", "none", "1"]), int(-1));
        h.run_bytes(&[b"SET", b"zeros", b"\x00\x00"]);
        assert_eq!(h.run(&["BITPOS", "zeros", "1"]), int(-1));
        assert_eq!(h.run(&["BITPOS", "zeros", "0", "5", "3"]), int(-1));
        assert_eq!(h.run(&["BITPOS", "zeros", "0", "3", "5", "bit"]), int(3));
        h.run(&["SET", "e", ""]);
        assert_eq!(h.run(&["BITPOS", "e", "0"]), int(-1));
        assert_eq!(
            h.run(&["BITPOS", "k", "2"]),
            err("ERR The bit argument must be 1 or 0.")
        );
        assert_eq!(
            h.run(&["BITPOS", "k", "x"]),
            err("ERR value is not an integer or out of range")
        );
        assert_eq!(
            h.run(&["BITPOS", "k", "1", "0", "1", "BOGUS"]),
            err("ERR syntax error")
        );
        assert_eq!(
            h.run(&["BITPOS", "k", "1", "0", "1", "BIT", "x"]),
            err("ERR syntax error")
        );
    }

    // Goal: BITOP computes AND/OR/XOR/NOT over sources of different lengths, treats a
    // missing key as empty, removes the destination for an empty result, replaces a
    // collection destination, and refuses bad calls with Redis's texts.
    // Method: small bytes checked by hand.
    #[test]
    fn bitop() {
        let mut h = Harness::new();
        h.run_bytes(&[b"SET", b"a", b"\xff\x0f"]);
        h.run_bytes(&[b"SET", b"b", b"\x0f"]);
        assert_eq!(h.run(&["BITOP", "AND", "d", "a", "b"]), int(2));
        assert_eq!(h.run(&["GET", "d"]), Frame::bulk(&b"\x0f\x00"[..]));
        assert_eq!(h.run(&["BITOP", "or", "d", "a", "b"]), int(2));
        assert_eq!(h.run(&["GET", "d"]), Frame::bulk(&b"\xff\x0f"[..]));
        assert_eq!(h.run(&["BITOP", "XOR", "d", "a", "b", "none"]), int(2));
        assert_eq!(h.run(&["GET", "d"]), Frame::bulk(&b"\xf0\x0f"[..]));
        assert_eq!(h.run(&["BITOP", "NOT", "d", "a"]), int(2));
        assert_eq!(h.run(&["GET", "d"]), Frame::bulk(&b"\x00\xf0"[..]));
        assert_eq!(h.run(&["BITOP", "AND", "d", "a", "none"]), int(2));
        assert_eq!(h.run(&["GET", "d"]), Frame::bulk(&b"\x00\x00"[..]));
        assert_eq!(h.run(&["BITOP", "OR", "d", "none", "none2"]), int(0));
        assert_eq!(h.run(&["EXISTS", "d"]), int(0));
        h.run(&["SADD", "s", "m"]);
        assert_eq!(h.run(&["BITOP", "OR", "s", "a"]), int(2));
        assert_eq!(h.run(&["TYPE", "s"]), Frame::Simple("string".into()));
        assert_eq!(h.run(&["DBSIZE"]), int(3));
        h.run(&["HSET", "h", "f", "v"]);
        assert_eq!(h.run(&["BITOP", "AND", "h", "none"]), int(0));
        assert_eq!(h.run(&["EXISTS", "h"]), int(0));
        assert_eq!(h.run(&["DBSIZE"]), int(3));
        h.run(&["RPUSH", "l", "x"]);
        assert_eq!(
            h.run(&["BITOP", "AND", "d", "a", "l"]),
            super::coll::wrongtype()
        );
        assert_eq!(
            h.run(&["BITOP", "NOT", "d", "a", "b"]),
            err("ERR BITOP NOT must be called with a single source key.")
        );
        assert_eq!(h.run(&["BITOP", "NAND", "d", "a"]), err("ERR syntax error"));
    }
}
