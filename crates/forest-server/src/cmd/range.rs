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
use forest_store::ScanSink;

use super::{is_word, syntax_error, Ctx, Reply};
use crate::frame::{encode_bulk, ArrayHeader, Frame};

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
pub(super) const RESERVED_RECORDS_MAX: usize = forest_store::store::SCAN_OPTIMISTIC_ROWS;

/// FOREST.RANGE's arguments after `min max`.
#[derive(Clone, Copy, Debug)]
struct RangeArgs {
    order: Order,
    limit: usize,
    keys_only: bool,
}

impl RangeArgs {
    /// `[REV] [LIMIT count] [KEYSONLY]`, in any order.
    fn parse(argv: &[&[u8]]) -> Result<Self, Frame> {
        let mut args = RangeArgs {
            order: Order::Ascending,
            limit: usize::MAX,
            keys_only: false,
        };
        let mut i = 3;
        while i < argv.len() {
            if is_word(argv[i], "rev") {
                args.order = Order::Descending;
            } else if is_word(argv[i], "keysonly") {
                args.keys_only = true;
            } else if is_word(argv[i], "limit") {
                let Some(count) = argv.get(i + 1) else {
                    return Err(syntax_error());
                };
                args.limit = match crate::parse::parse_int(count) {
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
        Ok(args)
    }

    /// Reply elements per record: a key, or a key and its value.
    fn per_record(&self) -> usize {
        if self.keys_only {
            1
        } else {
            2
        }
    }
}

/// FOREST.RANGE min max [REV] [LIMIT count] [KEYSONLY]: KEYSONLY replies with the keys alone.
/// The reply as a [`Frame`], for EXEC and scripts; a connection's own FOREST.RANGE writes
/// the same bytes straight into its output ([`range_into`]).
pub fn range(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]]) -> Reply {
    let args = RangeArgs::parse(argv)?;
    let Some(bounds) = bounds(argv[1], argv[2])? else {
        return Ok(Frame::Array(vec![]));
    };
    if args.limit == 0 {
        return Ok(Frame::Array(Vec::new()));
    }
    // Each bulk string's bytes come from the connection's pool, where the encoded reply's
    // buffers return (`Buffers::recycle`): once warm, a range allocates no buffer per record.
    // Taken out of `ctx` for the scan (which borrows `ctx`), put back after it.
    let mut frames = Frames {
        items: Vec::with_capacity(args.limit.min(RESERVED_RECORDS_MAX) * args.per_record()),
        buffers: std::mem::take(&mut *ctx.buffers),
    };
    read_live(ctx, bounds, args, &mut frames);
    *ctx.buffers = frames.buffers;
    Ok(Frame::Array(frames.items))
}

/// FOREST.RANGE for a connection's top-level command (`super::Encoder`): the reply's RESP
/// (a flat array of bulk strings, the same in RESP2 and RESP3) is written straight into
/// `out` from the store's scan rows, one copy per record and no [`Frame`] ([`ArrayInto`]).
pub fn range_into(ctx: &mut Ctx<'_, '_>, argv: &[&[u8]], out: &mut Vec<u8>) -> Result<(), Frame> {
    let args = RangeArgs::parse(argv)?;
    let Some(bounds) = bounds(argv[1], argv[2])? else {
        ArrayInto::empty(out);
        return Ok(());
    };
    if args.limit == 0 {
        ArrayInto::empty(out);
        return Ok(());
    }
    let expected = args.limit.min(RESERVED_RECORDS_MAX) * args.per_record();
    let mut array = ArrayInto::begin(out, expected);
    read_live(ctx, bounds, args, &mut array);
    array.finish();
    Ok(())
}

/// A flat array of bulk strings written into a connection's output before its count is
/// known: a header placeholder sized for `expected` elements, then the elements; `finish`
/// fills the placeholder in, or (another count's width: a short page) puts the header in
/// its place, moving the elements once.
pub(super) struct ArrayInto<'o> {
    out: &'o mut Vec<u8>,
    start: usize,
    width: usize,
    items: usize,
}

impl<'o> ArrayInto<'o> {
    /// An empty array, `*0`.
    pub(super) fn empty(out: &mut Vec<u8>) {
        out.extend_from_slice(b"*0\r\n");
    }

