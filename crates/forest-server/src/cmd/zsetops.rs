//! Sorted-set commands over several keys (docs/PROTOCOL.md "Sorted sets"): ZMPOP,
//! ZRANGESTORE, ZUNION, ZINTER, ZDIFF and their STORE forms (WEIGHTS, AGGREGATE), ZINTERCARD.
//!
//! Each holds the stripe locks of all its keys while it reads (so it sees no other command's
//! write half done, as Redis's single thread), and each that writes is one atomic unit
//! ([`coll::write_many`]). A STORE form replaces its destination whatever it held (a string,
//! any collection) and drops its deadline, or deletes it for an empty result, as Redis; the
//! result is computed before the destination is touched, so it may be one of the sources.
//!
//! The sources of ZUNION, ZINTER and ZDIFF may be sets (every member scoring 1), as in
//! Redis. ZINTER reads its smallest source whole and looks each member up in the others (one
//! point read each); ZDIFF reads the first; ZUNION reads them all. Scores combine as Redis's
//! zunionInterDiffGenericCommand: the sources in order of size, a weighted score that is not
//! a number counts as 0, and so does a sum of +inf and -inf.

use std::collections::HashMap;

use forest_core::Order;

use super::coll::{self, Many};
use super::lmove::mpop_args;
use super::zset::{self, BY_NAME, BY_SCORE};
use super::{sample, Ctx, Reply};
use crate::collection::{member_key, member_prefix, score_bytes, score_from, Kind, Meta};
use crate::frame::Frame;
use crate::parse::{is_word, parse_int};

/// ZMPOP's core: pops up to `count` members from one end (`order`: lowest scores first, or
/// highest) of the first of `keys` that holds a sorted set: `[key, [[member, score], ...]]`,
/// or None if none does. WRONGTYPE for a key of another type before it. Takes the stripe
/// locks of every key.
pub fn pop_first(
    ctx: &mut Ctx<'_, '_>,
    keys: &[&[u8]],
    order: Order,
    count: u64,
) -> Result<Option<Frame>, Frame> {
    let reply = coll::write_many(ctx, keys, |ctx, many| {
        for key in keys {
            let Some(slot) = many.existing(ctx, key, Kind::ZSet)? else {
                continue;
            };
            let prefix = member_prefix(key);
            let popped = zset::pop_members(ctx, &prefix, many.meta(slot), order, count)?;
            let pairs = popped
                .into_iter()
                .map(|(m, s)| Frame::Array(vec![Frame::Bulk(m), Frame::Double(s)]))
                .collect();
            return Ok(Frame::Array(vec![Frame::bulk(*key), Frame::Array(pairs)]));
        }
        Ok(Frame::Null)
    })?;
    Ok(match reply {
        Frame::Null => None,
        popped => Some(popped),
    })
}

/// ZMPOP numkeys key [key ...] MIN|MAX [COUNT count]: `[key, [[member, score], ...]]` from the
/// first non-empty sorted set (pairs in RESP2 too), or a null array.
pub fn zmpop(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let args = mpop_args(&argv[1..], ["min", "max"])?;
    let order = if args.second {
        Order::Descending
    } else {
        Order::Ascending
    };
    let popped = pop_first(ctx, args.keys, order, args.count)?;
    Ok(popped.unwrap_or_else(|| coll::null_array(ctx)))
}

/// Makes `dst` the sorted set of `items` (distinct members) whatever it held, without a
/// deadline, or deletes it if `items` is empty: a STORE form's write, into `many`'s unit.
/// Replies with the new size.
fn store_scored(
    ctx: &mut Ctx<'_, '_>,
    many: &mut Many,
    dst: &[u8],
    items: &[(Vec<u8>, f64)],
) -> Reply {
    let prefix = member_prefix(dst);
    // Checked before the destination is touched: a member that fits under a source's
    // shorter name may not fit under `dst`.
    for (member, _) in items {
        coll::check_member(&member_key(&prefix, &[BY_SCORE, &[0; 8], member]), b"")?;
    }
    let slot = many.replace(ctx, dst, Kind::ZSet)?;
    for (member, score) in items {
        let bytes = score_bytes(*score);
        coll::put_member(ctx, &member_key(&prefix, &[BY_SCORE, &bytes, member]), b"")?;
        coll::put_member(ctx, &member_key(&prefix, &[BY_NAME, member]), &bytes)?;
        let meta = many.meta(slot);
        meta.count = meta.count.saturating_add(1);
    }
    Ok(Frame::Integer(items.len() as i64))
}

