//! Sorted sets: ZADD, ZPOPMIN, ZRANGE (by index), ZCARD, ZSCORE, ZREM (docs/PROTOCOL.md
//! "Sorted sets").
//!
//! Each member has two member entries: `'o' <score bytes> <member>` (empty value), which
//! orders members by (score, member) as Redis does, and `'n' <member>` -> the score's
//! order-preserving bytes, for ZSCORE and updates ([`crate::collection::score_bytes`]).

use std::ops::Bound;

use forest_core::Order;

use super::coll;
use super::{int_arg, is_word, Ctx, Reply};
use crate::collection::{member_key, member_prefix, score_bytes, score_from, Kind};
use crate::frame::{Frame, Protocol};

/// Sub-tag of the entries ordered by score.
const BY_SCORE: &[u8] = b"o";
/// Sub-tag of the entries keyed by member.
const BY_NAME: &[u8] = b"n";

/// A score argument as Redis reads it (`inf`, `-inf`, decimals, exponents; no NaN).
fn parse_score(arg: &[u8]) -> Result<f64, Frame> {
    let bad = || Frame::err("value is not a valid float");
    let text = std::str::from_utf8(arg).map_err(|_| bad())?;
    let lower = text.to_ascii_lowercase();
    let score = match lower.as_str() {
        "inf" | "+inf" => f64::INFINITY,
        "-inf" => f64::NEG_INFINITY,
        _ if lower.contains("inf") || lower.contains("nan") => return Err(bad()),
        _ => text.parse::<f64>().map_err(|_| bad())?,
    };
    if score.is_nan() {
        return Err(bad());
    }
    Ok(score)
}

/// ZADD key score member [score member ...]: how many members were added.
pub fn zadd(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    if ["nx", "xx", "gt", "lt", "ch", "incr"]
        .iter()
        .any(|w| is_word(argv[2], w))
    {
        return Err(Frame::err(
            "forest does not support ZADD options (NX/XX/GT/LT/CH/INCR)",
        ));
    }
    if !(argv.len() - 2).is_multiple_of(2) {
        return Err(super::syntax_error());
    }
    let prefix = member_prefix(user);
    let mut pairs = Vec::with_capacity((argv.len() - 2) / 2);
    for pair in argv[2..].chunks_exact(2) {
        let score = parse_score(pair[0])?;
        coll::check_member(&member_key(&prefix, &[BY_SCORE, &[0; 8], pair[1]]), b"")?;
        pairs.push((score, pair[1]));
    }
    coll::write(ctx, user, Kind::ZSet, |ctx, meta| {
        coll::count_changes(ctx, meta, 1, pairs, |ctx, (score, member)| {
            set_score(ctx, &prefix, member, score)
        })
    })
}

/// Gives `member` `score`; true if the member is new.
fn set_score(
    ctx: &mut Ctx<'_, '_>,
    prefix: &[u8],
    member: &[u8],
    score: f64,
) -> Result<bool, Frame> {
    let name_key = member_key(prefix, &[BY_NAME, member]);
    let bytes = score_bytes(score);
    let mut old = Vec::new();
    let existed = ctx.read(&name_key, &mut old);
    if existed {
        if old.as_slice() == bytes.as_slice() {
            return Ok(false);
        }
        coll::remove_member(ctx, &member_key(prefix, &[BY_SCORE, &old, member]))?;
    }
    coll::put_member(ctx, &member_key(prefix, &[BY_SCORE, &bytes, member]), b"")?;
    coll::put_member(ctx, &name_key, &bytes)?;
    Ok(!existed)
}

/// Removes `member`; true if it was there.
fn remove(ctx: &mut Ctx<'_, '_>, prefix: &[u8], member: &[u8]) -> Result<bool, Frame> {
    let name_key = member_key(prefix, &[BY_NAME, member]);
    let mut old = Vec::new();
    if !ctx.read(&name_key, &mut old) {
        return Ok(false);
    }
    coll::remove_member(ctx, &member_key(prefix, &[BY_SCORE, &old, member]))?;
    coll::remove_member(ctx, &name_key)
}

/// Splits a by-score entry's key into (member, score).
fn by_score_entry(prefix_len: usize, key: &[u8]) -> Option<(Vec<u8>, f64)> {
    let rest = key.get(prefix_len + BY_SCORE.len()..)?;
    let score: [u8; 8] = rest.get(..8)?.try_into().ok()?;
    Some((rest[8..].to_vec(), score_from(score)))
}

