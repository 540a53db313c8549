//! Streams: XADD, XLEN, XRANGE (docs/PROTOCOL.md "Streams"). An entry is a member entry
//! keyed by its id `<ms BE> <seq BE>`, whose value is its fields and values, each a u32 BE
//! length and the bytes. The type entry keeps the last id (Meta `a` = ms, `b` = seq, both
//! stored as the u64's bits), so ids only grow even after entries go.

use std::ops::Bound;

use forest_core::Order;

use super::coll;
use super::{is_word, Ctx, Reply};
use crate::collection::{member_key, member_prefix, Kind};
use crate::frame::Frame;

/// A stream entry id.
type Id = (u64, u64);

fn invalid_id() -> Frame {
    Frame::err("Invalid stream ID specified as stream command argument")
}

/// `ms`, `ms-seq`; `seq_default` when the seq part is absent. None for `ms-*`.
fn parse_id(arg: &[u8], seq_default: u64) -> Result<(u64, Option<u64>), Frame> {
    let text = std::str::from_utf8(arg).map_err(|_| invalid_id())?;
    let number = |s: &str| s.parse::<u64>().map_err(|_| invalid_id());
    match text.split_once('-') {
        None => Ok((number(text)?, Some(seq_default))),
        Some((ms, "*")) => Ok((number(ms)?, None)),
        Some((ms, seq)) => Ok((number(ms)?, Some(number(seq)?))),
    }
}

fn id_bytes((ms, seq): Id) -> [u8; 16] {
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&ms.to_be_bytes());
    out[8..].copy_from_slice(&seq.to_be_bytes());
    out
}

fn id_text((ms, seq): Id) -> String {
    format!("{ms}-{seq}")
}

fn encode_fields(pairs: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::with_capacity(pairs.iter().map(|p| p.len() + 4).sum());
    for part in pairs {
        let len = u32::try_from(part.len()).unwrap_or(u32::MAX);
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(part);
    }
    out
}

fn decode_fields(mut bytes: &[u8]) -> Option<Vec<Frame>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
        out.push(Frame::bulk(bytes.get(4..4 + len)?));
        bytes = &bytes[4 + len..];
    }
    Some(out)
}

/// XADD key id|* field value [field value ...]: the new entry's id.
pub fn xadd(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    if ["nomkstream", "maxlen", "minid"]
        .iter()
        .any(|w| is_word(argv[2], w))
    {
        return Err(Frame::err(
            "forest does not support XADD NOMKSTREAM/MAXLEN/MINID",
        ));
    }
    let pairs = &argv[3..];
    if pairs.is_empty() || !pairs.len().is_multiple_of(2) {
        return Err(super::wrong_arity("xadd"));
    }
    let requested = if argv[2] == b"*" {
        None
    } else {
        Some(parse_id(argv[2], 0)?)
    };
    let prefix = member_prefix(user);
    let value = encode_fields(pairs);
    coll::check_member(&member_key(&prefix, &[&[0; 16]]), &value)?;
    coll::write(ctx, user, Kind::Stream, |ctx, meta| {
        let last: Id = (meta.a as u64, meta.b as u64);
        let id =
            match requested {
                Some((0, Some(0))) => {
                    return Err(Frame::err(
                        "The ID specified in XADD must be greater than 0-0",
                    ))
                }
                Some((ms, Some(seq))) if (ms, seq) > last => (ms, seq),
                Some((ms, None)) if ms > last.0 => (ms, 0),
                Some((ms, None)) if ms == last.0 && last.1 < u64::MAX => (ms, last.1 + 1),
                Some(_) => return Err(Frame::err(
                    "The ID specified in XADD is equal or smaller than the target stream top item",
                )),
                None => {
                    let now = crate::server::unix_nanos() / 1_000_000;
                    if now > last.0 {
                        (now, 0)
                    } else if last.1 < u64::MAX {
                        (last.0, last.1 + 1)
                    } else {
                        (last.0.saturating_add(1), 0)
                    }
                }
            };
        coll::put_member(ctx, &member_key(&prefix, &[&id_bytes(id)]), &value)?;
        meta.count = meta.count.saturating_add(1);
        meta.a = id.0 as i64;
        meta.b = id.1 as i64;
        Ok(Frame::bulk(id_text(id)))
    })
}

/// XLEN key.
pub fn xlen(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    coll::len(ctx, argv[1], Kind::Stream)
}

/// One XRANGE bound: `-`, `+`, `id`, `(id` (exclusive).
fn range_bound(arg: &[u8], is_start: bool) -> Result<Bound<Id>, Frame> {
    match arg {
        b"-" => Ok(Bound::Included((0, 0))),
        b"+" => Ok(Bound::Included((u64::MAX, u64::MAX))),
        [b'(', id @ ..] => {
            let (ms, seq) = parse_id(id, if is_start { 0 } else { u64::MAX })?;
            Ok(Bound::Excluded((ms, seq.ok_or_else(invalid_id)?)))
        }
        id => {
            let (ms, seq) = parse_id(id, if is_start { 0 } else { u64::MAX })?;
            Ok(Bound::Included((ms, seq.ok_or_else(invalid_id)?)))
        }
    }
}

