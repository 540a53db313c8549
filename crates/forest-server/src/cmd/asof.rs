//! Reads as of a past time on a store over a temporal engine (issue 18; docs/PROTOCOL.md
//! "Reads as of a time"): ASOF.NOW, ASOF.GET, ASOF.RANGE, ASOF.COUNT, ASOF.HISTORY and
//! ASOF.RETAIN (the retention threshold; reads before it are refused). A dotted
//! namespace that neither Redis nor a common module uses (RedisTimeSeries has `TS.*`).
//!
//! Timestamps are integer microseconds since the Unix epoch, or RFC 3339 times
//! (`2026-11-28T09:00:00.5Z`, `...+01:00`); replies give integers. A time after ASOF.NOW is
//! refused: its answer could still change.
//!
//! Strings only, as FOREST.RANGE: a string is at its raw key, or with a deadline at
//! `FF 'x' 00×6 <key>` (`crate::expiry`), and the two places are merged here. A string whose
//! deadline is at or before `t` is absent as of `t`; in a history its expiry is a delete
//! (nil) at its deadline, and the later removal by the expiry task adds nothing (the key
//! was already gone). Keys starting with byte 0xFF (collections) answer nil.

use std::ops::{Bound, ControlFlow};

use forest_core::{Error, Order};
use forest_store::Store;

use super::range::{empty_between, lex_bound, LexBound};
use super::{is_word, not_an_integer, syntax_error, Ctx, Reply};
use crate::collection::RESERVED_BYTE;
use crate::expiry::layout::{moved_window, old_string_bounds, old_string_key};
use crate::expiry::{decode_string, split_string_key, string_bounds, string_key};
use crate::frame::Frame;

/// A store error as the reply: the store's own words for the temporal ones.
fn error(e: Error) -> Frame {
    match e {
        Error::InvalidUse(what) => Frame::err(what),
        other => super::store_error(&other),
    }
}

/// `n` (microseconds) or an RFC 3339 time, else an error naming the argument.
pub(crate) fn parse_time(arg: &[u8]) -> Result<u64, Frame> {
    let bad = || {
        Frame::err(format!(
            "invalid timestamp '{}': expected integer microseconds since the Unix epoch or an \
             RFC 3339 time (2026-11-28T09:00:00Z)",
            String::from_utf8_lossy(arg)
        ))
    };
    if !arg.is_empty() && arg.iter().all(u8::is_ascii_digit) {
        return std::str::from_utf8(arg)
            .ok()
            .and_then(|s| s.parse().ok())
            .ok_or_else(bad);
    }
    rfc3339_micros(arg).ok_or_else(bad)
}

/// Days from 1970-01-01 to the civil date (proleptic Gregorian; H. Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `YYYY-MM-DD(T|t| )HH:MM:SS[.fraction](Z|z|±HH:MM)` as microseconds since the epoch;
/// None if malformed or before the epoch.
fn rfc3339_micros(s: &[u8]) -> Option<u64> {
    let num = |r: std::ops::Range<usize>| -> Option<i64> {
        let part = s.get(r)?;
        part.iter()
            .all(u8::is_ascii_digit)
            .then(|| std::str::from_utf8(part).ok()?.parse().ok())?
    };
    if s.len() < 20 || s[4] != b'-' || s[7] != b'-' || s[13] != b':' || s[16] != b':' {
        return None;
    }
    if !matches!(s[10], b'T' | b't' | b' ') {
        return None;
    }
    let (y, mo, d) = (num(0..4)?, num(5..7)?, num(8..10)?);
    let (h, mi, sec) = (num(11..13)?, num(14..16)?, num(17..19)?);
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let month_days = [
        31,
        if leap { 29 } else { 28 },
        31,
        30,
        31,
        30,
        31,
        31,
        30,
        31,
        30,
        31,
    ];
    if !(1..=12).contains(&mo) || d < 1 || d > month_days[(mo - 1) as usize] {
        return None;
    }
    if h > 23 || mi > 59 || sec > 60 {
        return None;
    }
    let mut at = 19;
    let mut micros = 0i64;
    if s[at] == b'.' {
        at += 1;
        let start = at;
        while at < s.len() && s[at].is_ascii_digit() {
            if at - start < 6 {
                micros = micros * 10 + i64::from(s[at] - b'0');
            }
            at += 1;
        }
        if at == start {
            return None;
        }
        for _ in (at - start)..6 {
            micros *= 10;
        }
    }
    let offset = match s.get(at..)? {
        b"Z" | b"z" => 0,
        [sign @ (b'+' | b'-'), rest @ ..] if rest.len() == 5 && rest[2] == b':' => {
            let (oh, om) = (num(at + 1..at + 3)?, num(at + 4..at + 6)?);
            if oh > 23 || om > 59 {
                return None;
            }
            let minutes = oh * 60 + om;
            if *sign == b'+' {
                minutes
            } else {
                -minutes
            }
        }
        _ => return None,
    };
    let secs = days_from_civil(y, mo, d) * 86_400 + h * 3600 + mi * 60 + sec - offset * 60;
    u64::try_from(secs.checked_mul(1_000_000)?.checked_add(micros)?).ok()
}

