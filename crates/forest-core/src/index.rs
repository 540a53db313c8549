//! The `Index` trait: the one API every engine implements (DESIGN.md, "The Index API").
//!
//! The trait is object safe so that the CLI, the benchmarks and the server choose an engine at
//! run time (`Arc<dyn Index>`). Keys and values are byte strings ordered lexicographically
//! (as `[u8]`'s `Ord`), so the empty key sorts first and a key sorts before its extensions.
//!
//! Contract shared by every engine (the conformance kit checks each point):
//! - Every single-key operation is linearizable.
//! - A scan is not atomic as a whole; each record it hands out is (Bw-tree §III-C, BzTree
//!   §4.2.6). A key present and unchanged for the whole scan is returned exactly once; keys
//!   come strictly ordered in the requested direction, never twice.
//! - A scan never runs `visit` while holding a latch or an epoch pin: engines copy a leaf's
//!   records, release, hand them out, and re-descend from the last key returned. So `visit`
//!   may call back into the same index. [`Index::scan_pinned`] is the exception a caller
//!   opts into: records in place under the pin, for a visitor that cannot block.
//! - Writes check sizes first ([`crate::check_entry`]); an over-long key or value is an error
//!   and changes nothing.

use std::ops::{Bound, ControlFlow};

use crate::error::Result;
use crate::stats::IndexStats;

/// The direction of a scan.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Order {
    /// Smallest key first.
    Ascending,
    /// Largest key first.
    Descending,
}

/// The callback of [`Index::scan`]: gets each record's key and value, returns
/// `ControlFlow::Break(())` to stop the scan.
pub type Visitor<'a> = dyn FnMut(&[u8], &[u8]) -> ControlFlow<()> + 'a;

/// A concurrent ordered map from byte keys to byte values.
pub trait Index: Send + Sync {
    /// The engine's name as the CLI and benchmarks spell it (`lockbtree`, `bwtree`, ...).
    fn name(&self) -> &'static str;

    /// Looks `key` up. When present, replaces `out`'s contents with the value and returns
    /// true; when absent returns false and leaves `out` unspecified. Reusing `out` across calls
    /// keeps the hot path free of allocation.
    fn get(&self, key: &[u8], out: &mut Vec<u8>) -> bool;

    /// Looks every key of `keys` up, as `keys.len()` calls of [`Index::get`] in that order
    /// would: `visit` gets each key's position and value (None: absent), in order, once
    /// each. Each key's answer is linearizable on its own, and key `i`'s read takes effect
    /// after key `i - 1`'s (a reader of its own earlier answers sees time go forward), so an
    /// engine may overlap the keys' searches but not reorder their reads. `visit` may run
    /// while the engine holds an epoch pin (as [`Index::scan_pinned`]'s visitor): it must not
    /// block or write this index. The default loops [`Index::get`]; masstree overrides it
    /// (its descents go in lock-step with prefetches, issue 15).
    fn get_many(&self, keys: &[&[u8]], visit: &mut dyn FnMut(usize, Option<&[u8]>)) {
        let mut out = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let found = self.get(key, &mut out);
            visit(i, found.then_some(out.as_slice()));
        }
    }

    /// Inserts only if `key` is absent (the papers' unique insert). Returns whether it did.
    fn insert(&self, key: &[u8], value: &[u8]) -> Result<bool>;

    /// Inserts or replaces.
    fn upsert(&self, key: &[u8], value: &[u8]) -> Result<()>;

    /// Replaces only if `key` is present. Returns whether it did.
    fn update(&self, key: &[u8], value: &[u8]) -> Result<bool>;

    /// Removes `key`. Returns whether it was present.
    fn remove(&self, key: &[u8]) -> bool;

    /// Calls `visit` on every record with a key within `(lower, upper)`, in `order`, until
    /// `visit` returns `ControlFlow::Break`. Bounds that cross (lower above upper) give an
    /// empty scan, not an error.
    fn scan(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, order: Order, visit: &mut Visitor<'_>);

    /// As [`Index::scan`] (same records, order and guarantees; `visit` still decides where
    /// the scan stops), with a hint: the caller expects to take about `len_hint` records
    /// (YCSB's scan length, a `LIMIT`). An engine that copies records out before handing
    /// them over may size its copies by it, so that it copies no more than it hands out; the
    /// hint never changes which records are handed out, whether `visit` stops before, at or
    /// past it. The default is [`Index::scan`] (engines and peers that visit in place stop
    /// where told anyway); masstree, bwtree and lockbtree, which copy batches, override it.
    fn scan_hinted(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        len_hint: usize,
        visit: &mut Visitor<'_>,
    ) {
        let _ = len_hint;
        self.scan(lower, upper, order, visit);
    }

    /// As [`Index::scan`] (same records, order and guarantees), but `visit` may run while the
    /// engine holds an epoch pin (never a latch), on records in place instead of copies. So
    /// `visit` must not block, sleep or run long (while it runs, no memory retired by any
    /// epoch-managed structure of the process is freed) and must not write this index. For
    /// visitors that only copy or encode what they get. The default is [`Index::scan`];
    /// masstree overrides it (issue 14 measures both).
    fn scan_pinned(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        order: Order,
        visit: &mut Visitor<'_>,
    ) {
        self.scan(lower, upper, order, visit);
    }

    /// A snapshot of sizes and the engine's event counters. May walk the structure; not meant
    /// for the hot path.
    fn stats(&self) -> IndexStats;

    /// The engine as a [`crate::TemporalIndex`], if it keeps versions (`tsbtree`); None (the
    /// default) for the others. How a store holding a `Box<dyn Index>` reaches the temporal
    /// API.
    fn as_temporal(&self) -> Option<&dyn crate::TemporalIndex> {
        None
    }
}

