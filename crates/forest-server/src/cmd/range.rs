//! forest's ordered ranges (masstree.md §3 getrange; docs/PROTOCOL.md "Ordered ranges"):
//! FOREST.RANGE, FOREST.COUNT, FOREST.DELRANGE. Dotted names, as Redis modules use, so no
//! Redis command changes meaning.
//!
//! Bounds use Redis's lex-range syntax (ZRANGEBYLEX): `[key` inclusive, `(key` exclusive,
//! `-` below every key, `+` above every key. Unlike ZRANGE BYLEX REV, the arguments stay
//! `min max` with REV. A range is not atomic as a whole (each record is, as for the
//! engines' scans). Ranges cover string keys only: they stop below byte 0xFF, where the
//! collections live.

use std::ops::{Bound, ControlFlow};

use forest_core::Order;

use super::{is_word, syntax_error, Ctx, Reply};
use crate::frame::Frame;

/// One side of a lex range (also ZRANGEBYLEX's, [`super::zlex`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum LexBound<'a> {
    /// `-`
    Lowest,
    /// `+`
    Highest,
    /// `[key`
    Included(&'a [u8]),
    /// `(key`
    Excluded(&'a [u8]),
}

/// `-`, `+`, `[key` or `(key`, else Redis's `-ERR min or max not valid string range item`.
pub(super) fn lex_bound(arg: &[u8]) -> Result<LexBound<'_>, Frame> {
    match arg {
        b"-" => Ok(LexBound::Lowest),
        b"+" => Ok(LexBound::Highest),
        [b'[', key @ ..] => Ok(LexBound::Included(key)),
        [b'(', key @ ..] => Ok(LexBound::Excluded(key)),
        _ => Err(Frame::err("min or max not valid string range item")),
    }
}

/// Ranges stop below the reserved byte: they cover string keys only, not the entries that
/// hold collections ([`crate::collection`]).
const STRINGS_END: &[u8] = &[crate::collection::RESERVED_BYTE];

/// Lower and upper scan bounds.
type ScanBounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// The scan bounds of `min max`; None when the range is certainly empty.
fn bounds<'a>(min: &'a [u8], max: &'a [u8]) -> Result<Option<ScanBounds<'a>>, Frame> {
    let lower = match lex_bound(min)? {
        LexBound::Lowest => Bound::Unbounded,
        LexBound::Highest => return lex_bound(max).map(|_| None),
        LexBound::Included(k) => Bound::Included(k),
        LexBound::Excluded(k) => Bound::Excluded(k),
    };
    let upper = match lex_bound(max)? {
        LexBound::Highest => Bound::Excluded(STRINGS_END),
        LexBound::Lowest => return Ok(None),
        LexBound::Included(k) | LexBound::Excluded(k) if k >= STRINGS_END => {
            Bound::Excluded(STRINGS_END)
        }
        LexBound::Included(k) => Bound::Included(k),
        LexBound::Excluded(k) => Bound::Excluded(k),
    };
    Ok((!empty_between(lower, upper)).then_some((lower, upper)))
}

/// Whether no key can lie between `lower` and `upper` (an inverted or empty range).
pub(super) fn empty_between(lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    match (lower, upper) {
        (Bound::Included(a), Bound::Included(b)) => a > b,
        (Bound::Included(a), Bound::Excluded(b))
        | (Bound::Excluded(a), Bound::Included(b))
        | (Bound::Excluded(a), Bound::Excluded(b)) => a >= b,
        _ => false,
    }
}

/// Records whose reply slots are reserved ahead: a page as clients ask for (LIMIT 10 ... 100)
/// gets its array in one allocation; an unlimited range grows it from there.
const RESERVED_RECORDS_MAX: usize = forest_store::store::SCAN_OPTIMISTIC_ROWS;

