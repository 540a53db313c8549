//! Values with columns (§4.7) through forest-core's [`ColumnIndex`].
//!
//! A row is one value block of kind [`ValueKind::Row`] holding the row encoding of
//! [`forest_core::index::row_encode`]; `get` and `scan` return that encoding. The kind is
//! stored out of band (the value block's kind byte, [`crate::block`]), so a value written
//! through the plain `Index` API is always column 0 of a one-column row, even when its bytes
//! happen to be a valid row encoding, and a row is always read as a row.
//!
//! As in the paper, modifications never act in place: a put builds a new row, copying the
//! columns it does not change from the current value, and installs it with one pointer swap
//! while holding the key's border node lock ([`crate::insert::put_with`]), so two puts never
//! lose each other's columns and a get, which reads one immutable block, sees all of a put or
//! none. This is the paper's design for small values; it copies the whole row on every put.

use std::borrow::Cow;

use forest_core::index::{row_decode, row_encode, ColumnIndex};
use forest_core::{check_key, Error, Result, KEY_BYTES_MAX, VALUE_BYTES_MAX};

use crate::block::{Value, ValueKind};
use crate::insert::{put_with, PutMode};
use crate::Masstree;

/// Bytes of a row's column count and of each column length in the row encoding.
const ROW_WORD_BYTES: usize = 4;

/// The columns of a stored value: a row's columns, or a plain value as column 0.
fn columns_of(value: Value<'_>) -> Vec<&[u8]> {
    match value.kind {
        // Row blocks are only written by `put_columns`, from `row_encode` (module doc).
        ValueKind::Row => row_decode(value.bytes).expect("a row block holds an encoded row"),
        ValueKind::Plain => vec![value.bytes],
    }
}

/// Encodes into `out` the row that results from applying `changes` to `old` (`None`: absent).
fn apply(old: Option<Value<'_>>, changes: &[(usize, &[u8])], out: &mut Vec<u8>) -> Result<()> {
    let width = changes
        .iter()
        .map(|&(i, _)| i.saturating_add(1))
        .max()
        .unwrap_or(0);
    // A column index whose header alone passes the value limit cannot be stored; checked
    // before `resize` so a huge index never allocates.
    let header_bytes = width.saturating_add(1).saturating_mul(ROW_WORD_BYTES);
    if header_bytes > VALUE_BYTES_MAX {
        return Err(Error::ValueTooLong {
            len: header_bytes,
            max: VALUE_BYTES_MAX,
        });
    }
    let mut cols = old.map(columns_of).unwrap_or_default();
    if cols.len() < width {
        cols.resize(width, &[]);
    }
    for &(i, c) in changes {
        cols[i] = c;
    }
    row_encode(&cols, out)
}

impl<const W: usize, const F: usize> ColumnIndex for Masstree<W, F> {
    fn get_columns(&self, key: &[u8], columns: &[usize], out: &mut Vec<Vec<u8>>) -> bool {
        if key.len() > KEY_BYTES_MAX {
            return false;
        }
        out.resize_with(columns.len(), Vec::new);
        crate::get::get_with(self, key, |value| {
            let row = columns_of(value);
            for (dst, &c) in out.iter_mut().zip(columns) {
                dst.clear();
                if let Some(col) = row.get(c) {
                    dst.extend_from_slice(col);
                }
            }
        })
    }

    fn put_columns(&self, key: &[u8], columns: &[(usize, &[u8])]) -> Result<()> {
        check_key(key)?;
        put_with(self, key, PutMode::Upsert, ValueKind::Row, |old| {
            let mut row = Vec::new();
            apply(old, columns, &mut row)?;
            Ok(Cow::Owned(row))
        })
        .map(|_| ())
    }
}