/// Values with columns (Masstree §4.7): "an array of variable-length strings called
/// columns"; a get can read some columns, and a multi-column put is atomic — a concurrent
/// get sees all of its column changes or none.
///
/// A row is stored as the plain [`Index`] value, so `get` and `scan` see whole rows, in the
/// encoding of [`row_encode`] (all integers little-endian):
///
/// ```text
/// count: u32 | len[0]: u32 | ... | len[count-1]: u32 | column 0 bytes | ... | column count-1 bytes
/// ```
///
/// A value written through the plain API reads as a row of one column, column 0, holding the
/// whole value, whatever its bytes: an implementation keeps whether a value is a row out of
/// band (Masstree: a kind byte in its value block), never guessing from the bytes. Columns past a row's end read as empty;
/// a put to such a column extends the row with empty columns up to it.
pub trait ColumnIndex: Index {
    /// Reads the listed columns of `key`'s row into `out` (one vector per requested column,
    /// in request order; `out` is resized to `columns.len()`, its vectors reused). Returns
    /// false when `key` is absent.
    fn get_columns(&self, key: &[u8], columns: &[usize], out: &mut Vec<Vec<u8>>) -> bool;

    /// Replaces the given columns of `key`'s row in one atomic step, creating the row if
    /// absent; other columns keep their values. When a column is listed twice, the last
    /// wins. An encoded row over [`crate::VALUE_BYTES_MAX`] is an error and changes nothing.
    fn put_columns(&self, key: &[u8], columns: &[(usize, &[u8])]) -> Result<()>;
}

/// Bytes of a row's count and of each column length.
const ROW_WORD_BYTES: usize = 4;

/// The columns of an encoded row, or `None` if `value` is not a well-formed row.
pub fn row_decode(value: &[u8]) -> Option<Vec<&[u8]>> {
    let word = |at: usize| -> Option<usize> {
        let b = value.get(at..at + ROW_WORD_BYTES)?;
        let w = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        usize::try_from(w).ok()
    };
    let count = word(0)?;
    let mut at = count
        .checked_add(1)?
        .checked_mul(ROW_WORD_BYTES)
        .filter(|&h| h <= value.len())?;
    let mut cols = Vec::with_capacity(count);
    for i in 0..count {
        let len = word(ROW_WORD_BYTES * (i + 1))?;
        let end = at.checked_add(len).filter(|&e| e <= value.len())?;
        cols.push(&value[at..end]);
        at = end;
    }
    (at == value.len()).then_some(cols)
}

/// The columns of a stored value: its row, or one column holding all of it (see
/// [`ColumnIndex`]).
pub fn row_columns(value: &[u8]) -> Vec<&[u8]> {
    row_decode(value).unwrap_or_else(|| vec![value])
}

