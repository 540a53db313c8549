//! RANDOMKEY: a key of any type, or null when there is none.
//!
//! Redis picks a random bucket of its hash table; forest's keys are ordered, so it draws a
//! random point between the first and the last key and answers the first key at or after it
//! (the first key if none). The point's bytes after the common prefix of the first and
//! last key are drawn from the byte range those keys use, so keys like `user:1`..`user:9999`
//! are all reachable. The choice is random but not uniform: a key after a wide gap in the
//! key space is chosen more often (docs/PROTOCOL.md "Keys"). Cost: three short scans.

use std::ops::{Bound, ControlFlow};

use forest_core::Order;

use super::keys::list_keys;
use super::{Ctx, Reply};
use crate::collection::{RESERVED_BYTE, TYPE_TAG};
use crate::frame::Frame;

/// Bytes of the random point past the common prefix: enough to spread over any key space
/// that distinguishes keys within the first few bytes after it.
const POINT_TAIL_BYTES: usize = 12;

/// The last key in key order (strings and collections), if any.
fn last_key(ctx: &Ctx<'_, '_>) -> Option<Vec<u8>> {
    let mut last: Option<Vec<u8>> = None;
    let strings_end = [RESERVED_BYTE];
    ctx.scan_up_to(
        Bound::Unbounded,
        Bound::Excluded(&strings_end[..]),
        Order::Descending,
        1,
        &mut |k, _| {
            last = Some(k.to_vec());
            ControlFlow::Break(())
        },
    );
    if ctx.shared.collections.any() {
        let types = [RESERVED_BYTE, TYPE_TAG];
        let types_end = [RESERVED_BYTE, TYPE_TAG + 1];
        ctx.scan_up_to(
            Bound::Included(&types[..]),
            Bound::Excluded(&types_end[..]),
            Order::Descending,
            1,
            &mut |k, _| {
                let user = &k[types.len()..];
                if last.as_deref().is_none_or(|l| user > l) {
                    last = Some(user.to_vec());
                }
                ControlFlow::Break(())
            },
        );
    }
    last
}

/// A random point between `first` and `last` (`first < last`), from the random words of
/// `next`.
pub fn point_between(first: &[u8], last: &[u8], mut next: impl FnMut() -> u64) -> Vec<u8> {
    let common = first.iter().zip(last).take_while(|(a, b)| a == b).count();
    let tail = first[common..].iter().chain(&last[common..]);
    let (low, high) = tail.fold((u8::MAX, u8::MIN), |(lo, hi), &b| (lo.min(b), hi.max(b)));
    let span = u64::from(high.saturating_sub(low)) + 1;
    let mut point = first[..common].to_vec();
    for _ in 0..POINT_TAIL_BYTES {
        point.push(low + (next() % span) as u8);
    }
    point
}

/// Live keys listed per scan of [`first_live`].
const LIVE_CHUNK: usize = 16;

/// The first key at or after `lower` that is live: due keys (not deleted yet) are skipped,
/// as Redis's RANDOMKEY skips expired ones.
fn first_live(ctx: &Ctx<'_, '_>, lower: Bound<&[u8]>) -> Option<Vec<u8>> {
    let mut resume: Option<Vec<u8>> = None;
    loop {
        let from = resume.as_deref().map_or(lower, Bound::Excluded);
        let generation = ctx.shared.expires.generation();
        let mut keys = list_keys(ctx, from, None, LIVE_CHUNK, None);
        let last = keys.last().map(|(key, _)| key.clone())?;
        let full = keys.len() >= LIVE_CHUNK;
        keys.retain(|(key, _)| !ctx.is_due(key));
        super::expire::recheck_listed(ctx, generation, &mut keys);
        if let Some((key, _)) = keys.into_iter().next() {
            return Some(key);
        }
        if !full {
            return None;
        }
        resume = Some(last);
    }
}

pub fn randomkey(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    let Some(first) = first_live(ctx, Bound::Unbounded) else {
        return Ok(Frame::Null);
    };
    let Some(last) = last_key(ctx).filter(|l| *l > first) else {
        return Ok(Frame::Bulk(first));
    };
    let collections = &ctx.shared.collections;
    let point = point_between(&first, &last, || collections.random());
    let chosen = first_live(ctx, Bound::Included(&point)).unwrap_or(first);
    Ok(Frame::Bulk(chosen))
}

#[cfg(test)]
mod tests {
    use super::super::testing::*;
    use crate::frame::Frame;

    // Goal: RANDOMKEY answers null on an empty store, the only key of a one-key store, and
    // over many calls reaches every key of a small mixed keyspace (strings and
    // collections). Method: 2000 calls over 10 keys, every key seen.
    #[test]
    fn reaches_every_key() {
        let mut h = Harness::new();
        assert_eq!(h.run(&["RANDOMKEY"]), Frame::Null);
        h.run(&["SADD", "only", "m"]);
        assert_eq!(h.run(&["RANDOMKEY"]), bulk("only"));
        h.run(&["DEL", "only"]);
        let mut keys = std::collections::BTreeSet::new();
        for i in 0..10 {
            let key = format!("key:{i}");
            if i % 3 == 0 {
                h.run(&["RPUSH", &key, "x"]);
            } else {
                h.run(&["SET", &key, "x"]);
            }
            keys.insert(key);
        }
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..2000 {
            match h.run(&["RANDOMKEY"]) {
                Frame::Bulk(k) => {
                    seen.insert(String::from_utf8(k).expect("utf8"));
                }
                other => panic!("{other:?}"),
            }
        }
        assert_eq!(seen, keys);
    }

    // Goal: the random point lies within the first and last keys' common prefix and byte
    // range. Method: fixed random words.
    #[test]
    fn point_between() {
        let mut n = 0u64;
        let point = super::point_between(b"user:1", b"user:9", || {
            n += 7;
            n
        });
        assert!(point.starts_with(b"user:"));
        assert!(point[5..].iter().all(|b| (b'1'..=b'9').contains(b)));
    }
}