    pub(super) fn begin(out: &'o mut Vec<u8>, expected: usize) -> Self {
        let start = out.len();
        let width = ArrayHeader::new(expected).as_bytes().len();
        out.resize(start + width, 0);
        Self {
            out,
            start,
            width,
            items: 0,
        }
    }

    /// Drops the elements written so far.
    pub(super) fn clear(&mut self) {
        self.out.truncate(self.start + self.width);
        self.items = 0;
    }

    /// Where the elements written so far end, for [`Self::rewind`].
    fn mark(&self) -> (usize, usize) {
        (self.out.len(), self.items)
    }

    /// Drops the elements written after `mark`.
    fn rewind(&mut self, (len, items): (usize, usize)) {
        self.out.truncate(len);
        self.items = items;
    }

    /// One element. A string of at most [`SMALL_BYTES`] bytes (a key, a short value, a
    /// member, a list element) is written by fixed-size moves ([`put_small_bulk`]); one
    /// shorter than 100 bytes has its `$len` header from a table, with no division loop:
    /// `encode_bulk`'s general number was ~80 instructions of LRANGE's ~140 per element
    /// (callgrind, issue 19), and the `memcpy` calls for a short key's 16 bytes about 25
    /// each (issue 14).
    #[inline]
    pub(super) fn bulk(&mut self, bytes: &[u8]) {
        let n = bytes.len();
        if n <= SMALL_BYTES {
            let at = self.out.len();
            // A fixed-size extension (vector moves, no call), trimmed to what was written.
            self.out.extend_from_slice(&[0; SMALL_BULK_ROOM]);
            let end = put_small_bulk(&mut self.out[at..], bytes);
            self.out.truncate(at + end);
        } else if n < 100 {
            let (head, head_len) = (BULK_HEADS[n], bulk_head_len(n));
            self.out.reserve(head_len + n + 2);
            self.out.extend_from_slice(&head[..head_len]);
            self.out.extend_from_slice(bytes);
            self.out.extend_from_slice(b"\r\n");
        } else {
            encode_bulk(self.out, bytes);
        }
        self.items += 1;
    }

    /// Two elements, a key and its value: as two [`Self::bulk`]s, with one extension of the
    /// output when both are small (FOREST.RANGE's pairs).
    #[inline]
    pub(super) fn pair(&mut self, key: &[u8], value: &[u8]) {
        if key.len() <= SMALL_BYTES && value.len() <= SMALL_BYTES {
            let at = self.out.len();
            self.out.extend_from_slice(&[0; 2 * SMALL_BULK_ROOM]);
            let buf = &mut self.out[at..];
            let mid = put_small_bulk(buf, key);
            let end = mid + put_small_bulk(&mut buf[mid..], value);
            self.out.truncate(at + end);
            self.items += 2;
        } else {
            self.bulk(key);
            self.bulk(value);
        }
    }

    /// One element of any kind, which `write` encodes into the output (a score, a pair).
    pub(super) fn element(&mut self, write: impl FnOnce(&mut Vec<u8>)) {
        write(self.out);
        self.items += 1;
    }

    /// Writes the header.
    pub(super) fn finish(self) {
        let header = ArrayHeader::new(self.items);
        let header = header.as_bytes();
        let placeholder = self.start..self.start + self.width;
        if header.len() == self.width {
            self.out[placeholder].copy_from_slice(header);
        } else {
            self.out.splice(placeholder, header.iter().copied());
        }
    }
}

/// The longest string [`ArrayInto::bulk`] writes by fixed-size moves.
const SMALL_BYTES: usize = 32;

/// Room [`put_small_bulk`] writes into: header (`$dd` CRLF), up to [`SMALL_BYTES`] and
/// CRLF, rounded up, since whole words go past the end.
const SMALL_BULK_ROOM: usize = 48;

const _: () = assert!(8 + SMALL_BYTES + 2 <= SMALL_BULK_ROOM && SMALL_BYTES < 100);

/// `$n` CRLF for n < 100, padded to 8 bytes, so a header is one word's move.
const BULK_HEADS: [[u8; 8]; 100] = {
    let mut heads = [[0u8; 8]; 100];
    let mut n = 0;
    while n < 100 {
        let h = &mut heads[n];
        h[0] = b'$';
        let mut i = 1;
        if n >= 10 {
            h[i] = b'0' + (n / 10) as u8;
            i += 1;
        }
        h[i] = b'0' + (n % 10) as u8;
        h[i + 1] = b'\r';
        h[i + 2] = b'\n';
        n += 1;
    }
    heads
};