/// Members with scores as Redis 7 replies them: RESP2 flat `m s m s`; RESP3 pairs
/// `[[m, s], ...]`, or one flat pair when `flat_single` (ZPOPMIN without a count).
fn scored_reply(ctx: &Ctx<'_, '_>, items: Vec<(Vec<u8>, f64)>, flat_single: bool) -> Frame {
    if ctx.client.protocol == Protocol::Resp3 && !flat_single {
        return Frame::Array(
            items
                .into_iter()
                .map(|(m, s)| Frame::Array(vec![Frame::Bulk(m), Frame::Double(s)]))
                .collect(),
        );
    }
    Frame::Array(
        items
            .into_iter()
            .flat_map(|(m, s)| [Frame::Bulk(m), Frame::Double(s)])
            .collect(),
    )
}

/// ZPOPMIN key [count]: the lowest members with their scores.
pub fn zpopmin(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let count = coll::pop_count(argv)?;
    coll::write_existing(ctx, user, Kind::ZSet, Frame::Array(vec![]), |ctx, meta| {
        let prefix = member_prefix(user);
        let lower = member_key(&prefix, &[BY_SCORE]);
        let upper = coll::prefix_upper(&lower);
        let want = count.unwrap_or(1).min(meta.count);
        let entries = coll::members(
            ctx,
            Bound::Included(&lower),
            Bound::Excluded(&upper),
            Order::Ascending,
            usize::try_from(want).unwrap_or(usize::MAX),
        );
        let mut popped = Vec::new();
        for (key, _) in entries {
            let Some((member, score)) = by_score_entry(prefix.len(), &key) else {
                continue;
            };
            if remove(ctx, &prefix, &member)? {
                meta.count = meta.count.saturating_sub(1);
                popped.push((member, score));
            }
        }
        Ok(scored_reply(ctx, popped, count.is_none()))
    })
}

/// ZRANGE key start stop [WITHSCORES]: members by rank.
pub fn zrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let (start, stop) = (int_arg(argv[2])?, int_arg(argv[3])?);
    let with_scores = match &argv[4..] {
        [] => false,
        [w] if is_word(w, "withscores") => true,
        rest if rest.iter().any(|w| {
            ["byscore", "bylex", "rev", "limit"]
                .iter()
                .any(|o| is_word(w, o))
        }) =>
        {
            return Err(Frame::err(
                "forest supports ZRANGE by index only (no BYSCORE/BYLEX/REV/LIMIT)",
            ))
        }
        _ => return Err(super::syntax_error()),
    };
    let Some(meta) = coll::open_read(ctx, user, Kind::ZSet)? else {
        return Ok(Frame::Array(vec![]));
    };
    let Some((first, last)) = coll::index_range(start, stop, meta.count) else {
        return Ok(Frame::Array(vec![]));
    };
    let prefix = member_prefix(user);
    let lower = member_key(&prefix, &[BY_SCORE]);
    let upper = coll::prefix_upper(&lower);
    let take = usize::try_from(last + 1).unwrap_or(usize::MAX);
    let items: Vec<_> = coll::members(
        ctx,
        Bound::Included(&lower),
        Bound::Excluded(&upper),
        Order::Ascending,
        take,
    )
    .into_iter()
    .skip(usize::try_from(first).unwrap_or(usize::MAX))
    .filter_map(|(k, _)| by_score_entry(prefix.len(), &k))
    .collect();
    if with_scores {
        Ok(scored_reply(ctx, items, false))
    } else {
        Ok(Frame::Array(
            items.into_iter().map(|(m, _)| Frame::Bulk(m)).collect(),
        ))
    }
}

/// ZCARD key.
pub fn zcard(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    coll::len(ctx, argv[1], Kind::ZSet)
}

/// ZSCORE key member: the score (RESP2 bulk, RESP3 double), or null.
pub fn zscore(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    if coll::open_read(ctx, argv[1], Kind::ZSet)?.is_none() {
        return Ok(Frame::Null);
    }
    let key = member_key(&member_prefix(argv[1]), &[BY_NAME, argv[2]]);
    let mut value = Vec::new();
    if !ctx.read(&key, &mut value) {
        return Ok(Frame::Null);
    }
    match <[u8; 8]>::try_from(value.as_slice()) {
        Ok(bytes) => Ok(Frame::Double(score_from(bytes))),
        Err(_) => Err(Frame::err("sorted set entry is damaged")),
    }
}