/// Whether a string stored with deadline `deadline_ms` is still there at `t` (µs).
fn alive_at(deadline_ms: u64, t: u64) -> bool {
    deadline_ms.saturating_mul(1000) > t
}

/// ASOF.NOW: the newest time whose answers can no longer change.
pub fn now(ctx: &mut Ctx<'_, '_>, _argv: &[&[u8]]) -> Reply {
    let now = ctx.shared.store.now().map_err(error)?;
    Ok(Frame::Integer(i64::try_from(now).unwrap_or(i64::MAX)))
}

/// ASOF.RETAIN [ts]: the retention threshold (0: none), or raises it to `ts` and replies
/// with it. Refused: a time after ASOF.NOW, and one below the current threshold (it only
/// grows; the same threshold again is accepted and changes nothing).
pub fn retain(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let store = &ctx.shared.store;
    let threshold = match argv {
        [_] => store.retention().map_err(error)?,
        [_, t] => store.set_retention(parse_time(t)?).map_err(error)?,
        _ => return Err(syntax_error()),
    };
    Ok(Frame::Integer(i64::try_from(threshold).unwrap_or(i64::MAX)))
}

/// Where strings with a deadline were: layout 2's place, or before a move from layout 1
/// ([`moved_window`]) layout 1's, read as of the move's start.
#[derive(Clone, Copy)]
struct Places(Option<(u64, u64)>);

impl Places {
    fn of(store: &Store) -> Result<Places, Frame> {
        moved_window(store).map(Places).map_err(error)
    }

    /// The time to read layout 1's place at for `t`, or None: layout 2's place, at `t`.
    fn old_at(self, t: u64) -> Option<u64> {
        let (began, done) = self.0?;
        (t < done).then(|| t.min(began.saturating_sub(1)))
    }
}

/// The value of string `key` as of `t`, from whichever place it was in.
fn value_as_of(store: &Store, key: &[u8], t: u64) -> Result<Option<Vec<u8>>, Frame> {
    if key.first() == Some(&RESERVED_BYTE) {
        store.now().map_err(error)?; // still refuse a store that is not temporal
        return Ok(None);
    }
    let mut out = Vec::new();
    if store.get_as_of(key, t, &mut out).map_err(error)? {
        return Ok(Some(out));
    }
    let (place, at) = match Places::of(store)?.old_at(t) {
        Some(at) => (old_string_key(key), at),
        None => (string_key(key), t),
    };
    if store.get_as_of(&place, at, &mut out).map_err(error)? {
        if let Some((deadline, value)) = decode_string(&out) {
            if alive_at(deadline, t) {
                return Ok(Some(value.to_vec()));
            }
        }
    }
    Ok(None)
}

/// ASOF.GET key ts
pub fn get(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let t = parse_time(argv[2])?;
    Ok(match value_as_of(&ctx.shared.store, argv[1], t)? {
        Some(v) => Frame::Bulk(v),
        None => Frame::Null,
    })
}

/// The raw scan bounds of `min max` (strings below byte 0xFF), as FOREST.RANGE's; None
/// when certainly empty.
fn raw_bounds<'a>(min: &'a [u8], max: &'a [u8]) -> Result<Option<Bounds<'a>>, Frame> {
    const STRINGS_END: &[u8] = &[RESERVED_BYTE];
    let lower = match lex_bound(min)? {
        LexBound::Lowest => Bound::Unbounded,
        LexBound::Highest => return lex_bound(max).map(|_| None),
        LexBound::Included(k) => Bound::Included(k),
        LexBound::Excluded(k) => Bound::Excluded(k),
    };
    let upper = match lex_bound(max)? {
        LexBound::Lowest => return Ok(None),
        LexBound::Highest => Bound::Excluded(STRINGS_END),
        LexBound::Included(k) | LexBound::Excluded(k) if k >= STRINGS_END => {
            Bound::Excluded(STRINGS_END)
        }
        LexBound::Included(k) => Bound::Included(k),
        LexBound::Excluded(k) => Bound::Excluded(k),
    };
    Ok((!empty_between(lower, upper)).then_some((lower, upper)))
}