/// The length of `BULK_HEADS[n]`'s header.
#[inline(always)]
fn bulk_head_len(n: usize) -> usize {
    if n >= 10 {
        5
    } else {
        4
    }
}

/// Writes `bytes` (at most [`SMALL_BYTES`]) as a RESP bulk string at the start of `buf`
/// (at least [`SMALL_BULK_ROOM`] long; bytes past the string's end may be overwritten);
/// returns its length. Fixed-size moves only: two overlapping ones for the bytes, as a
/// `memcpy` does for short lengths, without its call.
#[inline(always)]
fn put_small_bulk(buf: &mut [u8], bytes: &[u8]) -> usize {
    let n = bytes.len();
    let buf = &mut buf[..SMALL_BULK_ROOM];
    buf[..8].copy_from_slice(&BULK_HEADS[n]);
    let at = bulk_head_len(n);
    let to = &mut buf[at..at + SMALL_BYTES];
    match n {
        0 => {}
        1..=3 => {
            to[0] = bytes[0];
            to[n / 2] = bytes[n / 2];
            to[n - 1] = bytes[n - 1];
        }
        4..=7 => {
            to[..4].copy_from_slice(&bytes[..4]);
            to[n - 4..n].copy_from_slice(&bytes[n - 4..]);
        }
        8..=16 => {
            to[..8].copy_from_slice(&bytes[..8]);
            to[n - 8..n].copy_from_slice(&bytes[n - 8..]);
        }
        _ => {
            to[..16].copy_from_slice(&bytes[..16]);
            to[n - 16..n].copy_from_slice(&bytes[n - 16..]);
        }
    }
    buf[at + n..at + n + 2].copy_from_slice(b"\r\n");
    at + n + 2
}

/// Where a range of sorted-set members goes (a reply being encoded, or a `Vec`), with what
/// comes with each (its score); `clear` drops what was written, for a read of the range that
/// starts again (`Ctx::scan_in_place_up_to`).
pub(super) trait Members<T> {
    fn member(&mut self, member: &[u8], with: T);
    fn clear(&mut self);
}

impl<T> Members<T> for Vec<(Vec<u8>, T)> {
    fn member(&mut self, member: &[u8], with: T) {
        self.push((member.to_vec(), with));
    }

    fn clear(&mut self) {
        Vec::clear(self);
    }
}

/// Where FOREST.RANGE's records go.
trait Records {
    /// A fresh read of the range begins: drop what was emitted.
    fn restart(&mut self);
    /// One live record; the value None with KEYSONLY.
    fn emit(&mut self, key: &[u8], value: Option<&[u8]>);
    /// Where the records emitted so far end.
    type Mark: Copy;
    fn mark(&self) -> Self::Mark;
    /// Drops the records emitted after `mark` (the store reads that part again).
    fn rewind(&mut self, mark: Self::Mark);
}

/// The reply as frames, bulk strings in pooled buffers.
struct Frames {
    items: Vec<Frame>,
    buffers: super::Buffers,
}

impl Records for Frames {
    type Mark = usize;

    fn restart(&mut self) {
        for item in self.items.drain(..) {
            self.buffers.recycle(item);
        }
    }

    fn emit(&mut self, key: &[u8], value: Option<&[u8]>) {
        self.items.push(Frame::Bulk(self.buffers.copy_of(key)));
        if let Some(value) = value {
            self.items.push(Frame::Bulk(self.buffers.copy_of(value)));
        }
    }

    fn mark(&self) -> usize {
        self.items.len()
    }

    fn rewind(&mut self, mark: usize) {
        for item in self.items.drain(mark..) {
            self.buffers.recycle(item);
        }
    }
}

impl Records for ArrayInto<'_> {
    type Mark = (usize, usize);

    fn restart(&mut self) {
        self.clear();
    }

    #[inline]
    fn emit(&mut self, key: &[u8], value: Option<&[u8]>) {
        match value {
            Some(value) => self.pair(key, value),
            None => self.bulk(key),
        }
    }

    fn mark(&self) -> Self::Mark {
        ArrayInto::mark(self)
    }

    fn rewind(&mut self, mark: Self::Mark) {
        ArrayInto::rewind(self, mark)
    }
}