/// ZREM key member [member ...]: how many were removed.
pub fn zrem(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let user = argv[1];
    let prefix = member_prefix(user);
    coll::write_existing(ctx, user, Kind::ZSet, Frame::Integer(0), |ctx, meta| {
        coll::count_changes(ctx, meta, -1, &argv[2..], |ctx, member| {
            remove(ctx, &prefix, member)
        })
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::super::testing::*;
    use crate::frame::{Frame, Protocol};

    /// The model's members in Redis's order: by score, then member bytes.
    fn ranked(model: &HashMap<String, i64>) -> Vec<(String, i64)> {
        let mut all: Vec<_> = model.iter().map(|(m, s)| (m.clone(), *s)).collect();
        all.sort_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)));
        all
    }

    // Goal: ZADD, ZREM, ZPOPMIN, ZRANGE, ZSCORE and ZCARD agree with a HashMap model.
    // Method: a pseudo-random operation sequence with repeated and negative scores.
    #[test]
    fn zset_against_model() {
        let mut h = Harness::new();
        let mut model: HashMap<String, i64> = HashMap::new();
        let mut x: u64 = 4321;
        for _ in 0..500 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let m = format!("m{}", (x >> 8) % 25);
            let score = ((x >> 20) % 11) as i64 - 5;
            match x % 6 {
                0 | 1 => {
                    let new = model.insert(m.clone(), score).is_none();
                    let reply = h.run(&["ZADD", "z", &score.to_string(), &m]);
                    assert_eq!(reply, Frame::Integer(i64::from(new)));
                }
                2 => {
                    let removed = model.remove(&m).is_some();
                    assert_eq!(
                        h.run(&["ZREM", "z", &m]),
                        Frame::Integer(i64::from(removed))
                    );
                }
                3 => {
                    let want = match ranked(&model).first() {
                        Some((m, s)) => Frame::Array(vec![bulk(m), Frame::Double(*s as f64)]),
                        None => Frame::Array(vec![]),
                    };
                    if let Some((m, _)) = ranked(&model).first() {
                        model.remove(m);
                    }
                    assert_eq!(h.run(&["ZPOPMIN", "z"]), want);
                }
                4 => {
                    let want = model
                        .get(&m)
                        .map_or(Frame::Null, |s| Frame::Double(*s as f64));
                    assert_eq!(h.run(&["ZSCORE", "z", &m]), want);
                }
                _ => {
                    let all = ranked(&model);
                    let (a, b) = ((x >> 30) as i64 % 10 - 3, (x >> 40) as i64 % 10 - 3);
                    let want = match super::coll::index_range(a, b, all.len() as u64) {
                        None => Frame::Array(vec![]),
                        Some((i, j)) => Frame::Array(
                            all[i as usize..=j as usize]
                                .iter()
                                .flat_map(|(m, s)| [bulk(m), Frame::Double(*s as f64)])
                                .collect(),
                        ),
                    };
                    let reply =
                        h.run(&["ZRANGE", "z", &a.to_string(), &b.to_string(), "WITHSCORES"]);
                    assert_eq!(reply, want);
                }
            }
            assert_eq!(h.run(&["ZCARD", "z"]), Frame::Integer(model.len() as i64));
        }
    }

    // Goal: score parsing, unsupported options, RESP2 score text and RESP3 shapes.
    // Method: one scenario with encoded replies.
    #[test]
    fn zset_scores_and_errors() {
        let mut h = Harness::new();
        assert_eq!(
            h.run(&["ZADD", "z", "1.5", "a", "-inf", "b", "+inf", "c", "2e3", "d"]),
            Frame::Integer(4)
        );
        assert_eq!(
            h.run(&["ZRANGE", "z", "0", "-1"]),
            bulks(&["b", "a", "d", "c"])
        );
        let mut out = Vec::new();
        h.run(&["ZSCORE", "z", "a"])
            .encode_to(Protocol::Resp2, &mut out);
        assert_eq!(out, b"$3\r\n1.5\r\n");
        let bad = Frame::Error("ERR value is not a valid float".into());
        assert_eq!(h.run(&["ZADD", "z", "nan", "x"]), bad);
        assert_eq!(h.run(&["ZADD", "z", "1x", "x"]), bad);
        assert_eq!(
            h.run(&["ZADD", "z", "1", "x", "2"]),
            Frame::Error("ERR syntax error".into())
        );
        assert_eq!(
            h.run(&["ZADD", "z", "NX", "1", "x"]),
            Frame::Error("ERR forest does not support ZADD options (NX/XX/GT/LT/CH/INCR)".into())
        );
        assert_eq!(h.run(&["ZADD", "z", "3", "a"]), Frame::Integer(0));
        assert_eq!(h.run(&["ZRANGE", "z", "1", "1"]), bulks(&["a"]));
        h.client.protocol = Protocol::Resp3;
        assert_eq!(
            h.run(&["ZPOPMIN", "z", "2"]),
            Frame::Array(vec![
                Frame::Array(vec![bulk("b"), Frame::Double(f64::NEG_INFINITY)]),
                Frame::Array(vec![bulk("a"), Frame::Double(3.0)]),
            ])
        );
        assert_eq!(h.run(&["ZREM", "z", "c", "d", "q"]), Frame::Integer(2));
        assert_eq!(h.run(&["EXISTS", "z"]), Frame::Integer(0));
    }
}