/// ZRANGESTORE dst src min max [BYSCORE|BYLEX] [REV] [LIMIT offset count]: stores the members
/// ZRANGE would return, with their scores, in `dst`; replies with their number.
pub fn zrangestore(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (dst, src) = (argv[1], argv[2]);
    let query = zset::parse_range(&argv[3..], true, None, None)?;
    coll::write_many(ctx, &[dst, src], |ctx, many| {
        let items = zset::range_items(ctx, src, &query)?.unwrap_or_default();
        store_scored(ctx, many, dst, &items)
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// Redis's zunionInterAggregate.
    fn fold(self, target: &mut f64, value: f64) {
        match self {
            Aggregate::Sum => {
                *target += value;
                // +inf plus -inf: Redis's convention is 0.
                if target.is_nan() {
                    *target = 0.0;
                }
            }
            Aggregate::Min => {
                if value < *target {
                    *target = value;
                }
            }
            Aggregate::Max => {
                if value > *target {
                    *target = value;
                }
            }
        }
    }
}

/// The options after the keys.
struct OpOptions {
    weights: Vec<f64>,
    aggregate: Aggregate,
    with_scores: bool,
    /// ZINTERCARD's LIMIT (0: none).
    limit: usize,
}

/// What a command of the family accepts after its keys.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Form {
    /// ZUNION, ZINTER, ZDIFF: WITHSCORES.
    Reply,
    /// The STORE forms.
    Store,
    /// ZINTERCARD: LIMIT only.
    Card,
}

/// Arguments of a command.
type Args<'a> = &'a [&'a [u8]];

/// The keys of `numkeys key [key ...]` (`args[0]` is numkeys) as Redis reads them:
/// `-ERR value is not an integer or out of range`, `-ERR at least 1 input key is needed for
/// 'name' command`, `-ERR syntax error` when fewer keys follow; and what follows them.
fn op_keys<'a>(args: &'a [&'a [u8]], name: &str) -> Result<(Args<'a>, Args<'a>), Frame> {
    let numkeys = super::int_arg(args[0])?;
    if numkeys < 1 {
        return Err(Frame::err(format!(
            "at least 1 input key is needed for '{name}' command"
        )));
    }
    let rest = &args[1..];
    let numkeys = usize::try_from(numkeys)
        .ok()
        .filter(|&n| n <= rest.len())
        .ok_or_else(super::syntax_error)?;
    let keys = &rest[..numkeys];
    coll::check_keys(keys)?;
    Ok((keys, &rest[numkeys..]))
}

/// Parses the options after the keys as Redis does (which it does after the type checks:
/// the caller reports WRONGTYPE first).
fn op_options(options: &[&[u8]], keys: usize, op: Op, form: Form) -> Result<OpOptions, Frame> {
    let mut parsed = OpOptions {
        weights: vec![1.0; keys],
        aggregate: Aggregate::Sum,
        with_scores: false,
        limit: 0,
    };
    let mut j = 0;
    while j < options.len() {
        let remaining = options.len() - j;
        let word = options[j];
        let weighted = op != Op::Diff && form != Form::Card;
        if weighted && remaining > keys && is_word(word, "weights") {
            for (i, arg) in options[j + 1..=j + keys].iter().enumerate() {
                parsed.weights[i] = zset::parse_score(arg)
                    .map_err(|_| Frame::err("weight value is not a float"))?;
            }
            j += keys + 1;
        } else if weighted && remaining >= 2 && is_word(word, "aggregate") {
            parsed.aggregate = match options[j + 1] {
                w if is_word(w, "sum") => Aggregate::Sum,
                w if is_word(w, "min") => Aggregate::Min,
                w if is_word(w, "max") => Aggregate::Max,
                _ => return Err(super::syntax_error()),
            };
            j += 2;
        } else if form == Form::Reply && is_word(word, "withscores") {
            parsed.with_scores = true;
            j += 1;
        } else if form == Form::Card && remaining >= 2 && is_word(word, "limit") {
            parsed.limit = match parse_int(options[j + 1]) {
                Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                _ => return Err(Frame::err("LIMIT can't be negative")),
            };
            j += 2;
        } else {
            return Err(super::syntax_error());
        }
    }
    Ok(parsed)
}

/// A source of the family: a sorted set, or a set whose members score 1.
struct Source<'a> {
    key: &'a [u8],
    kind: Kind,
    size: u64,
    weight: f64,
}

/// The sources among `keys` (None: missing), each WRONGTYPE unless a sorted set or a set,
/// every key checked before any is read, as Redis.
fn open_sources<'a>(
    ctx: &mut Ctx<'_, '_>,
    keys: &[&'a [u8]],
) -> Result<Vec<Option<Source<'a>>>, Frame> {
    keys.iter()
        .map(|&key| {
            let meta: Option<Meta> = coll::read_meta(ctx, key)?;
            Ok(match meta {
                Some(m) if matches!(m.kind, Kind::ZSet | Kind::Set) => Some(Source {
                    key,
                    kind: m.kind,
                    size: m.count,
                    weight: 1.0,
                }),
                Some(_) => return Err(coll::wrongtype()),
                None if ctx.present(key) => return Err(coll::wrongtype()),
                None => None,
            })
        })
        .collect()
}