/// Reads FOREST.RANGE's live records into `records`. Expired keys are skipped. A deletion
/// of an expired key between reading a row and checking its deadline could show a deleted
/// key: if one happened (the generation of deletions moved), the range is read again, and at
/// last with each row checked by a point read (`expiry`'s invariants).
fn read_live(
    ctx: &Ctx<'_, '_>,
    bounds: ScanBounds<'_>,
    args: RangeArgs,
    records: &mut impl Records,
) {
    let expires = &ctx.shared.expires;
    for attempt in 0..=super::expire::SCAN_RETRIES {
        let generation = expires.generation();
        let validate = attempt == super::expire::SCAN_RETRIES;
        records.restart();
        read_range(ctx, bounds, args, validate, records);
        if validate || expires.generation() == generation {
            break;
        }
    }
}

/// One read of FOREST.RANGE's rows into `records`. The limit goes to the store: a short page
/// of a long range reads optimistically, without holding batches off (scan_gate), and is
/// encoded from the records in place (`Ctx::scan_in_place_up_to`). Expired keys are
/// skipped; if some were, the scan goes on after the last row read until `limit` live keys
/// are found or the range ends. With `validate`, each row is checked again by a point read
/// (so not in place: the store's in-place sink must not read the store).
fn read_range(
    ctx: &Ctx<'_, '_>,
    (lower, upper): ScanBounds<'_>,
    RangeArgs {
        order,
        limit,
        keys_only,
    }: RangeArgs,
    validate: bool,
    records: &mut impl Records,
) {
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
        let mut sink = LiveRows {
            ctx,
            mark: records.mark(),
            records: &mut *records,
            keys_only,
            validate,
            scratch: &mut scratch,
            want,
            read: 0,
            hidden: false,
            found_before: found,
            found,
            last_read: Vec::new(),
        };
        if validate {
            // Within EXEC the scan merges the transaction's own writes (`Ctx::scan_up_to`).
            let visit = &mut |k: &[u8], v: &[u8]| sink.record(k, v);
            if keys_only {
                // Values stay out of the store's scan buffer as well as out of the reply.
                ctx.scan_keys_up_to(lo, hi, order, want, visit);
            } else {
                ctx.scan_up_to(lo, hi, order, want, visit);
            }
        } else {
            ctx.scan_in_place_up_to(lo, hi, order, want, keys_only, &mut sink);
        }
        let LiveRows {
            read,
            hidden,
            last_read,
            found: now_found,
            ..
        } = sink;
        found = now_found;
        if read < want || found >= limit || !hidden {
            break;
        }
        resume = Some(last_read);
    }
}

/// One store read of [`read_range`]: the live rows to `records`, counting what it read.
struct LiveRows<'a, 'c, 'x, R: Records> {
    ctx: &'a Ctx<'c, 'x>,
    records: &'a mut R,
    /// Where this read's records start in `records`.
    mark: R::Mark,
    keys_only: bool,
    validate: bool,
    scratch: &'a mut Vec<u8>,
    /// The rows asked of the store.
    want: usize,
    read: usize,
    /// Whether a row read was expired.
    hidden: bool,
    found_before: usize,
    found: usize,
    /// The last row's key once all `want` were read and some were hidden: where the next
    /// read goes on.
    last_read: Vec<u8>,
}

impl<R: Records> ScanSink for LiveRows<'_, '_, '_, R> {
    fn record(&mut self, key: &[u8], value: &[u8]) -> ControlFlow<()> {
        self.read += 1;
        let value = (!self.keys_only).then_some(value);
        let live = !self.ctx.hides(key)
            && (!self.validate
                || super::expire::still_live(self.ctx, key, "string", value, self.scratch));
        self.hidden |= !live;
        if self.read == self.want && self.hidden {
            self.last_read = key.to_vec();
        }
        if live {
            self.found += 1;
            self.records.emit(key, value);
        }
        ControlFlow::Continue(())
    }

    fn restart(&mut self) {
        self.records.rewind(self.mark);
        self.read = 0;
        self.hidden = false;
        self.found = self.found_before;
        self.last_read.clear();
    }
}