type Bounds<'a> = (Bound<&'a [u8]>, Bound<&'a [u8]>);

/// Strings read as of a time: (user key, value).
type Rows = Vec<(Vec<u8>, Vec<u8>)>;

/// The same user-key bounds over the `FF 'x'` entries of layout 2 (`old`: of layout 1).
fn stamped_bounds((lower, upper): Bounds<'_>, old: bool) -> (Bound<Vec<u8>>, Bound<Vec<u8>>) {
    let (low, high) = if old {
        let (low, high) = old_string_bounds();
        (low.to_vec(), high.to_vec())
    } else {
        let (low, high) = string_bounds();
        (low.to_vec(), high.to_vec())
    };
    let place = |k: &[u8]| {
        if old {
            old_string_key(k)
        } else {
            string_key(k)
        }
    };
    let lower = match lower {
        Bound::Unbounded => Bound::Included(low),
        Bound::Included(k) => Bound::Included(place(k)),
        Bound::Excluded(k) => Bound::Excluded(place(k)),
    };
    let upper = match upper {
        Bound::Excluded(k) if k == [RESERVED_BYTE] => Bound::Excluded(high),
        Bound::Unbounded => Bound::Excluded(high),
        Bound::Included(k) => Bound::Included(place(k)),
        Bound::Excluded(k) => Bound::Excluded(place(k)),
    };
    (lower, upper)
}

fn as_ref(b: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    match b {
        Bound::Included(k) => Bound::Included(k),
        Bound::Excluded(k) => Bound::Excluded(k),
        Bound::Unbounded => Bound::Unbounded,
    }
}

/// Which entries [`read_place`] reads.
#[derive(Clone, Copy, PartialEq)]
enum Place {
    /// Strings without a deadline: the user key itself.
    Raw,
    /// Layout 2's `FF 'x' 00×6 <user>`.
    Stamped,
    /// Layout 1's `FF 'x' <user>`.
    Old,
}

/// Up to `limit` live strings of one place as of `t` (read at `at`), in `order`: (user key,
/// value).
fn read_place(
    store: &Store,
    (lower, upper): (Bound<&[u8]>, Bound<&[u8]>),
    place: Place,
    order: Order,
    (t, at): (u64, u64),
    limit: usize,
) -> Result<Rows, Frame> {
    let mut rows = Vec::new();
    let mut resume: Option<Vec<u8>> = None;
    let old_prefix = old_string_bounds().0.len();
    while rows.len() < limit {
        let (lo, hi) = match (&resume, order) {
            (None, _) => (lower, upper),
            (Some(k), Order::Ascending) => (Bound::Excluded(k.as_slice()), upper),
            (Some(k), Order::Descending) => (lower, Bound::Excluded(k.as_slice())),
        };
        let want = limit - rows.len();
        resume = store
            .scan_as_of(lo, hi, order, at, want, &mut |k, v| {
                let user = match place {
                    Place::Raw => {
                        rows.push((k.to_vec(), v.to_vec()));
                        return ControlFlow::Continue(());
                    }
                    Place::Stamped => split_string_key(k),
                    Place::Old => k.get(old_prefix..),
                };
                if let (Some(user), Some((deadline, value))) = (user, decode_string(v)) {
                    if alive_at(deadline, t) {
                        rows.push((user.to_vec(), value.to_vec()));
                    }
                }
                ControlFlow::Continue(())
            })
            .map_err(error)?;
        if resume.is_none() {
            break;
        }
    }
    Ok(rows)
}

/// The live strings in `min max` as of `t`, both places merged, at most `limit`.
fn read_range(
    store: &Store,
    bounds: Bounds<'_>,
    order: Order,
    t: u64,
    limit: usize,
) -> Result<Rows, Frame> {
    let mut rows = read_place(store, bounds, Place::Raw, order, (t, t), limit)?;
    let (place, at) = match Places::of(store)?.old_at(t) {
        Some(at) => (Place::Old, at),
        None => (Place::Stamped, t),
    };
    let stamped = stamped_bounds(bounds, place == Place::Old);
    let more = read_place(
        store,
        (as_ref(&stamped.0), as_ref(&stamped.1)),
        place,
        order,
        (t, at),
        limit,
    )?;
    if !more.is_empty() {
        rows.extend(more);
        match order {
            Order::Ascending => rows.sort_by(|a, b| a.0.cmp(&b.0)),
            Order::Descending => rows.sort_by(|a, b| b.0.cmp(&a.0)),
        }
        rows.truncate(limit);
    }
    Ok(rows)
}