/// Every member of `source` with its score (1 for a set's), in member order.
fn source_members(
    ctx: &mut Ctx<'_, '_>,
    source: &Source<'_>,
) -> Result<Vec<(Vec<u8>, f64)>, Frame> {
    Ok(sample::all(ctx, source.key, source.kind)?
        .into_iter()
        .map(|(member, value)| {
            let score = match source.kind {
                Kind::ZSet => <[u8; 8]>::try_from(value.as_slice()).map_or(0.0, score_from),
                _ => 1.0,
            };
            (member, score)
        })
        .collect())
}

/// The score of `member` in `source`, if it is there (one point read).
fn score_in(
    ctx: &mut Ctx<'_, '_>,
    source: &Source<'_>,
    member: &[u8],
) -> Result<Option<f64>, Frame> {
    let prefix = member_prefix(source.key);
    match source.kind {
        Kind::ZSet => zset::score_of(ctx, &prefix, member),
        _ => Ok(ctx.present(&member_key(&prefix, &[member])).then_some(1.0)),
    }
}

/// Weighted as Redis: a product that is not a number (0 x inf) counts as 0.
fn weighted(score: f64, weight: f64) -> f64 {
    let product = score * weight;
    if product.is_nan() {
        0.0
    } else {
        product
    }
}

/// The result of `op` over `sources` (in key order) in Redis's order (score, then member);
/// for ZINTERCARD (`limit` > 0) it stops once it has `limit` members.
fn combine(
    ctx: &mut Ctx<'_, '_>,
    mut sources: Vec<Option<Source<'_>>>,
    op: Op,
    options: &OpOptions,
) -> Result<Vec<(Vec<u8>, f64)>, Frame> {
    for (source, weight) in sources.iter_mut().zip(&options.weights) {
        if let Some(source) = source {
            source.weight = *weight;
        }
    }
    let mut out: Vec<(Vec<u8>, f64)> = Vec::new();
    match op {
        Op::Union => {
            let mut present: Vec<Source<'_>> = sources.into_iter().flatten().collect();
            present.sort_by_key(|s| s.size);
            let mut scores: HashMap<Vec<u8>, f64> = HashMap::new();
            for source in &present {
                for (member, score) in source_members(ctx, source)? {
                    let score = weighted(score, source.weight);
                    match scores.get_mut(&member) {
                        Some(total) => options.aggregate.fold(total, score),
                        None => {
                            scores.insert(member, score);
                        }
                    }
                }
            }
            out.extend(scores);
        }
        Op::Inter => {
            let Some(mut present) = sources.into_iter().collect::<Option<Vec<Source<'_>>>>() else {
                return Ok(out);
            };
            present.sort_by_key(|s| s.size);
            let (first, others) = present.split_first().ok_or_else(super::syntax_error)?;
            'members: for (member, score) in source_members(ctx, first)? {
                let mut total = weighted(score, first.weight);
                for other in others {
                    let Some(score) = score_in(ctx, other, &member)? else {
                        continue 'members;
                    };
                    options.aggregate.fold(&mut total, score * other.weight);
                }
                out.push((member, total));
                if out.len() == options.limit {
                    break;
                }
            }
        }
        Op::Diff => {
            let mut sources = sources.into_iter();
            let Some(Some(first)) = sources.next() else {
                return Ok(out);
            };
            let others: Vec<Source<'_>> = sources.flatten().collect();
            'kept: for (member, score) in source_members(ctx, &first)? {
                for other in &others {
                    if score_in(ctx, other, &member)?.is_some() {
                        continue 'kept;
                    }
                }
                out.push((member, score));
            }
        }
    }
    // Scores are never NaN here (see `weighted` and `Aggregate::fold`); -0 equals 0, as in Redis.
    out.sort_by(|a, b| {
        a.1.partial_cmp(&b.1)
            .unwrap_or(std::cmp::Ordering::Equal)
            .then_with(|| a.0.cmp(&b.0))
    });
    Ok(out)
}

