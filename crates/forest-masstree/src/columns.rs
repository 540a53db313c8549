//! Values with columns (§4.7) through forest-core's [`ColumnIndex`].
//!
//! A row is one value block in the row encoding of [`forest_core::index::row_encode`]. As in
//! the paper, modifications never act in place: a put builds a new row, copying the columns it
//! does not change from the current one, and installs it with one pointer swap while holding
//! the key's border node lock ([`crate::insert::put_with`]), so two puts never lose each
//! other's columns and a get, which reads one immutable block, sees all of a put or none.
//! This is the paper's design for small values; it copies the whole row on every put.

use std::borrow::Cow;

use forest_core::index::{row_apply, row_columns, ColumnIndex};
use forest_core::{check_key, Result, KEY_BYTES_MAX};

use crate::insert::{put_with, PutMode};
use crate::Masstree;

impl ColumnIndex for Masstree {
    fn get_columns(&self, key: &[u8], columns: &[usize], out: &mut Vec<Vec<u8>>) -> bool {
        if key.len() > KEY_BYTES_MAX {
            return false;
        }
        out.resize_with(columns.len(), Vec::new);
        crate::get::get_with(self, key, |value| {
            let row = row_columns(value);
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
        put_with(self, key, PutMode::Upsert, |old| {
            let mut row = Vec::new();
            row_apply(old, columns, &mut row)?;
            Ok(Cow::Owned(row))
        })
        .map(|_| ())
    }
}