/// ASOF.RANGE min max ts [REV] [LIMIT count] [KEYSONLY]
pub fn range(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let t = parse_time(argv[3])?;
    let (mut order, mut limit, mut keys_only) = (Order::Ascending, usize::MAX, false);
    let mut i = 4;
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
                None => return Err(not_an_integer()),
            };
            i += 1;
        } else {
            return Err(syntax_error());
        }
        i += 1;
    }
    let store = &ctx.shared.store;
    let Some(bounds) = raw_bounds(argv[1], argv[2])? else {
        store.now().map_err(error)?;
        return Ok(Frame::Array(Vec::new()));
    };
    if limit == 0 {
        store.now().map_err(error)?;
        return Ok(Frame::Array(Vec::new()));
    }
    let rows = read_range(store, bounds, order, t, limit)?;
    let mut items = Vec::with_capacity(rows.len() * if keys_only { 1 } else { 2 });
    for (k, v) in rows {
        items.push(Frame::Bulk(k));
        if !keys_only {
            items.push(Frame::Bulk(v));
        }
    }
    Ok(Frame::Array(items))
}

/// ASOF.COUNT min max ts
pub fn count(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let t = parse_time(argv[3])?;
    let store = &ctx.shared.store;
    let Some(bounds) = raw_bounds(argv[1], argv[2])? else {
        store.now().map_err(error)?;
        return Ok(Frame::Integer(0));
    };
    let n = read_range(store, bounds, Order::Ascending, t, usize::MAX)?.len();
    Ok(Frame::Integer(i64::try_from(n).unwrap_or(i64::MAX)))
}

/// The state of a string at `x` from the histories of its two places (ascending).
fn state_at(
    raw: &[(u64, Option<Vec<u8>>)],
    stamped: &[(u64, Option<Vec<u8>>)],
    x: u64,
) -> Option<Vec<u8>> {
    let latest = |h: &[(u64, Option<Vec<u8>>)]| {
        let at = h.partition_point(|(ts, _)| *ts <= x);
        at.checked_sub(1).and_then(|i| h[i].1.clone())
    };
    if let Some(v) = latest(raw) {
        return Some(v);
    }
    let stored = latest(stamped)?;
    let (deadline, value) = decode_string(&stored)?;
    alive_at(deadline, x).then(|| value.to_vec())
}