/// ZUNION / ZINTER / ZDIFF numkeys key [key ...] [WEIGHTS w ...] [AGGREGATE SUM|MIN|MAX]
/// [WITHSCORES] (ZDIFF: WITHSCORES only).
fn reply_generic(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], op: Op) -> Reply {
    let name = String::from_utf8_lossy(argv[0]).to_ascii_lowercase();
    let (keys, rest) = op_keys(&argv[1..], &name)?;
    let shared = ctx.shared;
    let _guards = shared.collections.lock_many(keys.iter().copied());
    let sources = open_sources(ctx, keys)?;
    let options = op_options(rest, keys.len(), op, Form::Reply)?;
    let items = combine(ctx, sources, op, &options)?;
    if options.with_scores {
        Ok(zset::scored_reply(ctx, items, false))
    } else {
        Ok(Frame::Array(
            items.into_iter().map(|(m, _)| Frame::Bulk(m)).collect(),
        ))
    }
}

/// ZUNIONSTORE / ZINTERSTORE / ZDIFFSTORE destination numkeys key [key ...] [WEIGHTS ...]
/// [AGGREGATE ...] (ZDIFFSTORE: none): the size of the result stored in `destination`.
fn store_generic(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], op: Op) -> Reply {
    let name = String::from_utf8_lossy(argv[0]).to_ascii_lowercase();
    let dst = argv[1];
    coll::check_keys(&[dst])?;
    let (keys, rest) = op_keys(&argv[2..], &name)?;
    let mut all = vec![dst];
    all.extend_from_slice(keys);
    coll::write_many(ctx, &all, |ctx, many| {
        let sources = open_sources(ctx, keys)?;
        let options = op_options(rest, keys.len(), op, Form::Store)?;
        let items = combine(ctx, sources, op, &options)?;
        store_scored(ctx, many, dst, &items)
    })
}

/// ZUNION numkeys key [key ...] [WEIGHTS weight ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES].
pub fn zunion(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    reply_generic(ctx, argv, Op::Union)
}

/// ZINTER numkeys key [key ...] [WEIGHTS weight ...] [AGGREGATE SUM|MIN|MAX] [WITHSCORES].
pub fn zinter(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    reply_generic(ctx, argv, Op::Inter)
}

/// ZDIFF numkeys key [key ...] [WITHSCORES].
pub fn zdiff(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    reply_generic(ctx, argv, Op::Diff)
}

/// ZUNIONSTORE destination numkeys key [key ...] [WEIGHTS weight ...] [AGGREGATE ...].
pub fn zunionstore(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    store_generic(ctx, argv, Op::Union)
}

/// ZINTERSTORE destination numkeys key [key ...] [WEIGHTS weight ...] [AGGREGATE ...].
pub fn zinterstore(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    store_generic(ctx, argv, Op::Inter)
}

/// ZDIFFSTORE destination numkeys key [key ...].
pub fn zdiffstore(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    store_generic(ctx, argv, Op::Diff)
}

/// ZINTERCARD numkeys key [key ...] [LIMIT limit]: the size of the intersection, counting
/// stops at `limit` (0: no limit).
pub fn zintercard(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let (keys, rest) = op_keys(&argv[1..], "zintercard")?;
    let shared = ctx.shared;
    let _guards = shared.collections.lock_many(keys.iter().copied());
    let sources = open_sources(ctx, keys)?;
    let options = op_options(rest, keys.len(), Op::Inter, Form::Card)?;
    let items = combine(ctx, sources, Op::Inter, &options)?;
    Ok(Frame::Integer(items.len() as i64))
}