/// XRANGE key start end [COUNT count]: `[[id, [field, value, ...]], ...]`.
pub fn xrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let (start, end) = (range_bound(argv[2], true)?, range_bound(argv[3], false)?);
    let limit = match &argv[4..] {
        [] => usize::MAX,
        [word, n] if is_word(word, "count") => match crate::parse::parse_int(n) {
            Some(n) if n <= 0 => return Ok(Frame::Array(vec![])),
            Some(n) => usize::try_from(n).unwrap_or(usize::MAX),
            None => return Err(super::not_an_integer()),
        },
        _ => return Err(super::syntax_error()),
    };
    if coll::open_read(ctx, user, Kind::Stream)?.is_none() {
        return Ok(Frame::Array(vec![]));
    }
    let prefix = member_prefix(user);
    let key = |id: Id| member_key(&prefix, &[&id_bytes(id)]);
    let (lower_key, upper_key);
    let lower = match start {
        Bound::Included(id) => {
            lower_key = key(id);
            Bound::Included(lower_key.as_slice())
        }
        Bound::Excluded(id) => {
            lower_key = key(id);
            Bound::Excluded(lower_key.as_slice())
        }
        Bound::Unbounded => Bound::Unbounded,
    };
    let upper = match end {
        Bound::Included(id) => {
            upper_key = key(id);
            Bound::Included(upper_key.as_slice())
        }
        Bound::Excluded(id) => {
            upper_key = key(id);
            Bound::Excluded(upper_key.as_slice())
        }
        Bound::Unbounded => Bound::Unbounded,
    };
    let entries = coll::members(ctx, lower, upper, Order::Ascending, limit);
    let mut items = Vec::with_capacity(entries.len());
    for (k, v) in entries {
        let id = k
            .get(prefix.len()..prefix.len() + 16)
            .and_then(|b| Some((b[..8].try_into().ok()?, b[8..].try_into().ok()?)))
            .map(|(ms, seq): ([u8; 8], [u8; 8])| (u64::from_be_bytes(ms), u64::from_be_bytes(seq)));
        let (Some(id), Some(fields)) = (id, decode_fields(&v)) else {
            return Err(Frame::err("stream entry is damaged"));
        };
        items.push(Frame::Array(vec![
            Frame::bulk(id_text(id)),
            Frame::Array(fields),
        ]));
    }
    Ok(Frame::Array(items))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    fn entry(id: &str, fields: &[&str]) -> Frame {
        Frame::Array(vec![bulk(id), bulks(fields)])
    }

    // Goal: XADD ids (explicit, `ms-*`, `*`), its errors, XLEN and XRANGE bounds as Redis.
    // Method: one scenario, replies compared.
    #[test]
    fn stream_ids_and_ranges() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["XADD", "s", "5-1", "a", "1"]), bulk("5-1"));
        assert_eq!(h.run(&["XADD", "s", "5-*", "b", "2"]), bulk("5-2"));
        assert_eq!(h.run(&["XADD", "s", "7", "c", "3", "d", "4"]), bulk("7-0"));
        assert_eq!(
            h.run(&["XADD", "s", "6-0", "x", "y"]),
            Frame::Error(
                "ERR The ID specified in XADD is equal or smaller than the target stream top item"
                    .into()
            )
        );
        assert_eq!(
            h.run(&["XADD", "t", "0-0", "x", "y"]),
            Frame::Error("ERR The ID specified in XADD must be greater than 0-0".into())
        );
        assert_eq!(
            h.run(&["XADD", "s", "abc", "x", "y"]),
            Frame::Error("ERR Invalid stream ID specified as stream command argument".into())
        );
        assert_eq!(
            h.run(&["XADD", "s", "*", "x"]),
            Frame::Error("ERR wrong number of arguments for 'xadd' command".into())
        );
        assert_eq!(
            h.run(&["XADD", "s", "MAXLEN", "10", "*", "x", "y"]),
            Frame::Error("ERR forest does not support XADD NOMKSTREAM/MAXLEN/MINID".into())
        );
        let Frame::Bulk(auto) = h.run(&["XADD", "s", "*", "e", "5"]) else {
            panic!("id expected");
        };
        let auto = String::from_utf8(auto).expect("utf8");
        assert!(auto.ends_with("-0"), "{auto}");
        assert_eq!(h.run(&["XLEN", "s"]), Frame::Integer(4));
        assert_eq!(h.run(&["XLEN", "t"]), Frame::Integer(0));
        assert_eq!(
            h.run(&["XRANGE", "s", "-", "7"]),
            Frame::Array(vec![
                entry("5-1", &["a", "1"]),
                entry("5-2", &["b", "2"]),
                entry("7-0", &["c", "3", "d", "4"]),
            ])
        );
        assert_eq!(
            h.run(&["XRANGE", "s", "(5-1", "+", "COUNT", "1"]),
            Frame::Array(vec![entry("5-2", &["b", "2"])])
        );
        assert_eq!(
            h.run(&["XRANGE", "s", "5", "5"]),
            Frame::Array(vec![entry("5-1", &["a", "1"]), entry("5-2", &["b", "2"])])
        );
        assert_eq!(h.run(&["TYPE", "s"]), Frame::Simple("stream".into()));
    }
}