/// FOREST.RANGE min max [REV] [LIMIT count] [KEYSONLY]: KEYSONLY replies with the keys alone.
pub fn range(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let mut order = Order::Ascending;
    let mut limit = usize::MAX;
    let mut keys_only = false;
    let mut i = 3;
    while i < argv.len() {
        if is_word(argv[i], "rev") {
            order = Order::Descending;
        } else if is_word(argv[i], "keysonly") {
            keys_only = true;
        } else if is_word(argv[i], "limit") {
            let Some(count) = argv.get(i + 1) else {
                return Err(syntax_error());
            };
            limit = match crate::parse::parse_int(count) {
                Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                Some(_) => return Err(Frame::err("LIMIT count must be 0 or more")),
                None => return Err(super::not_an_integer()),
            };
            i += 1;
        } else {
            return Err(syntax_error());
        }
        i += 1;
    }
    let Some((lower, upper)) = bounds(argv[1], argv[2])? else {
        return Ok(Frame::Array(vec![]));
    };
    if limit == 0 {
        return Ok(Frame::Array(Vec::new()));
    }
    let per_record = if keys_only { 1 } else { 2 };
    let mut items = Vec::with_capacity(limit.min(RESERVED_RECORDS_MAX) * per_record);
    // Each bulk string's bytes come from the connection's pool, where the encoded reply's
    // buffers return (`Buffers::recycle`): once warm, a range allocates no buffer per record.
    // Taken out of `ctx` for the scan (which borrows `ctx`), put back after it.
    let mut buffers = std::mem::take(&mut *ctx.buffers);
    // Expired keys are skipped. A deletion of an expired key between reading a row and
    // checking its deadline could show a deleted key: if one happened (the generation of
    // deletions moved), the range is read again, and at last with each row checked by a
    // point read (`expiry`'s invariants).
    let expires = &ctx.shared.expires;
    for attempt in 0..=super::expire::SCAN_RETRIES {
        let generation = expires.generation();
        let validate = attempt == super::expire::SCAN_RETRIES;
        for item in items.drain(..) {
            buffers.recycle(item);
        }
        read_range(
            ctx,
            (lower, upper),
            (order, limit, keys_only, validate),
            &mut buffers,
            &mut items,
        );
        if validate || expires.generation() == generation {
            break;
        }
    }
    *ctx.buffers = buffers;
    Ok(Frame::Array(items))
}

