//! Scans of string keys over both places a string lives (`crate::expiry`'s layout): its raw
//! key, or `FF 'x' <key>` while it has a deadline. Every string scan (KEYS, SCAN,
//! RANDOMKEY, FOREST.RANGE / COUNT / DELRANGE, FLUSHDB) goes through [`Ctx::scan_up_to`],
//! which merges the two ranges here, in either order, within any bounds: the visitor sees
//! user keys in key order and values without their deadlines.
//!
//! Each side is read a chunk at a time; the whole merge runs with atomic batches held off
//! (`Store::read_consistent`), so a string that moves between the places meanwhile (a
//! move is one atomic batch) is seen exactly once. Until a string first takes a deadline
//! the raw range alone is read, as before (`Expires::scan_untimed`).

use std::collections::VecDeque;
use std::ops::{Bound, ControlFlow};

use forest_core::{Order, Visitor};

use super::Ctx;
use crate::collection::RESERVED_BYTE;
use crate::expiry::{decode_string, string_bounds};

/// Rows read per side per store scan: bounds the memory of a merge.
const CHUNK_ROWS: usize = 256;

/// Whether a scan with this upper bound stays in the string keys' space (below the
/// reserved byte), so that strings with a deadline belong in it.
pub fn in_strings(upper: Bound<&[u8]>) -> bool {
    match upper {
        Bound::Excluded(k) => k <= &[RESERVED_BYTE][..],
        Bound::Included(k) => k < &[RESERVED_BYTE][..],
        Bound::Unbounded => false,
    }
}

/// `bound` of user keys as a bound of the `FF 'x'` range; `upper` tells which end.
fn timed_bound(bound: Bound<&[u8]>, upper: bool) -> Bound<Vec<u8>> {
    let (lowest, past) = string_bounds();
    let place = |k: &[u8]| {
        let mut key = lowest.to_vec();
        key.extend_from_slice(k);
        key
    };
    match bound {
        // The reserved byte as a bound means "every string".
        Bound::Excluded(k) | Bound::Included(k) if k.first() == Some(&RESERVED_BYTE) => {
            Bound::Excluded(past.to_vec())
        }
        Bound::Included(k) => Bound::Included(place(k)),
        Bound::Excluded(k) => Bound::Excluded(place(k)),
        Bound::Unbounded if upper => Bound::Excluded(past.to_vec()),
        Bound::Unbounded => Bound::Included(lowest.to_vec()),
    }
}