impl Ctx<'_, '_> {
    /// [`Self::scan_up_to`] (with `keys_only`, [`Self::scan_keys_up_to`]) into `sink`: where
    /// the store alone answers (no decided writes of a unit to merge; for string keys, no
    /// string with a deadline anywhere), in place under the store's pin
    /// ([`forest_store::Store::scan_in_place_up_to`]: the sink may be restarted, and must not
    /// read or write the store); otherwise through the ordinary scan, which never restarts
    /// it.
    pub(super) fn scan_in_place_up_to(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        limit: usize,
        keys_only: bool,
        sink: &mut dyn ScanSink,
    ) {
        let store = &self.shared.store;
        if self.unit.as_ref().is_none_or(|u| u.overlay.is_empty()) {
            if !super::strings_scan::in_strings(upper) {
                return store.scan_in_place_up_to(lower, upper, order, limit, keys_only, sink);
            }
            if !self.unit_has_deadlines()
                && self.shared.expires.scan_untimed(|| {
                    store.scan_in_place_up_to(lower, upper, order, limit, keys_only, sink)
                })
            {
                return;
            }
        }
        let visit = &mut |k: &[u8], v: &[u8]| sink.record(k, v);
        if keys_only {
            self.scan_keys_up_to(lower, upper, order, limit, visit);
        } else {
            self.scan_up_to(lower, upper, order, limit, visit);
        }
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
                    || super::expire::still_live(ctx, key, "string", Some(value), &mut scratch));
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
pub(super) mod tests {
    use std::collections::BTreeMap;
    use std::ops::Bound;

    use proptest::prelude::*;

    use super::super::testing::*;
    use crate::connection::{self, Conn, Step};
    use crate::frame::{Frame, Protocol};

    fn flat(pairs: &[(&str, &str)]) -> Frame {
        Frame::Array(pairs.iter().flat_map(|(k, v)| [bulk(k), bulk(v)]).collect())
    }

    /// An array writer with no header placeholder: elements appended to `out`.
    fn headless(out: &mut Vec<u8>) -> super::ArrayInto<'_> {
        super::ArrayInto {
            start: 0,
            width: 0,
            items: 0,
            out,
        }
    }

    // Goal: `ArrayInto::bulk`'s short headers (no division loop under 100 bytes) and its
    // fixed-size moves (up to 32 bytes) write the bytes `encode_bulk` writes, at every length
    // around the one and two digit edges and the move sizes and past them, and count one
    // element each. Method: lengths 0..=130 and 1 000, both ways, bytes all distinct (an
    // overlapping move that put a byte in the wrong place shows).
    #[test]
    fn short_bulk_headers_equal_encode_bulk() {
        for n in (0..=130).chain([1000]) {
            let bytes: Vec<u8> = (0..n).map(|i| (i * 7 + 1) as u8).collect();
            let mut want = b"prefix".to_vec();
            crate::frame::encode_bulk(&mut want, &bytes);
            let mut got = b"prefix".to_vec();
            let mut array = headless(&mut got);
            array.bulk(&bytes);
            assert_eq!(array.items, 1);
            assert_eq!(got, want, "{n} bytes");
        }
    }