/// Encodes `columns` as a row into `out` (cleared first). Errors when the row would exceed
/// [`crate::VALUE_BYTES_MAX`].
pub fn row_encode(columns: &[&[u8]], out: &mut Vec<u8>) -> Result<()> {
    let header = columns
        .len()
        .saturating_add(1)
        .saturating_mul(ROW_WORD_BYTES);
    let len = columns
        .iter()
        .fold(header, |acc, c| acc.saturating_add(c.len()));
    if len > crate::VALUE_BYTES_MAX {
        return Err(crate::Error::ValueTooLong {
            len,
            max: crate::VALUE_BYTES_MAX,
        });
    }
    out.clear();
    out.reserve(len);
    // Lengths fit in u32: each is at most VALUE_BYTES_MAX (checked above).
    out.extend_from_slice(&(columns.len() as u32).to_le_bytes());
    for c in columns {
        out.extend_from_slice(&(c.len() as u32).to_le_bytes());
    }
    for c in columns {
        out.extend_from_slice(c);
    }
    Ok(())
}

/// The row that results from applying `changes` to the stored value `old` (`None`: absent),
/// encoded into `out`.
pub fn row_apply(old: Option<&[u8]>, changes: &[(usize, &[u8])], out: &mut Vec<u8>) -> Result<()> {
    let mut cols = old.map(row_columns).unwrap_or_default();
    let width = changes
        .iter()
        .map(|&(i, _)| i.saturating_add(1))
        .max()
        .unwrap_or(0);
    // A column index whose header alone passes the value limit cannot be stored.
    if width.saturating_mul(ROW_WORD_BYTES) > crate::VALUE_BYTES_MAX {
        return Err(crate::Error::ValueTooLong {
            len: width.saturating_mul(ROW_WORD_BYTES),
            max: crate::VALUE_BYTES_MAX,
        });
    }
    if cols.len() < width {
        cols.resize(width, &[]);
    }
    for &(i, c) in changes {
        cols[i] = c;
    }
    row_encode(&cols, out)
}

/// Whether `key` lies within the two bounds (helper for engines and the kit).
#[inline]
pub fn in_bounds(key: &[u8], lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> bool {
    let above_lower = match lower {
        Bound::Included(l) => key >= l,
        Bound::Excluded(l) => key > l,
        Bound::Unbounded => true,
    };
    let below_upper = match upper {
        Bound::Included(u) => key <= u,
        Bound::Excluded(u) => key < u,
        Bound::Unbounded => true,
    };
    above_lower && below_upper
}

/// Whether `key` is past `upper` going up (so an ascending scan can stop).
#[inline]
pub fn past_upper(key: &[u8], upper: Bound<&[u8]>) -> bool {
    match upper {
        Bound::Included(u) => key > u,
        Bound::Excluded(u) => key >= u,
        Bound::Unbounded => false,
    }
}

/// Whether `key` is below `lower` going down (so a descending scan can stop).
#[inline]
pub fn below_lower(key: &[u8], lower: Bound<&[u8]>) -> bool {
    match lower {
        Bound::Included(l) => key < l,
        Bound::Excluded(l) => key <= l,
        Bound::Unbounded => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_helpers_agree_with_ranges() {
        let b: &[u8] = b"b";
        let d: &[u8] = b"d";
        assert!(in_bounds(b"b", Bound::Included(b), Bound::Excluded(d)));
        assert!(!in_bounds(b"b", Bound::Excluded(b), Bound::Excluded(d)));
        assert!(!in_bounds(b"d", Bound::Included(b), Bound::Excluded(d)));
        assert!(in_bounds(b"d", Bound::Included(b), Bound::Included(d)));
        assert!(in_bounds(b"", Bound::Unbounded, Bound::Unbounded));
        assert!(past_upper(b"d", Bound::Excluded(d)));
        assert!(!past_upper(b"d", Bound::Included(d)));
        assert!(below_lower(b"b", Bound::Excluded(b)));
        assert!(!below_lower(b"b", Bound::Included(b)));
    }

    #[test]
    fn rows_round_trip_and_plain_values_read_as_one_column() {
        // Goal: row_encode / row_decode / row_apply agree, and non-rows are one column.
        let mut row = Vec::new();
        row_encode(&[b"a", b"", b"ccc"], &mut row).expect("small");
        assert_eq!(row_decode(&row), Some(vec![&b"a"[..], b"", b"ccc"]));
        let mut next = Vec::new();
        row_apply(Some(&row), &[(1, b"bb"), (4, b"e")], &mut next).expect("small");
        assert_eq!(
            row_columns(&next),
            vec![&b"a"[..], b"bb", b"ccc", b"", b"e"]
        );
        assert_eq!(row_columns(b"plain"), vec![&b"plain"[..]]);
        assert_eq!(row_decode(&row[..row.len() - 1]), None);
        assert!(row_apply(None, &[(usize::MAX, b"x")], &mut next).is_err());
    }
}