fn as_ref(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match bound {
        Bound::Included(k) => Bound::Included(k.as_slice()),
        Bound::Excluded(k) => Bound::Excluded(k.as_slice()),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// One of the two ranges being merged: rows read ahead, and where to read on.
struct Side {
    rows: VecDeque<(Vec<u8>, Vec<u8>)>,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    done: bool,
    /// The `FF 'x'` side: keys lose their tag, values their deadline.
    timed: bool,
}

impl Side {
    fn refill(&mut self, ctx: &Ctx<'_, '_>, order: Order, keys_only: bool) {
        if !self.rows.is_empty() || self.done {
            return;
        }
        let mut read = 0usize;
        let mut last: Option<Vec<u8>> = None;
        let rows = &mut self.rows;
        let timed = self.timed;
        let mut visit = |key: &[u8], value: &[u8]| {
            read += 1;
            last = Some(key.to_vec());
            let (user, value) = if timed {
                let user = crate::expiry::split_string_key(key).unwrap_or_default();
                if keys_only {
                    (user, &[][..])
                } else {
                    match decode_string(value) {
                        Some((_, v)) => (user, v),
                        // Too short to hold a deadline: no forest write leaves that.
                        None => return ControlFlow::Continue(()),
                    }
                }
            } else {
                (key, value)
            };
            rows.push_back((user.to_vec(), value.to_vec()));
            ControlFlow::Continue(())
        };
        let (lower, upper) = (as_ref(&self.lower), as_ref(&self.upper));
        if keys_only {
            ctx.scan_keys_up_to_at(lower, upper, order, CHUNK_ROWS, &mut visit);
        } else {
            ctx.scan_up_to_at(lower, upper, order, CHUNK_ROWS, &mut visit);
        }
        if read < CHUNK_ROWS {
            self.done = true;
        }
        if let Some(last) = last {
            match order {
                Order::Ascending => self.lower = Bound::Excluded(last),
                Order::Descending => self.upper = Bound::Excluded(last),
            }
        }
    }
}

impl Ctx<'_, '_> {
    /// Whether the open unit may have put a string at `FF 'x'`.
    pub(super) fn unit_has_deadlines(&self) -> bool {
        self.unit.as_ref().is_some_and(|u| {
            let (lowest, past) = string_bounds();
            !u.deadlines.is_empty()
                || u.overlay
                    .range((Bound::Included(&lowest[..]), Bound::Excluded(&past[..])))
                    .next()
                    .is_some()
        })
    }

    /// At most `limit` strings within the bounds (of user keys), in `order`, from both
    /// places (see the module doc); with `keys_only`, empty values.
    pub(super) fn scan_strings(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        keys_only: bool,
        visit: &mut Visitor<'_>,
    ) {
        if limit == 0 {
            return;
        }
        if !self.unit_has_deadlines() {
            let scanned = self.shared.expires.scan_untimed(|| {
                if keys_only {
                    self.scan_keys_up_to_at(lower, upper, order, limit, visit)
                } else {
                    self.scan_up_to_at(lower, upper, order, limit, visit)
                }
            });
            if scanned {
                return;
            }
        }
        let owned = |b: Bound<&[u8]>| match b {
            Bound::Included(k) => Bound::Included(k.to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let mut raw = Side {
            rows: VecDeque::new(),
            lower: owned(lower),
            upper: owned(upper),
            done: false,
            timed: false,
        };
        let mut timed = Side {
            rows: VecDeque::new(),
            lower: timed_bound(lower, false),
            upper: timed_bound(upper, true),
            done: false,
            timed: true,
        };
        self.shared.store.read_consistent(|| {
            merge(self, (&mut raw, &mut timed), order, limit, keys_only, visit)
        });
    }
}

/// Hands out the rows of both sides in key order (see [`Ctx::scan_strings`]).
fn merge(
    ctx: &Ctx<'_, '_>,
    (raw, timed): (&mut Side, &mut Side),
    order: Order,
    limit: usize,
    keys_only: bool,
    visit: &mut Visitor<'_>,
) {
    let mut handed = 0usize;
    loop {
        raw.refill(ctx, order, keys_only);
        timed.refill(ctx, order, keys_only);
        let take_raw = match (raw.rows.front(), timed.rows.front()) {
            (None, None) => return,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some((a, _)), Some((b, _))) => {
                debug_assert_ne!(a, b, "a string in both of its places");
                if a == b {
                    // Never written so; should a damaged store hold it, show the key once.
                    timed.rows.pop_front();
                    true
                } else {
                    match order {
                        Order::Ascending => a < b,
                        Order::Descending => a > b,
                    }
                }
            }
        };
        let side = if take_raw { &mut *raw } else { &mut *timed };
        let Some((key, value)) = side.rows.pop_front() else {
            return;
        };
        handed += 1;
        if visit(&key, &value).is_break() || handed >= limit {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ops::{Bound, ControlFlow};

    use forest_core::Order;

    use super::super::testing::*;
    use super::*;
    use crate::expiry::{encode_string, string_key};

    /// The strings a scan hands out, as (key, value) text.
    fn scan(
        h: &Harness,
        lower: Bound<&str>,
        upper: Bound<&str>,
        order: Order,
        limit: usize,
        keys_only: bool,
    ) -> Vec<(String, String)> {
        let map = |b: Bound<&str>| match b {
            Bound::Included(k) => Bound::Included(k.as_bytes().to_vec()),
            Bound::Excluded(k) => Bound::Excluded(k.as_bytes().to_vec()),
            Bound::Unbounded => Bound::Unbounded,
        };
        let (lower, upper) = (map(lower), map(upper));
        let strings_end = [RESERVED_BYTE];
        let upper_ref = match &upper {
            Bound::Unbounded => Bound::Excluded(&strings_end[..]),
            b => as_ref(b),
        };
        let mut client = h.shared.new_client("t".into(), "t".into(), None);
        let mut batch = h.shared.store.batch();
        let mut buffers = super::super::Buffers::default();
        let ctx = Ctx {
            shared: &h.shared,
            client: &mut client,
            batch: &mut batch,
            unit: None,
            wrote: false,
            after: super::super::After::Continue,
            buffers: &mut buffers,
            now: Default::default(),
        };
        let mut out = Vec::new();
        let mut visit = |k: &[u8], v: &[u8]| {
            out.push((
                String::from_utf8_lossy(k).into_owned(),
                String::from_utf8_lossy(v).into_owned(),
            ));
            ControlFlow::Continue(())
        };
        if keys_only {
            ctx.scan_keys_up_to(as_ref(&lower), upper_ref, order, limit, &mut visit);
        } else {
            ctx.scan_up_to(as_ref(&lower), upper_ref, order, limit, &mut visit);
        }
        out
    }

    // Goal: the merge of raw keys and `FF 'x'` keys is in key order in both directions,
    // within every kind of bound, up to a limit, values without their deadlines, and
    // keys-only too; chunks (more rows than one read) join without loss.
    // Method: strings with and without deadlines interleaved (SET / SET PX), compared with
    // the same scan of a sorted model.
    #[test]
    fn merges_both_places_in_order() {
        let mut h = Harness::new();
        let mut model: Vec<(String, String)> = Vec::new();
        for i in 0..(CHUNK_ROWS * 2 + 37) {
            let key = format!("k{i:04}");
            let value = format!("v{i}");
            if i % 3 == 0 {
                h.run(&["SET", &key, &value]);
            } else {
                h.run(&["SET", &key, &value, "PX", "100000"]);
            }
            model.push((key, value));
        }
        model.sort();
        let rows = |lo: Bound<&str>, hi: Bound<&str>| -> Vec<(String, String)> {
            model
                .iter()
                .filter(|(k, _)| {
                    let above = match lo {
                        Bound::Included(b) => k.as_str() >= b,
                        Bound::Excluded(b) => k.as_str() > b,
                        Bound::Unbounded => true,
                    };
                    let below = match hi {
                        Bound::Included(b) => k.as_str() <= b,
                        Bound::Excluded(b) => k.as_str() < b,
                        Bound::Unbounded => true,
                    };
                    above && below
                })
                .cloned()
                .collect()
        };
        let bounds = [
            (Bound::Unbounded, Bound::Unbounded),
            (Bound::Included("k0100"), Bound::Excluded("k0400")),
            (Bound::Excluded("k0100"), Bound::Included("k0400")),
            (Bound::Included("k0002"), Bound::Included("k0002")),
            (Bound::Excluded("k0001"), Bound::Unbounded),
            (Bound::Unbounded, Bound::Excluded("k0500")),
        ];
        for (lo, hi) in bounds {
            let want = rows(lo, hi);
            for limit in [usize::MAX, 1, 2, 300] {
                let got = scan(&h, lo, hi, Order::Ascending, limit, false);
                let expect: Vec<_> = want.iter().take(limit).cloned().collect();
                assert_eq!(got, expect, "{lo:?} {hi:?} {limit}");
                let got = scan(&h, lo, hi, Order::Descending, limit, false);
                let expect: Vec<_> = want.iter().rev().take(limit).cloned().collect();
                assert_eq!(got, expect, "rev {lo:?} {hi:?} {limit}");
                let got = scan(&h, lo, hi, Order::Ascending, limit, true);
                let expect: Vec<_> = want
                    .iter()
                    .take(limit)
                    .map(|(k, _)| (k.clone(), String::new()))
                    .collect();
                assert_eq!(got, expect, "keys {lo:?} {hi:?} {limit}");
            }
        }
    }

    // Goal: a string is never in both places, whatever moves it: SET EX on a raw key,
    // PERSIST, EXPIRE, SET (clearing), GETEX PERSIST, RENAME.
    // Method: after each command, the raw key and `FF 'x'` are read from the store: at most
    // one exists, and `FF 'x'` exactly while the key has a deadline.
    #[test]
    fn a_string_is_in_one_place() {
        let mut h = Harness::new();
        let check = |h: &Harness, key: &str, timed: bool| {
            let mut v = Vec::new();
            let raw = h.shared.store.get(key.as_bytes(), &mut v);
            let at = h.shared.store.get(&string_key(key.as_bytes()), &mut v);
            assert!(!(raw && at), "{key} in both places");
            assert_eq!(at, timed, "{key}");
            assert_eq!(raw, !timed, "{key}");
            assert_eq!(h.shared.expires.deadline(key.as_bytes()).is_some(), timed);
        };
        h.run(&["SET", "a", "1"]);
        check(&h, "a", false);
        h.run(&["SET", "a", "2", "EX", "100"]);
        check(&h, "a", true);
        assert_eq!(h.run(&["GET", "a"]), bulk("2"));
        h.run(&["PERSIST", "a"]);
        check(&h, "a", false);
        h.run(&["EXPIRE", "a", "100"]);
        check(&h, "a", true);
        h.run(&["APPEND", "a", "x"]);
        check(&h, "a", true);
        assert_eq!(h.run(&["GET", "a"]), bulk("2x"));
        h.run(&["SET", "a", "3"]);
        check(&h, "a", false);
        h.run(&["SET", "a", "4", "PX", "100000", "GET"]);
        check(&h, "a", true);
        h.run(&["GETEX", "a", "PERSIST"]);
        check(&h, "a", false);
        h.run(&["SETEX", "a", "100", "5"]);
        h.run(&["RENAME", "a", "b"]);
        check(&h, "b", true);
        assert_eq!(h.run(&["GET", "b"]), bulk("5"));
        let mut v = Vec::new();
        assert!(!h.shared.store.get(b"a", &mut v));
        assert!(!h.shared.store.get(&string_key(b"a"), &mut v));
        // A stored value is its deadline, then the value.
        assert!(h.shared.store.get(&string_key(b"b"), &mut v));
        let deadline = h.shared.expires.deadline(b"b").expect("deadline");
        assert_eq!(v, encode_string(deadline, b"5"));
    }
}