/// One read of FOREST.RANGE's rows into `items`. The limit goes to the store: a short page
/// of a long range reads optimistically, without holding batches off (scan_gate). Expired
/// keys are skipped; if some were, the scan goes on after the last row read until `limit`
/// live keys are found or the range ends. With `validate`, each row is checked again by a
/// point read.
fn read_range(
    ctx: &Ctx<'_, '_>,
    (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
    (order, limit, keys_only, validate): (Order, usize, bool, bool),
    buffers: &mut super::Buffers,
    items: &mut Vec<Frame>,
) {
    let shared = ctx.shared;
    let mut scratch = Vec::new();
    let mut found = 0usize;
    let mut resume: Option<Vec<u8>> = None;
    loop {
        let (lo, hi) = match (&resume, order) {
            (None, _) => (lower, upper),
            (Some(k), Order::Ascending) => (Bound::Excluded(k.as_slice()), upper),
            (Some(k), Order::Descending) => (lower, Bound::Excluded(k.as_slice())),
        };
        let want = limit - found;
        let (mut read, mut hidden) = (0usize, false);
        let mut last_read = Vec::new();
        let mut visit = |key: &[u8], value: &[u8]| {
            read += 1;
            if read == want {
                last_read = key.to_vec();
            }
            let live = !ctx.hides(key)
                && (!validate
                    || super::expire::still_live(
                        shared,
                        key,
                        "string",
                        (!keys_only).then_some(value),
                        &mut scratch,
                    ));
            if !live {
                hidden = true;
                return ControlFlow::Continue(());
            }
            found += 1;
            items.push(Frame::Bulk(buffers.copy_of(key)));
            if !keys_only {
                items.push(Frame::Bulk(buffers.copy_of(value)));
            }
            ControlFlow::Continue(())
        };
        // Within EXEC the scan merges the transaction's own writes (`Ctx::scan_up_to`).
        if keys_only {
            // Values stay out of the store's scan buffer as well as out of the reply.
            ctx.scan_keys_up_to(lo, hi, order, want, &mut visit);
        } else {
            ctx.scan_up_to(lo, hi, order, want, &mut visit);
        }
        if read < want || found >= limit || !hidden {
            break;
        }
        resume = Some(last_read);
    }
}

/// FOREST.COUNT min max.
pub fn count(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let Some((lower, upper)) = bounds(argv[1], argv[2])? else {
        return Ok(Frame::Integer(0));
    };
    let shared = ctx.shared;
    let expires = &shared.expires;
    let mut n = 0i64;
    let mut scratch = Vec::new();
    // As FOREST.RANGE: read again if an expired key was deleted meanwhile; within EXEC the
    // scan merges the transaction's own writes (`Ctx::scan`).
    for attempt in 0..=super::expire::SCAN_RETRIES {
        let generation = expires.generation();
        let validate = attempt == super::expire::SCAN_RETRIES;
        n = 0;
        ctx.scan(lower, upper, Order::Ascending, &mut |key, value| {
            let live = !ctx.hides(key)
                && (!validate
                    || super::expire::still_live(shared, key, "string", Some(value), &mut scratch));
            if live {
                n += 1;
            }
            ControlFlow::Continue(())
        });
        if validate || expires.generation() == generation {
            break;
        }
    }
    Ok(Frame::Integer(n))
}

/// FOREST.DELRANGE min max: the number of keys removed, through the batch (one durability
/// wait for all).
pub fn delrange(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let Some((lower, upper)) = bounds(argv[1], argv[2])? else {
        return Ok(Frame::Integer(0));
    };
    Ok(Frame::Integer(super::expire::remove_string_range(
        ctx, lower, upper,
    )?))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound;

    use proptest::prelude::*;

    use super::super::testing::*;
    use crate::frame::Frame;

    fn flat(pairs: &[(&str, &str)]) -> Frame {
        Frame::Array(pairs.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]).collect())
    }

    // Goal: each bound kind, REV, LIMIT, KEYSONLY and continuation behave as documented.
    // Method: five keys and one query per feature.
    #[test]
    fn range_features() {
        let mut h = Harness::new();
        h.run(&["MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5"]);
        assert_eq!(
            h.run(&["FOREST.RANGE", "[b", "(d"]),
            flat(&[("b", "2"), ("c", "3")])
        );
        assert_eq!(
            h.run(&["forest.range", "(b", "[d", "REV"]),
            flat(&[("d", "4"), ("c", "3")])
        );
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "+", "LIMIT", "2", "KEYSONLY"]),
            bulks(&["a", "b"])
        );
        assert_eq!(
            h.run(&["FOREST.RANGE", "(b", "+", "LIMIT", "2", "KEYSONLY"]),
            bulks(&["c", "d"])
        );
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "(d", "REV", "LIMIT", "2", "KEYSONLY"]),
            bulks(&["c", "b"])
        );
        assert_eq!(h.run(&["FOREST.RANGE", "-", "+", "LIMIT", "0"]), bulks(&[]));
        assert_eq!(h.run(&["FOREST.RANGE", "[d", "[b"]), bulks(&[]));
        assert_eq!(h.run(&["FOREST.RANGE", "+", "-"]), bulks(&[]));
        assert_eq!(h.run(&["FOREST.RANGE", "(c", "(c"]), bulks(&[]));
        assert_eq!(h.run(&["FOREST.COUNT", "[b", "+"]), Frame::Integer(4));
        assert_eq!(h.run(&["FOREST.COUNT", "[z", "[a"]), Frame::Integer(0));
        assert_eq!(h.run(&["FOREST.DELRANGE", "(a", "[c"]), Frame::Integer(2));
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "+", "KEYSONLY"]),
            bulks(&["a", "d", "e"])
        );
        let invalid = Frame::Error("ERR min or max not valid string range item".into());
        assert_eq!(h.run(&["FOREST.RANGE", "a", "+"]), invalid);
        assert_eq!(h.run(&["FOREST.COUNT", "-", "b"]), invalid);
        assert_eq!(h.run(&["FOREST.DELRANGE", "", "+"]), invalid);
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "+", "LIMIT"]),
            Frame::Error("ERR syntax error".into())
        );
        assert_eq!(
            h.run(&["FOREST.RANGE", "-", "+", "LIMIT", "-1"]),
            Frame::Error("ERR LIMIT count must be 0 or more".into())
        );
    }

    // Goal: a range builds its bulk strings in the connection's pooled buffers (where an
    // encoded reply's buffers return), so a warm connection allocates no buffer per record;
    // the reply is the same, with and without KEYSONLY. Method: a pool of buffers of a
    // capacity no fresh one-byte copy has; each bulk of the reply must be one of them.
    #[test]
    fn range_builds_its_bulk_strings_in_pooled_buffers() {
        const MARK: usize = 1000;
        let mut h = Harness::new();
        h.run(&["MSET", "a", "1", "b", "2", "c", "3"]);
        let mut buffers = super::super::Buffers::default();
        for _ in 0..6 {
            buffers.give(Vec::with_capacity(MARK));
        }
        let mut batch = h.shared.store.batch();
        let mut ctx = super::super::Ctx {
            shared: &h.shared,
            client: &mut h.client,
            batch: &mut batch,
            unit: None,
            wrote: false,
            after: super::super::After::Continue,
            buffers: &mut buffers,
        };
        let argv: [&[u8]; 3] = [b"FOREST.RANGE", b"-", b"+"];
        let reply = super::range(&mut ctx, &argv).expect("a reply");
        assert_eq!(reply, flat(&[("a", "1"), ("b", "2"), ("c", "3")]));
        let pooled = |reply: &Frame| match reply {
            Frame::Array(items) => items
                .iter()
                .filter(|f| matches!(f, Frame::Bulk(b) if b.capacity() == MARK))
                .count(),
            _ => 0,
        };
        assert_eq!(pooled(&reply), 6);
        ctx.buffers.recycle(reply);
        let argv: [&[u8]; 6] = [b"FOREST.RANGE", b"-", b"+", b"REV", b"LIMIT", b"2"];
        let argv = [&argv[..], &[&b"KEYSONLY"[..]]].concat();
        let reply = super::range(&mut ctx, &argv).expect("a reply");
        assert_eq!(reply, bulks(&["c", "b"]));
        assert_eq!(pooled(&reply), 2);
        drop(ctx);
        batch.wait().expect("wait");
    }

    fn bound_arg(kind: u8, key: &str) -> String {
        match kind % 4 {
            0 => "-".into(),
            1 => "+".into(),
            2 => format!("[{key}"),
            _ => format!("({key}"),
        }
    }

    fn model_bound(arg: &str, lower: bool) -> Option<Bound<Vec<u8>>> {
        match arg.as_bytes() {
            b"-" if lower => Some(Bound::Unbounded),
            b"+" if !lower => Some(Bound::Unbounded),
            b"-" | b"+" => None,
            [b'[', k @ ..] => Some(Bound::Included(k.to_vec())),
            [_, k @ ..] => Some(Bound::Excluded(k.to_vec())),
            [] => None,
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        // Goal: FOREST.RANGE and FOREST.COUNT agree with a BTreeMap on any bounds, order and
        // limit. Method: random small key sets and random lex bounds.
        #[test]
        fn range_matches_a_model(
            keys in proptest::collection::btree_set("[a-d]{0,3}", 0..20),
            lo in (0u8..4, "[a-d]{0,3}"),
            hi in (0u8..4, "[a-d]{0,3}"),
            rev in any::<bool>(),
            limit in 0usize..8,
        ) {
            let mut h = Harness::new();
            let mut model = BTreeMap::new();
            for k in &keys {
                h.run(&["SET", k, &format!("v{k}")]);
                model.insert(k.as_bytes().to_vec(), format!("v{k}").into_bytes());
            }
            let (min, max) = (bound_arg(lo.0, &lo.1), bound_arg(hi.0, &hi.1));
            let limit_text = limit.to_string();
            let mut argv = vec!["FOREST.RANGE", &min, &max, "LIMIT", &limit_text];
            if rev {
                argv.push("REV");
            }
            let got = h.run(&argv);
            let want: Vec<(Vec<u8>, Vec<u8>)> = match (model_bound(&min, true), model_bound(&max, false)) {
                (Some(l), Some(u)) => {
                    let crossed = match (&l, &u) {
                        (Bound::Included(a), Bound::Included(b)) => a > b,
                        (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a >= b,
                        _ => false,
                    };
                    if crossed {
                        vec![]
                    } else {
                        let it = model.range((l, u)).map(|(k, v)| (k.clone(), v.clone()));
                        if rev { it.rev().collect() } else { it.collect() }
                    }
                }
                _ => vec![],
            };
            let count = h.run(&["FOREST.COUNT", &min, &max]);
            prop_assert_eq!(count, Frame::Integer(want.len() as i64));
            let want = Frame::Array(
                want.into_iter().take(limit).flat_map(|(k, v)| [Frame::Bulk(k), Frame::Bulk(v)]).collect(),
            );
            prop_assert_eq!(got, want);
        }
    }
}