/// ASOF.HISTORY key [FROM ts] [TO ts] [REV] [LIMIT n]: a flat array of timestamp, value
/// (nil for a delete or an expiry) pairs.
pub fn history(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let key = argv[1];
    let (mut from, mut to, mut order, mut limit) = (None, u64::MAX, Order::Ascending, usize::MAX);
    let mut i = 2;
    while i < argv.len() {
        if is_word(argv[i], "rev") {
            order = Order::Descending;
        } else if is_word(argv[i], "from") || is_word(argv[i], "to") || is_word(argv[i], "limit") {
            let Some(arg) = argv.get(i + 1) else {
                return Err(syntax_error());
            };
            if is_word(argv[i], "limit") {
                limit = match crate::parse::parse_int(arg) {
                    Some(n) if n >= 0 => usize::try_from(n).unwrap_or(usize::MAX),
                    Some(_) => return Err(Frame::err("LIMIT count must be 0 or more")),
                    None => return Err(not_an_integer()),
                };
            } else if is_word(argv[i], "from") {
                from = Some(parse_time(arg)?);
            } else {
                to = parse_time(arg)?;
            }
            i += 1;
        } else {
            return Err(syntax_error());
        }
        i += 1;
    }
    let store = &ctx.shared.store;
    let now = store.now().map_err(error)?;
    // No FROM: from the retention threshold (history before it is discarded); a FROM below
    // it is refused, as by the store.
    let threshold = store.retention().map_err(error)?;
    let from = from.unwrap_or(threshold);
    if from > now {
        return Err(Frame::err(format!(
            "time {from} is in the future (now is {now}): its answer could still change"
        )));
    }
    if from < threshold {
        return Err(error(forest_core::discarded(from, threshold)));
    }
    let to = to.min(now);
    if key.first() == Some(&RESERVED_BYTE) || from > to || limit == 0 {
        return Ok(Frame::Array(Vec::new()));
    }
    // Whole retained histories up to `to`: the state before `from` decides whether a first
    // delete changed anything. Each place's state at the threshold (a version before it)
    // goes first, at the threshold, as a state but not as an event.
    type Versions = Vec<(u64, Option<Vec<u8>>)>;
    let all = |k: &[u8]| -> Result<(Versions, usize), Frame> {
        let mut h = store
            .history(k, threshold, to, Order::Ascending, usize::MAX)
            .map_err(error)?;
        if threshold > 0 && h.first().is_none_or(|(ts, _)| *ts != threshold) {
            let mut out = Vec::new();
            if store.get_as_of(k, threshold, &mut out).map_err(error)? {
                h.insert(0, (threshold, Some(out)));
                return Ok((h, 1));
            }
        }
        Ok((h, 0))
    };
    let (raw, raw_seeded) = all(key)?;
    // Before a move from layout 1, layout 1's place up to the move's start; the move's own
    // versions (a put at layout 2's place, a delete at layout 1's) changed no value.
    let (stamped, stamped_seeded) = match Places::of(store)?.0 {
        None => all(&string_key(key))?,
        Some((began, done)) => {
            let (mut old, seeded) = all(&old_string_key(key))?;
            old.retain(|(ts, _)| *ts < began);
            let (new, _) = all(&string_key(key))?;
            old.extend(new.into_iter().filter(|(ts, _)| *ts >= done));
            (old, seeded)
        }
    };
    let mut times: Vec<u64> = raw[raw_seeded..]
        .iter()
        .chain(&stamped[stamped_seeded..])
        .map(|(ts, _)| *ts)
        .collect();
    for (n, (ts, stored)) in stamped.iter().enumerate() {
        let expiry = stored
            .as_deref()
            .and_then(decode_string)
            .map(|(deadline, _)| deadline.saturating_mul(1000).max(*ts));
        let next = stamped.get(n + 1).map_or(u64::MAX, |(t, _)| *t);
        if let Some(e) = expiry.filter(|&e| e < next && e <= to) {
            times.push(e);
        }
    }
    times.sort_unstable();
    times.dedup();
    let mut events = Vec::new();
    // The state before the first event: at the threshold when no event is there (a delete
    // exactly at the threshold is therefore not listed: what it deleted is discarded).
    let mut before: Option<Vec<u8>> = if threshold == 0 || times.first() == Some(&threshold) {
        None
    } else {
        state_at(&raw, &stamped, threshold)
    };
    for x in times {
        let state = state_at(&raw, &stamped, x);
        // A write is listed even if it wrote the same value; a delete only if it deleted.
        if (state.is_some() || before.is_some()) && x >= from {
            events.push((x, state.clone()));
        }
        before = state;
    }
    if order == Order::Descending {
        events.reverse();
    }
    events.truncate(limit);
    let mut items = Vec::with_capacity(events.len() * 2);
    for (ts, v) in events {
        items.push(Frame::Integer(i64::try_from(ts).unwrap_or(i64::MAX)));
        items.push(v.map_or(Frame::Null, Frame::Bulk));
    }
    Ok(Frame::Array(items))
}

#[cfg(test)]
mod tests {
    use super::*;

    // Goal: both timestamp forms parse to the same microseconds, bad ones are refused.
    // Method: known instants (the epoch, a leap day, offsets, fractions) and malformed text.
    #[test]
    fn timestamps_parse() {
        let ok = |s: &str| parse_time(s.as_bytes()).expect(s);
        assert_eq!(ok("0"), 0);
        assert_eq!(ok("1795855382448433"), 1_795_855_382_448_433);
        assert_eq!(ok("1970-01-01T00:00:00Z"), 0);
        assert_eq!(ok("2024-02-29T12:00:00Z"), 1_709_208_000_000_000);
        assert_eq!(ok("2024-02-29T13:30:00+01:30"), 1_709_208_000_000_000);
        assert_eq!(ok("2024-02-29t12:00:00.25z"), 1_709_208_000_250_000);
        assert_eq!(ok("2024-02-29 12:00:00.1234567Z"), 1_709_208_000_123_456);
        for bad in [
            "",
            "-1",
            "1.5",
            "2023-02-29T00:00:00Z",
            "2024-13-01T00:00:00Z",
            "2024-01-01T00:00:00",
            "2024-01-01T24:00:00Z",
            "1969-12-31T23:59:59Z",
            "2024-01-01T00:00:00.Z",
            "2024-01-01T00:00:00+1:00",
            "99999999999999999999",
        ] {
            let e = parse_time(bad.as_bytes()).expect_err(bad);
            assert!(
                format!("{e:?}").contains("invalid timestamp"),
                "{bad}: {e:?}"
            );
        }
    }
}