    // Goal: `ArrayInto::pair` writes what two `encode_bulk`s write, for every pair of
    // lengths around the small-string bound (32) and the move sizes, appended to earlier
    // output, and counts two elements. Method: key and value lengths 0..=40 and 100, both
    // ways, distinct bytes.
    #[test]
    fn pairs_equal_two_encoded_bulks() {
        let lens = || (0..=40).chain([100]);
        for k in lens() {
            for v in lens() {
                let key: Vec<u8> = (0..k).map(|i| (i * 3 + 1) as u8).collect();
                let value: Vec<u8> = (0..v).map(|i| (i * 5 + 128) as u8).collect();
                let mut want = b"prefix".to_vec();
                crate::frame::encode_bulk(&mut want, &key);
                crate::frame::encode_bulk(&mut want, &value);
                let mut got = b"prefix".to_vec();
                let mut array = headless(&mut got);
                array.pair(&key, &value);
                assert_eq!(array.items, 2);
                assert_eq!(got, want, "key {k} bytes, value {v} bytes");
            }
        }
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
            now: Default::default(),
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

    /// A connection over the harness's store that speaks `protocol`: its replies take the
    /// path a client's do (`cmd::execute_into`, FOREST.RANGE written straight into the
    /// output).
    pub(in crate::cmd) fn conn(h: &Harness, protocol: Protocol) -> Conn {
        let mut conn = Conn::new(h.shared.new_client("a".into(), "b".into(), None));
        conn.client.protocol = protocol;
        conn
    }

    /// The bytes a pipeline of `commands` gets through `conn`, in one batch.
    pub(in crate::cmd) fn pipeline(
        h: &Harness,
        conn: &mut Conn,
        commands: &[Vec<&[u8]>],
    ) -> Vec<u8> {
        for argv in commands {
            Frame::Array(argv.iter().map(|a| Frame::Bulk(a.to_vec())).collect())
                .encode(&mut conn.input);
        }
        assert_eq!(conn.process(&h.shared), Step::Continue);
        assert!(!conn.has_more());
        let out = conn.output.clone();
        conn.sent();
        out
    }

    /// The bytes of `argv`'s reply through `conn` (the direct path), and the bytes of the
    /// handler's [`Frame`] (EXEC's and scripts' path) encoded in the same protocol.
    pub(in crate::cmd) fn both_ways(
        h: &mut Harness,
        conn: &mut Conn,
        argv: &[&[u8]],
    ) -> (Vec<u8>, Vec<u8>) {
        let direct = pipeline(h, conn, &[argv.to_vec()]);
        let mut framed = Vec::new();
        h.run_bytes(argv)
            .encode_to(conn.client.protocol, &mut framed);
        (direct, framed)
    }

    pub(in crate::cmd) const PROTOCOLS: [Protocol; 2] = [Protocol::Resp2, Protocol::Resp3];

    // Goal: the direct path's bytes equal the frame path's in the edge cases the brief
    // names: LIMIT 0, empty and inverted ranges, empty values, REV, KEYSONLY, pages short
    // and full (the header placeholder filled in place or moved), errors. Method: each
    // query both ways, in RESP2 and RESP3, against the bytes written out by hand for some.
    #[test]
    fn direct_replies_equal_framed_ones() {
        let mut h = Harness::new();
        h.run_bytes(&[b"MSET", b"a", b"", b"b", b"22", b"c", b"", b"d", b"4444"]);
        let queries: &[&[&str]] = &[
            &["FOREST.RANGE", "-", "+"],
            &["FOREST.RANGE", "-", "+", "LIMIT", "0"],
            &["FOREST.RANGE", "-", "+", "LIMIT", "0", "KEYSONLY"],
            &["FOREST.RANGE", "[x", "+"],
            &["FOREST.RANGE", "[d", "[b"],
            &["FOREST.RANGE", "+", "-"],
            &["FOREST.RANGE", "(c", "(c"],
            &["FOREST.RANGE", "-", "+", "REV"],
            &["FOREST.RANGE", "-", "+", "REV", "LIMIT", "3", "KEYSONLY"],
            &["FOREST.RANGE", "(a", "[c", "LIMIT", "1"],
            &["FOREST.RANGE", "-", "+", "LIMIT", "5"],
            &["FOREST.RANGE", "-", "+", "LIMIT", "50"],
            &["FOREST.RANGE", "-", "+", "LIMIT", "4", "KEYSONLY"],
            &[
                "FOREST.RANGE",
                "-",
                "+",
                "KEYSONLY",
                "LIMIT",
                "9223372036854775807",
            ],
            &["FOREST.RANGE", "a", "+"],
            &["FOREST.RANGE", "-", "+", "LIMIT", "-1"],
            &["FOREST.RANGE", "-", "+", "LIMIT", "x"],
            &["FOREST.RANGE", "-", "+", "BOGUS"],
            &["FOREST.RANGE", "-"],
        ];
        for protocol in PROTOCOLS {
            let mut c = conn(&h, protocol);
            for query in queries {
                let argv: Vec<&[u8]> = query.iter().map(|a| a.as_bytes()).collect();
                let (direct, framed) = both_ways(&mut h, &mut c, &argv);
                assert_eq!(
                    String::from_utf8_lossy(&direct),
                    String::from_utf8_lossy(&framed),
                    "{query:?} in {protocol:?}"
                );
            }
            let argv: [&[u8]; 3] = [b"FOREST.RANGE", b"-", b"+"];
            let want = b"*8\r\n$1\r\na\r\n$0\r\n\r\n$1\r\nb\r\n$2\r\n22\r\n\
                         $1\r\nc\r\n$0\r\n\r\n$1\r\nd\r\n$4\r\n4444\r\n";
            assert_eq!(pipeline(&h, &mut c, &[argv.to_vec()]), want);
            let argv: [&[u8]; 5] = [b"FOREST.RANGE", b"-", b"+", b"LIMIT", b"0"];
            assert_eq!(pipeline(&h, &mut c, &[argv.to_vec()]), b"*0\r\n");
        }
    }

    // Goal: values of 512 KiB, and a reply several times larger than the output buffer a
    // connection keeps, come out whole and equal to the frame path; the connection gives
    // the large buffer back afterwards. Method: three 512 KiB values and one empty one; the
    // whole range, REV, a LIMIT, KEYSONLY, in both protocols.
    #[test]
    fn large_values_and_a_reply_larger_than_the_output_buffer() {
        let mut h = Harness::new();
        let big: Vec<Vec<u8>> = (0..3u8).map(|i| vec![b'a' + i; 512 * 1024]).collect();
        for (i, value) in big.iter().enumerate() {
            let key = format!("k{i}");
            assert_eq!(h.run_bytes(&[b"SET", key.as_bytes(), value]), Frame::ok());
        }
        h.run_bytes(&[b"SET", b"k3", b""]);
        for protocol in PROTOCOLS {
            let mut c = conn(&h, protocol);
            for query in [
                &["FOREST.RANGE", "-", "+"][..],
                &["FOREST.RANGE", "-", "+", "REV"],
                &["FOREST.RANGE", "(k0", "+", "LIMIT", "2"],
                &["FOREST.RANGE", "-", "+", "KEYSONLY"],
            ] {
                let argv: Vec<&[u8]> = query.iter().map(|a| a.as_bytes()).collect();
                let (direct, framed) = both_ways(&mut h, &mut c, &argv);
                assert!(direct == framed, "{query:?} in {protocol:?}");
                assert!(c.output.capacity() <= connection::BUFFER_BYTES_KEPT);
            }
            let argv: [&[u8]; 3] = [b"FOREST.RANGE", b"-", b"+"];
            let out = pipeline(&h, &mut c, &[argv.to_vec()]);
            assert!(out.len() > 3 * 512 * 1024 + 40);
            assert!(out.len() > 4 * connection::BUFFER_BYTES_KEPT);
            let (frame, used) = crate::frame::parse(&out, &Default::default())
                .expect("valid")
                .expect("whole");
            assert_eq!(used, out.len());
            let mut want = Vec::new();
            for (i, value) in big.iter().enumerate() {
                want.push(Frame::Bulk(format!("k{i}").into_bytes()));
                want.push(Frame::Bulk(value.clone()));
            }
            want.extend([bulk("k3"), bulk("")]);
            assert_eq!(frame, Frame::Array(want));
        }
    }

    // Goal: an expired key in the range is hidden on the direct path too, also where it
    // ends a page (the scan goes on after it), and the count in the header is the number of
    // live elements. Method: five keys, two due (the clock moved past their deadlines; no
    // active expiry runs in the harness); pages over them both ways, in both protocols.
    #[test]
    fn expired_keys_are_hidden_on_the_direct_path() {
        let mut h = Harness::new();
        h.shared.expires.freeze_clock();
        h.run(&["MSET", "a", "1", "b", "2", "c", "3", "d", "4", "e", "5"]);
        assert_eq!(h.run(&["PEXPIRE", "b", "10"]), Frame::Integer(1));
        assert_eq!(h.run(&["PEXPIRE", "d", "10"]), Frame::Integer(1));
        assert_eq!(h.run(&["PEXPIRE", "e", "100000"]), Frame::Integer(1));
        h.shared.expires.advance_clock_ms(20);
        for protocol in PROTOCOLS {
            let mut c = conn(&h, protocol);
            for query in [
                &["FOREST.RANGE", "-", "+"][..],
                &["FOREST.RANGE", "-", "+", "LIMIT", "2"],
                &["FOREST.RANGE", "-", "+", "LIMIT", "2", "REV", "KEYSONLY"],
                &["FOREST.RANGE", "[b", "[b"],
                &["FOREST.RANGE", "(a", "+", "LIMIT", "1"],
            ] {
                let argv: Vec<&[u8]> = query.iter().map(|a| a.as_bytes()).collect();
                let (direct, framed) = both_ways(&mut h, &mut c, &argv);
                assert_eq!(direct, framed, "{query:?} in {protocol:?}");
            }
            let argv: [&[u8]; 5] = [b"FOREST.RANGE", b"-", b"+", b"LIMIT", b"2"];
            assert_eq!(
                pipeline(&h, &mut c, &[argv.to_vec()]),
                b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nc\r\n$1\r\n3\r\n"
            );
            let argv: [&[u8]; 4] = [b"FOREST.RANGE", b"-", b"+", b"REV"];
            assert_eq!(
                pipeline(&h, &mut c, &[argv.to_vec()]),
                b"*6\r\n$1\r\ne\r\n$1\r\n5\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\na\r\n$1\r\n1\r\n"
            );
        }
    }

    // Goal: in a pipeline, a direct reply sits between the encoded replies of the commands
    // around it, in order, and sees the writes before it and not those after it; inside
    // MULTI the command is queued, and EXEC's reply nests the frame path's array.
    // Method: one batch of SET, FOREST.RANGE, DEL, FOREST.RANGE, GET, MULTI, FOREST.RANGE,
    // EXEC, against the replies run one at a time through the frame path.
    #[test]
    fn direct_replies_keep_their_place_in_a_pipeline() {
        for protocol in PROTOCOLS {
            let mut h = Harness::new();
            let mut framed_h = Harness::new();
            framed_h.client.protocol = protocol;
            let mut c = conn(&h, protocol);
            let commands: Vec<Vec<&[u8]>> = vec![
                vec![b"SET", b"a", b"1"],
                vec![b"SET", b"b", b"2"],
                vec![b"FOREST.RANGE", b"-", b"+"],
                vec![b"DEL", b"a"],
                vec![b"FOREST.RANGE", b"-", b"+", b"KEYSONLY"],
                vec![b"GET", b"b"],
                vec![b"MULTI"],
                vec![b"FOREST.RANGE", b"-", b"+", b"REV"],
                vec![b"SET", b"c", b"3"],
                vec![b"FOREST.RANGE", b"-", b"+", b"REV"],
                vec![b"EXEC"],
                vec![b"FOREST.RANGE", b"-", b"+", b"LIMIT", b"-2"],
            ];
            let direct = pipeline(&h, &mut c, &commands);
            let mut framed = Vec::new();
            for argv in &commands {
                framed_h.run_bytes(argv).encode_to(protocol, &mut framed);
            }
            assert_eq!(
                String::from_utf8_lossy(&direct),
                String::from_utf8_lossy(&framed),
                "{protocol:?}"
            );
            assert_eq!(
                h.run(&["FOREST.RANGE", "-", "+", "KEYSONLY"]),
                bulks(&["b", "c"])
            );
        }
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

        // Goal: FOREST.RANGE's bytes written straight into the output equal its frame
        // encoded, for any range, order, limit (or none) and KEYSONLY, values of any length
        // (empty ones included), in RESP2 and RESP3. Method: random keys and values, random
        // lex bounds and options, the reply both ways.
        #[test]
        fn direct_bytes_match_the_frame_path(
            records in proptest::collection::btree_map("[a-e]{0,4}", proptest::collection::vec(any::<u8>(), 0..300), 0..40),
            lo in (0u8..4, "[a-e]{0,3}"),
            hi in (0u8..4, "[a-e]{0,3}"),
            rev in any::<bool>(),
            limit in proptest::option::of(0usize..300),
            keys_only in any::<bool>(),
        ) {
            let mut h = Harness::new();
            for (k, v) in &records {
                if !k.is_empty() {
                    prop_assert_eq!(h.run_bytes(&[b"SET", k.as_bytes(), v]), Frame::ok());
                }
            }
            let (min, max) = (bound_arg(lo.0, &lo.1), bound_arg(hi.0, &hi.1));
            let limit_text = limit.map(|n| n.to_string());
            let mut argv: Vec<&[u8]> = vec![b"FOREST.RANGE", min.as_bytes(), max.as_bytes()];
            if let Some(n) = &limit_text {
                argv.extend([&b"LIMIT"[..], n.as_bytes()]);
            }
            if rev {
                argv.push(b"REV");
            }
            if keys_only {
                argv.push(b"KEYSONLY");
            }
            for protocol in PROTOCOLS {
                let mut c = conn(&h, protocol);
                let (direct, framed) = both_ways(&mut h, &mut c, &argv);
                prop_assert_eq!(direct, framed);
            }
        }
    }
}
